// DRWA on the downlink knob: the published formula on scripted time, its RTT estimate at the
// gateway (timestamps or not), and closed-loop runs in the packet simulator.
#include "rsfc/core/drwa.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "regulator_sim.h"

namespace rsfc {
namespace {

constexpr Nanos ms(double x) {
  return static_cast<Nanos>(x * 1e6);
}

struct Update {
  Nanos t;
  uint32_t window;
  double cwnd_est;
  Nanos rtt_est, rtt_min;
};

// One download seen by one DownlinkRegulator: the server sends `rate` bytes/s (open loop)
// through the gateway into the downlink buffer (q_down) to the phone, which ACKs every second
// segment at once; ACKs wait q_up in the uplink buffer.
struct DownloadPath {
  Nanos down_prop = ms(15), up_prop = ms(15), srv_half = ms(20);
  bool timestamps = true;
};

class DownloadScript {
 public:
  explicit DownloadScript(DownloadPath path = {}, DrwaParams p = {}) : m_(path), p_(p) {}
  DrwaParams& params() { return p_; }
  DownlinkRegulator& reg() { return reg_; }
  const std::vector<Update>& updates() const { return updates_; }

  void handshake() {
    TcpSegment syn = phone_seg();
    syn.flags = tcpflag::kSyn;
    syn.seq = 100;
    reg_.on_uplink_segment(0, syn, p_);
    ev_.at(m_.srv_half, [this] {
      TcpSegment sa = server_seg();
      sa.flags = tcpflag::kSyn | tcpflag::kAck;
      sa.seq = isn_;
      sa.ack = 101;
      reg_.on_downlink_segment(ev_.now(), sa, p_);
      phone_ts_recent_ = sa.tsval;
      ev_.at(ev_.now() + m_.down_prop + m_.up_prop, [this] {
        TcpSegment a = phone_seg();
        a.flags = tcpflag::kAck;
        a.seq = 101;
        a.ack = isn_ + 1;
        ack_(a);
      });
    });
    next_ = isn_ + 1;
    ev_.run_until(ms(200));
  }

  void send(Nanos dur, double rate, Nanos q_down = 0, Nanos q_up = 0) {
    const Nanos start = ev_.now();
    const Nanos gap = static_cast<Nanos>(1448.0 / rate * 1e9);
    for (Nanos t = start; t < start + dur; t += gap) {
      ev_.at(t, [this, q_down, q_up] { server_sends(q_down, q_up); });
    }
    ev_.run_until(start + dur);
  }
  void idle(Nanos dur) { ev_.run_until(ev_.now() + dur); }

 private:
  TcpSegment phone_seg() const {
    TcpSegment s;
    s.has_ts = m_.timestamps;
    s.tsval = 777 + static_cast<uint32_t>(ev_.now() / kMilli);
    s.tsecr = phone_ts_recent_;
    return s;
  }
  TcpSegment server_seg() const {
    TcpSegment s;
    s.has_ts = m_.timestamps;
    s.tsval = 0xffff'ff00u + static_cast<uint32_t>(ev_.now() / kMilli);  // wraps
    s.tsecr = srv_ts_recent_;
    s.flags = tcpflag::kAck;
    return s;
  }
  void server_sends(Nanos q_down, Nanos q_up) {
    TcpSegment s = server_seg();
    s.seq = next_;
    s.ack = 101;
    s.payload_len = 1448;
    next_ += 1448;
    reg_.on_downlink_segment(ev_.now(), s, p_);
    ev_.at(ev_.now() + m_.down_prop + q_down, [this, s, q_up] {
      // The phone: TS.Recent from the first segment after its last ACK; ACK every second.
      if (!pending_) phone_ts_recent_ = s.tsval;
      pending_ = !pending_;
      if (pending_) return;
      TcpSegment a = phone_seg();
      a.flags = tcpflag::kAck;
      a.seq = 101;
      a.ack = s.seq + s.payload_len;
      ev_.at(ev_.now() + m_.up_prop + q_up, [this, a] { ack_(a); });
    });
  }
  void ack_(const TcpSegment& a) {
    reg_.on_uplink_segment(ev_.now(), a, p_);
    // Data passing the gateway srv_half from now left the server after this ACK got there.
    const uint32_t tsv = a.tsval;
    ev_.at(ev_.now() + m_.srv_half, [this, tsv] { srv_ts_recent_ = tsv; });
    const WindowDecision d = reg_.target_window(ev_.now(), p_);
    if (d.stepped) {
      updates_.push_back({ev_.now(), d.window, reg_.cwnd_est(), reg_.rtt_est().value_or(0),
                          reg_.rtt_min().value_or(0)});
    }
  }

