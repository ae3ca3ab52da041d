// RSFC: Receiver-Side Flow Control of the subscriber's uplink buffer (docs/DESIGN.md §3), one
// UplinkRegulator per flow, fixed size, no heap. Pure: time comes in as `now`.
//
// HOW THE ENGINE DRIVES IT (per flow whose uplink.policy is rsfc):
//   - every segment FROM the subscriber:  on_uplink_segment(now, seg, params)
//   - every segment TO the subscriber:    on_downlink_segment(now, seg, params)   (before any
//     rewrite), then, if it carries an ACK:
//       d = target_window(now, params)    -> bytes (kNoClamp = leave the window alone);
//                                            the engine applies min_window_bytes, the
//                                            right-edge rule and the scale itself;
//                                            d.stepped: a control step ran, log a decision.
//       on_window_forwarded(now, edge, params)   with the right edge (ack + window <<
//                                            scale) actually advertised, rewritten or not.
//   SYN and SYN-ACK segments must be fed too (handshake timing, ISN, MSS, timestamps).
//
// SIGNALS (estimators.h):
//   t_buff   uplink buffering delay from the phone's TSvals, windowed min of d, then a short
//            windowed minimum (tbuff_filter): a standing queue, not one late packet.
//            Without timestamps: the phone-side round trip from the window-opening lag
//            above its windowed minimum (this includes downlink queueing; the monitor state
//            re-baselines what the clamp cannot remove, see below).
//   rho      delivered uplink rate at the gateway, windowed max over >= 1 s (outage-robust).
//   RTT      the round trip the upload really lives on, WITHOUT its own uplink queue:
//            (gateway -> phone -> gateway sample from a TS echo) minus that segment's own
//            t_buff, plus the minimum server half. This contains the downlink queueing a
//            concurrent download causes (the upload's ACKs wait in it): sizing on RTT_min
//            instead starves the upload (docs/DESIGN.md "quick prototype"). Two versions: the
//            current one (EWMA, gain rtt_gain per sample) and the one the window is sized on
//            (averaged over rtt_smoothing). Their difference is "slack": while the current
//            round trip is below the average (a download's queue breathing), the upload may
//            keep that much more in its own buffer - it fills the gap without raising the
//            phone's total round trip, and keeps the uplink busy. All thresholds below are
//            on t_buff - slack. Without timestamps: RTT = minimum phone-side round trip +
//            server half, no slack.
//   RTT_min  windowed minimum of both halves (handshake + echoes).
//
// CONTROL LAW, one step per interval I = clamp(RTT, control_interval_floor, max_interval):
//   T = threshold or auto, T_low = max(probe_below * T, one packet's time at the link's rate):
//   every d sample holds one packet's transmission, so min(d) taken before a capacity drop
//   reads low by the difference until it ages out; less than a packet is no standing queue.
//   kStartup  until t_buff, rho and RTT exist: a slow-start-shaped clamp, max(initial_window
//             _bytes or 64 KB, startup_growth * in-flight): it never holds back a
//             sender in slow start, but keeps the advertised right edge (which can never be
//             pulled back) close enough that the first real clamp takes effect within a round
//             trip, not after megabytes of autotuned server window are used up. Then the
//             first window is the flow's current in-flight estimate rho * (RTT + t_buff).
//   kSlow     t_buff < T_low (buffer empty: the link may have room): probe,
//               W += min(growth_per_rtt * W, probe_step_queue * T * rho * 2^min(k,
//               probe_doublings))
//             with k the number of probe steps in a row before this one: growth
//             proportional to the flow's own window, so N flows sharing one buffer grow
//             together like one flow; the cap in queue-time units bounds the overshoot of a
//             probe step to a fraction of T near capacity and doubles while the buffer stays
//             empty (decisive when far from it).
//             T_low <= t_buff <= T: hold. A capacity increase drains the buffer below T_low
//             and so is probed; growing +1 MSS per step here (as before) grew the queue by a
//             sixth of the link rate on a 40 ms path and made a 25-65 ms sawtooth. Without
//             timestamps it still does: their reading includes a download's downlink queue.
//             In both, W never grows beyond (1 + growth_per_rtt) * in-flight + 2 MSS, with
//             in-flight = rho * (current RTT + t_buff): never grow a window the phone does not
//             use; below unused_fraction * W it decays by unused_decay per step.
//   kFast     t_buff > T: W = rho * (RTT + fast_target * T): one bandwidth-delay product of
//             the round trip the flow really sees plus a small standing queue. Only lowers W.
//   kMonitor  (a) the clamp has been in force (the server acknowledged everything sent under
//             the old right edge) for monitor_after_steps steps and t_buff is still > T, or
//             (b) at each period boundary of min_refresh on the gateway clock (+ drain
//             phase): a standing queue slowly becomes part of min(d) as the old minimum
//             ages out, and a flow that started behind its siblings' queue took it for its
//             minimum; all flows of a phone drain together and see the empty buffer. After
//             the first drain has confirmed min(d), a boundary is skipped when the buffer
//             emptied on its own within the last period (a sample at the same, unrisen
//             minimum; timestamps with a tick <= fine_tick only): a drain costs the upload
//             throughput, most when a download's queue swings its round trip. Drain:
//             W = drain_fraction * rho * RTT (current). If the buffer empties, min(d) is
//             confirmed; otherwise after monitor_steps steps in force: without timestamps
//             the remaining delay is not ours (downlink queue, route change) and becomes the
//             new baseline. With timestamps min(d) is a physical one-way delay: only a
//             scheduled drain may raise it (every regulated flow cuts at once; after a drain
//             of (a) siblings may have kept the buffer filled, and raising it there would
//             ratchet the queue up), and only when the path check (path_check()) shows a
//             longer path: the flow has seen its minimum confirmed once and no empty buffer
//             for a full period, and for path_check (1 s) t_buff stays above T without its
//             floor falling while the flow's data arrives at less than path_foreign_rate
//             (0.8) rho - a queue of its own would drain at the link's rate and shrink. Then
//             min(d) += t_buff, and the window covers the pre-drain rate on the longer round
//             trip (rsfcd_rsfc_path_rebaselines_total counts these). Otherwise min(d) ages
//             out over the horizon. A boundary that passes during a drain of (a) makes it
//             the scheduled one; a drain of (a) that did not empty the buffer does not
//             postpone the next boundary (it is no evidence). Then kSlow, with the window
//             from before the drain (a drain is a measurement, not a decision).
//
// SEVERAL UPLOADS OF ONE PHONE fill one uplink buffer. With a SubscriberUplink attached
// (the engine attaches one per subscriber address, rsfc.per_subscriber) rho is capped at the
// flow's share of the subscriber's delivered rate (see SubscriberUplink), so the windows of
// N flows add up to about one BDP plus the fast state's queue, not N of them.
//
// KNOWN LIMITS (simulation, see rsfc_controller_test.cpp): flows of one phone that start
// together behind each other's initial windows take that queue for their minimum until the
// first drain (to the floor, at the first min_refresh boundary) empties the buffer; two to six
// simultaneous uploads keep 46-80 ms of mean queue (3.6 s unregulated; 113-153 ms with each
// flow on its own rate) - not under T. The shared rate is per rsfcd worker: flows of one
// subscriber spread over several NFQUEUE workers each see only their worker's part
// (conf/rsfcd-iptables.sh's subscriber balancing keeps them on one).
// Timestamp-less flows cannot tell their uplink queue from a download's downlink queue; they
// are regulated, more loosely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "rsfc/core/estimators.h"
#include "rsfc/core/params.h"
#include "rsfc/core/regulator.h"

