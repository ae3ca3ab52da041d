// The downlink pacer (pacer.h): the phone's receive rate from its ACKs' timestamps, and the
// release times it gives a download's segments.
#include "rsfc/core/pacer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace rsfc {
namespace {

constexpr double kTick = 1e6;  // the phone's timestamp tick: 1 ms

TcpSegment phone_ack(uint32_t ack, uint32_t tsval) {
  TcpSegment s;
  s.flags = tcpflag::kAck;
  s.ack = ack;
  s.has_ts = true;
  s.tsval = tsval;
  return s;
}

// ACKs of `bytes_per_ack` every `ts_step` phone ticks, `n` of them, all reaching the gateway at
// `at` (as if they had waited together in the uplink buffer) or spread out.
struct AckStream {
  uint32_t ack = 1000;
  uint32_t ts = 5000;
  void feed(DownlinkPacer& p, const PacingParams& pp, int n, uint32_t bytes_per_ack,
            uint32_t ts_step, Nanos at, Nanos spread = 0) {
    for (int i = 0; i < n; ++i) {
      ack += bytes_per_ack;
      ts += ts_step;
      p.on_phone_ack(at + i * spread, phone_ack(ack, ts), kTick, pp);
    }
  }
};

PacingParams pacing_on() {
  PacingParams pp;
  pp.enabled = true;
  return pp;
}

// A pacer that has heard 100 ACKs of 2896 bytes, 4 ms apart on the phone's clock and at the
// gateway: 724,000 bytes/s.
struct Receiving {
  PacingParams pp = pacing_on();
  DownlinkPacer p;
  AckStream s;
  Receiving() { s.feed(p, pp, 100, 2896, 4, kSecond, 4 * kMilli); }
};

TEST(DownlinkPacer, NoSamplesNoHold) {
  DownlinkPacer p;
  const PacingParams pp = pacing_on();
  EXPECT_EQ(p.release_at(kSecond, 1448, true, true, pp), kSecond);
  AckStream s;
  s.feed(p, pp, 3, 2896, 4, kSecond);  // 12 ms of the phone's clock: no 50 ms sample yet
  EXPECT_EQ(p.samples(), 0u);
  EXPECT_EQ(p.release_at(kSecond, 1448, true, true, pp), kSecond);
}

// A phone without timestamps: its ACKs are timed on the gateway's clock, over 300 ms spans.
// 2896 bytes every 4 ms at the gateway: 724,000 bytes/s; an ACK without timestamps given to
// on_phone_ack() adds nothing.
TEST(DownlinkPacer, UntimedAcksAreTimedOnTheGatewaysClock) {
  const PacingParams pp = pacing_on();
  DownlinkPacer untimed, ignored;
  uint32_t ack = 1000;
  for (int i = 0; i < 1000; ++i) {
    ack += 2896;
    TcpSegment seg = phone_ack(ack, 0);
    seg.has_ts = false;
    const Nanos at = kSecond + i * 4 * kMilli;
    untimed.on_phone_ack_untimed(at, seg, pp);
    ignored.on_phone_ack(at, seg, kTick, pp);
  }
  EXPECT_EQ(ignored.samples(), 0u);
  // 4 s of ACKs: a sample every 300 ms (not every 50 ms, the phone clock's span).
  EXPECT_GE(untimed.samples(), 12u);
  EXPECT_LE(untimed.samples(), 14u);
  EXPECT_NEAR(untimed.rate(5 * kSecond, pp), 724'000, 724'000 * 0.02);
}

TEST(DownlinkPacer, RateIsThePhonesEvenWhenItsAcksArriveTogether) {
  const PacingParams pp = pacing_on();
  // 2896 bytes every 4 ms of the phone's clock: 724,000 bytes/s (5.79 Mbit/s).
  DownlinkPacer bunched, spread;
  AckStream a, b;
  a.feed(bunched, pp, 200, 2896, 4, kSecond);  // all 200 ACKs reach the gateway at once
  b.feed(spread, pp, 200, 2896, 4, kSecond, 4 * kMilli);
  EXPECT_GE(bunched.samples(), 10u);
  EXPECT_NEAR(bunched.rate(kSecond, pp), 724'000, 724'000 * 0.02);
  EXPECT_NEAR(spread.rate(kSecond + 800 * kMilli, pp), 724'000, 724'000 * 0.02);
}

TEST(DownlinkPacer, BurstLeavesAtGainTimesTheRate) {
  Receiving r;
  DownlinkPacer& p = r.p;
  const PacingParams& pp = r.pp;
  const Nanos now = 2 * kSecond;
  const double rate = p.rate(now, pp);
  ASSERT_GT(rate, 0);
  // 20 segments arrive together: burst_bytes of them (two) leave now, each next one
  // 1448 / (gain x rate) after the one before.
  std::vector<Nanos> at;
  for (int i = 0; i < 20; ++i) at.push_back(p.release_at(now, 1448, true, true, pp));
  ASSERT_EQ(pp.burst_bytes, 2920u);
  EXPECT_EQ(at[0], now);
  EXPECT_EQ(at[1], now);
  const double spacing = 1448 * 1e9 / (pp.gain * rate);
  const double banked = (2920.0 - 2 * 1448) * 1e9 / (pp.gain * rate);  // the credit left
  EXPECT_NEAR(static_cast<double>(at[2] - at[1]), spacing - banked, 1000);
  for (size_t i = 3; i < at.size(); ++i) {
    EXPECT_NEAR(static_cast<double>(at[i] - at[i - 1]), spacing, 1000) << i;
  }
  // A segment arriving after the backlog has left goes at once.
  const Nanos later = at.back() + kSecond / 10;
  EXPECT_EQ(p.release_at(later, 1448, true, true, pp), later);
}

// With no credit (burst_bytes 0) every segment of a burst waits for its spacing, the first
// one too if the previous burst's schedule reaches past now.
TEST(DownlinkPacer, WithoutCreditOnlyTheFirstLeavesAtOnce) {
  Receiving r;
  r.pp.burst_bytes = 0;
  const Nanos now = 2 * kSecond;
  const double spacing = 1448 * 1e9 / (r.pp.gain * r.p.rate(now, r.pp));
  EXPECT_EQ(r.p.release_at(now, 1448, true, true, r.pp), now);
  EXPECT_NEAR(static_cast<double>(r.p.release_at(now, 1448, true, true, r.pp) - now), spacing,
              1000);
}

// A download held to a window of two segments on a slow link (100 kbit/s: 116 ms a segment,
// 100 ms of path beside it), the phone acknowledging once per window (its delayed ACK): the
// server sends both segments when the ACK comes. Unpaced a round takes 332 ms. The pacer must
// not lengthen it: each window's ACK is all it hears, so the receive rate it measures is the
// window's own, and a hold on every window's second segment lowers that rate and the pacing
// rate with it, round after round (without burst_bytes: 411 ms a round, 81 % of the unpaced
// rate; in the lab the 2G download alone lost 29 points this way, EXPERIMENTS Q22).
TEST(DownlinkPacer, AWindowOfTwoSegmentsIsNotHeldBackRoundAfterRound) {
  auto run = [](bool paced) {
    PacingParams pp = pacing_on();
    DownlinkPacer p;
    constexpr Nanos kService = 1448 * 8 * kSecond / 100'000;  // 115.84 ms
    constexpr Nanos kPath = 100 * kMilli;                     // gateway -> phone -> gateway
    Nanos t = kSecond;  // the window's ACK reaches the gateway; the server answers at once
    uint32_t ack = 1000;
    Nanos first = 0;
    const int rounds = 100;
    for (int i = 0; i < rounds; ++i) {
      if (i == 50) first = t;
      Nanos link_free = 0, delivered = 0;
      for (int seg = 0; seg < 2; ++seg) {
        const Nanos leaves = paced ? p.release_at(t, 1448, true, true, pp) : t;
        const Nanos start = std::max(leaves + kPath / 2, link_free);
        link_free = start + kService;
        delivered = link_free;
      }
      ack += 2896;
      const auto tsval = static_cast<uint32_t>(delivered / kMilli);  // 1 ms phone tick
      t = delivered + kPath / 2;
      p.on_phone_ack(t, phone_ack(ack, tsval), kTick, pp);
    }
    return static_cast<double>(t - first) / (rounds - 50);  // ns per round
  };
  const double unpaced = run(false), paced = run(true);
  EXPECT_NEAR(unpaced, 331.68e6, 1e6);  // 100 ms + 2 x 115.84 ms
  EXPECT_LE(paced, unpaced * 1.02)
      << "paced " << paced / 1e6 << " ms a round, unpaced " << unpaced / 1e6;
}

TEST(DownlinkPacer, NeverHoldsLongerThanMaxHold) {
  DownlinkPacer p;
  PacingParams pp = pacing_on();
  pp.max_hold = 100 * kMilli;
  AckStream s;
  s.feed(p, pp, 100, 1448, 10, kSecond, 10 * kMilli);  // a slow phone: 144,800 bytes/s
  const Nanos now = 3 * kSecond;
  Nanos last = 0;
  for (int i = 0; i < 1000; ++i) {
    const Nanos at = p.release_at(now + i * kMicro, 1448, true, true, pp);
    EXPECT_LE(at - (now + i * kMicro), pp.max_hold);
    EXPECT_GE(at, last) << "released out of order at " << i;
    last = at;
  }
}

TEST(DownlinkPacer, FinKeepsItsPlaceAPureAckDoesNot) {
  Receiving r;
  DownlinkPacer& p = r.p;
  const PacingParams& pp = r.pp;
  const Nanos now = 2 * kSecond;
  Nanos last_data = 0;
  for (int i = 0; i < 10; ++i) last_data = p.release_at(now, 1448, true, true, pp);
  ASSERT_GT(last_data, now);
  // Not paced itself (a FIN, a RST, or data while the regulator is in startup), but ordered.
  EXPECT_GE(p.release_at(now, 0, false, true, pp), last_data);
  // A pure ACK of the flow's other direction may overtake the held data.
  EXPECT_EQ(p.release_at(now, 0, false, false, pp), now);
}

// A segment without payload uses no link time: after it, an idle pacer still lets its
// burst_bytes of data go at once (a pure ACK used to move the schedule to now and hold the
// next segment for its spacing).
TEST(DownlinkPacer, ASegmentWithoutPayloadLeavesTheCreditAlone) {
  for (const bool fin : {false, true}) {
    Receiving r;
    const Nanos now = 2 * kSecond;
    EXPECT_EQ(r.p.release_at(now, 0, false, fin, r.pp), now);
    EXPECT_EQ(r.p.release_at(now, 1448, true, true, r.pp), now) << fin;
    EXPECT_EQ(r.p.release_at(now, 1448, true, true, r.pp), now) << fin;
    EXPECT_GT(r.p.release_at(now, 1448, true, true, r.pp), now) << fin;
  }
  // Unpaced data does take the link: what follows waits for its spacing.
  Receiving r;
  const Nanos now = 2 * kSecond;
  r.p.release_at(now, 1448, false, true, r.pp);
  r.p.release_at(now, 1448, false, true, r.pp);
  EXPECT_GT(r.p.release_at(now, 1448, true, true, r.pp), now);
}

TEST(DownlinkPacer, DuplicateReorderedAndUntimedAcksAddNothing) {
  Receiving r;
  DownlinkPacer& p = r.p;
  const PacingParams& pp = r.pp;
  AckStream& s = r.s;
  const double before = p.rate(2 * kSecond, pp);
  const uint32_t n = p.samples();
  // Duplicates and an older ACK: nothing new was received.
  p.on_phone_ack(2 * kSecond, phone_ack(s.ack, s.ts + 100), kTick, pp);
  p.on_phone_ack(2 * kSecond, phone_ack(s.ack - 2896, s.ts + 200), kTick, pp);
  // No clock: an unknown tick, or no timestamp option.
  TcpSegment untimed = phone_ack(s.ack + 1'000'000, s.ts + 300);
  p.on_phone_ack(2 * kSecond, untimed, 0.0, pp);
  untimed.has_ts = false;
  p.on_phone_ack(2 * kSecond, untimed, kTick, pp);
  EXPECT_EQ(p.samples(), n);
  EXPECT_DOUBLE_EQ(p.rate(2 * kSecond, pp), before);
}

TEST(DownlinkPacer, TimestampWrapIsContinuous) {
  const PacingParams pp = pacing_on();
  DownlinkPacer p;
  AckStream s;
  s.ts = UINT32_MAX - 100;  // wraps after 25 ACKs
  s.feed(p, pp, 200, 2896, 4, kSecond, 4 * kMilli);
  EXPECT_GE(p.samples(), 10u);
  EXPECT_NEAR(p.rate(2 * kSecond, pp), 724'000, 724'000 * 0.02);
}

TEST(DownlinkPacer, RateFollowsALinkThatSlowsDownAfterTheHorizon) {
  const PacingParams pp = pacing_on();
  DownlinkPacer p;
  AckStream s;
  s.feed(p, pp, 250, 2896, 4, kSecond, 4 * kMilli);  // 724,000 bytes/s for 1 s
  Nanos t = kSecond + 250 * 4 * kMilli;
  s.feed(p, pp, 500, 2896, 16, t, 16 * kMilli);  // then a quarter of that for 8 s
  t += 500 * 16 * kMilli;
  EXPECT_NEAR(p.rate(t, pp), 181'000, 181'000 * 0.05);
}

}  // namespace
}  // namespace rsfc
