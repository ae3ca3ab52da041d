#include "rsfc/core/subscriber_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "rsfc/core/flow_table.h"

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

// Tracked flows hold an entry as regulators do; its shared state starts afresh when the last
// regulator lets go, the entry is freed when neither holds it.
TEST(SubscriberTable, FlowsAndRegulatorsHoldTheEntry) {
  SubscriberTable t(4);
  const uint32_t a = t.add_flow(addr(1), 11);
  EXPECT_EQ(t.add_flow(addr(1), 11), a);
  EXPECT_EQ(t.flows(a), 2u);
  EXPECT_EQ(t.attached(), 0u);
  EXPECT_EQ(t.acquire(addr(1), 11), a);
  EXPECT_EQ(t.attached(), 1u);
  t.at(a).on_delivered(kSecond, 1000, kSecond / 10);
  t.release(a);
  EXPECT_EQ(t.attached(), 0u);
  EXPECT_EQ(t.size(), 1u) << "still held by its flows";
  EXPECT_EQ(t.acquire(addr(1), 11), a);
  EXPECT_EQ(t.at(a).total_bytes(), 0u) << "the shared state starts afresh";
  t.release(a);
  t.remove_flow(a);
  t.remove_flow(a);
  EXPECT_EQ(t.size(), 0u);
  t.remove_flow(a);  // once too often: ignored
  EXPECT_EQ(t.size(), 0u);
}

