#include "rsfc/core/flow_table.h"

#include <bit>
#include <cstring>
#include <stdexcept>

namespace rsfc {

FlowTable::FlowTable(uint32_t capacity, uint64_t seed)
    : capacity_(capacity), key_(sip_key_from_seed(seed)) {
  if (capacity == 0) throw std::invalid_argument("flow table capacity must be > 0");
  // Load factor <= 0.5 keeps linear-probe chains short.
  const uint64_t buckets =
      std::bit_ceil(std::max<uint64_t>(16, uint64_t{capacity} * kBucketsPerFlow));
  buckets_.assign(buckets, 0);
  mask_ = static_cast<uint32_t>(buckets - 1);
  flows_.reserve(capacity);  // the only allocation of flow memory; pages fault in on use
  owners_.resize(uint64_t{capacity} + 1);
}

size_t FlowTable::bytes_per_flow() {
  return sizeof(Flow) + kBucketsPerFlow * sizeof(uint32_t) + sizeof(OwnerLists);
}

uint32_t FlowTable::hash(const FlowKey& k) const {
  // Every byte of the key, laid out without padding: both addresses whole (the IPv6
  // interface IDs included), both ports, the family.
  std::array<uint8_t, kKeyBytes> b;
  std::memcpy(b.data(), k.sub_addr.data(), 16);
  std::memcpy(b.data() + 16, k.peer_addr.data(), 16);
  std::memcpy(b.data() + 32, &k.sub_port, 2);
  std::memcpy(b.data() + 34, &k.peer_port, 2);
  b[36] = k.family;
  const uint64_t h = siphash13(key_, b);
  return static_cast<uint32_t>(h ^ (h >> 32));
}

uint32_t FlowTable::find(const FlowKey& k, uint32_t h) const {
  for (uint32_t b = h & mask_;; b = (b + 1) & mask_) {
    const uint32_t slot = buckets_[b];
    if (slot == 0) return kNoFlow;
    const Flow& f = flows_[slot - 1];
    if (f.hash == h && f.key == k) return slot - 1;
  }
}

void FlowTable::list_unlink(uint32_t idx) {
  Flow& f = flows_[idx];
  const size_t c = static_cast<size_t>(f.cls);
  if (f.lru_prev != kNoFlow)
    flows_[f.lru_prev].lru_next = f.lru_next;
  else
    head_[c] = f.lru_next;
  if (f.lru_next != kNoFlow)
    flows_[f.lru_next].lru_prev = f.lru_prev;
  else
    tail_[c] = f.lru_prev;
  f.lru_prev = f.lru_next = kNoFlow;
  --class_size_[c];
}

void FlowTable::list_push_front(uint32_t idx) {
  Flow& f = flows_[idx];
  const size_t c = static_cast<size_t>(f.cls);
  f.lru_prev = kNoFlow;
  f.lru_next = head_[c];
  if (head_[c] != kNoFlow)
    flows_[head_[c]].lru_prev = idx;
  else
    tail_[c] = idx;
  head_[c] = idx;
  ++class_size_[c];
}

void FlowTable::owner_unlink(uint32_t idx) {
  Flow& f = flows_[idx];
  if (!owned(f)) return;
  OwnerLists& o = owners_[f.owner];
  const size_t c = static_cast<size_t>(f.cls);
  if (f.owner_prev != kNoFlow)
    flows_[f.owner_prev].owner_next = f.owner_next;
  else
    o.head[c] = f.owner_next;
  if (f.owner_next != kNoFlow)
    flows_[f.owner_next].owner_prev = f.owner_prev;
  else
    o.tail[c] = f.owner_prev;
  f.owner_prev = f.owner_next = kNoFlow;
}

void FlowTable::owner_push_front(uint32_t idx) {
  Flow& f = flows_[idx];
  if (!owned(f)) return;
  OwnerLists& o = owners_[f.owner];
  const size_t c = static_cast<size_t>(f.cls);
  f.owner_prev = kNoFlow;
  f.owner_next = o.head[c];
  if (o.head[c] != kNoFlow)
    flows_[o.head[c]].owner_prev = idx;
  else
    o.tail[c] = idx;
  o.head[c] = idx;
}

// Backward-shift deletion keeps probe chains intact without tombstones.
void FlowTable::bucket_erase(uint32_t idx) {
  uint32_t b = flows_[idx].hash & mask_;
  while (buckets_[b] != idx + 1) b = (b + 1) & mask_;
  uint32_t hole = b;
  for (uint32_t j = (hole + 1) & mask_;; j = (j + 1) & mask_) {
    const uint32_t slot = buckets_[j];
    if (slot == 0) break;
    const uint32_t home = flows_[slot - 1].hash & mask_;
    // Move the entry back if its home is not in (hole, j] (cyclically).
    const bool between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!between) {
      buckets_[hole] = slot;
      hole = j;
    }
  }
  buckets_[hole] = 0;
}

