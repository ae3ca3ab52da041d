// RSFC uplink controller: scripted time against an open-loop phone whose queues the test sets
// (feed, advance, expect_window), then closed-loop runs in the packet simulator
// (test/regulator_sim.h) with the lab's link shapes.
#include "rsfc/core/rsfc_controller.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "regulator_sim.h"
#include "sim_trace_link.h"

namespace rsfc {
namespace {

constexpr Nanos ms(double x) {
  return static_cast<Nanos>(x * 1e6);
}
using Delay = std::function<Nanos(Nanos)>;
Delay constant(Nanos d) {
  return [d](Nanos) { return d; };
}

struct PathModel {
  Nanos up_prop = ms(15);    // phone -> gateway, without queueing
  Nanos down_prop = ms(15);  // gateway -> phone, without queueing
  Nanos srv_half = ms(20);   // gateway -> server -> gateway
  Nanos tick = kMilli;       // the phone's TS clock
  uint32_t ts_base = 0x9000'0000u;
  bool timestamps = true;
  bool window_limited = false;  // the phone sends only within the right edge it knows
  Nanos handshake_queue = 0;    // uplink queue the SYN and the handshake's ACK wait in
};

struct Decision {
  Nanos t;
  uint32_t window;
  RsfcState state;
  std::optional<Nanos> t_buff;
};

// One upload flow seen by one UplinkRegulator. The phone sends at a rate the test sets,
// ignoring the window (open loop), and each segment waits q_up(send time) in the uplink
// buffer; the server ACKs every second segment; ACKs wait q_down(t) in the downlink buffer.
// The gateway does what the engine does: feed, target, clamp (floor, right edge), report.
class Script {
 public:
  explicit Script(PathModel m = {}, RsfcParams p = {}) : m_(m), p_(p) {}

  RsfcParams& params() { return p_; }
  UplinkRegulator& reg() { return reg_; }
  // The phone's shared uplink state, as the engine attaches it (the link's rate, outages).
  void attach_subscriber() { reg_.attach(&sub_); }
  const std::vector<Decision>& log() const { return log_; }
  const Decision& last() const { return log_.back(); }
  // The last decision taken in `state` (the test fails if there is none).
  Decision last_in(RsfcState state) const {
    for (auto it = log_.rbegin(); it != log_.rend(); ++it) {
      if (it->state == state) return *it;
    }
    ADD_FAILURE() << "no decision in state " << to_string(state);
    return {};
  }
  Nanos now() const { return ev_.now(); }
  // The largest startup clamp an ACK was given, and when the last one was.
  uint32_t startup_max() const { return startup_max_; }
  Nanos startup_until() const { return startup_until_; }

  void handshake() {
    const Nanos t0 = ev_.now();
    TcpSegment syn = phone_seg(t0);
    syn.flags = tcpflag::kSyn;
    syn.seq = isn_;
    syn.mss_option = 1460;
    syn.tsecr = 0;
    const Nanos a = arrive(t0, m_.handshake_queue);
    ev_.at(a, [this, syn] { reg_.on_uplink_segment(ev_.now(), syn, p_); });
    ev_.at(a + m_.srv_half, [this] {
      TcpSegment sa = server_seg();
      sa.flags = tcpflag::kSyn | tcpflag::kAck;
      sa.seq = srv_isn_;
      sa.ack = isn_ + 1;
      sa.mss_option = 1448;
      reg_.on_downlink_segment(ev_.now(), sa, p_);
      const Nanos fwd = ev_.now();
      const uint32_t tsv = sa.tsval;
      ev_.at(fwd + m_.down_prop, [this, tsv, fwd] {
        ts_recent_ = tsv;
        TcpSegment ack = phone_seg(ev_.now());
        ack.flags = tcpflag::kAck;
        ack.seq = isn_ + 1;
        ack.ack = srv_isn_ + 1;
        (void)fwd;
        const Nanos a2 = arrive(ev_.now(), m_.handshake_queue);
        ev_.at(a2, [this, ack] { reg_.on_uplink_segment(ev_.now(), ack, p_); });
      });
    });
    next_seq_ = isn_ + 1;
    ev_.run_until(t0 + ms(200));
  }

  // The phone sends at `rate` bytes/s for `dur` (open loop).
  void send(Nanos dur, double rate, const Delay& q_up, const Delay& q_down = constant(0)) {
    const Nanos start = ev_.now();
    const Nanos gap = static_cast<Nanos>(1448.0 / rate * 1e9);
    for (Nanos t = start; t < start + dur; t += gap) {
      ev_.at(t, [this, q_up, q_down] { phone_sends(q_up, q_down); });
    }
    ev_.run_until(start + dur);
  }
  void idle(Nanos dur) { ev_.run_until(ev_.now() + dur); }

 private:
  TcpSegment phone_seg(Nanos t) const {
    TcpSegment s;
    s.has_ts = m_.timestamps;
    s.tsval = m_.ts_base + static_cast<uint32_t>(t / m_.tick);
    s.tsecr = ts_recent_;
    return s;
  }
  TcpSegment server_seg() const {
    TcpSegment s;
    s.has_ts = m_.timestamps;
    s.tsval = 0x0100'0000u + static_cast<uint32_t>(ev_.now() / kMilli);
    s.tsecr = srv_ts_recent_;
    s.flags = tcpflag::kAck;
    s.seq = srv_isn_ + 1;
    return s;
  }
  // FIFO arrival at the gateway of a segment sent at `t`.
  Nanos arrive(Nanos t, Nanos q) {
    last_arrival_ = std::max(last_arrival_, t + m_.up_prop + q);
    return last_arrival_;
  }

  void phone_sends(const Delay& q_up, const Delay& q_down) {
    const Nanos t = ev_.now();
    if (m_.window_limited && phone_edge_valid_ && seq_gt(next_seq_ + 1448, phone_edge_)) return;
    TcpSegment s = phone_seg(t);
    s.flags = tcpflag::kAck;
    s.seq = next_seq_;
    s.ack = srv_isn_ + 1;
    s.payload_len = 1448;
    next_seq_ += 1448;
    const Nanos a = arrive(t, q_up(t));
    ev_.at(a, [this, s, q_down] {
      reg_.on_uplink_segment(ev_.now(), s, p_);
      // The server: TS.Recent from the first segment after its last ACK, ACK every second.
      if (!srv_pending_) srv_ts_recent_ = s.tsval;
      srv_pending_ = !srv_pending_;
      if (srv_pending_) return;
      const uint32_t ack = s.seq + s.payload_len;
      const uint32_t echo = srv_ts_recent_;
      ev_.at(ev_.now() + m_.srv_half, [this, ack, echo, q_down] { server_ack(ack, echo, q_down); });
    });
  }

  void server_ack(uint32_t ack, uint32_t echo, const Delay& q_down) {
    const Nanos now = ev_.now();
    TcpSegment a = server_seg();
    a.ack = ack;
    a.tsecr = echo;
    reg_.on_downlink_segment(now, a, p_);
    const WindowDecision d = reg_.target_window(now, p_);
    const uint64_t offered = 4u << 20;
    uint64_t w = d.window == kNoClamp ? offered : std::max<uint64_t>(d.window, 2920);
    if (edge_valid_ && seq_gt(edge_, ack)) w = std::max<uint64_t>(w, edge_ - ack);
    w = std::min(w, offered);
    const uint32_t edge = ack + static_cast<uint32_t>(w);
    if (!edge_valid_ || seq_gt(edge, edge_)) edge_ = edge;
    edge_valid_ = true;
    reg_.on_window_forwarded(now, edge, p_);
    if (d.stepped) log_.push_back({now, reg_.window(), reg_.state(), reg_.t_buff()});
    if (reg_.state() == RsfcState::kStartup && d.window != kNoClamp) {
      startup_max_ = std::max(startup_max_, d.window);
      startup_until_ = now;
    }
    const uint32_t tsv = a.tsval;
    ev_.at(now + m_.down_prop + q_down(now), [this, tsv, edge] {
      if (seq_gt(tsv, ts_recent_)) ts_recent_ = tsv;
      if (!phone_edge_valid_ || seq_gt(edge, phone_edge_)) phone_edge_ = edge;
      phone_edge_valid_ = true;
    });
  }

