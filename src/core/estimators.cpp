#include "rsfc/core/estimators.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rsfc {

TcpSegment TcpSegment::from_view(const PacketView& v) {
  TcpSegment s;
  s.seq = v.seq;
  s.ack = v.ack;
  s.payload_len = v.payload_len;
  s.flags = v.flags;
  s.has_ts = v.opts.has_timestamps;
  s.tsval = v.opts.tsval;
  s.tsecr = v.opts.tsecr;
  s.mss_option = v.opts.has_mss ? v.opts.mss : 0;
  return s;
}

// --- TickEstimator -----------------------------------------------------------------------

void TickEstimator::publish(double g, bool snapped, Quality q) {
  const bool changed = g_ == 0 || std::fabs(g - g_) > g_ * 1e-6;
  g_ = g;
  snapped_ = snapped;
  quality_ = q;
  if (changed) ++version_;
}

void TickEstimator::reanchor() {
  upper_.reanchor();
  lower_.reanchor();
}

bool TickEstimator::Slope::add(Nanos t, int64_t ticks) {
  if (anchors_ == 0) {
    anchor_[0] = {t, ticks, 0, false};
    anchors_ = 1;
    open_ = false;
    checkpoint_span_ = 0;
    return false;
  }
  if (anchors_ < kAnchors && t - anchor_[anchors_ - 1].t >= kMinSpan) {
    anchor_[anchors_++] = {t, ticks, 0, false};
  }
  bool any = false;
  for (int i = 0; i < anchors_; ++i) {
    Anchor& a = anchor_[i];
    const Nanos span = t - a.t;
    const int64_t dt = ticks - a.ticks;
    if (span < kMinSpan || dt <= 0) continue;
    const double slope = static_cast<double>(span) / static_cast<double>(dt);
    if (!a.open || (take_min_ ? slope < a.best : slope > a.best)) a.best = slope;
    a.open = true;
    any = true;
  }
  if (!any) return false;
  if (!open_) {
    open_ = true;
    block_start_ = t;
    return false;
  }
  if (t - block_start_ < kBlock) return false;
  // Block end: the extreme across the anchors, its stability across doublings of the span.
  bool first = true;
  for (int i = 0; i < anchors_; ++i) {
    Anchor& a = anchor_[i];
    if (!a.open) continue;
    if (first || across(a.best, value_)) value_ = a.best;
    first = false;
    a.open = false;  // the next block starts afresh
  }
  has_value_ = true;
  const Nanos span = t - anchor_[0].t;
  if (checkpoint_span_ == 0) {
    checkpoint_span_ = span;
    checkpoint_value_ = value_;
  } else if (span >= 2 * checkpoint_span_) {
    stable_ = std::fabs(value_ - checkpoint_value_) <= value_ * kStableTolerance;
    checkpoint_span_ = span;
    checkpoint_value_ = value_;
  }
  block_start_ = t;
  return true;
}

void TickEstimator::on_sample(Nanos arrival, int64_t ticks) {
  if (final()) return;  // nothing can change a snap: no slopes on every packet after it
  if (upper_.add(arrival, ticks)) decide(arrival);
}

void TickEstimator::on_echo(Nanos forwarded, int64_t ticks) {
  if (final()) return;
  if (!lower_.anchored()) {
    echo_first_t_ = forwarded;
    echo_first_ticks_ = ticks;
    echo_tried_ = false;
    echo_last_match_ = 0;
  } else if (quality_ == Quality::kUnknown && forwarded - echo_first_t_ >= kEchoHintSpan &&
             (!echo_tried_ || !handshake_)) {
    // Provisional value from the echoes (blind to the uplink queue, not to a downlink queue
    // that grows or shrinks over the span). The first try's match is taken. A flow without a
    // handshake (adopted after a restart) has no other hint before the slopes' second: after
    // a try that matched no clock (a download filling the phone's buffer stretches the
    // phone's side of the span; such a flow waited seconds for the slopes) the next span
    // starts here, and a later match is taken once two spans in a row agree on it. A flow
    // that saw its handshake keeps one try (retrying reshuffled the traced cells' starts in
    // the simulator, for nothing in their medians).
    const uint8_t match = hint_match(forwarded - echo_first_t_, ticks - echo_first_ticks_);
    if (match != 0 && (!echo_tried_ || echo_last_match_ == match)) publish_hint(match);
    echo_last_match_ = match;
    echo_tried_ = true;
    echo_first_t_ = forwarded;
    echo_first_ticks_ = ticks;
  }
  if (lower_.add(forwarded, ticks)) decide(forwarded);
}

