// DownlinkQueueRegulator (downlink_regulator.h) in the packet simulator (regulator_sim.h): the
// download's own downlink queue, next to an upload, on a falling or dropping link, and on a
// phone without timestamps; each against the downlink policies that exist (off, DRWA, a static
// clamp). Every scenario runs on kSeeds seeds (the phone's and the server's TS clock phase,
// the download's and the upload's start); each test states its hypothesis and what would
// kill it, and prints one summary line per run.
#include "rsfc/core/downlink_regulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "regulator_sim.h"
#include "rsfc/io/config.h"
#include "sim_trace_link.h"
#include "thin_download_script.h"

namespace rsfc {
namespace {

using sim::Result;
using sim::Scenario;

// The median of the seeds' values (the upper one of an even count).
double median(std::vector<double> v) {
  return sim::percentile(std::move(v), 0.5);
}

// --- Scripted ------------------------------------------------------------------------------

// The constants with an RSFC namesake come from RsfcParams (one operator key for both knobs).
TEST(DownlinkQueueRegulator, SharedConstantsComeFromRsfcParams) {
  RsfcParams r;
  r.threshold = 30 * kMilli;
  r.threshold_ceiling = 120 * kMilli;
  r.min_window_horizon = 7 * kSecond;
  r.tbuff_filter = 150 * kMilli;
  r.fast_target = 0.5;
  r.min_refresh = 4 * kSecond;
  r.monitor_after_steps = 5;
  r.downlink_yield = 0.75;
  r.threshold_packets = 3.5;
  r.threshold_packets_ceiling = 40 * kMilli;
  r.threshold_ceiling_steady = 12 * kMilli;
  const DownlinkQueueParams p = downlink_params_from(r);
  EXPECT_EQ(p.threshold_packets_steady, 3.5);
  EXPECT_EQ(p.threshold_ceiling_steady, 12 * kMilli);
  EXPECT_EQ(p.threshold_packets_ceiling, 40 * kMilli);
  EXPECT_EQ(p.threshold, r.threshold);
  EXPECT_EQ(p.threshold_ceiling, r.threshold_ceiling);
  EXPECT_EQ(p.horizon, r.min_window_horizon);
  EXPECT_EQ(p.filter, r.tbuff_filter);
  EXPECT_EQ(p.fast_target, r.fast_target);
  EXPECT_EQ(p.min_refresh, r.min_refresh);
  EXPECT_EQ(p.drain_after_steps, r.monitor_after_steps);
  EXPECT_EQ(p.yield_no_ts, 0.75);
  EXPECT_EQ(p.fall_fraction, DownlinkQueueParams{}.fall_fraction);  // the downlink's own
}

// A handshake without timestamps, with the gateway's round trip switched off
// (round_trip_no_ts false): the flow is left alone, and says so once (one logged step, the
// fallback read-out the metrics count).
// A handshake without timestamps: the phone's SYN at 0, the SYN-ACK (server ISN `isn`) at
// `synack_at`, the phone's ACK at `ack_at`. Returns that ACK.
TcpSegment open_without_timestamps(DownlinkQueueRegulator& reg, const DownlinkQueueParams& p,
                                   uint32_t isn, Nanos synack_at, Nanos ack_at) {
  TcpSegment syn;
  syn.seq = 1000;
  syn.flags = tcpflag::kSyn;
  syn.mss_option = 1460;
  reg.on_uplink_segment(0, syn, p);
  TcpSegment synack;
  synack.seq = isn;
  synack.ack = 1001;
  synack.flags = tcpflag::kSyn | tcpflag::kAck;
  synack.mss_option = 1460;
  reg.on_downlink_segment(synack_at, synack, p);
  TcpSegment ack;
  ack.seq = 1001;
  ack.ack = isn + 1;
  ack.flags = tcpflag::kAck;
  reg.on_uplink_segment(ack_at, ack, p);
  return ack;
}

TEST(DownlinkQueueRegulator, WithoutTimestampsNoClampAndSaysSo) {
  DownlinkQueueRegulator reg;
  DownlinkQueueParams p;
  p.round_trip_no_ts = false;
  TcpSegment ack = open_without_timestamps(reg, p, 5000, 10 * kMilli, 20 * kMilli);
  const WindowDecision first = reg.target_window(20 * kMilli, p);
  EXPECT_TRUE(first.stepped);
  EXPECT_EQ(first.window, kNoClamp);
  EXPECT_EQ(reg.state(), DownlinkState::kNoTimestamps);
  EXPECT_STREQ(reg.state_name(), "no_timestamps");
  EXPECT_TRUE(reg.fallback());
  EXPECT_FALSE(reg.timestamps());
  EXPECT_EQ(reg.window(), kNoClamp);
  for (Nanos t = 30 * kMilli; t < kSecond; t += 10 * kMilli) {
    TcpSegment data;
    data.seq = 5001 + static_cast<uint32_t>(t / kMilli) * 1448;
    data.ack = 1001;
    data.payload_len = 1448;
    data.flags = tcpflag::kAck;
    reg.on_downlink_segment(t, data, p);
    ack.ack = data.seq + data.payload_len;
    reg.on_uplink_segment(t + 5 * kMilli, ack, p);
    const WindowDecision d = reg.target_window(t + 5 * kMilli, p);
    EXPECT_FALSE(d.stepped);
    EXPECT_EQ(d.window, kNoClamp);
  }
}

// A download without timestamps on the gateway's round trip (round_trip_no_ts, the default):
// the server half 40 ms (the handshake's), the phone side 50 ms; the server sends a segment
// every 2 ms, acknowledged every second segment. For 8 s the phone side holds no queue, then
// for 4 s the round trip is 120 ms longer (a queue in one of the phone's buffers: the gateway
// cannot tell which), then none again until 30 s.
// Hypothesis: the law runs on the gateway's clock: q_down is the round trip above its minimum
// (both queues, about 120 ms in the middle), the ACKs' own uplink wait is unknown (in q_down),
// the base round trip is the phone side's plus the handshake's server half even after the
// horizon (no echo renews it without timestamps), and neither the pacer nor the phone's other
// flows get a tick from it.
// Killed by: the flow in NO_TIMESTAMPS or never steering, q_down off 120 ms by more than 10 ms
// or above 10 ms before and after, a q_up, or a base round trip under 85 ms at 30 s.
TEST(DownlinkQueueRegulator, WithoutTimestampsRunsOnTheGatewaysRoundTrip) {
  DownlinkQueueRegulator reg;
  const DownlinkQueueParams p;
  ASSERT_TRUE(p.round_trip_no_ts);
  const Nanos server = 40 * kMilli, phone_side = 50 * kMilli;
  const TcpSegment ack = open_without_timestamps(reg, p, 7000, server, server + phone_side);
  (void)reg.target_window(server + phone_side, p);
  const auto extra = [](Nanos t) {
    return t >= 8 * kSecond && t < 12 * kSecond ? 120 * kMilli : 0;
  };
  std::vector<std::pair<Nanos, TcpSegment>> acks;  // (arrival at the gateway, ACK), in order
  uint32_t seq = 7001;
  auto send_data = [&](Nanos t) {  // the server's next segment, at the gateway at t
    TcpSegment data;
    data.seq = seq;
    data.ack = 1001;
    data.payload_len = 1448;
    data.flags = tcpflag::kAck;
    seq += 1448;
    reg.on_downlink_segment(t, data, p);
  };
  bool steered = false;
  std::vector<double> before, during, after;
  size_t next_ack = 0;
  for (Nanos t = 200 * kMilli; t < 30 * kSecond; t += 2 * kMilli) {
    // ACKs due by now first (their arrival times never decrease: the extra delay only steps).
    while (next_ack < acks.size() && acks[next_ack].first <= t) {
      const auto& [at, a] = acks[next_ack++];
      reg.on_uplink_segment(at, a, p);
      const WindowDecision d = reg.target_window(at, p);
      steered = steered || reg.steering();
      if (!d.stepped || !reg.q_down()) continue;
      const double q = static_cast<double>(*reg.q_down()) / 1e6;
      if (at > 2 * kSecond && at < 8 * kSecond) before.push_back(q);
      if (at > 8300 * kMilli && at < 8700 * kMilli) during.push_back(q);
      if (at > 14 * kSecond) after.push_back(q);
      EXPECT_FALSE(reg.q_up()) << "the ACKs' own wait is in q_down";
    }
    send_data(t);
    if ((seq - 7001) / 1448 % 2 == 0) {
      TcpSegment a = ack;
      a.ack = seq;
      const Nanos at =
          std::max(t + phone_side + extra(t), acks.empty() ? Nanos{0} : acks.back().first);
      acks.emplace_back(at, a);
    }
  }
  EXPECT_TRUE(steered);
  EXPECT_NE(reg.state(), DownlinkState::kNoTimestamps);
  EXPECT_FALSE(reg.fallback());
  EXPECT_TRUE(reg.round_trip());
  EXPECT_FALSE(reg.timestamps());
  EXPECT_FALSE(reg.paceable());
  EXPECT_EQ(reg.measured_tick(), 0) << "no phone tick to share";
  EXPECT_EQ(reg.tick_ms(), 0.0) << "nor one to log";
  ASSERT_FALSE(before.empty());
  ASSERT_FALSE(during.empty());
  ASSERT_FALSE(after.empty());
  EXPECT_LE(*std::max_element(before.begin(), before.end()), 10.0);
  std::sort(during.begin(), during.end());
  EXPECT_NEAR(during[during.size() / 2], 120.0, 10.0);
  EXPECT_LE(*std::max_element(after.begin(), after.end()), 10.0);
  ASSERT_TRUE(reg.rtt_min());
  EXPECT_GE(*reg.rtt_min(), 85 * kMilli) << "the handshake's server half kept past the horizon";
  // While the phone's upload steps on its uplink's idle time (rsfc.idle_law), the round trip
  // holds the download's own queue: T's ceiling is threshold_ceiling_uplink_law, and the pacer
  // may hold its data (timed on the gateway's clock).
  EXPECT_EQ(reg.threshold(), p.threshold_ceiling_no_ts);
  reg.set_uplink_law(true);
  EXPECT_TRUE(reg.paceable());
  for (Nanos t = 30 * kSecond; t < 31 * kSecond; t += 2 * kMilli) {
    send_data(t);
    TcpSegment a = ack;
    a.ack = seq;
    reg.on_uplink_segment(t + phone_side, a, p);
    (void)reg.target_window(t + phone_side, p);
  }
  EXPECT_EQ(reg.threshold(), p.threshold_ceiling_uplink_law);
  reg.set_uplink_law(false);
  EXPECT_FALSE(reg.paceable());
}

// The scripted phone's TSval at gateway time t (a 1 ms clock).
uint32_t phone_ts(Nanos t) {
  return 5000u + static_cast<uint32_t>(t / kMilli);
}

// A scripted download's handshake with timestamps: the phone's SYN at 0, the server's SYN-ACK
// half of `server` later (the server ISN 7000, its clock at 300), the phone's ACK a round trip
// of `path` each way after that. Returns that ACK, to send the flow's later ACKs from.
TcpSegment open_flow(DownlinkQueueRegulator& reg, const DownlinkQueueParams& p, Nanos server,
                     Nanos path) {
  TcpSegment syn;
  syn.seq = 1000;
  syn.flags = tcpflag::kSyn;
  syn.mss_option = 1460;
  syn.has_ts = true;
  syn.tsval = phone_ts(0);
  reg.on_uplink_segment(0, syn, p);
  TcpSegment synack;
  synack.seq = 7000;
  synack.ack = 1001;
  synack.flags = tcpflag::kSyn | tcpflag::kAck;
  synack.mss_option = 1460;
  synack.has_ts = true;
  synack.tsval = 300;
  synack.tsecr = syn.tsval;
  reg.on_downlink_segment(server / 2, synack, p);
  TcpSegment ack;
  ack.seq = 1001;
  ack.ack = 7001;
  ack.flags = tcpflag::kAck;
  ack.has_ts = true;
  ack.tsval = phone_ts(server / 2 + path);
  ack.tsecr = 300;
  reg.on_uplink_segment(server / 2 + 2 * path, ack, p);
  (void)reg.target_window(server / 2 + 2 * path, p);
  return ack;
}

// A server's 1448-byte data segment at `t` (its 1 ms clock started at 300), echoing `tsecr`.
TcpSegment server_data(uint32_t seq, Nanos t, uint32_t tsecr) {
  TcpSegment data;
  data.seq = seq;
  data.ack = 1001;
  data.payload_len = 1448;
  data.flags = tcpflag::kAck;
  data.has_ts = true;
  data.tsval = 300 + static_cast<uint32_t>(t / kMilli);
  data.tsecr = tsecr;
  return data;
}

// A download on a slow link with a deep buffer (2G: 100 kbit/s, 200 ms base round trip)
// whose server has far more out than the regulator's timing slots: the first edge is 64 KB
// (the default startup floor), and the server sends whatever the window allows. The startup
// clamp spaces its timed segments on the window it asks for (a sixth of it); with 45
// segments out, more marks are due than the estimator has slots. Those it refuses must not
// push out the forwarding times of those it holds: before, their ACKs gave q_down but never a
// round trip, and the regulator stayed in STARTUP for the whole run, its clamp doubling to
// megabytes (the lab's 2G download left unregulated, its queue at 10 s).
TEST(DownlinkQueueRegulator, MoreOutThanItsSlotsStillGivesTheRoundTrip) {
  DownlinkQueueRegulator reg;
  const DownlinkQueueParams p;
  const Nanos path = 95 * kMilli, server = 10 * kMilli, service = 116 * kMilli;
  TcpSegment ack = open_flow(reg, p, server, path);
  const Nanos t0 = server / 2 + 2 * path + server;
  uint32_t seq = 7001, edge = 7001 + 65535;
  Nanos link_free = t0 + path, ready_at = 0;
  std::vector<std::pair<Nanos, uint32_t>> acks;  // (reaches the gateway, ACK number)
  auto send_to_edge = [&](Nanos t) {
    for (; !seq_gt(seq + 1448, edge); seq += 1448) {
      reg.on_downlink_segment(t, server_data(seq, t, ack.tsval), p);
      link_free = std::max(link_free, t + path) + service;  // delivered to the phone
      acks.emplace_back(link_free + path, seq + 1448);      // each ACKed as it arrives
    }
  };
  send_to_edge(t0);
  for (size_t next = 0; next < acks.size() && acks[next].first < 12 * kSecond; ++next) {
    const auto [at, a] = acks[next];
    ack.ack = a;
    ack.tsval = phone_ts(at - path);
    reg.on_uplink_segment(at, ack, p);
    const WindowDecision d = reg.target_window(at, p);
    if (ready_at == 0 && reg.state() != DownlinkState::kStartup) ready_at = at;
    const uint32_t w = std::min<uint32_t>(d.window, 1u << 20);  // the phone's own: 1 MB
    if (seq_gt(a + w, edge)) edge = a + w;                      // never pulled back
    send_to_edge(at + server);
  }
  std::printf("45 segments out at 100 kbit/s: first step past STARTUP at %.2f s\n",
              static_cast<double>(ready_at) / 1e9);
  ASSERT_GT(ready_at, 0) << "never left STARTUP in 12 s";
  EXPECT_LT(ready_at, 8 * kSecond);
  EXPECT_GT(reg.rtt_now(), 0);
}

// A download that opens while the phone's upload fills a slow link's uplink buffer (2G: 100
// kbit/s both ways, 200 ms base round trip): every ACK waits 700 ms behind the upload's data,
// so the first one reaches the gateway when the initial window (16 KB, the engine's floor,
// 1.3 s of the link's service) already sits in the downlink buffer, and the round trip the
// control interval is sized on is 0.9 s. The server sends whatever the window allows (up to
// the phone's own 1 MB). Before, the step at that first ACK doubled the clamp to twice what
// was out and the first rate sample waited a whole interval (here: STARTUP left 1.16 s after
// the first ACK, 41 KB out; in the lab 0.9 s after it with 30-39 KB out, up to 3 s of the
// link's service, and the right edge there: EXPERIMENTS Q30). Hypothesis: the first step lets the
// server grow by what the phone acknowledged, not double, and the first sample closes after the
// base round trip and four segments, at the ACK that completes it. Killed if the regulator leaves
// STARTUP later than 1 s after the first ACK or more than 30 KB is ever out (2.4 s of the
// link).
TEST(DownlinkQueueRegulator, ADownloadOpeningBehindAnUploadStartsFromWhatTheLinkCarries) {
  DownlinkQueueRegulator reg;
  const DownlinkQueueParams p;
  const Nanos path = 100 * kMilli, server = 2 * kMilli, service = 116 * kMilli;
  const Nanos uplink_wait = 700 * kMilli;
  reg.sibling_tick(kMilli);  // the phone's upload measured its clock (the handshake waited)
  TcpSegment ack = open_flow(reg, p, server, path);
  const Nanos t0 = server / 2 + 2 * path + server;
  uint32_t seq = 7001, edge = 7001 + startup_floor_bytes(p.initial_window_bytes);
  Nanos link_free = t0 + path, first_ack = 0, left_startup = 0;
  uint32_t most_out = 0;
  std::vector<std::tuple<Nanos, uint32_t, Nanos>> acks;  // (at the gateway, ACK, at the phone)
  auto send_to_edge = [&](Nanos t) {
    for (; !seq_gt(seq + 1448, edge); seq += 1448) {
      reg.on_downlink_segment(t, server_data(seq, t, ack.tsval), p);
      link_free = std::max(link_free, t + path) + service;
      if (((seq - 7001) / 1448) % 2 == 1) {  // delayed ACKs: every second segment
        acks.emplace_back(link_free + path + uplink_wait, seq + 1448, link_free);
      }
    }
  };
  send_to_edge(t0);
  for (size_t next = 0; next < acks.size() && std::get<0>(acks[next]) < 6 * kSecond; ++next) {
    const auto [at, a, at_phone] = acks[next];
    if (first_ack == 0) first_ack = at;
    ack.ack = a;
    ack.tsval = phone_ts(at_phone);
    reg.on_uplink_segment(at, ack, p);
    const WindowDecision d = reg.target_window(at, p);
    if (left_startup == 0 && reg.state() != DownlinkState::kStartup) left_startup = at;
    const uint32_t w = std::min<uint32_t>(d.window, 1u << 20);  // the phone's own: 1 MB
    if (seq_gt(a + w, edge)) edge = a + w;                      // never pulled back
    most_out = std::max(most_out, edge - a);
    send_to_edge(at + server);
  }
  std::printf(
      "2G behind an upload: left STARTUP %.2f s after the first ACK; at most %u bytes out\n",
      static_cast<double>(left_startup - first_ack) / 1e9, most_out);
  ASSERT_GT(left_startup, 0);
  EXPECT_LE(left_startup - first_ack, kSecond);
  EXPECT_LE(most_out, 30u * 1024u);
}

// A download the gateway's pacer (pacer.h) holds: the regulator times each segment from when
// it leaves, so the hold is not read as downlink queue. Scripted: a server sending 1448-byte
// segments every 7 ms, the phone 20 ms from the gateway each way with no queue, ACKing every
// segment with its 1 ms clock; from 3 s on every segment is held 150 ms before it leaves
// (the pacer caps a hold at max_hold, 200 ms). Read 0.3-1 s into the hold (later a drain takes
// a delay that never shrinks for a longer path). Timed from the arrival, the regulator read
// the hold as 150 ms of queue (on 2G, where one packet's spacing exceeds T, it then cut the
// window to a few KB: lab/EXPERIMENTS.md Q22).
TEST(DownlinkQueueRegulator, HeldSegmentsAreTimedFromTheirRelease) {
  auto q_down_late = [](bool by_release) {
    DownlinkQueueRegulator reg;
    const DownlinkQueueParams p;
    const Nanos path = 20 * kMilli;
    TcpSegment ack = open_flow(reg, p, 20 * kMilli, path);
    // The segments in flight: (the ACK reaches the gateway at, its ACK number, its TSval).
    std::vector<std::tuple<Nanos, uint32_t, uint32_t>> acks;
    uint32_t seq = 7001;
    size_t next = 0;
    std::vector<double> late;  // q_down read 0.3-1 s into the hold (ms)
    for (Nanos t = 100 * kMilli; t < 6 * kSecond; t += 7 * kMilli) {
      while (next < acks.size() && std::get<0>(acks[next]) <= t) {
        const auto [at, a, ts] = acks[next++];
        ack.ack = a;
        ack.tsval = ts;
        reg.on_uplink_segment(at, ack, p);
        (void)reg.target_window(at, p);
        if (at > 3300 * kMilli && at < 4 * kSecond && reg.q_down()) {
          late.push_back(static_cast<double>(*reg.q_down()) / 1e6);
        }
      }
      const TcpSegment data = server_data(seq, t, ack.tsval);
      const Nanos leaves = t >= 3 * kSecond ? t + 150 * kMilli : t;
      if (by_release) {
        reg.on_downlink_segment(t, leaves, data, p);
      } else {
        reg.on_downlink_segment(t, data, p);
      }
      seq += 1448;
      acks.emplace_back(leaves + 2 * path, seq, phone_ts(leaves + path));
    }
    EXPECT_GT(late.size(), 20u);
    std::sort(late.begin(), late.end());
    return late.empty() ? -1.0 : late[late.size() / 2];
  };
  const double by_release = q_down_late(true);
  const double by_arrival = q_down_late(false);
  std::printf(
      "q_down 0.3-1 s into a 150 ms hold: %.1f ms timed from the release, %.1f ms from "
      "the arrival\n",
      by_release, by_arrival);
  EXPECT_LE(by_release, 10.0);
  EXPECT_GE(by_arrival, 100.0) << "the script holds the data: timed from the arrival it reads";
}

// A download on a slow link (2G: 100 kbit/s, 200 ms base round trip) whose ACKs thin out:
// first the phone acknowledges every segment as the link delivers it (one ACK per 116 ms),
// then, held at two segments, it acknowledges both at once, once per round trip (432 ms:
// the path, the two segments' service, the server). That gap is longer than the control
// interval, which is sized on the round trip without the flow's own queue and service, and
// an ACK gap longer than the interval restarts the rate sample (an outage must not read as a
// low rate): no sample closes, the rate's maximum ages out, and no step is ready. The
// regulator then holds its window where the last step left it (lab, 2G download alone: for
// 10-23 s in 14 of 18 runs; measuring the rate through the gaps or stepping on the last rate
// known did worse, lab/EXPERIMENTS.md Q23). Hypothesis: it holds and says so: every step
// that comes due is either taken or reported held (WindowDecision::held, counted by the
// engine as rsfcd_downlink_steps_held_total), and the window does not move while it holds.
// Killed by a stretch of more than 2 s with neither, or a hold that is never reported.
TEST(DownlinkQueueRegulator, AStepWithoutARateIsReportedHeld) {
  DownlinkQueueRegulator reg;
  const DownlinkQueueParams p;
  const Nanos path = 95 * kMilli;      // gateway <-> phone, one way
  const Nanos server = 10 * kMilli;    // gateway -> server -> gateway
  const Nanos service = 116 * kMilli;  // one 1448-byte segment at 100 kbit/s
  const Nanos thin_from = 6 * kSecond;
  TcpSegment ack = open_flow(reg, p, server, path);
  const auto events = testscript::thin_download_events(path, service, server, 300 * kMilli,
                                                       thin_from, 40 * kSecond, 7001);
  Nanos last_word = 0, longest = 0;  // last step taken or reported held
  int held = 0, held_moved = 0;
  uint32_t window_held = 0;
  bool holding = false;
  for (const auto& e : events) {
    if (e.data) {
      TcpSegment data;
      data.seq = e.seq;
      data.ack = 1001;
      data.payload_len = 1448;
      data.flags = tcpflag::kAck;
      data.has_ts = true;
      data.tsval = 300 + static_cast<uint32_t>(e.at / kMilli);
      data.tsecr = ack.tsval;
      reg.on_downlink_segment(e.at, data, p);
      continue;
    }
    ack.ack = e.seq;
    ack.tsval = phone_ts(e.received);
    reg.on_uplink_segment(e.at, ack, p);
    const WindowDecision d = reg.target_window(e.at, p);
    if (d.held) {  // the window since the previous held step, if no step came between
      if (holding && d.window != window_held) ++held_moved;
      window_held = d.window;
      holding = true;
      ++held;
    } else if (d.stepped) {
      holding = false;
    }
    if (d.stepped || d.held) {
      if (e.at > thin_from + kSecond) longest = std::max(longest, e.at - last_word);
      last_word = e.at;
    }
  }
  longest = std::max(longest, events.back().at - last_word);
  std::printf(
      "ACKs once per %.0f ms round trip from %.0f s on: %d steps reported held, the longest "
      "stretch with neither a step nor a hold %.2f s\n",
      static_cast<double>(2 * path + server + 2 * service) / 1e6,
      static_cast<double>(thin_from) / 1e9, held, static_cast<double>(longest) / 1e9);
  EXPECT_LE(longest, 2 * kSecond);
  EXPECT_GT(held, 20) << "the freeze of the lab's 2G runs must be reported";
  EXPECT_EQ(held_moved, 0) << "a held window stays where it was";
}

// --- Closed loop: the packet simulator -----------------------------------------------------

constexpr int kSeeds = 3;

enum class Down { kOff, kDrwa, kStatic, kQueue };

const char* name(Down d) {
  switch (d) {
    case Down::kOff:
      return "off";
    case Down::kDrwa:
      return "drwa";
    case Down::kStatic:
      return "static";
    case Down::kQueue:
      return "queue";
  }
  return "?";
}

// One run: the scenario on seed `seed` with the downlink policy `d`; prints its line. The
// regulator's threshold (auto T) is kept for the assertions.
struct PolicyRun {
  Result r;
  Nanos threshold = 0;  // the first download's T (kQueue only)
  DownlinkState state = DownlinkState::kStartup;
};

PolicyRun run(Scenario s, Down d, int seed, const char* what) {
  s.seed = static_cast<uint32_t>(seed);
  s.download_start = seed * 137 * kMilli;
  s.upload_start = seed * 311 * kMilli;
  switch (d) {
    case Down::kOff:
      break;
    case Down::kDrwa:
      s.downlink = Policy::kDrwa;
      break;
    case Down::kStatic:  // s.static_window
      s.downlink = Policy::kStatic;
      break;
    case Down::kQueue:
      s.downlink_queue_regulator = true;
      break;
  }
  sim::Simulation simulation(s);
  PolicyRun out;
  out.r = simulation.run();
  if (d == Down::kQueue && s.downloads > 0) {
    const DownlinkQueueRegulator& q = simulation.downlink_queue_regulator(s.uploads);
    out.threshold = q.threshold();
    out.state = q.state();
  }
  char label[96];
  if (d == Down::kStatic) {
    std::snprintf(label, sizeof label, "%s, static %uK, seed %d", what,
                  (s.static_window + 512) / 1024, seed);
  } else {
    std::snprintf(label, sizeof label, "%s, %s, seed %d", what, name(d), seed);
  }
  std::printf("  %-40s %s\n", label, out.r.summary().c_str());
  return out;
}

double ms(Nanos t) {
  return static_cast<double>(t) / 1e6;
}

struct LinkCase {
  const char* name;
  Scenario (*make)();  // sim::three_g_link, sim::lte_link
};

class SimDownlinkQueue : public ::testing::TestWithParam<LinkCase> {};

// (a) Download alone.
// Hypothesis: the phone's clock measures the download's own downlink queue (docs/DESIGN.md
// §4a), so a window sized on it holds that queue near T without idling the link: the
// unregulated ~280 ms (the whole 256 KB / 1 MB buffer) falls to about T, the phone's ping
// p95 to under half, the download keeps >= 95 % of its unregulated rate.
// Killed by: on any seed, the downlink queue's p95 above T + 25 ms, the ping p95 above half
// the unregulated one, the download below 95 % of unregulated, or a drop.
TEST_P(SimDownlinkQueue, DownloadAloneQueueCutLinkKept) {
  Scenario base = GetParam().make();
  base.uploads = 0;
  base.duration = 30 * kSecond;
  for (int seed = 0; seed < kSeeds; ++seed) {
    const PolicyRun off = run(base, Down::kOff, seed, "download alone");
    run(base, Down::kDrwa, seed, "download alone");
    const PolicyRun q = run(base, Down::kQueue, seed, "download alone");
    EXPECT_GT(off.r.downq_p95_ms, 250);  // the problem exists
    EXPECT_LE(q.r.downq_p95_ms, ms(q.threshold) + 25) << "seed " << seed;
    EXPECT_LE(q.r.ping_p95_ms, 0.5 * off.r.ping_p95_ms) << "seed " << seed;
    EXPECT_GE(q.r.download_bps, 0.95 * off.r.download_bps) << "seed " << seed;
    EXPECT_EQ(q.r.down_drops, 0u) << "seed " << seed;
  }
}

// (b) Download and upload, rsfc on the uplink.
// Hypothesis (the part this regulator can deliver): reading the downlink queue on the phone's
// clock, the window covers the ACKs' wait in the uplink queue, so the download is not
// starved as DRWA starves it: it keeps >= 95 % of what it gets with the downlink knob off
// (>= 85 % of its rate alone), more than with DRWA, and the upload keeps >= 95 % of its rate
// with the downlink knob off. Killed by: the download or the upload below those bounds in the
// median over the seeds, or 2 points below them on any seed (the two loops are chaotic: a
// change of T for one step moves a seed's rate by a point either way), or the download not
// above DRWA's in the median.
// Not met here, and why (the brief's target, ping p95 <= half of the download alone
// unregulated): next to rsfc's upload the two queues phase-lock. The download's ACKs wait
// behind clumps of the upload's data and leave the uplink buffer together; the server answers
// each clump of ACKs with a burst, whose queue holds the upload's ACKs, and so on. For the
// download to keep its rate the downlink buffer must hold data for as long as its ACKs are
// held, so its queue's peaks follow the uplink queue's swings (rsfc's p95 here: 200-270 ms),
// whatever the window law: the ping p95 stays where the knob off leaves it. The static clamps
// trace the same trade-off line (printed). NextToAHeldUpload shows the target is met when the
// uplink queue is held steady.
TEST_P(SimDownlinkQueue, NextToAnRsfcUploadNoStarvation) {
  Scenario base = GetParam().make();
  base.uplink = Policy::kRsfc;
  base.static_window = 128 * 1024;  // the static downlink clamp printed for comparison
  base.duration = 30 * kSecond;
  Scenario alone = base;
  alone.uploads = 0;
  std::vector<double> queue_down, drwa_down, of_off, of_alone, up_of_off;
  for (int seed = 0; seed < kSeeds; ++seed) {
    const PolicyRun a = run(alone, Down::kOff, seed, "download alone");
    const PolicyRun off = run(base, Down::kOff, seed, "download + rsfc upload");
    const PolicyRun drwa = run(base, Down::kDrwa, seed, "download + rsfc upload");
    run(base, Down::kStatic, seed, "download + rsfc upload");
    const PolicyRun q = run(base, Down::kQueue, seed, "download + rsfc upload");
    of_off.push_back(q.r.download_bps / off.r.download_bps);
    of_alone.push_back(q.r.download_bps / a.r.download_bps);
    up_of_off.push_back(q.r.upload_bps / off.r.upload_bps);
    EXPECT_GE(of_off.back(), 0.93) << "seed " << seed;
    EXPECT_GE(of_alone.back(), 0.83) << "seed " << seed;
    EXPECT_GE(up_of_off.back(), 0.93) << "seed " << seed;
    EXPECT_LE(q.r.ping_p95_ms, 1.1 * off.r.ping_p95_ms) << "seed " << seed;
    queue_down.push_back(q.r.download_bps);
    drwa_down.push_back(drwa.r.download_bps);
  }
  EXPECT_GE(median(of_off), 0.95);
  EXPECT_GE(median(of_alone), 0.85);
  EXPECT_GE(median(up_of_off), 0.95);
  EXPECT_GT(median(queue_down), median(drwa_down));
}

// (b') Download and upload, the upload held by a small fixed window (16 KB on the uplink
// knob), so that the uplink queue stands short and steady.
// Hypothesis: with the ACKs' uplink wait steady, the regulator meets the brief's targets:
// the download keeps >= 90 % of its rate alone, the phone's ping p95 is at most half of what
// the download alone causes unregulated, and the upload gets more than with the downlink
// knob off (its ACKs no longer wait in the download's queue). Killed by any of these failing
// on any seed. (What is left for (b) is then the uplink queue's swings next to a download.)
TEST_P(SimDownlinkQueue, NextToAHeldUploadMeetsTheTargets) {
  Scenario base = GetParam().make();
  base.uplink = Policy::kStatic;   // static_window applies to the uplink only: the
  base.static_window = 16 * 1024;  // downlink runs off or the regulator
  base.duration = 30 * kSecond;
  Scenario alone = base;
  alone.uploads = 0;
  for (int seed = 0; seed < kSeeds; ++seed) {
    const PolicyRun a = run(alone, Down::kOff, seed, "download alone");
    const PolicyRun off = run(base, Down::kOff, seed, "download + 16K upload");
    const PolicyRun q = run(base, Down::kQueue, seed, "download + 16K upload");
    EXPECT_GE(q.r.download_bps, 0.9 * a.r.download_bps) << "seed " << seed;
    EXPECT_LE(q.r.ping_p95_ms, 0.5 * a.r.ping_p95_ms) << "seed " << seed;
    EXPECT_GT(q.r.upload_bps, off.r.upload_bps) << "seed " << seed;
  }
}

// (d) A phone without timestamps, alone and next to an rsfc upload: the law on the gateway's
// round trip (round_trip_no_ts, the default; lab/EXPERIMENTS.md Q46).
// Hypothesis: alone, that round trip holds the download's own queue and nothing else (the
// ACKs do not wait), so the law holds it as with timestamps: the phone's ping p95 at most half
// of off's, the download at least 97 % of off's. Next to the upload it holds both queues, and
// the two knobs hold their sum: no worse than leaving the download alone (as before Q46): the
// median over the seeds of the download and of the upload at least 0.9 of off's.
// Killed by: any of those, or the flow not on the round trip.
TEST_P(SimDownlinkQueue, TimestamplessPhoneOnTheGatewaysRoundTrip) {
  Scenario base = GetParam().make();
  base.phone_timestamps = false;
  base.uplink = Policy::kRsfc;
  base.duration = 30 * kSecond;
  Scenario alone = base;
  alone.uploads = 0;
  std::vector<double> down_off, down_q, up_off, up_q;
  for (int seed = 0; seed < kSeeds; ++seed) {
    const PolicyRun off_alone = run(alone, Down::kOff, seed, "no timestamps, download alone");
    const PolicyRun q_alone = run(alone, Down::kQueue, seed, "no timestamps, download alone");
    EXPECT_NE(q_alone.state, DownlinkState::kNoTimestamps);
    EXPECT_LE(q_alone.r.ping_p95_ms, 0.5 * off_alone.r.ping_p95_ms) << "seed " << seed;
    EXPECT_GE(q_alone.r.download_bps, 0.97 * off_alone.r.download_bps) << "seed " << seed;
    const PolicyRun off = run(base, Down::kOff, seed, "no timestamps, + upload");
    const PolicyRun q = run(base, Down::kQueue, seed, "no timestamps, + upload");
    EXPECT_NE(q.state, DownlinkState::kNoTimestamps);
    down_off.push_back(off.r.download_bps);
    down_q.push_back(q.r.download_bps);
    up_off.push_back(off.r.upload_bps);
    up_q.push_back(q.r.upload_bps);
  }
  EXPECT_GE(median(down_q), 0.9 * median(down_off));
  EXPECT_GE(median(up_q), 0.9 * median(up_off));
}

// The parameters a round-trip download steps with while its phone's upload is short: T's
// ceiling on the round trip halved, every other constant as it was (and the floor under it).
TEST(DownlinkQueueParamsTest, YieldingToTheUploadHalvesTheRoundTripsCeilingOnly) {
  const DownlinkQueueParams p = downlink_params_from(RsfcParams{});
  const DownlinkQueueParams y = yielding_to_upload(p);
  EXPECT_EQ(y.threshold_ceiling_no_ts, p.threshold_ceiling_no_ts / 2);
  EXPECT_EQ(y.threshold_ceiling, p.threshold_ceiling) << "flows with timestamps: as they were";
  EXPECT_EQ(y.threshold_floor, std::min(p.threshold_floor, y.threshold_ceiling_no_ts));
  EXPECT_EQ(y.min_refresh, p.min_refresh);
  DownlinkQueueParams low = p;
  low.threshold_ceiling_no_ts = 30 * kMilli;  // under the 20 ms floor once halved
  EXPECT_EQ(yielding_to_upload(low).threshold_floor, 15 * kMilli);
}

// The sets a download's steps choose from (DownlinkStepParams: Engine::downlink_target and the
// simulator share it): the base next to an upload, the higher ceiling for a download alone, the
// yield on the gateway's round trip while the phone's upload is short. The upload's state is
// asked only at a step, and only when its answer can change the choice.
TEST(DownlinkStepParamsTest, ChoosesAtAStepAndAsksOnlyWhatCanChangeTheChoice) {
  using C = DownlinkStepParams::Choice;
  int asked = 0;
  const auto answer = [&asked](bool v) {
    return [&asked, v] {
      ++asked;
      return v;
    };
  };
  RsfcParams r;
  r.threshold_ceiling = 40 * kMilli;
  r.threshold_ceiling_download_alone = 90 * kMilli;
  r.threshold_ceiling_lag = 80 * kMilli;
  r.downlink_yield = 0.25;
  const DownlinkStepParams sp = downlink_step_params_from(r);
  EXPECT_EQ(sp.base().threshold_ceiling, 40 * kMilli);
  EXPECT_EQ(sp[C::kNextToUpload].threshold_ceiling, 40 * kMilli);
  EXPECT_EQ(sp[C::kAlone].threshold_ceiling, 90 * kMilli);
  EXPECT_EQ(sp[C::kAlone].threshold_ceiling_no_ts, 80 * kMilli);
  EXPECT_EQ(sp[C::kYield].threshold_ceiling_no_ts, 20 * kMilli);
  EXPECT_EQ(sp[C::kYield].threshold_ceiling, 40 * kMilli);

  // A download with timestamps (not on the round trip): never yields.
  const DownlinkQueueRegulator ts;
  ASSERT_FALSE(ts.round_trip());
  ASSERT_TRUE(ts.step_due(kSecond));
  EXPECT_EQ(sp.choose(ts, kSecond, answer(false), answer(true)), C::kAlone);
  EXPECT_EQ(asked, 1) << "whether the phone uploads; not whether its upload is short";
  EXPECT_EQ(sp.choose(ts, kSecond, answer(true), answer(true)), C::kNextToUpload);
  EXPECT_EQ(asked, 2);
  RsfcParams same = r;
  same.threshold_ceiling_download_alone = 0;
  const DownlinkStepParams one = downlink_step_params_from(same);
  EXPECT_EQ(one.choose(ts, kSecond, answer(false), answer(true)), C::kNextToUpload);
  EXPECT_EQ(asked, 2) << "one ceiling and no yield: nothing to ask";

  // On the gateway's round trip (no timestamps).
  DownlinkQueueRegulator rt;
  open_without_timestamps(rt, sp.base(), 5000, 10 * kMilli, 20 * kMilli);
  ASSERT_TRUE(rt.round_trip());
  ASSERT_TRUE(rt.step_due(20 * kMilli));
  EXPECT_EQ(sp.choose(rt, 20 * kMilli, answer(true), answer(true)), C::kYield);
  EXPECT_EQ(sp.choose(rt, 20 * kMilli, answer(true), answer(false)), C::kNextToUpload);
  EXPECT_EQ(sp.choose(rt, 20 * kMilli, answer(false), answer(true)), C::kAlone);
  EXPECT_EQ(one.choose(rt, 20 * kMilli, answer(true), answer(true)), C::kYield);
  asked = 0;
  rt.target_window(20 * kMilli, sp.base());  // measures, and sets the next step's time
  ASSERT_FALSE(rt.step_due(20 * kMilli));
  EXPECT_EQ(sp.choose(rt, 20 * kMilli, answer(true), answer(true)), C::kNextToUpload);
  EXPECT_EQ(asked, 0) << "between steps nothing is asked";

  // rsfc.tuning.downlink_yield 1: the round trip never gives way, and asks nothing for it.
  RsfcParams never = same;
  never.downlink_yield = 1;
  const DownlinkStepParams no_yield = downlink_step_params_from(never);
  DownlinkQueueRegulator rt2;
  open_without_timestamps(rt2, no_yield.base(), 5000, 10 * kMilli, 20 * kMilli);
  EXPECT_EQ(no_yield.choose(rt2, 20 * kMilli, answer(true), answer(true)), C::kNextToUpload);
  EXPECT_EQ(asked, 0);
}

// (d') The same phone where both buffers are deep (0.5 / 2 Mbit/s, 100 ms, 4 s of buffer each
// way), an rsfc upload next to the download. Left alone (round_trip_no_ts false), the download
// fills its buffer, the upload's lag reads those seconds as its own queue, and its law starves
// it: 3.7 % of its link in the simulator, 4 % in the lab (EXPERIMENTS Q45).
// Hypothesis: on the gateway's round trip the two knobs hold the sum of the two queues, so the
// upload keeps at least 30 % of its link, the download at least 80 % of its own, and the
// phone's ping p95 falls under a third of the download-alone run's.
// Killed by: any of those.
TEST(SimDownlinkQueueDeep, TimestamplessPhoneKeepsItsUploadNextToADeepDownload) {
  Scenario s = sim::constant_link(500e3, 2e6, 100 * kMilli);
  s.phone_timestamps = false;
  s.uplink = Policy::kRsfc;
  s.duration = 30 * kSecond;
  const PolicyRun left = [&] {
    Scenario a = s;
    a.dlq.round_trip_no_ts = false;
    return run(a, Down::kQueue, 0, "no TS, deep, download left alone");
  }();
  const PolicyRun q = run(s, Down::kQueue, 0, "no TS, deep, on the round trip");
  EXPECT_GE(q.r.upload_bps, 0.3 * 500e3);
  EXPECT_GE(q.r.download_bps, 0.8 * 2e6);
  EXPECT_LE(q.r.ping_p95_ms, left.r.ping_p95_ms / 3);
}

// (e) Started mid-flow: the regulator sees nothing of the download's first 10 s (a reload to
// downlink rsfc, a restart, a flow adopted from conntrack), which has filled the downlink
// buffer; measured 10-20 s after the start.
// Hypothesis: a regulator that did not see the handshake drains at once, to the floor (the
// queue that was there is in min(d) and in every round trip it measured, so a drain sized on
// them would not empty it), and then holds the queue as one started at the handshake does.
// Killed by: on any seed, the downlink queue's p95 more than 25 ms above the handshake-start
// run's over the same window, the download below 97 % of unregulated, or the regulator not
// out of STARTUP.
TEST_P(SimDownlinkQueue, StartedMidFlowHoldsTheQueueAsFromTheHandshake) {
  Scenario base = GetParam().make();
  base.uploads = 0;
  base.duration = 30 * kSecond;
  base.warmup = 20 * kSecond;
  Scenario late = base;
  late.downlink_regulator_start = 10 * kSecond;
  for (int seed = 0; seed < kSeeds; ++seed) {
    const PolicyRun off = run(base, Down::kOff, seed, "download alone, 20-30 s");
    const PolicyRun q = run(base, Down::kQueue, seed, "download alone, 20-30 s");
    const PolicyRun mid = run(late, Down::kQueue, seed, "regulator from 10 s, 20-30 s");
    EXPECT_NE(mid.state, DownlinkState::kStartup) << "seed " << seed;
    EXPECT_LE(mid.r.downq_p95_ms, q.r.downq_p95_ms + 25) << "seed " << seed;
    EXPECT_GE(mid.r.download_bps, 0.97 * off.r.download_bps) << "seed " << seed;
  }
}

// (f) A download's first seconds alone, measured from its start.
// The startup's exceptions for a flow whose ACKs come late (DownlinkQueueRegulator::acks_late:
// the first step allows what the phone acknowledged rather than double, the first rate sample
// closes early, Little's law sends it to FAST) are for a download behind an upload's queue on
// a slow link. On a fast link the first step past STARTUP hands over to SLOW's 25 % per round
// trip, so any of them taken there slows the download's start. Hypothesis: where its ACKs are
// not late, a download starts as fast as before them. Killed if on LTE the download alone
// delivers less than 86 % of its unregulated bytes over its first 2 s, or less than 82 % over
// its first 1 s (before the exceptions: 88 and 84 %; with them for every flow: 66 and 60 %,
// the early first sample alone 84 and 79 %).
TEST_P(SimDownlinkQueue, ADownloadStartsAsFastAsBeforeWhereItsAcksAreNotLate) {
  for (const Nanos first : {kSecond, 2 * kSecond}) {
    Scenario s = GetParam().make();
    s.uploads = 0;
    s.duration = first;
    s.warmup = 0;
    double q = 0, off = 0;
    for (int seed = 0; seed < kSeeds; ++seed) {
      q += run(s, Down::kQueue, seed, "first seconds").r.download_bps;
      off += run(s, Down::kOff, seed, "first seconds").r.download_bps;
    }
    std::printf("    %s, the download's first %.0f s: %.0f %% of unregulated\n", GetParam().name,
                static_cast<double>(first) / 1e9, 100 * q / off);
    EXPECT_GE(q / off, first == kSecond ? 0.82 : 0.86) << GetParam().name;
  }
}

INSTANTIATE_TEST_SUITE_P(Links, SimDownlinkQueue,
                         ::testing::Values(LinkCase{"hspa_2_7", sim::three_g_link},
                                           LinkCase{"lte_10_30", sim::lte_link}),
                         [](const auto& p) { return std::string(p.param.name); });

// The true downlink queue (mean, p95) and the download's rate over [from, to).
struct Window {
  double mean_ms = 0, p95_ms = 0, down_bps = 0;
};

Window window(const Result& r, Nanos from, Nanos to) {
  std::vector<double> q;
  uint64_t first = 0, last = 0;
  for (const sim::Sample& s : r.samples) {
    if (s.t < from || s.t >= to) continue;
    if (q.empty()) first = s.down_delivered;
    last = s.down_delivered;
    q.push_back(s.downq_ms);
  }
  Window w;
  if (q.empty()) return w;
  for (double x : q) w.mean_ms += x;
  w.mean_ms /= static_cast<double>(q.size());
  w.p95_ms = sim::percentile(q, 0.95);
  w.down_bps = static_cast<double>(last - first) * 8.0 / (static_cast<double>(to - from) / 1e9);
  return w;
}

void print(const char* what, const Window& w) {
  std::printf("    %-32s downq mean %4.0f p95 %4.0f ms  down %.2f Mbit/s\n", what, w.mean_ms,
              w.p95_ms, w.down_bps / 1e6);
}

// (c) The downlink capacity drops (to 1/4 and to 1/10 for 10 s, then back), or the link
// goes out for 2 s; download alone on the 3G link, the event at three phases of the drain
// period (15, 16.25, 17.5 s).
// Hypothesis: while the queue stands above T the link is busy, so a delivered rate far
// below its maximum is the link falling: the window follows it at once and the queue is
// back near T within 2 s (a 64 KB clamp keeps 0.25-0.7 s of queue for the whole drop); a
// recovery is probed back within 2 s, and nothing is lost after it.
// Killed by: from 2 s after the drop on, a queue mean above 1.5 T or p95 above 150 ms
// (one 1500-byte packet takes 17 ms at 0.72 Mbit/s); from 2 s after the recovery (or the
// outage) on, the download below 95 % of the link, or below 75 % in its first 2 s.
TEST(SimDownlinkQueueVariable, CapacityDropAndOutage) {
  struct Event {
    const char* name;
    double factor;  // capacity during the event; 0: outage
    Nanos length;
  };
  for (const Event& e :
       {Event{"drop to 1/4", 0.25, 10 * kSecond}, Event{"drop to 1/10", 0.1, 10 * kSecond},
        Event{"outage", 0, 2 * kSecond}}) {
    for (const Nanos at : {15 * kSecond, 16250 * kMilli, 17500 * kMilli}) {
      Scenario s = sim::three_g_link();
      s.uploads = 0;
      s.warmup = 5 * kSecond;
      s.duration = at + e.length + 10 * kSecond;
      if (e.factor > 0) {
        s.down_rate_steps = {{at, s.down_bps * e.factor}, {at + e.length, s.down_bps}};
      } else {
        s.down_outages = {{at, at + e.length}};
      }
      char what[64];
      std::snprintf(what, sizeof what, "%s at %.2f s", e.name, static_cast<double>(at) / 1e9);
      run(s, Down::kStatic, 0, what);
      const PolicyRun q = run(s, Down::kQueue, 0, what);
      const double T = ms(q.threshold);
      const Window during = window(q.r, at + 2 * kSecond, at + e.length);
      const Window back = window(q.r, at + e.length, at + e.length + 2 * kSecond);
      const Window after = window(q.r, at + e.length + 2 * kSecond, s.duration);
      if (e.factor > 0) print("+2 s .. recovery", during);
      print("recovery +0..2 s", back);
      print("recovery +2 s ..", after);
      if (e.factor > 0) {
        EXPECT_LE(during.mean_ms, 1.5 * T) << what;
        EXPECT_LE(during.p95_ms, 150) << what;
      }
      EXPECT_GE(back.down_bps, 0.75 * 6.94e6) << what;
      EXPECT_GE(after.down_bps, 0.95 * 6.94e6) << what;
      EXPECT_LE(after.mean_ms, 1.5 * T) << what;
    }
  }
}

// (c2) A link that served in bursts, then falls for good: download alone on the 3G link whose
// capacity alternates between full and 1/4 every second from 10 to 20 s, then stays at 1/4.
// While it alternates the swing window holds its peak through the slow seconds (the rate comes
// back after each fall); the last fall is not a slow spell, and the window must follow it once
// the link has not come back within a horizon (10 s), not wait for the peak to decay (half
// life 20 s: 40 s to a quarter), and the law must still know its baseline then.
// Hypothesis: from 12 s after the last fall on, the downlink queue's mean is at most 1.5 T
// and its p95 at most 150 ms, as after a drop from a steady link (CapacityDropAndOutage), and
// the download keeps 95 % of the fallen link. Killed by any. (With the window also holding
// through the law's scheduled drains, it read 219 ms mean, p95 343 ms: the queue never emptied
// within min(d)'s horizon, min(d) was re-learnt on top of it, and the law's base round trip
// read 267 ms instead of 41; lab/EXPERIMENTS.md Q38.)
TEST(SimDownlinkQueueVariable, ALastingFallAfterBurstsIsFollowed) {
  Scenario s = sim::three_g_link();
  s.uploads = 0;
  s.warmup = 5 * kSecond;
  const Nanos last_fall = 20 * kSecond;
  s.duration = last_fall + 25 * kSecond;
  const double full = s.down_bps;
  for (Nanos t = 10 * kSecond; t < last_fall; t += kSecond) {
    s.down_rate_steps.push_back({t, (t / kSecond) % 2 == 0 ? full / 4 : full});
  }
  s.down_rate_steps.push_back({last_fall, full / 4});
  const PolicyRun q = run(s, Down::kQueue, 0, "bursts, then a lasting fall");
  const double T = ms(q.threshold);
  const Window held = window(q.r, last_fall + 2 * kSecond, last_fall + 10 * kSecond);
  const Window after = window(q.r, last_fall + 12 * kSecond, s.duration);
  print("last fall +2..10 s", held);
  print("last fall +12 s ..", after);
  EXPECT_LE(after.mean_ms, 1.5 * T);
  EXPECT_LE(after.p95_ms, 150);
  EXPECT_GE(after.down_bps, 0.95 * full / 4);
}

// A download alone on kOffsets start offsets spread over a trace of lab/traces, as the lab's
// suite plays it: one scenario and its label per start.
struct TraceStart {
  Scenario s;
  std::string what;
};

std::vector<TraceStart> download_alone_on_trace(const char* name, int offsets) {
  const std::string dir = std::string(RSFC_SOURCE_DIR) + "/lab/traces/";
  const auto up =
      std::make_shared<sim::CapacityTrace>(sim::CapacityTrace::load(dir + name + ".up"));
  const auto down =
      std::make_shared<sim::CapacityTrace>(sim::CapacityTrace::load(dir + name + ".down"));
  std::vector<TraceStart> out;
  if (!up->valid() || !down->valid()) return out;
  for (int i = 0; i < offsets; ++i) {
    const Nanos start = sim::suite_trace_offset(*up, *down, i, offsets);
    TraceStart t{sim::suite_trace_cell(up, down, start), {}};
    t.s.uploads = 0;
    char what[96];
    std::snprintf(what, sizeof what, "%s from %lld s", name,
                  static_cast<long long>(start / kSecond));
    t.what = what;
    out.push_back(std::move(t));
  }
  return out;
}

// (d) The download alone on the capacity traces of lab/traces (as the lab's suite plays them:
// 1 MB up / 512 KB down drop-tail, 50 ms base round trip), five start offsets spread over each
// trace. EV-DO and UMTS run at 0.05-2 Mbit/s, where the time-based T (20-80 ms) is less than
// one packet, and their service comes in bursts that swing by 4x within a second.
// Hypothesis: with T at least three packets' service at the delivered rate, the queue left
// standing absorbs the bursts: the download keeps >= 85 % of its rate unregulated (the
// lab's trace target) while the phone's ping p95 stays at most half of the unregulated one.
// Killed by either failing in the median over the offsets of any trace. (With T time-based
// only, measured here: EV-DO 76 %, UMTS 90 %, LTE 94 % of the rate.)
TEST(SimDownlinkQueueVariable, TracedLinksKeepTheDownloadsRate) {
  constexpr int kOffsets = 5;
  for (const char* name : {"Verizon-EVDO-driving", "TMobile-UMTS-driving", "Verizon-LTE-short"}) {
    const std::vector<TraceStart> starts = download_alone_on_trace(name, kOffsets);
    ASSERT_EQ(starts.size(), static_cast<size_t>(kOffsets)) << name;
    std::vector<double> share, p95, off_p95;
    for (const TraceStart& t : starts) {
      const PolicyRun off = run(t.s, Down::kOff, 0, t.what.c_str());
      const PolicyRun q = run(t.s, Down::kQueue, 0, t.what.c_str());
      share.push_back(q.r.download_bps / off.r.download_bps);
      p95.push_back(q.r.ping_p95_ms);
      off_p95.push_back(off.r.ping_p95_ms);
    }
    std::sort(share.begin(), share.end());
    std::sort(p95.begin(), p95.end());
    std::sort(off_p95.begin(), off_p95.end());
    std::printf("    %s: download %.0f %% of off (median), ping p95 %.0f ms (off %.0f ms)\n", name,
                100 * share[kOffsets / 2], p95[kOffsets / 2], off_p95[kOffsets / 2]);
    EXPECT_GE(share[kOffsets / 2], 0.85) << name;
    EXPECT_LE(p95[kOffsets / 2], 0.5 * off_p95[kOffsets / 2]) << name;
  }
}

// (e) A 2G link (0.1 Mbit/s both ways, 200 ms base round trip, 10 s buffers) with the download
// and an rsfc upload starting together. The download's handshake ACK waits behind the upload,
// so the handshake gives no tick hint, and the ACKs' uplink wait swings by seconds, so the
// phone segments' upper bound on the tick stays loose: the tick has to come from the lower
// bound (the forwarding time of the data an ACK covers against its TSval).
// Hypothesis: the regulator learns the tick and regulates within the run; the phone's ping
// p95 is at most 60 % of the knob off's, and the upload keeps at least half its rate alone.
// Killed by: the regulator still in STARTUP at the end (as before the lower bound was fed
// without a tick: the download's queue at 10 s, the upload at 4 % of its rate), or the bounds.
TEST(SimDownlinkQueueVariable, SlowLinkWithAnUploadFromTheStartIsRegulated) {
  Scenario s = sim::two_g_link();
  s.duration = 38 * kSecond;
  s.warmup = 8 * kSecond;
  s.uplink = Policy::kRsfc;
  Scenario alone = s;
  alone.downloads = 0;
  const PolicyRun up_alone = run(alone, Down::kOff, 0, "2g upload alone");
  const PolicyRun off = run(s, Down::kOff, 0, "2g download + rsfc upload");
  const PolicyRun q = run(s, Down::kQueue, 0, "2g download + rsfc upload");
  EXPECT_NE(q.state, DownlinkState::kStartup);
  EXPECT_LE(q.r.ping_p95_ms, 0.6 * off.r.ping_p95_ms);
  EXPECT_GE(q.r.upload_bps, 0.5 * up_alone.r.upload_bps);
}

// (f) The packet floor on T only where the service swings. A 2G link's service is steady
// (one packet every 120 ms at 0.1 Mbit/s): the time-based T (80 ms) holds less than a packet
// and the download still keeps its rate, so three packets (360 ms) would only add latency, as
// the lab found (download alone p95 260 ms with the time-based T, 0.97 s with the floor). On
// the EV-DO trace the service swings by 4x within a second and the floor buys the rate (d).
// Hypothesis: on 2G the floor never engages, the download keeps >= 95 % of its rate alone and
// the ping p95 stays under 700 ms (measured with the floor always on: 885 ms); on every
// EV-DO offset of (d) it engages. Killed by a 2G control step with the floor in force, the
// bounds, or an EV-DO run that never swings.
TEST(SimDownlinkQueueVariable, ThePacketFloorOnlyWhereTheServiceSwings) {
  Scenario s = sim::two_g_link();
  s.uploads = 0;
  s.duration = 38 * kSecond;
  s.warmup = 8 * kSecond;
  const PolicyRun off = run(s, Down::kOff, 0, "2g download alone");
  uint64_t steps = 0, floored = 0;
  {
    Scenario q = s;
    q.downlink_queue_regulator = true;
    sim::Simulation simulation(q);
    simulation.on_down_step = [&](int, Nanos now, const DownlinkQueueRegulator& r) {
      ++steps;
      if (r.swinging(now)) ++floored;
    };
    const Result r = simulation.run();
    std::printf("  2g download alone, queue: %s; %llu of %llu steps with the floor\n",
                r.summary().c_str(), static_cast<unsigned long long>(floored),
                static_cast<unsigned long long>(steps));
    EXPECT_GT(steps, 20u);
    EXPECT_EQ(floored, 0u);
    EXPECT_GE(r.download_bps, 0.95 * off.r.download_bps);
    EXPECT_LT(r.ping_p95_ms, 700);
  }
  const std::string dir = std::string(RSFC_SOURCE_DIR) + "/lab/traces/";
  const auto up = std::make_shared<sim::CapacityTrace>(
      sim::CapacityTrace::load(dir + "Verizon-EVDO-driving.up"));
  const auto down = std::make_shared<sim::CapacityTrace>(
      sim::CapacityTrace::load(dir + "Verizon-EVDO-driving.down"));
  ASSERT_TRUE(up->valid() && down->valid());
  constexpr int kOffsets = 5;
  for (int i = 0; i < kOffsets; ++i) {
    Scenario q = sim::suite_trace_cell(up, down, sim::suite_trace_offset(*up, *down, i, kOffsets));
    q.uploads = 0;
    q.downlink_queue_regulator = true;
    sim::Simulation simulation(q);
    uint64_t n = 0, f = 0;
    simulation.on_down_step = [&](int, Nanos now, const DownlinkQueueRegulator& r) {
      ++n;
      if (r.swinging(now)) ++f;
    };
    simulation.run();
    std::printf("  EV-DO offset %d: %llu of %llu steps with the floor\n", i,
                static_cast<unsigned long long>(f), static_cast<unsigned long long>(n));
    EXPECT_GT(f, 0u) << "EV-DO offset " << i;
  }
}

// (f2) The swing window (downlink_regulator.h; lab/EXPERIMENTS.md Q37-Q38). On a link that
// serves in bursts between slow spells the law sizes W on a rate that a slow spell has just
// cut, and the next burst finds the buffer empty. Hypothesis: with W at least the law's own
// target at the link's recent peak while the service swings, a download alone keeps more of
// its unregulated rate than with the window off (swing_window_on false): at least 3 points
// more on EV-DO (median of five offsets; Q37's form read 86 -> 90 %, UMTS 90 -> 100 %, LTE
// 94 -> 99 %; this one 86 -> 89, 90 -> 99, 94 -> 97), on no trace more than 1 point less,
// with the phone's ping p95 at most half of the unregulated one; and on 2G, whose service
// never swings, it changes nothing (the same bytes and pings). Killed by any of these.
TEST(SimDownlinkQueueVariable, ASwingWindowKeepsTheNextBurst) {
  {
    Scenario s = sim::two_g_link();
    s.uploads = 0;
    s.duration = 38 * kSecond;
    s.warmup = 8 * kSecond;
    Scenario without = s;
    without.dlq.swing_window_on = false;
    const PolicyRun on = run(s, Down::kQueue, 0, "2g download alone, swing window");
    const PolicyRun off = run(without, Down::kQueue, 0, "2g download alone, none");
    EXPECT_EQ(on.r.download_bps, off.r.download_bps);
    EXPECT_EQ(on.r.ping_p95_ms, off.r.ping_p95_ms);
  }
  constexpr int kOffsets = 5;
  for (const char* name : {"Verizon-EVDO-driving", "TMobile-UMTS-driving", "Verizon-LTE-short"}) {
    const std::vector<TraceStart> starts = download_alone_on_trace(name, kOffsets);
    ASSERT_EQ(starts.size(), static_cast<size_t>(kOffsets)) << name;
    std::vector<double> with_window, without_window, p95, off_p95;
    for (const TraceStart& t : starts) {
      const PolicyRun off = run(t.s, Down::kOff, 0, t.what.c_str());
      const PolicyRun q = run(t.s, Down::kQueue, 0, t.what.c_str());
      Scenario none = t.s;
      none.dlq.swing_window_on = false;
      const PolicyRun q0 = run(none, Down::kQueue, 0, t.what.c_str());
      with_window.push_back(100 * q.r.download_bps / off.r.download_bps);
      without_window.push_back(100 * q0.r.download_bps / off.r.download_bps);
      p95.push_back(q.r.ping_p95_ms);
      off_p95.push_back(off.r.ping_p95_ms);
    }
    for (auto* v : {&with_window, &without_window, &p95, &off_p95}) std::sort(v->begin(), v->end());
    const double gain = with_window[kOffsets / 2] - without_window[kOffsets / 2];
    std::printf(
        "    %s: download alone %.0f %% of off with the swing window, %.0f %% without;"
        " ping p95 %.0f ms (off %.0f ms)\n",
        name, with_window[kOffsets / 2], without_window[kOffsets / 2], p95[kOffsets / 2],
        off_p95[kOffsets / 2]);
    EXPECT_GE(gain, -1.0) << name;
    if (std::string(name) == "Verizon-EVDO-driving") {
      EXPECT_GE(gain, 3.0) << name;
    }
    EXPECT_LE(p95[kOffsets / 2], 0.5 * off_p95[kOffsets / 2]) << name;
  }
}

// (g) Downlink pacing (pacer.h) on the constant links, the shipped knobs (rsfc on both) with
// a download and an upload, three seeds. The pacer spreads the server's bursts, so the two
// queues stop swinging through the ACK clock (lab/EXPERIMENTS.md Q22; the lab's five runs: 3G
// 349 -> 156 ms, LTE 344 -> 204 ms, both transfers 92-95 %).
// Hypothesis: the phone's p95 under both transfers falls to at most 0.7 x unpaced's, both
// transfers keep >= 90 % of their rates alone unregulated, and the download alone keeps its
// rate (>= 97 % of unpaced). Killed by any of these in the median over the seeds, or by a
// paced run in which the pacer held nothing.
TEST(SimDownlinkPacing, ConstantLinksHalveThePhonesLatencyUnderBothTransfers) {
  for (const bool lte : {false, true}) {
    std::vector<double> p95_ratio, dl, ul, alone_ratio;
    for (uint32_t seed = 0; seed < 3; ++seed) {
      Scenario s = lte ? sim::lte_link() : sim::three_g_link();
      s.duration = 38 * kSecond;
      s.warmup = 8 * kSecond;
      s.seed = seed;
      auto with = [&](int uploads, int downloads, bool regulated, bool paced) {
        Scenario x = s;
        x.uploads = uploads;
        x.downloads = downloads;
        if (regulated) {
          x.uplink = Policy::kRsfc;
          x.downlink = Policy::kRsfc;
          x.downlink_queue_regulator = true;
          x.pacing.enabled = paced;
        }
        return sim::simulate(x);
      };
      const Result down0 = with(0, 1, false, false), up0 = with(1, 0, false, false);
      const Result both = with(1, 1, true, false), paced = with(1, 1, true, true);
      const Result alone = with(0, 1, true, false), alone_paced = with(0, 1, true, true);
      EXPECT_GT(paced.paced, 0u) << "seed " << seed;
      EXPECT_GT(alone_paced.paced, 0u) << "seed " << seed;
      p95_ratio.push_back(paced.ping_p95_ms / both.ping_p95_ms);
      dl.push_back(paced.download_bps / down0.download_bps);
      ul.push_back(paced.upload_bps / up0.upload_bps);
      alone_ratio.push_back(alone_paced.download_bps / alone.download_bps);
      std::printf(
          "    %s seed %u: p95 %.0f -> %.0f ms, paced dl %.0f %% ul %.0f %%, alone %.0f %%\n",
          lte ? "lte" : "3g", seed, both.ping_p95_ms, paced.ping_p95_ms, 100 * dl.back(),
          100 * ul.back(), 100 * alone_ratio.back());
    }
    const char* cell = lte ? "lte" : "3g";
    EXPECT_LE(median(p95_ratio), 0.7) << cell;
    EXPECT_GE(median(dl), 0.9) << cell;
    EXPECT_GE(median(ul), 0.9) << cell;
    EXPECT_GE(median(alone_ratio), 0.97) << cell;
  }
}

// The suite's window (38 s, 8 s of warm-up) and, when `regulated`, the shipped configuration:
// rsfc on both knobs, each knob's auto-T ceiling 30 ms next to an upload (10 ms while its own
// queue holds: the steady ceiling), the download alone's 80 ms, the pacer next to an upload only.
Scenario shipped_scenario(Scenario x, bool regulated) {
  x.duration = 38 * kSecond;
  x.warmup = 8 * kSecond;
  x.rsfc.threshold_ceiling = 30 * kMilli;
  x.rsfc.threshold_floor = std::min(x.rsfc.threshold_floor, x.rsfc.threshold_ceiling);
  x.dlq.threshold_ceiling = 30 * kMilli;
  x.dlq.threshold_floor = std::min(x.dlq.threshold_floor, x.dlq.threshold_ceiling);
  x.dlq_ceiling_alone = 80 * kMilli;
  x.rsfc.threshold_ceiling_steady = x.dlq.threshold_ceiling_steady =
      daemon_params().rsfc.threshold_ceiling_steady;
  if (regulated) {
    x.uplink = Policy::kRsfc;
    x.downlink = Policy::kRsfc;
    x.downlink_queue_regulator = true;
    x.pacing.enabled = true;
    x.pacing.next_to_upload_only = true;
  }
  return x;
}

Result simulate_shipped(Scenario x, bool regulated) {
  return sim::simulate(shipped_scenario(x, regulated));
}

// (g) 2G under both transfers with the shipped configuration (both knobs' auto-T ceiling
// 30 ms, the download alone's 80 ms, the pacer next to an upload only): issue 16's 2G target,
// the phone's p95 under 1 s with both transfers above 80 % of their rates alone. The
// upload starts first, so the download's handshake ACK waits behind it: no tick hint, and its
// first queue samples come only once the tick is measured, seconds in, with the download's
// own start-up queue standing. Learnt as the baseline, that queue stayed for the whole test
// (1.87 s p95 here; lab, EXPERIMENTS Q29: 6.8 s in the late runs).
// Hypothesis: with the matches kept until the tick is known, p95 < 1 s and both > 80 % on
// the median of three seeds. Killed by any of them.
TEST(SimDownlinkPacing, TwoGUnderBothTransfersMeetsTheTarget) {
  std::vector<double> p95, dl, ul;
  for (uint32_t seed = 0; seed < 3; ++seed) {
    auto with = [&](int uploads, int downloads, bool regulated) {
      Scenario x = sim::two_g_link();
      x.seed = seed;
      x.uploads = uploads;
      x.downloads = downloads;
      return simulate_shipped(x, regulated);
    };
    const Result down0 = with(0, 1, false), up0 = with(1, 0, false), both = with(1, 1, true);
    p95.push_back(both.ping_p95_ms);
    dl.push_back(both.download_bps / down0.download_bps);
    ul.push_back(both.upload_bps / up0.upload_bps);
    std::printf(
        "    2g seed %u: p95 %.0f ms (download alone unregulated %.0f ms), dl %.0f %% ul %.0f %%\n",
        seed, both.ping_p95_ms, down0.ping_p95_ms, 100 * dl.back(), 100 * ul.back());
  }
  EXPECT_LT(median(p95), 1000.0);
  EXPECT_GT(median(dl), 0.8);
  EXPECT_GT(median(ul), 0.8);
}

// (g'') A phone without timestamps on 3G and LTE, the shipped configuration. Its one delay
// is a round trip through both of its queues, so the upload's lag law holds the upload to a
// window sized on the download's queue too, and the phone's p95 under both stays at the lag
// law's ceilings (lab: 341 ms on 3G, against the 32 KB clamp's 136). rsfc.idle_law steps the
// upload on its uplink's idle time instead (UplinkRegulator::idle_law), the download held to
// its own queue and paced meanwhile (lab/EXPERIMENTS.md Q57: 3G p95 341 -> 246 ms, min(dl, ul)
// unchanged).
// Hypothesis: against the same configuration with idle_law off, over three seeds, the phone's
// p95 under both falls to at most 0.8x on both links (median), min(download %, upload %) of
// their rates alone unregulated falls no more than 3 points (median), and the law steps.
// Killed by any of them.
TEST(SimDownlinkPacing, TimestamplessUploadStepsOnItsUplinksIdleTime) {
  for (const bool lte : {false, true}) {
    std::vector<double> p95_ratio, min_change;
    for (uint32_t seed = 0; seed < 3; ++seed) {
      Scenario s = lte ? sim::lte_link() : sim::three_g_link();
      s.phone_timestamps = false;
      s.seed = seed;
      s.download_start = seed * 137 * kMilli;  // as run() staggers them
      s.upload_start = seed * 311 * kMilli;
      auto with = [&](int uploads, int downloads, bool regulated, bool idle_law,
                      uint64_t* steps = nullptr) {
        Scenario x = shipped_scenario(s, regulated);
        x.uploads = uploads;
        x.downloads = downloads;
        x.rsfc.idle_law = idle_law;
        sim::Simulation simulation(x);
        if (steps != nullptr) {
          simulation.on_step = [steps](int, Nanos, const UplinkRegulator& r) {
            if (r.idle_law_steered()) ++*steps;
          };
        }
        return simulation.run();
      };
      const Result down0 = with(0, 1, false, false), up0 = with(1, 0, false, false);
      uint64_t steps = 0;
      const Result lag = with(1, 1, true, false), idle = with(1, 1, true, true, &steps);
      EXPECT_GT(steps, 10u) << "seed " << seed;
      auto min_pct = [&](const Result& r) {
        return 100 * std::min(r.download_bps / down0.download_bps, r.upload_bps / up0.upload_bps);
      };
      p95_ratio.push_back(idle.ping_p95_ms / lag.ping_p95_ms);
      min_change.push_back(min_pct(idle) - min_pct(lag));
      std::printf("    %s seed %u: p95 %.0f -> %.0f ms, min(dl, ul) %.0f -> %.0f %%, %llu steps\n",
                  lte ? "lte" : "3g", seed, lag.ping_p95_ms, idle.ping_p95_ms, min_pct(lag),
                  min_pct(idle), static_cast<unsigned long long>(steps));
    }
    const char* cell = lte ? "lte" : "3g";
    EXPECT_LE(median(p95_ratio), 0.8) << cell;
    EXPECT_GE(median(min_change), -3.0) << cell;
  }
}

// (g') A phone without timestamps next to its own upload on 2 / 7.2 Mbit/s at 150 ms (deep
// buffers), the shipped configuration. Both knobs hold one sum, the round trip, and two laws
// on one sum share it as the flows' start left them: here the download kept its buffer and
// the upload 48 % of its rate alone. The download now gives way while the phone's regulated
// upload delivers under 0.85 of its best second (SubscriberUplink::short_of_best,
// yielding_to_upload; lab/EXPERIMENTS.md Q47).
// Hypothesis: the upload keeps at least 65 % of its rate alone, the download at least 75 % of
// its own, and the phone's p95 under both falls below the unregulated download alone's.
// Killed by any of them.
TEST(SimDownlinkPacing, TimestamplessDownloadGivesWayToItsPhonesShortUpload) {
  auto with = [](int uploads, int downloads, bool regulated) {
    Scenario x = sim::constant_link(2e6, 7.2e6, 150 * kMilli);
    x.phone_timestamps = false;
    x.uploads = uploads;
    x.downloads = downloads;
    return simulate_shipped(x, regulated);
  };
  const Result down0 = with(0, 1, false), up0 = with(1, 0, false), both = with(1, 1, true);
  std::printf("    2/7.2 Mbit/s, 150 ms, no TS: dl %.0f %% ul %.0f %%, p95 %.0f ms (%.0f alone)\n",
              100 * both.download_bps / down0.download_bps, 100 * both.upload_bps / up0.upload_bps,
              both.ping_p95_ms, down0.ping_p95_ms);
  EXPECT_GE(both.upload_bps, 0.65 * up0.upload_bps);
  EXPECT_GE(both.download_bps, 0.75 * down0.download_bps);
  EXPECT_LT(both.ping_p95_ms, down0.ping_p95_ms);
}

// (h) Each knob's auto T is at least two packets' service at its link's rate, at most 30 ms
// (rsfc.tuning.threshold_packets, threshold_packets_ceiling_ms; lab/EXPERIMENTS.md Q51). With a
// 10 ms ceiling next to an upload, a 0.5 Mbit/s uplink (23 ms a packet) would otherwise sit
// idle between packets.
// Hypothesis: on a 0.5 / 2 Mbit/s link (150 ms base round trip, deep buffers) with both
// knobs' ceilings and floors at 10 ms, the upload next to a download keeps >= 93 % of its
// rate alone on the median of three seeds (measured 95.9 %), with the uplink knob's T at the
// 30 ms cap and the downlink knob's at two 2 Mbit/s packets or more (11.6 ms); without the
// floor the upload keeps < 91 % (87.5 %) at T 10 ms. Killed by any of them.
TEST(SimBothKnobs, TenMillisecondsOfQueueNeverUnderTwoPacketsOfTheLink) {
  std::vector<double> with_floor, without;
  for (uint32_t seed = 0; seed < 3; ++seed) {
    Scenario s = sim::constant_link(0.5e6, 2e6, 150 * kMilli);
    s.seed = seed;
    Scenario alone = shipped_scenario(s, false);
    alone.downloads = 0;
    const double up_alone = sim::simulate(alone).upload_bps;
    for (const double packets : {2.0, 0.0}) {
      Scenario x = shipped_scenario(s, true);
      x.rsfc.threshold_ceiling = x.rsfc.threshold_floor = 10 * kMilli;
      x.dlq.threshold_ceiling = x.dlq.threshold_floor = 10 * kMilli;
      x.rsfc.threshold_packets = packets;
      x.dlq.threshold_packets_steady = packets;
      sim::Simulation simulation(x);
      const Result r = simulation.run();
      const Nanos up_t = simulation.uplink_regulator(0).threshold();
      const Nanos down_t = simulation.downlink_queue_regulator(x.uploads).threshold();
      std::printf(
          "    seed %u, %.0f packets: upload %.1f %% of alone, T up %.1f ms, down %.1f ms\n", seed,
          packets, 100 * r.upload_bps / up_alone, ms(up_t), ms(down_t));
      (packets > 0 ? with_floor : without).push_back(r.upload_bps / up_alone);
      if (packets > 0) {
        EXPECT_EQ(up_t, 30 * kMilli) << "seed " << seed;
        EXPECT_GE(down_t, 11 * kMilli) << "seed " << seed;
        EXPECT_LE(down_t, 30 * kMilli) << "seed " << seed;
      } else {
        EXPECT_EQ(up_t, 10 * kMilli) << "seed " << seed;
      }
    }
  }
  EXPECT_GE(median(with_floor), 0.93);
  EXPECT_LT(median(without), 0.91);
}

// The steady ceiling (rsfc.tuning.threshold_ceiling_steady_ms, 10 ms; lab/EXPERIMENTS.md Q52):
// each knob's auto T at most 10 ms while its own queue has stayed within twice the 30 ms ceiling
// since its start-up, the full 30 ms for the horizon (10 s) after it went past. Next to an
// upload on LTE the phone's round trip is mostly the two knobs' queues (147 ms p95 at 30 ms).
// Hypothesis: on the LTE link (1) the phone's p95 falls to <= 0.85 x its p95 without the steady
// ceiling, the download and the upload keep >= 0.95 x theirs (medians of three seeds); (2) when
// both rates fall to a fifth for 2 s at 25 s, both knobs' T is <= 10 ms at every step from 15 s to
// the fall, 30 ms at some step in the 12 s after it, and <= 10 ms again from 40 s on. Killed by
// any. Run, it killed the uplink's part: this uplink's own queue under a 30 ms T passed the
// sign's 60 ms too, so once swung the uplink kept 30 ms for the rest of the flow (Q52). Since
// the uplink's level holds half the base round trip on top (90 ms here, EXPERIMENTS Q53), both
// knobs are back at 10 ms from 40 s.
TEST(SimBothKnobs, TenMillisecondsOfQueueWhileTheQueueNeverSwung) {
  std::vector<double> p95, down, up;
  for (uint32_t seed = 0; seed < 3; ++seed) {
    Scenario s = sim::lte_link();
    s.seed = seed;
    Scenario x = shipped_scenario(s, true);
    ASSERT_EQ(x.rsfc.threshold_ceiling_steady, 10 * kMilli) << "the shipped default";
    ASSERT_EQ(x.dlq.threshold_ceiling_steady, 10 * kMilli) << "the shipped default";
    const Result steady = sim::simulate(x);
    x.rsfc.threshold_ceiling_steady = x.dlq.threshold_ceiling_steady = 0;
    const Result full = sim::simulate(x);
    std::printf("    seed %u: 30 ms %s\n           steady %s\n", seed, full.summary().c_str(),
                steady.summary().c_str());
    p95.push_back(steady.ping_p95_ms / full.ping_p95_ms);
    down.push_back(steady.download_bps / full.download_bps);
    up.push_back(steady.upload_bps / full.upload_bps);
  }
  EXPECT_LE(median(p95), 0.85);
  EXPECT_GE(median(down), 0.95);
  EXPECT_GE(median(up), 0.95);

  Scenario s = sim::lte_link();
  s.up_rate_steps = {{25 * kSecond, s.up_bps / 5}, {27 * kSecond, s.up_bps}};
  s.down_rate_steps = {{25 * kSecond, s.down_bps / 5}, {27 * kSecond, s.down_bps}};
  Scenario x = shipped_scenario(s, true);
  x.duration = 50 * kSecond;
  sim::Simulation simulation(x);
  std::vector<std::pair<Nanos, Nanos>> up_t, down_t;  // (step time, T)
  simulation.on_step = [&](int, Nanos now, const UplinkRegulator& r) {
    up_t.emplace_back(now, r.threshold());
  };
  simulation.on_down_step = [&](int, Nanos now, const DownlinkQueueRegulator& r) {
    down_t.emplace_back(now, r.threshold());
  };
  simulation.run();
  for (const auto* steps : {&up_t, &down_t}) {
    const char* knob = steps == &up_t ? "uplink" : "downlink";
    Nanos before = 0, after = 0, swung = 0, last_full = 0;
    size_t before_n = 0, after_n = 0;
    for (const auto& [t, threshold] : *steps) {
      if (threshold > 10 * kMilli) last_full = t;
      if (t >= 15 * kSecond && t < 25 * kSecond) {
        before = std::max(before, threshold);
        ++before_n;
      } else if (t >= 25 * kSecond && t < 37 * kSecond) {
        swung = std::max(swung, threshold);
      } else if (t >= 40 * kSecond) {
        after = std::max(after, threshold);
        ++after_n;
      }
    }
    std::printf(
        "    %s: T at most %.1f ms before the fall, %.1f in the 12 s after, %.1f from 40 s; "
        "last over 10 ms at %.1f s\n",
        knob, ms(before), ms(swung), ms(after), ms(last_full) / 1000);
    EXPECT_GT(before_n, 50u) << knob;
    EXPECT_GT(after_n, 50u) << knob;
    EXPECT_LE(before, 10 * kMilli) << knob;
    EXPECT_EQ(swung, 30 * kMilli) << knob;
    EXPECT_LE(after, 10 * kMilli) << knob;
  }
}

// The uplink's queue sign on longer round trips (EXPERIMENTS Q53). The law moves the window once
// a round trip, and on a steady link the uplink's own filtered queue under a 10 ms T peaks higher
// the longer that is: 55 ms at 60 ms, 75 at 100, 94 at 150 in the simulator. With the sign at
// twice the ceiling (60 ms) such a link read as swinging and the upload kept 30 ms on 39-84 % of
// its steps (three seeds each). Hypothesis: with half the base round trip on top, the upload's T is
// under the full 30 ms at 95 % or more of its steps after 8 s on constant links of 100 and 150 ms
// (each of three seeds), both transfers at 90 % or more of their rates alone (medians). Killed by
// any.
TEST(SimBothKnobs, SteadyCeilingOnLongerRoundTrips) {
  struct Link {
    double up_bps, down_bps;
    Nanos rtt;
  };
  for (const Link& l : {Link{5e6, 20e6, 100 * kMilli}, Link{2e6, 8e6, 150 * kMilli}}) {
    std::vector<double> up, down;
    for (uint32_t seed = 0; seed < 3; ++seed) {
      Scenario s = sim::constant_link(l.up_bps, l.down_bps, l.rtt);
      s.seed = seed;
      auto unregulated = [&](int uploads, int downloads) {
        Scenario x = s;
        x.uploads = uploads;
        x.downloads = downloads;
        return simulate_shipped(x, false);
      };
      const double up_alone = unregulated(1, 0).upload_bps;
      const double down_alone = unregulated(0, 1).download_bps;
      sim::Simulation simulation(shipped_scenario(s, true));
      size_t steps = 0, full = 0;
      simulation.on_step = [&](int, Nanos now, const UplinkRegulator& r) {
        if (now < 8 * kSecond || r.state() == RsfcState::kStartup) return;
        ++steps;
        if (r.threshold() >= 30 * kMilli) ++full;
      };
      const Result r = simulation.run();
      std::printf("    %.0f ms, seed %u: T 30 ms at %zu of %zu steps; %s\n", ms(l.rtt), seed, full,
                  steps, r.summary().c_str());
      EXPECT_GT(steps, 100u);
      EXPECT_LE(static_cast<double>(full), 0.05 * static_cast<double>(steps))
          << ms(l.rtt) << " ms, seed " << seed;
      up.push_back(r.upload_bps / up_alone);
      down.push_back(r.download_bps / down_alone);
    }
    EXPECT_GE(median(up), 0.90) << ms(l.rtt) << " ms";
    EXPECT_GE(median(down), 0.90) << ms(l.rtt) << " ms";
  }
}

// (h) Buffers shallower than the bandwidth-delay product: the queue never reaches T, the
// senders fill the buffer and lose, and under the knobs they must recover as they do
// without them (the shipped settings: "never make things worse"). While a loss is repaired
// the cumulative ACK stands still and the receiver's SACKed bytes pile up above it; a right
// edge of ack + W stopped the sender's recovery once they reached W, and the ACK that filled
// the hole then opened a window at once: a burst at line rate, a second loss (lab/
// EXPERIMENTS.md Q34). Engine::with_sacked counts the SACKed bytes out of the target.
// Hypothesis: a download alone on 20 / 100 Mbit/s at 50 ms with a 200 KB downlink buffer
// (the BDP is 625 KB) keeps >= 95 % of its unregulated rate (without the allowance: 85-91 %),
// and an upload next to a download on 1 / 5 Mbit/s at 80 ms with an 8 KB uplink buffer >= 90 %
// of its rate alone (84-85 %); on every one of three seeds. Killed by either.
TEST(SimShallowBuffers, LossRecoveryUnderTheKnobsIsTheSendersOwn) {
  for (uint32_t seed = 0; seed < 3; ++seed) {
    Scenario wide = sim::constant_link(20e6, 100e6, 50 * kMilli, 100'000, 200'000);
    wide.seed = seed;
    wide.uploads = 0;
    const Result off = simulate_shipped(wide, false), on = simulate_shipped(wide, true);
    EXPECT_GT(off.down_drops, 0u) << "the buffer overflows: the case exists";
    const double alone = on.download_bps / off.download_bps;
    Scenario thin = sim::constant_link(1e6, 5e6, 80 * kMilli, 8'000, 16'000);
    thin.seed = seed;
    thin.downloads = 0;
    const Result up0 = simulate_shipped(thin, false);
    thin.downloads = 1;
    const Result both = simulate_shipped(thin, true);
    const double up = both.upload_bps / up0.upload_bps;
    std::printf("    seed %u: download alone %.1f %% of off's; upload next to a download %.1f %%\n",
                seed, 100 * alone, 100 * up);
    EXPECT_GE(alone, 0.95) << "seed " << seed;
    EXPECT_GE(up, 0.90) << "seed " << seed;
  }
}

}  // namespace
}  // namespace rsfc
