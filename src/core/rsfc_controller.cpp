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

}  // namespace

uint32_t UplinkRegulator::window() const {
  if (!clamping_) return kNoClamp;
  const double w = std::max(w_, min_window());
  return w >= static_cast<double>(kNoClamp - 1) ? kNoClamp - 1 : static_cast<uint32_t>(w);
}

Nanos UplinkRegulator::interval(const RsfcParams& p) const {
  const Nanos base = rtt_ ? *rtt_ : rtt_min_ ? *rtt_min_ : 0;
  const Nanos hi = std::max(p.max_interval, p.control_interval_floor);
  return std::clamp(base, p.control_interval_floor, hi);
}

void UplinkRegulator::take_handshake(Nanos now, const RsfcParams& p) {
  if (!ts_decided_ && hs_.synack_seen()) {
    ts_ = hs_.syn_timestamps();
    ts_decided_ = true;
  }
  if (hs_taken_ || !hs_.complete()) return;
  hs_taken_ = true;
  if (auto ph = hs_.phone_half()) phone_half_min_.update(now, *ph, horizon(p));
  if (auto sh = hs_.server_half()) server_half_min_.update(now, *sh, horizon(p));
  if (auto pair = hs_.ts_pair()) {
    delay_.on_handshake(pair->a_syn, pair->ts_syn, pair->a_ack, pair->ts_ack);
  }
}

void UplinkRegulator::on_uplink_segment(Nanos now, const TcpSegment& s, const RsfcParams& p) {
  hs_.on_segment(now, true, s);
  if (!ts_decided_ && !hs_.synack_seen() && !s.syn()) ts_ = s.has_ts;  // handshake unseen
  take_handshake(now, p);
  if (s.syn()) rate_.start(s.seq + 1);
  const Nanos iv = interval(p);
  const Nanos spacing = std::max(kMinSlotSpacing, iv / kSlotsPerRtt);

  if (ts_ && s.has_ts) {
    std::optional<Nanos> ph;  // gateway -> phone -> gateway, when this segment echoes a slot
    if (s.ack_flag()) ph = phone_echo_.on_echo(now, s.tsecr);
    const auto tb = delay_.on_segment(now, s.tsval, horizon(p), p.tbuff_filter,
                                      ph ? std::optional<Nanos>(now - *ph) : std::nullopt);
    server_echo_.on_forward(now, s.tsval, spacing);
    if (delay_.min_drops() != drops_seen_) {
      // min(d) fell: the round trips measured against the old one (sample minus its t_buff)
      // were too long by the queue hidden in it. Learn them afresh.
      drops_seen_ = delay_.min_drops();
      phone_ex_.reset();
      ex_slow_.reset();
    }
    if (ph) {
      last_phone_side_ = *ph;
      phone_half_min_.update(now, *ph, horizon(p));
      if (tb) {
        const Nanos ex = std::max<Nanos>(0, *ph - *tb);
        phone_ex_.add(static_cast<double>(ex), p.rtt_gain);
        // Slow, time-based average: the round trip the window is sized on.
        if (!ex_slow_.has()) {
          ex_slow_.add(static_cast<double>(ex), 1.0);
        } else if (now > ex_slow_at_) {
          const double dt = static_cast<double>(now - ex_slow_at_);
          const double tau = static_cast<double>(std::max<Nanos>(p.rtt_smoothing, 1));
          ex_slow_.add(static_cast<double>(ex), 1.0 - std::exp(-dt / tau));
        }
        ex_slow_at_ = now;
      }
    }
  }
  if (s.payload_len == 0 || s.syn()) return;
  last_data_at_ = now;
  const uint32_t fresh = rate_.on_data(now, s.seq, s.payload_len, iv);
  if (sub_ && fresh > 0) sub_->on_delivered(now, fresh, iv);
  if (ts_) return;

  // Timestamp-less: server half by seq/ack matching, phone side by the window-opening lag.
  server_probe_.on_data(now, s.seq, s.payload_len);
  if (auto lag = lag_.on_data(now, s.seq + s.payload_len)) {
    last_phone_side_ = *lag;
    phone_half_min_.update(now, *lag, horizon(p));
    lag_filter_.update(now, *lag, lag_window(p));
    phone_ex_.add(static_cast<double>(*lag), p.rtt_gain);
    const auto base = phone_half_min_.get(now, horizon(p));
    const Nanos tol = std::max(
        UplinkDelayEstimator::kConfirmFloor,
        base ? static_cast<Nanos>(p.lag_confirm_fraction * static_cast<double>(base->value)) : 0);
    if (base && *lag <= base->value + tol) {
      lag_confirmed_at_ = now;
      lag_confirmed_ = true;
    }
  }
}

