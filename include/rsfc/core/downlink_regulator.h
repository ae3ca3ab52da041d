// The downlink knob on the phone's own clock (docs/DESIGN.md §4a; issue 16, point 1).
// One DownlinkQueueRegulator per download flow: fixed size, no heap, no clock (time comes in
// as `now`).
//
// A phone's downlink buffer at the base station is deep: a download alone keeps hundreds of
// milliseconds of queue there, in front of everything else the phone receives. The gateway
// forwards the download's data BEFORE that buffer and the phone's ACKs AFTER the phone's
// uplink buffer; it rewrites the receive window in the phone's ACKs to the server and sizes
// that window W so that the downlink buffer keeps a small standing queue of about T, while W
// still covers the whole round trip the download lives on.
//
// DRWA (drwa.h) reads its queue from the ACK round trip, which contains the ACKs' wait in the
// uplink queue: next to an upload it reads seconds of queue that no window can remove, and
// starves the download. Here each signal is taken on the clock that is blind to the other
// direction:
//
//   q_down   the downlink queue: TSval(ack) * g - gateway forwarding time of the data the ACK
//            first covers, above its windowed minimum, filtered: the minimum of the samples
//            over `filter`, i.e. the queue's trough, which is above zero only while the link
//            never idles (DownlinkQueueEstimator, downlink_delay.h). The phone stamps the ACK
//            before its uplink buffer, so the ACK's uplink wait never enters. Less a baseline
//            offset a drain may have found (a longer path, a queue this flow cannot remove).
//            Segments are timed every W / kSlotsPerRtt bytes, not every so many ms: a server
//            whose ACKs come in bursts (behind an upload) sends in bursts, and time-spaced
//            samples would only ever time a burst's first segment.
//   g        the phone's tick, from the phone's own segments (upper bound) and the data they
//            answer (lower bound): UplinkDelayEstimator / TickEstimator, which also gives
//            q_up, the ACKs' own wait in the uplink buffer.
//   rate     bytes the phone acknowledged per PHONE-clock time (the ACKs' TSvals): what the
//            downlink delivered, free of the ACKs' uplink jitter. Windowed maximum; rate_now
//            the last sample. A gap in the ACKs (an outage) restarts the sample.
//   rtt      the round trip the download lives on WITHOUT its own downlink queue: for each
//            timed segment, gateway forwarding to the ACK that answers it (downlink path and
//            queue, the phone, the uplink path and queue) minus its own q_down, plus the
//            server half; averaged over rtt_smoothing (rtt) and current (rtt_now). The ACKs'
//            uplink wait stays in it: W covers it, so an upload next to the download does not
//            make the download window-limited (DRWA's failure).
//   T        threshold, or the base round trip clamped to [threshold_floor,
//            threshold_ceiling], to at least tick_multiple ticks, to at least
//            threshold_packets_steady packets' service at the delivered rate up to
//            threshold_packets_ceiling whatever the service (under a packet's time the
//            queue is empty between packets), and to at least
//            threshold_packets packets' service at the delivered rate while the service
//            swings (a slow cellular link serves whole packets in bursts: a shorter queue
//            runs empty under a large one and its capacity is lost; a steady slow link, as
//            2G, keeps its rate with less than a packet, and the floor would only add
//            latency there). The service swings for one horizon after the phone received,
//            within the time threshold_packets packets take at the rate, more than
//            floor_swing times the rate (a steady link never serves faster than its rate,
//            an idle one only slower). The link-falling check keeps the
//            time-based T, since any queue above it shows a busy link. The base round trip is
//            the windowed minimum of the same samples less both queues (q_down and q_up)
//            plus the server half: a phone-half minimum would contain the other queue
//            whenever the two never empty at the same moment.
//
// The swing window: while the service swings (as for T's packet floor), W is never below
// peak * (rtt_min + T), the law's own target at the link's recent peak, peak the largest rate
// sample, halving every peak_half_life. A link that serves in bursts between slow spells (the
// EV-DO, UMTS and LTE traces) sizes the law's W on a rate that a slow spell has just cut, and
// the next burst finds the buffer empty and is lost; fixed windows of a few tens of KB keep
// their data through the spell and take the burst (lab/EXPERIMENTS.md Q37, Q38). The law runs
// on under it (its W, its states, its drains, which the window then holds from emptying the
// queue): the floor only bounds what the ACK asks for. A fall restarts the peak from the
// fallen rate, as it restarts the law's rate, so a capacity drop or an outage is followed at
// once; but once the rate has come back to back_fraction of the peak before a fall within the
// horizon after it, the link serves in bursts, and for a horizon its falls are slow spells
// that the peak holds through; one the link does not come back from within that horizon
// lasts, and the peak restarts then. On a steady link the peak is the law's rate and the floor its
// own target. A flow adopted mid-flow gets none: its rtt_min holds the old queue.
//
// One control step per interval I = clamp(rtt, interval_floor, max_interval), at an ACK:
//
//                 |
//                 v
//              STARTUP -----(8)-----> NO_TIMESTAMPS
//         (1) /       \ (2)
//            v         v
//   +-----> SLOW --(3)--> FAST
//   |        |  <--(4)--  |  ^
//   |    (5) |    (5) (6) |  | (9)
//   |        v            v  |
//   +------------ DRAIN -----+
//     (7)
//
//   (1) STARTUP -> SLOW      the signals exist, q_down <= T
//   (2) STARTUP -> FAST      the signals exist, q_down > T
//   (3) SLOW -> FAST         q_down > T (the link falling: see below)
//   (4) FAST -> SLOW         q_down <= T
//   (5) SLOW/FAST -> DRAIN   the flow sends, a min_refresh boundary passed and no fresh
//                            evidence says the queue emptied (a sample at min(d))
//   (6) FAST -> DRAIN        q_down > T with the cut in force for drain_after_steps steps
//   (7) DRAIN -> SLOW        the queue was seen empty; or path_check passed with the cut in
//                            force: a queue that did not shrink is not this flow's (a longer
//                            path, a foreign sender) and becomes the baseline
//   (8) STARTUP -> NO_TIMESTAMPS   the handshake carried no timestamps and round_trip_no_ts
//                                  is off (or the handshake was not seen): no clamp (below)
//   (9) DRAIN -> FAST        the link fell during the drain
//
// STARTUP  max(initial_window_bytes, startup_growth * in flight), in flight less the flow's
//          own downlink queue (rate * q_down): never holds a sender in slow start back, but
//          keeps the right edge (never pulled back) within reach. A flow whose ACKs come late
//          (round trip over twice the base: behind an upload) differs in three places: its
//          first step, at its first ACK, allows in flight + startup_growth * bytes
//          acknowledged (slow start grows by what is acknowledged); its first rate sample
//          needs rtt_min and kFirstRateSegments, not the interval (which is mostly the ACKs'
//          wait), and the ACK that closes it brings the step forward; and more in flight than
//          startup_growth * rate * (rtt + T) is queue by Little's law: FAST, as for q_down > T
//          (which shows it an ACK later). The engine holds the flow to the floor from its
//          handshake on. No clamp on a bulk upload (the engine's `release`: the phone has sent
//          more than kStartupHoldOtherWay and the server at most that, regulator.h; an upload
//          after a few bytes from the server, e.g. TLS: held, its every segment would be
//          rewritten).
// SLOW     the queue is short (q_down < probe_below * T, or one packet): probe, W grows by
//          growth_per_rtt of itself, by at most probe_step_queue * T of queue (doubling while
//          it stays short); the next probe waits until this one can show in q_down (a round
//          trip, the queue, the filter). W follows at once to rate * (rtt_now + fast_target
//          * T) when the round trip grew (the ACKs now wait behind an upload). Otherwise hold.
//          W never grows far past what the server had in flight.
// FAST     W = rate * (rtt + fast_target * T): one bandwidth-delay product of the round trip
//          without the own downlink queue, plus a small queue. Only lowers W.
// DRAIN    W = drain_fraction * rate * rtt_now until a sample of data sent under the cut sees
//          the queue empty (then W is back where it was: a drain is a measurement), or for
//          path_check. The first drain, and one after evidence that may stand on a
//          re-learnt min(d), are sized on the base round trip plus the ACKs' uplink wait: a
//          queue hidden in min(d) is in rtt too, and a drain sized on it would not empty it. A
//          queue seen empty skips the boundaries while that evidence outlives the next one (min(d)
//          keeps a sample 7/8 of the horizon at least).
//          A regulator started mid-flow (it did not see the handshake: a reload to this
//          policy, a restart, a flow adopted from conntrack) drains at once, to the floor: the
//          queue that was there is in min(d) and in every round trip it has measured.
//
// The link falling: while q_down > T the downlink is busy, so the delivered rate is its
// capacity. Two rate samples in a row below fall_fraction of the windowed maximum restart the
// maximum from them: FAST then sizes W on the new capacity at once (not after the maximum
// ages out), and a drain in progress ends. A recovery is probed back quickly: for one horizon,
// until W is back at the window it had before the fall, each probe step doubles the growth
// (up to doubling W, without the queue cap) as long as the delivered rate followed the
// previous step up.
//
// Next to an upload the phone's two queues phase-lock (seen in the packet simulator): ACKs
// held behind the upload's data leave the uplink buffer together, the server answers with a
// burst, whose queue holds the upload's ACKs, and so on. For the download to keep its rate
// the downlink buffer must then hold its data for as long as its ACKs are held, so the
// downlink queue's peaks follow the uplink queue's swings whatever the window law. This law
// keeps the download's rate (it controls the queue's trough, which is above zero only while
// the link never idles, and times the burst heads that find it idle): the phone's latency is
// then what the uplink queue's swings make it. With the uplink queue held steady it meets the
// targets (test/downlink_regulator_test.cpp).
//
// Phones without timestamps: the downlink queue cannot be told from the ACKs' uplink wait
// (the ACK round trip holds both: docs/DESIGN.md §4a). The upload's regulator reads the same
// sum (its window-opening lag: its ACKs wait behind the download's data), so a download left
// alone keeps its buffer full, and the upload's law cuts itself on the download's queue and
// starves where that buffer is deep (lab/EXPERIMENTS.md Q45). With round_trip_no_ts (the
// default) the law runs on the gateway's own round trip instead: the phone's clock is the
// gateway's at the ACK's arrival (1 ms ticks), so q_down is the round trip above its minimum,
// both queues (no q_up: it is in q_down), rtt the base round trip, the rate the ACKs'
// arrivals' (uplink jitter included), the server half the handshake's for the flow's life (no
// echo renews it), and T is the upload's (threshold_ceiling_no_ts, from threshold_ceiling_lag:
// the same sum held to the same T by both knobs). The two knobs then hold the phone's two
// queues together (Q46); how they share the sum follows how the flows started. Not paced (the
// pacer follows the phone's clock), no tick shared with or taken from the phone's other flows
// (tick_ms() 0); the engine holds the handshake to the startup floor as with timestamps; a
// flow adopted mid-flow, whose handshake was not seen, stays alone. Without round_trip_no_ts
// such flows are left alone (NO_TIMESTAMPS, no clamp). The metrics count both kinds.
//
// Driven by the engine, per flow whose downlink policy runs it (SYN and SYN-ACK included):
//   every segment TO the phone (server data):  on_downlink_segment(now, seg, params)
//                                               (paced: on_downlink_segment(now, leaves, ...))
//   every segment FROM the phone:              on_uplink_segment(now, seg, params)
//     then, for an ACK:  target_window(now, params) -> WindowDecision (regulator.h); the
//                        engine applies the floor, the right-edge rule and the scale.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "rsfc/core/downlink_delay.h"
#include "rsfc/core/estimators.h"
#include "rsfc/core/params.h"
#include "rsfc/core/regulator.h"