namespace rsfc {

enum class RsfcState : uint8_t { kStartup = 0, kSlow = 1, kFast = 2, kMonitor = 3 };
constexpr size_t kRsfcStates = 4;    // CoreCounters::rsfc_flows_in_state
const char* to_string(RsfcState s);  // "startup", "slow", "fast", "monitor"

class UplinkRegulator {
 public:
  // The tunables of the law are RsfcParams (conf/rsfcd.yaml, rsfc.*); these are not.
  static constexpr uint32_t kDefaultMss = 1460;
  static constexpr Nanos kMinSlotSpacing = 1 * kMilli;  // echo / lag slots
  static constexpr int kSlotsPerRtt = 6;
  static constexpr double kStartupWindow = 65535;  // initial_window_bytes 0 means this

  void on_uplink_segment(Nanos now, const TcpSegment& s, const RsfcParams& p);
  void on_downlink_segment(Nanos now, const TcpSegment& s, const RsfcParams& p);
  WindowDecision target_window(Nanos now, const RsfcParams& p);
  void on_window_forwarded(Nanos now, uint32_t right_edge, const RsfcParams& p);
  // Optional: offsets this flow's scheduled drains. Give every flow of one subscriber the
  // same phase (e.g. a hash of its address modulo min_refresh) so that they drain together,
  // and different subscribers different phases so that the gateway's load does not dip all
  // at once. Default 0.
  void set_drain_phase(Nanos phase) { drain_phase_ = phase; }
  // Optional: the state this flow shares with the other regulated uploads of its subscriber
  // (not owned; must outlive this regulator or be detached with nullptr first).
  void attach(SubscriberUplink* s) {
    sub_ = s;
    share_.own_bytes = delivered_.total_bytes();
    share_.sub_bytes = s ? s->total_bytes() : 0;
    share_.counted = s != nullptr;
  }

