// Per-connection state, one entry per TCP connection whatever the direction, in a
// fixed-capacity table: memory is reserved once, lookups are open-addressed, and when
// the table is full the least recently seen flow of the least valuable class is evicted
// (closed, then embryonic/mid-stream, then established), so a SYN flood cannot push out
// established flows before it has used up its own class. Flows may have an owner (the
// engine's subscriber entry): the closed and embryonic flows of each owner are also kept in
// per-owner LRU lists, so that an owner's new flow can take the place of its own oldest
// one (victim(), oldest_owned()) instead of another owner's.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "rsfc/core/siphash.h"
#include "rsfc/core/types.h"

namespace rsfc {

// The connection seen from the subscriber: `sub` is the address inside
// subscriber_networks, `peer` the other end.
struct FlowKey {
  std::array<uint8_t, 16> sub_addr{};
  std::array<uint8_t, 16> peer_addr{};
  uint16_t sub_port = 0;
  uint16_t peer_port = 0;
  uint8_t family = 0;  // 4 or 6
  friend bool operator==(const FlowKey&, const FlowKey&) = default;
};

// What we know about one endpoint of the connection.
struct Endpoint {
  uint32_t isn = 0;         // sequence number of its SYN
  uint32_t right_edge = 0;  // highest ack + window already advertised TO this endpoint
  // Highest ACK this endpoint sent (its receive point), known with the other end's
  // edge_valid: together they bound the sequence numbers of a valid RST to it (RFC 5961 3).
  uint32_t ack_sent = 0;
  uint16_t mss = 0;         // from its SYN (0 = none)
  uint16_t syn_window = 0;  // window in its SYN (never scaled)
  uint8_t wscale_raw = 0;   // shift it announced in its SYN (raw; see Flow::scale_known)
  // One bit each: a flow entry is per tracked flow, a million of them (bytes_per_flow()).
  bool syn_seen : 1 = false;
  bool wscale_option : 1 = false;
  bool timestamps : 1 = false;  // its SYN carried a timestamp option
  bool sack_permitted : 1 = false;
  bool edge_valid : 1 = false;
  bool fin_seen : 1 = false;
};

// What the regulators learn from the handshake that the endpoints do not keep: when its
// segments passed and their TSvals. A regulator starts only when a knob begins to steer the
// flow (its first payload that way, engine.cpp); the engine then replays the handshake to it
// from these and the endpoints (ISNs, MSS, options), as if it had seen it. Times are ns after
// Flow::created; a handshake longer than 2^32 ns (4.3 s: SYN retransmissions) is not kept.
struct HandshakeRecord {
  uint32_t syn_at = 0;     // the opener's SYN (the last one taken)
  uint32_t synack_at = 0;  // the SYN-ACK answering it (the first one)
  uint32_t ack_at = 0;     // the opener's ACK of the SYN-ACK
  uint32_t syn_tsval = 0;
  uint32_t synack_tsval = 0;
  uint32_t ack_tsval = 0;
  uint8_t syns : 2 = 0;     // the opener's SYNs taken, 2 = more than one (retransmitted)
  uint8_t synacks : 2 = 0;  // SYN-ACKs taken, likewise
  bool ack_seen : 1 = false;
  bool ack_ts : 1 = false;  // the handshake ACK carried a timestamp
  bool kept : 1 = true;     // false: a time did not fit, nothing is replayed
};

enum class FlowState : uint8_t {
  kSynSeen,      // one SYN seen
  kSynAckSeen,   // SYN and SYN-ACK seen: window scales known
  kEstablished,  // an ACK followed the SYN-ACK
  kMidstream,    // first packet was not a SYN: handshake unseen, scales unknown
  kClosed,       // FIN both ways or RST: lingers briefly for late ACKs
};

// Which eviction/expiry class a flow is in. Lower classes are evicted first.
enum class FlowClass : uint8_t { kClosed = 0, kTentative = 1, kEstablished = 2 };
constexpr size_t kFlowClasses = 3;

constexpr uint32_t kNoFlow = 0xffffffff;
constexpr uint32_t kNoOwner = 0xffffffff;

constexpr uint32_t kNoSlot = 0xffffffff;

// Per-flow regulator state lives in the engine's pools (see engine.cpp), referred to by slot
// index; the table only manages identity, lifetime and the handshake facts every policy
// needs. Fields are ordered so that the entry has no padding worth mentioning.
struct Flow {
  Nanos created = 0;
  Nanos last_seen = 0;
  uint64_t bytes_from_sub = 0;  // TCP payload bytes, for observe/metrics
  uint64_t bytes_to_sub = 0;
  FlowKey key;
  FlowState state = FlowState::kSynSeen;
  FlowClass cls = FlowClass::kTentative;  // table bookkeeping (owned by FlowTable)
  Endpoint sub;                           // the subscriber's end
  Endpoint peer;                          // the server's end

  // Table bookkeeping (owned by FlowTable).
  uint32_t hash = 0;
  uint32_t lru_prev = kNoFlow;
  uint32_t lru_next = kNoFlow;
  uint32_t owner = kNoOwner;      // e.g. the subscriber entry; kNoOwner = none
  uint32_t owner_prev = kNoFlow;  // the owner's list of its flows of this class (closed and
  uint32_t owner_next = kNoFlow;  // tentative only: the classes it may evict for itself)

  // The engine's regulator slots (kNoSlot: none), released before the entry is reused.
  uint32_t up_slot = kNoSlot;
  uint32_t down_slot = kNoSlot;
  HandshakeRecord hs;

