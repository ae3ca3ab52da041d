// RSFC: Receiver-Side Flow Control of the subscriber's uplink buffer (docs/DESIGN.md §3).
// One UplinkRegulator per upload flow: fixed size, no heap, no clock (time comes in as `now`).
//
// A phone's uplink buffer is large and its link slow: an upload keeps seconds of queue there,
// in front of everything else the phone sends. The gateway sees the upload after that buffer
// and rewrites the receive window in the server's ACKs to the phone; RSFC sizes that window W
// so that the buffer keeps a small standing queue of about T.
//
// Signals, once per control step (measure(), from the estimators of estimators.h):
//   t_buff   the standing queue: the one-way delay d of the phone's TSvals above its windowed
//            minimum min(d), filtered (without timestamps: the phone-side round trip from the
//            window-opening lag, above its minimum).
//   rho      the flow's delivered rate (windowed max), capped at its share of the subscriber's
//            when several uploads of one phone fill the buffer (SubscriberUplink).
//   rtt      the round trip without the flow's own uplink queue, averaged over rtt_smoothing:
//            W is sized on it. rtt_now: the current one. slack = rtt - rtt_now (>= 0) raises
//            every threshold: t_buff is compared as t_buff - slack.
//   rtt_min  the windowed minima of both halves (handshake, echoes).
//   T        threshold_ms, or rtt_min clamped to [threshold_floor_ms, threshold_ceiling_ms]
//            (threshold_ceiling_lag_ms without timestamps), to at least tick_multiple
//            timestamp ticks and to at least threshold_packets packets' service at the link's
//            rate up to threshold_packets_ceiling (the ceiling lifted to that floor).
// The link under the flow (measure_link(); timestamps and the subscriber's entry): a standing
// queue of the flow's own keeps the link busy at about rho; a link that falls or stops does
// not, and then t_buff is the link's backlog, not a queue the window caused:
//   outage    a gap in the arrivals (>= kOutage) that no sibling filled and that the segment
//             ending it waited through: the link stopped, and is back.
//   delivery  the link's service while data queued (gaps a queued segment waited through,
//             outages left out), as a fraction of its rate (the subscriber's windowed max).
//   link_fell t_buff > T and growing while delivery < kFallFraction: the link fell under the
//             flow (capacity drop, a slow spell of a variable link).
//   packet_time  one packet's time at the link's rate; long_round_trip: rtt_now > max_interval
//             (a download's queue in front of the phone: steps come once a round trip).
//
// One control step per interval I = clamp(rtt, control_interval_floor, max_interval):
//
//                  |
//                  v
//               STARTUP
//          (1) /        \ (2)
//            v            v
//   +------ SLOW --(3)--> FAST ------+
//   | (9)  ^ ^  |  <--(4)--  |  ^    | (8)
//   +------+ |  |(5)         |  +----+
//        (7) |  v            | (5) (6)
//            +- MONITOR <----+
//
//   (1) STARTUP -> SLOW      the signals exist, t_buff <= T
//   (2) STARTUP -> FAST      the signals exist, t_buff > T
//   (3) SLOW -> FAST         t_buff > T
//   (4) FAST -> SLOW         t_buff <= T
//   (5) SLOW/FAST -> MONITOR the flow sends and a min_refresh boundary passed (refresh_due());
//                            for an adopted flow (on_adopted()) also its first step with data
//   (6) FAST -> MONITOR      t_buff > T with the cut in force for monitor_after_steps steps in
//                            which the link neither fell nor stopped
//   (7) MONITOR -> SLOW      the buffer emptied (min(d) confirmed; on a long round trip t_buff
//                            within one packet's time), or the cut has been in force for
//                            monitor_steps steps (end_drain(), path_check())
//   (8) FAST, link_fell      W = delivery * rho * (rtt + fast_target * T) at once, the window
//                            it had remembered (fall_window_); after an outage W is sized on
//                            no less than rho (the silence is no rate)
//   (9) SLOW, recovering     within kRecoverFor of a fall, the buffer reads as empty as it did
//                            at the link's rate before the fall (a slower link adds its
//                            longer transmission to every d): W doubles toward the remembered
//                            window, one step at a time; a step that ends in a queue of the
//                            flow's own ends the recovery
//
// STARTUP  a clamp shaped like slow start, max(initial_window_bytes, startup_growth * in-flight),
//          in flight on the round trip without the flow's own queue (rho * max(rtt_min,
//          rtt_now)): it never holds a sender in slow start back, but keeps the right edge
//          (which cannot be pulled back) close enough that the first real window takes hold
//          within a round trip. The engine holds the flow to the floor from its handshake on.
//          No clamp on a bulk download (the engine's `release`: the server has sent more than
//          kStartupHoldOtherWay and the phone at most that, regulator.h; a download that began
//          with a request: held, its every segment would be rewritten).
//          W then starts at the in-flight estimate rho * (rtt_now + t_buff).
// SLOW     the buffer is empty (t_buff < probe_below * T, or under one packet): probe, W grows
//          by growth_per_rtt of itself, by at most probe_step_queue * T of queue (doubling
//          while it stays empty), or back toward the window the link carried before it fell.
//          Otherwise hold. W never grows far past the phone's in-flight.
// FAST     W = rho * (rtt + fast_target * T): one bandwidth-delay product plus a small queue;
//          only lowers W. rho is the link's rate now when it fell.
// MONITOR  a drain, W = drain_fraction * rho * rtt_now (the floor for a flow's first drain,
//          except on a long round trip): a measurement, not a decision. A standing queue
//          slowly becomes part of min(d) (t_buff then reads low); all flows of a phone drain
//          together at min_refresh boundaries (one phase per subscriber) and see the empty
//          buffer. Afterwards W is back where it was before the drain (unless the drain found
//          a lower min(d): W was sized on a queue).
// Without timestamps, or without the subscriber's entry (per_subscriber off), the flow cannot
// tell the link's silence from its own or a sibling's: no outage, delivery or link_fell.
//
// Driven by the engine, per flow whose uplink policy is rsfc (SYN and SYN-ACK included):
//   every segment from the phone:  on_uplink_segment(now, seg, params)
//   every segment to the phone:    on_downlink_segment(now, seg, params), before any rewrite;
//     for an ACK then:  target_window(now, params) -> WindowDecision (regulator.h), and
//                       on_window_forwarded(now, edge, params) with the right edge advertised.
//
// Timestamp-less flows cannot tell their uplink queue from a download's downlink queue: they
// are regulated, more loosely. The subscriber's shared rate is per rsfcd worker.
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
  // Variable links (measure_link()): a gap in the flow's arrivals this long, closed by a
  // segment that waited through it, is an outage; delivery below kFallFraction of the flow's
  // rate while its data queues is the link falling; the window it had before is restored by
  // doubling while the buffer stays empty for kRecoverFor after the fall (probe()).
  static constexpr Nanos kOutage = 100 * kMilli;
  static constexpr double kFallFraction = 0.5;
  static constexpr Nanos kRecoverFor = 5 * kSecond;
  static constexpr uint32_t kJudgeSegments = 4;  // the link's delivery over at least this much

  void on_uplink_segment(Nanos now, const TcpSegment& s, const RsfcParams& p);
  void on_downlink_segment(Nanos now, const TcpSegment& s, const RsfcParams& p);
  // `release`: the flow is a bulk download (other_way_bulk(), regulator.h): in STARTUP no
  // clamp, past it no difference.
  WindowDecision target_window(Nanos now, const RsfcParams& p, bool release = false);
  void on_window_forwarded(Nanos now, uint32_t right_edge, const RsfcParams& p);
  // The flow was adopted mid-stream (Engine::adopt, docs/DESIGN.md §5a): it started behind
  // whatever queue stood then, and its minimum has that queue in it. Its first drain comes at
  // its first step with data, not at a boundary after the hold-off (seconds later).
  void on_adopted() { drain_at_start_ = true; }
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
  // The phone's tick for its other flows (TickEstimator::shareable); 0 = not yet.
  Nanos measured_tick() const { return delay_.tick().shareable(); }
  // Another flow of the phone measured its tick (TickEstimator::on_sibling).
  void sibling_tick(Nanos g) { delay_.on_sibling_tick(g); }
  std::optional<Nanos> t_buff() const { return last_.t_buff; }
  // Without timestamps: the last step's window came from the uplink's idle time (idle_law()).
  bool idle_law_steered() const { return idle_.steered; }
  // Whether a step's share of the phone's counts says its uplink served evenly, so that idle time
  // means room (idle_law() steps only then).
  static bool even_service(const PhoneUplinkIdle::Counts& d);
  // The idle fraction of the uplink that step read (0-1, to 1/65535); unset when the step was
  // not the idle law's.
  std::optional<double> idle_fraction() const {
    if (!idle_.steered) return std::nullopt;
    return idle_.share / 65535.0;
  }
  double rate() const { return last_.rate; }  // rho, bytes/s
  std::optional<Nanos> rtt_min() const { return last_.rtt_min; }
  std::optional<Nanos> rtt_used() const { return last_.rtt; }
  Nanos rtt_now() const { return last_.rtt_now; }
  Nanos threshold() const { return last_.threshold; }
  // The controller's window; kNoClamp in STARTUP (target_window() then returns the startup
  // clamp).
  uint32_t window() const;
  uint32_t path_rebaselines() const { return path_rebaselines_; }  // see path_check()

 private:
  // The signals a step leaves for the read-outs and the segment handlers (the interval).
  struct Readings {
    std::optional<Nanos> t_buff;  // standing queue in the uplink buffer
    Nanos threshold = 0;          // T
    double rate = 0;              // rho, bytes/s: the own rate capped at the subscriber's share
    std::optional<Nanos> rtt;     // round trip without the own queue, averaged: sizes W
    Nanos rtt_now = 0;            // the same, current; kept until measured anew
    std::optional<Nanos> rtt_min;
    // One packet's time at the link's rate, ns (0: no rate yet). Less queue than that is none;
    // on a long round trip it is also how far from min(d) an empty buffer may read.
    double packet_time = 0;
    // The round trip exceeds max_interval: steps come once a round trip, a drain of a few
    // steps lasts seconds (a download's queue in front of the phone).
    bool long_round_trip = false;
  };
  // What a control step decides on (measure()).
  struct Signals : Readings {
    double own_rate = 0;   // the flow's delivered rate, bytes/s (windowed maximum)
    double link_rate = 0;  // the subscriber's (all its uploads'), at least own_rate
    Nanos phone_half = 0;  // the halves' windowed minima (0: none)
    Nanos server_half = 0;
    Nanos interval = 0;  // I: to the next step
    // The rest is valid when `ready`: t_buff, rtt and a rate exist, the law can run.
    bool ready = false;
    bool sending = false;  // data arrived within the last interval
    double slack = 0;      // max(0, rtt - rtt_now), ns
    double in_flight = 0;  // rho * (rtt_now + t_buff), bytes: Little's law
    // The link under the flow this step (measure_link(); timestamps only):
    Nanos silence = 0;    // the longest the link delivered nothing while the flow's data waited
    double delivery = 0;  // the link's delivery over the step (the silence left out) / its rate
    bool outage = false;  // silence >= kOutage: the link stopped, and is back
    // The delivery collapsed (< kFallFraction) while the queue grew above T.
    bool link_fell = false;

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
    // An adopted flow's first drain (drain_now()): its min(d) is as young as the flow, and
    // the standing queue it holds keeps "confirming" it, so only a sample from the first step
    // with the cut in force on counts (the phone then has no more than the cut in flight).
    bool confirm_after_cut = false;
    Nanos in_force_at = 0;  // the first step with the cut in force
    // It started behind a queue, and while the buffer drains every sample is a new low and
    // so "at the minimum": only a step over which min(d) held confirms it (monitor()), with
    // a sample at the minimum after the last step over which it fell.
    std::optional<Nanos> min_at_step;  // min(d) at the previous step
    Nanos fell_at = 0;                 // the last step over which min(d) fell
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
  void track_arrival(Nanos now, uint32_t fresh);

  // The control step: measure, then one function per state.
  bool step(Nanos now, const RsfcParams& p);  // true: something to log
  Signals measure(Nanos now, const RsfcParams& p);
  void measure_timestamps(Nanos now, Signals& s, const RsfcParams& p) const;
  void measure_lag(Nanos now, Signals& s, const RsfcParams& p) const;
  void measure_link(Signals& s);
  Nanos threshold_for(std::optional<Nanos> rtt_min, double packet_time, const RsfcParams& p,
                      bool steady) const;
  double subscriber_share(Nanos now, const Signals& s, const RsfcParams& p);
  void startup(Nanos now, const Signals& s, const RsfcParams& p);
  void slow(Nanos now, const Signals& s, const RsfcParams& p);
  void fast(Nanos now, const Signals& s, const RsfcParams& p);
  void monitor(Nanos now, const Signals& s, const RsfcParams& p);
  void idle_law(Nanos now, const Signals& s);

  // SLOW.
  static bool within_one_packet(const Signals& s);
  bool probe(Nanos now, const Signals& s, const RsfcParams& p);  // true: restoring (9)
  bool recovering(Nanos now) const {
    return fall_window_ > window_ && now - fall_at_ < kRecoverFor;
  }
  void follow_use(const Signals& s, double prev, const RsfcParams& p, bool restoring);
  // FAST.
  void enter_fast(Nanos now, const Signals& s, const RsfcParams& p);
  void size_fast(Nanos now, const Signals& s, const RsfcParams& p);
  double fast_rate(const Signals& s) const;  // the rate the fast state sizes W on
  // rho * (rtt + fast_target * T): one bandwidth-delay product plus the fast state's queue.
  double bdp_plus_queue(Nanos rtt, const Signals& s, const RsfcParams& p) const;
  // MONITOR.
  bool refresh_due(Nanos now, const RsfcParams& p) const;
  bool drain_now(Nanos now, const Signals& s, const RsfcParams& p);
  // `adopted`: the first drain of a flow adopted mid-stream (drain_now()).
  void enter_monitor(Nanos now, const Signals& s, const RsfcParams& p, bool scheduled,
                     bool adopted = false);
  void track_drain(Nanos now, const Signals& s, const RsfcParams& p);
  void end_drain(Nanos now, const Signals& s, const RsfcParams& p);
  void leave_monitor(Nanos now, bool evidence);
  void restart_drain_measurement();
  double drain_min_tb() const;  // < 0: no step in force yet
  PathCheck path_check(Nanos now, double T, const RsfcParams& p) const;

  static Nanos control_interval(const Readings& r, const RsfcParams& p);
  Nanos interval(const RsfcParams& p) const { return control_interval(last_, p); }
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
  Nanos last_data_at_ = 0;
  Nanos near_empty_at_ = 0;  // last t_buff within one packet's time at the link's rate
  // Variable links (track_arrival(), measure_link()), since the last step.
  Nanos last_arrival_ = 0;             // the flow's last data segment
  Nanos last_arrival_tb_ = 0;          // its t_buff
  uint64_t sub_bytes_at_arrival_ = 0;  // the subscriber's total bytes then
  Nanos silence_ = 0;                  // the longest silence
  Nanos busy_time_ = 0;                // time the link served queued data
  uint64_t busy_bytes_ = 0;            // bytes it served then
  Nanos lag_confirmed_at_ = 0;         // timestamp-less: last lag sample at its minimum
  bool lag_confirmed_ = false;
  bool ts_ = false;
  bool ts_decided_ = false;
  bool handshake_taken_ = false;
  uint32_t min_drops_seen_ = 0;  // delay_.min_drops() the phone_rtt averages were reset for
  uint32_t mss_ = kDefaultMss;

  // The last step's signals.
  Readings last_;

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
  double fall_window_ = 0;            // W when the link last fell (recovering())
  Nanos fall_at_ = 0;
  double fall_empty_ = 0;        // ns: t_buff of an empty buffer at the rate the link had then
  uint32_t fall_rises_ = 0;      // delay_.min_rises() then
  bool recovery_tried_ = false;  // a probe step doubled toward fall_window_
  // The right edges advertised and the server's ACKs (cut_in_force()).
  bool edge_known_ = false;
  bool ack_known_ = false;
  uint32_t edge_max_ = 0;
  uint32_t ack_max_ = 0;
  uint32_t cut_edge_ = 0;  // edge_max_ when W was last cut
  // The buffer went past the queue sign's level (twice threshold_ceiling plus half the base
  // round trip) after STARTUP within the horizon: T keeps the full ceiling until then
  // (measure(), threshold_for()). Four bytes, in padding.
  CoarseDeadline queue_swung_until_;

  // MONITOR: the drain in progress, and what scheduled drains (refresh_due()) remember.
  Drain drain_;
  Nanos drain_phase_ = 0;
  Nanos evidence_since_ = 0;     // start of the current min(d)-freshness period
  uint32_t rises_at_drain_ = 0;  // delay_.min_rises() when a drain last confirmed min(d)
  uint32_t path_rebaselines_ = 0;
  bool drain_confirmed_ = false;  // a drain has emptied the buffer once (min(d) confirmed)
  bool drain_at_start_ = false;   // adopted: drain at the first step with data (on_adopted())

  // The subscriber's share (subscriber_share()).
  SubscriberUplink* sub_ = nullptr;
  ShareSnapshot share_;

  // Without timestamps: the law on the phone's uplink idle time (idle_law()).
  struct IdleLaw {
    PhoneUplinkIdle::Counts seen;  // the phone's counts at the previous step
    Nanos step_at = 0;             // the previous step
    WindowedMax<4> capacity;       // bytes/s: the phone's bytes per step, over kIdleCapacityWindow
    float window = 0;              // its W (bytes; 0 until it first steps)
    bool steered = false;          // the last step's window is the law's
    uint16_t share = 0;            // the idle fraction it read, in 1/65535 (idle_fraction())
  } idle_;
};

}  // namespace rsfc