  // --- Read-outs (decision log, metrics, tests); values as of the last control step. ---
  RsfcState state() const { return state_; }
  const char* state_name() const { return to_string(state_); }
  bool timestamps() const { return ts_; }
  double tick_ms() const { return delay_.tick().ns_per_tick() / 1e6; }  // 0 = unknown
  bool tick_estimated() const {
    return delay_.tick().quality() == TickEstimator::Quality::kEstimated;
  }
  std::optional<Nanos> t_buff() const { return sig_.t_buff; }
  double rate() const { return sig_.rate; }  // rho, bytes/s
  std::optional<Nanos> rtt_min() const { return sig_.rtt_min; }
  std::optional<Nanos> rtt_used() const { return sig_.rtt; }
  Nanos rtt_now() const { return sig_.rtt_now; }
  Nanos threshold() const { return sig_.threshold; }
  // The controller's window; kNoClamp in STARTUP (target_window() then returns the startup
  // clamp).
  uint32_t window() const;
  uint32_t path_rebaselines() const { return path_rebaselines_; }  // see path_check()

 private:
  // What a control step decides on (measure()).
  struct Signals {
    std::optional<Nanos> t_buff;  // standing queue in the uplink buffer
    Nanos threshold = 0;          // T
    double rate = 0;              // rho, bytes/s: own_rate capped at the subscriber's share
    double own_rate = 0;          // the flow's delivered rate, bytes/s (windowed maximum)
    std::optional<Nanos> rtt;     // round trip without the own queue, averaged: sizes W
    Nanos rtt_now = 0;            // the same, current; kept until measured anew
    std::optional<Nanos> rtt_min;
    Nanos phone_half = 0;  // the halves' windowed minima (0: none)
    Nanos server_half = 0;
    Nanos interval = 0;  // I: to the next step
    // The rest is valid when `ready`: t_buff, rtt and a rate exist, the law can run.
    bool ready = false;
    bool sending = false;  // data arrived within the last interval
    double slack = 0;      // max(0, rtt - rtt_now), ns
    double in_flight = 0;  // rho * (rtt_now + t_buff), bytes: Little's law

