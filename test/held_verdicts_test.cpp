// HeldVerdicts (the worker's store of packets the downlink pacer holds).
#include "rsfc/io/held_verdicts.h"

#include <gtest/gtest.h>

#include <vector>

namespace rsfc {
namespace {

TEST(HeldVerdicts, ReleasesInTimeOrderThenArrivalOrder) {
  HeldVerdicts h(16);
  ASSERT_TRUE(h.hold(1, 30));
  ASSERT_TRUE(h.hold(2, 10));
  ASSERT_TRUE(h.hold(3, 20));
  ASSERT_TRUE(h.hold(4, 20));  // due with 3: after it (a FIN behind its data)
  ASSERT_TRUE(h.hold(5, 20));
  EXPECT_EQ(h.next(), 10);
  std::vector<uint32_t> out;
  EXPECT_EQ(h.release_due(9, [&](uint32_t id) { out.push_back(id); }), 0u);
  EXPECT_EQ(h.release_due(20, [&](uint32_t id) { out.push_back(id); }), 4u);
  EXPECT_EQ(out, (std::vector<uint32_t>{2, 3, 4, 5}));
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.next(), 30);
  EXPECT_EQ(h.release_due(INT64_MAX, [&](uint32_t id) { out.push_back(id); }), 1u);
  EXPECT_TRUE(h.empty());
  EXPECT_EQ(out.back(), 1u);
}

TEST(HeldVerdicts, FullStoreRefusesAndKeepsWhatItHolds) {
  HeldVerdicts h(3);
  EXPECT_TRUE(h.hold(1, 5));
  EXPECT_TRUE(h.hold(2, 6));
  EXPECT_TRUE(h.hold(3, 7));
  EXPECT_FALSE(h.hold(4, 1)) << "full: the caller gives this one its verdict at once";
  EXPECT_EQ(h.size(), 3u);
  std::vector<uint32_t> out;
  h.release_due(INT64_MAX, [&](uint32_t id) { out.push_back(id); });
  EXPECT_EQ(out, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_TRUE(h.hold(4, 1)) << "room again once released";
}

TEST(HeldVerdicts, ManyInterleavedStayOrdered) {
  HeldVerdicts h(4096);
  // Two flows' schedules interleaved, each non-decreasing: every id comes out once, by time.
  for (uint32_t i = 0; i < 2000; ++i) ASSERT_TRUE(h.hold(i, (i % 2 ? 1000 : 0) + (i / 2) * 3));
  Nanos last = -1;
  std::vector<bool> seen(2000, false);
  size_t n = h.release_due(INT64_MAX, [&](uint32_t id) {
    const Nanos at = (id % 2 ? 1000 : 0) + (id / 2) * 3;
    EXPECT_GE(at, last);
    last = at;
    EXPECT_FALSE(seen[id]);
    seen[id] = true;
  });
  EXPECT_EQ(n, 2000u);
}

}  // namespace
}  // namespace rsfc