void TickEstimator::decide(Nanos t) {
  if (final()) return;
  const auto u = upper_.value();
  const auto l = lower_.value();
  // A side that has samples but no value yet gets its chance first, for kSideWait. Its
  // samples may have stopped: an echo needs the forwarding time of the data it answers, and a
  // download whose first window filled a 2G link's buffer (its ACKs behind an upload) can
  // outrun the times kept, so the echo side stays anchored without a value. Waited on for
  // good, it kept a clean arrival side (1.00006 ms) from deciding for the whole test: the
  // download was never regulated and its queue held the phone's RTT at 10 s (lab, Q24).
  const auto waiting = [t](const Slope& side, const std::optional<double>& value) {
    return !value && side.anchored() && t - side.anchored_at() < kSideWait;
  };
  if (waiting(upper_, u) || waiting(lower_, l)) return;
  if (!u && !l) return;
  const double lo = std::min(l ? *l : *u, u ? *u : *l);
  const double hi = std::max(l ? *l : *u, u ? *u : *l);
  // The one candidate in [from, to] (relative tolerance on both ends), if exactly one.
  const auto only = [](double from, double to) -> std::optional<Nanos> {
    std::optional<Nanos> match;
    int matches = 0;
    for (Nanos c : kCandidates) {
      const double cd = static_cast<double>(c);
      if (cd >= from * (1.0 - kSnapTolerance) && cd <= to * (1.0 + kSnapTolerance)) {
        match = c;
        ++matches;
      }
    }
    if (matches != 1) return std::nullopt;
    return match;
  };
  // Both sides are true bounds (a queue only adds to U and only takes from L), so a bracket
  // holding one clock that phones use holds the tick, however wide it is: a wide bracket
  // means a queue growing on one side (an unregulated upload inflates U; a download filling
  // the downlink buffer before anyone regulates it deflates L). HZ=300's 3.333 ms counts as
  // such a clock, so that a bracket holding both it and 4 ms is no snap.
  std::optional<Nanos> match = only(lo, hi);
  if (match && lo * (1.0 - kSnapTolerance) <= kHz300 && kHz300 <= hi * (1.0 + kSnapTolerance)) {
    match.reset();
  }
  if (!match && u && l && hi / lo - 1.0 > kMaxBracket && lower_.stable()) {
    // A wide bracket holding several clocks: an upload's growing queue (U inflated) is the
    // common cause, so a candidate close to L, once L has settled (3.333 ms with U inflated
    // to 4 must not become 4; a download's queue still filling or draining moves L).
    match = only(lo, lo * (1.0 + kLowerSlack));
  }
  if (match) {
    publish(static_cast<double>(*match), true, Quality::kEstimated);
    return;
  }
  // Odd value: the stable side(s). Both present but far apart: as above, the arrival side is
  // the suspect (an uplink queue growing at a steady rate even looks stable), so L alone.
  double g = 0;
  if (u && l && hi / lo - 1.0 > 2.0 * kStableTolerance) {
    if (!lower_.stable()) return;
    g = *l;
  } else if (u && l) {
    if (!upper_.stable() || !lower_.stable()) return;
    g = (*u + *l) / 2;
  } else if (u) {
    if (!upper_.stable()) return;
    g = *u;
  } else {
    if (!lower_.stable()) return;
    g = *l;
  }
  if (quality_ != Quality::kEstimated || std::fabs(g - g_) > g_ * 1e-4) {
    publish(g, false, Quality::kEstimated);
  }
}

void TickEstimator::on_handshake(Nanos a_syn, int64_t t_syn, Nanos a_ack, int64_t t_ack) {
  handshake_ = true;
  if (quality_ != Quality::kUnknown) return;
  if (const uint8_t match = hint_match(a_ack - a_syn, t_ack - t_syn)) publish_hint(match);
}

void TickEstimator::on_sibling(Nanos g) {
  if (quality_ != Quality::kUnknown) return;
  for (uint8_t i = 0; i < kCandidates.size(); ++i) {
    if (kCandidates[i] == g) {
      publish_hint(static_cast<uint8_t>(i + 1));
      return;
    }
  }
}