  PathModel m_;
  RsfcParams p_;
  SubscriberUplink sub_;  // declared before reg_: outlives it
  UplinkRegulator reg_;
  sim::EventQueue ev_;
  std::vector<Decision> log_;
  uint32_t isn_ = 0xffff'0000u;  // the phone's sequence numbers wrap during the runs
  uint32_t srv_isn_ = 5000;
  uint32_t next_seq_ = 0;
  uint32_t ts_recent_ = 0;      // phone's TS.Recent (the server's TSval)
  uint32_t srv_ts_recent_ = 0;  // server's TS.Recent (the phone's TSval)
  bool srv_pending_ = false;
  Nanos last_arrival_ = 0;
  uint32_t edge_ = 0;
  bool edge_valid_ = false;
  uint32_t phone_edge_ = 0;  // the right edge the phone knows
  bool phone_edge_valid_ = false;
  uint32_t startup_max_ = 0;
  Nanos startup_until_ = 0;
};

// Rate that fills 2 Mbit/s.
constexpr double kRate = 250'000;

TEST(RsfcController, StartupClampKeepsTheRightEdgeWithinReach) {
  Script s;
  s.handshake();
  // No estimates yet: the startup clamp, the 16 KB floor by default, not "no clamp" (a right
  // edge megabytes ahead could never be pulled back); 64 KB with initial_window_bytes 0.
  const WindowDecision d = s.reg().target_window(s.now(), s.params());
  EXPECT_EQ(s.reg().state(), RsfcState::kStartup);
  EXPECT_EQ(d.window, 16384u);
  Script s64;
  s64.params().initial_window_bytes = 0;
  s64.handshake();
  EXPECT_EQ(s64.reg().target_window(s64.now(), s64.params()).window, 65535u);
}

// The startup clamp and a bulk transfer the other way (other_way_bulk(), regulator.h: the
// engine counts both ways from the ISNs). A download that began with a request: the phone's
// bytes start the uplink regulator, which then has nothing to estimate and stays in STARTUP;
// once the server has sent 64 KB the clamp lets go (each server segment carries the window it
// clamps), and it holds again once the phone has sent more than that.
TEST(RsfcController, StartupClampLetsGoOfABulkTransferTheOtherWay) {
  EXPECT_FALSE(other_way_bulk(kStartupHoldOtherWay, 517)) << "64 KB: still held";
  EXPECT_TRUE(other_way_bulk(kStartupHoldOtherWay + 1, 517));
  EXPECT_TRUE(other_way_bulk(kStartupHoldOtherWay + 1, kStartupHoldOtherWay));
  EXPECT_FALSE(other_way_bulk(kStartupHoldOtherWay + 1, kStartupHoldOtherWay + 1))
      << "both ways bulk: held";
  RsfcParams p;
  p.initial_window_bytes = 16384;
  UplinkRegulator r;
  Nanos now = kSecond;
  r.on_uplink_segment(now, {.seq = 1000, .flags = tcpflag::kSyn}, p);
  r.on_downlink_segment(now + ms(40),
                        {.seq = 5000, .ack = 1001, .flags = tcpflag::kSyn | tcpflag::kAck}, p);
  r.on_uplink_segment(now + ms(41),
                      {.seq = 1001, .ack = 5001, .payload_len = 517, .flags = tcpflag::kAck}, p);
  now += ms(80);
  uint32_t seq = 5001, clamped = 0;
  for (uint32_t i = 0; i < 100; ++i, seq += 1448, now += ms(1)) {
    r.on_downlink_segment(
        now, {.seq = seq, .ack = 1518, .payload_len = 1448, .flags = tcpflag::kAck}, p);
    const bool bulk = other_way_bulk((i + 1) * 1448, 517);
    const WindowDecision d = r.target_window(now, p, bulk);
    EXPECT_EQ(r.state(), RsfcState::kStartup);
    EXPECT_EQ(d.window, bulk ? kNoClamp : 16384u) << "segment " << i;
    clamped += d.window != kNoClamp;
  }
  EXPECT_EQ(clamped, 45u) << "the server's first 64 KB";
  EXPECT_EQ(r.target_window(now, p, false).window, 16384u) << "held again";
}

// A slow link with a deep buffer (2G: 12.5 kB/s, 200 ms round trip) and an upload that fills it
// from the start: until the regulator has its signals, the startup clamp is sized on the round trip
// WITHOUT the flow's own queue. Sized on the round trip the phone sees, it grew with the queue it
// let in (to 37 KB here: three seconds of it).
TEST(RsfcController, StartupClampDoesNotGrowWithItsOwnQueue) {
  PathModel m;
  m.up_prop = ms(50);
  m.down_prop = ms(50);
  m.srv_half = ms(100);
  m.tick = 3'333'333;  // HZ=300: no 1/4/10 ms snap, the estimate waits for a stable span
  RsfcParams p;
  p.initial_window_bytes = 16384;
  Script s(m, p);
  s.handshake();
  constexpr double kSlow = 12'500;
  // The buffer fills at the rate the phone sends above the link's: 0.5 s of queue per second.
  s.send(6 * kSecond, kSlow, [](Nanos t) { return t / 2; });
  // The phone's HZ=300 clock is not known in this script's first seconds: no t_buff, the
  // regulator stays in STARTUP with the rate and the round trips measured.
  ASSERT_GT(s.startup_until(), 5 * kSecond) << "the script must keep the regulator in STARTUP";
  // max(16 KB, 2 x rate x 200 ms = 5 kB): the floor, whatever the queue.
  EXPECT_EQ(s.startup_max(), 16384u);
}

TEST(RsfcController, EmptyBufferMakesTheWindowGrowButNotBeyondUse) {
  Script s;
  s.handshake();
  s.send(3 * kSecond, kRate, constant(0));
  ASSERT_GE(s.log().size(), 10u);
  EXPECT_EQ(s.reg().state(), RsfcState::kSlow);
  EXPECT_EQ(s.reg().tick_ms(), 1.0);
  // Grows step after step while the buffer stays empty ...
  int grew = 0;
  for (size_t i = 1; i < s.log().size(); ++i) {
    if (s.log()[i].window > s.log()[i - 1].window) ++grew;
    // ... by at most growth_per_rtt (25 %) of the window, or one MSS, per step.
    EXPECT_LE(s.log()[i].window, s.log()[i - 1].window * 1.25 + 1449) << i;
  }
  EXPECT_GE(grew, 3);
  // ... but the phone only ever has rate * RTT (50 ms) = 12.5 KB in flight: the window
  // stops at (1 + growth) * that + 2 MSS instead of running away.
  EXPECT_LE(s.last().window, 1.25 * kRate * 0.05 * 1.1 + 2 * 1448);
  EXPECT_GE(s.last().window, kRate * 0.05);
}

// An uplink that serves the phone in bursts: `on` at `rate` bytes/s, then `off` of nothing,
// first-in first-out. Called once per segment in send order: the delay the segment waits.
Delay bursty_link(double rate, Nanos on, Nanos off) {
  auto free = std::make_shared<Nanos>(0);  // Script copies the function for every segment
  return [rate, on, off, free](Nanos t) {
    Nanos done = std::max(*free, t) + static_cast<Nanos>(1448.0 / rate * 1e9);
    const Nanos cycle = on + off;
    if (done % cycle > on) done += cycle - done % cycle;  // off: wait for the next burst
    *free = done;
    return done - t;
  };
}

// A phone that keeps to its window on an uplink serving in bursts: 250 kB/s for 150 ms, then
// 250 ms of nothing (94 kB/s over time), with a download's 400 ms queue in its ACKs' path.
// Every silence shows as a queue the segment after it waited through; no window removes it.
// The window must stay near what the link carries over the round trip (94 kB/s x 0.45 s = 42
// KB): a rule that took each step's silences for a fall (delivery over the whole step below
// half) cut it to 9-15 KB at the same queue (lab/EXPERIMENTS.md Q41).
TEST(RsfcController, LinkServingInBurstsKeepsItsWindow) {
  PathModel m;
  m.window_limited = true;
  Script s(m);
  s.params().min_refresh = 60 * kSecond;  // no scheduled drain in the way
  s.attach_subscriber();
  s.handshake();
  s.send(3 * kSecond, 90'000, constant(0), constant(ms(400)));  // an empty buffer: SLOW
  const size_t from = s.log().size();
  s.send(12 * kSecond, 110'000, bursty_link(250'000, ms(150), ms(250)), constant(ms(400)));
  ASSERT_TRUE(s.reg().rtt_used());
  EXPECT_GT(*s.reg().rtt_used(), ms(400));
  ASSERT_GT(s.log().size(), from + 10);
  int fast = 0;
  for (size_t i = from; i < s.log().size(); ++i) {
    fast += s.log()[i].state == RsfcState::kFast;
    EXPECT_GE(s.log()[i].window, 0.5 * 94'000 * 0.45) << "step " << i;
  }
  EXPECT_GT(fast, 3) << "the silences read as a queue above T";
}

TEST(RsfcController, StandingQueueShrinksTheWindowToOneBdp) {
  Script s;
  s.params().min_refresh = 60 * kSecond;  // no scheduled drain in the way
  s.handshake();
  // The window grows big while a 200 ms downlink queue makes the round trip long ...
  s.send(4 * kSecond, kRate, constant(0), constant(ms(200)));
  const uint32_t before = s.last().window;
  ASSERT_GT(before, kRate * 0.2);
  // ... then the downlink empties and the phone's surplus stands in its uplink buffer. (The
  // round trip the window is sized on is averaged over rtt_smoothing = 1 s: it takes a few
  // of those to forget the 250 ms.)
  // (Open loop: the scripted queue never drains, so after a few steps in force the flow
  // also tries draining (kMonitor) in between; the fast decisions are what is checked.)
  s.send(5 * kSecond, kRate, constant(ms(300)));
  ASSERT_TRUE(s.reg().t_buff());
  EXPECT_NEAR(static_cast<double>(*s.reg().t_buff()), 3e8, 2e6);
  // T = RTT_min = 50 ms; window = rho * (RTT + 0.75 T) = 250 kB/s * 87.5 ms.
  EXPECT_EQ(s.reg().threshold(), ms(50));
  EXPECT_NEAR(static_cast<double>(*s.reg().rtt_used()), 5e7, 6e6);
  const Decision fast = s.last_in(RsfcState::kFast);
  EXPECT_GT(fast.t, 6 * kSecond);
  EXPECT_NEAR(fast.window, kRate * 0.0875, kRate * 0.0875 * 0.2);
  EXPECT_LT(fast.window, before / 2);
  EXPECT_GE(fast.window, 2u * 1448);
}

// Automatic T (rsfc.threshold_ms: auto): RTT_min clamped to
// [max(threshold_floor, tick_multiple x g), threshold_ceiling]; an explicit threshold wins.
// The default path above (RTT_min 50 ms, 1 ms tick) is the unclamped case.
PathModel path_with_rtt(Nanos rtt) {
  PathModel m;
  m.up_prop = rtt / 4;
  m.down_prop = rtt / 4;
  m.srv_half = rtt / 2;
  return m;
}

// Whether the controller took any decision in kFast from `from` on.
bool went_fast_after(const Script& s, Nanos from) {
  for (const Decision& d : s.log()) {
    if (d.t >= from && d.state == RsfcState::kFast) return true;
  }
  return false;
}

TEST(RsfcController, AutoThresholdNeverBelowTheFloor) {
  // A 10 ms round trip (fibre-like): T = threshold_floor (20 ms), not 10 ms; timestamp ticks
  // and scheduling jitter would read as queue below that.
  Script s(path_with_rtt(ms(10)));
  s.params().min_refresh = 60 * kSecond;
  s.handshake();
  s.send(2 * kSecond, kRate, constant(0));
  ASSERT_TRUE(s.reg().rtt_min());
  EXPECT_NEAR(static_cast<double>(*s.reg().rtt_min()), 1e7, 1e6);
  EXPECT_EQ(s.reg().threshold(), ms(20));
  // A 15 ms standing queue is above RTT_min but below the floor: held, not cut.
  const Nanos mark = s.now() + ms(500);
  s.send(2 * kSecond, kRate, constant(ms(15)));
  EXPECT_FALSE(went_fast_after(s, mark));
  EXPECT_EQ(s.reg().threshold(), ms(20));
  // The floor is a parameter.
  Script low(path_with_rtt(ms(10)));
  low.params().threshold_floor = ms(12);
  low.handshake();
  low.send(2 * kSecond, kRate, constant(0));
  EXPECT_EQ(low.reg().threshold(), ms(12));
}

TEST(RsfcController, AutoThresholdIsFourTicksOnACoarseClock) {
  // HZ=100 phone (g = 10 ms) on a 20 ms round trip: t_buff is only known to a tick, so
  // T = tick_multiple x g = 40 ms, above both RTT_min and the 20 ms floor.
  PathModel m = path_with_rtt(ms(20));
  m.tick = 10 * kMilli;
  Script s(m);
  s.handshake();
  s.send(3 * kSecond, kRate, constant(0));
  EXPECT_EQ(s.reg().tick_ms(), 10.0);
  ASSERT_TRUE(s.reg().rtt_min());
  EXPECT_NEAR(static_cast<double>(*s.reg().rtt_min()), 2e7, 2e6);
  EXPECT_EQ(s.reg().threshold(), ms(40));
  // The same path with a 1 ms clock: the floor.
  Script fine(path_with_rtt(ms(20)));
  fine.handshake();
  fine.send(3 * kSecond, kRate, constant(0));
  EXPECT_EQ(fine.reg().threshold(), ms(20));
}

TEST(RsfcController, AutoThresholdNeverAboveTheCeiling) {
  // A 160 ms round trip (satellite backhaul, far server): T = threshold_ceiling (80 ms), the
  // latency budget, not 160 ms.
  Script s(path_with_rtt(ms(160)));
  s.handshake();
  s.send(3 * kSecond, kRate, constant(0));
  ASSERT_TRUE(s.reg().rtt_min());
  EXPECT_NEAR(static_cast<double>(*s.reg().rtt_min()), 1.6e8, 2e6);
  EXPECT_EQ(s.reg().threshold(), ms(80));
  Script high(path_with_rtt(ms(160)));
  high.params().threshold_ceiling = ms(120);
  high.handshake();
  high.send(3 * kSecond, kRate, constant(0));
  EXPECT_EQ(high.reg().threshold(), ms(120));
}

// Without timestamps t_buff is the window-opening lag, which also holds the queue of the
// phone's downloads: a tight ceiling meant for timestamped flows does not apply to it.
TEST(RsfcController, AutoThresholdWithoutTimestampsHasItsOwnCeiling) {
  const auto run = [](bool timestamps, Nanos ceiling, Nanos lag_ceiling) {
    PathModel m = path_with_rtt(ms(160));
    m.timestamps = timestamps;
    m.window_limited = !timestamps;  // the lag signal needs a phone that uses its window
    auto s = std::make_unique<Script>(m);
    s->params().threshold_ceiling = ceiling;
    s->params().threshold_ceiling_lag = lag_ceiling;
    s->handshake();
    s->send(3 * kSecond, kRate, constant(0));
    EXPECT_EQ(s->reg().timestamps(), timestamps);
    return s->reg().threshold();
  };
  EXPECT_EQ(run(true, ms(30), ms(80)), ms(30));
  EXPECT_EQ(run(false, ms(30), ms(80)), ms(80));
  EXPECT_EQ(run(false, ms(80), ms(120)), ms(120));
  EXPECT_EQ(run(true, ms(80), ms(120)), ms(80));
}

TEST(RsfcController, ExplicitThresholdOverridesAuto) {
  // Default path: auto T would be RTT_min = 50 ms. An explicit threshold is taken as it is,
  // even outside the auto clamp, and the law uses it: a 40 ms standing queue is held under
  // auto T but cut under an explicit 30 ms.
  const auto run = [](std::optional<Nanos> threshold) {
    auto s = std::make_unique<Script>();
    s->params().threshold = threshold;
    s->params().min_refresh = 60 * kSecond;
    s->handshake();
    s->send(2 * kSecond, kRate, constant(0));
    return s;
  };
  const auto autoT = run(std::nullopt);
  EXPECT_EQ(autoT->reg().threshold(), ms(50));
  const auto t30 = run(ms(30));
  EXPECT_EQ(t30->reg().threshold(), ms(30));
  EXPECT_EQ(run(ms(120))->reg().threshold(), ms(120));  // above the ceiling
  EXPECT_EQ(run(ms(10))->reg().threshold(), ms(10));    // below the floor
  const Nanos mark = autoT->now() + ms(500);
  autoT->send(2 * kSecond, kRate, constant(ms(40)));
  t30->send(2 * kSecond, kRate, constant(ms(40)));
  EXPECT_FALSE(went_fast_after(*autoT, mark));
  EXPECT_TRUE(went_fast_after(*t30, mark));
  EXPECT_EQ(t30->reg().threshold(), ms(30));
}

TEST(RsfcController, WindowIsSizedOnTheRoundTripTheUploadReallySees) {
  // A concurrent download keeps 250 ms in the downlink buffer: the upload's ACKs wait there.
  // Sizing on RTT_min (50 ms) would starve the upload (docs/DESIGN.md); the window must cover
  // the 300 ms round trip the flow lives on.
  Script s;
  s.params().min_refresh = 60 * kSecond;
  s.handshake();
  s.send(6 * kSecond, kRate, constant(0), constant(ms(250)));
  ASSERT_TRUE(s.reg().rtt_used());
  EXPECT_NEAR(static_cast<double>(*s.reg().rtt_used()), 3e8, 1.5e7);
  EXPECT_GE(s.last().window, kRate * 0.3);
  // Then an uplink queue on top: the fast state cuts to rho * (300 ms + 0.75 T), not below.
  s.send(2 * kSecond, kRate, constant(ms(250)), constant(ms(250)));
  const Decision fast = s.last_in(RsfcState::kFast);
  EXPECT_GE(fast.window, kRate * 0.3);
  EXPECT_LE(fast.window, kRate * 0.4);
}

// A concurrent download's downlink queue grows: the upload's ACKs arrive later and later,
// its own buffer runs empty. The window must follow the round trip up at once (one rate x
// the current round trip and more), not one MSS per step while the buffer idles.
TEST(RsfcController, WindowFollowsARisingRoundTrip) {
  Script s;
  s.handshake();
  s.send(3 * kSecond, kRate, constant(0));
  const Nanos t0 = s.now();
  const auto ramp = [t0](Nanos t) { return std::clamp<Nanos>((t - t0) * 3 / 20, 0, ms(300)); };
  s.send(2 * kSecond, kRate, constant(0), ramp);  // 0 -> 300 ms of downlink queue in 2 s
  s.send(ms(600), kRate, constant(0), constant(ms(300)));
  // Round trip now: 15 + 300 + 15 + 20 ms; one BDP of it at 250 kB/s is 87.5 kB.
  EXPECT_GE(s.last().window, 0.9 * kRate * 0.350);
  EXPECT_EQ(s.last().state, RsfcState::kSlow);
}

TEST(RsfcController, TenMillisecondTickReadsTheQueueWithoutDrift) {
  // HZ=100 phone; its buffer holds 30 ms except for 300 ms every 4 s. With the tick right,
  // t_buff reads 30 ms (+- one tick) in every standing period for as long as the flow lives;
  // with a wrong tick it would drift by the error rate (a 1 % error: 10 ms per second).
  PathModel m;
  m.tick = 10 * kMilli;
  m.ts_base = 0xffff'ff80u;  // wraps soon
  Script s(m);
  s.handshake();
  const Delay q = [](Nanos t) { return t % (4 * kSecond) < ms(300) ? Nanos{0} : ms(30); };
  s.send(24 * kSecond, kRate, q);
  EXPECT_EQ(s.reg().tick_ms(), 10.0);
  EXPECT_TRUE(s.reg().tick_estimated());
  int checked = 0;
  for (const Decision& d : s.log()) {
    // Standing periods, once the 200 ms filter has only standing samples.
    if (d.t < 2 * kSecond || d.t % (4 * kSecond) < ms(700) || !d.t_buff) continue;
    EXPECT_NEAR(static_cast<double>(*d.t_buff), 3e7, 1.05e7) << d.t;
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

TEST(RsfcController, MinimumIsKeptWhileTheQueueStands) {
  // 2 s empty, then a standing 150 ms queue for 7 s (less than the 10 s horizon): t_buff must
  // keep reading 150 ms. A controller that lost its minimum would read 0 and let it stand.
  Script s;
  s.handshake();
  s.send(2 * kSecond, kRate, constant(0));
  s.send(7 * kSecond, kRate, constant(ms(150)));
  int checked = 0;
  for (const Decision& d : s.log()) {
    if (d.t < ms(2800) || !d.t_buff) continue;
    EXPECT_GE(*d.t_buff, ms(140)) << d.t;
    ++checked;
  }
  EXPECT_GT(checked, 20);
  EXPECT_NE(s.reg().state(), RsfcState::kSlow);
  EXPECT_EQ(s.reg().path_rebaselines(), 0u);
}

TEST(RsfcController, ScheduledDrainTellsALongerPathFromAQueue) {
  // The same 150 ms as above, but the phone obeys its window and the delay does not depend on
  // it (a longer path). The drain at 5 s confirms the empty buffer; the 150 ms appear at 6 s.
  // The boundary at 10 s is skipped (the buffer was seen empty within the period); at 15 s
  // the flow drains, its data stops arriving at its rate while t_buff stays put, and min(d)
  // is raised, long before the 30 s horizon would age the old one out. (Above, the phone
  // keeps its rate through the drain: a queue of its own, kept.)
  PathModel m;
  m.window_limited = true;
  Script s(m);
  s.params().min_window_horizon = 30 * kSecond;
  s.handshake();
  s.send(6 * kSecond, kRate, constant(0));
  s.send(12 * kSecond, kRate, constant(ms(150)));
  Nanos recognised = 0;
  for (const Decision& d : s.log()) {
    if (d.t < ms(6500) || !d.t_buff) continue;
    if (recognised == 0 && *d.t_buff < ms(20)) recognised = d.t;
    if (recognised > 0) {
      EXPECT_LT(*d.t_buff, ms(20)) << d.t;  // the "queue" does not come back
    }
  }
  EXPECT_GT(recognised, 15 * kSecond);  // not before the boundary ...
  EXPECT_LT(recognised, ms(16800));     // ... and right after its 1 s check
  EXPECT_EQ(s.reg().state(), RsfcState::kSlow);
  EXPECT_EQ(s.reg().path_rebaselines(), 1u);
}

TEST(RsfcController, LongerPathIsRecognisedWhileTheOldMinimumAgesOut) {
  // As above, with the default 10 s horizon and a short standing queue (20 ms) between the
  // last empty buffer (6.5 s) and the longer path (8 s). The drain at 15 s checks the path
  // while the empty-buffer samples age out (about 16.3 s): min(d) rises by 20 ms and t_buff
  // falls by as much without any queue draining. The check must judge the floor of the
  // one-way delay, not of t_buff, or it reads the age-out as a queue of the flow's own that
  // shrinks, refuses, and the flow waits until the 20 ms samples age out too (17.6 s).
  // (Lab, session 6: the 3G delay step kept 36 % of the upload in its 240 ms phase.)
  PathModel m;
  m.window_limited = true;
  Script s(m);
  s.handshake();
  s.send(ms(6300), kRate, constant(0));
  s.send(ms(1500), kRate, constant(ms(20)));
  s.send(12 * kSecond, kRate, constant(ms(150)));
  Nanos recognised = 0;
  for (const Decision& d : s.log()) {
    if (d.t < 9 * kSecond || !d.t_buff) continue;
    if (recognised == 0 && *d.t_buff < ms(20)) recognised = d.t;
  }
  EXPECT_GT(recognised, 15 * kSecond);  // not before the boundary ...
  EXPECT_LT(recognised, ms(17200));     // ... and at the end of its 1 s check
  EXPECT_EQ(s.reg().path_rebaselines(), 1u);
}

TEST(RsfcController, ScheduledDrainConfirmsTheMinimumAndRestoresTheWindow) {
  Script s;
  s.handshake();
  s.send(ms(4800), kRate, constant(0));
  const uint32_t before = s.last().window;
  // Crosses the 5 s boundary of min_refresh: the flow drains, sees the empty buffer, returns.
  s.send(ms(700), kRate, constant(0));
  bool drained = false;
  for (const Decision& d : s.log()) {
    if (d.state == RsfcState::kMonitor) {
      drained = true;
      EXPECT_LE(d.window, before * 0.8);
    }
  }
  EXPECT_TRUE(drained);
  EXPECT_EQ(s.reg().state(), RsfcState::kSlow);
  EXPECT_GE(s.last().window, before);
}

// Start times of the drains (entries into kMonitor) in a script's log.
std::vector<Nanos> drain_starts(const Script& s) {
  std::vector<Nanos> out;
  RsfcState prev = RsfcState::kStartup;
  for (const Decision& d : s.log()) {
    if (d.state == RsfcState::kMonitor && prev != RsfcState::kMonitor) out.push_back(d.t);
    prev = d.state;
  }
  return out;
}

TEST(RsfcController, DrainPhaseMovesTheBoundary) {
  Script s;
  s.reg().set_drain_phase(ms(2500));  // boundaries at 2.5 s, 7.5 s, 12.5 s ...
  s.handshake();
  // A queue between T_low and T: the buffer never empties on its own, so every boundary
  // drains.
  s.send(13 * kSecond, kRate, constant(ms(25)));
  const auto drains = drain_starts(s);
  for (Nanos t : drains) {
    const Nanos into_period = (t + ms(2500)) % (5 * kSecond);
    EXPECT_LT(into_period, ms(200)) << t;
  }
  EXPECT_GE(drains.size(), 2u);
}

// A flow that started behind a standing queue (its siblings') took that queue for its
// minimum and its round trip, and sized its window on them. When the first drain reaches the
// empty buffer the minimum falls: the window from before the drain is not restored, the round
// trip is learned afresh and the window follows it.
TEST(RsfcController, DrainThatFindsALowerMinimumDoesNotRestoreTheInflatedWindow) {
  PathModel m;
  m.handshake_queue = ms(150);
  Script s(m);
  s.handshake();
  const Nanos empty_at = 5 * kSecond + ms(150);  // the buffer empties during the first drain
  const auto q = [empty_at](Nanos t) { return t < empty_at ? ms(150) : Nanos{0}; };
  s.send(ms(4900), kRate, q);
  const uint32_t before = s.last().window;
  // The true round trip is 15 + 15 + 20 = 50 ms: about 12.5 kB at 250 kB/s; the inflated
  // one was 200 ms.
  EXPECT_GT(before, 0.8 * kRate * 0.200);
  s.send(ms(1500), kRate, q);
  ASSERT_EQ(drain_starts(s).size(), 1u);
  // (The script's queue vanishes at once, so the delivered rate briefly reads high and the
  // window lands above one true BDP; the point is that it is not the inflated one.)
  // Every decision after the drain, the first one included.
  bool after = false;
  for (const Decision& d : s.log()) {
    if (d.state == RsfcState::kMonitor) after = true;
    if (after && d.state != RsfcState::kMonitor) {
      EXPECT_LT(d.window, 0.6 * before) << d.t;
    }
  }
  EXPECT_GE(s.last().window, 0.8 * kRate * 0.050);
  EXPECT_LE(*s.reg().rtt_used(), ms(60));
}

// A flow adopted mid-stream (a restart, docs/DESIGN.md §5a) took the queue that stood then
// for part of its minimum, and drains at once. Here its buffer drains slowly (over 1.5 s,
// longer than the drain's two steps in force) and fills again the moment the drain ends (the
// window is restored). While it drains, every sample is a new low and so "at the minimum": a
// drain that took one of them for the empty buffer, or that ended after its two steps, kept
// the rest of the queue in min(d) and in the round trip, and the hold band then kept that
// queue standing (an adopted upload settled 40 ms above its level before the restart in the
// lab). The drain goes on while min(d) falls, and ends after a step over which it held: then
// the standing queue reads as queue.
TEST(RsfcController, AdoptedDrainWaitsForTheBufferToStopDraining) {
  Script s;
  s.reg().on_adopted();
  std::optional<Nanos> drain_from;
  const auto q = [&s, &drain_from](Nanos t) -> Nanos {
    const bool draining = s.reg().state() == RsfcState::kMonitor;
    if (!draining) return drain_from ? ms(40) : ms(150);
    if (!drain_from) drain_from = t;
    const double left = 1.0 - static_cast<double>(t - *drain_from) / static_cast<double>(ms(1500));
    return static_cast<Nanos>(std::max(0.0, left) * static_cast<double>(ms(150)));
  };
  s.send(ms(4000), kRate, q);
  ASSERT_TRUE(drain_from.has_value()) << "no drain";
  ASSERT_NE(s.reg().state(), RsfcState::kMonitor);
  // Path 15 + 15 + 20 ms: the minimum round trip is 50 ms (+ an ACK's wait for the second
  // segment), the standing queue 40 ms. Confirmed while the buffer drained, the minimum kept
  // tens of ms of queue and the standing queue read as none.
  EXPECT_LE(*s.reg().rtt_min(), ms(65));
  ASSERT_TRUE(s.last().t_buff.has_value());
  EXPECT_GE(*s.last().t_buff, ms(30));
}

// An adopted flow's phone-side minimum round trip comes from the gateway's echo samples, a
// few per round trip; its min(d) from every segment. When the drain empties the buffer only
// for a moment, min(d) sees it and the echoes may not: the minimum round trip then keeps the
// queue the flow started behind, T (clamped from it) sits at its 80 ms ceiling, and a queue
// held under that T never empties to correct it (lab, restart test after kill -9: T 80 ms
// on a 40 ms path, the phone's RTT 107 ms against 64 ms before the restart, for 6 s). Here
// the buffer drains from 150 to 55 ms, is empty for 60 ms, then stands at 55 ms: min(d) sees
// the empty buffer, the minimum round trip keeps 30 ms of queue (82 ms). T must come from the
// round trip without the queue (about 58 ms here), not from that minimum (80 ms without it).
TEST(RsfcController, AdoptedFlowsThresholdFollowsTheRoundTripWithoutItsQueue) {
  Script s;
  s.reg().on_adopted();
  std::optional<Nanos> drain_from;
  const auto q = [&s, &drain_from](Nanos t) -> Nanos {
    if (!drain_from && s.reg().state() == RsfcState::kMonitor) drain_from = t;
    if (!drain_from) return ms(150);
    const Nanos since = t - *drain_from;
    if (since < ms(200)) return ms(55) + (ms(95) * (ms(200) - since)) / ms(200);
    if (since < ms(260)) return 0;
    return ms(55);
  };
  s.send(ms(6000), kRate, q);
  ASSERT_TRUE(drain_from.has_value()) << "no drain";
  ASSERT_TRUE(s.reg().rtt_min().has_value());
  std::printf("adopted: minimum round trip %.1f ms, rtt %.1f ms, t_buff %.1f ms, T %.1f ms\n",
              static_cast<double>(*s.reg().rtt_min()) / 1e6,
              static_cast<double>(s.reg().rtt_used().value_or(-1)) / 1e6,
              static_cast<double>(s.last().t_buff.value_or(-1)) / 1e6,
              static_cast<double>(s.reg().threshold()) / 1e6);
  EXPECT_LE(s.reg().threshold(), ms(65));
}

// Once a drain has confirmed the minimum, a buffer that empties on its own is the same
// evidence: no further drains (each costs the upload throughput). A buffer that stops
// emptying brings them back.
TEST(RsfcController, DrainsOnlyWhenTheBufferDoesNotEmptyOnItsOwn) {
  Script s;
  s.handshake();
  s.send(16 * kSecond, kRate, constant(0));
  const auto quiet = drain_starts(s);
  ASSERT_EQ(quiet.size(), 1u);  // the first one is unconditional
  EXPECT_LT(quiet[0], 5 * kSecond + ms(200));
  s.send(12 * kSecond, kRate, constant(ms(25)));
  const auto all = drain_starts(s);
  EXPECT_GE(all.size(), 2u);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_GE(all[i], 16 * kSecond);
}

TEST(RsfcController, TimestamplessFlowIsRegulatedToo) {
  PathModel m;
  m.timestamps = false;
  m.window_limited = true;  // the lag signal needs a phone that uses its window
  Script s(m);
  s.params().min_refresh = 60 * kSecond;
  s.handshake();
  s.send(3 * kSecond, kRate, constant(0));
  EXPECT_FALSE(s.reg().timestamps());
  ASSERT_FALSE(s.log().empty());
  EXPECT_EQ(s.reg().state(), RsfcState::kSlow);
  EXPECT_GE(s.last().window, kRate * 0.05);  // grew to the flow's BDP
  // A 300 ms delay appears in the phone's buffer: the window-opening lag shows it, the
  // controller cuts to about one BDP.
  const size_t mark = s.log().size();
  s.send(4 * kSecond, kRate, constant(ms(300)));
  bool cut = false;
  for (size_t i = mark; i < s.log().size(); ++i) {
    const Decision& d = s.log()[i];
    if (d.state == RsfcState::kFast && d.window <= kRate * 0.1) cut = true;
  }
  EXPECT_TRUE(cut);
  // Here the delay is scripted, the clamp cannot remove it: after the drain fails it becomes
  // the new baseline (without timestamps a downlink queue looks just like it) and the flow
  // grows again instead of starving.
  EXPECT_EQ(s.reg().state(), RsfcState::kSlow);
  ASSERT_TRUE(s.reg().t_buff());
  EXPECT_LT(*s.reg().t_buff(), ms(50));
}

TEST(RsfcController, NFlowsSharingOneBufferGrowLikeOne) {
  // One flow at rate R versus four flows at R/4 each, same path, buffer empty: with growth
  // proportional to each flow's own window, the four windows add up to the one window.
  // 8 Mbit/s: windows of many MSS (with 2 MSS of headroom per flow, four tiny flows would
  // need more than one tiny flow, whatever the growth rule).
  auto run = [](int n) {
    std::vector<std::unique_ptr<Script>> flows;
    double total = 0;
    for (int i = 0; i < n; ++i) {
      auto s = std::make_unique<Script>();
      s->handshake();
      s->send(ms(1500), 4 * kRate / n, constant(0));
      total += s->last().window;
      flows.push_back(std::move(s));
    }
    return total;
  };
  const double one = run(1);
  const double four = run(4);
  EXPECT_NEAR(four, one, one * 0.2);
}

// --- Closed loop: the packet simulator ---------------------------------------------------

using sim::Result;
using sim::Scenario;

Scenario three_g() {
  return {};
}  // 2 Mbit/s up / 1 MB, 7.2 Mbit/s down / 256 KB, 40 ms
Scenario lte() {
  Scenario s;
  s.up_bps = 10e6;
  s.up_buffer = 2'000'000;
  s.down_bps = 30e6;
  s.down_buffer = 1'000'000;
  s.p1 = 20 * kMilli;
  s.p2 = 10 * kMilli;  // 60 ms
  return s;
}

Result run(Scenario s, const char* label) {
  const Result r = sim::simulate(s);
  std::printf("  %-34s %s\n", label, r.summary().c_str());
  return r;
}

struct LinkCase {
  const char* name;
  Scenario (*make)();
};

class SimLinks : public ::testing::TestWithParam<LinkCase> {};

// Upload alone: the standing queue settles under about T and the link stays full.
TEST_P(SimLinks, UploadAloneQueueSettlesLinkStaysFull) {
  Scenario base = GetParam().make();
  base.downloads = 0;
  const Result off = run(base, "upload alone, off");
  Scenario reg = base;
  reg.uplink = Policy::kRsfc;
  const Result r = run(reg, "upload alone, rsfc");
  EXPECT_GT(off.upq_p95_ms, 1000);  // the problem exists
  // The queue holds between probe_below * T and T (T = 40 ms here) without a sawtooth.
  EXPECT_LT(r.upq_p95_ms, 60);
  EXPECT_LT(r.upq_mean_ms, 45);
  EXPECT_GE(r.upload_bps, 0.95 * off.upload_bps);
  EXPECT_EQ(r.up_drops, 0u);
}

// The lab's scenario: a download and a concurrent upload. The simulator couples the two
// directions more tightly than the lab (its download keeps 87-89 % here, 95 % in the lab:
// lab/scenarios.py), so the download bound is looser than the lab's target; the upload's is
// the lab's.
TEST_P(SimLinks, DownloadAndUploadBothKeepTheirThroughput) {
  Scenario base = GetParam().make();
  Scenario alone = base;
  alone.uploads = 0;
  const Result d_alone = run(alone, "download alone");
  const Result off = run(base, "download + upload, off");
  Scenario reg = base;
  reg.uplink = Policy::kRsfc;
  const Result r = run(reg, "download + upload, rsfc");
  EXPECT_LT(off.download_bps, 0.3 * d_alone.download_bps);  // the problem exists
  EXPECT_GE(r.download_bps, 0.85 * d_alone.download_bps);
  EXPECT_GE(r.upload_bps, 0.9 * off.upload_bps);
  EXPECT_LE(r.ping_p95_ms, d_alone.ping_p95_ms + 100);
}

INSTANTIATE_TEST_SUITE_P(Links, SimLinks,
                         ::testing::Values(LinkCase{"hspa_2_7", three_g},
                                           LinkCase{"lte_10_30", lte}),
                         [](const auto& p) { return std::string(p.param.name); });

// A restarted daemon adopts an upload mid-stream (docs/DESIGN.md §5a): its new controller
// starts behind the queue that stood then and would take it for part of its minimum until the
// first scheduled drain (seconds later). Told it was adopted, it drains at once.
// One rsfc upload on the 3G link (and `downloads` downloads, the downlink knob off); the
// daemon restarts at `at` for 100 ms (sim::Scenario::restart_at).
sim::Scenario restart_on_3g(uint32_t seed, int downloads, Nanos at) {
  sim::Scenario s = sim::three_g_link();
  s.uploads = 1;
  s.downloads = downloads;
  s.uplink = Policy::kRsfc;
  s.seed = seed;
  s.restart_at = at;
  s.restart_gap = 100 * kMilli;
  return s;
}

// The median uplink queue (ms) of a run over [from, to).
double uplink_queue_p50(const sim::Result& r, Nanos from, Nanos to) {
  std::vector<double> q;
  for (const auto& x : r.samples) {
    if (x.t >= from && x.t < to) q.push_back(x.upq_ms);
  }
  return sim::percentile(q, 0.5);
}

TEST(SimRsfc, AdoptedUploadDrainsTheQueueItStartedBehindAtOnce) {
  auto queue_after_restart = [](bool adopt_drains, uint32_t seed) {
    sim::Scenario s = restart_on_3g(seed, 0, 8 * kSecond);
    s.warmup = 8 * kSecond;
    s.adopt_drains = adopt_drains;
    // A 64 KB startup floor (initial_window_bytes 0), under which the restarted regulator's
    // startup clamp leaves the queue standing. Under the default 16 KB floor the clamp alone
    // takes it to 26-44 ms, and the drain at once to 8-20 ms.
    s.rsfc.initial_window_bytes = 0;
    s.duration = 12 * kSecond;
    sim::Simulation sim(s);
    // The uplink queue 1-4 s after the restart.
    return uplink_queue_p50(sim.run(), s.restart_at + 1 * kSecond, s.restart_at + 4 * kSecond);
  };
  for (uint32_t seed : {0u, 1u, 2u}) {
    const double adopted = queue_after_restart(true, seed);
    const double later = queue_after_restart(false, seed);
    std::printf(
        "seed %u: uplink queue p50 1-4 s after the restart %.0f ms (first drain at "
        "once) vs %.0f ms (at the first boundary)\n",
        seed, adopted, later);
    EXPECT_LT(adopted, 40.0) << "seed " << seed;
    EXPECT_GT(later, 100.0) << "seed " << seed << ": without the drain the queue stands";
  }
}

// The same restart with a download running (the downlink knob off, as in the upload's own
// test): the restarted daemon sees no handshake, so the upload's tick comes from the echoes,
// and the download filling the phone's downlink buffer while nobody regulated stretches the
// first echo span until it fits no clock. With one try the slopes took 4 s and the uplink
// queue grew to 2 s, held for seconds more (0.75-1.8 s 4-7 s after the restart); the retried
// hint (DESIGN.md §3.1) brings the queue back to its level before the restart within 4 s.
TEST(SimRsfc, AdoptedUploadNextToADownloadIsRegulatedWithinSeconds) {
  for (uint32_t seed : {0u, 1u, 2u}) {
    sim::Scenario s = restart_on_3g(seed, 1, 8 * kSecond + seed * 37 * kMilli);
    s.warmup = 2 * kSecond;
    s.duration = s.restart_at + 7 * kSecond;
    sim::Simulation sim(s);
    const sim::Result r = sim.run();
    // The uplink queue 4-0 s before and 4-7 s after the restart.
    const double b = uplink_queue_p50(r, s.restart_at - 4 * kSecond, s.restart_at);
    const double a = uplink_queue_p50(r, s.restart_at + 4 * kSecond, s.duration);
    std::printf("seed %u: uplink queue p50 %.0f ms before the restart, %.0f ms 4-7 s after\n", seed,
                b, a);
    EXPECT_LT(a, b + 50.0) << "seed " << seed;
  }
}

TEST(SimRsfc, PhoneTicksOtherThanOneMillisecond) {
  for (Nanos tick : {4 * kMilli, 10 * kMilli, Nanos{3'333'333}}) {
    Scenario s = three_g();
    s.downloads = 0;
    s.uplink = Policy::kRsfc;
    s.phone_tick = tick;
    const Result r = run(s, ("upload alone, tick " + std::to_string(tick) + " ns").c_str());
    EXPECT_LT(r.upq_p95_ms, 60);
    EXPECT_GE(r.upload_bps, 0.95 * 1.9e6);
  }
}

TEST(SimRsfc, TimestamplessPhone) {
  Scenario s = three_g();
  s.phone_timestamps = false;
  s.downloads = 0;
  s.uplink = Policy::kRsfc;
  const Result alone = run(s, "no timestamps, upload alone");
  EXPECT_LT(alone.upq_p95_ms, 100);
  EXPECT_GE(alone.upload_bps, 0.95 * 1.9e6);
  // With a download the phone-side round trip includes its downlink queue: weaker, but the
  // download is protected and the upload is not starved.
  s.downloads = 1;
  const Result both = run(s, "no timestamps, download + upload");
  EXPECT_GE(both.download_bps, 0.85 * 6.9e6);
  EXPECT_GE(both.upload_bps, 0.6 * 1.9e6);
}

TEST(SimRsfc, FourUploadsShareTheBuffer) {
  Scenario s = three_g();
  s.downloads = 0;
  s.uploads = 4;
  const Result off = run(s, "4 uploads, off");
  s.uplink = Policy::kRsfc;
  const Result r = run(s, "4 uploads, rsfc");
  s.subscriber_state = false;
  const Result own = run(s, "4 uploads, rsfc, each flow on its own rate");
  EXPECT_GE(r.upload_bps, 0.95 * off.upload_bps);
  // One link rate per subscriber (SubscriberUplink): each flow's window is sized on its share
  // of the phone's link, so the windows add up to one BDP plus the fast state's queue instead
  // of one per flow, and the shares are pulled toward equal. Measured: mean queue 51 ms,
  // p95 68 ms, Jain 0.99; each flow on its own rate: 144 / 214 ms, Jain 0.69 (off: 3.6 s).
  EXPECT_LT(r.upq_mean_ms, 100);
  EXPECT_LT(r.upq_p95_ms, 150);
  EXPECT_GT(r.jain, 0.9);
  EXPECT_LT(r.upq_mean_ms, 0.7 * own.upq_mean_ms);
  EXPECT_EQ(r.up_drops, 0u);
}

TEST(SimRsfc, UploadsOfOnePhoneKeepTheBufferShortWithAndWithoutADownload) {
  // 2, 3 and 6 uploads, started together or 0.5 s apart, with and without a download. The
  // uploads alone run in five phases (Scenario::seed): the shares of six staggered uploads
  // land anywhere in Jain 0.92-0.97 by phase alone, with either startup floor.
  Scenario dl = three_g();
  dl.uploads = 0;
  const Result alone = run(dl, "download alone");
  for (int ups : {2, 3, 6}) {
    for (Nanos stagger : {Nanos{0}, ms(500)}) {
      for (int downloads : {0, 1}) {
        std::vector<double> jain;
        for (uint32_t seed = 0; seed < (downloads == 0 ? 5u : 1u); ++seed) {
          Scenario s = three_g();
          s.uploads = ups;
          s.upload_stagger = stagger;
          s.downloads = downloads;
          s.uplink = Policy::kRsfc;
          s.seed = seed;
          const Result r = sim::simulate(s);
          std::printf("  %d uploads +%.1f s, %d download, phase %u: %s\n", ups,
                      static_cast<double>(stagger) / 1e9, downloads, seed, r.summary().c_str());
          if (downloads == 0) {
            EXPECT_LT(r.upq_mean_ms, 100);  // measured 46-89 ms (each flow on its own: 113-153)
            EXPECT_GT(r.jain, 0.9);         // 0.92-1.00 (0.54-1.00)
            EXPECT_GE(r.upload_bps, 0.95 * 1.92e6);
            jain.push_back(r.jain);
            continue;
          }
          // Download 93-97 % of alone (each flow on its own: 87-91 %); the uploads 1.64-1.73
          // Mbit/s (own rates: 1.73-1.79).
          EXPECT_GE(r.download_bps, 0.92 * alone.download_bps);
          EXPECT_GE(r.upload_bps, 0.8 * 1.92e6);
        }
        if (!jain.empty()) {
          std::sort(jain.begin(), jain.end());
          EXPECT_GT(jain[jain.size() / 2], 0.95) << ups << " uploads: the median phase";
        }
      }
    }
  }
}

TEST(SimRsfc, ALateSiblingDoesNotTakeTheQueueForAPath) {
  // A second upload joins 3 s after the first, behind its queue. Its first drain is its own
  // (the first flow may skip that boundary: its buffer emptied within the period), so the
  // queue it sees stays put while its own data stops: that must not count as a longer path.
  for (Nanos stagger : {3 * kSecond, ms(3500), 4 * kSecond}) {
    Scenario s = three_g();
    s.downloads = 0;
    s.uploads = 2;
    s.upload_stagger = stagger;
    s.uplink = Policy::kRsfc;
    sim::Simulation sim(s);
    const Result r = sim.run();
    std::printf("  2 uploads, +%.1f s: %s\n", static_cast<double>(stagger) / 1e9,
                r.summary().c_str());
    EXPECT_EQ(sim.uplink_regulator(0).path_rebaselines(), 0u);
    EXPECT_EQ(sim.uplink_regulator(1).path_rebaselines(), 0u);
    EXPECT_LT(r.upq_mean_ms, 200);
  }
}

TEST(SimRsfc, LinkOutagesDoNotCollapseTheWindow) {
  // 400 ms outages every 3 s (radio link stalls): the window must not be cut below one BDP
  // after each outage, so the upload keeps most of the capacity the outages leave.
  Scenario s = three_g();
  s.downloads = 0;
  for (Nanos t = 2 * kSecond; t < s.duration; t += 3 * kSecond) {
    s.up_outages.push_back({t, t + ms(400)});
  }
  const Result off = run(s, "outages, off");
  s.uplink = Policy::kRsfc;
  const Result r = run(s, "outages, rsfc");
  EXPECT_GE(r.upload_bps, 0.9 * off.upload_bps);
  EXPECT_LT(r.upq_mean_ms, 200);
}

TEST(SimRsfc, LongerPathIsNotTakenForAQueue) {
  // At 15 s the path between phone and gateway grows by 100 ms each way (a route change, a
  // handover to a farther site), with a download running: d = arrival - TSval rises by
  // 100 ms and reads exactly like a standing queue. Until the old min(d) ages out of the 10 s
  // horizon the controller would keep cutting the window against a queue that is not there;
  // the scheduled drain at 20 s must show it the path instead (the queue does not shrink and
  // the flow's data no longer arrives at its rate).
  Scenario s = three_g();
  const Nanos step = 15 * kSecond;
  s.p1_steps.push_back({step, 110 * kMilli});
  s.warmup = 18 * kSecond;
  s.duration = 30 * kSecond;
  s.uplink = Policy::kStatic;
  const Result st = run(s, "path +200 ms RTT, static 64K");
  s.uplink = Policy::kRsfc;
  sim::Simulation sim(s);
  Nanos recognised = 0;
  int after = 0, low_after = 0;
  sim.on_step = [&](int, Nanos now, const UplinkRegulator& r) {
    if (now < step + ms(500) || !r.t_buff()) return;
    const bool low = *r.t_buff() < r.threshold();
    if (low && recognised == 0) recognised = now;
    if (recognised > 0) {
      ++after;
      low_after += low ? 1 : 0;
    }
  };
  const Result r = sim.run();
  std::printf("  %-34s %s\n", "path +200 ms RTT, rsfc", r.summary().c_str());
  std::printf("  t_buff below T from %.2f s, then in %d of %d steps\n",
              static_cast<double>(recognised) / 1e9, low_after, after);
  ASSERT_GT(recognised, 0);
  // The next scheduled drain (20 s) plus the 1 s check, well before the horizon (25 s).
  EXPECT_LT(recognised, 23 * kSecond);
  EXPECT_GE(low_after, after * 8 / 10);
  EXPECT_GE(r.upload_bps, st.upload_bps);
  EXPECT_LE(r.ping_p95_ms, st.ping_p95_ms + 100);
}

// --- Capacity steps ------------------------------------------------------------------------

// The uplink queue and the uploads' goodput over [from, to] of a run (its samples).
struct Span {
  double q_mean_ms = 0, q_p95_ms = 0, q_max_ms = 0, upload_bps = 0;
};
Span span(const Result& r, Nanos from, Nanos to) {
  std::vector<double> q;
  uint64_t first = 0, last = 0;
  Nanos t_first = 0, t_last = 0;
  for (const sim::Sample& x : r.samples) {
    if (x.t < from || x.t > to) continue;
    if (q.empty()) {
      first = x.up_delivered;
      t_first = x.t;
    }
    last = x.up_delivered;
    t_last = x.t;
    q.push_back(x.upq_ms);
  }
  Span out;
  if (q.size() < 2) {
    ADD_FAILURE() << "no samples in the span";
    return out;
  }
  double sum = 0;
  for (double v : q) sum += v;
  out.q_mean_ms = sum / static_cast<double>(q.size());
  out.q_p95_ms = sim::percentile(q, 0.95);
  out.q_max_ms = *std::max_element(q.begin(), q.end());
  out.upload_bps =
      static_cast<double>(last - first) * 8.0 / (static_cast<double>(t_last - t_first) / 1e9);
  return out;
}

// The simulator's rate schedule: a packet is sent at whatever rate applies while it is on the
// wire, and packets queued before a drop wait at the new rate (otherwise a drop would only
// reach the queue after the old backlog had left at the old rate).
TEST(SimLink, RateStepAppliesToPacketsAlreadyQueued) {
  sim::EventQueue ev;
  sim::Link link(ev, 8e6, 1'000'000, 0);  // 1 byte per microsecond
  link.rate_steps.push_back({ms(1), 0.8e6});
  std::vector<Nanos> delivered;
  link.deliver = [&](const sim::Packet&) { delivered.push_back(ev.now()); };
  sim::Packet p;
  p.seg.payload_len = 1000;  // 1052 bytes on the wire
  ev.at(0, [&] {
    link.send(p);
    link.send(p);
  });
  ev.run_until(kSecond);
  ASSERT_EQ(delivered.size(), 2u);
  // 1000 bytes in the first millisecond, the other 52 at a tenth of the rate: 0.52 ms.
  EXPECT_NEAR(static_cast<double>(delivered[0]), 1.52e6, 1e3);
  // The second one was queued before the step and is sent entirely after it: 10.52 ms.
  EXPECT_NEAR(static_cast<double>(delivered[1]), 1.52e6 + 10.52e6, 1e3);
}

// Goodput of a full link: 1448 payload bytes per 1500 on the wire.
constexpr double goodput(double bps) {
  return bps * 1448.0 / 1500.0;
}

// One run of a capacity step: upload alone on `link`, its uplink rate going from `before` to
// `after` at `at`, samples from 5 s on, 10 s after the step.
struct StepRun {
  Nanos at;
  Nanos upload_start;
  std::string label() const {
    char b[64];
    std::snprintf(b, sizeof b, "step at %.2f s, upload +%.3f s", static_cast<double>(at) / 1e9,
                  static_cast<double>(upload_start) / 1e9);
    return b;
  }
};
Scenario capacity_step(Scenario link, double before, double after, const StepRun& run,
                       Policy uplink) {
  link.downloads = 0;
  link.up_bps = before;
  link.up_rate_steps.push_back({run.at, after});
  link.upload_start = run.upload_start;
  link.uplink = uplink;
  link.warmup = 5 * kSecond;
  link.duration = run.at + 10 * kSecond;
  return link;
}
// Scheduled drains follow the gateway's clock (min_refresh = 5 s): the step falls at 0, 1/4,
// 1/2 and 3/4 of a drain period, with two start phases of the upload. (The simulation is
// deterministic; the runs cover where a step can land rather than average noise.)
std::vector<StepRun> step_runs() {
  std::vector<StepRun> out;
  for (Nanos at : {ms(15000), ms(16250), ms(17500), ms(18750)}) {
    for (Nanos start : {Nanos{0}, ms(311)}) out.push_back({at, start});
  }
  return out;
}

void print_span(const char* what, const StepRun& run, const Span& x) {
  std::printf("  %-30s %s: upq mean %.0f p95 %.0f max %.0f ms, up %.2f Mbit/s\n", what,
              run.label().c_str(), x.q_mean_ms, x.q_p95_ms, x.q_max_ms, x.upload_bps / 1e6);
}

// 2 -> 0.5 Mbit/s on the 3G link (1 MB buffer, 40 ms). Unregulated, the sender keeps the
// buffer full: 16 s of queue at the new rate. The window rsfc had at the drop (one BDP +
// 0.75 T at 2 Mbit/s, about 18 KB) is 300 ms of queue at the new rate; rho is a windowed
// maximum over >= 1 s, so the controller learns the new rate about a second late and must
// then cut to the new BDP. From drop + 2 s the queue must hold under T plus the granularity
// of the link: auto T <= threshold_ceiling (80 ms; RTT_min itself grows by the longer
// serialization), and at 0.5 Mbit/s a 1500-byte packet takes 24 ms while the whole new BDP
// is about two of them: bound 80 + 2 x 24 ~ 130 ms p95.
// Measured over the 8 runs, drop + 2..10 s: rsfc queue mean 57-82 ms, p95 79-104 ms, goodput
// 0.47-0.48 Mbit/s (97-99 % of the link); off: p95 15.2-16.0 s. Drop + 0..2 s: rsfc max
// 251-334 ms (bound: twice the pre-drop window's 300 ms). Fails with a fast state that does
// not cut (fast_target 100: p95 156-177 ms, mean 101-129) and with T = 10 s (p95 7.8-11 s).
// min(d) was measured at the old rate, so until it ages out (at most the 10 s horizon)
// t_buff over-reads by the longer transmission of a packet (24 - 6 = 18 ms), inside the hold
// band [T_low, T]. Without the slow state's one-packet allowance (a reading within one
// packet's time at the link's rate counts as empty) the flow stopped probing there and used
// 0.42-0.48 Mbit/s (86-98 %; 0.38 for some seconds), which the 90 % bound below catches.
TEST(SimRsfc, CapacityDropBringsTheQueueBackWithinSeconds) {
  for (const StepRun& run : step_runs()) {
    const Result off = sim::simulate(capacity_step(three_g(), 2e6, 0.5e6, run, Policy::kOff));
    const Result r = sim::simulate(capacity_step(three_g(), 2e6, 0.5e6, run, Policy::kRsfc));
    const Span off_after = span(off, run.at + 2 * kSecond, run.at + 10 * kSecond);
    const Span transient = span(r, run.at, run.at + 2 * kSecond);
    const Span after = span(r, run.at + 2 * kSecond, run.at + 10 * kSecond);
    print_span("drop, off, +2..10 s", run, off_after);
    print_span("drop, rsfc, +0..2 s", run, transient);
    print_span("drop, rsfc, +2..10 s", run, after);
    EXPECT_GT(off_after.q_p95_ms, 5000) << run.label();  // the problem exists
    EXPECT_LT(transient.q_max_ms, 600) << run.label();   // the pre-drop window, not the buffer
    EXPECT_LT(after.q_p95_ms, 130) << run.label();
    EXPECT_LT(after.q_mean_ms, 100) << run.label();
    EXPECT_GE(after.upload_bps, 0.9 * goodput(0.5e6)) << run.label();
    EXPECT_EQ(r.up_drops, 0u) << run.label();
  }
}

// A rise: the buffer runs empty at once, and the window must grow to the new BDP within a
// second or two without building a queue (unregulated: the whole buffer, 4 s on 3G, 1.6 s on
// LTE). Measured over the 8 runs, rise + 0.5..2.5 s, and the queue over rise + 0.5..10 s:
//   3G  0.5 -> 2 Mbit/s:  1.92 Mbit/s (99.6 % of the link); queue mean 32-40, p95 38-62 ms.
//   LTE 2.5 -> 10 Mbit/s: 9.39-9.65 Mbit/s (97-100 %); queue mean 31-39, p95 34-41 ms.
// On 3G the window held at 0.5 Mbit/s (rho x (RTT + 0.75 T) with T at the 80 ms ceiling,
// about 9 KB) already covers most of the new BDP (about 11.5 KB): that case passes even
// without multiplicative growth. LTE's new BDP (75 KB) is about 2.5 times the old window, so
// there the probe must do it: with growth_per_rtt 0 the upload reaches only 4.9-6.7 Mbit/s in
// that span. With T = 10 s both fail the queue bound (p95 1.4-2.2 s).
TEST(SimRsfc, CapacityRiseIsProbedWithinSeconds) {
  struct Rise {
    const char* name;
    Scenario (*link)();
    double before, after;
  };
  for (const Rise& c : {Rise{"3G", three_g, 0.5e6, 2e6}, Rise{"LTE", lte, 2.5e6, 10e6}}) {
    for (const StepRun& run : step_runs()) {
      const std::string label = std::string(c.name) + ", " + run.label();
      const Result r =
          sim::simulate(capacity_step(c.link(), c.before, c.after, run, Policy::kRsfc));
      const Span before = span(r, run.at - 3 * kSecond, run.at);
      const Span reach = span(r, run.at + ms(500), run.at + ms(2500));
      const Span after = span(r, run.at + ms(500), run.at + 10 * kSecond);
      std::printf("  %s\n", label.c_str());
      print_span("rise, rsfc, -3..0 s", run, before);
      print_span("rise, rsfc, +0.5..2.5 s", run, reach);
      print_span("rise, rsfc, +0.5..10 s", run, after);
      EXPECT_LT(before.upload_bps, 1.01 * goodput(c.before)) << label;  // the old rate held
      EXPECT_GE(reach.upload_bps, 0.85 * goodput(c.after)) << label;
      EXPECT_LT(after.q_mean_ms, 60) << label;  // probing stops at the new link's queue
      EXPECT_LT(after.q_p95_ms, 100) << label;
      EXPECT_EQ(r.up_drops, 0u) << label;
    }
  }
}

// --- Variable links --------------------------------------------------------------------------

// The trace-driven service (test/sim_trace_link.h) plays a schedule as rsfc-linkem does: each
// opportunity lets 1500 bytes leave, a packet may use several, and what nothing queued at an
// opportunity's time could use is lost.
TEST(SimLink, TraceServiceFollowsTheOpportunities) {
  auto trace = std::make_shared<sim::CapacityTrace>();
  trace->offsets = {ms(1), ms(1), ms(5), ms(10)};
  trace->period = ms(10);
  sim::EventQueue ev;
  sim::Link link(ev, 1e6, 1'000'000, 0);
  link.service = sim::TraceService(trace, 0);
  std::vector<Nanos> delivered;
  link.deliver = [&](const sim::Packet&) { delivered.push_back(ev.now()); };
  sim::Packet full, part;
  full.seg.payload_len = 1448;  // 1500 bytes
  part.seg.payload_len = 648;   // 700 bytes
  ev.at(0, [&] {
    for (const sim::Packet* p : {&full, &full, &part, &part}) link.send(*p);
  });
  ev.at(ms(6), [&] { link.send(full); });   // the 100 bytes left at 5 ms are gone
  ev.at(ms(12), [&] { link.send(full); });  // 11 ms has passed: the next one is at 15 ms
  ev.run_until(kSecond);
  const std::vector<Nanos> expected = {ms(1), ms(1), ms(5), ms(5), ms(10), ms(15)};
  EXPECT_EQ(delivered, expected);
  // Opportunities at 1, 1, 5 and 10 ms, then at 11, 11, 15, 20 ms: six in [0, 12 ms).
  EXPECT_EQ(trace->opportunities(0, ms(12)), 6u);
  const sim::CapacityTrace flat = sim::schedule_of({{0, 2e6}, {ms(500), 0}}, kSecond, "flat");
  EXPECT_NEAR(flat.payload_bps(0, kSecond), 1e6 * 1448 / 1500, 1e4);  // half a second of 2 Mbit/s
}

// Variable links, download and upload together as in lab/experiments.py trace: the three
// capacity traces of lab/traces at kVarRuns start offsets each, spread over the trace (1 MB up
// / 512 KB down drop-tail, 50 ms base RTT, 35 s, the first 10 s not measured), the 3G link with
// radio outages of 0.2-3 s in both directions, and the uplink's capacity swinging 4x every 1-6
// s on 3G and LTE (kVarRuns seeds each). Shares are of what the link offered in the measured
// window (payload of 1448 per 1500-byte opportunity); "dl alone" is the download without the
// upload, unregulated. The simulation is deterministic: the runs cover where in a trace, or
// in a schedule, a flow can find itself, and the medians are over them.
constexpr int kVarRuns = 9;
struct VarCase {
  std::string group;
  sim::Scenario sc;
  std::shared_ptr<const sim::CapacityTrace> up, down;
  Nanos start = 0;  // into the schedules
};

std::shared_ptr<const sim::CapacityTrace> lab_trace(const std::string& file) {
  auto t = std::make_shared<sim::CapacityTrace>(
      sim::CapacityTrace::load(std::string(RSFC_SOURCE_DIR) + "/lab/traces/" + file));
  EXPECT_TRUE(t->valid()) << file;
  return t;
}

std::vector<VarCase> trace_cases(const std::string& name) {
  std::vector<VarCase> out;
  const auto up = lab_trace(name + ".up");
  const auto down = lab_trace(name + ".down");
  if (!up->valid() || !down->valid()) return out;
  // From 7 s in (LTE's first seconds are an outage), kVarRuns starts up to 35 s before the end.
  const Nanos span = std::min(up->period, down->period) - 7 * kSecond - 35 * kSecond;
  for (int i = 0; i < kVarRuns; ++i) {
    const Nanos start = 7 * kSecond + span / kVarRuns * i / kSecond * kSecond;
    VarCase c{name, three_g(), up, down, start};
    c.sc.up_buffer = 1'000'000;
    c.sc.down_buffer = 512'000;
    c.sc.p1 = ms(20);
    c.sc.p2 = ms(5);
    c.sc.duration = 35 * kSecond;
    c.sc.warmup = 10 * kSecond;
    c.sc.shape_links = sim::trace_links(up, down, c.start);
    out.push_back(c);
  }
  return out;
}

// 3G with outages in both directions: connected for 2-8 s, then out for 0.2, 0.5, 1, 2 or 3 s.
VarCase outage_case(uint32_t seed) {
  std::mt19937 rng(seed);
  const Nanos period = 40 * kSecond;
  const Nanos lengths[] = {ms(200), ms(500), ms(1000), ms(2000), ms(3000)};
  std::vector<sim::RateSpan> up, down;
  for (Nanos t = 0; t < period;) {
    up.push_back({t, 2e6});
    down.push_back({t, 7.2e6});
    t += ms(2000) + static_cast<Nanos>(rng() % 6000) * kMilli;
    if (t >= period) break;
    up.push_back({t, 0});
    down.push_back({t, 0});
    t += lengths[rng() % 5];
  }
  VarCase c{"3g outages", three_g(),
            std::make_shared<sim::CapacityTrace>(sim::schedule_of(up, period, "up")),
            std::make_shared<sim::CapacityTrace>(sim::schedule_of(down, period, "down"))};
  c.sc.shape_links = sim::trace_links(c.up, c.down, 0);
  return c;
}

// The uplink alternating between `high` and high / 4 every 1-6 s; the downlink constant.
VarCase swing_case(const char* group, Scenario link, double high, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<sim::RateSpan> up;
  bool is_high = seed % 2 == 1;
  for (Nanos t = 0; t < link.duration; t += ms(1000) + static_cast<Nanos>(rng() % 5000) * kMilli) {
    up.push_back({t, is_high ? high : high / 4});
    is_high = !is_high;
  }
  VarCase c{group, link,
            std::make_shared<sim::CapacityTrace>(sim::schedule_of(up, link.duration, "up")),
            std::make_shared<sim::CapacityTrace>(
                sim::schedule_of({{0, link.down_bps}}, link.duration, "down"))};
  c.sc.shape_links = sim::trace_links(c.up, nullptr, 0);
  return c;
}

struct VarPolicy {
  std::string name;
  Policy uplink;
  uint32_t static_window = 0;
  int uploads = 1;  // 0: the download alone
};
std::vector<VarPolicy> var_policies() {
  return {{"dl alone", Policy::kOff, 0, 0},    {"off", Policy::kOff},
          {"32 KB", Policy::kStatic, 32768},   {"64 KB", Policy::kStatic, 65536},
          {"128 KB", Policy::kStatic, 131072}, {"rsfc", Policy::kRsfc}};
}

struct VarCell {
  double up_pct = 0, down_pct = 0, p50_ms = 0, p95_ms = 0;
};
VarCell run_var(const VarCase& c, const VarPolicy& p) {
  Scenario s = c.sc;
  s.uplink = p.uplink;
  s.static_window = p.static_window;
  s.uploads = p.uploads;
  const Result r = sim::simulate(s);
  const Nanos a = s.warmup + c.start, b = s.duration + c.start;
  const double down_cap = c.down ? c.down->payload_bps(a, b) : goodput(s.down_bps);
  return {100 * r.upload_bps / c.up->payload_bps(a, b), 100 * r.download_bps / down_cap,
          r.ping_p50_ms, r.ping_p95_ms};
}

// Median and range of one metric over a group's runs.
struct Spread {
  double median = 0, lo = 0, hi = 0;
};
Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return {};
  return {n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}
struct VarRow {
  Spread up, down, worse, p50, p95;  // worse: min(up, down) of each run
};
// Runs every policy on every case of a group; prints and returns one row per policy.
std::map<std::string, VarRow> run_group(const std::vector<VarCase>& cases) {
  std::map<std::string, VarRow> rows;
  if (cases.empty()) return rows;
  std::printf("  %s, %zu runs: median [min-max]\n", cases[0].group.c_str(), cases.size());
  for (const VarPolicy& p : var_policies()) {
    std::vector<double> up, down, worse, p50, p95;
    for (const VarCase& c : cases) {
      const VarCell x = run_var(c, p);
      up.push_back(x.up_pct);
      down.push_back(x.down_pct);
      worse.push_back(std::min(x.up_pct, x.down_pct));
      p50.push_back(x.p50_ms);
      p95.push_back(x.p95_ms);
    }
    const VarRow row{spread(up), spread(down), spread(worse), spread(p50), spread(p95)};
    std::printf(
        "    %-8s up %5.1f %% [%5.1f-%5.1f]  down %5.1f %% [%5.1f-%5.1f]  min %5.1f %%  ping p50 "
        "%5.0f  p95 %5.0f [%5.0f-%5.0f] ms\n",
        p.name.c_str(), row.up.median, row.up.lo, row.up.hi, row.down.median, row.down.lo,
        row.down.hi, row.worse.median, row.p50.median, row.p95.median, row.p95.lo, row.p95.hi);
    rows[p.name] = row;
  }
  return rows;
}

TEST(SimVarlink, CapacityTraces) {
  for (const char* name : {"Verizon-LTE-short", "TMobile-UMTS-driving", "Verizon-EVDO-driving"}) {
    const auto rows = run_group(trace_cases(name));
    ASSERT_EQ(rows.size(), var_policies().size()) << name;
    EXPECT_GT(rows.at("off").p95.median, 2000) << name;  // the problem exists
    if (std::string(name).find("LTE") == std::string::npos) continue;
    // LTE: the worse direction above every static clamp's (simulated: 64 % against 28 % for
    // 128 KB). On the UMTS and EV-DO traces the 128 KB clamp keeps more of the upload: there a
    // download's queue of seconds sets the round trip, and growth per round trip is slow.
    for (const char* clamp : {"32 KB", "64 KB", "128 KB"}) {
      EXPECT_GT(rows.at("rsfc").worse.median, rows.at(clamp).worse.median) << clamp;
    }
  }
}

// Every packet of a phone without timestamps (PhoneUplinkIdle): a gap beyond 1.5 of its
// packet's time at the capacity is idle time less that packet time; gaps under 3 of it are
// back to back and counted with their spread.
TEST(PhoneUplinkIdle, IdleTimeIsTheGapsBeyondTheirPacketsTime) {
  PhoneUplinkIdle u;
  u.on_packet(kSecond, 1000);  // no capacity yet: bytes only
  u.on_packet(kSecond + kMilli, 1000);
  EXPECT_EQ(u.counts().bytes, 2000u);
  EXPECT_EQ(u.counts().idle, 0u);
  EXPECT_EQ(u.counts().gaps, 0u);
  u.set_capacity(1e6);                                    // 1000 bytes: 1 ms
  u.on_packet(kSecond + 2 * kMilli, 1000);                // back to back (x 1)
  u.on_packet(kSecond + 3 * kMilli + kMilli / 2, 1000);   // 1.5 ms: not idle (x 1.5)
  u.on_packet(kSecond + 13 * kMilli + kMilli / 2, 1000);  // 10 ms: 9 ms idle, not even
  u.on_packet(kSecond + 15 * kMilli + kMilli / 2, 500);   // 2 ms for 0.5 ms: 1.5 ms idle
  const PhoneUplinkIdle::Counts& c = u.counts();
  EXPECT_EQ(c.bytes, 5500u);
  EXPECT_EQ(c.idle, static_cast<uint64_t>(9 * kMilli + 3 * kMilli / 2));
  EXPECT_EQ(c.gaps, 2u);
  EXPECT_EQ(c.x1, static_cast<uint64_t>(2.5 * PhoneUplinkIdle::kXUnit));
  EXPECT_EQ(c.x2, static_cast<uint64_t>(3.25 * PhoneUplinkIdle::kXUnit));
  // The law's mark holds for kLawHold.
  EXPECT_FALSE(u.law_running(kSecond));
  u.law_stepped(2 * kSecond);
  EXPECT_TRUE(u.law_running(2 * kSecond + PhoneUplinkIdle::kLawHold / 2));
  EXPECT_FALSE(u.law_running(2 * kSecond + PhoneUplinkIdle::kLawHold + 10 * kMilli));
}

// The idle law steps only while the phone's back-to-back gaps come evenly (their x spread,
// coefficient of variation, within 0.3 over 5 gaps or more): on a link that serves in slots an
// idle gap is the scheduler's, not room. Gaps that are all zero (bunched packets) read even.
TEST(PhoneUplinkIdle, TheLawReadsIdleTimeOnlyWhileTheLinkServesEvenly) {
  auto counts = [](std::initializer_list<double> gaps_in_packet_times) {
    PhoneUplinkIdle u;
    u.set_capacity(1e6);  // 1000 bytes: 1 ms
    Nanos t = kSecond;
    u.on_packet(t, 1000);
    for (const double x : gaps_in_packet_times) {
      t += static_cast<Nanos>(x * static_cast<double>(kMilli));
      u.on_packet(t, 1000);
    }
    return u.counts();
  };
  EXPECT_TRUE(UplinkRegulator::even_service(counts({1, 1, 1, 1, 1})));
  EXPECT_FALSE(UplinkRegulator::even_service(counts({1, 1, 1, 1}))) << "four gaps: no spread";
  // Spread 0.25 (1.25, 0.75): even; 0.5 (1.5, 0.5): not.
  EXPECT_TRUE(UplinkRegulator::even_service(counts({1.25, 0.75, 1.25, 0.75, 1.25, 0.75})));
  EXPECT_FALSE(UplinkRegulator::even_service(counts({1.5, 0.5, 1.5, 0.5, 1.5, 0.5})));
  EXPECT_TRUE(UplinkRegulator::even_service(counts({0, 0, 0, 0, 0, 0})));
  // Idle gaps (beyond 3 packet times) are not back to back: they leave the spread alone.
  EXPECT_TRUE(UplinkRegulator::even_service(counts({1, 1, 40, 1, 1, 1, 25, 1})));
  // Bunches of three at one instant, a packet time apart: x = 0, 0, 1, ... spread 1.4.
  EXPECT_FALSE(UplinkRegulator::even_service(counts({0, 0, 1, 0, 0, 1, 0, 0, 1})));
}

TEST(SimVarlink, OutagesAndCapacitySwings) {
  std::vector<VarCase> outages, swings_3g, swings_lte;
  for (uint32_t seed = 1; seed <= kVarRuns; ++seed) {
    outages.push_back(outage_case(seed));
    swings_3g.push_back(swing_case("3g swinging 4x", three_g(), 2e6, seed));
    swings_lte.push_back(swing_case("lte swinging 4x", lte(), 10e6, seed));
  }
  std::map<std::string, std::map<std::string, VarRow>> groups;
  for (const auto* group : {&outages, &swings_3g, &swings_lte}) {
    const auto rows = run_group(*group);
    EXPECT_GT(rows.at("off").p95.median, 2000) << (*group)[0].group;  // the problem exists
    groups[(*group)[0].group] = rows;
  }
  // The worse direction against the best static clamp there (simulated, medians: outages 86
  // against 90 % for 64 KB; 3G swings 66 against 65 % for 64 KB, at 0.9 s of p95 against
  // 1.2 s; LTE swings 66 against 49 % for 128 KB).
  const auto best_static = [](const std::map<std::string, VarRow>& rows) {
    double best = 0;
    for (const char* clamp : {"32 KB", "64 KB", "128 KB"}) {
      best = std::max(best, rows.at(clamp).worse.median);
    }
    return best;
  };
  EXPECT_GT(groups["3g outages"].at("rsfc").worse.median, 0.9 * best_static(groups["3g outages"]));
  const auto& swing3g = groups["3g swinging 4x"];
  EXPECT_GT(swing3g.at("rsfc").worse.median, 0.95 * best_static(swing3g));
  EXPECT_LT(swing3g.at("rsfc").p95.median, swing3g.at("64 KB").p95.median);
  EXPECT_GT(groups["lte swinging 4x"].at("rsfc").worse.median,
            best_static(groups["lte swinging 4x"]));
}

// 3G with a download, the uplink falling to a quarter (2 -> 0.5 Mbit/s) for 4 s and back, the
// step at four points of the drain period and two start phases of the upload. The fall: the
// window follows the link's delivery at once (measure_link(): the queue the window left
// drains at the new rate, then holds near T), instead of after rho's window (1 s or more, so
// that the queue builds anew). The return: t_buff reads as empty as before the fall, and W
// doubles back toward the window it had instead of growing by probe steps.
// Measured (8 runs): queue from drop + 1.5 s to the return mean 123-172 ms, p95 247-325 ms
// (the controller before measure_link(): mean 175-566, p95 412-1011 ms); upload over return +
// 0.3..1.3 s 0.43-1.29 Mbit/s, median 0.93 (before: 0.32-0.67, median 0.43).
TEST(SimRsfc, CapacityFallIsFollowedAtOnceAndItsReturnRestored) {
  std::vector<double> back;
  for (const StepRun& run : step_runs()) {
    Scenario s = three_g();
    s.up_rate_steps = {{run.at, 0.5e6}, {run.at + 4 * kSecond, 2e6}};
    s.upload_start = run.upload_start;
    s.uplink = Policy::kRsfc;
    s.warmup = 5 * kSecond;
    s.duration = run.at + 10 * kSecond;
    const Result r = sim::simulate(s);
    const Span low = span(r, run.at + ms(1500), run.at + 4 * kSecond);
    const Span after = span(r, run.at + ms(4300), run.at + ms(5300));
    print_span("fall, +1.5..4 s", run, low);
    print_span("return, +0.3..1.3 s", run, after);
    EXPECT_LT(low.q_p95_ms, 400) << run.label();
    EXPECT_GE(r.download_bps, 0.8 * 6.9e6) << run.label();
    back.push_back(after.upload_bps);
  }
  EXPECT_GT(spread(back).median, 0.8e6);  // 40 % of the returned link in its first second
}

// On the UMTS and EV-DO traces a download's queue makes the round trip seconds long. A drain
// there used to wait for a sample within 2 ms of min(d), which a link that serves in bursts
// rarely gives among the few packets a drained window sends, at the floor window and one step
// per round trip: seconds in MONITOR every period. On a long round trip an empty buffer counts
// within one packet's time at the link's rate, and the first drain keeps drain_fraction of the
// bandwidth-delay product. Measured over the measured window (25 s) of the 9 start offsets of
// SimVarlink: median time in MONITOR 3.4 s on UMTS, 4.1 s on EV-DO (before: 7.1 and 13.0 s).
TEST(SimRsfc, DrainsOnALongRoundTripDoNotHoldTheWindowForSeconds) {
  for (const char* name : {"TMobile-UMTS-driving", "Verizon-EVDO-driving"}) {
    std::vector<double> monitor_s;
    for (const VarCase& c : trace_cases(name)) {
      Scenario s = c.sc;
      s.uplink = Policy::kRsfc;
      sim::Simulation sim(s);
      Nanos last = 0, in_monitor = 0;
      RsfcState state = RsfcState::kStartup;
      sim.on_step = [&](int, Nanos now, const UplinkRegulator& r) {
        if (now > s.warmup && state == RsfcState::kMonitor) {
          in_monitor += now - std::max(last, s.warmup);
        }
        last = now;
        state = r.state();
      };
      sim.run();
      monitor_s.push_back(static_cast<double>(in_monitor) / 1e9);
    }
    const Spread m = spread(monitor_s);
    std::printf("  %s: time in monitor %.1f s median [%.1f-%.1f] of 25 s\n", name, m.median, m.lo,
                m.hi);
    EXPECT_LT(m.median, 5.0) << name;
  }
}

}  // namespace
}  // namespace rsfc
