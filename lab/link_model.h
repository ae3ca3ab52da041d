// One direction of an emulated link, as pure logic (no clock, no I/O): packets enter a
// drop-tail bottleneck buffer, leave it at a constant rate or at the delivery opportunities
// of a capacity trace, then wait a fixed one-way propagation delay before they are released.
//
//   arrive ──▶ [ buffer (bytes) ] ──rate | trace──▶ [ delay line ] ──▶ released ids
//
// With neither rate nor trace the buffer is skipped: a pure delay line. Packets are known
// by their NFQUEUE id only; the I/O shell (linkem.cpp) turns released ids into ACCEPT
// verdicts and refused arrivals into DROP verdicts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rsfc/core/types.h"

namespace rsfc::lab {

// A FIFO on a power-of-two ring that only ever grows: no allocation once it has seen its
// largest backlog.
template <class T>
class Ring {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return buf_[head_]; }
  const T& front() const { return buf_[head_]; }
  void pop_front() {
    head_ = (head_ + 1) & (buf_.size() - 1);
    --size_;
  }
  void push_back(const T& v) {
    if (size_ == buf_.size()) grow();
    buf_[(head_ + size_) & (buf_.size() - 1)] = v;
    ++size_;
  }

 private:
  void grow() {
    std::vector<T> bigger(buf_.empty() ? 64 : buf_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = buf_[(head_ + i) & (buf_.size() - 1)];
    buf_ = std::move(bigger);
    head_ = 0;
  }
  std::vector<T> buf_;
  size_t head_ = 0;
  size_t size_ = 0;
};

// Delivery opportunities of a Mahimahi/Saturator trace: one line per opportunity, a
// millisecond offset; the trace repeats with a period equal to its last offset.
struct Trace {
  std::vector<Nanos> offsets;  // sorted, relative to the start of one period
  Nanos period = 0;            // > 0

  // Parses the text of a trace file. Empty result + `error` set on a malformed file.
  static std::optional<Trace> parse(const std::string& text, std::string* error);
};

struct LinkParams {
  Nanos delay = 0;                        // one-way delay after the bottleneck
  uint64_t rate_bps = 0;                  // constant service rate; 0 = none
  std::optional<Trace> trace{};           // delivery opportunities; wins over rate_bps
  uint64_t buffer_bytes = 0;              // drop-tail limit of the bottleneck; 0 = unlimited
  uint32_t bytes_per_opportunity = 1500;  // trace mode: bytes one opportunity may deliver
  bool has_bottleneck() const { return rate_bps > 0 || trace.has_value(); }
};

struct LinkStats {
  uint64_t arrived = 0;
  uint64_t arrived_bytes = 0;
  uint64_t dropped = 0;  // refused by a full buffer
  uint64_t dropped_bytes = 0;
  uint64_t released = 0;
  uint64_t released_bytes = 0;
  uint64_t max_buffer_bytes = 0;  // high-water mark of the bottleneck buffer
};

class LinkModel {
 public:
  // `start` is time zero of the trace (ignored without one).
  LinkModel(LinkParams params, Nanos start);

  // A packet of `bytes` arrived at `now` (never earlier than an earlier call's `now`).
  // False: the buffer is full and the packet must be dropped.
  bool arrive(uint32_t id, uint32_t bytes, Nanos now);

  // Moves time forward to `now` and appends the ids whose delay has passed to `released`,
  // in arrival order.
  void advance(Nanos now, std::vector<uint32_t>& released);

  // When the next packet leaves the buffer or is released; empty when nothing is held.
  std::optional<Nanos> next_event() const;

  size_t held_packets() const { return buffer_.size() + delay_line_.size(); }
  uint64_t buffer_bytes() const { return buffer_bytes_; }
  const LinkStats& stats() const { return stats_; }
  const LinkParams& params() const { return params_; }

 private:
  struct Queued {
    uint32_t id = 0;
    uint32_t bytes = 0;
    uint32_t remaining = 0;  // trace mode: bytes still to deliver
  };
  struct InFlight {
    uint32_t id = 0;
    uint32_t bytes = 0;
    Nanos release_at = 0;
  };

  // Serves the bottleneck up to and including `now`: departures move to the delay line.
  void serve_until(Nanos now);
  void depart(Nanos at);
  Nanos tx_time(uint32_t bytes) const;
  Nanos opportunity_time() const { return trace_base_ + params_.trace->offsets[trace_index_]; }
  void next_opportunity();
  // First opportunity at or after `t` (used when a packet finds the buffer empty).
  void skip_opportunities_before(Nanos t);

  LinkParams params_;
  Ring<Queued> buffer_;
  Ring<InFlight> delay_line_;
  uint64_t buffer_bytes_ = 0;
  Nanos head_departure_ = 0;  // rate mode: when the head of the buffer has been sent
  Nanos trace_base_ = 0;      // trace mode: start of the current period
  size_t trace_index_ = 0;    // trace mode: next opportunity within the period
  LinkStats stats_;
};

}  // namespace rsfc::lab
