// Engine::adopt(): a flow whose handshake rsfcd did not see gets the window scales conntrack
// recorded of it (rsfc/core/adoption.h, docs/DESIGN.md §5a).
#include "rsfc/core/adoption.h"

#include "rsfc/core/engine.h"
#include "rsfc/core/flow_table.h"
#include "rsfc/core/subscriber_table.h"
#include "rsfc/core/window.h"

namespace rsfc {

const char* to_string(AdoptResult r) {
  switch (r) {
    case AdoptResult::kAdopted:
      return "adopted";
    case AdoptResult::kNoScale:
      return "no_scale";
    case AdoptResult::kNotSubscriber:
      return "not_subscriber";
    case AdoptResult::kNotNeeded:
      return "not_needed";
    case AdoptResult::kNoRoom:
      return "no_room";
    case AdoptResult::kOff:
      return "off";
  }
  return "?";
}

namespace {

bool in_any(const std::vector<Prefix>& nets, const IpAddr& a) {
  for (const Prefix& p : nets) {
    if (p.contains(a)) return true;
  }
  return false;
}

// A tuple that runs from a subscriber to a peer (exactly one end a subscriber's, as
// classify() wants of a packet): the flow's key as the engine builds it from packets.
bool subscriber_to_peer(const std::vector<Prefix>& nets, const ConnTuple& t, FlowKey& key) {
  if (t.src.family != t.dst.family || (t.src.family != 4 && t.src.family != 6)) return false;
  if (!in_any(nets, t.src) || in_any(nets, t.dst)) return false;
  key.family = t.src.family;
  key.sub_addr = t.src.bytes;
  key.peer_addr = t.dst.bytes;
  key.sub_port = t.sport;
  key.peer_port = t.dport;
  return true;
}

}  // namespace

// The subscriber is the initiator when the original direction runs from it; otherwise the
// reply direction does (the peer initiated). The key comes from the direction that starts at
// the subscriber: those are the addresses the gateway's FORWARD path sees on both directions
// of the flow even when the gateway itself NATs (SNAT of a subscriber-initiated flow rewrites
// the reply tuple only, DNAT of a peer-initiated one the original tuple only).
AdoptResult Engine::adopt(const ConntrackTcp& ct, Nanos now) {
  const bool tracked =
      params_.uplink.policy != Policy::kOff || params_.downlink.policy != Policy::kOff;
  if (!tracked || !params_.adopt_from_conntrack) return AdoptResult::kOff;
  FlowKey key;
  bool sub_initiated = true;
  if (!subscriber_to_peer(params_.subscriber_networks, ct.original, key)) {
    sub_initiated = false;
    if (!subscriber_to_peer(params_.subscriber_networks, ct.reply, key))
      return AdoptResult::kNotSubscriber;
  }
  const uint32_t h = flows_->hash(key);
  uint32_t idx = flows_->find(key, h);
  if (idx != kNoFlow) {
    const Flow& f = flows_->at(idx);
    // Its own handshake (or a SYN since: a new connection on the same ports) wins.
    if (f.state != FlowState::kMidstream || f.scale_known) return AdoptResult::kNotNeeded;
  }
  // Conntrack zeroes both scales unless both SYNs carried the option, and a connection it
  // picked up mid-stream has neither flag: without both the scales are not known.
  if (!ct.original_scale_seen || !ct.reply_scale_seen) return AdoptResult::kNoScale;
  if (idx == kNoFlow) {
    // Start-up adoption never pushes out a flow the engine already tracks: not when the
    // table is full, nor one of the subscriber's own at its cap (add_flow would give one up).
    if (flows_->size() == flows_->capacity()) return AdoptResult::kNoRoom;
    IpAddr sub_addr;
    sub_addr.family = key.family;
    sub_addr.bytes = key.sub_addr;
    const uint32_t sub = subscribers_->add_flow(sub_addr, subscriber_hash(key));  // a probe
    const bool at_cap = params_.max_flows_per_subscriber != 0 &&
                        subscribers_->flows(sub) > params_.max_flows_per_subscriber;
    subscribers_->remove_flow(sub);
    if (at_cap) return AdoptResult::kNoRoom;
    const PacketView none;  // no SYN: a flow first seen without its handshake, counted so
    idx = add_flow(key, h, none, Direction::kFromSubscriber, now);
    if (idx == kNoFlow) return AdoptResult::kNoRoom;  // cannot happen: room was checked
  }
  Flow& f = flows_->at(idx);
  const uint8_t initiator = effective_scale(ct.original_scale);
  const uint8_t answerer = effective_scale(ct.reply_scale);
  f.sub_scale = sub_initiated ? initiator : answerer;
  f.peer_scale = sub_initiated ? answerer : initiator;
  f.sub_initiated = sub_initiated;
  f.scale_known = true;
  // Established: evicted and expired like a flow whose handshake was seen. The right edges
  // stay unknown until an ACK has gone each way (apply_knob learns them).
  f.state = FlowState::kEstablished;
  flows_->set_class(idx, FlowClass::kEstablished);
  regulators_adopted(idx);
  counters_.flows_adopted.add();
  return AdoptResult::kAdopted;
}

}  // namespace rsfc
