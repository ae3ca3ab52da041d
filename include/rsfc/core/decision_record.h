// What a regulator decided at one control step, as the engine hands it to a DecisionSink
// (the daemon's decision log, rsfc-replay), and the one JSON writer for it. Pure: no I/O,
// no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rsfc/core/flow_table.h"
#include "rsfc/core/types.h"

namespace rsfc {

// One line of the per-flow decision log (RSFC/DRWA); emitted at most once per control step.
struct DecisionRecord {
  Nanos time = 0;
  IpAddr subscriber, peer;
  uint16_t subscriber_port = 0, peer_port = 0;
  const char* knob = "";   // "uplink" / "downlink"
  const char* state = "";  // controller state name
  double tick_ms = 0;      // subscriber timestamp granularity g (0 = unknown)
  double t_buff_ms = -1;   // filtered uplink buffering delay (-1 = unknown)
  double rate_bps = 0;     // delivered rate rho, bits/s (as the field name says)
  double rtt_min_ms = -1;
  double rtt_ms = -1;  // the round trip the controller sizes the window on
  // The window advertised on the ACK this step ran on, in bytes (its window field as
  // forwarded << the scale): the target after the floor, the right-edge hold and rounding up
  // to the scale; the ACK's own window when that was smaller, no clamp, or not enforced.
  uint64_t window_bytes = 0;
  uint64_t target_bytes = 0;  // the controller's target after the floor; 0 = no clamp
  bool enforced = true;       // false under policy observe (target_bytes: what it would apply)
  bool timestamps = false;
  // The records of the two queue laws (knob "uplink" under rsfc, "downlink" under rsfc)
  // carry threshold_ms, the T their queue is held at (after "rtt_ms"); DRWA's leave it out.
  bool has_threshold = false;
  double threshold_ms = -1;  // -1 = unknown
  // The downlink queue regulator's records (knob "downlink" under policy rsfc) also carry
  // q_down_ms, the downlink queue it regulates (after "threshold_ms"); other records leave it
  // out.
  bool has_q_down = false;
  double q_down_ms = -1;  // -1 = unknown
  // An uplink record whose step was the idle law's (a phone without timestamps, rsfc.idle_law)
  // also carries idle_pct, the share of the step its uplink sat idle (after "threshold_ms");
  // the other uplink records leave it out, and so does every downlink record.
  bool has_idle = false;
  double idle_pct = -1;
  // The engine's flow-table slot of the flow (PacketResult::flow, Engine::flow()), for tools
  // that join records with packets; not written to JSON.
  uint32_t flow = kNoFlow;
};

class DecisionSink {
 public:
  virtual ~DecisionSink() = default;
  virtual void on_decision(const DecisionRecord& r) = 0;
};

// The two forms a record is written in. Same fields in the same order; they differ in the
// time field, the number format and "enforced".
enum class DecisionJson : uint8_t {
  // The daemon's decision log: {"time_ns":<time>,...,"enforced":<bool>}; numbers in their
  // shortest form (%.6g), a non-finite one null.
  kLog,
  // rsfc-replay's lines: {"type":"decision","time_s":<seconds since `origin`>,...}; times in
  // ms with 3 decimals, the rate in whole bits/s, an unknown value (tick_ms <= 0, a negative
  // or non-finite delay) null; no "enforced".
  kReplay,
};

// Writes `r` as one JSON object followed by '\n' into out[0, cap) (NUL-terminated). Returns
// the length without the NUL, or 0 if `cap` is too small.
size_t format_decision_json(const DecisionRecord& r, char* out, size_t cap,
                            DecisionJson form = DecisionJson::kLog, Nanos origin = 0);

}  // namespace rsfc
