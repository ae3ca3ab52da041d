// DownlinkQueueEstimator against a scripted downlink: the gateway forwards a server's
// segments into a drop-free FIFO bottleneck towards the phone; the phone acknowledges them
// (every k-th segment at once, a lone remainder after the delayed-ACK timer) and stamps each
// ACK with its TS clock; the ACKs reach the gateway after an uplink wait the test chooses.
// The estimate is compared with the true queueing delay of the segment each ACK answers.
#include "rsfc/core/downlink_delay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <vector>

namespace rsfc {
namespace {

constexpr uint32_t kMss = 1448;
constexpr Nanos kHorizon = 10 * kSecond;
constexpr Nanos kFilter = 200 * kMilli;
constexpr Nanos kSpacing = 5 * kMilli;

struct Downlink {
  double rate_bps = 7.2e6;   // bottleneck
  Nanos prop = 20 * kMilli;  // one-way propagation, gateway -> phone
  Nanos tick = 1 * kMilli;   // phone's TS tick g
  int64_t ts_offset_ticks = 12345;
  uint32_t isn = 1000;
  int ack_every = 2;           // phone ACKs every k-th segment at once
  Nanos delack = 40 * kMilli;  // a lone remainder is ACKed after this
  std::function<Nanos(Nanos)> uplink_wait = [](Nanos) { return Nanos{0}; };
  Nanos up_prop = 20 * kMilli;
  bool swap_ack_pairs = false;  // reorder: some pairs of ACKs arrive swapped