namespace rsfc {

enum class DownlinkState : uint8_t {
  kStartup = 0,
  kSlow = 1,
  kFast = 2,
  kDrain = 3,
  kNoTimestamps = 4,
};
constexpr size_t kDownlinkStates = 5;
const char* to_string(DownlinkState s);  // "startup", "slow", "fast", "drain", "no_timestamps"

// The law's constants. Those with an RSFC namesake mean the same thing on the downlink's
// queue (downlink_params_from() takes them from RsfcParams); the rest are the downlink's own.
struct DownlinkQueueParams {
  std::optional<Nanos> threshold;         // T on q_down; nullopt = auto (see the header)
  Nanos threshold_floor = 20 * kMilli;    // auto T never below this
  Nanos threshold_ceiling = 80 * kMilli;  // auto T never above this
  // auto T's ceiling and floor at most this while q_down has not swung (RsfcParams; 0: off)
  Nanos threshold_ceiling_steady = 0;
  // auto T never below min(this many packets' service at the rate, threshold_packets_ceiling),
  // the service steady or not (RsfcParams::threshold_packets; 0: none)
  double threshold_packets_steady = 2;
  Nanos threshold_packets_ceiling = 30 * kMilli;
  double tick_multiple = 4;      // auto T >= this * g
  double threshold_packets = 3;  // auto T >= this many packets at the rate ...
  double floor_swing = 2;        // ... while the service swings: more than this * rate received
                                 // within those packets' time (one horizon); 0 = always
  Nanos horizon = 10 * kSecond;  // min(d), the round-trip minima, the baseline offset
  Nanos filter = 200 * kMilli;   // q_down: minimum of the raw samples over this
  Nanos interval_floor = 20 * kMilli;  // control interval: rtt clamped to [this, max]
  Nanos max_interval = 1 * kSecond;
  Nanos rtt_smoothing = 1 * kSecond;      // W is sized on the round trip averaged over this
  double rtt_gain = 0.25;                 // rtt_now: EWMA gain per sample
  double growth_per_rtt = 0.25;           // SLOW probe: multiplicative growth per step ...
  double probe_step_queue = 0.5;          // ... but at most rate * this * T bytes per step
  double probe_below = 0.25;              // probe only while q_down < this * T
  uint32_t probe_doublings = 4;           // the step cap doubles up to 2^this times
  double fast_target = 0.75;              // FAST: W = rate * (rtt + this * T)
  double recut_fraction = 0.9;            // FAST: a cut below this * W is a new cut
  Nanos min_refresh = 5 * kSecond;        // drain boundaries (unless the queue emptied meanwhile)
  double refresh_holdoff = 0.5;           // no scheduled drain within this * min_refresh
  double drain_fraction = 0.75;           // DRAIN: W = this * rate * rtt_now
  uint32_t drain_after_steps = 3;         // FAST: drain after this many steps in force, q > T
  Nanos path_check = 1 * kSecond;         // DRAIN: judged after this long with the cut in force
  Nanos path_tolerance = 5 * kMilli;      // ... a queue whose floor falls less is not the flow's
  double fall_fraction = 0.5;             // rate_now below this * rate (twice, q > T): link fell
  double unused_fraction = 0.5;           // in flight below this * W: window unused ...
  double unused_decay = 0.25;             // ... and shrinks by this per step
  double startup_growth = 2.0;            // STARTUP clamp >= this * in flight
  uint32_t initial_window_bytes = 16384;  // STARTUP clamp floor; 0 = 64 KB
  uint32_t min_window_segments = 2;       // W >= this many MSS
  // While the service swings: W >= peak * (rtt_min + T), peak the rate samples' maximum,
  // halving every peak_half_life, restarted by a fall unless the rate came back to
  // back_fraction of the peak after one within the horizon (the header's swing window).
  bool swing_window_on = true;
  Nanos peak_half_life = 20 * kSecond;
  double back_fraction = 0.5;
  // A phone without timestamps: the law on the gateway's round trip (the header), T's ceiling,
  // and that ceiling's fraction while the phone's upload is short (yielding_to_upload()).
  bool round_trip_no_ts = true;
  Nanos threshold_ceiling_no_ts = 80 * kMilli;
  double yield_no_ts = 0.5;
  // ... and while the phone's upload steps on its uplink's idle time (set_uplink_law()), T's
  // ceiling: the upload no longer holds the sum of both queues, so the download's round trip
  // is the download's own queue and the upload's ceiling would leave it standing.
  Nanos threshold_ceiling_uplink_law = 30 * kMilli;
};

// The shared constants from the uplink's RsfcParams (same meaning on the other queue), for a
// download whose phone has a regulated upload running (downlink_step_params_from() adds the
// other sets).
DownlinkQueueParams downlink_params_from(const RsfcParams& r);

// On the gateway's round trip both knobs of the phone hold one sum of its two queues, and two
// laws on one sum have no rule of their own for how they share it. While the phone's regulated
// upload delivers short of its link (SubscriberUplink::short_of_best(), the uplink's own
// reading on the gateway's clock), the download steps with these: T's ceiling times
// p.yield_no_ts, so that the download gives the upload room in the sum (lab/EXPERIMENTS.md Q47).
DownlinkQueueParams yielding_to_upload(const DownlinkQueueParams& p);

class DownlinkQueueRegulator {
 public:
  static constexpr uint32_t kDefaultMss = 1460;
  static constexpr Nanos kMinSlotSpacing = 1 * kMilli;  // echo / queue sample slots
  static constexpr int kSlotsPerRtt = 6;
  static constexpr int kRateTicks = 10;          // a rate sample spans >= this many ticks
  static constexpr int kFirstRateSegments = 4;   // the first one: and this many MSS acked
  static constexpr Nanos kAckGap = 30 * kMilli;  // an ACK gap above max(this, I): outage
  static constexpr int kDrainSegments = 4;       // DRAIN: W >= this many MSS

