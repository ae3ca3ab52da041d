#include "rsfc/core/flow_table.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace rsfc {
namespace {

FlowKey key(uint32_t n) {
  FlowKey k;
  k.family = 4;
  k.sub_addr = {198, 18, static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n)};
  k.peer_addr = {198, 19, 0, 2};
  k.sub_port = static_cast<uint16_t>(1024 + (n % 50000));
  k.peer_port = 443;
  return k;
}

uint32_t add(FlowTable& t, uint32_t n, Nanos now, FlowClass c = FlowClass::kEstablished,
             uint32_t* evicted = nullptr) {
  uint32_t ev;
  const FlowKey k = key(n);
  const uint32_t idx = t.insert(k, t.hash(k), c, now, &ev);
  if (evicted) *evicted = ev;
  return idx;
}

uint32_t lookup(const FlowTable& t, uint32_t n) {
  const FlowKey k = key(n);
  return t.find(k, t.hash(k));
}

TEST(FlowTable, InsertFindRemove) {
  FlowTable t(100, 1);
  for (uint32_t i = 0; i < 100; ++i) add(t, i, 0);
  EXPECT_EQ(t.size(), 100u);
  for (uint32_t i = 0; i < 100; ++i) {
    const uint32_t idx = lookup(t, i);
    ASSERT_NE(idx, kNoFlow);
    EXPECT_EQ(t.at(idx).key, key(i));
  }
  EXPECT_EQ(lookup(t, 1000), kNoFlow);
  for (uint32_t i = 0; i < 100; i += 2) t.remove(lookup(t, i));
  EXPECT_EQ(t.size(), 50u);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_EQ(lookup(t, i) != kNoFlow, i % 2 == 1) << i;
}

TEST(FlowTable, FullTableEvictsLeastRecentlySeen) {
  FlowTable t(4, 1);
  for (uint32_t i = 0; i < 4; ++i) add(t, i, i * kSecond);
  t.touch(lookup(t, 0), 10 * kSecond);  // 1 is now the least recently seen
  uint32_t evicted;
  add(t, 99, 11 * kSecond, FlowClass::kEstablished, &evicted);
  EXPECT_NE(evicted, kNoFlow);
  EXPECT_EQ(lookup(t, 1), kNoFlow);
  EXPECT_NE(lookup(t, 0), kNoFlow);
  EXPECT_NE(lookup(t, 99), kNoFlow);
  EXPECT_EQ(t.size(), 4u);
}

TEST(FlowTable, EvictsClosedThenTentativeBeforeEstablished) {
  FlowTable t(3, 1);
  add(t, 1, 1, FlowClass::kEstablished);
  add(t, 2, 2, FlowClass::kTentative);
  add(t, 3, 3, FlowClass::kClosed);
  add(t, 4, 4, FlowClass::kTentative);  // evicts the closed flow 3
  EXPECT_EQ(lookup(t, 3), kNoFlow);
  add(t, 5, 5, FlowClass::kTentative);  // evicts tentative 2, the oldest tentative
  EXPECT_EQ(lookup(t, 2), kNoFlow);
  EXPECT_NE(lookup(t, 1), kNoFlow) << "an established flow was evicted before tentative ones";
}

TEST(FlowTable, SynFloodDoesNotEvictEstablished) {
  FlowTable t(1000, 7);
  for (uint32_t i = 0; i < 100; ++i) add(t, i, 0, FlowClass::kEstablished);
  for (uint32_t i = 1000; i < 100000; ++i) add(t, i, i, FlowClass::kTentative);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_NE(lookup(t, i), kNoFlow) << i;
  EXPECT_EQ(t.size(), 1000u);
  EXPECT_EQ(t.class_size(FlowClass::kEstablished), 100u);
}

uint32_t add_owned(FlowTable& t, uint32_t n, Nanos now, FlowClass c, uint32_t owner) {
  uint32_t ev;
  const FlowKey k = key(n);
  return t.insert(k, t.hash(k), c, now, &ev, owner);
}

