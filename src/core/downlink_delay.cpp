#include "rsfc/core/downlink_delay.h"

#include <cmath>
#include <limits>

namespace rsfc {

bool DownlinkQueueEstimator::on_data(Nanos now, uint32_t seq, uint32_t end, Nanos min_spacing) {
  if (end == seq) return false;  // occupies no sequence space: nothing an ACK could answer
  if (have_high_ && seq_lt(seq, high_end_)) {
    // A retransmission (whole or in part): an ACK covering it may answer either copy.
    for (Slot& s : slots_) {
      if (s.pending && seq_gt(s.end, seq)) s.pending = false;
    }
    if (!seq_gt(end, high_end_)) return false;
  }
  high_end_ = end;
  have_high_ = true;
  if (recorded_ && now - last_record_ < min_spacing) return false;
  for (Slot& s : slots_) {
    if (!s.pending || now - s.time > max_age()) {
      s = {now, end, true};
      last_record_ = now;
      recorded_ = true;
      return true;
    }
  }
  return false;  // every slot waits for its ACK
}

// The latest forwarding time among the pending slots the cumulative `ack` covers; frees them.
std::optional<DownlinkQueueEstimator::Match> DownlinkQueueEstimator::take_covered(Nanos now,
                                                                                  uint32_t ack) {
  std::optional<Match> latest;
  for (Slot& s : slots_) {
    if (!s.pending) continue;
    if (now - s.time > max_age()) {
      s.pending = false;
      continue;
    }
    if (seq_ge(ack, s.end)) {
      if (!latest || s.time > latest->time) latest = Match{s.time, s.end};
      s.pending = false;
    }
  }
  return latest;
}

void DownlinkQueueEstimator::restart() {
  dmin_.clear();
  filter_.clear();
  has_ref_ = false;
  g_used_ = 0;
  early_n_ = 0;
  last_raw_ = -1;
}

// A match while the tick is unknown: the first kEarly are kept, relative to the reference
// (one that does not fit the compact form is skipped: it would be seconds late anyway).
void DownlinkQueueEstimator::keep_early(Nanos sent, int64_t ticks) {
  if (early_n_ >= kEarly) return;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const int64_t sent_us = (sent - ref_time_) / 1000;
  const int64_t rel = ticks - ref_ticks_;
  if (sent_us < -kMax || sent_us > kMax || rel < -kMax || rel > kMax) return;
  early_[early_n_++] = {static_cast<int32_t>(sent_us), static_cast<int32_t>(rel)};
}

// The tick became known (g_used_): the kept matches enter min(d) at their forwarding times,
// oldest first (the window ages out any older than the horizon).
void DownlinkQueueEstimator::score_early(Nanos horizon) {
  for (uint8_t i = 0; i < early_n_; ++i) {
    const Early& e = early_[i];
    const Nanos sent = static_cast<Nanos>(e.sent_us) * 1000;
    const int64_t d = std::llround(static_cast<double>(e.ticks) * g_used_) - sent;
    dmin_.update(ref_time_ + sent, d, horizon, e.ticks);
  }
  early_n_ = 0;
}

std::optional<Nanos> DownlinkQueueEstimator::on_ack(Nanos now, uint32_t ack, uint32_t tsval,
                                                    double ns_per_tick, Nanos horizon,
                                                    Nanos filter) {
  const int64_t ticks = unwrap_.unwrap(tsval);
  const auto match = take_covered(now, ack);
  if (!match) return std::nullopt;
  matched_end_ = match->end;
  ++matches_;
  const Nanos sent = match->time;
  // Idle: trust nothing old (samples_ > 0: the tick was known, and it stays known).
  if (samples_ > 0 && now - last_sample_ > horizon) restart();
  if (!has_ref_) {
    has_ref_ = true;
    ref_time_ = sent;
    ref_ticks_ = ticks;
  }
  if (ns_per_tick <= 0) {
    keep_early(sent, ticks);
    return std::nullopt;
  }
  if (g_used_ == 0) {
    g_used_ = ns_per_tick;
    score_early(horizon);
  } else if (ns_per_tick != g_used_) {
    const double dg = ns_per_tick - g_used_;
    dmin_.rebase([dg](int64_t value, int64_t aux) {
      return value + std::llround(static_cast<double>(aux) * dg);
    });
    if (std::fabs(dg) > g_used_ * 0.01) filter_.clear();  // a big change: old samples are noise
    g_used_ = ns_per_tick;
  }
  const int64_t rel_ticks = ticks - ref_ticks_;
  const int64_t d = std::llround(static_cast<double>(rel_ticks) * g_used_) - (sent - ref_time_);
  dmin_.update(now, d, horizon, rel_ticks);
  const auto m = dmin_.get(now, horizon);
  const Nanos q = m && d > m->value ? d - m->value : 0;
  last_raw_ = q;
  last_sample_ = now;
  ++samples_;
  if (filter > 0) filter_.update(now, q, filter);
  return q;
}

std::optional<Nanos> DownlinkQueueEstimator::filtered(Nanos now, Nanos filter) const {
  if (filter <= 0) return last_raw();
  const auto f = filter_.get(now, filter);
  if (!f) return std::nullopt;
  return f->value;
}

}  // namespace rsfc