  void on_downlink_segment(Nanos now, const TcpSegment& s, const DownlinkQueueParams& p) {
    on_downlink_segment(now, now, s, p);
  }
  // A segment the gateway holds before it goes on (downlink pacing, pacer.h): it arrived at
  // `now` and leaves at `leaves` (>= now). The queue samples and the round trip are timed from
  // when it leaves, so that the hold is neither read as downlink queue nor sized into the
  // window as round trip; the pacer's hold is bounded on its own (max_hold).
  void on_downlink_segment(Nanos now, Nanos leaves, const TcpSegment& s,
                           const DownlinkQueueParams& p);
  void on_uplink_segment(Nanos now, const TcpSegment& s, const DownlinkQueueParams& p);
  // Whether target_window() at `now` runs a control step (the only place its params' auto-T
  // bounds are read).
  bool step_due(Nanos now) const { return now >= next_step_; }
  // `release`: the flow is a bulk upload (other_way_bulk(), regulator.h): in STARTUP no
  // clamp, past it no difference.
  WindowDecision target_window(Nanos now, const DownlinkQueueParams& p, bool release = false);
  // The right edge the phone's ACK left the gateway with (ack + window as sent).
  void on_window_forwarded(uint32_t edge);

  // --- Read-outs (decision log, metrics, tests); values as of the last control step. ---
  DownlinkState state() const { return state_; }
  // Past its startup and steering the window (SLOW, FAST or DRAIN): the pacer paces only then,
  // and only there is a step that is not ready a held one.
  bool steering() const {
    return state_ == DownlinkState::kSlow || state_ == DownlinkState::kFast ||
           state_ == DownlinkState::kDrain;
  }
  const char* state_name() const { return to_string(state_); }
  bool timestamps() const { return ts_; }
  // The flow runs no law (no timestamps): metrics count it.
  bool fallback() const { return state_ == DownlinkState::kNoTimestamps; }
  // No timestamps: the law runs on the gateway's round trip (the header).
  bool round_trip() const { return gw_clock_; }
  double ns_per_tick() const { return up_delay_.tick().ns_per_tick(); }  // 0 = unknown
  // Whether the pacer may hold this flow's data: steering, on a phone clock it knows, or on
  // the gateway's round trip while the phone's upload steps on its idle time (the pacer then
  // times the phone's ACKs on the gateway's clock: DownlinkPacer::on_phone_ack_untimed()).
  bool paceable() const { return steering() && ns_per_tick() > 0 && (!gw_clock_ || uplink_law_); }
  // On the gateway's round trip: whether the phone's upload stepped on its uplink's idle time
  // since this regulator's last step (PhoneUplinkIdle::law_running(); the engine says so
  // before each use). T's ceiling is then threshold_ceiling_uplink_law, and it may be paced.
  void set_uplink_law(bool running) { uplink_law_ = running; }
  Nanos last_step_at() const { return last_step_at_; }
  // The phone's tick (0 = unknown; none on the gateway's round trip, whose clock is ours).
  double tick_ms() const { return gw_clock_ ? 0.0 : ns_per_tick() / 1e6; }
  bool tick_estimated() const {
    return up_delay_.tick().quality() == TickEstimator::Quality::kEstimated;
  }
  // The phone's tick for its other flows (TickEstimator::shareable); 0 = not yet.
  Nanos measured_tick() const { return gw_clock_ ? 0 : up_delay_.tick().shareable(); }
  // Another flow of the phone measured its tick (TickEstimator::on_sibling).
  void sibling_tick(Nanos g) {
    if (!gw_clock_) up_delay_.on_sibling_tick(g);
  }
  // Filtered, less the offset; on the gateway's round trip both queues.
  std::optional<Nanos> q_down() const { return last_.q_down; }
  // The ACKs' uplink wait (none on the gateway's round trip: in q_down).
  std::optional<Nanos> q_up() const { return gw_clock_ ? std::nullopt : last_.q_up; }
  double rate() const { return last_.rate; }          // bytes/s, phone clock (or the gateway's)
  double rate_now() const { return last_.rate_now; }  // last sample, bytes/s
  std::optional<Nanos> rtt_used() const { return last_.rtt; }  // without own downlink queue
  Nanos rtt_now() const { return last_.rtt_now; }
  std::optional<Nanos> rtt_min() const { return last_.rtt_min; }
  Nanos threshold() const { return last_.threshold; }
  // The controller's window; kNoClamp in STARTUP (target_window() then returns the startup
  // clamp) and without timestamps.
  uint32_t window() const;
  uint32_t link_falls() const { return link_falls_; }              // rate restarted (fall)
  uint32_t path_rebaselines() const { return path_rebaselines_; }  // DRAIN raised the base
  uint32_t drains() const { return drains_; }
  // The packet floor on T is in force: the service swung within the last horizon.
  bool swinging(Nanos now) const { return now < swinging_until_; }
  // The swing window (the header) as of `now`, bytes; 0 while it does not hold.
  double swing_window(Nanos now, const DownlinkQueueParams& p) const;