// The one clock phones use that `dt` ticks over `span` ns fit, within one tick's quantisation
// and kHintSlack, as 1 + its index in kCandidates; 0 when none or several fit.
uint8_t TickEstimator::hint_match(Nanos span, int64_t dt) {
  if (span < kHintMinSpan || dt < 2) return 0;
  const double hint = static_cast<double>(span) / static_cast<double>(dt);
  uint8_t match = 0;
  for (size_t i = 0; i < kCandidates.size(); ++i) {
    const auto c = static_cast<double>(kCandidates[i]);
    const double n = static_cast<double>(span) / c;  // ticks in the span
    if (n <= 2.0) continue;                          // one tick of quantisation could be anything
    const double tol = 1.0 / (n - 1.0) + kHintSlack;
    if (std::fabs(hint / c - 1.0) <= tol) {
      if (match != 0) return 0;  // ambiguous
      match = static_cast<uint8_t>(i + 1);
    }
  }
  return match;
}

// --- UplinkDelayEstimator ------------------------------------------------------------------

int64_t UplinkDelayEstimator::d_of(Nanos now, int64_t ticks) const {
  return (now - ref_a_) - std::llround(static_cast<double>(ticks - ref_t_) * g_used_);
}

void UplinkDelayEstimator::on_handshake(Nanos a_syn, uint32_t ts_syn, Nanos a_ack,
                                        uint32_t ts_ack) {
  if (hint_given_) return;
  hint_given_ = true;
  // Unwrap the ACK's TSval relative to the SYN's (a separate, local unwrap: the pair may be
  // given after later segments were fed).
  const int64_t t_syn = ts_syn;
  const int64_t t_ack = t_syn + static_cast<int32_t>(ts_ack - ts_syn);
  tick_.on_handshake(a_syn, t_syn, a_ack, t_ack);
}

std::optional<Nanos> UplinkDelayEstimator::on_segment(Nanos now, uint32_t tsval, Nanos horizon,
                                                      Nanos filter,
                                                      std::optional<Nanos> echo_forwarded) {
  const int64_t ticks = unwrap_.unwrap(tsval);
  if (have_last_ && now - last_sample_ > horizon) {
    // Idle longer than the horizon: nothing from before is trusted (see header).
    tick_.reanchor();
    dmin_.clear();
    filter_.clear();
    has_ref_ = false;
    confirmed_ = false;
    last_raw_.reset();
    ++min_rises_;
    last_min_.reset();
  }
  last_sample_ = now;
  have_last_ = true;
  last_ticks_ = ticks;
  tick_.on_sample(now, ticks);
  if (echo_forwarded) tick_.on_echo(*echo_forwarded, ticks);
  if (!tick_.known()) return std::nullopt;

  if (!has_ref_) {
    has_ref_ = true;
    ref_a_ = now;
    ref_t_ = ticks;
    g_used_ = tick_.ns_per_tick();
    tick_version_ = tick_.version();
  } else if (tick_.version() != tick_version_) {
    const double g_new = tick_.ns_per_tick();
    const double dg = g_new - g_used_;
    dmin_.rebase([dg](int64_t value, int64_t aux) {
      return value - std::llround(static_cast<double>(aux) * dg);
    });
    if (std::fabs(dg) > g_used_ * 0.01) filter_.clear();  // a big change: old t_buff is noise
    g_used_ = g_new;
    tick_version_ = tick_.version();
    ++min_rises_;  // a re-based minimum is not the one a drain confirmed
    last_min_.reset();
  }

  const int64_t d = d_of(now, ticks);
  const auto before = dmin_.empty() ? std::nullopt : dmin_.get(now, horizon);
  dmin_.update(now, d, horizon, ticks - ref_t_);
  const auto m = dmin_.get(now, horizon);
  const Nanos tb = m && d > m->value ? d - m->value : 0;
  const double tol = confirm_tolerance();
  if (before && m && static_cast<double>(before->value - m->value) > tol) {
    ++min_drops_;  // a delay below the minimum: it had a queue in it (or the route shortened)
  }
  if (m) {
    // The old minimum aged out and the new one is higher by more than the confirmation
    // tolerance (relative to the lowest minimum since the last counted rise, so that a slow
    // creep counts too; sub-tick jitter of the stored minimum does not).
    if (last_min_ && m->value >= *last_min_) {
      if (static_cast<double>(m->value - *last_min_) > tol) {
        ++min_rises_;
        last_min_ = m->value;
      }
    } else {
      last_min_ = m->value;
    }
  }
  last_raw_ = tb;
  if (filter > 0) filter_.update(now, tb, filter);
  if (static_cast<double>(tb) <= tol) {
    confirmed_at_ = now;
    confirmed_ = true;
  }
  return tb;
}

