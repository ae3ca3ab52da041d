// A fixed number of slots of one type, reserved once and handed out by index: state that
// only some flows need (their regulators, engine.cpp) lives here instead of in every flow's
// entry, so that a tracked flow costs its entry and a regulated one its entry and a slot.
// Slots are taken from a free list (no allocation after construction; pages are touched as
// slots are first used) and a taken slot starts as T{}. When all are taken, acquire() says so
// and the caller goes without.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rsfc {

template <typename T>
class SlotPool {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  explicit SlotPool(uint32_t capacity) : capacity_(capacity) {
    slots_.reserve(capacity);
    taken_.reserve(capacity);
    free_.reserve(capacity);
  }
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  // A slot holding T{}, or kNone when all `capacity` slots are taken.
  uint32_t acquire() {
    uint32_t idx;
    if (!free_.empty()) {
      idx = free_.back();
      free_.pop_back();
      slots_[idx] = T{};
    } else if (slots_.size() < capacity_) {
      idx = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();  // within the reserved capacity: no reallocation
      taken_.push_back(false);
    } else {
      return kNone;
    }
    taken_[idx] = true;
    ++used_;
    return idx;
  }
  void release(uint32_t idx) {
    taken_[idx] = false;
    free_.push_back(idx);
    --used_;
  }

  T& at(uint32_t idx) { return slots_[idx]; }
  const T& at(uint32_t idx) const { return slots_[idx]; }
  uint32_t used() const { return used_; }
  uint32_t capacity() const { return capacity_; }
  // Calls f(slot) for every taken slot: for reloads, never per packet.
  template <typename F>
  void for_each_taken(F&& f) {
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      if (taken_[i]) f(slots_[i]);
    }
  }
  // Memory one slot costs: the slot, its free-list entry and its taken flag.
  static constexpr size_t bytes_per_slot() { return sizeof(T) + sizeof(uint32_t) + 1; }

 private:
  uint32_t capacity_;
  uint32_t used_ = 0;
  std::vector<T> slots_;        // reserved to capacity once; grows up to it, never beyond
  std::vector<bool> taken_;     // parallel to slots_
  std::vector<uint32_t> free_;  // released slots (stack)
};

}  // namespace rsfc