  Nanos tx() const { return static_cast<Nanos>(kMss * 8.0 / rate_bps * 1e9); }
};

struct Event {
  Nanos at;
  bool is_ack;
  uint32_t seq, end;    // data
  uint32_t ack, tsval;  // ACK
  Nanos sent;           // ACK: when the phone sent it (phone time = gateway time here)
};

struct Rx {
  Nanos arrival;  // at the phone
  Nanos queue;    // time it waited in the bottleneck queue
};

struct Trace {
  std::vector<Event> events;
  std::map<uint32_t, Rx> rx;  // by end sequence
};

// Forwarding times of the segments (the server's sending pattern at the gateway).
Trace simulate(const Downlink& L, const std::vector<Nanos>& forward) {
  Trace tr;
  Nanos link_free = 0;
  std::vector<std::pair<uint32_t, Nanos>> arrivals;
  for (size_t i = 0; i < forward.size(); ++i) {
    const uint32_t seq = L.isn + static_cast<uint32_t>(i) * kMss;
    tr.events.push_back({forward[i], false, seq, seq + kMss, 0, 0, 0});
    const Nanos start = std::max(forward[i] + L.prop, link_free);
    link_free = start + L.tx();
    tr.rx[seq + kMss] = {link_free, start - (forward[i] + L.prop)};
    arrivals.emplace_back(seq + kMss, link_free);
  }
  // The phone: an ACK at once for every k-th unacknowledged segment, otherwise when the
  // delayed-ACK timer (started by the first unacknowledged one) fires.
  std::vector<Event> acks;
  auto emit = [&](Nanos send, uint32_t ack) {
    const int64_t ticks = send / L.tick + L.ts_offset_ticks;
    acks.push_back({send + L.up_prop + L.uplink_wait(send), true, 0, 0, ack,
                    static_cast<uint32_t>(ticks), send});
  };
  int unacked = 0;
  Nanos timer = 0;
  uint32_t last_end = 0;
  for (const auto& [end, at] : arrivals) {
    if (unacked > 0 && at >= timer) {
      emit(timer, last_end);
      unacked = 0;
    }
    if (unacked++ == 0) timer = at + L.delack;
    last_end = end;
    if (unacked == L.ack_every) {
      emit(at, end);
      unacked = 0;
    }
  }
  if (unacked > 0) emit(timer, last_end);
  if (L.swap_ack_pairs) {
    for (size_t i = 0; i + 1 < acks.size(); i += 4) std::swap(acks[i].at, acks[i + 1].at);
  }
  tr.events.insert(tr.events.end(), acks.begin(), acks.end());
  std::stable_sort(tr.events.begin(), tr.events.end(),
                   [](const Event& a, const Event& b) { return a.at < b.at; });
  return tr;
}

struct Sample {
  Nanos at;
  Nanos raw;
  Nanos filtered;
  Nanos true_queue;  // of the segment the sample was matched to
  Nanos ack_delay;   // from that segment's arrival to the ACK's sending
};

std::vector<Sample> run(const Downlink& L, const std::vector<Nanos>& forward,
                        DownlinkQueueEstimator& est, std::function<double(Nanos)> tick_of = nullptr,
                        Nanos spacing = kSpacing) {
  std::vector<Sample> out;
  const Trace tr = simulate(L, forward);
  for (const Event& e : tr.events) {
    if (!e.is_ack) {
      est.on_data(e.at, e.seq, e.end, spacing);
      continue;
    }
    const double g = tick_of ? tick_of(e.at) : static_cast<double>(L.tick);
    if (auto q = est.on_ack(e.at, e.ack, e.tsval, g, kHorizon, kFilter)) {
      const Rx& r = tr.rx.at(est.last_matched_end());
      out.push_back({e.at, *q, *est.filtered(e.at, kFilter), r.queue, e.sent - r.arrival});
    }
  }
  return out;
}

// The server's sending pattern at the gateway: phases of (rate as a multiple of the
// bottleneck's, duration). Above 1 the queue grows, at 1 it stands, below it drains.
std::vector<Nanos> phases(const Downlink& L, std::vector<std::pair<double, Nanos>> ph) {
  std::vector<Nanos> f;
  Nanos t = 0;
  for (const auto& [factor, len] : ph) {
    const Nanos gap = static_cast<Nanos>(static_cast<double>(L.tx()) / factor);
    for (const Nanos end = t + len; t < end; t += gap) f.push_back(t);
  }
  return f;
}

// Every scenario starts with kWarmup at half the rate (an empty queue: min(d) is the
// delay without queue), then the sender runs at `factor` times the rate for `busy` (1.5:
// the queue grows by a third of that), holds the queue for `hold` (at the rate), and
// drains at half the rate until `total`.
constexpr Nanos kWarmup = 1 * kSecond;
std::vector<Nanos> pattern(const Downlink& L, double factor, Nanos busy, Nanos total,
                           Nanos hold = 0) {
  return phases(
      L, {{0.5, kWarmup}, {factor, busy}, {1.0, hold}, {0.5, total - kWarmup - busy - hold}});
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median absolute error of the filtered estimate against the true queue, over samples whose
// ACK left within `max_ack_delay` of its segment (the ones the phone answered at once).
// How raw samples compare with the truth (queue + the ACK's own delay) once the queue has
// started to grow: `offset` is their median difference, a constant that min(d) may hold (the
// delayed-ACK gap of the sample it came from, at most two segments' time), `spread` the
// median distance from it.
struct Accuracy {
  double offset_ms;
  double spread_ms;
};
Accuracy accuracy(const std::vector<Sample>& s) {
  std::vector<double> diff;
  for (const auto& x : s) {
    if (x.at < kWarmup + 500 * kMilli) continue;
    diff.push_back(static_cast<double>(x.raw - x.true_queue - x.ack_delay) / 1e6);
  }
  const double c = median(diff);
  for (double& d : diff) d = std::fabs(d - c);
  return {c, median(diff)};
}

void expect_accurate(const Downlink& L, const std::vector<Sample>& s) {
  const Accuracy a = accuracy(s);
  EXPECT_LE(std::fabs(a.offset_ms), static_cast<double>(2 * L.tx() + L.tick) / 1e6);
  EXPECT_LT(a.spread_ms, static_cast<double>(L.tick) / 1e6);
}

TEST(DownlinkQueue, EmptyQueueReadsZero) {
  Downlink L;
  DownlinkQueueEstimator est;
  const auto s = run(L, pattern(L, 0.5, 0, 3 * kSecond), est);
  ASSERT_GT(s.size(), 50u);
  for (const auto& x : s) {
    EXPECT_LE(x.filtered, L.tick) << "at " << x.at;
  }
}

TEST(DownlinkQueue, StandingQueueIsMeasuredWithinATick) {
  Downlink L;
  DownlinkQueueEstimator est;
  // 1.5x the rate for 1 s (the queue grows to 1/3 s), at the rate for 1 s (it stands), then
  // half the rate (it drains).
  // Slots spaced for a 0.5 s round trip (the caller's rule: round trip / kSlots), so that
  // samples keep coming while the queue stands.
  const auto s = run(L, pattern(L, 1.5, kSecond, 5 * kSecond, kSecond), est, nullptr,
                     500 * kMilli / static_cast<Nanos>(DownlinkQueueEstimator::kSlots));
  ASSERT_GT(s.size(), 50u);
  const double tol = static_cast<double>(L.tx() + 2 * L.tick);
  int standing = 0;
  for (const auto& x : s) {
    // Each raw sample is that segment's queue plus the phone's ACK delay, to within TS
    // quantisation (a tick in the sample, a tick in min(d)) and min(d)'s own ACK delay.
    if (x.at < kWarmup) continue;
    EXPECT_NEAR(static_cast<double>(x.raw), static_cast<double>(x.true_queue + x.ack_delay), tol)
        << "at " << x.at;
    // ACKs of segments forwarded while the queue stood (0.5 s late), once the filter's
    // window holds only those.
    if (x.at > kWarmup + 1800 * kMilli && x.at < kWarmup + 2400 * kMilli) {
      ++standing;
      EXPECT_NEAR(static_cast<double>(x.filtered), static_cast<double>(x.true_queue), tol)
          << "at " << x.at;
      EXPECT_GT(x.true_queue, 300 * kMilli);
    }
  }
  EXPECT_GT(standing, 8);
}

TEST(DownlinkQueue, TheAcksUplinkWaitNeverEnters) {
  Downlink L;
  // The ACKs wait behind an upload in the phone's uplink buffer: 0 .. 2 s, changing. Their
  // round trip (DRWA's signal) carries all of it; the estimate none of it.
  L.uplink_wait = [](Nanos t) {
    return static_cast<Nanos>(1e9 * (1.0 + std::sin(static_cast<double>(t) / 3e8)));
  };
  DownlinkQueueEstimator est;
  const auto s = run(L, pattern(L, 1.5, kSecond, 6 * kSecond, kSecond), est);
  ASSERT_GT(s.size(), 20u);
  for (const auto& x : s) {
    EXPECT_NEAR(static_cast<double>(x.raw), static_cast<double>(x.true_queue + x.ack_delay),
                static_cast<double>(L.tx() + 2 * L.tick))
        << "at " << x.at;
  }
  expect_accurate(L, s);
}

TEST(DownlinkQueue, DelayedAcksAreFilteredOut) {
  Downlink L;
  L.delack = 40 * kMilli;
  DownlinkQueueEstimator est;
  // Lone segments every 60 ms (each acked by the delayed-ACK timer), and every third one
  // followed by a second 6 ms later (acked at once on its arrival).
  std::vector<Nanos> f;
  for (Nanos t = 0; t < 3 * kSecond; t += 60 * kMilli) {
    f.push_back(t);
    if ((t / (60 * kMilli)) % 3 == 0) f.push_back(t + 6 * kMilli);
  }
  const auto s = run(L, f, est);
  ASSERT_GT(s.size(), 30u);
  int delayed = 0;
  for (const auto& x : s) {
    if (x.ack_delay >= L.delack) {
      ++delayed;
      EXPECT_GE(x.raw, L.delack - 2 * L.tick);  // the raw sample carries the timer ...
    }
    if (x.at > 500 * kMilli) {
      EXPECT_LE(x.filtered, 2 * L.tick);  // ... the filter does not
    }
  }
  EXPECT_GT(delayed, 10);
}

TEST(DownlinkQueue, StretchAcksBiasByAtMostTheirSpan) {
  Downlink L;
  L.ack_every = 16;  // GRO on the phone: one ACK per 16 segments
  DownlinkQueueEstimator est;
  const auto s = run(L, pattern(L, 1.5, kSecond, 5 * kSecond, kSecond), est);
  ASSERT_GT(s.size(), 20u);
  for (const auto& x : s) {
    if (x.at < kWarmup + 500 * kMilli) continue;  // min(d) may still hold an ACK's delay
    // The bias is the ACK's own delay (up to 15 more segments, or the delayed-ACK timer),
    // upward only; otherwise the queue to within TS quantisation.
    EXPECT_NEAR(static_cast<double>(x.raw - x.true_queue - x.ack_delay), 0.0,
                static_cast<double>(2 * L.tick))
        << "at " << x.at;
    EXPECT_LE(x.ack_delay, std::max(16 * L.tx(), L.delack));
  }
  expect_accurate(L, s);
}

TEST(DownlinkQueue, ReorderedAcksGiveNoSampleAndNoError) {
  Downlink L;
  Downlink R = L;
  R.swap_ack_pairs = true;
  const auto f = pattern(L, 1.5, kSecond, 4 * kSecond, kSecond);
  DownlinkQueueEstimator a, b;
  const auto sa = run(L, f, a);
  const auto sb = run(R, f, b);
  // A late, older ACK finds its slots already answered: fewer samples, none wrong.
  EXPECT_LT(b.samples(), a.samples());
  EXPECT_GT(b.samples(), a.samples() / 2);
  expect_accurate(L, sa);
  expect_accurate(L, sb);
}

TEST(DownlinkQueue, TimestampWrapIsSeamless) {
  Downlink L;
  Downlink W = L;
  // The phone's TSval passes 2^32 half a second into the run.
  W.ts_offset_ticks = (int64_t{1} << 32) - 500;
  const auto f = pattern(L, 1.4, kSecond, 4 * kSecond);
  DownlinkQueueEstimator a, b;
  const auto sa = run(L, f, a);
  const auto sb = run(W, f, b);
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].raw, sb[i].raw) << i;
    EXPECT_EQ(sa[i].filtered, sb[i].filtered) << i;
  }
}