 private:
  // The signals a step leaves for the read-outs and the segment handlers (the interval).
  struct Readings {
    std::optional<Nanos> q_down;  // standing queue in the downlink buffer
    std::optional<Nanos> q_up;    // the ACKs' filtered uplink wait (read-out only)
    Nanos threshold = 0;          // T
    double rate = 0;              // bytes/s, windowed maximum (restarted by a fall)
    double rate_now = 0;          // bytes/s, the last sample (0: none yet)
    std::optional<Nanos> rtt;     // round trip without the own downlink queue, averaged
    Nanos rtt_now = 0;            // the same, current
    std::optional<Nanos> rtt_min;
  };
  // What a control step decides on (measure()).
  struct Signals : Readings {
    Nanos server_half = 0;
    Nanos interval = 0;    // I: to the next step
    bool ready = false;    // q_down, rtt and a rate exist: the law can run
    bool sending = false;  // the server's data arrived within the last interval
    double in_flight = 0;  // bytes the server has out: gateway's + the server half's
    double q() const { return static_cast<double>(*q_down); }  // ns
    double T() const { return static_cast<double>(threshold); }
  };
  // DRAIN: the drain in progress.
  struct Drain {
    Nanos since = 0;           // entered DRAIN
    Nanos in_force_at = 0;     // the cut took hold (0: not yet)
    double window_before = 0;  // W before the cut
    double rate_before = 0;
    double first_min = -1;      // lowest q_down in the first half of path_check (ns)
    double second_min = -1;     // ... in the second half
    uint32_t falls_before = 0;  // link_falls_ then
    bool scheduled = false;     // at a min_refresh boundary
    bool mid_flow = false;      // the first drain of a regulator started mid-flow
  };
  // A data segment timed for q_down: its end and forwarding time.
  struct Mark {
    Nanos time = 0;
    uint32_t end = 0;
    bool valid = false;
  };
  static constexpr size_t kMarks = 2 * DownlinkQueueEstimator::kSlots;
  // A right edge asked for, and when.
  struct EdgeAt {
    Nanos time = 0;
    uint32_t edge = 0;
    bool valid = false;
  };
  static constexpr size_t kEdges = 8;
  // The phone-clock rate sample in progress.
  struct RateSample {
    int64_t start_ticks = 0;  // TSval of the ACK that opened it
    uint64_t start_bytes = 0;
    bool open = false;
  };

