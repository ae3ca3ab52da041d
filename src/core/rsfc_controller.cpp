#include "rsfc/core/rsfc_controller.h"

#include <algorithm>
#include <cmath>

namespace rsfc {

const char* to_string(RsfcState s) {
  switch (s) {
    case RsfcState::kStartup:
      return "startup";
    case RsfcState::kSlow:
      return "slow";
    case RsfcState::kFast:
      return "fast";
    case RsfcState::kMonitor:
      return "monitor";
  }
  return "?";
}

namespace {

double seconds(Nanos t) {
  return static_cast<double>(t) / static_cast<double>(kSecond);
}

uint32_t window_bytes(double w) {
  return w >= static_cast<double>(kNoClamp - 1) ? kNoClamp - 1 : static_cast<uint32_t>(w);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Estimators, fed by every segment.

void UplinkRegulator::take_handshake(Nanos now, const RsfcParams& p) {
  if (!ts_decided_ && handshake_.synack_seen()) {
    ts_ = handshake_.syn_timestamps();
    ts_decided_ = true;
  }
  if (handshake_taken_ || !handshake_.complete()) return;
  handshake_taken_ = true;
  if (auto ph = handshake_.phone_half()) phone_half_min_.update(now, *ph, horizon(p));
  if (auto sh = handshake_.server_half()) server_half_min_.update(now, *sh, horizon(p));
  if (auto pair = handshake_.ts_pair()) {
    delay_.on_handshake(pair->a_syn, pair->ts_syn, pair->a_ack, pair->ts_ack);
  }
}

void UplinkRegulator::on_uplink_segment(Nanos now, const TcpSegment& s, const RsfcParams& p) {
  handshake_.on_segment(now, true, s);
  if (!ts_decided_ && !handshake_.synack_seen() && !s.syn()) ts_ = s.has_ts;  // handshake unseen
  take_handshake(now, p);
  if (s.syn()) delivered_.start(s.seq + 1);
  const Nanos iv = interval(p);
  if (ts_ && s.has_ts)
    on_uplink_timestamps(now, s, std::max(kMinSlotSpacing, iv / kSlotsPerRtt), p);
  if (s.payload_len == 0 || s.syn()) return;
  last_data_at_ = now;
  const uint32_t fresh = delivered_.on_data(now, s.seq, s.payload_len, iv);
  if (sub_ && fresh > 0) sub_->on_delivered(now, fresh, iv);
  if (!ts_) on_uplink_lag(now, s, p);
  if (ts_ && s.has_ts && sub_ && fresh > 0) track_arrival(now, fresh);
}

// The link's service while the flow's data queued, from consecutive data arrivals: an arrival
// whose segment waited at least the gap since the previous one left the link busy (with the
// flow's or a sibling's data) for that gap. A gap of kOutage or more in which no sibling
// delivered either, closed by a segment that waited through it (its t_buff up by at least
// half the gap on the segment before: a baseline that moved up, a longer path, is no wait),
// is the link's silence: an outage. Needs the subscriber's entry (its bytes show the
// siblings'); t_buff is this segment's (on_uplink_timestamps() ran first).
void UplinkRegulator::track_arrival(Nanos now, uint32_t fresh) {
  const uint64_t sub_bytes = sub_->total_bytes();
  const uint64_t bytes = sub_bytes - sub_bytes_at_arrival_;  // this segment's and the siblings'
  const Nanos gap = now - last_arrival_;
  const Nanos tb = delay_.last_raw().value_or(0);
  if (last_arrival_ > 0 && gap > 0) {
    const bool alone = bytes <= fresh;
    if (gap >= kOutage && alone && 2 * (tb - last_arrival_tb_) >= gap) {
      silence_ = std::max(silence_, gap);
    } else if (tb >= gap) {
      busy_bytes_ += bytes;
      busy_time_ += gap;
    }
  }
  last_arrival_ = now;
  last_arrival_tb_ = tb;
  sub_bytes_at_arrival_ = sub_bytes;
}

// With timestamps: t_buff from the TSval, and the phone-side round trip when the segment
// echoes a TSval the gateway timed.
void UplinkRegulator::on_uplink_timestamps(Nanos now, const TcpSegment& s, Nanos spacing,
                                           const RsfcParams& p) {
  std::optional<Nanos> ph;  // gateway -> phone -> gateway, when this segment echoes a slot
  if (s.ack_flag()) ph = phone_echo_.on_echo(now, s.tsecr);
  const auto tb = delay_.on_segment(now, s.tsval, horizon(p), p.tbuff_filter,
                                    ph ? std::optional<Nanos>(now - *ph) : std::nullopt);
  server_echo_.on_forward(now, s.tsval, spacing);
  if (delay_.min_drops() != min_drops_seen_) {
    // min(d) fell: the round trips measured against the old one (sample minus its t_buff)
    // were too long by the queue hidden in it. Learn them afresh.
    min_drops_seen_ = delay_.min_drops();
    phone_rtt_now_.reset();
    phone_rtt_avg_.reset();
  }
  // An empty buffer as a variable link shows it (see refresh_due()).
  if (tb && static_cast<double>(*tb) <= last_.packet_time) near_empty_at_ = now;
  if (!ph) return;
  phone_half_min_.update(now, *ph, horizon(p));
  if (tb) add_phone_rtt(now, std::max<Nanos>(0, *ph - *tb), p);
}

void UplinkRegulator::add_phone_rtt(Nanos now, Nanos rtt_no_queue, const RsfcParams& p) {
  const double x = static_cast<double>(rtt_no_queue);
  phone_rtt_now_.add(x, p.rtt_gain);
  // Slow, time-based average: the round trip the window is sized on.
  if (!phone_rtt_avg_.has()) {
    phone_rtt_avg_.add(x, 1.0);
  } else if (now > phone_rtt_avg_at_) {
    const double dt = static_cast<double>(now - phone_rtt_avg_at_);
    const double tau = static_cast<double>(std::max<Nanos>(p.rtt_smoothing, 1));
    phone_rtt_avg_.add(x, 1.0 - std::exp(-dt / tau));
  }
  phone_rtt_avg_at_ = now;
}

// Without timestamps: the server half by seq/ack matching, the phone side by the
// window-opening lag (which includes a download's downlink queue).
void UplinkRegulator::on_uplink_lag(Nanos now, const TcpSegment& s, const RsfcParams& p) {
  server_probe_.on_data(now, s.seq, s.payload_len);
  const auto lag = lag_.on_data(now, s.seq + s.payload_len);
  if (!lag) return;
  phone_half_min_.update(now, *lag, horizon(p));
  lag_min_.update(now, *lag, lag_window(interval(p), p));
  phone_rtt_now_.add(static_cast<double>(*lag), p.rtt_gain);
  const auto base = phone_half_min_.get(now, horizon(p));
  const Nanos tol = std::max(
      UplinkDelayEstimator::kConfirmFloor,
      base ? static_cast<Nanos>(p.lag_confirm_fraction * static_cast<double>(base->value)) : 0);
  if (base && *lag <= base->value + tol) {
    lag_confirmed_at_ = now;
    lag_confirmed_ = true;
  }
}

void UplinkRegulator::on_downlink_segment(Nanos now, const TcpSegment& s, const RsfcParams& p) {
  handshake_.on_segment(now, false, s);
  // The peer's MSS option caps the phone's segments.
  if (s.syn() && s.mss_option > 0) mss_ = s.mss_option;
  take_handshake(now, p);
  if (s.ack_flag() && !s.syn()) {
    if (!ack_known_ || seq_gt(s.ack, ack_max_)) ack_max_ = s.ack;
    ack_known_ = true;
    if (!ts_) {
      if (auto sh = server_probe_.on_ack(now, s.ack)) server_half_min_.update(now, *sh, horizon(p));
    }
  }
  if (ts_ && s.has_ts) {
    const Nanos spacing = std::max(kMinSlotSpacing, interval(p) / kSlotsPerRtt);
    phone_echo_.on_forward(now, s.tsval, spacing);
    if (s.ack_flag()) {
      if (auto sh = server_echo_.on_echo(now, s.tsecr)) {
        server_half_min_.update(now, *sh, horizon(p));
      }
    }
  }
}

void UplinkRegulator::on_window_forwarded(Nanos now, uint32_t right_edge, const RsfcParams& p) {
  if (!edge_known_ || seq_gt(right_edge, edge_max_)) edge_max_ = right_edge;
  edge_known_ = true;
  if (!ts_) {
    const Nanos spacing = std::max(kMinSlotSpacing, interval(p) / kSlotsPerRtt);
    lag_.on_edge_forwarded(now, right_edge, spacing);
  }
}

// ---------------------------------------------------------------------------------------
// The control step.

WindowDecision UplinkRegulator::target_window(Nanos now, const RsfcParams& p, bool release) {
  WindowDecision d;
  if (now >= next_step_) d.stepped = step(now, p);
  d.window = window();
  // In its startup the clamp lets go of a bulk download (kStartupHoldOtherWay).
  if (!clamping_) d.window = release ? kNoClamp : startup_window(p);
  return d;
}

uint32_t UplinkRegulator::window() const {
  if (!clamping_) return kNoClamp;
  return window_bytes(std::max(window_, min_window()));
}

uint32_t UplinkRegulator::startup_window(const RsfcParams& p) const {
  const double base = startup_floor_bytes(p.initial_window_bytes);
  return window_bytes(std::max(base, startup_inflight_ * p.startup_growth));
}

bool UplinkRegulator::step(Nanos now, const RsfcParams& p) {
  min_segments_ = p.min_window_segments;
  const Signals s = measure(now, p);
  last_ = s;
  next_step_ = now + s.interval;
  if (state_ == RsfcState::kStartup && delivered_.has_sample()) {
    // In flight by Little's law on the round trip without the flow's own queue: sized on the
    // round trip the phone sees, the clamp grows with the queue it lets in, and on a slow link
    // with a deep buffer (2G) it keeps growing until the signals exist, the queue seconds long
    // by then (EXPERIMENTS Q24).
    const Nanos seen = std::max(s.rtt_min.value_or(0), s.rtt_now);
    startup_inflight_ = s.rate * seconds(seen);
  }
  if (s.ready) {
    switch (state_) {
      case RsfcState::kStartup:
        startup(now, s, p);
        break;
      case RsfcState::kSlow:
        slow(now, s, p);
        break;
      case RsfcState::kFast:
        fast(now, s, p);
        break;
      case RsfcState::kMonitor:
        monitor(now, s, p);
        break;
    }
  }
  idle_.steered = false;
  if (!ts_ && sub_ != nullptr && p.idle_law) idle_law(now, s);
  last_step_at_ = now;  // refresh_due() looks for a boundary since the previous step
  return s.ready;
}

// ---------------------------------------------------------------------------------------
// Without timestamps: the uplink's idle time (lab/EXPERIMENTS.md Q54-Q57).
//
// A phone without timestamps gives one delay: the lag, a round trip through both of its
// queues, so a download's downlink queue reads as the upload's and the lag law holds the upload
// to a window its own link does not need (3G: the phone's p95 under both 340 ms against the
// 32 KB clamp's 136). The uplink's own state shows in how the phone's packets come instead
// (PhoneUplinkIdle: every packet it sends, its download's ACKs included): a link that sat idle
// during a step had room for more of the upload; one never idle holds a queue. Each step the
// law takes the idle fraction f of the step and moves its own W: past kIdleGrowAt it grows by
// 1 / (1 - f) (at most kIdleMaxGrowth, at least a segment), under kIdleShrinkAt it shrinks by
// kIdleShrink; the lag past kIdleQueueCap (a queue the law let stand) cuts it by kIdleCut. It
// steps only while the packets' spacing is even (the spread of back-to-back gaps within
// kIdleMaxSpread): on a link that serves in bursts (UMTS, its scheduler's slots) an idle gap
// is the scheduler's and not room; the lag law's window stands then. The capacity that times
// a gap is the most the phone sent in a step over kIdleCapacityWindow.
namespace {
constexpr Nanos kIdleCapacityWindow = 2 * kSecond;
constexpr double kIdleMaxSpread = 0.3;  // coefficient of variation of back-to-back gaps
constexpr Nanos kIdleQueueCap = 100 * kMilli;
constexpr double kIdleCut = 0.85;
constexpr double kIdleGrowAt = 0.03;  // idle fraction of the step
constexpr double kIdleShrinkAt = 0.005;
constexpr double kIdleMaxGrowth = 1.25;
constexpr double kIdleShrink = 0.95;
constexpr uint32_t kIdleMinGaps = 5;  // back-to-back gaps for a spread
}  // namespace

// Whether the step's back-to-back gaps say the link served evenly: kIdleMinGaps of them or
// more, their spread (coefficient of variation of x) within kIdleMaxSpread. Gaps that are all
// zero (the phone's packets came in bunches, each bunch at one instant: a link that serves in
// slots, or a batch of packets read at one time) have no spread: even, as the lab's prototype
// read them (Q57; its 0 / 0 compared false).
bool UplinkRegulator::even_service(const PhoneUplinkIdle::Counts& d) {
  if (d.gaps < kIdleMinGaps) return false;
  const double x = static_cast<double>(d.x1) / PhoneUplinkIdle::kXUnit / d.gaps;
  if (x <= 0) return true;
  const double x2 = static_cast<double>(d.x2) / PhoneUplinkIdle::kXUnit / d.gaps;
  return std::sqrt(std::max(0.0, x2 - x * x)) / x <= kIdleMaxSpread;
}

void UplinkRegulator::idle_law(Nanos now, const Signals& s) {
  PhoneUplinkIdle& phone = sub_->idle();
  // The step's share of the phone's counts: a flow with data of its own takes it (a download's
  // request makes an uplink regulator too; its counts are its own to keep).
  PhoneUplinkIdle::Counts d;
  if (last_data_at_ > 0) {
    const PhoneUplinkIdle::Counts& c = phone.counts();
    d = {c.idle - idle_.seen.idle, c.x1 - idle_.seen.x1, c.x2 - idle_.seen.x2,
         c.bytes - idle_.seen.bytes, c.gaps - idle_.seen.gaps};
    idle_.seen = c;
  }
  const Nanos since = idle_.step_at;
  idle_.step_at = now;
  if (since == 0 || now <= since) return;
  const auto step = static_cast<double>(now - since);
  idle_.capacity.update(now, static_cast<int64_t>(d.bytes * 1e9 / step), kIdleCapacityWindow);
  const auto cap = static_cast<double>(idle_.capacity.get(now, kIdleCapacityWindow)->value);
  if (last_data_at_ > 0) phone.set_capacity(cap);
  if (!s.ready || state_ == RsfcState::kStartup || !clamping_ || cap <= 0) return;
  double w = idle_.window > 0 ? idle_.window : window_;
  if (!even_service(d)) {
    idle_.window = static_cast<float>(window_);  // the lag law's window stands
    return;
  }
  const double f = std::min(static_cast<double>(d.idle), step) / step;
  if (s.t_buff && *s.t_buff > kIdleQueueCap) {
    w = std::max(w * kIdleCut, min_window());
  } else if (f > kIdleGrowAt) {
    w = std::max(w * std::min(kIdleMaxGrowth, 1.0 / std::max(1.0 - f, 0.01)), w + mss_);
  } else if (f < kIdleShrinkAt) {
    w = std::max(w * kIdleShrink, min_window());
  }
  idle_.window = static_cast<float>(w);
  window_ = w;
  if (state_ == RsfcState::kMonitor) state_ = RsfcState::kSlow;
  idle_.steered = true;
  idle_.share = static_cast<uint16_t>(std::lround(f * 65535));
  phone.law_stepped(now);
}

// The step's signals, from the estimators as they stand at `now` (the header lists them).
UplinkRegulator::Signals UplinkRegulator::measure(Nanos now, const RsfcParams& p) {
  Signals s;
  s.rtt_now = last_.rtt_now;
  const auto ph = phone_half_min_.get(now, horizon(p));
  const auto sh = server_half_min_.get(now, horizon(p));
  s.server_half = sh ? sh->value : 0;
  if (ph) {
    s.phone_half = ph->value;
    s.rtt_min = ph->value + s.server_half;
  }
  if (ts_) {
    measure_timestamps(now, s, p);
  } else if (ph) {
    measure_lag(now, s, p);
  }
  // T from the minimum round trip. A flow that started without its handshake (adopted after a
  // restart, or regulated after a reload) took its phone-side minimum behind the queue that stood
  // then. Held below T, that queue never empties, the minimum keeps it, and T, clamped from the
  // minimum, stays high enough to hold it (lab: an adopted upload at T 80 ms on a 40 ms path, its
  // level 40 ms above the one before the restart, for 6 s). The round trip without the own queue is
  // then below that minimum: T comes from it.
  const bool queue_in_min = !handshake_taken_ && s.rtt && s.rtt_min && *s.rtt < *s.rtt_min;
  s.interval = control_interval(s, p);
  s.own_rate = delivered_.max(now, s.interval);
  s.link_rate = std::max(s.own_rate, sub_ ? sub_->rate(now, s.interval) : 0.0);
  if (s.link_rate > 0) {
    s.packet_time = static_cast<double>(mss_) / s.link_rate * static_cast<double>(kSecond);
  }
  // The queue sign: a buffer past its level after STARTUP is a link whose service swings, and T
  // keeps its full ceiling until a horizon passes without that (threshold_for()). The level is
  // twice the ceiling plus half the base round trip: the law moves the window once a round trip,
  // and on a steady link its own filtered queue peaks higher the longer that is (the simulator,
  // T 10 ms: 55 ms at a 60 ms round trip, 75 at 100, 107 at 200; the lab's 3G and LTE up to
  // 61 ms, over twice the ceiling alone: EXPERIMENTS Q53). Read at every step, the full
  // ceiling's included (reading it only under the steady ceiling lost in the lab, Q52).
  const Nanos level = 2 * p.threshold_ceiling + (s.rtt_min ? *s.rtt_min / 2 : 0);
  if (state_ != RsfcState::kStartup && s.t_buff && *s.t_buff > level) {
    queue_swung_until_.set(now + horizon(p));
  }
  s.threshold = threshold_for(queue_in_min ? s.rtt : s.rtt_min, s.packet_time, p,
                              !queue_swung_until_.pending(now));
  s.rate = subscriber_share(now, s, p);
  s.ready = s.t_buff && s.rtt && s.rate > 0 && delivered_.has_sample();
  if (s.ready) {
    s.sending = now - last_data_at_ <= s.interval;
    s.in_flight = s.rate * (seconds(s.rtt_now) + seconds(*s.t_buff));
  }
  measure_link(s);
  if (!s.ready) return s;
  // Queueing the flow may keep because the round trip is below its recent maximum (a
  // concurrent download's downlink queue breathing): filling those gaps keeps the uplink busy
  // without raising the phone's total round trip above that maximum.
  // Never negative: while the round trip climbs above its average (the download's queue
  // growing), the upload's ACKs arrive later and its own buffer runs empty; lowering the
  // thresholds then would stop the probing exactly when the window has to follow the round
  // trip up.
  s.slack = static_cast<double>(std::max<Nanos>(0, *s.rtt - s.rtt_now));
  s.long_round_trip = s.rtt_now > p.max_interval;
  return s;
}

// The round trip without the own queue contains the downlink queueing a concurrent download
// causes (the upload's ACKs wait in it): sizing on rtt_min instead starves the upload.
void UplinkRegulator::measure_timestamps(Nanos now, Signals& s, const RsfcParams& p) const {
  if (delay_.ready()) s.t_buff = delay_.filtered(now, p.tbuff_filter);
  if (!phone_rtt_now_.has()) return;
  const Nanos phone_now = std::llround(phone_rtt_now_.get());
  s.rtt_now = phone_now + s.server_half;
  s.rtt = std::llround(phone_rtt_avg_.has() ? phone_rtt_avg_.get() : phone_rtt_now_.get()) +
          s.server_half;
}

// The link under the flow since the previous step. A standing queue of the flow's own keeps
// the link busy: the flow's data arrives at about its rate rho. A link that falls (capacity
// drop) delivers less while the queue grows; one that stops (outage) delivers nothing, then
// the backlog at once. The silence is left out of the delivery, so that a link that is back
// is not sized on the time it was out. Timestamps only: without them a gap in the arrivals
// cannot be told from a phone that did not send.
void UplinkRegulator::measure_link(Signals& s) {
  s.silence = silence_;
  silence_ = 0;
  if (!s.ready || !sub_ || !ts_) {
    busy_time_ = 0;
    busy_bytes_ = 0;
    return;
  }
  s.outage = s.silence > 0;
  // A few packets' worth of service to judge the link by (a slow link: over several steps).
  if (busy_time_ <= 0 || busy_bytes_ < kJudgeSegments * mss_) return;
  s.delivery = static_cast<double>(busy_bytes_) / seconds(busy_time_) / s.link_rate;
  busy_time_ = 0;
  busy_bytes_ = 0;
  s.link_fell =
      s.above(s.T()) && s.delivery < kFallFraction && (!last_.t_buff || *s.t_buff > *last_.t_buff);
}

// Without timestamps: the minimum phone-side round trip (+ server half) and no slack; t_buff
// is the lag's short minimum above it.
void UplinkRegulator::measure_lag(Nanos now, Signals& s, const RsfcParams& p) const {
  s.rtt = s.rtt_min;
  s.rtt_now = *s.rtt;
  if (const auto f = lag_min_.get(now, lag_window(control_interval(s, p), p))) {
    s.t_buff = std::max<Nanos>(0, f->value - s.phone_half);
  }
}

Nanos UplinkRegulator::threshold_for(std::optional<Nanos> rtt_min, double packet_time,
                                     const RsfcParams& p, bool steady) const {
  if (p.threshold) return *p.threshold;
  const Nanos g = static_cast<Nanos>(delay_.tick().ns_per_tick());
  // A link whose buffer never swung needs no queue above a few packets (the steady ceiling;
  // timestamps only: the lag below holds the downloads' queue too).
  const AutoBounds b = auto_bounds(p.threshold_floor, p.threshold_ceiling,
                                   p.threshold_ceiling_steady, steady && ts_);
  Nanos lo = std::max(b.floor, static_cast<Nanos>(p.tick_multiple * static_cast<double>(g)));
  // A few packets' service at the link's rate: under one packet's time the flow's queue is
  // empty between packets and the link idles (a 10 ms T on a 0.5 Mbit/s uplink, 23 ms a
  // packet: the upload 96 -> 88 % in the simulator, lab/EXPERIMENTS.md Q51).
  lo = std::max(lo, packet_floor(p.threshold_packets, packet_time, p.threshold_packets_ceiling));
  // Without timestamps t_buff is the window-opening lag, and that lag also carries the queue
  // of the phone's downloads (their data delays the ACK that opens the window): a T that leaves
  // no room for it holds the upload below its link (3g-nots: 84 -> 43 % at 30 ms).
  const Nanos hi = std::max(ts_ ? b.ceiling : p.threshold_ceiling_lag, lo);
  return std::clamp(rtt_min ? *rtt_min : lo, lo, hi);
}

Nanos UplinkRegulator::control_interval(const Readings& r, const RsfcParams& p) {
  const Nanos base = r.rtt ? *r.rtt : r.rtt_min ? *r.rtt_min : 0;
  const Nanos hi = std::max(p.max_interval, p.control_interval_floor);
  return std::clamp(base, p.control_interval_floor, hi);
}

Nanos UplinkRegulator::lag_window(Nanos interval, const RsfcParams& p) {
  return std::max(p.tbuff_filter, 2 * interval);
}

// A flow's share of its subscriber's link (see SubscriberUplink): its part of the bytes all
// the subscriber's regulated uploads delivered since this flow's previous step, pulled
// share_equalize of the way toward an equal split among the members that use their windows
// (an idle or application-limited flow, an iperf control connection, does not count: it would
// claim a share it never fills). The flow's own windowed maximum still caps it.
// Only a flow that delivered something since its previous step reads the shared entry (a
// download's ACK-only flow or an idle one never does: no cache miss per step); after such a
// gap the snapshots start afresh and the cap waits a step. Both totals only grow while this
// flow stays attached (attach() takes fresh snapshots).
double UplinkRegulator::subscriber_share(Nanos now, const Signals& s, const RsfcParams& p) {
  double rate = s.own_rate;
  if (!sub_ || !p.per_subscriber) return rate;
  const uint64_t own_total = delivered_.total_bytes();
  const uint64_t own = own_total - share_.own_bytes;
  share_.own_bytes = own_total;
  if (own == 0) {
    share_.counted = false;
    return rate;
  }
  const uint64_t sub_total = sub_->total_bytes();
  const uint64_t all = share_.counted ? sub_total - share_.sub_bytes : 0;
  share_.sub_bytes = sub_total;
  share_.counted = true;
  if (clamping_ && s.t_buff && s.rtt &&
      rate * (seconds(s.rtt_now) + seconds(*s.t_buff)) >= p.unused_fraction * window_) {
    sub_->report_active(now, share_.epoch);
  }
  if (all > own && sub_->has_sample()) {
    const double share = static_cast<double>(own) / static_cast<double>(all);
    const double equal = 1.0 / static_cast<double>(sub_->active(now));
    const double mine = (1.0 - p.share_equalize) * share + p.share_equalize * equal;
    rate = std::min(rate, mine * sub_->rate(now, s.interval));
  }
  return rate;
}

// ---------------------------------------------------------------------------------------
// STARTUP: the first window is the flow's in-flight estimate.

void UplinkRegulator::startup(Nanos now, const Signals& s, const RsfcParams& p) {
  clamping_ = true;
  evidence_since_ = now;
  if (s.above(s.T())) {
    window_ = std::max(s.in_flight, min_window());
    enter_fast(now, s, p);
  } else {
    window_ = std::max(s.in_flight * (1.0 + p.growth_per_rtt), min_window());
    state_ = RsfcState::kSlow;
  }
  (void)drain_now(now, s, p);
}

// An adopted flow's first drain (on_adopted()): unscheduled, to the floor (its minimum is
// not confirmed), as soon as the flow sends.
bool UplinkRegulator::drain_now(Nanos now, const Signals& s, const RsfcParams& p) {
  if (!drain_at_start_ || !s.sending) return false;
  drain_at_start_ = false;
  enter_monitor(now, s, p, false, true);
  return true;
}

// ---------------------------------------------------------------------------------------
// SLOW: probe while the buffer is empty, hold while the queue is at most T.

void UplinkRegulator::slow(Nanos now, const Signals& s, const RsfcParams& p) {
  // The boundary first: the step that crosses it is the only one that sees it due, and a
  // flow that went to the fast state there would skip the scheduled drain (and with it the
  // path check) for a whole period.
  if (s.sending && refresh_due(now, p)) {
    enter_monitor(now, s, p, true);
    return;
  }
  if (drain_now(now, s, p)) return;
  if (s.above(s.T())) {
    enter_fast(now, s, p);
    return;
  }
  const double prev = window_;
  bool restoring = false;
  if (s.below(p.probe_below * s.T()) || within_one_packet(s)) {
    restoring = probe(now, s, p);
  } else {
    // Hold: the queue is where it should be (a capacity increase drains the buffer and is
    // probed then; growing here made a sawtooth). Without timestamps the reading includes a
    // download's downlink queue, which keeps the flow in this band while its own buffer may
    // be empty: there the window keeps creeping up by one MSS per step (lab, 3G without
    // timestamps: upload with download 82 % of unregulated without the creep, 87 % with it).
    if (!ts_) window_ += static_cast<double>(mss_);
    probe_streak_ = 0;
  }
  follow_use(s, prev, p, restoring);
}

// Every d sample contains one packet's transmission at the bottleneck, so a min(d) taken at
// a higher rate reads low after a capacity drop (2 -> 0.5 Mbit/s: 6 -> 24 ms per 1500-byte
// packet) until it ages out, and t_buff over-reads by the difference. A reading within one
// packet's time at the link's current rate (the subscriber's, which its flows share) still
// counts as an empty buffer: less than one packet is no standing queue.
bool UplinkRegulator::within_one_packet(const Signals& s) {
  return s.packet_time > 0 && s.below(s.packet_time);
}

// Growth proportional to the flow's own window, so N flows sharing one buffer grow together
// like one flow. Each step adds at most probe_step_queue * T of queue should the link turn out
// to be full; the allowance doubles with every further step that still finds the buffer empty
// (decisive when far from capacity, careful near it).
bool UplinkRegulator::probe(Nanos now, const Signals& s, const RsfcParams& p) {
  const double prev = window_;
  const double streak = static_cast<double>(1u << std::min(probe_streak_, p.probe_doublings));
  const double step_cap = s.rate * p.probe_step_queue * seconds(s.threshold) * streak;
  window_ += std::max(std::min(p.growth_per_rtt * window_, step_cap), static_cast<double>(mss_));
  // The buffer is empty: the phone is window-limited. If the round trip grew (the upload's
  // ACKs queue behind a download), the window must follow it at once, not by probe steps:
  // what the fast state would leave.
  window_ = std::max(window_, bdp_plus_queue(s.rtt_now, s, p));
  // The link fell, and the buffer reads as empty as it did at the rate the link had then:
  // the link is back. Double toward the window it carried, each step checking the buffer.
  // (On a link still slower, every d holds the longer transmission of a packet, and an empty
  // buffer reads about the difference above a min(d) taken before the fall.)
  // (A risen min(d), aged out or re-based since the fall, no longer tells the rates apart.)
  const bool restoring =
      recovering(now) && delay_.min_rises() == fall_rises_ && s.below(fall_empty_);
  if (restoring) {
    window_ = std::max(window_, std::min(2.0 * prev, fall_window_));
    recovery_tried_ = true;
  }
  if (window_ >= fall_window_) fall_window_ = 0;
  ++probe_streak_;
  return restoring;
}

// Never grow a window the phone does not use; shrink it only when clearly unused (the
// in-flight estimate is rough: rate and round trip both fluctuate). A window being restored
// after the link fell is exempt: the phone used it before, and rho still has the fall in it.
void UplinkRegulator::follow_use(const Signals& s, double prev, const RsfcParams& p,
                                 bool restoring) {
  if (!s.sending) {
    window_ = prev;  // no data: no evidence either way
  } else if (!restoring) {
    const double cap = (1.0 + p.growth_per_rtt) * s.in_flight + 2.0 * static_cast<double>(mss_);
    if (window_ > cap) window_ = std::max(cap, prev);
    if (cap < p.unused_fraction * prev) window_ = std::max(cap, prev * (1.0 - p.unused_decay));
  }
  window_ = std::max(window_, min_window());
}

// ---------------------------------------------------------------------------------------
// FAST: one bandwidth-delay product of the round trip the flow really sees plus a small queue.

void UplinkRegulator::fast(Nanos now, const Signals& s, const RsfcParams& p) {
  if (s.sending && refresh_due(now, p)) {
    enter_monitor(now, s, p, true);
    return;
  }
  if (drain_now(now, s, p)) return;
  size_fast(now, s, p);
  if (!s.above(s.T())) {
    state_ = RsfcState::kSlow;
  } else if (s.link_fell || s.outage) {
    fast_steps_in_force_ = 0;  // the queue is the link's backlog, not a stale min(d)
  } else if (cut_in_force() && ++fast_steps_in_force_ >= p.monitor_after_steps) {
    enter_monitor(now, s, p, false);  // the cut holds, the queue stays: is min(d) stale?
  }
}

void UplinkRegulator::enter_fast(Nanos now, const Signals& s, const RsfcParams& p) {
  // A queue of the flow's own after a recovery step: the link did not come back that far.
  if (recovery_tried_ && !s.link_fell) fall_window_ = 0;
  recovery_tried_ = false;
  state_ = RsfcState::kFast;
  probe_streak_ = 0;
  fast_steps_in_force_ = 0;
  size_fast(now, s, p);
}

// Only lowers W; a deep cut restarts the count of steps it has held. When the link fell, the
// window it had is remembered for the recovery (probe()).
void UplinkRegulator::size_fast(Nanos now, const Signals& s, const RsfcParams& p) {
  if (s.link_fell && !recovering(now)) {
    recovery_tried_ = false;
    fall_window_ = window_;
    fall_at_ = now;
    fall_rises_ = delay_.min_rises();
    fall_empty_ = std::max({s.packet_time, static_cast<double>(UplinkDelayEstimator::kConfirmFloor),
                            delay_.tick().ns_per_tick()});
  }
  const double target = std::max(
      fast_rate(s) * (seconds(*s.rtt) + p.fast_target * seconds(s.threshold)), min_window());
  if (target < window_) {
    if (target < window_ * p.recut_fraction) {
      cut_edge_ = edge_max_;  // in force once everything sent under the old edge is acked
      fast_steps_in_force_ = 0;
    }
    window_ = target;
  }
}

// rho, except when the link fell: what it delivers now (the flow's share of it), followed at
// once instead of after rho's window; and after an outage at least what it delivered since
// (an outage longer than rho's window leaves only the interval that spans it there).
double UplinkRegulator::fast_rate(const Signals& s) const {
  if (s.link_fell) return s.delivery * s.rate;
  if (s.outage) return std::max(1.0, s.delivery) * s.rate;
  return s.rate;
}

double UplinkRegulator::bdp_plus_queue(Nanos rtt, const Signals& s, const RsfcParams& p) const {
  return s.rate * (seconds(rtt) + p.fast_target * seconds(s.threshold));
}

// ---------------------------------------------------------------------------------------
// MONITOR: a drain confirms min(d), or finds that what is left is not this flow's queue.

// On a long round trip a drain's steps come once a round trip, and a link that serves in
// bursts (a packet waits for the next transmission opportunity) rarely shows a sample within
// the estimator's 2 ms of min(d) among the few a drained window sends: the drain would hold
// the floor window for seconds, every period, and every one would be a first drain. There
// the buffer also counts as empty within one packet's time at the link's rate, as in the
// slow state (lab traces with a download: the UMTS upload 43 -> 46 %, EV-DO 10 -> 20 %,
// medians of 15 start offsets in the simulation).
void UplinkRegulator::monitor(Nanos now, const Signals& s, const RsfcParams& p) {
  // An adopted flow's first drain confirms the minimum only once the buffer has stopped
  // draining: min(d) held over a whole step. Its min(d) was taken behind the queue that stood
  // at the restart, and falls with every sample while that queue drains, by less than the
  // confirmation tolerance from one sample to the next: each of those samples is "at the
  // minimum". Confirming on one kept the rest of the queue as baseline, which the hold band
  // then kept standing (lab: an adopted upload 40 ms above its level before the restart).
  // Not for every first drain: on links whose capacity swings min(d) keeps falling with the
  // packets' service time, the drain then fails, the next one is to the floor again, and
  // the upload lost 6 points on a swinging 3G link in the simulator.
  if (drain_.confirm_after_cut) {
    const auto md = delay_.min_delay(now, horizon(p));
    if (md && drain_.min_at_step &&
        static_cast<double>(*drain_.min_at_step - *md) > delay_.confirm_tolerance()) {
      drain_.fell_at = now;
    }
    drain_.min_at_step = md;
  }
  const bool may_confirm =
      !drain_.confirm_after_cut ||
      (drain_.steps > 0 && confirmed_at() >= drain_.in_force_at && confirmed_at() > drain_.fell_at);
  if (may_confirm && ((confirmed_at() >= drain_.since && has_confirmation()) ||
                      (s.long_round_trip && s.sending && within_one_packet(s)))) {
    drain_confirmed_ = true;
    rises_at_drain_ = delay_.min_rises();
    leave_monitor(now, true);  // the buffer emptied: min(d) is current
    return;
  }
  if (!drain_.scheduled && refresh_due(now, p)) {
    // A boundary passed during a drain of this flow's own: it becomes the scheduled one (the
    // siblings drain from now on), and the path check starts afresh.
    drain_.scheduled = true;
    restart_drain_measurement();
  }
  if (!cut_in_force()) return;
  if (drain_.steps == 0) drain_.in_force_at = now;
  track_drain(now, s, p);
  if (drain_.steps < p.monitor_steps) ++drain_.steps;
  // An adopted flow's drain goes on while min(d) falls: the queue it started behind is
  // still draining (at most one min_refresh period).
  const bool falling =
      drain_.confirm_after_cut && drain_.fell_at == now && now - drain_.in_force_at < p.min_refresh;
  if (drain_.steps >= p.monitor_steps && !falling) end_drain(now, s, p);
}

// Scheduled drains happen at period boundaries of the gateway's clock (plus the phase the
// engine may give per subscriber), so that all flows of one phone, which share one buffer,
// drain together: one flow alone cannot empty a buffer its siblings keep filling.
bool UplinkRegulator::refresh_due(Nanos now, const RsfcParams& p) const {
  if (p.min_refresh <= 0) return false;
  const Nanos t = now + drain_phase_;
  const Nanos boundary = now - ((t % p.min_refresh) + p.min_refresh) % p.min_refresh;
  if (last_step_at_ >= boundary ||
      now - evidence_since_ <=
          static_cast<Nanos>(p.refresh_holdoff * static_cast<double>(p.min_refresh))) {
    return false;
  }
  // The first drain is unconditional: a flow that joined while its siblings kept a queue took
  // that queue for its minimum and "confirms" it all the time; only a drain of all of them
  // shows the truth. Once a drain has confirmed the minimum, a buffer that emptied on its own
  // within the last period (a sample at that same minimum) is the same evidence, and a drain
  // would only cost throughput: every flow sending while the buffer was empty saw the true
  // minimum. If the minimum rose since (aged out while a queue stood, re-based), a
  // confirmation may be a standing queue: drain. Timestamp-less flows keep draining on
  // schedule: their baseline (the phone-side round trip) includes the downlink queue, and
  // the drain is what re-baselines it. So do flows with a coarse tick: a "confirmation" is a
  // sample within one tick of min(d), too loose to tell an empty buffer from a short queue
  // (in simulation, 4 ms and 3.3 ms ticks let the queue creep to 130-150 ms p95 without the
  // drains).
  // On a long round trip, a buffer within one packet's time of min(d) counts (monitor()).
  const bool fine_tick = delay_.tick().ns_per_tick() <= static_cast<double>(p.fine_tick);
  const bool emptied = now - confirmed_at() <= p.min_refresh ||
                       (last_.long_round_trip && now - near_empty_at_ <= p.min_refresh);
  const bool evidence =
      ts_ && fine_tick && drain_confirmed_ && delay_.min_rises() == rises_at_drain_ && emptied;
  return !evidence;
}

void UplinkRegulator::enter_monitor(Nanos now, const Signals& s, const RsfcParams& p,
                                    bool scheduled, bool adopted) {
  state_ = RsfcState::kMonitor;
  drain_.since = now;
  restart_drain_measurement();
  drain_.scheduled = scheduled;
  drain_.confirm_after_cut = adopted;
  drain_.rate_before = s.rate;
  drain_.min_at_step = delay_.min_delay(now, horizon(p));
  drain_.fell_at = 0;
  // Until a drain has confirmed min(d), the round trip itself may contain a queue taken for
  // the baseline (a flow that started behind its siblings' queue: its minimum, its round
  // trip and so a rate x RTT drain are all inflated by it): drain to the floor, once. Not on a
  // long round trip: there each step of the floor window lasts a round trip of seconds;
  // except for an adopted flow, whose round trip has the queue it started behind in it (its
  // min(d) too, so t_buff reads none of it), and that queue is what made it long (a restart
  // next to a download: 1 s, so a drain of drain_fraction x rate x that round trip left the
  // upload unregulated for seconds).
  const bool to_floor = adopted || (ts_ && !drain_confirmed_ && !s.long_round_trip);
  const double drain = to_floor
                           ? min_window()
                           : std::max(p.drain_fraction * s.rate * seconds(s.rtt_now), min_window());
  drain_.window_before = window_;
  drain_.drops_before = delay_.min_drops();
  window_ = std::min(window_, drain);
  cut_edge_ = edge_max_;
}

// The path check's evidence: the lowest t_buff and one-way delay level in each half of its
// span, and (at its start) how far the flow's data had got.
void UplinkRegulator::track_drain(Nanos now, const Signals& s, const RsfcParams& p) {
  if (drain_.first.min_tb < 0) {
    drain_.check_since = now;
    drain_.check_end = delivered_.highest_end();
  }
  PathHalf& half = now - drain_.check_since < p.path_check / 2 ? drain_.first : drain_.second;
  if (half.min_tb < 0 || s.tb() < half.min_tb) half.min_tb = s.tb();
  if (const auto md = ts_ ? delay_.min_delay(now, horizon(p)) : std::nullopt) {
    const Nanos level = *s.t_buff + *md;
    if (!half.floor || level < *half.floor) half.floor = level;
  }
}

// The drain did not empty the buffer. Without timestamps, what is left is not this flow's
// queue (the phone-side round trip includes the downlink queue): it becomes the new
// baseline. With timestamps min(d) is a physical one-way delay: it is raised only when a
// scheduled drain showed a longer path (path_check()); otherwise it is left to age out over
// the horizon, because raising it while siblings sharing the buffer kept it filled would
// ratchet the queue up.
void UplinkRegulator::end_drain(Nanos now, const Signals& s, const RsfcParams& p) {
  const PathCheck path = ts_ ? path_check(now, s.T(), p) : PathCheck::kNo;
  if (path == PathCheck::kWait) return;
  const Nanos by = static_cast<Nanos>(drain_min_tb());
  if (!ts_) {
    phone_half_min_.reset_to(now, s.phone_half + by);
    lag_min_.clear();
    lag_confirmed_at_ = now;
    lag_confirmed_ = true;
  } else if (path == PathCheck::kLonger) {
    delay_.raise_baseline(now, by);
    ++path_rebaselines_;
    phone_rtt_now_.reset();  // measured against the old minimum: too short by the raise
    phone_rtt_avg_.reset();
  }
  leave_monitor(now, drain_.scheduled);
  if (path == PathCheck::kLonger) {
    // What was taken for queue is path: the window that carried the flow's rate before the
    // drain now has to cover the longer round trip too.
    window_ = std::max(window_, drain_.rate_before * seconds(s.rtt_now + by));
  }
}

void UplinkRegulator::leave_monitor(Nanos now, bool evidence) {
  // The drain was a measurement: the window goes back to where it was (the slow state then
  // judges the queue afresh against the confirmed minimum) - unless the drain found a lower
  // minimum: then that window was sized on a round trip with a queue in it, and the slow
  // state grows the window again from the drained one (at once to rate x round trip once
  // the round trip is measured anew).
  if (delay_.min_drops() == drain_.drops_before) window_ = std::max(window_, drain_.window_before);
  state_ = RsfcState::kSlow;
  // A drain that neither emptied the buffer nor was scheduled (the siblings kept sending)
  // says nothing about min(d): the next boundary drains.
  if (evidence) evidence_since_ = now;
}

void UplinkRegulator::restart_drain_measurement() {
  drain_.steps = 0;
  drain_.first = {};
  drain_.second = {};
}

double UplinkRegulator::drain_min_tb() const {
  if (drain_.first.min_tb < 0) return drain_.second.min_tb;
  if (drain_.second.min_tb < 0) return drain_.first.min_tb;
  return std::min(drain_.first.min_tb, drain_.second.min_tb);
}

// With timestamps, a drain that did not empty the buffer: a longer path (route change,
// handover) reads exactly like a standing queue, d = arrival - TSval rising by the extra
// one-way delay. A scheduled drain can tell them apart: there every regulated flow of the
// gateway that has not seen the buffer empty within the period cuts at once, and a queue of
// its own in front of a flow's packets would (a) drain at the link's rate, so the flow's
// data would keep arriving at about its rate rho, and (b) shrink. kLonger when, for
// path_check since the cut took hold, t_buff stayed above T, its floor did not fall (second
// half's minimum >= first half's - two ticks or path_tolerance; a queue's bursts only add
// upward spikes), and the flow delivered less than path_foreign_rate * rho: what its packets
// wait behind is not theirs. kWait: not long enough yet.
// Also kLonger: a queue that an unregulated sender (a flow older than the daemon, UDP) keeps
// full - the flow then competes for that buffer as it would without rsfcd instead of
// starving, and min(d) falls back as soon as the buffer empties (min_drops). Misread: a
// capacity drop during the drain to about the rate the drain lets the phone send keeps the
// flow's own queue flat; the raise then holds until the buffer empties (min_drops) or the
// raised minimum ages out, and the next scheduled drain sees that queue shrink.
UplinkRegulator::PathCheck UplinkRegulator::path_check(Nanos now, double T,
                                                       const RsfcParams& p) const {
  if (p.path_check <= 0 || !drain_.scheduled || drain_.first.min_tb < 0 || drain_min_tb() <= T) {
    return PathCheck::kNo;
  }
  // A longer path is a change from a baseline this flow has seen confirmed (a drain emptied
  // the buffer once), and it leaves no empty moment: a flow that saw the buffer empty
  // within the last period, or never, may be looking at a sibling's queue (a new flow behind
  // one that skipped this boundary because its buffer had just emptied).
  if (!drain_confirmed_ || now - confirmed_at() < p.min_refresh) return PathCheck::kNo;
  const Nanos span = now - drain_.check_since;
  if (span < p.path_check || drain_.second.min_tb < 0) return PathCheck::kWait;
  const double tol =
      std::max(2.0 * delay_.tick().ns_per_tick(), static_cast<double>(p.path_tolerance));
  // The floor is the one-way delay's (t_buff + min(d)): an old minimum that ages out during
  // the check raises min(d) and lowers t_buff by as much, which is no queue draining. (Both
  // halves have one whenever they have a t_buff: the check runs with timestamps only.)
  const auto& first = drain_.first.floor;
  const auto& second = drain_.second.floor;
  if (!first || !second || static_cast<double>(*second) < static_cast<double>(*first) - tol) {
    return PathCheck::kNo;
  }
  const double delivered =
      static_cast<double>(static_cast<uint32_t>(delivered_.highest_end() - drain_.check_end));
  return delivered < p.path_foreign_rate * drain_.rate_before * seconds(span) ? PathCheck::kLonger
                                                                              : PathCheck::kNo;
}

}  // namespace rsfc
