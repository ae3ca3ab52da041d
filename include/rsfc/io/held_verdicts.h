// Packets whose verdict waits (downlink pacing, pacer.h): NFQUEUE ids by release time, for
// the worker that holds them in the kernel's queue. Fixed capacity reserved once (no
// allocation per packet); when full, the caller gives the verdict at once. Released in time
// order, and in arrival order among equal times (a FIN keeps its place behind the data).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "rsfc/core/types.h"

namespace rsfc {

class HeldVerdicts {
 public:
  explicit HeldVerdicts(size_t capacity) : cap_(capacity) { heap_.reserve(capacity); }

  // False when full (nothing stored).
  bool hold(uint32_t id, Nanos release_at) {
    if (heap_.size() >= cap_) return false;
    heap_.push_back({release_at, order_++, id});
    std::push_heap(heap_.begin(), heap_.end(), later);
    return true;
  }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  size_t capacity() const { return cap_; }
  // The earliest release time (the heap must not be empty).
  Nanos next() const { return heap_.front().at; }

  // Calls f(id) for every packet due at `now` (all of them with now = INT64_MAX), earliest
  // first; returns how many.
  template <class F>
  size_t release_due(Nanos now, F f) {
    size_t n = 0;
    while (!heap_.empty() && heap_.front().at <= now) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      const uint32_t id = heap_.back().id;
      heap_.pop_back();
      f(id);
      ++n;
    }
    return n;
  }

 private:
  struct Held {
    Nanos at;
    uint64_t order;
    uint32_t id;
  };
  // A max-heap on `later` keeps the earliest (then the first held) on top.
  static bool later(const Held& a, const Held& b) {
    return a.at != b.at ? a.at > b.at : a.order > b.order;
  }
  std::vector<Held> heap_;
  size_t cap_;
  uint64_t order_ = 0;
};

}  // namespace rsfc