  // Estimators, fed by every segment.
  void take_handshake(Nanos now, const DownlinkQueueParams& p);
  void on_phone_segment(Nanos now, const TcpSegment& s, const DownlinkQueueParams& p);
  void on_data(Nanos now, Nanos leaves, const TcpSegment& s, const DownlinkQueueParams& p);
  void on_ack(Nanos now, const TcpSegment& s, std::optional<Nanos> q,
              std::optional<Nanos> forwarded, std::optional<Nanos> up,
              const DownlinkQueueParams& p);
  std::optional<Nanos> mark_time(uint32_t end) const;
  void note_edge(Nanos now, uint32_t edge, const DownlinkQueueParams& p);
  std::optional<uint32_t> edge_at(Nanos t) const;
  void count_acked(Nanos now, uint32_t ack, int64_t ticks, const DownlinkQueueParams& p);
  void add_rtt(Nanos now, Nanos rtt_no_queue, const DownlinkQueueParams& p);

  // The control step: measure, then one function per state.
  bool step(Nanos now, const DownlinkQueueParams& p);
  Signals measure(Nanos now, const DownlinkQueueParams& p);
  void measure_rate(Nanos now, Signals& s, const DownlinkQueueParams& p);
  static bool acks_late(const Readings& r);
  bool first_sample_due(Nanos now, const Readings& r, Nanos interval) const;
  void check_fall(Nanos now, Signals& s, bool fresh, const DownlinkQueueParams& p);
  Nanos threshold_for(std::optional<Nanos> rtt_min, double rate, bool swinging, bool steady,
                      const DownlinkQueueParams& p) const;
  void startup(Nanos now, const Signals& s, const DownlinkQueueParams& p);
  void slow(Nanos now, const Signals& s, const DownlinkQueueParams& p);
  void fast(Nanos now, const Signals& s, const DownlinkQueueParams& p);
  void drain(Nanos now, const Signals& s, const DownlinkQueueParams& p);