TEST(DownlinkQueue, RetransmittedRangeIsNotTimed) {
  DownlinkQueueEstimator est;
  // Three segments timed; the first is retransmitted 300 ms later; an ACK then covers all.
  est.on_data(0, 1000, 2000, kSpacing);
  est.on_data(10 * kMilli, 2000, 3000, kSpacing);
  est.on_data(20 * kMilli, 3000, 4000, kSpacing);
  est.on_data(300 * kMilli, 1000, 2000, kSpacing);  // retransmission: cancels all >= 1000
  EXPECT_FALSE(est.on_ack(400 * kMilli, 4000, 400, 1e6, kHorizon, kFilter));
  // New data afterwards is timed again.
  est.on_data(410 * kMilli, 4000, 5000, kSpacing);
  EXPECT_TRUE(est.on_ack(450 * kMilli, 5000, 450, 1e6, kHorizon, kFilter));
}

TEST(DownlinkQueue, UnknownTickConsumesSlotsWithoutSamples) {
  DownlinkQueueEstimator est;
  est.on_data(0, 1000, 2000, kSpacing);
  EXPECT_FALSE(est.on_ack(50 * kMilli, 2000, 50, 0.0, kHorizon, kFilter));
  EXPECT_EQ(est.samples(), 0u);
  // The match is recorded: the segment's forwarding time still bounds the tick from below.
  EXPECT_EQ(est.matches(), 1u);
  EXPECT_EQ(est.last_matched_end(), 2000u);
  EXPECT_FALSE(est.on_ack(55 * kMilli, 2000, 55, 0.0, kHorizon, kFilter));
  EXPECT_EQ(est.matches(), 1u) << "a duplicate covers no slot";
  est.on_data(60 * kMilli, 2000, 3000, kSpacing);
  EXPECT_TRUE(est.on_ack(110 * kMilli, 3000, 110, 1e6, kHorizon, kFilter));
}

