#include "link_model.h"

#include <gtest/gtest.h>

#include <vector>

namespace rsfc::lab {
namespace {

constexpr Nanos ms(int64_t v) {
  return v * kMilli;
}

// Drives a model the way linkem does: advance to each event time in turn and record when
// every id comes out.
struct Released {
  uint32_t id;
  Nanos at;
  friend bool operator==(const Released&, const Released&) = default;
};

std::vector<Released> run_until(LinkModel& m, Nanos end) {
  std::vector<Released> out;
  std::vector<uint32_t> ids;
  while (auto t = m.next_event()) {
    if (*t > end) break;
    ids.clear();
    m.advance(*t, ids);
    for (uint32_t id : ids) out.push_back({id, *t});
  }
  return out;
}

Trace make_trace(std::vector<int64_t> offsets_ms) {
  std::string text;
  for (int64_t v : offsets_ms) text += std::to_string(v) + "\n";
  std::string err;
  auto t = Trace::parse(text, &err);
  EXPECT_TRUE(t.has_value()) << err;
  return *t;
}

TEST(LinkModel, PureDelayKeepsOrderAndAddsDelay) {
  LinkModel m({.delay = ms(20)}, 0);
  EXPECT_FALSE(m.next_event().has_value());
  EXPECT_TRUE(m.arrive(1, 1500, ms(0)));
  EXPECT_TRUE(m.arrive(2, 60, ms(3)));
  EXPECT_EQ(m.next_event(), ms(20));
  std::vector<uint32_t> ids;
  m.advance(ms(19), ids);
  EXPECT_TRUE(ids.empty());
  EXPECT_EQ(run_until(m, ms(100)), (std::vector<Released>{{1, ms(20)}, {2, ms(23)}}));
  EXPECT_EQ(m.held_packets(), 0u);
  EXPECT_EQ(m.stats().released_bytes, 1560u);
}

TEST(LinkModel, ZeroDelayReleasesAtOnce) {
  LinkModel m({}, 0);
  EXPECT_TRUE(m.arrive(7, 100, ms(5)));
  std::vector<uint32_t> ids;
  m.advance(ms(5), ids);
  EXPECT_EQ(ids, std::vector<uint32_t>{7});
}

TEST(LinkModel, ConstantRateSerialisesThenDelays) {
  // 1500 bytes at 12 Mbit/s take exactly 1 ms.
  LinkModel m({.delay = ms(10), .rate_bps = 12'000'000}, 0);
  for (uint32_t id = 1; id <= 3; ++id) EXPECT_TRUE(m.arrive(id, 1500, 0));
  EXPECT_EQ(m.buffer_bytes(), 4500u);
  EXPECT_EQ(run_until(m, ms(100)), (std::vector<Released>{{1, ms(11)}, {2, ms(12)}, {3, ms(13)}}));
}

TEST(LinkModel, ConstantRateIdleLinkStartsAtArrival) {
  LinkModel m({.rate_bps = 12'000'000}, 0);
  EXPECT_TRUE(m.arrive(1, 1500, 0));
  EXPECT_EQ(run_until(m, ms(4)), (std::vector<Released>{{1, ms(1)}}));
  EXPECT_TRUE(m.arrive(2, 750, ms(5)));
  EXPECT_EQ(run_until(m, ms(100)), (std::vector<Released>{{2, ms(5) + 500 * kMicro}}));
}

TEST(LinkModel, DropTailByteLimit) {
  LinkModel m({.rate_bps = 12'000'000, .buffer_bytes = 3000}, 0);
  EXPECT_TRUE(m.arrive(1, 1500, 0));
  EXPECT_TRUE(m.arrive(2, 1500, 0));
  EXPECT_FALSE(m.arrive(3, 1500, 0));     // would make 4500 > 3000
  EXPECT_TRUE(m.arrive(4, 1500, ms(1)));  // packet 1 has left at 1 ms
  EXPECT_EQ(m.stats().dropped, 1u);
  EXPECT_EQ(m.stats().dropped_bytes, 1500u);
  EXPECT_EQ(m.stats().max_buffer_bytes, 3000u);
  EXPECT_EQ(run_until(m, ms(100)), (std::vector<Released>{{1, ms(1)}, {2, ms(2)}, {4, ms(3)}}));
}

TEST(LinkModel, ConstantRateThroughputMatchesRate) {
  // A saturating sender (the buffer never empties) gets the configured rate.
  constexpr uint64_t kRate = 2'000'000;
  LinkModel m({.delay = ms(20), .rate_bps = kRate, .buffer_bytes = 1'000'000}, 0);
  uint32_t id = 0;
  std::vector<uint32_t> ids;
  uint64_t released_bytes = 0;
  for (Nanos t = 0; t <= 10 * kSecond; t += 100 * kMicro) {
    ids.clear();
    m.advance(t, ids);
    if (t > ms(20)) released_bytes += ids.size() * 1500;
    while (m.buffer_bytes() + 1500 <= 1'000'000) ASSERT_TRUE(m.arrive(++id, 1500, t));
  }
  const double rate = static_cast<double>(released_bytes) * 8 / (10.0 - 0.02);
  EXPECT_NEAR(rate, static_cast<double>(kRate), kRate * 0.01);
  // A full 1 MB buffer at 2 Mbit/s is 4 s of queueing.
  EXPECT_GE(m.stats().max_buffer_bytes, 1'000'000u - 1500);
}

TEST(LinkModel, TraceOpportunitiesDeliverUpTo1500Bytes) {
  // Opportunities at 1, 1, 3 ms; the trace repeats every 3 ms: 4, 4, 6, 7, 7, 9 ...
  LinkModel m({.delay = ms(10), .trace = make_trace({1, 1, 3})}, 0);
  EXPECT_TRUE(m.arrive(1, 1500, 0));
  EXPECT_TRUE(m.arrive(2, 700, 0));
  EXPECT_TRUE(m.arrive(3, 700, 0));   // shares the second 1 ms opportunity with packet 2
  EXPECT_TRUE(m.arrive(4, 3000, 0));  // 100 bytes at 1 ms, 1500 at 3 ms, 1400 at 4 ms
  EXPECT_TRUE(m.arrive(5, 100, 0));   // the last 100 bytes of the first 4 ms opportunity
  EXPECT_EQ(
      run_until(m, ms(100)),
      (std::vector<Released>{{1, ms(11)}, {2, ms(11)}, {3, ms(11)}, {4, ms(14)}, {5, ms(14)}}));
}

TEST(LinkModel, TraceOpportunitiesAreLostWhileIdle) {
  LinkModel m({.trace = make_trace({1, 1, 3})}, 0);
  // At 100 ms the period started at 99 ms: next opportunities are 100, 100, 102 ms.
  EXPECT_TRUE(m.arrive(1, 1500, ms(100)));
  EXPECT_TRUE(m.arrive(2, 1500, ms(100)));
  EXPECT_TRUE(m.arrive(3, 1500, ms(100)));
  EXPECT_EQ(run_until(m, ms(200)),
            (std::vector<Released>{{1, ms(100)}, {2, ms(100)}, {3, ms(102)}}));
  // Idle again; a packet at 1000.5 ms waits for the opportunity at 1002 ms (period 999..1002).
  EXPECT_TRUE(m.arrive(4, 40, ms(1000) + 500 * kMicro));
  EXPECT_EQ(run_until(m, ms(2000)), (std::vector<Released>{{4, ms(1002)}}));
}

TEST(LinkModel, TraceThroughputMatchesTraceMean) {
  // 4 opportunities per 2 ms = 2000 packets/s = 24 Mbit/s of 1500-byte packets.
  LinkModel m({.trace = make_trace({1, 1, 2, 2}), .buffer_bytes = 150'000}, 0);
  uint32_t id = 0;
  std::vector<uint32_t> ids;
  size_t released = 0;
  for (Nanos t = 0; t < kSecond; t += 250 * kMicro) {
    ids.clear();
    m.advance(t, ids);
    released += ids.size();
    while (m.buffer_bytes() + 1500 <= 150'000) ASSERT_TRUE(m.arrive(++id, 1500, t));
  }
  EXPECT_NEAR(static_cast<double>(released), 2000.0, 3.0);
}

struct BadTrace {
  const char* text;
};
class TraceParseError : public testing::TestWithParam<BadTrace> {};
TEST_P(TraceParseError, IsRejected) {
  std::string err;
  EXPECT_FALSE(Trace::parse(GetParam().text, &err).has_value());
  EXPECT_FALSE(err.empty());
}
INSTANTIATE_TEST_SUITE_P(Cases, TraceParseError,
                         testing::Values(BadTrace{""}, BadTrace{"0\n0\n"}, BadTrace{"5\n3\n"},
                                         BadTrace{"1\nx\n"}, BadTrace{"-1\n4\n"},
                                         BadTrace{"1.5\n"}));

TEST(Trace, ParsesShippedFormat) {
  std::string err;
  auto t = Trace::parse("7\n8\n8\r\n\n12\n", &err);
  ASSERT_TRUE(t.has_value()) << err;
  EXPECT_EQ(t->offsets, (std::vector<Nanos>{ms(7), ms(8), ms(8), ms(12)}));
  EXPECT_EQ(t->period, ms(12));
}

}  // namespace
}  // namespace rsfc::lab