  DownloadPath m_;
  DrwaParams p_;
  DownlinkRegulator reg_;
  sim::EventQueue ev_;
  std::vector<Update> updates_;
  uint32_t isn_ = 0xfff0'0000u;
  uint32_t next_ = 0;
  uint32_t phone_ts_recent_ = 0, srv_ts_recent_ = 0;
  bool pending_ = false;
};

constexpr double kRate = 900'000;  // 7.2 Mbit/s

TEST(Drwa, NoClampBeforeTheFirstRoundTripOfData) {
  DownloadScript s;
  s.handshake();
  EXPECT_EQ(s.reg().target_window(ms(200), s.params()).window, kNoClamp);
  EXPECT_EQ(*s.reg().rtt_min(), ms(50));  // the handshake: 20 + 15 + 15
}

TEST(Drwa, PublishedFormulaOncePerRoundTrip) {
  DownloadScript s;
  s.handshake();
  s.send(2 * kSecond, kRate);
  const auto& u = s.updates();
  ASSERT_GE(u.size(), 20u);
  const DrwaParams& p = s.params();
  for (size_t i = 0; i < u.size(); ++i) {
    SCOPED_TRACE(i);
    // rwnd = lambda * RTT_min / RTT_est * cwnd_est, every time.
    const double expect = p.lambda * static_cast<double>(u[i].rtt_min) /
                          static_cast<double>(u[i].rtt_est) * u[i].cwnd_est;
    EXPECT_NEAR(u[i].window, expect, 1.0);
    // Once per RTT_est.
    if (i > 0) {
      EXPECT_GE(u[i].t - u[i - 1].t, u[i - 1].rtt_est);
    }
  }
  // RTT_est: echo half (15 + 15 + up to a segment gap) + server half (20 + a gap).
  EXPECT_NEAR(static_cast<double>(u.back().rtt_est), 5.3e7, 3e6);
  // cwnd_est converged to the bytes received per round trip; with no queue RTT_est = RTT_min
  // and the window is lambda (3) times that.
  const double per_rtt = kRate * static_cast<double>(u.back().rtt_est) / 1e9;
  EXPECT_NEAR(u.back().cwnd_est, per_rtt, per_rtt * 0.1);
  EXPECT_NEAR(u.back().window, 3 * per_rtt, 3 * per_rtt * 0.15);
}

TEST(Drwa, CwndEstimateIsAnEwmaWithAlpha) {
  // The rate halves: cwnd_est moves by (1 - alpha) of the gap per update.
  DownloadScript s;
  s.handshake();
  s.send(2 * kSecond, kRate);
  const size_t mark = s.updates().size();
  s.send(2 * kSecond, kRate / 2);
  const auto& u = s.updates();
  ASSERT_GT(u.size(), mark + 10);
  const double alpha = s.params().alpha;
  for (size_t i = mark + 2; i < mark + 8; ++i) {
    // bytes of interval i ~ rate/2 * interval; the estimate moves towards it by 1 - alpha.
    const double bytes = kRate / 2 * static_cast<double>(u[i].t - u[i - 1].t) / 1e9;
    const double expect = alpha * u[i - 1].cwnd_est + (1 - alpha) * bytes;
    EXPECT_NEAR(u[i].cwnd_est, expect, bytes * 0.06) << i;
  }
}

TEST(Drwa, QueueingShrinksTheWindowTowardsLambdaTimesTheMinimum) {
  // A 250 ms downlink queue (the server sends faster than... here: scripted). RTT_est grows to
  // 300 ms, RTT_min stays 50 ms: the window settles at lambda * rate * RTT_min.
  DownloadScript s;
  s.handshake();
  s.send(kSecond, kRate);
  s.send(8 * kSecond, kRate, ms(250));
  const Update& last = s.updates().back();
  EXPECT_NEAR(static_cast<double>(last.rtt_est), 3.03e8, 5e6);
  EXPECT_EQ(last.rtt_min, ms(50));
  EXPECT_NEAR(last.window, 3 * kRate * 0.05, 3 * kRate * 0.05 * 0.15);
}

TEST(Drwa, TimestamplessRoundTripFromSeqAckProbe) {
  DownloadPath path;
  path.timestamps = false;
  DownloadScript s(path);
  s.handshake();
  s.send(2 * kSecond, kRate, ms(100));
  EXPECT_FALSE(s.reg().timestamps());
  ASSERT_FALSE(s.updates().empty());
  // 100 + 15 + 15 + server half 20 (handshake) + delayed-ACK slop of a segment.
  EXPECT_NEAR(static_cast<double>(s.updates().back().rtt_est), 1.51e8, 5e6);
  EXPECT_EQ(s.updates().back().rtt_min, ms(50));
}

TEST(Drwa, IdleFlowKeepsItsWindow) {
  DownloadScript s;
  s.handshake();
  s.send(2 * kSecond, kRate);
  s.idle(kSecond);  // the last data in flight is acknowledged (one more update)
  const uint32_t before = s.reg().window();
  const size_t n = s.updates().size();
  s.idle(5 * kSecond);
  // ACKs keep coming (keepalives, the phone's own data): nothing received, nothing updated.
  EXPECT_EQ(s.reg().target_window(s.updates().back().t + 5 * kSecond, s.params()).window, before);
  EXPECT_EQ(s.updates().size(), n);
}

TEST(Drwa, RttMinKeptForTheFlowsLifeByDefault) {
  DownloadScript s;
  s.handshake();
  s.send(kSecond, kRate);
  s.send(15 * kSecond, kRate, ms(200));  // a standing queue for longer than any horizon
  EXPECT_EQ(s.updates().back().rtt_min, ms(50));

  DownloadScript aging;
  aging.params().rtt_min_horizon = 5 * kSecond;
  aging.handshake();
  aging.send(kSecond, kRate);
  aging.send(15 * kSecond, kRate, ms(200));
  EXPECT_GT(aging.updates().back().rtt_min, ms(240));  // the queue became the minimum
}

// --- Closed loop ---------------------------------------------------------------------------

TEST(SimDrwa, DownloadKeepsItsThroughputWithAShorterQueue) {
  sim::Scenario s;
  s.uploads = 0;
  const sim::Result off = sim::simulate(s);
  s.downlink = Policy::kDrwa;
  const sim::Result d = sim::simulate(s);
  std::printf("  download alone, off   %s\n  download alone, drwa  %s\n", off.summary().c_str(),
              d.summary().c_str());
  EXPECT_GE(d.download_bps, 0.95 * off.download_bps);
  // Published behaviour: about (lambda - 1) * RTT_min = 80 ms of queue instead of a full
  // 256 KB buffer (280 ms).
  EXPECT_LT(d.downq_mean_ms, 0.5 * off.downq_mean_ms);
  EXPECT_LT(d.ping_p50_ms, off.ping_p50_ms - 100);
  EXPECT_EQ(d.down_drops, 0u);
}

}  // namespace
}  // namespace rsfc