uint32_t FlowTable::insert(const FlowKey& k, uint32_t h, FlowClass cls, Nanos now,
                           uint32_t* evicted, uint32_t owner) {
  *evicted = kNoFlow;
  if (size_ == capacity_) {
    *evicted = victim(owner);
    remove(*evicted);
  }
  uint32_t idx;
  if (free_head_ != kNoFlow) {
    idx = free_head_;
    free_head_ = flows_[idx].lru_next;
    flows_[idx] = Flow{};
  } else {
    idx = static_cast<uint32_t>(flows_.size());
    flows_.emplace_back();  // within the reserved capacity: no reallocation
  }
  Flow& f = flows_[idx];
  f.key = k;
  f.hash = h;
  f.cls = cls;
  f.owner = owner;
  f.created = f.last_seen = now;
  f.in_use = true;
  list_push_front(idx);
  owner_push_front(idx);
  uint32_t b = h & mask_;
  while (buckets_[b] != 0) b = (b + 1) & mask_;
  buckets_[b] = idx + 1;
  ++size_;
  return idx;
}

uint32_t FlowTable::victim(uint32_t owner) const {
  for (size_t c = 0; c < kFlowClasses; ++c) {
    if (tail_[c] == kNoFlow) continue;
    if (owner != kNoOwner && c < owners_[owner].tail.size() && owners_[owner].tail[c] != kNoFlow) {
      return owners_[owner].tail[c];
    }
    return tail_[c];
  }
  return kNoFlow;
}

uint32_t FlowTable::oldest_owned(uint32_t owner) const {
  const OwnerLists& o = owners_[owner];
  return o.tail[0] != kNoFlow ? o.tail[0] : o.tail[1];
}

void FlowTable::touch(uint32_t idx, Nanos now) {
  Flow& f = flows_[idx];
  f.last_seen = now;
  if (head_[static_cast<size_t>(f.cls)] != idx) {
    list_unlink(idx);
    list_push_front(idx);
  }
  // Established flows (most packets) are in no owner list: nothing more to do for them.
  if (owned(f) && owners_[f.owner].head[static_cast<size_t>(f.cls)] != idx) {
    owner_unlink(idx);
    owner_push_front(idx);
  }
}

void FlowTable::set_class(uint32_t idx, FlowClass cls) {
  Flow& f = flows_[idx];
  if (f.cls == cls) return;
  list_unlink(idx);
  owner_unlink(idx);
  f.cls = cls;
  list_push_front(idx);
  owner_push_front(idx);
}

void FlowTable::restart(uint32_t idx, Nanos now) {
  Flow& f = flows_[idx];
  Flow fresh;
  fresh.key = f.key;
  fresh.created = fresh.last_seen = now;
  fresh.hash = f.hash;
  fresh.lru_prev = f.lru_prev;
  fresh.lru_next = f.lru_next;
  fresh.owner = f.owner;
  fresh.owner_prev = f.owner_prev;
  fresh.owner_next = f.owner_next;
  fresh.cls = f.cls;
  fresh.in_use = true;
  f = fresh;
}

void FlowTable::remove(uint32_t idx) {
  bucket_erase(idx);
  list_unlink(idx);
  owner_unlink(idx);
  Flow& f = flows_[idx];
  f.in_use = false;
  f.lru_next = free_head_;
  free_head_ = idx;
  --size_;
}

}  // namespace rsfc
