#include "rsfc/core/downlink_delay.h"

#include <cmath>

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
  last_raw_.reset();
}

std::optional<Nanos> DownlinkQueueEstimator::on_ack(Nanos now, uint32_t ack, uint32_t tsval,
                                                    double ns_per_tick, Nanos horizon,
                                                    Nanos filter) {
  const int64_t ticks = unwrap_.unwrap(tsval);
  const auto match = take_covered(now, ack);
  if (!match) return std::nullopt;
  matched_end_ = match->end;
  ++matches_;
  if (ns_per_tick <= 0) return std::nullopt;
  const Nanos sent = match->time;
  if (samples_ > 0 && now - last_sample_ > horizon) restart();  // idle: trust nothing old
  if (!has_ref_) {
    has_ref_ = true;
    ref_time_ = sent;
    ref_ticks_ = ticks;
    g_used_ = ns_per_tick;
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
  if (filter <= 0) return last_raw_;
  const auto f = filter_.get(now, filter);
  if (!f) return std::nullopt;
  return f->value;
}

}  // namespace rsfc