  // SLOW.
  double probe(Nanos now, const Signals& s, const DownlinkQueueParams& p);  // the growth used
  void follow_use(const Signals& s, double prev, double growth, const DownlinkQueueParams& p);
  // FAST.
  void enter_fast(const Signals& s, const DownlinkQueueParams& p);
  void size_fast(const Signals& s, const DownlinkQueueParams& p);
  double bdp_plus_queue(Nanos rtt, const Signals& s, const DownlinkQueueParams& p) const;
  // DRAIN.
  bool refresh_due(Nanos now, const DownlinkQueueParams& p) const;
  void enter_drain(Nanos now, const Signals& s, const DownlinkQueueParams& p, bool scheduled);
  void end_drain(Nanos now, const Signals& s, const DownlinkQueueParams& p);
  void leave_drain(Nanos now, bool evidence);

  static Nanos control_interval(const Readings& r, const DownlinkQueueParams& p);
  Nanos interval(const DownlinkQueueParams& p) const { return control_interval(last_, p); }
  Nanos spacing(const DownlinkQueueParams& p) const;
  Nanos trough_span(const DownlinkQueueParams& p) const;
  uint32_t startup_window(const DownlinkQueueParams& p) const;
  double min_window() const { return static_cast<double>(min_segments_) * mss_; }
  // A cut holds once the phone acknowledged everything sent under the old right edge.
  bool cut_in_force() const { return seq_ge(ack_high_, cut_edge_); }
  std::optional<Nanos> queue_now(Nanos now, const DownlinkQueueParams& p) const;
  double peak_at(Nanos now, const DownlinkQueueParams& p) const;
  void note_peak(Nanos now, const Signals& s, const DownlinkQueueParams& p);
  void note_fall(Nanos now, const DownlinkQueueParams& p);