void UplinkRegulator::on_downlink_segment(Nanos now, const TcpSegment& s, const RsfcParams& p) {
  hs_.on_segment(now, false, s);
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

WindowDecision UplinkRegulator::target_window(Nanos now, const RsfcParams& p) {
  WindowDecision d;
  if (now >= next_step_) d.stepped = step(now, p);
  d.window = window();
  if (!clamping_) d.window = startup_window(p);
  return d;
}

Nanos UplinkRegulator::lag_window(const RsfcParams& p) const {
  return std::max(p.tbuff_filter, 2 * interval(p));
}

void UplinkRegulator::enter_fast(const RsfcParams& p) {
  state_ = RsfcState::kFast;
  probe_streak_ = 0;
  fast_steps_in_force_ = 0;
  fast_step(p);
}

double UplinkRegulator::bdp_plus_queue(Nanos rtt, const RsfcParams& p) const {
  return rho_ * (seconds(rtt) + p.fast_target * seconds(T_));
}

// Fast-state sizing: one BDP of the round trip the flow really sees plus a small queue.
void UplinkRegulator::fast_step(const RsfcParams& p) {
  const double target = std::max(bdp_plus_queue(*rtt_, p), min_window());
  if (target < w_) {
    if (target < w_ * p.recut_fraction) {
      cut_edge_ = edge_max_;  // in force once everything sent under the old edge is acked
      fast_steps_in_force_ = 0;
    }
    w_ = target;
  }
}

void UplinkRegulator::restart_drain_measurement() {
  monitor_steps_ = 0;
  path_first_min_ = -1;
  path_second_min_ = -1;
  path_first_floor_.reset();
  path_second_floor_.reset();
}

double UplinkRegulator::monitor_min_tb() const {
  if (path_first_min_ < 0) return path_second_min_;
  if (path_second_min_ < 0) return path_first_min_;
  return std::min(path_first_min_, path_second_min_);
}

void UplinkRegulator::enter_monitor(Nanos now, const RsfcParams& p, bool scheduled) {
  state_ = RsfcState::kMonitor;
  monitor_since_ = now;
  restart_drain_measurement();
  monitor_scheduled_ = scheduled;
  rho_at_monitor_ = rho_;
  // Until a drain has confirmed min(d), the round trip itself may contain a queue taken for
  // the baseline (a flow that started behind its siblings' queue: its minimum, its round
  // trip and so a rate x RTT drain are all inflated by it): drain to the floor, once.
  const double drain = (ts_ && !drain_confirmed_)
                           ? min_window()
                           : std::max(p.drain_fraction * rho_ * seconds(rtt_now_), min_window());
  w_before_monitor_ = w_;
  drops_at_monitor_ = delay_.min_drops();
  w_ = std::min(w_, drain);
  cut_edge_ = edge_max_;
}

void UplinkRegulator::leave_monitor(Nanos now, bool evidence) {
  // The drain was a measurement: the window goes back to where it was (the slow state then
  // judges the queue afresh against the confirmed minimum) - unless the drain found a lower
  // minimum: then that window was sized on a round trip with a queue in it, and the slow
  // state grows the window again from the drained one (at once to rate x round trip once
  // the round trip is measured anew).
  if (delay_.min_drops() == drops_at_monitor_) w_ = std::max(w_, w_before_monitor_);
  state_ = RsfcState::kSlow;
  // A drain that neither emptied the buffer nor was scheduled (the siblings kept sending)
  // says nothing about min(d): the next boundary drains.
  if (evidence) evidence_since_ = now;
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
  if (p.path_check <= 0 || !monitor_scheduled_ || path_first_min_ < 0 || monitor_min_tb() <= T) {
    return PathCheck::kNo;
  }
  // A longer path is a change from a baseline this flow has seen confirmed (a drain emptied
  // the buffer once), and it leaves no empty moment: a flow that saw the buffer empty
  // within the last period, or never, may be looking at a sibling's queue (a new flow behind
  // one that skipped this boundary because its buffer had just emptied).
  if (!drain_confirmed_ || now - confirmed_at() < p.min_refresh) return PathCheck::kNo;
  const Nanos span = now - path_since_;
  if (span < p.path_check || path_second_min_ < 0) return PathCheck::kWait;
  const double tol =
      std::max(2.0 * delay_.tick().ns_per_tick(), static_cast<double>(p.path_tolerance));
  // The floor is the one-way delay's (t_buff + min(d)): an old minimum that ages out during
  // the check raises min(d) and lowers t_buff by as much, which is no queue draining. (Both
  // halves have one whenever they have a t_buff: the check runs with timestamps only.)
  if (!path_first_floor_ || !path_second_floor_ ||
      static_cast<double>(*path_second_floor_) < static_cast<double>(*path_first_floor_) - tol) {
    return PathCheck::kNo;
  }
  const double delivered =
      static_cast<double>(static_cast<uint32_t>(rate_.highest_end() - path_end_));
  return delivered < p.path_foreign_rate * rho_at_monitor_ * seconds(span) ? PathCheck::kLonger
                                                                           : PathCheck::kNo;
}

// Scheduled drains happen at period boundaries of the gateway's clock (plus the phase the
// engine may give per subscriber), so that all flows of one phone, which share one buffer,
// drain together: one flow alone cannot empty a buffer its siblings keep filling.
bool UplinkRegulator::refresh_due(Nanos now, Nanos prev_step, const RsfcParams& p) const {
  if (p.min_refresh <= 0) return false;
  const Nanos t = now + drain_phase_;
  const Nanos boundary = now - ((t % p.min_refresh) + p.min_refresh) % p.min_refresh;
  if (prev_step >= boundary ||
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
  const bool fine_tick = delay_.tick().ns_per_tick() <= static_cast<double>(p.fine_tick);
  const bool evidence = ts_ && fine_tick && drain_confirmed_ &&
                        delay_.min_rises() == rises_at_drain_ &&
                        now - confirmed_at() <= p.min_refresh;
  return !evidence;
}

uint32_t UplinkRegulator::startup_window(const RsfcParams& p) const {
  const double base = p.initial_window_bytes > 0 ? p.initial_window_bytes : kStartupWindow;
  const double w = std::max(base, startup_inflight_ * p.startup_growth);
  return w >= static_cast<double>(kNoClamp - 1) ? kNoClamp - 1 : static_cast<uint32_t>(w);
}

bool UplinkRegulator::step(Nanos now, const RsfcParams& p) {
  min_segments_ = p.min_window_segments;
  const Nanos hz = horizon(p);
  const auto srv = server_half_min_.get(now, hz);
  const auto ph = phone_half_min_.get(now, hz);
  const Nanos srv_v = srv ? srv->value : 0;
  rtt_min_.reset();
  if (ph) rtt_min_ = ph->value + srv_v;

  // Threshold.
  if (p.threshold) {
    T_ = *p.threshold;
  } else {
    const Nanos g = static_cast<Nanos>(delay_.tick().ns_per_tick());
    const Nanos lo =
        std::max(p.threshold_floor, static_cast<Nanos>(p.tick_multiple * static_cast<double>(g)));
    const Nanos hi = std::max(p.threshold_ceiling, lo);
    T_ = std::clamp(rtt_min_ ? *rtt_min_ : lo, lo, hi);
  }

  // Queue signal and the round trip without this flow's uplink queue.
  tb_.reset();
  rtt_.reset();
  if (ts_) {
    if (delay_.ready()) tb_ = delay_.filtered(now, p.tbuff_filter);
    if (phone_ex_.has()) {
      const Nanos ex = std::llround(phone_ex_.get());
      rtt_now_ = ex + srv_v;
      rtt_ = std::llround(ex_slow_.has() ? ex_slow_.get() : phone_ex_.get()) + srv_v;
    }
  } else if (ph) {
    if (const auto f = lag_filter_.get(now, lag_window(p))) {
      tb_ = std::max<Nanos>(0, f->value - ph->value);
    }
    rtt_ = ph->value + srv_v;
    rtt_now_ = *rtt_;
  }
  const Nanos iv = interval(p);
  next_step_ = now + iv;
  const Nanos prev_step = last_step_at_;
  last_step_at_ = now;
  const double own_rate = rate_.max(now, iv);
  rho_ = own_rate;
  if (sub_ && p.per_subscriber) {
    // A flow's share of its subscriber's link (see SubscriberUplink): its part of the bytes
    // all the subscriber's regulated uploads delivered since this flow's previous step, pulled
    // share_equalize of the way toward an equal split among the members that use their
    // windows (an idle or application-limited flow, an iperf control connection, does not
    // count: it would claim a share it never fills). The flow's own windowed maximum still
    // caps it.
    // Only a flow that delivered something since its previous step reads the shared entry
    // (a download's ACK-only flow or an idle one never does: no cache miss per step); after
    // such a gap the snapshots start afresh and the cap waits a step.
    // Both totals only grow while this flow stays attached (attach() takes fresh snapshots).
    const uint64_t own_total = rate_.total_bytes();
    const uint64_t own = own_total - own_bytes_at_step_;
    own_bytes_at_step_ = own_total;
    if (own == 0) {
      sub_counted_ = false;
    } else {
      const uint64_t sub_total = sub_->total_bytes();
      const uint64_t all = sub_counted_ ? sub_total - sub_bytes_at_step_ : 0;
      sub_bytes_at_step_ = sub_total;
      sub_counted_ = true;
      if (clamping_ && tb_ && rtt_ &&
          rho_ * (seconds(rtt_now_) + seconds(*tb_)) >= p.unused_fraction * w_) {
        sub_->report_active(now, sub_epoch_);
      }
      if (all > own && sub_->has_sample()) {
        const double share = static_cast<double>(own) / static_cast<double>(all);
        const double equal = 1.0 / static_cast<double>(sub_->active(now));
        const double mine = (1.0 - p.share_equalize) * share + p.share_equalize * equal;
        rho_ = std::min(rho_, mine * sub_->rate(now, iv));
      }
    }
  }

  if (state_ == RsfcState::kStartup && rate_.has_sample()) {
    // In flight now, by Little's law on the round trip the phone sees (its queue included).
    const Nanos seen = std::max(rtt_min_.value_or(0), last_phone_side_ + srv_v);
    startup_inflight_ = rho_ * seconds(seen);
  }
  const bool ready = tb_ && rtt_ && rho_ > 0 && rate_.has_sample();
  if (!ready) return false;
  const bool sending = now - last_data_at_ <= iv;
  const double tb = static_cast<double>(*tb_);
  const double T = static_cast<double>(T_);
  const double used = rho_ * (seconds(rtt_now_) + seconds(*tb_));  // in flight, Little's law
  // Queueing the flow may keep because the round trip is below its recent maximum (a
  // concurrent download's downlink queue breathing): filling those gaps keeps the uplink busy
  // without raising the phone's total round trip above that maximum.
  // Never negative: while the round trip climbs above its average (the download's queue
  // growing), the upload's ACKs arrive later and its own buffer runs empty; lowering the
  // thresholds then would stop the probing exactly when the window has to follow the round
  // trip up.
  const double slack = static_cast<double>(std::max<Nanos>(0, *rtt_ - rtt_now_));
  const double mss = static_cast<double>(mss_);
  // Every d sample contains one packet's transmission at the bottleneck, so a min(d) taken
  // at a higher rate reads low after a capacity drop (2 -> 0.5 Mbit/s: 6 -> 24 ms per
  // 1500-byte packet) until it ages out, and t_buff over-reads by the difference. A reading
  // within one packet's time at the link's current rate (the subscriber's, which its flows
  // share) still counts as an empty buffer: less than one packet is no standing queue.
  // Asked only in the slow state, and only when probe_below * T alone says "not empty", so
  // the subscriber's shared entry is read only then.
  const auto within_one_packet = [&] {
    const double link_rate = std::max(own_rate, sub_ ? sub_->rate(now, iv) : 0.0);
    return link_rate > 0 && tb < mss / link_rate * static_cast<double>(kSecond) + slack;
  };

  switch (state_) {
    case RsfcState::kStartup:
      clamping_ = true;
      evidence_since_ = now;
      if (tb > T + slack) {
        w_ = std::max(used, min_window());
        enter_fast(p);
      } else {
        w_ = std::max(used * (1.0 + p.growth_per_rtt), min_window());
        state_ = RsfcState::kSlow;
      }
      return true;

    case RsfcState::kSlow: {
      // The boundary first: the step that crosses it is the only one that sees it due, and a
      // flow that went to the fast state there would skip the scheduled drain (and with it
      // the path check) for a whole period.
      if (sending && refresh_due(now, prev_step, p)) {
        enter_monitor(now, p, true);
        return true;
      }
      if (tb > T + slack) {
        enter_fast(p);
        return true;
      }
      const double prev = w_;
      if (tb < p.probe_below * T + slack || within_one_packet()) {
        // Each step adds at most probe_step_queue * T of queue should the link turn out to be
        // full; the allowance doubles with every further step that still finds the buffer
        // empty (decisive when far from capacity, careful near it).
        const double streak = static_cast<double>(1u << std::min(probe_streak_, p.probe_doublings));
        const double step_cap = rho_ * p.probe_step_queue * seconds(T_) * streak;
        w_ += std::max(std::min(p.growth_per_rtt * w_, step_cap), mss);
        // The buffer is empty: the phone is window-limited. If the round trip grew (the
        // upload's ACKs queue behind a download), the window must follow it at once, not by
        // probe steps: one delivered-rate times the current round trip plus the fast state's
        // standing queue, which is what the fast state would leave.
        w_ = std::max(w_, bdp_plus_queue(rtt_now_, p));
        ++probe_streak_;
      } else {
        // Hold: the queue is where it should be. Without timestamps the reading includes a
        // download's downlink queue, which keeps the flow in this band while its own buffer
        // may be empty: there the window keeps creeping up by one MSS per step (lab, 3G
        // without timestamps: upload with download 82 % of unregulated without the creep,
        // 87 % with it).
        if (!ts_) w_ += mss;
        probe_streak_ = 0;
      }
      if (sending) {
        // Never grow a window the phone does not use; shrink it only when clearly unused
        // (the in-flight estimate is rough: rate and round trip both fluctuate).
        const double cap = (1.0 + p.growth_per_rtt) * used + 2.0 * mss;
        if (w_ > cap) w_ = std::max(cap, prev);
        if (cap < p.unused_fraction * prev) w_ = std::max(cap, prev * (1.0 - p.unused_decay));
      } else {
        w_ = prev;  // no data: no evidence either way
      }
      w_ = std::max(w_, min_window());
      return true;
    }

    case RsfcState::kFast:
      if (sending && refresh_due(now, prev_step, p)) {
        enter_monitor(now, p, true);
        return true;
      }
      fast_step(p);
      if (tb <= T + slack) {
        state_ = RsfcState::kSlow;
      } else if (cut_in_force()) {
        if (++fast_steps_in_force_ >= p.monitor_after_steps) enter_monitor(now, p, false);
      }
      return true;

    case RsfcState::kMonitor: {
      if (confirmed_at() >= monitor_since_ && has_confirmation()) {
        drain_confirmed_ = true;
        rises_at_drain_ = delay_.min_rises();
        leave_monitor(now, true);  // the buffer emptied: min(d) is current
        return true;
      }
      if (!monitor_scheduled_ && refresh_due(now, prev_step, p)) {
        // A boundary passed during a drain of this flow's own: it becomes the scheduled one
        // (the siblings drain from now on), and the path check starts afresh.
        monitor_scheduled_ = true;
        restart_drain_measurement();
      }
      if (!cut_in_force()) return true;
      if (path_first_min_ < 0) {
        path_since_ = now;
        path_end_ = rate_.highest_end();
      }
      const bool first_half = now - path_since_ < p.path_check / 2;
      double& half = first_half ? path_first_min_ : path_second_min_;
      if (half < 0 || tb < half) half = tb;
      if (const auto md = ts_ ? delay_.min_delay(now, hz) : std::nullopt) {
        auto& floor = first_half ? path_first_floor_ : path_second_floor_;
        const Nanos level = *tb_ + *md;
        if (!floor || level < *floor) floor = level;
      }
      if (monitor_steps_ < p.monitor_steps) ++monitor_steps_;
      if (monitor_steps_ >= p.monitor_steps) {
        const PathCheck path = ts_ ? path_check(now, T, p) : PathCheck::kNo;
        if (path == PathCheck::kWait) return true;
        // The drain did not empty the buffer. Without timestamps, what is left is not this
        // flow's queue (the phone-side round trip includes the downlink queue): it becomes
        // the new baseline. With timestamps min(d) is a physical one-way delay: it is raised
        // only when a scheduled drain showed a longer path (path_check); otherwise it is left
        // to age out over the horizon, because raising it while siblings sharing the buffer
        // kept it filled would ratchet the queue up.
        const Nanos by = static_cast<Nanos>(monitor_min_tb());
        if (!ts_) {
          phone_half_min_.reset_to(now, ph->value + by);
          lag_filter_.clear();
          lag_confirmed_at_ = now;
          lag_confirmed_ = true;
        } else if (path == PathCheck::kLonger) {
          delay_.raise_baseline(now, by);
          ++path_rebaselines_;
          phone_ex_.reset();  // measured against the old minimum: too short by the raise
          ex_slow_.reset();
        }
        leave_monitor(now, monitor_scheduled_);
        if (path == PathCheck::kLonger) {
          // What was taken for queue is path: the window that carried the flow's rate
          // before the drain now has to cover the longer round trip too.
          w_ = std::max(w_, rho_at_monitor_ * seconds(rtt_now_ + by));
        }
      }
      return true;
    }
  }
  return true;
}

}  // namespace rsfc
