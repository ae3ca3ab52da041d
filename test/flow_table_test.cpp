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

}  // namespace
}  // namespace rsfc