// A download nobody regulates yet (its regulator waits for the first sample) fills a slow
// link's buffer to more than kMaxAge of queue before the tick is known: the slots timed
// then must still be answered, or every later slot ages out before its ACK too and the
// regulator waits for good (the lab's UMTS trace at 0 s: RTT p95 10.6 s, as unregulated).
// Once samples come, kMaxAge holds again.
TEST(DownlinkQueue, TheFirstSampleWaitsLongerThanTheSlotAge) {
  DownlinkQueueEstimator est;
  const Nanos q = 12 * kSecond;  // every segment waits this long in the downlink queue
  uint32_t seq = 1000;
  std::vector<std::pair<Nanos, uint32_t>> sent;  // forwarding time, end
  std::optional<Nanos> first;
  size_t next_ack = 0;
  for (Nanos t = 0; t < 20 * kSecond; t += 10 * kMilli) {
    est.on_data(t, seq, seq + kMss, kSpacing);
    seq += kMss;
    sent.emplace_back(t, seq);
    // The phone ACKs what reached it; the tick becomes known 3 s in.
    while (next_ack < sent.size() && sent[next_ack].first + q + 20 * kMilli <= t) {
      const double g = t >= 3 * kSecond ? 1e6 : 0.0;
      const auto sample = est.on_ack(t, sent[next_ack].second, static_cast<uint32_t>(t / kMilli), g,
                                     kHorizon, kFilter);
      if (sample && !first) first = t;
      ++next_ack;
    }
  }
  ASSERT_TRUE(first.has_value()) << "no sample in 20 s";
  EXPECT_LE(*first, 12 * kSecond + 100 * kMilli);
  // Samples came: a slot older than kMaxAge is dropped again.
  DownlinkQueueEstimator e2;
  e2.on_data(0, 1000, 2000, kSpacing);
  ASSERT_TRUE(e2.on_ack(50 * kMilli, 2000, 50, 1e6, kHorizon, kFilter));
  e2.on_data(100 * kMilli, 2000, 3000, kSpacing);
  EXPECT_FALSE(e2.on_ack(100 * kMilli + DownlinkQueueEstimator::kMaxAge + kMilli, 3000, 9000, 1e6,
                         kHorizon, kFilter));
}