std::optional<Nanos> UplinkDelayEstimator::filtered(Nanos now, Nanos filter) const {
  if (filter <= 0) return last_raw_;
  const auto s = filter_.get(now, filter);
  if (!s) return std::nullopt;
  return s->value;
}

std::optional<Nanos> UplinkDelayEstimator::min_delay(Nanos now, Nanos horizon) const {
  if (!has_ref_ || dmin_.empty()) return std::nullopt;
  const auto m = dmin_.get(now, horizon);
  if (!m) return std::nullopt;
  return m->value;
}

void UplinkDelayEstimator::raise_baseline(Nanos now, Nanos by) {
  if (!has_ref_ || dmin_.empty() || by <= 0) return;
  // Stamp the new minimum `now`: it then ages like a fresh sample.
  const auto m = dmin_.get(now, std::numeric_limits<Nanos>::max() / 4);
  if (!m) return;
  dmin_.reset_to(now, m->value + by, last_ticks_ - ref_t_);
  ++min_rises_;
  last_min_.reset();
  filter_.clear();
  last_raw_.reset();
  confirmed_at_ = now;
  confirmed_ = true;
}

// --- DeliveredRate -------------------------------------------------------------------------

void DeliveredRate::start(uint32_t next_seq) {
  high_end_ = next_seq;
  started_ = true;
}

uint32_t DeliveredRate::on_data(Nanos now, uint32_t seq, uint32_t len, Nanos interval) {
  if (len == 0) return 0;
  const uint32_t end = seq + len;
  if (!started_) start(seq);
  if (!seq_gt(end, high_end_)) return 0;
  // Bytes beyond the highest end; a segment straddling it counts only its new part.
  const uint32_t fresh = end - (seq_gt(seq, high_end_) ? seq : high_end_);
  high_end_ = end;
  total_ += fresh;
  if (open_ && now - last_new_at_ > max_window(interval)) open_ = false;  // idle: restart
  last_new_at_ = now;
  if (!open_) {
    // The first arrival opens the interval; its bytes arrived "at" the opening instant.
    open_ = true;
    open_at_ = now;
    bytes_ = 0;
    return fresh;
  }
  bytes_ += fresh;
  if (now - open_at_ >= interval && now > open_at_) {
    last_ = static_cast<double>(bytes_) * static_cast<double>(kSecond) /
            static_cast<double>(now - open_at_);
    max_.update(now, std::llround(last_), max_window(interval));
    ++samples_;
    open_at_ = now;
    bytes_ = 0;
  }
  return fresh;
}

double DeliveredRate::max(Nanos now, Nanos interval) const {
  const auto m = max_.get(now, max_window(interval));
  return m ? std::max(static_cast<double>(m->value), last_) : last_;
}

// --- EchoSampler ---------------------------------------------------------------------------

void EchoSampler::on_forward(Nanos now, uint32_t tsval, Nanos min_spacing) {
  if (have_last_ && !seq_gt(tsval, last_tsval_)) return;  // not a new TSval
  last_tsval_ = tsval;
  have_last_ = true;
  if (recorded_ && now - last_record_ < min_spacing) return;
  for (Slot& s : slots_) {
    if (!s.pending || now - s.time > kMaxAge) {
      s = {now, tsval, true};
      last_record_ = now;
      recorded_ = true;
      return;
    }
  }
}

std::optional<Nanos> EchoSampler::on_echo(Nanos now, uint32_t tsecr) {
  std::optional<Nanos> sample;
  for (Slot& s : slots_) {
    if (!s.pending) continue;
    if (s.tsval == tsecr) {
      sample = now - s.time;
      s.pending = false;
    } else if (seq_lt(s.tsval, tsecr)) {
      s.pending = false;  // the far end has echoed something newer: never this one
    }
  }
  return sample;
}

