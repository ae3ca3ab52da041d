#include "rsfc/core/subscriber_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace rsfc {
namespace {

IpAddr addr(uint32_t n) {
  const uint8_t b[4] = {198, 18, static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n)};
  return IpAddr::v4(b);
}

TEST(SubscriberTable, OneEntryPerAddressHeldByItsFlows) {
  SubscriberTable t(8);
  const uint32_t a = t.acquire(addr(1), 11);
  const uint32_t b = t.acquire(addr(2), 22);
  ASSERT_NE(a, SubscriberTable::kNone);
  ASSERT_NE(b, SubscriberTable::kNone);
  EXPECT_NE(a, b);
  EXPECT_EQ(t.acquire(addr(1), 11), a) << "a second flow of the same subscriber";
  EXPECT_EQ(t.refs(a), 2u);
  EXPECT_EQ(t.size(), 2u);
  // IPv6 and IPv4 addresses with the same leading bytes are different subscribers.
  IpAddr v6 = addr(1);
  v6.family = 6;
  EXPECT_NE(t.acquire(v6, 11), a);
  t.release(a);
  EXPECT_EQ(t.size(), 3u) << "still held by one flow";
  t.at(a).on_delivered(kSecond, 1000, kSecond / 10);
  t.release(a);
  EXPECT_EQ(t.size(), 2u);
  const uint32_t again = t.acquire(addr(1), 11);
  EXPECT_EQ(t.at(again).total_bytes(), 0u) << "a freed entry starts afresh";
}

TEST(SubscriberTable, FullTableRefusesNewAddressesAndRecovers) {
  SubscriberTable t(4);
  std::vector<uint32_t> held;
  for (uint32_t i = 0; i < 4; ++i) held.push_back(t.acquire(addr(i), i * 7));
  EXPECT_EQ(t.acquire(addr(99), 5), SubscriberTable::kNone);
  EXPECT_EQ(t.acquire(addr(2), 14), held[2]) << "known addresses still found when full";
  t.release(held[2]);
  t.release(held[2]);
  EXPECT_NE(t.acquire(addr(99), 5), SubscriberTable::kNone);
}

TEST(SubscriberTable, CollidingHashesSurviveDeletionsInAnyOrder) {
  // Every address in one probe chain (hash 3): removing any of them must leave the others
  // reachable (backward-shift deletion), checked against a model under random churn.
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    SubscriberTable t(16);
    std::map<uint32_t, uint32_t> model;  // address number -> idx
    for (int step = 0; step < 400; ++step) {
      const auto n = static_cast<uint32_t>(rng() % 24);
      const uint32_t h = (n % 3 == 0) ? 3u : 3u + n;  // a third collide exactly, the rest near
      auto it = model.find(n);
      if (it != model.end() && rng() % 2) {
        t.release(it->second);
        model.erase(it);
      } else if (it == model.end()) {
        const uint32_t idx = t.acquire(addr(n), h);
        if (model.size() == 16) {
          EXPECT_EQ(idx, SubscriberTable::kNone);
        } else {
          ASSERT_NE(idx, SubscriberTable::kNone);
          model[n] = idx;
        }
      }
      ASSERT_EQ(t.size(), model.size());
    }
    for (const auto& [n, idx] : model) {
      const uint32_t h = (n % 3 == 0) ? 3u : 3u + n;
      EXPECT_EQ(t.acquire(addr(n), h), idx) << "address " << n << " lost, seed " << seed;
    }
  }
}

}  // namespace
}  // namespace rsfc