// The phone's clock can take seconds to measure (its handshake ACK waited behind an upload:
// no hint), and a download nobody regulates yet builds its queue meanwhile. The matches of
// that time are kept: the first sample once the tick is known reads the queue that built,
// not zero (a baseline learnt then took a 2G download's 2.3 s start-up queue for empty, and
// its base round trip for 2.5 s: lab, EXPERIMENTS Q29).
TEST(DownlinkQueue, AQueueBuiltBeforeTheTickIsKnownIsMeasured) {
  Downlink L;
  // From an empty buffer at 1.5 times the rate: the queue grows by a third of a second per
  // second, to 0.67 s when the tick becomes known at 2 s.
  const auto f = phases(L, {{1.5, 4 * kSecond}});
  const Nanos known = 2 * kSecond;
  DownlinkQueueEstimator est;
  const auto s =
      run(L, f, est, [&](Nanos t) { return t < known ? 0.0 : static_cast<double>(L.tick); });
  ASSERT_FALSE(s.empty());
  const Sample& first = s.front();
  EXPECT_GE(first.at, known);
  ASSERT_GT(first.true_queue, 500 * kMilli);
  const Nanos tol = 2 * L.tx() + 2 * L.tick + L.delack;
  EXPECT_NEAR(static_cast<double>(first.raw), static_cast<double>(first.true_queue),
              static_cast<double>(tol));
  expect_accurate(L, s);
  // The same download with the tick known from the start reads the same queue then.
  DownlinkQueueEstimator known_from_start;
  const auto k = run(L, f, known_from_start);
  const auto same =
      std::find_if(k.begin(), k.end(), [&](const Sample& x) { return x.at == first.at; });
  ASSERT_NE(same, k.end());
  EXPECT_NEAR(static_cast<double>(first.raw), static_cast<double>(same->raw),
              static_cast<double>(L.tick));
}

