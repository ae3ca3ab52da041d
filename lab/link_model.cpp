#include "link_model.h"

#include <algorithm>
#include <charconv>
#include <utility>

namespace rsfc::lab {

std::optional<Trace> Trace::parse(const std::string& text, std::string* error) {
  Trace t;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) continue;
    int64_t ms = 0;
    auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), ms);
    if (ec != std::errc() || p != line.data() + line.size() || ms < 0) {
      if (error) *error = "line " + std::to_string(line_no) + ": not a millisecond offset";
      return std::nullopt;
    }
    Nanos at = ms * kMilli;
    if (!t.offsets.empty() && at < t.offsets.back()) {
      if (error) *error = "line " + std::to_string(line_no) + ": offsets must not decrease";
      return std::nullopt;
    }
    t.offsets.push_back(at);
  }
  if (t.offsets.empty() || t.offsets.back() <= 0) {
    if (error) *error = "no opportunity after time 0";
    return std::nullopt;
  }
  t.period = t.offsets.back();
  return t;
}

LinkModel::LinkModel(LinkParams params, Nanos start) : params_(std::move(params)) {
  trace_base_ = start;
}

Nanos LinkModel::tx_time(uint32_t bytes) const {
  // Rounded up so that a link never runs faster than its rate.
  const uint64_t bit_nanos = static_cast<uint64_t>(bytes) * 8 * kSecond;  // < 2^50
  return static_cast<Nanos>((bit_nanos + params_.rate_bps - 1) / params_.rate_bps);
}

void LinkModel::next_opportunity() {
  if (++trace_index_ == params_.trace->offsets.size()) {
    trace_index_ = 0;
    trace_base_ += params_.trace->period;
  }
}

void LinkModel::skip_opportunities_before(Nanos t) {
  const Trace& tr = *params_.trace;
  if (opportunity_time() >= t) return;
  // Whole periods first, then opportunity by opportunity within one period.
  if (t - trace_base_ >= tr.period) {
    const Nanos periods = (t - trace_base_) / tr.period;
    trace_base_ += periods * tr.period;
    trace_index_ = 0;
  }
  while (opportunity_time() < t) next_opportunity();
}

bool LinkModel::arrive(uint32_t id, uint32_t bytes, Nanos now) {
  serve_until(now);
  ++stats_.arrived;
  stats_.arrived_bytes += bytes;
  if (!params_.has_bottleneck()) {
    delay_line_.push_back({id, bytes, now + params_.delay});
    return true;
  }
  if (params_.buffer_bytes > 0 && buffer_bytes_ + bytes > params_.buffer_bytes) {
    ++stats_.dropped;
    stats_.dropped_bytes += bytes;
    return false;
  }
  if (buffer_.empty()) {
    if (params_.trace) {
      skip_opportunities_before(now);
    } else {
      // The link has been idle since the last departure (or never busy): start sending now.
      head_departure_ = std::max(now, head_departure_) + tx_time(bytes);
    }
  }
  buffer_.push_back({id, bytes, bytes});
  buffer_bytes_ += bytes;
  stats_.max_buffer_bytes = std::max(stats_.max_buffer_bytes, buffer_bytes_);
  return true;
}

void LinkModel::depart(Nanos at) {
  const Queued q = buffer_.front();
  buffer_.pop_front();
  buffer_bytes_ -= q.bytes;
  delay_line_.push_back({q.id, q.bytes, at + params_.delay});
}

void LinkModel::serve_until(Nanos now) {
  if (params_.trace) {
    while (!buffer_.empty() && opportunity_time() <= now) {
      const Nanos at = opportunity_time();
      uint32_t budget = params_.bytes_per_opportunity;
      while (budget > 0 && !buffer_.empty()) {
        Queued& head = buffer_.front();
        const uint32_t take = std::min(budget, head.remaining);
        head.remaining -= take;
        budget -= take;
        if (head.remaining == 0) depart(at);
      }
      next_opportunity();
    }
    return;
  }
  if (params_.rate_bps > 0) {
    while (!buffer_.empty() && head_departure_ <= now) {
      const Nanos at = head_departure_;
      depart(at);
      if (!buffer_.empty()) head_departure_ = at + tx_time(buffer_.front().bytes);
    }
  }
}

void LinkModel::advance(Nanos now, std::vector<uint32_t>& released) {
  serve_until(now);
  while (!delay_line_.empty() && delay_line_.front().release_at <= now) {
    ++stats_.released;
    stats_.released_bytes += delay_line_.front().bytes;
    released.push_back(delay_line_.front().id);
    delay_line_.pop_front();
  }
}

std::optional<Nanos> LinkModel::next_event() const {
  std::optional<Nanos> t;
  if (!delay_line_.empty()) t = delay_line_.front().release_at;
  if (!buffer_.empty()) {
    const Nanos d = params_.trace ? opportunity_time() : head_departure_;
    t = t ? std::min(*t, d) : d;
  }
  return t;
}

}  // namespace rsfc::lab
