// Per-subscriber state shared by the regulated uploads of one subscriber address
// (SubscriberUplink, regulator.h). Fixed capacity, all memory taken at construction,
// no allocation afterwards; each entry is held by the flows that reference it and freed with
// the last of them. The caller supplies the hash: the engine passes FlowTable::hash of the
// subscriber's family and whole address (SipHash under the worker's random seed), so that
// hostile addresses, interface IDs included, cannot pick colliding buckets.
#pragma once

#include <cstdint>
#include <vector>

#include "rsfc/core/regulator.h"
#include "rsfc/core/types.h"

namespace rsfc {

class SubscriberTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  explicit SubscriberTable(uint32_t capacity);

  // The entry of `addr` (created if needed) with one more reference; kNone when all
  // `capacity` entries are in use by other addresses.
  uint32_t acquire(const IpAddr& addr, uint32_t hash);
  // One reference less; the entry is freed (and its state reset) at zero.
  void release(uint32_t idx);
  SubscriberUplink& at(uint32_t idx) { return entries_[idx].up; }
  uint32_t refs(uint32_t idx) const { return entries_[idx].refs; }
  uint32_t size() const { return size_; }
  static size_t bytes_per_entry() { return sizeof(Entry) + 3 * sizeof(uint32_t); }

 private:
  struct Entry {
    IpAddr addr;
    uint32_t hash = 0;
    uint32_t refs = 0;
    SubscriberUplink up;
  };
  std::vector<Entry> entries_;     // fixed pool; an index stays valid while referenced
  std::vector<uint32_t> free_;     // free pool indices (stack)
  std::vector<uint32_t> buckets_;  // linear probing: pool index + 1, 0 = empty
  uint32_t mask_ = 0;
  uint32_t size_ = 0;
};

}  // namespace rsfc
