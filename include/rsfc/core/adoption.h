// Adopting a flow whose handshake rsfcd did not see (FlowState::kMidstream: a flow older
// than the daemon, after a restart, an upgrade, a crash or an eviction) from what the
// kernel's connection tracking recorded of that handshake. Conntrack saw every SYN and
// SYN-ACK and keeps the window scale each side announced; the shell asks it (ctnetlink, see
// rsfc/io/conntrack.h) and hands the answer to Engine::adopt() as plain facts. Pure: no I/O.
#pragma once

#include <cstdint>

#include "rsfc/core/types.h"

namespace rsfc {

// One direction of a conntrack entry: source and destination as packets of that direction
// carry them.
struct ConnTuple {
  IpAddr src, dst;
  uint16_t sport = 0, dport = 0;
};

// What conntrack knows about a TCP connection's window scaling (CTA_PROTOINFO_TCP). The
// original direction is the connection's initiator's (the sender of the first SYN); the
// reply direction its answerer's. A direction's scale counts only when its flags carry
// IP_CT_TCP_FLAG_WINDOW_SCALE: conntrack sets it from that side's SYN or SYN-ACK option, and
// never for a connection it picked up mid-stream itself (scales 0, flags without it).
struct ConntrackTcp {
  ConnTuple original, reply;
  uint8_t original_scale = 0, reply_scale = 0;  // CTA_PROTOINFO_TCP_WSCALE_*
  bool original_scale_seen = false, reply_scale_seen = false;
};

// What Engine::adopt() made of an answer.
enum class AdoptResult : uint8_t {
  kAdopted,        // the flow now has its scales and is regulated like a handshake-seen one
  kNoScale,        // conntrack lacks a direction's scale: the flow stays unregulated
  kNotSubscriber,  // neither direction runs from a subscriber to a peer: nothing done
  kNotNeeded,      // the flow saw a handshake of its own (or was adopted before): unchanged
  kNoRoom,         // absent, and the table is full or the subscriber at its cap: not created
  kOff,            // both knobs off (nothing tracked) or adoption turned off: nothing done
};
const char* to_string(AdoptResult r);

}  // namespace rsfc