  uint8_t sub_scale = 0;           // effective shift of windows the subscriber sends
  uint8_t peer_scale = 0;          // effective shift of windows the peer sends
  bool sub_initiated : 1 = false;  // the subscriber sent the first SYN
  bool scale_known : 1 = false;    // both SYNs seen: shifts above are in force
  bool in_use : 1 = false;         // table bookkeeping (owned by FlowTable)
  // A knob's pool was full when the flow first needed a regulator there: it passes that
  // knob untouched for its life (counted once, CoreCounters::regulator_pool_full).
  bool up_refused : 1 = false;
  bool down_refused : 1 = false;
  bool adopted : 1 = false;  // its window scales came from conntrack (Engine::adopt)
};

class FlowTable {
 public:
  static constexpr uint32_t kBucketsPerFlow = 2;  // load factor <= 0.5
  // `capacity` flows at most; `seed` keys the hash (random in the daemon, fixed in tests)
  // so that a remote party cannot aim collisions at us. Owners are numbered below
  // capacity + 1 (one per flow, plus the one of a flow being added to a full table).
  FlowTable(uint32_t capacity, uint64_t seed);
  FlowTable(const FlowTable&) = delete;
  FlowTable& operator=(const FlowTable&) = delete;

  // SipHash-1-3 of every byte of the key under the seed's 128-bit key, folded to 32 bits.
  // The engine also hashes subscriber addresses with it (a key holding only family and
  // sub_addr) for the subscriber table.
  uint32_t hash(const FlowKey& k) const;

  // Index of the flow or kNoFlow.
  uint32_t find(const FlowKey& k, uint32_t h) const;

  // Inserts a new flow (caller checked it is absent). When full, evicts victim(owner);
  // `*evicted` gets its index (kNoFlow if none), so the caller can reset per-flow state kept
  // elsewhere. The new flow is default-initialised with key, hash, class, owner, created
  // and last_seen set.
  uint32_t insert(const FlowKey& k, uint32_t h, FlowClass cls, Nanos now, uint32_t* evicted,
                  uint32_t owner = kNoOwner);
  // The flow a full table gives up for a new flow of `owner`: the least recently seen of
  // the lowest non-empty class, the owner's own one of that class if it has one (closed
  // and tentative classes; established flows are taken in global LRU order).
  uint32_t victim(uint32_t owner) const;
  // The owner's least recently seen closed flow, else tentative one; kNoFlow if it has
  // only established flows (or none).
  uint32_t oldest_owned(uint32_t owner) const;
  // Memory per flow: entry, hash buckets, per-owner list heads.
  static size_t bytes_per_flow();

  // Marks the flow as just seen (moves it to the front of its class list).
  void touch(uint32_t idx, Nanos now);
  void set_class(uint32_t idx, FlowClass cls);
  // Starts the flow over in its slot (its ports were reused): all but its key and the
  // table's bookkeeping back to defaults, created and last seen `now`.
  void restart(uint32_t idx, Nanos now);
  void remove(uint32_t idx);

  // Removes flows of class `cls` not seen since `before`, oldest first; calls
  // `on_remove(idx)` before each removal. Returns the number removed.
  template <typename F>
  size_t expire_class(FlowClass cls, Nanos before, F&& on_remove) {
    size_t n = 0;
    for (;;) {
      const uint32_t idx = tail_[static_cast<size_t>(cls)];
      if (idx == kNoFlow || flows_[idx].last_seen >= before) break;
      on_remove(idx);
      remove(idx);
      ++n;
    }
    return n;
  }

  Flow& at(uint32_t idx) { return flows_[idx]; }
  const Flow& at(uint32_t idx) const { return flows_[idx]; }
  uint32_t size() const { return size_; }
  uint32_t capacity() const { return capacity_; }
  uint32_t class_size(FlowClass c) const { return class_size_[static_cast<size_t>(c)]; }
  // Least recently seen flow of a class (kNoFlow if empty); for tests and expiry.
  uint32_t oldest(FlowClass c) const { return tail_[static_cast<size_t>(c)]; }

 private:
  void list_unlink(uint32_t idx);
  void list_push_front(uint32_t idx);
  void bucket_erase(uint32_t idx);
  void owner_unlink(uint32_t idx);
  void owner_push_front(uint32_t idx);
  // The flow is in its owner's list (it has one, and is closed or tentative).
  static bool owned(const Flow& f) {
    return f.owner != kNoOwner && f.cls != FlowClass::kEstablished;
  }

  struct OwnerLists {  // per owner: head and tail of its closed and its tentative flows
    std::array<uint32_t, 2> head{kNoFlow, kNoFlow};
    std::array<uint32_t, 2> tail{kNoFlow, kNoFlow};
  };

  static constexpr size_t kKeyBytes = 16 + 16 + 2 + 2 + 1;

  uint32_t capacity_;
  SipKey key_;
  uint32_t size_ = 0;
  uint32_t mask_;                  // buckets_.size() - 1
  std::vector<uint32_t> buckets_;  // flow index + 1; 0 = empty (linear probing)
  std::vector<Flow> flows_;        // reserved to capacity once; grows up to it, never beyond
  uint32_t free_head_ = kNoFlow;   // freed slots, linked through lru_next
  std::array<uint32_t, kFlowClasses> head_{kNoFlow, kNoFlow, kNoFlow};
  std::array<uint32_t, kFlowClasses> tail_{kNoFlow, kNoFlow, kNoFlow};
  std::array<uint32_t, kFlowClasses> class_size_{};
  std::vector<OwnerLists> owners_;  // capacity + 1, allocated once
};

}  // namespace rsfc