    double tb() const { return static_cast<double>(*t_buff); }   // ns
    double T() const { return static_cast<double>(threshold); }  // ns
    // t_buff - slack against a queueing delay (ns).
    bool above(double limit) const { return tb() > limit + slack; }
    bool below(double limit) const { return tb() < limit + slack; }
  };
  // The path check's view of one half of its span (path_check()).
  struct PathHalf {
    double min_tb = -1;          // lowest t_buff, ns (< 0: none yet)
    std::optional<Nanos> floor;  // lowest one-way delay level t_buff + min(d) (timestamps)
  };
  // MONITOR: the drain in progress.
  struct Drain {
    Nanos since = 0;            // entered MONITOR
    double window_before = 0;   // W before the drain's cut
    double rate_before = 0;     // rho then
    uint32_t drops_before = 0;  // delay_.min_drops() then
    uint8_t steps = 0;          // steps with the cut in force
    bool scheduled = false;     // at a min_refresh boundary: every flow of the phone drains
    // The path check's span: its start, the highest data end then, and its two halves.
    Nanos check_since = 0;
    uint32_t check_end = 0;
    PathHalf first, second;
  };
  // What subscriber_share() kept of the previous step.
  struct ShareSnapshot {
    uint64_t own_bytes = 0;  // delivered_.total_bytes()
    uint64_t sub_bytes = 0;  // sub_->total_bytes()
    int64_t epoch = -1;      // SubscriberUplink::report_active bookkeeping
    bool counted = false;    // sub_bytes is from the previous step
  };
  enum class PathCheck : uint8_t { kNo, kWait, kLonger };

  // Estimators, fed by every segment.
  void take_handshake(Nanos now, const RsfcParams& p);
  void on_uplink_timestamps(Nanos now, const TcpSegment& s, Nanos spacing, const RsfcParams& p);
  void add_phone_rtt(Nanos now, Nanos rtt_no_queue, const RsfcParams& p);
  void on_uplink_lag(Nanos now, const TcpSegment& s, const RsfcParams& p);

  // The control step: measure, then one function per state.
  bool step(Nanos now, const RsfcParams& p);  // true: something to log
  Signals measure(Nanos now, const RsfcParams& p);
  void measure_timestamps(Nanos now, Signals& s, const RsfcParams& p) const;
  void measure_lag(Nanos now, Signals& s, const RsfcParams& p) const;
  Nanos threshold_for(std::optional<Nanos> rtt_min, const RsfcParams& p) const;
  double subscriber_share(Nanos now, const Signals& s, const RsfcParams& p);
  void startup(Nanos now, const Signals& s, const RsfcParams& p);
  void slow(Nanos now, const Signals& s, const RsfcParams& p);
  void fast(Nanos now, const Signals& s, const RsfcParams& p);
  void monitor(Nanos now, const Signals& s, const RsfcParams& p);

  // SLOW.
  bool within_one_packet(Nanos now, const Signals& s) const;
  void probe(const Signals& s, const RsfcParams& p);
  void follow_use(const Signals& s, double prev, const RsfcParams& p);
  // FAST.
  void enter_fast(const Signals& s, const RsfcParams& p);
  void size_fast(const Signals& s, const RsfcParams& p);
  // rho * (rtt + fast_target * T): one bandwidth-delay product plus the fast state's queue.
  double bdp_plus_queue(Nanos rtt, const Signals& s, const RsfcParams& p) const;
  // MONITOR.
  bool refresh_due(Nanos now, const RsfcParams& p) const;
  void enter_monitor(Nanos now, const Signals& s, const RsfcParams& p, bool scheduled);
  void track_drain(Nanos now, const Signals& s, const RsfcParams& p);
  void end_drain(Nanos now, const Signals& s, const RsfcParams& p);
  void leave_monitor(Nanos now, bool evidence);
  void restart_drain_measurement();
  double drain_min_tb() const;  // < 0: no step in force yet
  PathCheck path_check(Nanos now, double T, const RsfcParams& p) const;

