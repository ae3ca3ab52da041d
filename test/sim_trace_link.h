// Variable links for the packet simulator (test/regulator_sim.h): a link direction served at
// the delivery opportunities of a capacity schedule instead of a constant rate, either a
// Mahimahi trace (lab/traces, lab/traces/README.md) or one built from rate spans and
// outages. The service follows rsfc-linkem (lab/link_model.cpp): each opportunity lets up to
// 1500 bytes leave the FIFO, a packet may take bytes of several opportunities, bytes of an
// opportunity that nothing queued at its time could use are lost, and the schedule repeats
// with the period of its last offset.
//
//   Scenario s;  s.shape_links = trace_links(up, down, start);   // both directions traced
//
// Test-only code.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "regulator_sim.h"

namespace rsfc::sim {

// Delivery opportunities of one direction, offsets from the start of one period.
struct CapacityTrace {
  static constexpr uint32_t kBytesPerOpportunity = 1500;
  std::vector<Nanos> offsets;  // sorted
  Nanos period = 0;            // > 0 when valid
  std::string name;

  bool valid() const { return !offsets.empty() && period > 0; }

  // A Mahimahi file: one millisecond offset per line. Invalid (empty) when unreadable.
  static CapacityTrace load(const std::string& path) {
    CapacityTrace t;
    t.name = path.substr(path.find_last_of('/') + 1);
    std::ifstream in(path);
    int64_t ms = 0;
    while (in >> ms) t.offsets.push_back(ms * kMilli);
    if (!t.offsets.empty()) t.period = t.offsets.back();
    return t;
  }

  // Opportunity k (counted over the repeated schedule from its start) and its time.
  Nanos time_of(uint64_t k) const {
    const uint64_t n = offsets.size();
    return static_cast<Nanos>(k / n) * period + offsets[k % n];
  }
  // The first opportunity at or after schedule time t >= 0.
  uint64_t first_at_or_after(Nanos t) const {
    const uint64_t n = offsets.size();
    const auto q = static_cast<uint64_t>(t / period);
    const Nanos r = t % period;
    return q * n + static_cast<uint64_t>(std::lower_bound(offsets.begin(), offsets.end(), r) -
                                         offsets.begin());
  }
  // Opportunities in [a, b) of schedule time.
  uint64_t opportunities(Nanos a, Nanos b) const {
    return first_at_or_after(std::max<Nanos>(b, 0)) - first_at_or_after(std::max<Nanos>(a, 0));
  }
  // Payload bits per second a direction offers over [a, b) with `payload` bytes per
  // 1500-byte packet (the simulator's segments: 1448).
  double payload_bps(Nanos a, Nanos b, double payload = 1448) const {
    return static_cast<double>(opportunities(a, b)) * payload * 8.0 /
           (static_cast<double>(b - a) / 1e9);
  }
};

// A schedule built from spans: `rate_bps` from each span's start to the next one's (0: an
// outage), repeating after the last span ends at `period`.
struct RateSpan {
  Nanos start;
  double rate_bps;
};
inline CapacityTrace schedule_of(const std::vector<RateSpan>& spans, Nanos period,
                                 std::string name) {
  CapacityTrace t;
  t.name = std::move(name);
  for (size_t i = 0; i < spans.size(); ++i) {
    const Nanos end = i + 1 < spans.size() ? spans[i + 1].start : period;
    if (spans[i].rate_bps <= 0) continue;
    const double gap = CapacityTrace::kBytesPerOpportunity * 8.0 / spans[i].rate_bps * 1e9;
    for (double x = static_cast<double>(spans[i].start) + gap; x <= static_cast<double>(end);
         x += gap) {
      t.offsets.push_back(static_cast<Nanos>(x));
    }
  }
  t.period = period;
  if (t.offsets.empty() || t.offsets.back() != period) t.offsets.push_back(period);
  return t;
}

// Link::service for a schedule played from `start` into it (simulation time 0 = schedule
// time `start`). Called by the link in FIFO order with the time a packet's transmission may
// start; returns when its last byte left.
class TraceService {
 public:
  TraceService(std::shared_ptr<const CapacityTrace> trace, Nanos start)
      : trace_(std::move(trace)), start_(start) {}

  Nanos operator()(Nanos at, uint32_t bytes) {
    const Nanos x = at + start_;
    uint64_t k = next_;
    if (!(left_ > 0 && trace_->time_of(k) >= x)) {
      k = std::max(next_, trace_->first_at_or_after(x));
      left_ = CapacityTrace::kBytesPerOpportunity;
    }
    while (bytes > left_) {
      bytes -= left_;
      ++k;
      left_ = CapacityTrace::kBytesPerOpportunity;
    }
    left_ -= bytes;
    const Nanos done = trace_->time_of(k);
    next_ = left_ > 0 ? k : k + 1;
    return done - start_;
  }

 private:
  std::shared_ptr<const CapacityTrace> trace_;
  Nanos start_;
  uint64_t next_ = 0;  // the first opportunity not used up
  uint32_t left_ = 0;  // bytes left in opportunity next_ (0: none used yet)
};

// Scenario::shape_links for traced directions (nullptr: that direction keeps its rate).
inline std::function<void(Link&, Link&)> trace_links(std::shared_ptr<const CapacityTrace> up,
                                                     std::shared_ptr<const CapacityTrace> down,
                                                     Nanos start) {
  return [up, down, start](Link& u, Link& d) {
    if (up) u.service = TraceService(up, start);
    if (down) d.service = TraceService(down, start);
  };
}

// The lab suite's trace cells: both directions traced from `start`, 1 MB up / 512 KB down
// drop-tail, 50 ms base round trip, 38 s with 8 s of warm-up (as lab/exps/suite.py plays
// them).
inline Scenario suite_trace_cell(std::shared_ptr<const CapacityTrace> up,
                                 std::shared_ptr<const CapacityTrace> down, Nanos start) {
  Scenario s;
  s.up_buffer = 1'000'000;
  s.down_buffer = 512'000;
  s.p1 = 20 * kMilli;
  s.p2 = 5 * kMilli;
  s.duration = 38 * kSecond;
  s.warmup = 8 * kSecond;
  s.shape_links = trace_links(std::move(up), std::move(down), start);
  return s;
}

// The start of offset i of n spread over a trace pair (from 7 s on, whole seconds, leaving
// the 38 s window and a margin inside the shorter period).
inline Nanos suite_trace_offset(const CapacityTrace& up, const CapacityTrace& down, int i, int n) {
  const Nanos span = std::min(up.period, down.period) - 42 * kSecond;
  return 7 * kSecond + span / n * i / kSecond * kSecond;
}

}  // namespace rsfc::sim