// A kept match counts at its own time: one older than the horizon when the tick becomes
// known has aged out (the level may have moved since: a route, a clock's drift).
TEST(DownlinkQueue, AKeptMatchAgesOutWithTheHorizon) {
  // A match without the tick at 20 ms, then `later` on a sample whose d is 300 ms higher,
  // the tick known by then: its q_down.
  auto q_after = [](Nanos later) {
    DownlinkQueueEstimator est;
    est.on_data(0, 1000, 2000, kSpacing);
    EXPECT_FALSE(est.on_ack(20 * kMilli, 2000, 20, 0.0, kHorizon, kFilter));
    est.on_data(later, 2000, 3000, kSpacing);
    const auto ticks = static_cast<uint32_t>((later + 320 * kMilli) / kMilli);
    return est.on_ack(later + 20 * kMilli, 3000, ticks, 1e6, kHorizon, kFilter);
  };
  const auto aged = q_after(12 * kSecond);  // beyond the horizon: it has aged out
  ASSERT_TRUE(aged);
  EXPECT_EQ(*aged, 0);
  const auto kept = q_after(5 * kSecond);  // within it: the kept match counts
  ASSERT_TRUE(kept);
  EXPECT_NEAR(static_cast<double>(*kept), 300e6, 1e6);
}

TEST(DownlinkQueue, TickCorrectionRebasesTheMinimum) {
  Downlink L;
  DownlinkQueueEstimator est;
  // The caller's tick estimate is 2 % low for the first 2 s, then exact. With g read low, d
  // falls over time, so min(d) is the latest sample, 2 s x 2 % = 40 ms below where the exact
  // g puts it: without re-basing the stored values an empty queue would read 40 ms for a
  // horizon after the correction.
  const auto s = run(L, pattern(L, 0.5, 0, 4 * kSecond), est, [&](Nanos t) {
    return t < 2 * kSecond ? 0.98 * static_cast<double>(L.tick) : static_cast<double>(L.tick);
  });
  for (const auto& x : s) {
    if (x.at > 2 * kSecond + kFilter) {
      EXPECT_LE(x.filtered, 2 * L.tick) << "at " << x.at;
    }
  }
}

TEST(DownlinkQueue, IdleLongerThanTheHorizonRestarts) {
  DownlinkQueueEstimator est;
  // A sample with a low d, then 11 s of silence, then a higher level: it is the new zero.
  est.on_data(0, 1000, 2000, kSpacing);
  ASSERT_TRUE(est.on_ack(20 * kMilli, 2000, 20, 1e6, kHorizon, kFilter));
  est.on_data(11 * kSecond, 2000, 3000, kSpacing);
  const auto q = est.on_ack(11 * kSecond + 200 * kMilli, 3000, 11200, 1e6, kHorizon, kFilter);
  ASSERT_TRUE(q);
  EXPECT_EQ(*q, 0);
}

}  // namespace
}  // namespace rsfc
