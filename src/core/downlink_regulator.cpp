#include "rsfc/core/downlink_regulator.h"

#include <algorithm>
#include <cmath>

namespace rsfc {

const char* to_string(DownlinkState s) {
  switch (s) {
    case DownlinkState::kStartup:
      return "startup";
    case DownlinkState::kSlow:
      return "slow";
    case DownlinkState::kFast:
      return "fast";
    case DownlinkState::kDrain:
      return "drain";
    case DownlinkState::kNoTimestamps:
      return "no_timestamps";
  }
  return "?";
}

DownlinkQueueParams downlink_params_from(const RsfcParams& r) {
  DownlinkQueueParams p;
  p.threshold = r.threshold;
  p.threshold_floor = r.threshold_floor;
  p.threshold_ceiling = r.threshold_ceiling;
  p.threshold_packets_steady = r.threshold_packets;
  p.threshold_ceiling_steady = r.threshold_ceiling_steady;
  p.threshold_packets_ceiling = r.threshold_packets_ceiling;
  p.tick_multiple = r.tick_multiple;
  p.horizon = r.min_window_horizon;
  p.filter = r.tbuff_filter;
  p.interval_floor = r.control_interval_floor;
  p.max_interval = r.max_interval;
  p.rtt_smoothing = r.rtt_smoothing;
  p.rtt_gain = r.rtt_gain;
  p.growth_per_rtt = r.growth_per_rtt;
  p.probe_step_queue = r.probe_step_queue;
  p.probe_below = r.probe_below;
  p.probe_doublings = r.probe_doublings;
  p.fast_target = r.fast_target;
  p.recut_fraction = r.recut_fraction;
  p.min_refresh = r.min_refresh;
  p.refresh_holdoff = r.refresh_holdoff;
  p.drain_fraction = r.drain_fraction;
  p.drain_after_steps = r.monitor_after_steps;
  p.path_check = r.path_check;
  p.path_tolerance = r.path_tolerance;
  p.unused_fraction = r.unused_fraction;
  p.unused_decay = r.unused_decay;
  p.startup_growth = r.startup_growth;
  p.initial_window_bytes = r.initial_window_bytes;
  p.min_window_segments = r.min_window_segments;
  p.round_trip_no_ts = r.downlink_round_trip;
  p.threshold_ceiling_no_ts = r.threshold_ceiling_lag;
  p.yield_no_ts = r.downlink_yield;
  return p;
}

DownlinkQueueParams yielding_to_upload(const DownlinkQueueParams& p) {
  DownlinkQueueParams y = p;
  y.threshold_ceiling_no_ts =
      static_cast<Nanos>(p.yield_no_ts * static_cast<double>(p.threshold_ceiling_no_ts));
  y.threshold_floor = std::min(p.threshold_floor, y.threshold_ceiling_no_ts);
  return y;
}

DownlinkStepParams::DownlinkStepParams(const DownlinkQueueParams& next_to_upload,
                                       Nanos ceiling_alone)
    : sets_{next_to_upload, next_to_upload, yielding_to_upload(next_to_upload)} {
  DownlinkQueueParams& alone = sets_[static_cast<size_t>(Choice::kAlone)];
  // Alone, a download gets the higher ceiling whatever its queue did (no steady ceiling).
  if (ceiling_alone > alone.threshold_ceiling) alone.threshold_ceiling_steady = 0;
  alone.threshold_ceiling = std::max(alone.threshold_ceiling, ceiling_alone);
}

DownlinkStepParams downlink_step_params_from(const RsfcParams& r) {
  return {downlink_params_from(r), r.threshold_ceiling_download_alone};
}

namespace {

double seconds(Nanos t) {
  return static_cast<double>(t) / static_cast<double>(kSecond);
}

uint32_t window_bytes(double w) {
  return w >= static_cast<double>(kNoClamp - 1) ? kNoClamp - 1 : static_cast<uint32_t>(w);
}

// A phone without timestamps on the gateway's round trip: its ACKs' TSvals are the gateway's
// clock at their arrival, in ticks of this (a clock TickEstimator snaps to).
constexpr Nanos kGatewayTick = 1 * kMilli;

// The rate's windowed maximum covers max(1 s, 4 intervals), as DeliveredRate's.
Nanos rate_window(Nanos interval) {
  return std::max(DeliveredRate::kMaxWindow, 4 * interval);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Estimators, fed by every segment.

void DownlinkQueueRegulator::take_handshake(Nanos now, const DownlinkQueueParams& p) {
  if (!ts_decided_ && handshake_.synack_seen()) {
    ts_ = handshake_.syn_timestamps();
    ts_decided_ = true;
    if (!ts_ && p.round_trip_no_ts) {
      gw_clock_ = true;
      up_delay_.on_sibling_tick(kGatewayTick);
    }
  }
  if (handshake_taken_ || !handshake_.complete()) return;
  handshake_taken_ = true;
  if (auto ph = handshake_.phone_half()) path_min_.update(now, *ph, p.horizon);
  if (auto sh = handshake_.server_half()) server_half_min_.update(now, *sh, p.horizon);
  if (auto pair = handshake_.ts_pair()) {
    up_delay_.on_handshake(pair->a_syn, pair->ts_syn, pair->a_ack, pair->ts_ack);
  }
}

void DownlinkQueueRegulator::on_downlink_segment(Nanos now, Nanos leaves, const TcpSegment& s,
                                                 const DownlinkQueueParams& p) {
  handshake_.on_segment(now, false, s);
  take_handshake(now, p);
  if (s.syn()) {
    data_high_ = sample_mark_ = s.seq + 1;
    data_known_ = true;
  } else {
    on_data(now, std::max(now, leaves), s, p);
  }
  if (!ts_ || !s.has_ts) return;  // (the server echoes no TSval of the gateway's clock)
  if (s.ack_flag() && !s.syn()) {
    if (auto sh = server_echo_.on_echo(now, s.tsecr)) server_half_min_.update(now, *sh, p.horizon);
  }
}

// The server's data: the highest end forwarded (in flight), and the queue estimator's slots:
// one every W / kSlotsPerRtt bytes, and the head of each burst. A server whose ACKs arrive in
// bursts (behind an upload's packets in the uplink buffer) sends its data in bursts; slots
// every so many milliseconds would only ever time a burst's head, and slots every so many
// bytes alone could miss every head.
// Timed from when the segment leaves the gateway (`leaves`: its arrival unless paced); the
// right edge the server had is looked up from its arrival.
void DownlinkQueueRegulator::on_data(Nanos now, Nanos leaves, const TcpSegment& s,
                                     const DownlinkQueueParams& p) {
  const uint32_t end = s.end();
  if (end == s.seq) return;  // a pure ACK of the server's (to the phone's own data)
  const bool fresh = !data_known_ || seq_gt(end, data_high_);
  // The head of a burst (data after a gap of a sixth of a round trip) finds the queue the
  // previous burst left: if the link idled in between, that is empty, and only such a sample
  // says so.
  const bool head = data_known_ && leaves - last_data_at_ > spacing(p);
  if (!data_known_) sample_mark_ = s.seq;
  if (fresh) data_high_ = end;
  data_known_ = true;
  last_data_at_ = std::max(last_data_at_, leaves);
  if (ack_known_) {
    const int32_t out = static_cast<int32_t>(data_high_ - ack_high_);
    in_flight_max_ = std::max(in_flight_max_, static_cast<uint32_t>(std::max(0, out)));
  }
  // The server sent up to the right edge it had (the one this regulator asked for a server
  // half ago): it uses the whole window.
  const auto sh = server_half_min_.get(now, p.horizon);
  if (const auto e = edge_at(now - (sh ? sh->value : 0)); e && !seq_lt(end + mss_, *e)) {
    window_used_ = true;
  }
  if (!ts_ && !gw_clock_) return;
  // Every segment goes to the estimator (it cancels the slots a retransmission covers); only
  // one at a mark may take a slot.
  const double w = clamping_ ? window_ : static_cast<double>(startup_window(p));
  const auto step = static_cast<uint32_t>(std::max<double>(mss_, w / kSlotsPerRtt));
  if (seq_gt(sample_mark_, end + step)) sample_mark_ = end + step;  // W was cut
  const bool mark = fresh && (head || !seq_lt(end, sample_mark_));
  // Only a segment the estimator timed is remembered (its forwarding time gives the round
  // trip of the ACK that matches it). A mark it refused, its slots all waiting (far more out
  // than the spacing foresaw: a slow link's first 64 KB, a window that grew faster than the
  // spacing), would push the times of the slots it holds out of the ring: their ACKs then
  // gave q_down but never a round trip, and the regulator never became ready (2G: the
  // download unregulated for a whole test). A refused mark is tried again at the next
  // segment.
  if (!queue_.on_data(leaves, s.seq, end, mark ? 0 : DownlinkQueueEstimator::kMaxAge)) return;
  marks_[next_mark_] = {leaves, end, true};
  next_mark_ = static_cast<uint8_t>((next_mark_ + 1) % kMarks);
  if (mark) sample_mark_ = end + step;
}

void DownlinkQueueRegulator::on_uplink_segment(Nanos now, const TcpSegment& s,
                                               const DownlinkQueueParams& p) {
  handshake_.on_segment(now, true, s);
  // The phone's MSS option caps the server's segments.
  if (s.syn() && s.mss_option > 0) mss_ = s.mss_option;
  if (!ts_decided_ && !handshake_.synack_seen() && !s.syn()) ts_ = s.has_ts;  // handshake unseen
  take_handshake(now, p);
  if (gw_clock_) {
    TcpSegment stamped = s;  // the gateway's clock at the arrival, as the phone's
    stamped.has_ts = true;
    stamped.tsval = static_cast<uint32_t>(now / kGatewayTick);
    on_phone_segment(now, stamped, p);
  } else if (ts_ && s.has_ts) {
    on_phone_segment(now, s, p);
  }
}

// A segment from the phone with its clock (TSval): its own or, without timestamps, the
// gateway's at its arrival.
void DownlinkQueueRegulator::on_phone_segment(Nanos now, const TcpSegment& s,
                                              const DownlinkQueueParams& p) {
  const bool ack = s.ack_flag() && !s.syn();
  std::optional<Nanos> q, forwarded;  // q_down sample, and when its segment was forwarded
  if (ack) {
    const uint64_t matched = queue_.matches();
    q = queue_.on_ack(now, s.ack, s.tsval, ns_per_tick(), p.horizon, trough_span(p));
    if (q || (queue_.matches() != matched && ns_per_tick() <= 0)) {
      forwarded = mark_time(queue_.last_matched_end());
    }
  }
  // The tick from the phone's segments (upper bound) and the data they answer (lower bound).
  // The lower bound needs only the data's forwarding time, not the tick: without it (while
  // the tick is unknown the queue estimator gives no sample, and before, no bound), a flow
  // whose handshake gave no hint (its ACK waited behind an upload) and whose ACKs' uplink
  // wait keeps the upper bound loose would wait for a tick forever (2G with an upload, in the
  // simulator: the download never regulated, its queue at 10 s).
  const auto up = up_delay_.on_segment(now, s.tsval, p.horizon, p.filter, forwarded);
  server_echo_.on_forward(now, s.tsval, spacing(p));
  if (ack) on_ack(now, s, q, forwarded, up, p);
}

// One ACK from the phone: its q_down sample (is the queue empty?), the bytes it
// acknowledged (on the phone's clock), and with the forwarding time of the segment the sample
// is from, the round trip of that segment: the path alone (both queues out) for the base
// round trip, and without the own downlink queue for the window.
void DownlinkQueueRegulator::on_ack(Nanos now, const TcpSegment& s, std::optional<Nanos> q,
                                    std::optional<Nanos> forwarded, std::optional<Nanos> up,
                                    const DownlinkQueueParams& p) {
  const bool offset_valid = offset_ > 0 && now - offset_at_ <= p.horizon;
  if (q && offset_valid && *q < offset_) offset_ = *q;  // the foreign part shrank: at once
  if (!offset_valid) offset_ = 0;
  const Nanos own = q ? std::max<Nanos>(0, *q - offset_) : 0;
  const Nanos tol =
      std::max(UplinkDelayEstimator::kConfirmFloor, static_cast<Nanos>(ns_per_tick()));
  if (q && own <= tol) {
    // A sample at the baseline: the queue was empty. After a gap of more than half the
    // horizon without one, min(d) may have aged out and been learnt again with a queue in
    // it: such samples say nothing until a drain has seen the queue empty again.
    if (confirmed_ && now - confirmed_at_ > p.horizon / 2) suspect_ = true;
    confirmed_at_ = now;
    confirmed_ = true;
  }
  count_acked(now, s.ack, ack_ticks_.unwrap(s.tsval), p);
  if (!q || !forwarded || !up) return;
  const Nanos round_trip = now - *forwarded;
  path_min_.update(now, std::max<Nanos>(0, round_trip - own - *up), p.horizon);
  add_rtt(now, std::max<Nanos>(0, round_trip - own), p);
}

// The right edges asked for, with their times (a ring, one entry per spacing at most).
void DownlinkQueueRegulator::note_edge(Nanos now, uint32_t edge, const DownlinkQueueParams& p) {
  EdgeAt& last = edges_[(next_edge_ + kEdges - 1) % kEdges];
  if (last.valid && now - last.time < spacing(p)) {
    last.edge = edge;  // the latest edge of this spacing
    return;
  }
  edges_[next_edge_] = {now, edge, true};
  next_edge_ = static_cast<uint8_t>((next_edge_ + 1) % kEdges);
}

// The right edge an ACK to the server left with. The engine never pulls an edge back, so it
// may be beyond what this regulator asked for: one advertised before it started (a flow
// regulated mid-flow: a reload, a restart, conntrack adoption). A cut is in force only once
// the phone has acknowledged past the highest edge the server had; judged on the edges asked
// for alone, a mid-flow drain ended on data the server sent under the old edge, the queue
// still standing.
void DownlinkQueueRegulator::on_window_forwarded(uint32_t edge) {
  if (!edge_known_ || seq_gt(edge, edge_max_)) {
    edge_max_ = edge;
    edge_known_ = true;
  }
}

// The highest right edge asked for at or before `t` (the latest entry not after it).
std::optional<uint32_t> DownlinkQueueRegulator::edge_at(Nanos t) const {
  std::optional<uint32_t> best;
  Nanos best_time = 0;
  for (const EdgeAt& e : edges_) {
    if (e.valid && e.time <= t && (!best || e.time > best_time)) {
      best = e.edge;
      best_time = e.time;
    }
  }
  return best;
}

std::optional<Nanos> DownlinkQueueRegulator::mark_time(uint32_t end) const {
  for (const Mark& m : marks_) {
    if (m.valid && m.end == end) return m.time;
  }
  return std::nullopt;
}

// Bytes acknowledged, and the phone-clock rate sample: an ACK after a gap longer than the
// interval (an outage: nothing was delivered, or an idle server) restarts the sample, so the
// gap is not read as a low rate.
//
// And whether the service swings on the packet floor's own scale: a short sample spans the
// time threshold_packets packets take at the rate (at least two ticks); more than
// floor_swing times the rate delivered within one shows a link that serves in bursts (a
// steady link never delivers faster than its rate, an idle one only slower), and the packet
// floor on T holds for a horizon.
void DownlinkQueueRegulator::count_acked(Nanos now, uint32_t ack, int64_t ticks,
                                         const DownlinkQueueParams& p) {
  if (!ack_known_) {
    ack_known_ = true;
    ack_high_ = ack;
    return;
  }
  if (!seq_gt(ack, ack_high_)) return;
  acked_ += ack - ack_high_;
  ack_high_ = ack;
  const double g = ns_per_tick();
  const double gap = static_cast<double>(ticks - last_ack_ticks_) * g;
  const Nanos max_gap = std::max(kAckGap, interval(p));
  const bool restart = g <= 0 || gap > static_cast<double>(max_gap);
  if (!rate_sample_.open || restart) rate_sample_ = {ticks, acked_, g > 0};
  if (!short_sample_.open || restart || last_.rate <= 0 || p.threshold_packets <= 0) {
    short_sample_ = {ticks, acked_, g > 0};
  } else {
    const double span = static_cast<double>(ticks - short_sample_.start_ticks) * g / 1e9;
    const double scale = std::max(p.threshold_packets * mss_ / last_.rate, 2 * g / 1e9);
    if (span >= scale) {
      const double bytes = static_cast<double>(acked_ - short_sample_.start_bytes);
      if (bytes > p.floor_swing * last_.rate * span) swinging_until_ = now + p.horizon;
      short_sample_ = {ticks, acked_, true};
    }
  }
  last_ack_ticks_ = ticks;
  if (state_ == DownlinkState::kStartup && first_sample_due(now, last_, interval(p))) {
    next_step_ = std::min(next_step_, now);
  }
}

void DownlinkQueueRegulator::add_rtt(Nanos now, Nanos rtt_no_queue, const DownlinkQueueParams& p) {
  const double x = static_cast<double>(rtt_no_queue);
  rtt_now_.add(x, p.rtt_gain);
  if (!rtt_avg_.has()) {
    rtt_avg_.add(x, 1.0);
  } else if (now > rtt_avg_at_) {
    const double dt = static_cast<double>(now - rtt_avg_at_);
    const double tau = static_cast<double>(std::max<Nanos>(p.rtt_smoothing, 1));
    rtt_avg_.add(x, 1.0 - std::exp(-dt / tau));
  }
  rtt_avg_at_ = now;
}

// ---------------------------------------------------------------------------------------
// The control step.

WindowDecision DownlinkQueueRegulator::target_window(Nanos now, const DownlinkQueueParams& p,
                                                     bool release) {
  WindowDecision d;
  if (now >= next_step_) {
    d.stepped = step(now, p);
    // Past its startup (the only way out of which sets clamping_), a step not ready held.
    d.held = !d.stepped && steering();
  }
  if (state_ == DownlinkState::kNoTimestamps) return d;  // kNoClamp
  // In its startup the clamp lets go of a bulk upload (kStartupHoldOtherWay).
  if (!clamping_ && release) return d;  // kNoClamp; no edge asked for
  d.window = clamping_ ? window() : startup_window(p);
  // The right edge this asks for; a cut holds once the phone acknowledged up to the highest.
  const uint32_t edge = ack_high_ + std::max(d.window, window_bytes(min_window()));
  if (ack_known_ && (!edge_known_ || seq_gt(edge, edge_max_))) {
    edge_max_ = edge;
    edge_known_ = true;
    note_edge(now, edge, p);
  }
  // The swing window bounds what the ACK asks for, not the law (the header).
  if (clamping_) d.window = std::max(d.window, window_bytes(swing_window(now, p)));
  return d;
}

// The swing window (the header): the law's own target, one base round trip plus T, at the
// link's recent peak. Only for a flow whose handshake the regulator saw: adopted mid-flow, its
// base round trip holds the queue that was there (refresh_due()), and a window sized on it
// would keep that queue.
double DownlinkQueueRegulator::swing_window(Nanos now, const DownlinkQueueParams& p) const {
  if (!p.swing_window_on || !handshake_taken_ || !swinging(now) || !last_.rtt_min || peak_ <= 0) {
    return 0;
  }
  // A scheduled drain (refresh_due()) must see the queue empty, or min(d) ages out of its
  // horizon under the held queue and is re-learnt on top of it.
  if (state_ == DownlinkState::kDrain && drain_.scheduled) return 0;
  return peak_at(now, p) * seconds(*last_.rtt_min + last_.threshold);
}

// The swing window's peak, as of the last step, decayed to `now` (halving every
// peak_half_life).
double DownlinkQueueRegulator::peak_at(Nanos now, const DownlinkQueueParams& p) const {
  const double half_lives = static_cast<double>(now - last_step_at_) /
                            static_cast<double>(std::max<Nanos>(p.peak_half_life, 1));
  return peak_ * std::exp2(-half_lives);
}

uint32_t DownlinkQueueRegulator::window() const {
  if (!clamping_) return kNoClamp;
  return window_bytes(std::max(window_, min_window()));
}

uint32_t DownlinkQueueRegulator::startup_window(const DownlinkQueueParams& p) const {
  const double base = startup_floor_bytes(p.initial_window_bytes);
  return window_bytes(std::max(base, startup_clamp_));
}

bool DownlinkQueueRegulator::step(Nanos now, const DownlinkQueueParams& p) {
  min_segments_ = p.min_window_segments;
  if (state_ == DownlinkState::kNoTimestamps) return false;
  if (!ts_ && !gw_clock_) {
    state_ = DownlinkState::kNoTimestamps;  // once: the decision log says so
    return true;
  }
  const Signals s = measure(now, p);
  last_ = s;
  next_step_ = now + s.interval;
  if (state_ == DownlinkState::kStartup) {
    // startup_growth times what is out, less the flow's own downlink queue (a clamp sized on
    // what is out grows with the queue it lets in: the uplink regulator's startup, EXPERIMENTS
    // Q24). At the first step of a flow whose ACKs come late, what is out plus startup_growth
    // times what the phone has acknowledged: slow start grows by what is acknowledged, and
    // that first ACK waited while the initial window sat in the downlink buffer (2G behind an
    // upload: 0.7 s, the window 1.3 s of the link's service); doubling what was out there let
    // in twice the initial window before the first sample (Q30). A round trip apart the two
    // are the same (what is out doubles in slow start).
    const double own = s.q_down ? s.rate * seconds(*s.q_down) : 0.0;
    const double out = std::max(0.0, s.in_flight - own);
    startup_clamp_ = startup_clamp_ > 0 || !acks_late(s)
                         ? p.startup_growth * out
                         : out + p.startup_growth * static_cast<double>(acked_);
  }
  if (s.ready) {
    switch (state_) {
      case DownlinkState::kStartup:
        startup(now, s, p);
        break;
      case DownlinkState::kSlow:
        slow(now, s, p);
        break;
      case DownlinkState::kFast:
        fast(now, s, p);
        break;
      case DownlinkState::kDrain:
        drain(now, s, p);
        break;
      case DownlinkState::kNoTimestamps:
        break;
    }
  }
  last_step_at_ = now;  // refresh_due() looks for a boundary since the previous step
  return s.ready;
}

// The step's signals, from the estimators as they stand at `now` (the header lists them).
DownlinkQueueRegulator::Signals DownlinkQueueRegulator::measure(Nanos now,
                                                                const DownlinkQueueParams& p) {
  Signals s;
  s.rtt_now = last_.rtt_now;
  s.rate_now = last_.rate_now;
  const auto ph = path_min_.get(now, p.horizon);
  const auto sh = server_half_min_.get(now, p.horizon);
  s.server_half = sh ? sh->value : 0;
  // Without the phone's clock no echo renews the server half: the handshake's is kept.
  if (gw_clock_ && sh) server_half_min_.update(now, sh->value, p.horizon);
  if (ph) s.rtt_min = ph->value + s.server_half;
  s.q_down = queue_now(now, p);
  // The queue sign: a queue past twice the ceiling after STARTUP is a link whose service
  // swings, and T keeps its full ceiling until a horizon passes without that (threshold_for();
  // as the uplink knob's).
  if (state_ != DownlinkState::kStartup && s.q_down && *s.q_down > 2 * p.threshold_ceiling) {
    queue_swung_until_.set(now + p.horizon);
  }
  // The fall check (measure_rate()) reads a queue above this T as a busy link. It keeps the
  // full ceiling: no rate is known here, so no packet floor, and a steady ceiling under one
  // packet's service (2G: 116 ms) would take the gaps between a slow link's packets for a busy
  // link falling (EXPERIMENTS Q52).
  s.threshold = threshold_for(s.rtt_min, 0, false, false, p);
  if (up_delay_.ready()) s.q_up = up_delay_.filtered(now, p.filter);
  if (rtt_now_.has()) {
    s.rtt_now = std::llround(rtt_now_.get()) + s.server_half;
    s.rtt = std::llround(rtt_avg_.has() ? rtt_avg_.get() : rtt_now_.get()) + s.server_half;
  }
  s.interval = control_interval(s, p);
  measure_rate(now, s, p);  // the fall check: a queue above the time-based T is a busy link
  note_peak(now, s, p);
  // The packet floor only while the service swings (the header's T).
  const bool floor = p.floor_swing <= 0 || swinging(now);
  s.threshold = threshold_for(s.rtt_min, s.rate, floor, !queue_swung_until_.pending(now), p);
  // Data since the previous step, or within a round trip (data and ACKs may come in bursts,
  // and steps with them).
  const Nanos round_trip = s.rtt_now + (s.q_down ? *s.q_down : 0);
  s.sending = data_known_ && (last_data_at_ > last_step_at_ ||
                              now - last_data_at_ <= std::max(s.interval, round_trip));
  // What the server had out at the peak since the previous step (+ the server half's share);
  // the whole window if its data reached the right edge. (Data released by a burst of ACKs
  // comes a server half after them: the gateway's view alone misses it.)
  s.in_flight = static_cast<double>(in_flight_max_) + s.rate * seconds(s.server_half);
  if (window_used_ && clamping_) s.in_flight = std::max(s.in_flight, window_);
  in_flight_max_ = 0;
  window_used_ = false;
  s.ready = s.q_down && s.rtt && s.rate > 0;
  return s;
}

// q_down: the estimator's filtered reading (the minimum of its raw samples over
// trough_span(); its last raw sample when none is that recent), less the baseline offset a
// drain found.
std::optional<Nanos> DownlinkQueueRegulator::queue_now(Nanos now,
                                                       const DownlinkQueueParams& p) const {
  if (ns_per_tick() <= 0 || queue_.samples() == 0) return std::nullopt;
  auto f = queue_.filtered(now, trough_span(p));
  if (!f) f = queue_.last_raw();
  if (!f) return std::nullopt;
  return std::max<Nanos>(0, *f - offset_);
}

// The swing window's peak (the header): decayed to now, then the latest rate sample. A link
// whose rate comes back to back_fraction of its peak before a fall, within the horizon after
// that fall, serves in bursts: for a horizon its falls are slow spells that the peak holds
// through (check_fall()). One held through that the link does not come back from within the
// horizon lasts: the peak restarts from the law's rate.
void DownlinkQueueRegulator::note_peak(Nanos now, const Signals& s, const DownlinkQueueParams& p) {
  const bool fell = recover_until_ > 0;  // check_fall(): the last fall was a horizon before it
  const Nanos fall_at = recover_until_ - p.horizon;
  // A fall at this step restarts the peak from the law's rate, unless the peak holds.
  double peak = fell && fall_at == now && !held_fall_ ? s.rate : peak_at(now, p);
  if (s.rate_now > 0) {
    if (fell && now - fall_at <= p.horizon && s.rate_now >= p.back_fraction * fall_peak_) {
      bursty_until_ = now + p.horizon;
      held_fall_ = false;
    } else if (held_fall_ && now - fall_at > p.horizon) {
      peak = s.rate;
      held_fall_ = false;
    }
    peak = std::max(peak, s.rate_now);
  }
  peak_ = peak;  // as of this step: last_step_at_ once it ends
}

// A fall (check_fall()): the peak before it is what a comeback is measured against; the peak
// restarts from the law's rate (note_peak()), or holds if the link came back from a fall
// within the horizon: then this is the next slow spell of a bursty link.
void DownlinkQueueRegulator::note_fall(Nanos now, const DownlinkQueueParams& p) {
  fall_peak_ = static_cast<float>(peak_at(now, p));
  held_fall_ = now < bursty_until_;
}

// A rate sample once the open one spans at least an interval (and kRateTicks ticks) of the
// phone's clock, or a late-ACK flow's first one earlier (first_sample_due()); the windowed
// maximum of the samples; then the fall check.
void DownlinkQueueRegulator::measure_rate(Nanos now, Signals& s, const DownlinkQueueParams& p) {
  const double g = ns_per_tick();
  bool fresh = false;
  if (rate_sample_.open && g > 0) {
    const double span = static_cast<double>(last_ack_ticks_ - rate_sample_.start_ticks) * g;
    const double min_span = std::max(static_cast<double>(s.interval), kRateTicks * g);
    if (span >= min_span || first_sample_due(now, s, s.interval)) {
      const double bytes = static_cast<double>(acked_ - rate_sample_.start_bytes);
      s.rate_now = bytes * static_cast<double>(kSecond) / span;
      rate_max_.update(now, std::llround(s.rate_now), rate_window(s.interval));
      rate_sample_ = {last_ack_ticks_, acked_, true};
      fresh = true;
      // The service swings: a sample under half the maximum (header, T).
      const auto top = rate_max_.get(now, rate_window(s.interval));
      if (top && s.rate_now * p.floor_swing < static_cast<double>(top->value))
        swinging_until_ = now + p.horizon;
    }
  }
  const auto m = rate_max_.get(now, rate_window(s.interval));
  s.rate = m ? static_cast<double>(m->value) : 0.0;
  check_fall(now, s, fresh, p);
}

// A flow whose ACKs come late: its round trip (without its own downlink queue) is over twice
// the base one, so the ACKs wait in the uplink buffer behind an upload. Its control interval
// is then mostly that wait, and its first ACK reaches the gateway when its initial window has
// already been in the downlink buffer for as long: the startup's three exceptions below hold
// only for such a flow. (Taken for every flow, the first sample's early close alone cost
// LTE's download 4-6 points of its rate in its first two seconds in the simulator: a first
// step out of slow start earlier means SLOW's 25 % per round trip from a smaller window;
// EXPERIMENTS Q30.)
bool DownlinkQueueRegulator::acks_late(const Readings& r) {
  return r.rtt && r.rtt_min && *r.rtt > 2 * *r.rtt_min;
}

// A late-ACK flow's first rate sample (no rate known) may close before it spans an interval:
// after the base round trip (rtt_min) and kFirstRateSegments segments. Behind an upload the
// interval is most of a second on a slow link (2G: 0.9 s), and the flow's first step past
// STARTUP waits for this sample; count_acked() brings the step forward to the ACK that closes
// it (EXPERIMENTS Q30).
bool DownlinkQueueRegulator::first_sample_due(Nanos now, const Readings& r, Nanos interval) const {
  const double g = ns_per_tick();
  if (!acks_late(r) || !rate_sample_.open || g <= 0 || rate_max_.get(now, rate_window(interval))) {
    return false;
  }
  const double span = static_cast<double>(last_ack_ticks_ - rate_sample_.start_ticks) * g;
  const double bytes = static_cast<double>(acked_ - rate_sample_.start_bytes);
  return span >= std::max(static_cast<double>(*r.rtt_min), kRateTicks * g) &&
         bytes >= kFirstRateSegments * static_cast<double>(mss_);
}

// While q_down > T the downlink is busy: what it delivers is its capacity. Two fresh samples
// in a row below fall_fraction of the maximum are the link falling (one alone may be an
// outage's edge): the maximum restarts from the latest, and the window it had is remembered
// for the recovery.
void DownlinkQueueRegulator::check_fall(Nanos now, Signals& s, bool fresh,
                                        const DownlinkQueueParams& p) {
  if (!fresh || !s.q_down) return;
  if (s.q() <= s.T() || s.rate_now >= p.fall_fraction * s.rate) {
    fall_streak_ = 0;
    return;
  }
  if (++fall_streak_ < 2) return;
  fall_streak_ = 0;
  rate_max_.reset_to(now, std::llround(s.rate_now));
  s.rate = s.rate_now;
  note_fall(now, p);  // the swing window's peak follows it too, unless the link is bursty
  if (now >= recover_until_) recover_window_ = 0;
  recover_window_ = std::max(recover_window_, window_);
  recover_until_ = now + p.horizon;
  ++link_falls_;
}

// Auto T: the base round trip, within [threshold_floor, threshold_ceiling], and never less
// than tick_multiple ticks (the queue must be readable on the phone's clock) nor
// threshold_packets packets' service at the delivered rate (bytes/s; 0: not known yet, or a
// service that has not swung within the horizon: measure() decides). A slow link serves whole
// packets, and a cellular one serves them in scheduling bursts whose size swings from one moment to
// the next: a standing queue of less than a few packets runs empty whenever a burst is larger than
// the average, and the capacity of that burst is lost (on the EV-DO trace a third of the download's
// rate alone). A steady slow link (2G) keeps its rate with less than a packet of queue, and there
// the floor only adds latency. On links of a few Mbit/s and more, three packets take less than the
// floor, and nothing changes.
Nanos DownlinkQueueRegulator::threshold_for(std::optional<Nanos> rtt_min, double rate,
                                            bool swinging, bool steady,
                                            const DownlinkQueueParams& p) const {
  if (p.threshold) return *p.threshold;
  const Nanos g = gw_clock_ ? 0 : static_cast<Nanos>(ns_per_tick());
  // A queue that never swung needs no more than a few packets (the steady ceiling; on the
  // phone's clock only: the gateway's round trip holds the upload's queue too).
  const AutoBounds b = auto_bounds(p.threshold_floor, p.threshold_ceiling,
                                   p.threshold_ceiling_steady, steady && !gw_clock_);
  Nanos lo = std::max(b.floor, static_cast<Nanos>(p.tick_multiple * static_cast<double>(g)));
  if (rate > 0) {
    const double packet = static_cast<double>(mss_) / rate * static_cast<double>(kSecond);
    // A few packets' service whatever the link (under one packet's time the queue is empty
    // between packets and a slow link idles), at most threshold_packets_ceiling; ...
    lo =
        std::max(lo, packet_floor(p.threshold_packets_steady, packet, p.threshold_packets_ceiling));
    // ... and while the service swings, threshold_packets of them whatever the ceiling.
    if (swinging) {
      lo = std::max(lo, static_cast<Nanos>(std::min(p.threshold_packets * packet, 10.0 * kSecond)));
    }
  }
  // On the gateway's round trip T bounds the sum of the phone's two queues, as the upload's T
  // does (its lag holds the same sum).
  const Nanos no_ts = uplink_law_ ? p.threshold_ceiling_uplink_law : p.threshold_ceiling_no_ts;
  const Nanos hi = std::max(gw_clock_ ? no_ts : b.ceiling, lo);
  return std::clamp(rtt_min ? *rtt_min : lo, lo, hi);
}

Nanos DownlinkQueueRegulator::control_interval(const Readings& r, const DownlinkQueueParams& p) {
  const Nanos base = r.rtt ? *r.rtt : r.rtt_min ? *r.rtt_min : 0;
  const Nanos hi = std::max(p.max_interval, p.interval_floor);
  return std::clamp(base, p.interval_floor, hi);
}

// The trough is the minimum over at least one round trip with its queue: data and ACKs that
// come in bursts (behind an upload) cycle once per round trip, and a shorter span would read
// the top of one cycle and the bottom of the next by turns.
Nanos DownlinkQueueRegulator::trough_span(const DownlinkQueueParams& p) const {
  return std::max(p.filter, last_.rtt_now + last_.q_down.value_or(0));
}

Nanos DownlinkQueueRegulator::spacing(const DownlinkQueueParams& p) const {
  return std::max(kMinSlotSpacing, interval(p) / kSlotsPerRtt);
}

// ---------------------------------------------------------------------------------------
// STARTUP: the first window is what the server has in flight.

// A flow whose ACKs come late with more in flight than startup_growth times the delivered rate
// over the round trip (and T): more than slow start's doubling explains, so the link is full
// and the rest is queue, already there by Little's law while q_down, read from the ACKs behind
// it, does not show it yet (2G behind an upload: 30 KB out at 12.5 KB/s over a 0.7 s round
// trip, q_down none: Q30).
void DownlinkQueueRegulator::startup(Nanos now, const Signals& s, const DownlinkQueueParams& p) {
  clamping_ = true;
  evidence_since_ = now;
  const double in_flight =
      s.in_flight > 0 ? s.in_flight : s.rate * (seconds(s.rtt_now) + seconds(*s.q_down));
  const double bdp = s.rate * (seconds(std::max(*s.rtt, s.rtt_now)) + seconds(s.threshold));
  const bool overfull = acks_late(s) && in_flight > p.startup_growth * bdp;
  if (s.q() > s.T() || overfull) {
    window_ = std::max(in_flight, min_window());
    enter_fast(s, p);
  } else {
    window_ = std::max(in_flight * (1.0 + p.growth_per_rtt), min_window());
    state_ = DownlinkState::kSlow;
  }
}

// ---------------------------------------------------------------------------------------
// SLOW: probe while the queue is short, hold while it is at most T.

void DownlinkQueueRegulator::slow(Nanos now, const Signals& s, const DownlinkQueueParams& p) {
  if (s.sending && refresh_due(now, p)) {
    enter_drain(now, s, p, true);
    return;
  }
  if (s.q() > s.T()) {
    enter_fast(s, p);
    return;
  }
  const double prev = window_;
  double growth = p.growth_per_rtt;
  const bool one_packet = s.q() < static_cast<double>(mss_) / s.rate * static_cast<double>(kSecond);
  if (s.q() < p.probe_below * s.T() || one_packet) {
    if (now >= probe_wait_) growth = probe(now, s, p);
    // The round trip grew (the ACKs now wait behind an upload): follow at once.
    window_ = std::max(window_, bdp_plus_queue(s.rtt_now, s, p));
  } else {
    probe_streak_ = 0;  // hold: the queue is where it should be
  }
  follow_use(s, prev, growth, p);
}

// Growth proportional to the window (N downloads of one phone grow like one), at most
// probe_step_queue * T of queue per step, the cap doubling while the queue stays short. After
// a fall, back to the window the flow had before it (for one horizon): the growth itself
// doubles with each step, without the cap, while the delivered rate follows the window up (a
// recovery is probed back in a few round trips; a link that stayed slow does not follow, and
// the probe goes back to the normal growth). Returns the growth used.
double DownlinkQueueRegulator::probe(Nanos now, const Signals& s, const DownlinkQueueParams& p) {
  const double streak = static_cast<double>(1u << std::min(probe_streak_, p.probe_doublings));
  double growth = p.growth_per_rtt;
  double step = 0;
  // Recovering: the growth doubles while the delivered rate follows the window up (the
  // previous step's growth at least half paid back in rate); the first step tries.
  const bool room = probe_streak_ == 0 || s.rate_now >= probe_rate_ * (1.0 + probe_growth_ / 2);
  if (now < recover_until_ && window_ < recover_window_ && room) {
    growth = std::min(1.0, growth * streak);
    step = std::min(growth * window_, recover_window_ - window_);
  } else {
    const double cap = s.rate * p.probe_step_queue * seconds(s.threshold) * streak;
    step = std::min(growth * window_, cap);
  }
  window_ += std::max(step, static_cast<double>(mss_));
  // The next step waits until this one shows in q_down: the data it lets in, a round trip to
  // its ACK, and the filter.
  probe_wait_ = now + s.rtt_now + static_cast<Nanos>(s.q()) + trough_span(p);
  probe_rate_ = s.rate_now;
  probe_growth_ = step / (window_ - step);
  ++probe_streak_;
  return growth;
}

// Never grow a window the server does not use; shrink it only when clearly unused.
void DownlinkQueueRegulator::follow_use(const Signals& s, double prev, double growth,
                                        const DownlinkQueueParams& p) {
  if (s.sending && s.in_flight > 0) {
    const double cap = (1.0 + growth) * s.in_flight + 2.0 * static_cast<double>(mss_);
    if (window_ > cap) window_ = std::max(cap, prev);
    if (cap < p.unused_fraction * prev) window_ = std::max(cap, prev * (1.0 - p.unused_decay));
  } else {
    window_ = prev;  // no data: no evidence either way
  }
  window_ = std::max(window_, min_window());
}

// ---------------------------------------------------------------------------------------
// FAST: one bandwidth-delay product of the round trip without the own queue plus a small one.

void DownlinkQueueRegulator::fast(Nanos now, const Signals& s, const DownlinkQueueParams& p) {
  if (s.sending && refresh_due(now, p)) {
    enter_drain(now, s, p, true);
    return;
  }
  size_fast(s, p);
  if (s.q() <= s.T()) {
    state_ = DownlinkState::kSlow;
  } else if (cut_in_force() && ++fast_steps_in_force_ >= p.drain_after_steps) {
    enter_drain(now, s, p, false);  // the cut holds, the queue stays: is it this flow's?
  }
}

void DownlinkQueueRegulator::enter_fast(const Signals& s, const DownlinkQueueParams& p) {
  state_ = DownlinkState::kFast;
  probe_streak_ = 0;
  fast_steps_in_force_ = 0;
  size_fast(s, p);
}

// Only lowers W; a deep cut restarts the count of steps it has held.
void DownlinkQueueRegulator::size_fast(const Signals& s, const DownlinkQueueParams& p) {
  const double target = std::max(bdp_plus_queue(*s.rtt, s, p), min_window());
  if (target >= window_) return;
  if (target < window_ * p.recut_fraction) {
    cut_edge_ = edge_max_;
    fast_steps_in_force_ = 0;
  }
  window_ = target;
}

double DownlinkQueueRegulator::bdp_plus_queue(Nanos rtt, const Signals& s,
                                              const DownlinkQueueParams& p) const {
  return s.rate * (seconds(rtt) + p.fast_target * seconds(s.threshold));
}

// ---------------------------------------------------------------------------------------
// DRAIN: see the queue empty (min(d) is current), or find it is not this flow's.

void DownlinkQueueRegulator::drain(Nanos now, const Signals& s, const DownlinkQueueParams& p) {
  if (link_falls_ != drain_.falls_before) {
    // The link fell: the queue will not empty at this window; follow the new rate at once.
    state_ = DownlinkState::kSlow;
    enter_fast(s, p);
    return;
  }
  if (!cut_in_force()) return;
  if (drain_.in_force_at == 0) drain_.in_force_at = now;
  // Only a sample of data sent under the cut counts: before, the queue has not drained yet,
  // and a sample against a re-learnt min(d) reads empty all the time.
  if (confirmed_ && confirmed_at_ > drain_.in_force_at) {
    drained_once_ = true;
    suspect_ = false;
    // Started mid-flow, the window before the drain was the startup clamp over what the
    // server had out, and every round trip measured so far held the old queue: restoring the
    // one or sizing on the other would refill that queue. Forget both; the slow state sizes
    // the window on the round trips measured from now on and probes from there.
    if (drain_.mid_flow) {
      drain_.window_before = window_;
      rtt_now_.reset();
      rtt_avg_.reset();
    }
    leave_drain(now, true);
    return;
  }
  const Nanos held = now - drain_.in_force_at;
  double& low = held < p.path_check / 2 ? drain_.first_min : drain_.second_min;
  if (low < 0 || s.q() < low) low = s.q();
  if (held >= p.path_check) end_drain(now, s, p);
}

// Drains happen at boundaries of the gateway's clock, so that the downloads of one phone,
// which share its downlink buffer, drain together; skipped while the queue emptied on its own
// within the last period (a sample at the baseline), once a first drain has confirmed it (a
// flow that started behind a sibling's queue took that queue for its minimum).
bool DownlinkQueueRegulator::refresh_due(Nanos now, const DownlinkQueueParams& p) const {
  if (p.min_refresh <= 0) return false;
  // Started mid-flow (a reload, a restart, a flow adopted from conntrack): the queue that was
  // there before is in min(d) and in every round trip measured so far. Drain at once.
  if (!drained_once_ && !handshake_taken_) return true;
  const Nanos boundary = now - now % p.min_refresh;
  const auto holdoff = static_cast<Nanos>(p.refresh_holdoff * static_cast<double>(p.min_refresh));
  if (last_step_at_ >= boundary || now - evidence_since_ <= holdoff) return false;
  // The evidence must outlive the next boundary: min(d) keeps a sample between 7/8 of the
  // horizon and the horizon (WindowedMin's buckets).
  const Nanos fresh = p.horizon - p.horizon / 8 - p.min_refresh;
  return !(drained_once_ && !suspect_ && confirmed_ && now - confirmed_at_ <= fresh);
}

void DownlinkQueueRegulator::enter_drain(Nanos now, const Signals& s, const DownlinkQueueParams& p,
                                         bool scheduled) {
  state_ = DownlinkState::kDrain;
  drain_ = Drain{};
  drain_.since = now;
  drain_.scheduled = scheduled;
  drain_.window_before = window_;
  drain_.rate_before = s.rate;
  drain_.falls_before = link_falls_;
  // A flow's first drain, and one after evidence that may stand on a re-learnt min(d), are
  // sized on the base round trip plus the ACKs' uplink wait, not on rtt_now: a queue hidden
  // in min(d) is in rtt_now too, and a drain sized on it would not empty the queue. (Not on
  // the floor: next to an unregulated upload the ACKs wait seconds, and a floor drain would
  // stop the download for as long.) At least kDrainSegments: with fewer in flight a phone
  // acknowledges each segment after its delayed-ACK timer, and every sample carries it.
  Nanos rtt = s.rtt_now;
  if ((!drained_once_ || suspect_) && s.rtt_min && s.q_up)
    rtt = std::min(rtt, *s.rtt_min + *s.q_up);
  const double floor = std::max(min_window(), kDrainSegments * static_cast<double>(mss_));
  double w = std::max(p.drain_fraction * s.rate * seconds(rtt), floor);
  // Started mid-flow, the base round trip was never measured without that queue either: the
  // first drain goes to the floor (for path_check at most), or it would not empty the queue.
  if (!drained_once_ && !handshake_taken_) {
    w = floor;
    drain_.mid_flow = true;
  }
  window_ = std::min(window_, w);
  cut_edge_ = edge_max_;
  ++drains_;
}

// The cut held for path_check and the queue did not empty. If its floor did not fall either
// (second half's minimum within max(2 ticks, path_tolerance) of the first's) and it stayed
// above T, it is not this flow's queue: a longer path, or a sender rsfcd does not regulate.
// It becomes the baseline (the offset, which ages out with the horizon and falls back as
// soon as a sample reads lower), and the window covers the pre-drain rate on the round trip
// that now includes it. (A fall during the drain ends it first: see drain().)
void DownlinkQueueRegulator::end_drain(Nanos now, const Signals& s, const DownlinkQueueParams& p) {
  const double tol = std::max(2.0 * ns_per_tick(), static_cast<double>(p.path_tolerance));
  const double first = drain_.first_min, second = drain_.second_min;
  const bool flat = first >= 0 && second >= 0 && second >= first - tol;
  const double remaining = std::min(first, second);
  const bool longer = flat && remaining > s.T();
  if (longer) {
    offset_ += static_cast<Nanos>(remaining);
    offset_at_ = now;
    ++path_rebaselines_;
    rtt_now_.reset();  // measured against the old baseline: short by the raise
    rtt_avg_.reset();
  }
  leave_drain(now, drain_.scheduled);
  if (longer) {
    window_ = std::max(window_, drain_.rate_before * (seconds(s.rtt_now) + remaining / 1e9));
  }
}

// A drain is a measurement: W goes back to where it was.
void DownlinkQueueRegulator::leave_drain(Nanos now, bool evidence) {
  window_ = std::max(window_, drain_.window_before);
  state_ = DownlinkState::kSlow;
  if (evidence) evidence_since_ = now;
}

}  // namespace rsfc
