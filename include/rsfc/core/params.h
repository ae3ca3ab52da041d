// Tunable parameters of the core: plain structs, filled from YAML by config.cpp (the core
// never sees YAML), reloadable on SIGHUP. Every field has a safe default.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "rsfc/core/pacer.h"
#include "rsfc/core/types.h"

namespace rsfc {

enum class Policy : uint8_t {
  kOff,      // not touched (flows are still tracked for the other knob)
  kObserve,  // tracked and exported, never modified
  kStatic,   // clamp to a fixed byte count (Android's tcp_rmem_max)
  kRsfc,     // uplink only: Receiver-Side Flow Control
  kDrwa,     // downlink only: Dynamic Receive Window Adjustment
};
const char* to_string(Policy p);

struct DirectionParams {
  Policy policy = Policy::kOff;
  uint32_t static_window_bytes = 65535;
};

// The startup floor an `initial_window_bytes` setting means: 0 = 65535 bytes, the most a
// handshake (never scaled) can offer. The engine holds handshakes to it; both regulators
// start from it.
constexpr uint32_t startup_floor_bytes(uint32_t initial_window_bytes) {
  return initial_window_bytes > 0 ? initial_window_bytes : 65535u;
}

// The packet floor on both knobs' auto T (RsfcParams::threshold_packets): `packets` packets'
// service at `packet_ns` each, but never above `cap`. 0 when either is 0.
inline Nanos packet_floor(double packets, double packet_ns, Nanos cap) {
  return static_cast<Nanos>(std::min(packets * packet_ns, static_cast<double>(cap)));
}

// Auto T's floor and ceiling on a knob whose own queue has not swung (RsfcParams::
// threshold_ceiling_steady, `steady_ceiling`; 0: off): both at most that steady ceiling.
struct AutoBounds {
  Nanos floor;
  Nanos ceiling;
};
constexpr AutoBounds auto_bounds(Nanos floor, Nanos ceiling, Nanos steady_ceiling, bool steady) {
  if (!steady || steady_ceiling <= 0) return {floor, ceiling};
  return {std::min(floor, steady_ceiling), std::min(ceiling, steady_ceiling)};
}

// RSFC controller constants (uplink knob). See conf/rsfcd.yaml and rsfc_controller.h for
// what each one means; T below is the threshold on the filtered uplink buffering delay.
struct RsfcParams {
  // Threshold T on the filtered uplink buffering delay; nullopt = auto: RTT_min, clamped to
  // [max(threshold_floor, 4 g), threshold_ceiling] (g = the flow's timestamp tick).
  std::optional<Nanos> threshold;
  Nanos threshold_floor = 20 * kMilli;        // auto T never below this (TS granularity)
  Nanos threshold_ceiling = 80 * kMilli;      // auto T never above this (latency budget)
  Nanos threshold_ceiling_lag = 80 * kMilli;  // ... for a flow without timestamps (lag signal)
  // The downlink knob's auto-T ceiling for a download whose phone has no bulk upload running
  // (Engine::phone_uploads), where it is above threshold_ceiling (0: never). Next to an
  // upload, threshold_ceiling holds.
  Nanos threshold_ceiling_download_alone = 80 * kMilli;
  // Each knob's auto T is never below this many packets' service at its link's rate (a queue
  // shorter than a packet leaves a slow link idle between packets: 23 ms a packet at 0.5
  // Mbit/s), though this floor never above threshold_packets_ceiling (0: no floor). The
  // downlink knob's own floor while its service swings (DownlinkQueueParams) comes on top.
  double threshold_packets = 2;
  Nanos threshold_packets_ceiling = 30 * kMilli;
  // Each knob's auto-T ceiling (and floor) while its own filtered queue stays within twice
  // threshold_ceiling (the uplink's: plus half its base round trip) after its start-up; the full
  // ceiling until min_window_horizon has passed without that (0: off). A link whose service holds
  // needs no more than a few packets of queue (lab/EXPERIMENTS.md Q52, Q53). Off here, as the
  // control law's other tests and the simulator's cases run it; the daemon's configuration turns
  // it on (Config, 10 ms).
  Nanos threshold_ceiling_steady = 0;
  // The downlink knob on a phone without timestamps: true runs its law on the gateway's round
  // trip (both of the phone's queues; T as the upload's, threshold_ceiling_lag), false leaves
  // such a download unclamped (downlink_regulator.h).
  bool downlink_round_trip = true;
  // ... and there, while the phone's regulated upload delivers short of its link, T's ceiling
  // (threshold_ceiling_lag) times this: the download gives way (1: never).
  double downlink_yield = 0.5;
  Nanos min_window_horizon = 10 * kSecond;     // sliding window for min(d) and RTT_min
  Nanos tbuff_filter = 200 * kMilli;           // short windowed minimum on t_buff samples
  Nanos control_interval_floor = 20 * kMilli;  // time base floor for "per RTT" steps
  Nanos rtt_smoothing = 1 * kSecond;           // the window is sized on the RTT averaged over this
  double growth_per_rtt = 0.25;                // probe: multiplicative growth per step ...
  double probe_step_queue = 0.5;               // ... but at most rho * this * T bytes per step
  double probe_below = 0.25;                   // probe only while t_buff < this * T
  double fast_target = 0.75;                   // fast state: window = rho * (RTT + this * T)
  Nanos min_refresh = 5 * kSecond;             // period of the scheduled drains (monitor)
  double drain_fraction = 0.75;                // monitor: window = this * rho * RTT
  Nanos path_check = 1 * kSecond;              // drain: longer path if t_buff holds; 0 = off
  double path_foreign_rate = 0.8;              // ... and the flow delivers below this * rho
  Nanos path_tolerance = 5 * kMilli;           // ... and its floor stays within this (or 2 g)
  Nanos max_interval = 1 * kSecond;            // control steps at least this often
  double tick_multiple = 4;                    // auto T >= this * g
  double rtt_gain = 0.25;                      // EWMA gain per round-trip sample
  uint32_t monitor_after_steps = 3;            // fast: drain after this many steps in force
  uint32_t monitor_steps = 2;                  // drain: this many steps in force
  Nanos fine_tick = 2 * kMilli;                // drains may be skipped with a tick <= this
  double unused_fraction = 0.5;                // in flight below this * W: window unused ...
  double unused_decay = 0.25;                  // ... and shrinks by this per step
  double startup_growth = 2.0;                 // startup clamp >= this * in-flight
  bool per_subscriber = true;                  // uploads of one subscriber share a link rate
  bool idle_law = true;                        // no TS: the upload on its uplink's idle time
  double share_equalize = 0.75;                // ... each flow's share pulled this far to 1/N
  uint32_t initial_window_bytes = 16384;       // startup floor, from the handshake on; 0 = 64 KB
  uint32_t probe_doublings = 4;                // probe step cap doubles up to 2^this times
  double recut_fraction = 0.9;                 // fast: a cut below this * W is a new cut
  uint32_t min_window_segments = 2;            // the controller's window >= this many MSS
  double lag_confirm_fraction = 0.1;           // no TS: lag within this of its min = empty
  double refresh_holdoff = 0.5;                // no scheduled drain within this * min_refresh
};

// DRWA constants (downlink knob), see drwa.h.
struct DrwaParams {
  double alpha = 7.0 / 8.0;  // cwnd_est smoothing (published default 7/8)
  double lambda = 3.0;       // rwnd = lambda * RTT_min / RTT_est * cwnd_est (published: 3)
  Nanos interval_floor = 10 * kMilli;  // "once per RTT" never more often than this
  Nanos rtt_min_horizon = 0;           // RTT_min ages out after this; 0 = flow lifetime
};

// What the engine needs; everything here may change on SIGHUP.
struct EngineParams {
  std::vector<Prefix> subscriber_networks;
  DirectionParams uplink;    // window in ACKs travelling to subscribers
  DirectionParams downlink;  // window in ACKs travelling from subscribers
  uint32_t min_window_bytes = 2920;
  Nanos idle_timeout = 300 * kSecond;
  Nanos closed_timeout = 10 * kSecond;     // FIN/RST seen both ways: linger for late ACKs
  Nanos embryonic_timeout = 30 * kSecond;  // handshake not completed
  // Flows one subscriber address may hold in a worker's table; 0 = no cap. At the cap a new
  // flow takes the place of the subscriber's own oldest closed or embryonic flow, else it is
  // left untracked: never another subscriber's flow.
  uint32_t max_flows_per_subscriber = 4096;
  // Flows first seen mid-stream are reported (PacketResult::adopt_request) so that the shell
  // can ask conntrack for their window scales (Engine::adopt); false leaves them unregulated.
  bool adopt_from_conntrack = true;
  RsfcParams rsfc;
  DrwaParams drwa;
  // Downlink pacing (pacer.h), for flows the downlink queue regulator (downlink.policy rsfc)
  // steers, once it is past its startup.
  PacingParams pacing;
};

}  // namespace rsfc