// A full table gives up the new flow's owner's own least recently seen flow of the lowest
// class if it has one, else the global one; established flows in global LRU order.
TEST(FlowTable, FullTablePrefersTheNewFlowsOwnersFlows) {
  FlowTable t(4, 1);
  const uint32_t other = add_owned(t, 1, 1, FlowClass::kTentative, 0);  // oldest tentative
  const uint32_t own_old = add_owned(t, 2, 2, FlowClass::kTentative, 1);
  const uint32_t own_new = add_owned(t, 3, 3, FlowClass::kTentative, 1);
  add_owned(t, 4, 4, FlowClass::kEstablished, 0);
  EXPECT_EQ(t.victim(1), own_old);
  EXPECT_EQ(t.victim(2), other) << "an owner without flows: global order";
  EXPECT_EQ(t.victim(kNoOwner), other);
  t.touch(own_old, 5);
  EXPECT_EQ(t.victim(1), own_new) << "LRU within the owner's flows";
  EXPECT_EQ(t.oldest_owned(1), own_new);
  t.set_class(own_new, FlowClass::kClosed);
  EXPECT_EQ(t.oldest_owned(1), own_new) << "closed before tentative";
  EXPECT_EQ(t.victim(0), own_new) << "the lowest class first, whoever owns it";
  t.set_class(own_new, FlowClass::kEstablished);
  t.set_class(own_old, FlowClass::kEstablished);
  EXPECT_EQ(t.oldest_owned(1), kNoFlow) << "established flows are never the owner's to give";
  EXPECT_EQ(t.victim(1), other);
  uint32_t ev;
  const FlowKey k = key(9);
  t.insert(k, t.hash(k), FlowClass::kTentative, 6, &ev, 1);
  EXPECT_EQ(ev, other);
  t.remove(lookup(t, 9));
  EXPECT_EQ(t.oldest_owned(1), kNoFlow);
  const uint32_t restarted = lookup(t, 2);
  t.set_class(restarted, FlowClass::kTentative);
  t.restart(restarted, 7);
  EXPECT_EQ(t.at(restarted).owner, 1u);
  EXPECT_EQ(t.oldest_owned(1), restarted) << "a restarted flow keeps its place";
}

TEST(FlowTable, ExpireOldestFirstPerClass) {
  FlowTable t(10, 1);
  for (uint32_t i = 0; i < 5; ++i) add(t, i, i * kSecond, FlowClass::kEstablished);
  std::vector<uint32_t> gone;
  const size_t n = t.expire_class(FlowClass::kEstablished, 3 * kSecond,
                                  [&](uint32_t idx) { gone.push_back(idx); });
  EXPECT_EQ(n, 3u);  // seen at 0, 1, 2 s
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(lookup(t, 2), kNoFlow);
  EXPECT_NE(lookup(t, 3), kNoFlow);
  EXPECT_EQ(t.expire_class(FlowClass::kTentative, 100 * kSecond, [](uint32_t) {}), 0u);
}

// Random churn against a reference set: the open-addressing table with backward-shift
// deletion must never lose or invent a flow.
TEST(FlowTable, RandomChurnMatchesReference) {
  FlowTable t(512, 99);
  std::set<uint32_t> ref;
  std::mt19937 rng(3);
  Nanos now = 0;
  for (int step = 0; step < 200000; ++step) {
    const uint32_t n = static_cast<uint32_t>(rng() % 2000);
    ++now;
    const uint32_t idx = lookup(t, n);
    ASSERT_EQ(idx != kNoFlow, ref.count(n) == 1) << "step " << step;
    if (idx == kNoFlow) {
      if (ref.size() == 512) continue;  // stay below capacity: no evictions here
      add(t, n, now);
      ref.insert(n);
    } else if (rng() % 2) {
      t.remove(idx);
      ref.erase(n);
    } else {
      t.touch(idx, now);
    }
  }
  EXPECT_EQ(t.size(), ref.size());
}

TEST(FlowTable, SeedChangesTheHash) {
  FlowTable a(10, 1), b(10, 2);
  EXPECT_NE(a.hash(key(1)), b.hash(key(1)));
}

// ---- Keyed hashing: every byte of the key under the seed ---------------------------------

FlowKey v6_key(uint64_t sub_prefix, uint64_t sub_iid, uint64_t peer_prefix = 0x20010db800000001,
               uint64_t peer_iid = 0x10) {
  auto put = [](std::array<uint8_t, 16>& a, uint64_t hi, uint64_t lo) {
    for (int i = 0; i < 8; ++i) {
      a[static_cast<size_t>(i)] = static_cast<uint8_t>(hi >> (56 - 8 * i));
      a[static_cast<size_t>(8 + i)] = static_cast<uint8_t>(lo >> (56 - 8 * i));
    }
  };
  FlowKey k;
  k.family = 6;
  put(k.sub_addr, sub_prefix, sub_iid);
  put(k.peer_addr, peer_prefix, peer_iid);
  k.sub_port = 40000;
  k.peer_port = 443;
  return k;
}

