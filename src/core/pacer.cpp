#include "rsfc/core/pacer.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rsfc {

void DownlinkPacer::on_phone_ack(Nanos now, const TcpSegment& seg, double ns_per_tick,
                                 const PacingParams& p) {
  if (!seg.ack_flag() || seg.syn() || seg.rst()) return;
  uint32_t acked = 0;
  if (!have_ack_) {
    have_ack_ = true;
    last_ack_ = seg.ack;
  } else if (seq_gt(seg.ack, last_ack_)) {
    acked = seg.ack - last_ack_;
    last_ack_ = seg.ack;
  } else {
    return;  // a duplicate or reordered ACK: nothing new received
  }
  if (!seg.has_ts || ns_per_tick <= 0) {
    sampling_ = false;  // no clock to time it on: start over when there is one
    return;
  }
  if (!sampling_) {
    sampling_ = true;
    sample_ts_ = seg.tsval;
    sample_bytes_ = 0;
    return;  // the bytes of this ACK were received before the span starts
  }
  const auto ticks = static_cast<int32_t>(seg.tsval - sample_ts_);  // wraps like TSval
  if (ticks < 0) return;  // reordered: its TSval is older than the span's start
  sample_bytes_ += acked;
  const double span_ns = static_cast<double>(ticks) * ns_per_tick;
  if (span_ns < static_cast<double>(p.sample)) return;
  const double rate = static_cast<double>(sample_bytes_) * 1e9 / span_ns;
  const double cap = static_cast<double>(std::numeric_limits<int64_t>::max() / 2);
  max_rate_.update(now, static_cast<int64_t>(std::min(rate, cap)), p.horizon);
  if (samples_ < UINT32_MAX) ++samples_;
  sample_ts_ = seg.tsval;
  sample_bytes_ = 0;
}

void DownlinkPacer::on_phone_ack_untimed(Nanos now, const TcpSegment& seg, const PacingParams& p) {
  TcpSegment timed = seg;
  timed.has_ts = true;
  timed.tsval = static_cast<uint32_t>(now / kUntimedTick);  // wraps like a TSval
  PacingParams q = p;
  q.sample = kUntimedSample;
  on_phone_ack(now, timed, static_cast<double>(kUntimedTick), q);
}

double DownlinkPacer::rate(Nanos now, const PacingParams& p) const {
  const auto m = max_rate_.get(now, p.horizon);
  return m ? static_cast<double>(m->value) : 0.0;
}

Nanos DownlinkPacer::release_at(Nanos now, uint32_t payload_bytes, bool pace, bool keep_order,
                                const PacingParams& p) {
  const double r = pace && samples_ >= p.min_samples ? rate(now, p) * p.gain : 0.0;
  if (r > 0) {
    // A token bucket in time: the schedule lags now by at most the credit of burst_bytes (at
    // least this segment's), so an idle pacer lets that much go at once and spaces what
    // follows. A segment leaves once the schedule has passed its own spacing.
    const double cap = static_cast<double>(p.max_hold);
    const double spacing = std::min(static_cast<double>(payload_bytes) * 1e9 / r, cap);
    const double credit =
        std::min(static_cast<double>(std::max(p.burst_bytes, payload_bytes)) * 1e9 / r, cap);
    const Nanos due =
        std::max(next_release_, now - static_cast<Nanos>(credit)) + static_cast<Nanos>(spacing);
    const Nanos at = std::min(std::max(now, due), now + p.max_hold);
    next_release_ = std::min(due, at);  // held to max_hold: the schedule restarts from there
    last_release_ = std::max(last_release_, at);
    return at;
  }
  // Not paced: it leaves now, or right after the held ones it must not overtake. Its bytes
  // (data while the pacer does not pace) take the link up to then; a segment without payload
  // (a pure ACK of the other direction's data, a FIN) leaves the credit as it was.
  const Nanos at = keep_order ? std::max(now, last_release_) : now;
  last_release_ = std::max(last_release_, at);
  if (payload_bytes > 0) next_release_ = std::max(next_release_, at);
  return at;
}

}  // namespace rsfc