// --- WindowOpeningLag ----------------------------------------------------------------------

void WindowOpeningLag::on_edge_forwarded(Nanos now, uint32_t edge, Nanos min_spacing) {
  if (!have_edge_) {
    have_edge_ = true;
    max_edge_ = edge;
    return;
  }
  if (!seq_gt(edge, max_edge_)) return;
  const uint32_t prev = max_edge_;
  max_edge_ = edge;
  if (recorded_ && now - last_record_ < min_spacing) return;
  for (Slot& s : slots_) {
    if (!s.pending || now - s.time > kMaxAge) {
      s = {now, prev, true};
      last_record_ = now;
      recorded_ = true;
      return;
    }
  }
}

std::optional<Nanos> WindowOpeningLag::on_data(Nanos now, uint32_t end) {
  std::optional<Nanos> latest;
  for (Slot& s : slots_) {
    if (!s.pending) continue;
    if (now - s.time > kMaxAge) {
      s.pending = false;
      continue;
    }
    if (seq_gt(end, s.prev_edge)) {
      if (!latest || s.time > *latest) latest = s.time;
      s.pending = false;
    }
  }
  if (!latest) return std::nullopt;
  return now - *latest;
}

// --- HandshakeTimer ------------------------------------------------------------------------

void HandshakeTimer::on_segment(Nanos now, bool from_subscriber, const TcpSegment& s) {
  if (done_ || s.rst()) return;
  if (s.syn() && !s.ack_flag()) {
    if (syn_count_ == 0) {
      sub_opened_ = from_subscriber;
    } else if (from_subscriber != sub_opened_) {
      return;  // simultaneous open: not timed
    }
    syn_at_ = now;  // a retransmitted SYN: the later one (its half is not sampled anyway)
    syn_ts_ = s.has_ts;
    if (from_subscriber && s.has_ts) {
      ts_.a_syn = now;
      ts_.ts_syn = s.tsval;
    }
    if (syn_count_ < 255) ++syn_count_;
    return;
  }
  if (syn_count_ == 0 || from_subscriber == sub_opened_) {
    // Nothing to time yet, or a segment from the opener: maybe the handshake ACK.
    if (syn_count_ == 0 || synack_count_ == 0 || !s.ack_flag() || s.syn()) return;
    if (s.ack != synack_seq_ + 1) return;
    if (synack_count_ == 1) {
      const Nanos half = now - synack_at_;
      if (sub_opened_) {
        phone_half_ = half;
      } else {
        server_half_ = half;
      }
    }
    if (from_subscriber && s.has_ts) {
      ts_.a_ack = now;
      ts_.ts_ack = s.tsval;
      ack_ts_ = true;
    }
    done_ = true;
    return;
  }
  if (s.syn() && s.ack_flag()) {
    if (synack_count_ == 0) {
      synack_seq_ = s.seq;
      synack_ts_ = s.has_ts;
      if (syn_count_ == 1) {
        const Nanos half = now - syn_at_;
        if (sub_opened_) {
          server_half_ = half;
        } else {
          phone_half_ = half;
        }
      }
    }
    synack_at_ = now;
    if (synack_count_ < 255) ++synack_count_;
  }
}

std::optional<HandshakeTimer::TsPair> HandshakeTimer::ts_pair() const {
  if (!done_ || !sub_opened_ || !syn_ts_ || !ack_ts_) return std::nullopt;
  return ts_;
}

// --- AckProbe ------------------------------------------------------------------------------

void AckProbe::on_data(Nanos now, uint32_t seq, uint32_t len) {
  if (len == 0) return;
  const uint32_t end = seq + len;
  if (outstanding_ && now - time_ > kMaxAge) outstanding_ = false;
  if (have_high_ && !seq_gt(end, high_)) {
    if (outstanding_ && seq_lt(seq, end_)) outstanding_ = false;  // retransmission: Karn
    return;
  }
  high_ = end;
  have_high_ = true;
  if (!outstanding_) {
    outstanding_ = true;
    end_ = end;
    time_ = now;
  }
}

std::optional<Nanos> AckProbe::on_ack(Nanos now, uint32_t ack) {
  if (!outstanding_ || !seq_ge(ack, end_)) return std::nullopt;
  outstanding_ = false;
  return now - time_;
}

}  // namespace rsfc