// Only entries with regulators hold a shared uplink state, from a pool of `uplinks`: a new
// address's first regulator is refused when all are held (the entry is not kept for it), and
// a state let go is handed to the next address, fresh.
TEST(SubscriberTable, SharedUplinksComeFromTheirOwnPool) {
  SubscriberTable t(8, 2);
  const uint32_t a = t.acquire(addr(1), 1);
  const uint32_t b = t.acquire(addr(2), 2);
  ASSERT_NE(a, SubscriberTable::kNone);
  ASSERT_NE(b, SubscriberTable::kNone);
  EXPECT_EQ(t.acquire(addr(1), 1), a) << "a second regulator of a held address shares it";
  EXPECT_EQ(t.refs(a), 2u);
  EXPECT_EQ(t.acquire(addr(3), 3), SubscriberTable::kNone);
  EXPECT_EQ(t.size(), 2u) << "the refused address holds no entry";
  const uint32_t c = t.add_flow(addr(3), 3);
  EXPECT_EQ(t.refs(c), 0u);
  t.at(b).on_delivered(kSecond, 1000, kSecond / 10);
  t.release(b);
  EXPECT_EQ(t.size(), 2u) << "b had no flows: its entry went with its last regulator";
  EXPECT_EQ(t.acquire(addr(3), 3), c);
  EXPECT_EQ(t.at(c).total_bytes(), 0u) << "b's state, started afresh";
  EXPECT_EQ(t.attached(), 2u);
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

// The engine keys subscriber entries with the flow table's seeded hash of the subscriber's
// family and address (engine.cpp, join_subscriber). IPv6 subscribers each hold their own /64
// and choose their interface ID: whatever ID they pick, different /64s must spread over the
// table's buckets under every seed. At 0dc02fb the interface ID entered the hash unseeded,
// and one chosen ID put every /64 in the same bucket.
TEST(SubscriberTable, ChosenInterfaceIdsDoNotShareABucket) {
  const uint8_t chosen_iids[][8] = {{0, 0, 0, 0, 0, 0, 0, 1},
                                    {0xdb, 0x28, 0xb4, 0xa0, 0xd1, 0x7e, 0x03, 0xe7},
                                    {0xda, 0x28, 0xb4, 0xa0, 0xd1, 0x7e, 0x03, 0xe7},
                                    {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};
  for (uint64_t seed : {1ull, 0x5eedull, 0x0123456789abcdefull}) {
    const FlowTable hasher(1, seed);
    for (const auto& iid : chosen_iids) {
      std::set<uint32_t> buckets;
      for (uint32_t n = 0; n < 256; ++n) {
        FlowKey k;  // as join_subscriber builds it: the family and the address alone
        k.family = 6;
        k.sub_addr = {0x2a,
                      0x00,
                      0x12,
                      0x34,
                      0x56,
                      0x78,
                      static_cast<uint8_t>(n >> 8),
                      static_cast<uint8_t>(n)};
        std::copy(iid, iid + 8, k.sub_addr.begin() + 8);
        buckets.insert(hasher.hash(k) & 4095);  // a 2048-subscriber table's 4096 buckets
      }
      // 256 keys into 4096 buckets: about 8 shared by chance; a seed-free flaw shares all.
      EXPECT_GE(buckets.size(), 230u) << "seed " << seed << " iid byte0 " << int{iid[0]};
    }
  }
}

// The pacer's gate and the download-alone ceiling (Engine::phone_uploads) ask whether the
// phone runs a bulk upload. A keepalive or a request now and then is not one; an upload is,
// by its bytes (kBulkBytes in two to three seconds) or, starved by a long round trip, by
// filling its window (report_active); neither a second after it stops.
TEST(SubscriberUplink, ABulkUploadIsNotAKeepalive) {
  const Nanos iv = 100 * kMilli;
  SubscriberUplink chatty;
  for (Nanos t = 0; t < 20 * kSecond; t += 500 * kMilli) {
    chatty.on_delivered(t, 517, iv);  // a TLS record every half second
    EXPECT_FALSE(chatty.uploads_bulk(t)) << t;
    EXPECT_FALSE(chatty.uploads_bulk(t + 400 * kMilli)) << t;
  }
  EXPECT_TRUE(chatty.delivered_since(19 * kSecond)) << "it does deliver: only not in bulk";

  // 2G: 100 kbit/s, a segment every 116 ms, from the middle of an epoch.
  SubscriberUplink slow;
  const Nanos t0 = 3 * kSecond + 700 * kMilli, gap = 1448 * 8 * kSecond / 100000;
  Nanos t = t0, bulk_from = -1;
  for (; t < t0 + 10 * kSecond; t += gap) {
    slow.on_delivered(t, 1448, iv);
    if (bulk_from < 0 && slow.uploads_bulk(t)) bulk_from = t;
    if (bulk_from >= 0) {  // and stays one, between its segments too
      EXPECT_TRUE(slow.uploads_bulk(t)) << "at " << t - t0;
      EXPECT_TRUE(slow.uploads_bulk(t + gap - 1)) << "at " << t - t0;
    }
  }
  ASSERT_GE(bulk_from, 0);
  EXPECT_EQ(bulk_from, t0 + 5 * gap) << "its sixth segment makes 8 KB";
  const Nanos last = t - gap;
  EXPECT_FALSE(slow.uploads_bulk(last + SubscriberUplink::kEpoch + 1));
  // Much later a keepalive does not revive the old upload's bytes.
  slow.on_delivered(last + 5 * kSecond, 517, iv);
  EXPECT_FALSE(slow.uploads_bulk(last + 5 * kSecond));

  // The same trickle as the keepalive's, from an upload that fills its window at its control
  // steps: one.
  SubscriberUplink starved;
  int64_t epoch = -1;  // the member's own bookkeeping
  for (Nanos u = 0; u < 10 * kSecond; u += 500 * kMilli) {
    starved.on_delivered(u, 517, iv);
    starved.report_active(u, epoch);
    EXPECT_TRUE(starved.uploads_bulk(u)) << u;
    EXPECT_TRUE(starved.uploads_bulk(u + 400 * kMilli)) << u;
  }
  EXPECT_FALSE(starved.uploads_bulk(9500 * kMilli + SubscriberUplink::kEpoch + 1));

  // kBulkBytes in one burst is one; a byte less is not.
  SubscriberUplink burst;
  burst.on_delivered(kSecond, SubscriberUplink::kBulkBytes - 1, iv);
  EXPECT_FALSE(burst.uploads_bulk(kSecond));
  burst.on_delivered(kSecond + kMilli, 1, iv);
  EXPECT_TRUE(burst.uploads_bulk(kSecond + kMilli));
  EXPECT_TRUE(burst.uploads_bulk(2 * kSecond));
  EXPECT_FALSE(burst.uploads_bulk(2 * kSecond + kMilli + 1));
}

// A round-trip download gives way while its phone's regulated uploads deliver short of their
// link (Engine::downlink_target): the last whole second under 0.85 of the best whole second
// of the 5-10 s before. A steady upload is never short; a slower second, or a silent one, is;
// a best older than that, or none yet, says nothing.
TEST(SubscriberUplink, ShortOfBestWhenTheLastSecondDeliveredUnderItsRecentBest) {
  const Nanos iv = 100 * kMilli;
  SubscriberUplink u;
  EXPECT_FALSE(u.short_of_best(0)) << "nothing delivered";
  const Nanos t0 = 2 * kSecond + 300 * kMilli;  // from the middle of an epoch
  Nanos t = t0;
  for (; t < t0 + 12 * kSecond; t += 10 * kMilli) {  // 144,800 bytes a second
    u.on_delivered(t, 1448, iv);
    EXPECT_FALSE(u.short_of_best(t)) << "steady, at " << t - t0;
  }
  // Half the rate from 14.3 s: the second from 14 s delivers 65 % of the best (30 segments
  // at the old rate, 35 at the new), and from 15 s on the last whole second is short.
  const Nanos slow_from = t;
  for (; t < slow_from + 4 * kSecond; t += 20 * kMilli) {
    u.on_delivered(t, 1448, iv);
    EXPECT_EQ(u.short_of_best(t), t >= 15 * kSecond) << "at " << t - slow_from;
  }
  // 90 % of the best is not short of it.
  SubscriberUplink near;
  for (Nanos v = 0; v < 8 * kSecond; v += 10 * kMilli) near.on_delivered(v, 1448, iv);
  for (Nanos v = 8 * kSecond; v < 11 * kSecond; v += 11 * kMilli) near.on_delivered(v, 1448, iv);
  EXPECT_FALSE(near.short_of_best(11 * kSecond));
  // Silence: the last whole second delivered nothing, while the best is recent.
  const Nanos last = t - 20 * kMilli;
  EXPECT_TRUE(u.short_of_best(last + 2 * kSecond));
  // A best more than 10 s old is no reference: a keepalive after it is not short.
  u.on_delivered(last + 15 * kSecond, 517, iv);
  EXPECT_FALSE(u.short_of_best(last + 15 * kSecond));
  EXPECT_FALSE(u.short_of_best(last + 16 * kSecond + 1)) << "its own second is its best";
}

// The phone's tick, noted by one of its regulated flows, is read by the others; it goes with
// the shared state when the last regulator lets go, and only whole milliseconds are kept.
TEST(SubscriberTable, ThePhonesTickGoesWithItsSharedState) {
  SubscriberTable t(8);
  const IpAddr a = addr(2);
  const uint32_t i = t.acquire(a, 7);
  ASSERT_NE(i, SubscriberTable::kNone);
  EXPECT_EQ(t.phone_tick(i), 0);
  t.note_phone_tick(i, 3333333);  // not whole milliseconds: ignored
  EXPECT_EQ(t.phone_tick(i), 0);
  t.note_phone_tick(i, 4 * kMilli);
  EXPECT_EQ(t.phone_tick(i), 4 * kMilli);
  EXPECT_EQ(t.acquire(a, 7), i);  // a second regulator of the phone reads it
  EXPECT_EQ(t.phone_tick(i), 4 * kMilli);
  t.note_phone_tick(i, 1 * kMilli);  // the latest wins
  EXPECT_EQ(t.phone_tick(i), 1 * kMilli);
  t.release(i);
  t.release(i);
  const uint32_t j = t.acquire(a, 7);
  ASSERT_NE(j, SubscriberTable::kNone);
  EXPECT_EQ(t.phone_tick(j), 0) << "a new start forgets the old tick";
}

}  // namespace
}  // namespace rsfc
