#include "rsfc/core/subscriber_table.h"

#include <bit>

namespace rsfc {

SubscriberTable::SubscriberTable(uint32_t capacity, uint32_t uplinks)
    : entries_(capacity),
      uplinks_max_(uplinks == 0 ? capacity : uplinks),
      buckets_(std::bit_ceil(std::max<uint64_t>(2 * uint64_t{capacity}, 8)), 0),
      mask_(static_cast<uint32_t>(buckets_.size() - 1)) {
  free_.reserve(capacity);
  for (uint32_t i = capacity; i > 0; --i) free_.push_back(i - 1);
  uplinks_.reserve(uplinks_max_);  // pages are touched as subscribers get regulators
  free_uplinks_.reserve(uplinks_max_);
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
  e.flows = 0;
  e.uplink = kNone;
  buckets_[b] = idx + 1;
  ++size_;
  return idx;
}

uint32_t SubscriberTable::acquire(const IpAddr& addr, uint32_t hash) {
  const uint32_t idx = find_or_add(addr, hash);
  if (idx == kNone) return kNone;
  Entry& e = entries_[idx];
  if (e.uplink == kNone) {  // its first regulator: a fresh SubscriberUplink
    if (!free_uplinks_.empty()) {
      e.uplink = free_uplinks_.back();
      free_uplinks_.pop_back();
      uplinks_[e.uplink] = Uplink{};
    } else if (uplinks_.size() < uplinks_max_) {
      e.uplink = static_cast<uint32_t>(uplinks_.size());
      uplinks_.emplace_back();  // within the reserved capacity: no reallocation
    } else {
      if (e.flows == 0) free_entry(idx);
      return kNone;
    }
    ++attached_;
  }
  ++uplinks_[e.uplink].refs;
  return idx;
}

uint32_t SubscriberTable::add_flow(const IpAddr& addr, uint32_t hash) {
  const uint32_t idx = find_or_add(addr, hash);
  if (idx != kNone) ++entries_[idx].flows;
  return idx;
}

void SubscriberTable::release(uint32_t idx) {
  if (idx >= entries_.size() || entries_[idx].uplink == kNone) return;
  Entry& e = entries_[idx];
  if (--uplinks_[e.uplink].refs > 0) return;
  --attached_;
  free_uplinks_.push_back(e.uplink);  // the next regulator to attach starts afresh
  e.uplink = kNone;
  if (e.flows == 0) free_entry(idx);
}

void SubscriberTable::remove_flow(uint32_t idx) {
  if (idx >= entries_.size() || entries_[idx].flows == 0) return;
  Entry& e = entries_[idx];
  if (--e.flows == 0 && e.uplink == kNone) free_entry(idx);
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
  free_.push_back(idx);
  --size_;
}

}  // namespace rsfc
