// Per-flow estimators on synthetic sequences: tick length, t_buff, delivered rate, echo and
// lag round trips, handshake halves, and the sliding-window extremum they are built on.
#include "rsfc/core/estimators.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace rsfc {
namespace {

constexpr Nanos ms(double x) {
  return static_cast<Nanos>(x * 1e6);
}

// --- WindowedExtremum ---------------------------------------------------------------------

TEST(WindowedMin, NewMinimumAtOnceOldOneAgesOutWithinHorizon) {
  WindowedMin<8> w;
  const Nanos h = 10 * kSecond;
  EXPECT_FALSE(w.get(0, h));
  w.update(0, 100, h);
  w.update(ms(500), 120, h);
  EXPECT_EQ(w.get(ms(500), h)->value, 100);
  w.update(ms(600), 90, h);  // a decrease counts at once
  EXPECT_EQ(w.get(ms(600), h)->value, 90);
  // Larger values for a while: the 90 is kept for the horizon ...
  for (Nanos t = ms(700); t < 10 * kSecond; t += ms(100)) w.update(t, 150, h);
  EXPECT_EQ(w.get(10 * kSecond, h)->value, 90);
  // ... and gone within horizon * (1 + 1/8).
  for (Nanos t = 10 * kSecond; t <= ms(11'400); t += ms(100)) w.update(t, 150, h);
  EXPECT_EQ(w.get(ms(11'400), h)->value, 150);
}

TEST(WindowedMin, EmptyAfterAnIdlePeriodLongerThanTheHorizon) {
  WindowedMin<4> w;
  w.update(0, 5, kSecond);
  EXPECT_TRUE(w.get(ms(900), kSecond));
  EXPECT_FALSE(w.get(3 * kSecond, kSecond));
  w.update(3 * kSecond, 7, kSecond);
  EXPECT_EQ(w.get(3 * kSecond, kSecond)->value, 7);
}

TEST(WindowedMin, RebaseAndResetKeepAux) {
  WindowedMinAux<4> w;
  w.update(0, 100, kSecond, /*aux=*/10);
  w.update(ms(300), 50, kSecond, /*aux=*/20);
  w.rebase([](int64_t v, int64_t aux) { return v - aux; });
  EXPECT_EQ(w.get(ms(300), kSecond)->value, 30);
  w.reset_to(ms(400), 77, 3);
  const auto s = w.get(ms(400), kSecond);
  EXPECT_EQ(s->value, 77);
  EXPECT_EQ(s->aux, 3);
}

TEST(WindowedMax, TracksTheMaximum) {
  WindowedMax<4> w;
  w.update(0, 10, kSecond);
  w.update(ms(100), 30, kSecond);
  w.update(ms(400), 20, kSecond);
  EXPECT_EQ(w.get(ms(400), kSecond)->value, 30);
  w.update(ms(1300), 5, kSecond);
  EXPECT_EQ(w.get(ms(1300), kSecond)->value, 20);
}

// --- TsUnwrapper --------------------------------------------------------------------------

TEST(TsUnwrapper, ContinuousAcrossTheWrapAndNotMovedByReordering) {
  TsUnwrapper u;
  const int64_t a = u.unwrap(0xffff'fff0u);
  EXPECT_EQ(u.unwrap(0xffff'fffau) - a, 10);
  EXPECT_EQ(u.unwrap(0x0000'0005u) - a, 0x15);  // wrapped
  EXPECT_EQ(u.unwrap(0xffff'fffeu) - a, 14);    // a late segment from before the wrap
  EXPECT_EQ(u.unwrap(0x0000'0006u) - a, 0x16);  // the base did not move back
}

// --- Synthetic phone --------------------------------------------------------------------

// A phone sending a segment every `spacing`: its TS clock ticks every `tick` ns from an
// arbitrary offset (mid-tick start); each segment waits q(t) in the uplink buffer and the
// one-way delay `prop`. The gateway sees (arrival, TSval). Echo pairs: the gateway forwarded
// the TSval the phone echoes `down(t)` before the phone sent the segment.
struct Phone {
  Nanos tick = kMilli;
  Nanos offset = 0;      // phone clock = t + offset
  uint32_t ts_base = 0;  // TSval at phone clock 0 (per-connection random offset)
  Nanos prop = ms(15);
  std::function<Nanos(Nanos)> q = [](Nanos) { return Nanos{0}; };
  std::function<Nanos(Nanos)> down = [](Nanos) { return ms(15); };

  uint32_t tsval(Nanos send) const {
    return ts_base + static_cast<uint32_t>(static_cast<uint64_t>(send + offset) / tick);
  }
  Nanos arrival(Nanos send) const { return send + prop + q(send); }
};

// Feeds a TickEstimator from `phone` between [0, end) and returns it.
TickEstimator run_tick(const Phone& phone, Nanos end, Nanos spacing, bool echoes) {
  TickEstimator est;
  TsUnwrapper unwrap;
  for (Nanos t = 0; t < end; t += spacing) {
    const int64_t ticks = unwrap.unwrap(phone.tsval(t));
    est.on_sample(phone.arrival(t), ticks);
    if (echoes) est.on_echo(t - phone.down(t), ticks);
  }
  return est;
}

struct TickCase {
  const char* name;
  Nanos tick;
  uint32_t ts_base;
  Nanos offset;
  std::function<Nanos(Nanos)> q;  // uplink queue over time
  bool echoes;
  bool expect_snap;
};

Nanos jitter(Nanos t) {  // 0..30 ms, deterministic pseudo-random
  return static_cast<Nanos>((static_cast<uint64_t>(t / kMilli) * 2654435761u) % 30) * kMilli;
}
Nanos growing(Nanos t) {
  return t / 4;
}  // an unregulated sender filling its buffer

class TickTable : public ::testing::TestWithParam<TickCase> {};

TEST_P(TickTable, EstimatesTheTickFromOneSecondOn) {
  const TickCase& c = GetParam();
  Phone ph;
  ph.tick = c.tick;
  ph.ts_base = c.ts_base;
  ph.offset = c.offset;
  if (c.q) ph.q = c.q;
  // No estimate before a 1 s span (a provisional hint at most).
  EXPECT_NE(run_tick(ph, ms(900), ms(5), c.echoes).quality(), TickEstimator::Quality::kEstimated);
  const TickEstimator est = run_tick(ph, 6 * kSecond, ms(5), c.echoes);
  ASSERT_TRUE(est.known());
  EXPECT_EQ(est.quality(), TickEstimator::Quality::kEstimated);
  EXPECT_EQ(est.snapped(), c.expect_snap);
  if (c.expect_snap) {
    EXPECT_EQ(est.ns_per_tick(), static_cast<double>(c.tick));
  } else {
    EXPECT_NEAR(est.ns_per_tick(), static_cast<double>(c.tick),
                0.005 * static_cast<double>(c.tick));
  }
}

const Nanos kHz300 = 3'333'333;  // HZ=300 jiffies

INSTANTIATE_TEST_SUITE_P(
    Ticks, TickTable,
    ::testing::Values(
        TickCase{"linux_1ms_clean", kMilli, 12345, 0, nullptr, true, true},
        TickCase{"hz250_4ms_jitter_midtick", 4 * kMilli, 777, ms(2.5), jitter, true, true},
        TickCase{"hz100_10ms_wraps", 10 * kMilli, 0xffff'ff00u, ms(7), jitter, true, true},
        TickCase{"hz1000_wrap_no_echoes", kMilli, 0xffff'fe00u, ms(0.3), jitter, false, true},
        TickCase{"hz300_odd", kHz300, 5, ms(1), jitter, true, false},
        TickCase{"odd_3_3ms", 3'300'000, 99, 0, nullptr, true, false},
        TickCase{"usec_ts_option", kMicro, 0xfff0'0000u, 123, jitter, true, false},
        // The uplink queue grows (nobody regulates yet): the arrival side is inflated, the
        // echo side is not. 1 ms must still snap, 3.333 ms must not become 4 ms.
        TickCase{"1ms_growing_queue", kMilli, 42, ms(0.5), growing, true, true},
        TickCase{"hz300_growing_queue", kHz300, 42, ms(0.5), growing, true, false}),
    [](const auto& p) { return std::string(p.param.name); });

// A phone whose downlink queue grows by 0.6 s a second from 15 ms until it holds `cap`
// (a download filling the buffer nobody regulates), with its clock's phase.
Phone downlink_filling(Nanos cap, uint32_t ts_base, Nanos offset) {
  Phone ph;
  ph.ts_base = ts_base;
  ph.offset = offset;
  ph.down = [cap](Nanos t) { return ms(15) + std::min<Nanos>(t * 6 / 10, cap); };
  return ph;
}

// The mirror of the growing uplink queue: a download fills the phone's downlink buffer (no
// one regulates it before the tick is known) and no handshake hint came (its span crossed a
// scheduling gap of the link). The echo side reads low by the downlink queue over the span,
// the arrival side is clean but for the link's jitter: the one clock in that wide bracket is
// the tick, and an estimator waiting for the bracket to narrow would leave the download
// unregulated for tens of seconds (the lab's UMTS and EV-DO traces, before this case).
TEST(TickEstimator, ADownlinkQueueGrowingOnTheEchoSideStillSnaps) {
  // 2.4 s of queue within the first 4 s (512 KB at 1.7 Mbit/s), then standing.
  Phone ph = downlink_filling(ms(2400), 31337, ms(0.4));
  ph.q = jitter;
  // 1 ms (every current phone): [L, U] holds no other clock, whatever L reads.
  const TickEstimator est = run_tick(ph, 6 * kSecond, ms(5), true);
  ASSERT_TRUE(est.known());
  EXPECT_EQ(est.quality(), TickEstimator::Quality::kEstimated);
  EXPECT_EQ(est.ns_per_tick(), 1e6);
  // 4 and 10 ms: the bracket also holds 3.333 or 4 ms; the estimator may wait, never guess.
  for (Nanos tick : {4 * kMilli, 10 * kMilli}) {
    SCOPED_TRACE(tick);
    ph.tick = tick;
    const TickEstimator e = run_tick(ph, 6 * kSecond, ms(5), true);
    if (e.known()) {
      EXPECT_NEAR(e.ns_per_tick(), static_cast<double>(tick), 0.005 * static_cast<double>(tick));
    }
  }
}

// The echo side gets its anchor and then no more samples: an echo needs the forwarding time
// of the data it answers, and a download whose first window filled a 2G buffer (its ACKs
// behind an upload) outran the times kept (lab, EXPERIMENTS Q24). The arrival side is clean.
// It waits for the echo side's value for kSideWait, then decides alone; before, it waited for
// good and the download was never regulated.
TEST(TickEstimator, AnEchoSideThatStopsDoesNotHoldTheArrivalSideForever) {
  const auto run = [](Nanos tick, Nanos end) {
    Phone ph;
    ph.tick = tick;
    ph.ts_base = 777;
    ph.offset = ms(0.4);
    ph.q = jitter;
    TickEstimator est;
    TsUnwrapper unwrap;
    for (Nanos t = 0; t < end; t += ms(5)) {
      const int64_t ticks = unwrap.unwrap(ph.tsval(t));
      est.on_sample(ph.arrival(t), ticks);
      if (t == 0) est.on_echo(t - ph.down(t), ticks);  // then no echo finds its time
    }
    return est;
  };
  for (Nanos tick : {kMilli, 4 * kMilli, 10 * kMilli}) {
    SCOPED_TRACE(tick);
    EXPECT_FALSE(run(tick, ms(2500)).known()) << "the echo side gets its chance first";
    const TickEstimator est = run(tick, 8 * kSecond);
    ASSERT_TRUE(est.known());
    EXPECT_EQ(est.quality(), TickEstimator::Quality::kEstimated);
    EXPECT_EQ(est.ns_per_tick(), static_cast<double>(tick));
  }
}

// A flow first seen mid-stream (adopted after a restart) has no handshake: its first tick
// hint comes from the echoes, one span of 40 ms. Next to a download that fills the phone's
// downlink buffer (nobody regulated it while the daemon was away) the phone's side of that span
// is stretched, and the try matches no clock; the slopes then need seconds (a 3G upload
// adopted next to a download stayed unregulated for 4 s in the simulator and its queue grew to
// 2 s). The next spans try again, and a match is taken once two spans in a row agree on it:
// here the queue stops growing at 0.5 s and the hint is 1 ms well before the slopes' 1 s.
TEST(TickEstimator, EchoHintIsRetriedAfterASpanStretchedByADownlinkQueue) {
  Phone ph = downlink_filling(ms(300), 2024, ms(0.6));
  const TickEstimator est = run_tick(ph, ms(750), ms(5), true);
  ASSERT_TRUE(est.known());
  EXPECT_EQ(est.quality(), TickEstimator::Quality::kHint);
  EXPECT_EQ(est.ns_per_tick(), 1e6);
  // Not a guess on an HZ=300 phone: its 3.333 ms fits no clock's tolerance at 40 ms.
  ph.tick = 3'333'333;
  EXPECT_FALSE(run_tick(ph, ms(750), ms(5), true).known());
}

// The flow's first segments cross an outage of the link (a traced EV-DO or UMTS link stalls
// for seconds): the SYN that anchors the arrival side arrives late, which lowers every slope
// taken from it, so U read below the tick for tens of seconds (1 s late: U = 0.966 ms at 30
// s, no candidate in the bracket, the tick never known in the lab's 30 s). The same on the
// echo side, whose first echo comes back late. Later anchors did not wait.
TEST(TickEstimator, AnOutageUnderTheFirstSegmentsDelaysTheTickBySecondsAtMost) {
  for (Nanos tick : {kMilli, 4 * kMilli, 10 * kMilli}) {
    for (Nanos outage : {ms(300), ms(1000), ms(2000)}) {
      SCOPED_TRACE(::testing::Message() << tick << " " << outage);
      Phone ph;
      ph.tick = tick;
      ph.ts_base = 4242;
      ph.offset = ms(0.3);
      // Sent during the outage: waits until it ends, then the backlog drains at 10x.
      const auto stall = [outage](Nanos t) { return t < outage ? outage + t / 10 - t : jitter(t); };
      ph.q = stall;
      ph.down = [stall](Nanos t) { return ms(15) + stall(t); };
      const TickEstimator est = run_tick(ph, 6 * kSecond, ms(5), true);
      ASSERT_TRUE(est.known());
      EXPECT_EQ(est.quality(), TickEstimator::Quality::kEstimated);
      EXPECT_EQ(est.ns_per_tick(), static_cast<double>(tick));
    }
  }
}

TEST(TickEstimator, HandshakeGivesAProvisionalSnapOnlyWhenUnambiguous) {
  struct Case {
    Nanos tick, span;
    std::optional<Nanos> expect;
  };
  for (const Case& c : {Case{kMilli, ms(40), kMilli}, Case{10 * kMilli, ms(60), 10 * kMilli},
                        Case{4 * kMilli, ms(40), 4 * kMilli},
                        Case{kHz300, ms(40), std::nullopt},    // 3.33 is no candidate
                        Case{kMilli, ms(2), std::nullopt}}) {  // span too short
    SCOPED_TRACE(c.tick);
    TickEstimator e;
    const int64_t t0 = 1000;
    const Nanos a0 = ms(100) + c.tick / 3;  // mid-tick
    const int64_t t1 = t0 + (a0 + c.span) / c.tick - a0 / c.tick;
    e.on_handshake(a0, t0, a0 + c.span, t1);
    if (c.expect) {
      EXPECT_EQ(e.quality(), TickEstimator::Quality::kHint);
      EXPECT_EQ(e.ns_per_tick(), static_cast<double>(*c.expect));
    } else {
      EXPECT_FALSE(e.known());
    }
  }
}

TEST(TickEstimator, LongSpanEstimateReplacesAWrongProvisionalOne) {
  TickEstimator e;
  e.on_handshake(0, 0, ms(40), 10);  // looks like 4 ms
  ASSERT_EQ(e.ns_per_tick(), 4e6);
  const uint32_t v = e.version();
  Phone ph;
  ph.tick = kHz300;
  TsUnwrapper u;
  for (Nanos t = 0; t < 6 * kSecond; t += ms(5)) {
    const int64_t ticks = u.unwrap(ph.tsval(t));
    e.on_sample(ph.arrival(t), ticks);
    e.on_echo(t - ms(15), ticks);
  }
  EXPECT_EQ(e.quality(), TickEstimator::Quality::kEstimated);
  EXPECT_NEAR(e.ns_per_tick(), static_cast<double>(kHz300), 0.005 * static_cast<double>(kHz300));
  EXPECT_NE(e.version(), v);
}

TEST(TickEstimator, FlowsAreIndependent) {
  // Two flows of one phone, interleaved, with different TS offsets (and, to make the point,
  // different clocks): each estimator only ever sees its own flow's TSvals.
  Phone a, b;
  a.tick = kMilli;
  a.ts_base = 0x7000'0000u;
  b.tick = 10 * kMilli;
  b.ts_base = 0x0000'1000u;
  TickEstimator ea, eb;
  TsUnwrapper ua, ub;
  for (Nanos t = 0; t < 3 * kSecond; t += ms(5)) {
    ea.on_sample(a.arrival(t), ua.unwrap(a.tsval(t)));
    eb.on_sample(b.arrival(t + ms(2)), ub.unwrap(b.tsval(t + ms(2))));
  }
  EXPECT_EQ(ea.ns_per_tick(), 1e6);
  EXPECT_EQ(eb.ns_per_tick(), 1e7);
}

// --- UplinkDelayEstimator -----------------------------------------------------------------

struct DelayRun {
  std::vector<std::pair<Nanos, Nanos>> raw;  // (send time, raw t_buff)
  UplinkDelayEstimator est;
};

// Feeds the delay estimator from `phone` over [from, to), with echoes.
void feed(DelayRun& r, const Phone& phone, Nanos from, Nanos to, Nanos spacing,
          Nanos horizon = 10 * kSecond, Nanos filter = ms(200)) {
  for (Nanos t = from; t < to; t += spacing) {
    const auto tb =
        r.est.on_segment(phone.arrival(t), phone.tsval(t), horizon, filter, t - phone.down(t));
    if (tb) r.raw.emplace_back(t, *tb);
  }
}

TEST(UplinkDelayEstimator, FollowsTheQueueWithinOneTick) {
  for (Nanos tick : {kMilli, 4 * kMilli, 10 * kMilli}) {
    SCOPED_TRACE(tick);
    Phone ph;
    ph.tick = tick;
    ph.ts_base = 0xffff'f000u;  // wraps during the run
    ph.offset = ms(0.7);
    // Empty for 2 s, then a ramp to 300 ms over 1 s, then standing.
    ph.q = [](Nanos t) {
      if (t < 2 * kSecond) return Nanos{0};
      if (t < 3 * kSecond) return (t - 2 * kSecond) * 3 / 10;
      return ms(300);
    };
    DelayRun r;
    feed(r, ph, 0, 8 * kSecond, ms(5));
    ASSERT_FALSE(r.raw.empty());
    for (auto [t, tb] : r.raw) {
      if (t < ms(1500)) continue;  // g settles
      const Nanos truth = ph.q(t);
      EXPECT_NEAR(static_cast<double>(tb), static_cast<double>(truth),
                  static_cast<double>(tick) + 1e5)
          << "t=" << t;
    }
    // The filtered value is the standing queue.
    EXPECT_NEAR(static_cast<double>(*r.est.filtered(ph.arrival(8 * kSecond - ms(5)), ms(200))), 3e8,
                static_cast<double>(tick) + 1e5);
  }
}

TEST(UplinkDelayEstimator, AnOutageIsNotAStandingQueue) {
  // The link stalls for 400 ms at t = 3 s; what was sent meanwhile arrives in one burst
  // (draining at 10x the sending rate). Versus a standing 400 ms queue.
  Phone outage;
  outage.q = [](Nanos t) {
    if (t < 3 * kSecond || t >= ms(3400)) return Nanos{0};
    return ms(3400) + (t - 3 * kSecond) / 10 - t;
  };
  DelayRun a;
  feed(a, outage, 0, ms(3005), ms(5));  // up to the first packet of the burst
  EXPECT_NEAR(static_cast<double>(*a.est.last_raw()), 4e8, 1.1e6);
  feed(a, outage, ms(3005), ms(3400), ms(5));
  EXPECT_LT(*a.est.filtered(outage.arrival(ms(3395)), ms(200)), ms(50));  // the burst drained

  Phone standing;
  standing.q = [](Nanos t) { return t < 3 * kSecond ? Nanos{0} : ms(400); };
  DelayRun b;
  feed(b, standing, 0, ms(3400), ms(5));
  EXPECT_NEAR(static_cast<double>(*b.est.filtered(standing.arrival(ms(3395)), ms(200))), 4e8,
              1.1e6);
}

TEST(UplinkDelayEstimator, DelayDecreaseIsANewMinimumAtOnceIncreaseAgesOut) {
  Phone ph;
  ph.prop = ms(40);
  DelayRun r;
  feed(r, ph, 0, 3 * kSecond, ms(5));
  // Route change: 25 ms shorter. t_buff never goes negative and reads 0 at once.
  ph.prop = ms(15);
  feed(r, ph, 3 * kSecond, 4 * kSecond, ms(5));
  for (auto [t, tb] : r.raw) {
    if (t >= 3 * kSecond) {
      EXPECT_LE(tb, ms(1.1));
    }
  }
  // Route change: 60 ms longer. Reads as 60 ms until the old minimum ages out (horizon
  // 10 s, buckets of 1.25 s), then 0 again.
  r.raw.clear();
  ph.prop = ms(75);
  feed(r, ph, 4 * kSecond, 20 * kSecond, ms(5));
  for (auto [t, tb] : r.raw) {
    if (t > ms(4100) && t < 13 * kSecond) {
      EXPECT_NEAR(static_cast<double>(tb), 6e7, 1.1e6) << t;
    }
    if (t > ms(15'500)) {
      EXPECT_LE(tb, ms(1.1)) << t;
    }
  }
}

// min_rises() tells the controller that a confirmation may be against a risen minimum (a
// standing queue taken for the empty buffer): it counts a minimum that aged out to a higher
// value, not the sub-tick jitter of a steady one.
TEST(UplinkDelayEstimator, CountsRisesOfTheMinimumNotJitter) {
  Phone ph;
  ph.prop = ms(40);
  // Sub-millisecond queueing jitter: the stored minima differ by fractions of a tick.
  ph.q = [](Nanos t) { return Nanos{(t / ms(5) * 7919) % 900'000}; };
  DelayRun r;
  feed(r, ph, 0, 3 * kSecond, ms(5));
  const uint32_t settled = r.est.min_rises();
  feed(r, ph, 3 * kSecond, 25 * kSecond, ms(5));  // steady: minima age out, none rises
  EXPECT_EQ(r.est.min_rises(), settled);
  ph.prop = ms(75);  // a standing 35 ms more, longer than the 10 s horizon
  ph.q = [](Nanos) { return Nanos{0}; };
  feed(r, ph, 25 * kSecond, 40 * kSecond, ms(5));
  EXPECT_GT(r.est.min_rises(), settled);
}

// min_drops() tells the controller that its minimum had a queue in it (a flow that started
// behind its siblings' queue): a sample below it by more than the tolerance. Jitter within a
// tick does not count.
TEST(UplinkDelayEstimator, CountsDropsOfTheMinimumNotJitter) {
  Phone ph;
  ph.q = [](Nanos t) {
    const Nanos jitter = (t / ms(5) * 7919) % 900'000;
    return t < 4 * kSecond ? ms(150) + jitter : jitter;  // the queue empties at 4 s
  };
  DelayRun r;
  feed(r, ph, 0, ms(3900), ms(5));
  const uint32_t before = r.est.min_drops();
  feed(r, ph, ms(3900), 6 * kSecond, ms(5));
  EXPECT_EQ(r.est.min_drops(), before + 1);
  EXPECT_LE(*r.est.last_raw(), ms(1.1));
}

TEST(UplinkDelayEstimator, ClockDriftAgesOut) {
  // The phone's clock runs 100 ppm slow: d creeps up by 0.1 ms per second. With a 10 s
  // window the error stays about 1 ms instead of growing without bound.
  Phone ph;
  ph.tick = 1'000'100;  // not within 2 % of anything but 1 ms: snaps to 1 ms
  DelayRun r;
  feed(r, ph, 0, 60 * kSecond, ms(10));
  ASSERT_EQ(r.est.tick().ns_per_tick(), 1e6);
  Nanos worst = 0;
  for (auto [t, tb] : r.raw) {
    if (t > 5 * kSecond) {
      worst = std::max(worst, tb);
    }
  }
  EXPECT_LT(worst, ms(3));
}

TEST(UplinkDelayEstimator, IdleLongerThanTheHorizonRestartsTheWindows) {
  Phone ph;
  DelayRun r;
  feed(r, ph, 0, 3 * kSecond, ms(5));
  ASSERT_TRUE(r.est.ready());
  // A minute of silence; the phone's TS clock kept running here, but the buffer holds other
  // traffic (200 ms) when the flow resumes, then drains.
  ph.q = [](Nanos t) { return t < 64 * kSecond ? ms(200) : Nanos{0}; };
  r.raw.clear();
  feed(r, ph, 63 * kSecond, 66 * kSecond, ms(5));
  ASSERT_FALSE(r.raw.empty());
  EXPECT_EQ(r.raw.front().second, 0);  // a fresh start, not 200 ms against the old minimum
  // ... and once the buffer drains, the lower delay is the minimum at once.
  EXPECT_LE(r.raw.back().second, ms(1.1));
  EXPECT_TRUE(r.est.tick().known());  // the tick is kept
}

TEST(UplinkDelayEstimator, WrongTickWouldShowAsDrift) {
  // What the tick estimate protects against: the same phone read with g = 1 ms when it
  // really ticks every 10 ms makes t_buff run away within a second.
  Phone ph;
  ph.tick = 10 * kMilli;
  UplinkDelayEstimator good;
  for (Nanos t = 0; t < 5 * kSecond; t += ms(5)) {
    good.on_segment(ph.arrival(t), ph.tsval(t), 10 * kSecond, ms(200), t - ms(15));
  }
  EXPECT_EQ(good.tick().ns_per_tick(), 1e7);
  EXPECT_LE(*good.last_raw(), ms(10.1));
}

TEST(UplinkDelayEstimator, RaiseBaseline) {
  Phone ph;
  ph.q = [](Nanos t) { return t < 2 * kSecond ? Nanos{0} : ms(100); };
  DelayRun r;
  feed(r, ph, 0, 3 * kSecond, ms(5));
  ASSERT_NEAR(static_cast<double>(r.raw.back().second), 1e8, 1.1e6);
  r.est.raise_baseline(ph.arrival(3 * kSecond), ms(100));
  r.raw.clear();
  feed(r, ph, 3 * kSecond, 4 * kSecond, ms(5));
  EXPECT_LE(r.raw.back().second, ms(1.1));
}

// --- DeliveredRate --------------------------------------------------------------------------

TEST(DeliveredRate, CountsNewBytesOnly) {
  DeliveredRate r;
  r.start(0xffff'ff00u);  // wraps
  uint32_t seq = 0xffff'ff00u;
  Nanos t = 0;
  // 1448 bytes every 5 ms = 289.6 kB/s, plus a retransmission of every 10th segment.
  for (int i = 0; i < 400; ++i, t += ms(5)) {
    EXPECT_EQ(r.on_data(t, seq, 1448, ms(100)), 1448u);
    if (i % 10 == 9) {
      EXPECT_EQ(r.on_data(t, seq - 1448, 1448, ms(100)), 0u);
    }
    seq += 1448;
  }
  EXPECT_NEAR(r.last(), 289'600, 3000);
  EXPECT_EQ(r.total_bytes(), 400u * 1448);
  // A segment straddling the highest end counts its new part.
  EXPECT_EQ(r.on_data(t, seq - 448, 1448, ms(100)), 1000u);
}

TEST(DeliveredRate, MaxSurvivesAnOutage) {
  DeliveredRate r;
  r.start(0);
  uint32_t seq = 0;
  Nanos t = 0;
  for (; t < 2 * kSecond; t += ms(5), seq += 1448) r.on_data(t, seq, 1448, ms(50));
  const double before = r.last();
  t += ms(1500);  // outage: nothing arrives
  for (int i = 0; i < 5; ++i, t += ms(5), seq += 1448) r.on_data(t, seq, 1448, ms(50));
  EXPECT_NEAR(r.max(t, ms(50)), before, before * 0.02);
}

// --- EchoSampler ------------------------------------------------------------------------------

TEST(EchoSampler, FirstEchoOfATSvalOnly) {
  EchoSampler e;
  e.on_forward(ms(0), 100, ms(1));
  e.on_forward(ms(0.5), 100, ms(1));  // same TSval: not new
  e.on_forward(ms(2), 101, ms(1));
  EXPECT_EQ(*e.on_echo(ms(30), 100), ms(30));
  EXPECT_FALSE(e.on_echo(ms(31), 100));  // only the first echo counts
  EXPECT_EQ(*e.on_echo(ms(33), 101), ms(31));
}

TEST(EchoSampler, SpacingSupersededAndAge) {
  EchoSampler e;
  e.on_forward(0, 10, ms(5));
  e.on_forward(ms(1), 11, ms(5));  // within the spacing: not recorded
  e.on_forward(ms(6), 12, ms(5));
  EXPECT_FALSE(e.on_echo(ms(20), 11));
  // Echo of 12 supersedes 10 (never to be echoed now).
  EXPECT_EQ(*e.on_echo(ms(21), 12), ms(15));
  EXPECT_FALSE(e.on_echo(ms(22), 10));
  // Slots are bounded; old pending ones are reused after kMaxAge.
  for (uint32_t i = 0; i < EchoSampler::kSlots; ++i) e.on_forward(ms(100 + 10 * i), 20 + i, 0);
  e.on_forward(ms(200), 40, 0);  // no free slot
  EXPECT_FALSE(e.on_echo(ms(210), 40));
  e.on_forward(ms(100) + EchoSampler::kMaxAge + 1, 41, 0);
  EXPECT_TRUE(e.on_echo(ms(100) + EchoSampler::kMaxAge + ms(5), 41));
}

TEST(EchoSampler, TsvalWrap) {
  EchoSampler e;
  e.on_forward(0, 0xffff'fffeu, 0);
  e.on_forward(ms(1), 0x0000'0001u, 0);  // newer despite the wrap
  EXPECT_EQ(*e.on_echo(ms(40), 0x0000'0001u), ms(39));
}

// --- WindowOpeningLag ---------------------------------------------------------------------

TEST(WindowOpeningLag, WindowLimitedPhoneGivesTheRoundTripThroughIt) {
  WindowOpeningLag lag;
  const Nanos rt = ms(70);  // gateway -> phone -> gateway, queue included
  uint32_t edge = 100'000;
  lag.on_edge_forwarded(0, edge, ms(1));
  std::vector<Nanos> samples;
  // Every 10 ms an ACK opens the window by 2 segments; the phone sends them on receipt.
  for (Nanos t = ms(10); t < kSecond; t += ms(10)) {
    edge += 2896;
    lag.on_edge_forwarded(t, edge, ms(1));
    const auto s = lag.on_data(t + rt, edge - 1448);  // ends beyond the previous edge
    if (s) samples.push_back(*s);
    lag.on_data(t + rt + ms(1), edge);
  }
  ASSERT_GT(samples.size(), 50u);
  for (Nanos s : samples) EXPECT_EQ(s, rt);
}

TEST(WindowOpeningLag, DataInsideTheOldWindowSaysNothing) {
  WindowOpeningLag lag;
  lag.on_edge_forwarded(0, 10'000, 0);
  lag.on_edge_forwarded(ms(5), 20'000, 0);
  EXPECT_FALSE(lag.on_data(ms(50), 9'000));  // within the edge it had before
  EXPECT_EQ(*lag.on_data(ms(60), 11'000), ms(55));
}

// --- AckProbe -----------------------------------------------------------------------------------

TEST(AckProbe, OneSamplePerRoundTripKarnCancels) {
  AckProbe p;
  p.on_data(0, 1000, 1448);
  p.on_data(ms(1), 2448, 1448);
  EXPECT_FALSE(p.on_ack(ms(10), 2000));
  EXPECT_EQ(*p.on_ack(ms(20), 2448), ms(20));
  p.on_data(ms(21), 3896, 1448);
  p.on_data(ms(22), 3896, 1448);  // retransmitted: the sample would be ambiguous
  EXPECT_FALSE(p.on_ack(ms(40), 5344));
}

// --- HandshakeTimer ---------------------------------------------------------------------------

TcpSegment seg(uint8_t flags, uint32_t seq, uint32_t ack, bool ts = true, uint32_t tsval = 0) {
  TcpSegment s;
  s.flags = flags;
  s.seq = seq;
  s.ack = ack;
  s.has_ts = ts;
  s.tsval = tsval;
  return s;
}

TEST(HandshakeTimer, PhoneOpens) {
  HandshakeTimer h;
  h.on_segment(ms(0), true, seg(tcpflag::kSyn, 100, 0, true, 5000));
  h.on_segment(ms(30), false, seg(tcpflag::kSyn | tcpflag::kAck, 900, 101));
  h.on_segment(ms(75), true, seg(tcpflag::kAck, 101, 901, true, 5045));
  ASSERT_TRUE(h.complete());
  EXPECT_EQ(*h.server_half(), ms(30));
  EXPECT_EQ(*h.phone_half(), ms(45));
  EXPECT_TRUE(h.syn_timestamps());
  const auto pair = h.ts_pair();
  ASSERT_TRUE(pair);
  EXPECT_EQ(pair->ts_ack - pair->ts_syn, 45u);
  EXPECT_EQ(pair->a_ack - pair->a_syn, ms(75));
}

TEST(HandshakeTimer, ServerOpens) {
  HandshakeTimer h;
  h.on_segment(ms(0), false, seg(tcpflag::kSyn, 100, 0));
  h.on_segment(ms(50), true, seg(tcpflag::kSyn | tcpflag::kAck, 900, 101));
  h.on_segment(ms(70), false, seg(tcpflag::kAck, 101, 901));
  EXPECT_EQ(*h.phone_half(), ms(50));
  EXPECT_EQ(*h.server_half(), ms(20));
  EXPECT_FALSE(h.ts_pair());
}

TEST(HandshakeTimer, RetransmittedSynIsNotTimed) {
  HandshakeTimer h;
  h.on_segment(ms(0), true, seg(tcpflag::kSyn, 100, 0, false));
  h.on_segment(ms(1000), true, seg(tcpflag::kSyn, 100, 0, false));
  h.on_segment(ms(1030), false, seg(tcpflag::kSyn | tcpflag::kAck, 900, 101, false));
  h.on_segment(ms(1080), true, seg(tcpflag::kAck, 101, 901, false));
  EXPECT_FALSE(h.server_half());
  EXPECT_EQ(*h.phone_half(), ms(50));
  EXPECT_FALSE(h.syn_timestamps());
}

// A sibling flow's tick (the phone's other flow measured it) is a hint for a flow with no
// value yet: known at once, snapped, replaced by the flow's own estimate as usual; a flow
// that has its own value keeps it, and a value no phone clock uses is ignored.
TEST(TickEstimator, ASiblingsTickIsAHintUntilTheFlowsOwnEstimate) {
  TickEstimator t;
  t.on_sibling(3 * kMilli);  // not a clock of kCandidates
  EXPECT_FALSE(t.known());
  t.on_sibling(4 * kMilli);
  ASSERT_TRUE(t.known());
  EXPECT_EQ(t.quality(), TickEstimator::Quality::kHint);
  EXPECT_DOUBLE_EQ(t.ns_per_tick(), 4e6);
  t.on_sibling(1 * kMilli);  // it has a value now: a later sibling's does not replace it
  EXPECT_DOUBLE_EQ(t.ns_per_tick(), 4e6);
  // Its own clock is 1 ms (another host behind the same address): the estimate replaces
  // the hint once both sides have their span.
  for (Nanos a = 0; a <= 5 * kSecond; a += 10 * kMilli) {
    t.on_sample(a + 20 * kMilli, a / kMilli);
    t.on_echo(a - 20 * kMilli, a / kMilli);
  }
  EXPECT_EQ(t.quality(), TickEstimator::Quality::kEstimated);
  EXPECT_DOUBLE_EQ(t.ns_per_tick(), 1e6);
  // A flow whose handshake gave its tick ignores the sibling's.
  TickEstimator own;
  own.on_handshake(0, 1000, 200 * kMilli, 1200);
  ASSERT_TRUE(own.known());
  own.on_sibling(10 * kMilli);
  EXPECT_DOUBLE_EQ(own.ns_per_tick(), 1e6);
}

}  // namespace
}  // namespace rsfc