  static Nanos control_interval(const Signals& s, const RsfcParams& p);
  Nanos interval(const RsfcParams& p) const { return control_interval(sig_, p); }
  static Nanos lag_window(Nanos interval, const RsfcParams& p);
  static Nanos horizon(const RsfcParams& p) { return p.min_window_horizon; }
  uint32_t startup_window(const RsfcParams& p) const;
  // min_window_segments MSS, as of the last control step.
  double min_window() const { return static_cast<double>(min_segments_) * mss_; }
  // A cut of W holds once the server acknowledged everything sent under the old right edge.
  bool cut_in_force() const { return !edge_known_ || !ack_known_ || seq_ge(ack_max_, cut_edge_); }
  Nanos confirmed_at() const { return ts_ ? delay_.min_confirmed_at() : lag_confirmed_at_; }
  bool has_confirmation() const { return ts_ ? delay_.has_min_confirmation() : lag_confirmed_; }

  // Estimators.
  HandshakeTimer handshake_;
  UplinkDelayEstimator delay_;  // t_buff from the phone's TSvals
  DeliveredRate delivered_;     // the flow's new bytes and rate
  EchoSampler phone_echo_;      // server TSvals -> phone TSecr
  EchoSampler server_echo_;     // phone TSvals -> server TSecr
  WindowOpeningLag lag_;        // timestamp-less phone-side round trip
  AckProbe server_probe_;       // timestamp-less server half
  WindowedMin<4> phone_half_min_;
  WindowedMin<4> server_half_min_;
  WindowedMin<4> lag_min_;  // timestamp-less: short min of lag samples (t_buff)
  // Gateway -> phone -> gateway without the flow's own queue (sample minus its t_buff; lag
  // without timestamps): current (gain rtt_gain per sample), and averaged over rtt_smoothing.
  Ewma phone_rtt_now_;
  Ewma phone_rtt_avg_;
  Nanos phone_rtt_avg_at_ = 0;
  Nanos last_phone_rtt_ = 0;  // last gateway -> phone -> gateway sample, queue included
  Nanos last_data_at_ = 0;
  Nanos lag_confirmed_at_ = 0;  // timestamp-less: last lag sample at its minimum
  bool lag_confirmed_ = false;
  bool ts_ = false;
  bool ts_decided_ = false;
  bool handshake_taken_ = false;
  uint32_t min_drops_seen_ = 0;  // delay_.min_drops() the phone_rtt averages were reset for
  uint32_t mss_ = kDefaultMss;

  // The signals of the last step.
  Signals sig_;

  // Control state.
  double window_ = 0;            // W, bytes (valid when clamping_)
  double startup_inflight_ = 0;  // STARTUP: the phone's in-flight estimate, bytes
  Nanos next_step_ = 0;
  Nanos last_step_at_ = 0;
  RsfcState state_ = RsfcState::kStartup;
  bool clamping_ = false;             // past STARTUP: W is the target
  uint16_t fast_steps_in_force_ = 0;  // FAST: steps the last deep cut has held
  uint32_t min_segments_ = 2;         // RsfcParams::min_window_segments, taken at each step
  uint32_t probe_streak_ = 0;         // SLOW: probe steps in a row that found the buffer empty
  // The right edges advertised and the server's ACKs (cut_in_force()).
  bool edge_known_ = false;
  bool ack_known_ = false;
  uint32_t edge_max_ = 0;
  uint32_t ack_max_ = 0;
  uint32_t cut_edge_ = 0;  // edge_max_ when W was last cut

  // MONITOR: the drain in progress, and what scheduled drains (refresh_due()) remember.
  Drain drain_;
  Nanos drain_phase_ = 0;
  Nanos evidence_since_ = 0;     // start of the current min(d)-freshness period
  uint32_t rises_at_drain_ = 0;  // delay_.min_rises() when a drain last confirmed min(d)
  uint32_t path_rebaselines_ = 0;
  bool drain_confirmed_ = false;  // a drain has emptied the buffer once (min(d) confirmed)

  // The subscriber's share (subscriber_share()).
  SubscriberUplink* sub_ = nullptr;
  ShareSnapshot share_;
};

}  // namespace rsfc