// An interface ID written so that its bytes, read as a little-endian word, equal `v`.
uint64_t iid_le(uint64_t v) {
  return __builtin_bswap64(v);
}

// A subscriber picks its own interface ID (SLAAC privacy addresses, static ones). Keys that
// differ only in their /64 prefixes must not share a hash whatever interface ID they carry:
// the hash of 0dc02fb multiplied the interface ID, unseeded, into the key, so the ID
// 0xe7037ed1a0b428db (its constant, little-endian) zeroed the product and every prefix
// collided under every seed; ID ^ 1 made the prefixes enter linearly (sub ^ peer collided).
TEST(FlowTable, NoInterfaceIdMakesPrefixesCollide) {
  const uint64_t chosen[] = {0,
                             1,
                             ~0ull,
                             iid_le(0xe7037ed1a0b428dbull),
                             iid_le(0xe7037ed1a0b428dbull ^ 1),
                             iid_le(0xa0761d6478bd642full)};
  for (uint64_t seed : {1ull, 2ull, 0x5eedull, 0xdeadbeefcafef00dull}) {
    const FlowTable t(1024, seed);
    for (uint64_t iid : chosen) {
      std::set<uint32_t> prefixes_apart, xor_pairs_apart;
      for (uint64_t n = 0; n < 256; ++n) {
        const uint64_t prefix = 0x2a0012340000ull << 16 | n;
        prefixes_apart.insert(t.hash(v6_key(prefix, iid)));
        // Subscriber and peer prefixes that move together (their XOR stays the same).
        xor_pairs_apart.insert(t.hash(v6_key(prefix, iid, prefix ^ 0x0123456789abcdefull)));
      }
      EXPECT_GE(prefixes_apart.size(), 250u) << "seed " << seed << " iid " << std::hex << iid;
      EXPECT_GE(xor_pairs_apart.size(), 250u) << "seed " << seed << " iid " << std::hex << iid;
    }
  }
}

// Keys that differ only in the low 64 bits (the interface ID) of either address: which of
// them share a bucket depends on the seed, so nobody who does not know it can line them up.
TEST(FlowTable, BucketsOfInterfaceIdsDependOnTheSeed) {
  constexpr uint32_t kBuckets = 64;
  for (bool peer_side : {false, true}) {
    std::vector<std::vector<uint32_t>> buckets;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const FlowTable t(kBuckets, seed);
      std::vector<uint32_t> b;
      for (uint64_t iid = 1; iid <= 256; ++iid) {
        const FlowKey k = peer_side ? v6_key(0x2a00123400000001, 1, 0x20010db800000001, iid)
                                    : v6_key(0x2a00123400000001, iid);
        b.push_back(t.hash(k) % kBuckets);
      }
      buckets.push_back(b);
    }
    for (size_t i = 0; i < buckets.size(); ++i) {
      for (size_t j = i + 1; j < buckets.size(); ++j) {
        size_t same = 0;
        for (size_t n = 0; n < buckets[i].size(); ++n) same += buckets[i][n] == buckets[j][n];
        // Independent seeds agree on about 1 in 64 keys (4 of 256); a seed-free layout on all.
        EXPECT_LT(same, 24u) << "seeds " << i + 1 << " and " << j + 1 << (peer_side ? " peer" : "");
      }
    }
  }
}

// Every byte of the key reaches the hash: flipping any single bit changes it.
TEST(FlowTable, EveryKeyByteIsHashed) {
  const FlowTable t(16, 0x1234);
  FlowKey base = v6_key(0x2a00123400000001, 0x0211223344556677);
  const uint32_t h0 = t.hash(base);
  for (size_t byte = 0; byte < 16; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      FlowKey k = base;
      k.sub_addr[byte] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_NE(t.hash(k), h0) << "sub byte " << byte << " bit " << bit;
      k = base;
      k.peer_addr[byte] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_NE(t.hash(k), h0) << "peer byte " << byte << " bit " << bit;
    }
  }
  for (int bit = 0; bit < 16; ++bit) {
    FlowKey k = base;
    k.sub_port ^= static_cast<uint16_t>(1u << bit);
    EXPECT_NE(t.hash(k), h0) << "sub port bit " << bit;
    k = base;
    k.peer_port ^= static_cast<uint16_t>(1u << bit);
    EXPECT_NE(t.hash(k), h0) << "peer port bit " << bit;
  }
  FlowKey v4 = base;
  v4.family = 4;
  EXPECT_NE(t.hash(v4), h0) << "family";
}

}  // namespace
}  // namespace rsfc
