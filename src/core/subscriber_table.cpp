#include "rsfc/core/subscriber_table.h"

#include <bit>

namespace rsfc {

SubscriberTable::SubscriberTable(uint32_t capacity)
    : entries_(capacity),
      buckets_(std::bit_ceil(std::max<uint64_t>(2 * uint64_t{capacity}, 8)), 0),
      mask_(static_cast<uint32_t>(buckets_.size() - 1)) {
  free_.reserve(capacity);
  for (uint32_t i = capacity; i > 0; --i) free_.push_back(i - 1);
}

uint32_t SubscriberTable::find_or_add(const IpAddr& addr, uint32_t hash) {
  uint32_t b = hash & mask_;
  for (;; b = (b + 1) & mask_) {
    const uint32_t slot = buckets_[b];
    if (slot == 0) break;
    const Entry& e = entries_[slot - 1];
    if (e.hash == hash && e.addr == addr) return slot - 1;
  }
  if (free_.empty()) return kNone;
  const uint32_t idx = free_.back();
  free_.pop_back();
  Entry& e = entries_[idx];
  e.addr = addr;
  e.hash = hash;
  e.refs = e.flows = 0;
  e.up = SubscriberUplink{};
  buckets_[b] = idx + 1;
  ++size_;
  return idx;
}

uint32_t SubscriberTable::acquire(const IpAddr& addr, uint32_t hash) {
  const uint32_t idx = find_or_add(addr, hash);
  if (idx != kNone && entries_[idx].refs++ == 0) ++attached_;
  return idx;
}

uint32_t SubscriberTable::add_flow(const IpAddr& addr, uint32_t hash) {
  const uint32_t idx = find_or_add(addr, hash);
  if (idx != kNone) ++entries_[idx].flows;
  return idx;
}

void SubscriberTable::release(uint32_t idx) {
  if (idx >= entries_.size() || entries_[idx].refs == 0) return;
  Entry& e = entries_[idx];
  if (--e.refs > 0) return;
  --attached_;
  e.up = SubscriberUplink{};  // the next regulator to attach starts afresh
  if (e.flows == 0) free_entry(idx);
}

void SubscriberTable::remove_flow(uint32_t idx) {
  if (idx >= entries_.size() || entries_[idx].flows == 0) return;
  Entry& e = entries_[idx];
  if (--e.flows == 0 && e.refs == 0) free_entry(idx);
}

void SubscriberTable::free_entry(uint32_t idx) {
  Entry& e = entries_[idx];
  // Find its bucket, then close the gap (backward-shift deletion: no tombstones, so lookups
  // never slow down however many subscribers came and went).
  uint32_t i = e.hash & mask_;
  while (buckets_[i] != idx + 1) i = (i + 1) & mask_;
  buckets_[i] = 0;
  for (uint32_t j = (i + 1) & mask_; buckets_[j] != 0; j = (j + 1) & mask_) {
    const uint32_t home = entries_[buckets_[j] - 1].hash & mask_;
    // Move the entry at j into the gap at i unless its home lies cyclically in (i, j].
    const bool home_between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!home_between) {
      buckets_[i] = buckets_[j];
      buckets_[j] = 0;
      i = j;
    }
  }
  e.up = SubscriberUplink{};
  free_.push_back(idx);
  --size_;
}

}  // namespace rsfc
