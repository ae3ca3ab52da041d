// Per-subscriber state: the number of flows the engine tracks for a subscriber address (for
// the per-subscriber flow cap), and the state shared by its regulated uploads
// (SubscriberUplink, regulator.h). Fixed capacity, all memory taken at construction, no
// allocation afterwards. An entry is held by its tracked flows (add_flow) and by its flows'
// regulators (acquire); it is freed when neither holds it. Only entries with regulators hold a
// SubscriberUplink, from a pool of its own (one per uplink regulator at most, so it is sized
// like the engine's pool of them): an entry per tracked flow stays small. The SubscriberUplink
// goes back to the pool, and starts afresh, whenever the last regulator lets go. The caller
// supplies the hash: the engine passes FlowTable::hash of the subscriber's family and whole address
// (SipHash under the worker's random seed), so that hostile addresses, interface IDs included,
// cannot pick colliding buckets.
#pragma once

#include <cstdint>
#include <vector>

#include "rsfc/core/regulator.h"
#include "rsfc/core/types.h"

namespace rsfc {

class SubscriberTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // `capacity` entries, `uplinks` of which may hold regulators at once (0: as many).
  explicit SubscriberTable(uint32_t capacity, uint32_t uplinks = 0);

  // The entry of `addr` (created if needed) with one more regulator reference; kNone when
  // all `capacity` entries are in use by other addresses, or it has no regulator yet and all
  // `uplinks` SubscriberUplinks are held.
  uint32_t acquire(const IpAddr& addr, uint32_t hash);
  // One regulator reference less; at zero the shared state is reset (and the entry freed if
  // it tracks no flow).
  void release(uint32_t idx);
  // The same for tracked flows: one more (the entry created if needed; kNone when full), one
  // less (the entry freed when neither flows nor regulators hold it).
  uint32_t add_flow(const IpAddr& addr, uint32_t hash);
  void remove_flow(uint32_t idx);
  // The shared state of an entry with regulator references (acquire).
  SubscriberUplink& at(uint32_t idx) { return uplinks_[entries_[idx].uplink].up; }
  const SubscriberUplink& at(uint32_t idx) const { return uplinks_[entries_[idx].uplink].up; }
  uint32_t refs(uint32_t idx) const {
    const uint32_t u = entries_[idx].uplink;
    return u == kNone ? 0 : uplinks_[u].refs;
  }
  // The phone's TCP timestamp tick as one of its regulated flows measured it (a snapped
  // clock of whole milliseconds; 0 = none yet), for an entry with regulator references. The
  // tick is the host's, only the offsets are per connection: a flow of the phone with no
  // value of its own yet starts from it (Engine::take_phone_tick). The latest one noted wins;
  // it goes with the shared state when the last regulator lets go.
  Nanos phone_tick(uint32_t idx) const {
    return static_cast<Nanos>(uplinks_[entries_[idx].uplink].tick_ms) * kMilli;
  }
  void note_phone_tick(uint32_t idx, Nanos g) {
    const Nanos ms = g / kMilli;
    if (ms > 0 && ms <= 255 && ms * kMilli == g) {
      uplinks_[entries_[idx].uplink].tick_ms = static_cast<uint8_t>(ms);
    }
  }
  uint32_t flows(uint32_t idx) const { return entries_[idx].flows; }
  uint32_t size() const { return size_; }          // entries in use
  uint32_t attached() const { return attached_; }  // entries with regulator references
  // Memory per entry (entry, its buckets and free-list slot), and per SubscriberUplink.
  static size_t bytes_per_entry() { return sizeof(Entry) + 3 * sizeof(uint32_t); }
  static size_t bytes_per_uplink() { return sizeof(Uplink) + sizeof(uint32_t); }

 private:
  struct Entry {
    IpAddr addr;
    uint32_t hash = 0;
    uint32_t flows = 0;       // flows tracked
    uint32_t uplink = kNone;  // its slot in uplinks_ while regulators reference it
  };
  struct Uplink {
    SubscriberUplink up;
    uint32_t refs = 0;    // regulators attached to `up`
    uint8_t tick_ms = 0;  // phone_tick() (in the padding after refs)
  };
  uint32_t find_or_add(const IpAddr& addr, uint32_t hash);
  void free_entry(uint32_t idx);
  std::vector<Entry> entries_;   // fixed pool; an index stays valid while referenced
  std::vector<uint32_t> free_;   // free pool indices (stack)
  std::vector<Uplink> uplinks_;  // reserved once, grows up to its capacity
  std::vector<uint32_t> free_uplinks_;
  uint32_t uplinks_max_ = 0;
  std::vector<uint32_t> buckets_;  // linear probing: pool index + 1, 0 = empty
  uint32_t mask_ = 0;
  uint32_t size_ = 0;
  uint32_t attached_ = 0;
};

}  // namespace rsfc