  // Estimators.
  HandshakeTimer handshake_;
  DownlinkQueueEstimator queue_;   // q_down
  UplinkDelayEstimator up_delay_;  // g (and q_up) from the phone's TSvals
  EchoSampler server_echo_;        // phone TSvals -> server TSecr
  TsUnwrapper ack_ticks_;          // the ACKs' TSvals, for the phone-clock rate
  WindowedMin<4> path_min_;  // gateway -> phone -> gateway less both queues (and the handshake)
  WindowedMin<4> server_half_min_;
  WindowedMax<4> rate_max_;  // bytes/s
  Ewma rtt_now_;             // phone side without the own downlink queue (ns)
  Ewma rtt_avg_;
  Nanos rtt_avg_at_ = 0;
  RateSample rate_sample_;
  RateSample short_sample_;           // the service's swing on the packet floor's scale
  uint64_t acked_ = 0;                // bytes the phone acknowledged, total
  int64_t last_ack_ticks_ = 0;        // TSval of the last ACK that advanced
  uint32_t ack_high_ = 0;             // highest cumulative ACK from the phone
  uint32_t data_high_ = 0;            // highest data end forwarded to the phone
  uint32_t sample_mark_ = 0;          // next data end to time for q_down (every W / kSlotsPerRtt)
  std::array<Mark, kMarks> marks_{};  // the latest timed segments (a ring, next_mark_ below)
  Nanos last_data_at_ = 0;
  Nanos confirmed_at_ = 0;  // last raw q_down sample at min(d): the queue was empty
  Nanos offset_ = 0;        // baseline offset on q_down (DRAIN found a longer path)
  Nanos offset_at_ = 0;
  uint32_t mss_ = kDefaultMss;
  bool ts_ = false;
  bool gw_clock_ = false;  // no timestamps: the phone's clock is the gateway's (round_trip())
  bool ts_decided_ = false;
  bool handshake_taken_ = false;
  bool ack_known_ = false;
  bool data_known_ = false;
  bool confirmed_ = false;
  uint8_t next_mark_ = 0;
  uint32_t in_flight_max_ = 0;  // data_high_ - ack_high_, highest since the last step

  // The last step's signals.
  Readings last_;

  // Control state.
  double window_ = 0;         // W, bytes (valid when clamping_)
  double startup_clamp_ = 0;  // STARTUP: the clamp the last step set (bytes)
  Nanos next_step_ = 0;
  Nanos last_step_at_ = 0;
  DownlinkState state_ = DownlinkState::kStartup;
  bool clamping_ = false;
  uint16_t fast_steps_in_force_ = 0;
  uint8_t fall_streak_ = 0;  // rate samples in a row below fall_fraction * rate, q > T
  bool held_fall_ = false;   // the swing window's peak held through the last fall; no comeback
  uint8_t next_edge_ = 0;    // edges_'s next slot (declared here, it fills padding)
  bool uplink_law_ = false;  // set_uplink_law() (in padding too)
  uint32_t min_segments_ = 2;
  uint32_t probe_streak_ = 0;
  Nanos probe_wait_ = 0;       // SLOW: no probe step before this
  double probe_rate_ = 0;      // rate_now at the last probe step
  double probe_growth_ = 0;    // ... and the growth that step made
  double recover_window_ = 0;  // W before the last fall: probed back to quickly
  Nanos recover_until_ = 0;
  uint32_t edge_max_ = 0;               // highest right edge asked for (ack + W) or forwarded
  uint32_t cut_edge_ = 0;               // edge_max_ when W was last cut
  std::array<EdgeAt, kEdges> edges_{};  // the latest right edges asked for (a ring)
  bool window_used_ = false;  // since the last step the server's data reached its right edge
  bool edge_known_ = false;

  // DRAIN.
  bool drained_once_ = false;  // a drain has seen the queue empty (min(d) confirmed)
  bool suspect_ = false;       // confirmations may be against a re-learnt min(d)
  // q_down went past twice threshold_ceiling after STARTUP within the horizon: T keeps the
  // full ceiling until then (measure(), threshold_for()). Four bytes, in padding.
  CoarseDeadline queue_swung_until_;
  Drain drain_;
  Nanos evidence_since_ = 0;
  Nanos swinging_until_ = 0;  // the packet floor on T holds until then

  uint32_t link_falls_ = 0;
  uint32_t path_rebaselines_ = 0;
  uint32_t drains_ = 0;

  // The swing window (with held_fall_ above). Its peak is as of the last step (last_step_at_);
  // the last fall was at recover_until_ - horizon. The members are ordered so that they add no
  // padding: a million flows' regulators stay within issue 17's 512 MiB.
  float fall_peak_ = 0;     // the peak when the link last fell (bytes/s)
  double peak_ = 0;         // bytes/s
  Nanos bursty_until_ = 0;  // the link came back from a fall: falls are slow spells till then
};

// The parameter sets a download's steps choose from, and the choice, for the engine and the
// simulator alike: next to the phone's upload (the base); with the phone uploading nothing,
// T's ceiling raised to `ceiling_alone` where that is higher; on the gateway's round trip while
// the phone's regulated upload is short of its link, yielding_to_upload(). The choice is made
// at a step only: the sets differ in T's bounds alone, which only a step reads.
class DownlinkStepParams {
 public:
  enum class Choice : uint8_t { kNextToUpload, kAlone, kYield };

  DownlinkStepParams() : DownlinkStepParams(DownlinkQueueParams{}, 0) {}
  DownlinkStepParams(const DownlinkQueueParams& next_to_upload, Nanos ceiling_alone);

  const DownlinkQueueParams& base() const { return (*this)[Choice::kNextToUpload]; }
  const DownlinkQueueParams& operator[](Choice c) const { return sets_[static_cast<size_t>(c)]; }

  // The set q's target_window() at `now` takes. `uploads()` (a bulk upload of the phone's is
  // running) and `upload_short()` (SubscriberUplink::short_of_best) are asked only when the
  // answer can change the choice: never for a download with timestamps whose two ceilings are
  // the same, never between steps.
  template <class Uploads, class Short>
  Choice choose(const DownlinkQueueRegulator& q, Nanos now, Uploads&& uploads,
                Short&& upload_short) const {
    if (!q.step_due(now)) return Choice::kNextToUpload;  // between steps: one compare
    const bool two_ceilings = differs(Choice::kAlone);
    const bool yields = q.round_trip() && differs(Choice::kYield);
    if (!(two_ceilings || yields)) return Choice::kNextToUpload;
    if (!uploads()) return two_ceilings ? Choice::kAlone : Choice::kNextToUpload;
    return yields && upload_short() ? Choice::kYield : Choice::kNextToUpload;
  }

 private:
  // Whether set c steps otherwise than the base: in T's ceiling (kAlone) or in the round
  // trip's (kYield), the bounds each changes.
  bool differs(Choice c) const {
    const DownlinkQueueParams& x = (*this)[c];
    return x.threshold_ceiling != base().threshold_ceiling ||
           x.threshold_ceiling_no_ts != base().threshold_ceiling_no_ts ||
           x.threshold_ceiling_steady != base().threshold_ceiling_steady;
  }

  std::array<DownlinkQueueParams, 3> sets_;  // indexed by Choice
};

// The engine's sets: downlink_params_from(r) next to an upload, T's ceiling
// r.threshold_ceiling_download_alone for a download alone where that is higher.
DownlinkStepParams downlink_step_params_from(const RsfcParams& r);

}  // namespace rsfc
