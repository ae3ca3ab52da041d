// The whole core on scripted packets: handshake learning, policies, rewrite rules,
// lifecycle, counters. Packets come from the test packet builder; the engine's output is
// re-parsed and its checksum verified against a full recomputation.
#include "rsfc/engine.h"

#include <gtest/gtest.h>

#include "packet_builder.h"
#include "rsfc/window.h"

namespace rsfc {
namespace {

using testpkt::TcpSpec;

constexpr uint32_t kPhoneIsn = 1000, kServerIsn = 500000;

EngineParams static_params(uint32_t up, uint32_t down = 0) {
  EngineParams p;
  p.subscriber_networks = {*Prefix::parse("198.18.0.0/16"), *Prefix::parse("2001:2:0:1::/64")};
  p.uplink = {.policy = Policy::kStatic, .static_window_bytes = up};
  p.downlink = down ? DirectionParams{.policy = Policy::kStatic, .static_window_bytes = down}
                    : DirectionParams{.policy = Policy::kOff};
  p.min_window_bytes = 2920;
  return p;
}

struct Sent {
  PacketResult result;
  PacketView view;  // as it left the engine
  std::vector<uint8_t> bytes;
};

// A connection between a phone and a server, seen at the gateway.
class Conn {
 public:
  Conn(Engine& e, bool v6 = false) : e_(e) {
    phone_ = v6 ? "2001:2:0:1::2" : "198.18.0.2";
    server_ = v6 ? "2001:2:0:2::2" : "198.19.0.2";
  }
  Nanos now = 0;

  Sent from_phone(TcpSpec s) {
    s.src = phone_;
    s.dst = server_;
    s.sport = 40000;
    s.dport = 443;
    return run(s);
  }
  Sent from_server(TcpSpec s) {
    s.src = server_;
    s.dst = phone_;
    s.sport = 443;
    s.dport = 40000;
    return run(s);
  }
  // SYN from the phone, SYN-ACK from the server, ACK from the phone.
  void handshake(std::optional<uint8_t> phone_ws, std::optional<uint8_t> server_ws) {
    from_phone({.seq = kPhoneIsn,
                .flags = tcpflag::kSyn,
                .window = 64240,
                .mss = 1460,
                .wscale = phone_ws});
    from_server({.seq = kServerIsn,
                 .ack = kPhoneIsn + 1,
                 .flags = tcpflag::kSyn | tcpflag::kAck,
                 .window = 65535,
                 .mss = 1460,
                 .wscale = server_ws});
    from_phone({.seq = kPhoneIsn + 1, .ack = kServerIsn + 1, .window = 502});
  }
  // A server ACK for `acked` phone bytes advertising `raw` (as the server wrote it).
  Sent server_ack(uint32_t acked, uint16_t raw, size_t payload = 0) {
    return from_server({.seq = kServerIsn + 1,
                        .ack = kPhoneIsn + 1 + acked,
                        .window = raw,
                        .payload_len = payload});
  }

 private:
  Sent run(const TcpSpec& s) {
    Sent out;
    out.bytes = testpkt::build(s);
    const std::vector<uint8_t> before = out.bytes;
    out.result = e_.process(out.bytes, now);
    EXPECT_EQ(parse_packet(out.bytes, out.view), ParseError::kNone);
    EXPECT_EQ(tcp_checksum(out.bytes, out.view), out.view.checksum)
        << "bad checksum after engine: " << testpkt::describe(out.bytes);
    if (!out.result.modified) {
      EXPECT_EQ(out.bytes, before) << "changed but not flagged";
    }
    // Everything but the window and the checksum is byte-identical.
    PacketView in;
    EXPECT_EQ(parse_packet(before, in), ParseError::kNone);
    std::vector<uint8_t> a = before, b = out.bytes;
    for (auto* v : {&a, &b}) {
      const size_t w = in.tcp_offset + 14, c = in.tcp_offset + 16;
      (*v)[w] = (*v)[w + 1] = (*v)[c] = (*v)[c + 1] = 0;
    }
    EXPECT_EQ(a, b) << "bytes other than window/checksum changed";
    EXPECT_LE(out.view.window, in.window) << "window raised";
    now += kMilli;
    return out;
  }
  Engine& e_;
  std::string phone_, server_;
};

uint64_t packets(const Engine& e, Direction d, Outcome o) {
  return e.counters().packets[static_cast<size_t>(d)][static_cast<size_t>(o)].get();
}

TEST(Engine, StaticUplinkClampsAcksToPhoneThroughServerScale) {
  for (bool v6 : {false, true}) {
    Engine e(100, static_params(16384));
    Conn c(e, v6);
    c.handshake(7, 9);                         // the server's ACKs are scaled by 2^9
    const Sent s = c.server_ack(70000, 1000);  // 512000 bytes offered
    EXPECT_TRUE(s.result.modified);
    EXPECT_EQ(s.result.outcome, Outcome::kRewritten);
    EXPECT_EQ(s.view.window, 32) << "16384 / 512";
  }
}

TEST(Engine, RoundsUpSoAdvertisedBytesAreAtLeastTheTarget) {
  Engine e(100, static_params(10000));
  Conn c(e);
  c.handshake(7, 7);
  const Sent s = c.server_ack(70000, 1000);
  EXPECT_EQ(s.view.window, 79) << "ceil(10000/128)";
}

TEST(Engine, ShiftAbove14CountsAs14) {
  Engine e(100, static_params(100000));
  Conn c(e);
  c.handshake(7, 15);
  const Sent s = c.server_ack(70000, 100);
  EXPECT_EQ(s.view.window, 7) << "ceil(100000/16384)";
}

TEST(Engine, NoScaleUnlessBothSynsCarryIt) {
  Engine e(100, static_params(16384));
  Conn c(e);
  c.handshake(std::nullopt, 9);  // the server's option is void: windows are unscaled
  const Sent s = c.server_ack(70000, 60000);
  EXPECT_EQ(s.view.window, 16384);
}

TEST(Engine, SynAndSynAckNeverTouched) {
  Engine e(100, static_params(4096, 4096));
  Conn c(e);
  const Sent syn = c.from_phone({.seq = 1, .flags = tcpflag::kSyn, .window = 64240, .wscale = 7});
  EXPECT_FALSE(syn.result.modified);
  EXPECT_EQ(syn.view.window, 64240);
  const Sent synack = c.from_server(
      {.seq = 9, .ack = 2, .flags = tcpflag::kSyn | tcpflag::kAck, .window = 65535, .wscale = 7});
  EXPECT_FALSE(synack.result.modified);
  EXPECT_EQ(synack.view.window, 65535);
}

TEST(Engine, MidstreamFlowIsCountedUnregulatedAndUntouched) {
  Engine e(100, static_params(4096));
  Conn c(e);
  const Sent s = c.server_ack(5000, 65535);
  EXPECT_FALSE(s.result.modified);
  EXPECT_EQ(s.result.outcome, Outcome::kUnregulated);
  c.server_ack(6000, 65535);
  EXPECT_EQ(e.counters().flows_unregulated.get(), 1u) << "counted once per flow";
  EXPECT_EQ(packets(e, Direction::kToSubscriber, Outcome::kUnregulated), 2u);
}

TEST(Engine, RightEdgeNeverMovesBack) {
  Engine e(100, static_params(8192));
  Conn c(e);
  c.handshake(0, 0);
  // The SYN-ACK already offered the phone [isn+1, isn+1+65535): the first ACKs may only
  // shrink as the ack advances.
  Sent s = c.server_ack(0, 65535);
  EXPECT_EQ(s.view.window, 65535);
  EXPECT_EQ(s.result.outcome, Outcome::kPassed);
  s = c.server_ack(30000, 65535);
  EXPECT_EQ(s.view.window, 65535 - 30000);
  s = c.server_ack(60000, 65535);
  EXPECT_EQ(s.view.window, 8192);
  // Reordered older ACK: its window must still reach the edge offered (60000 + 8192).
  s = c.server_ack(59000, 65535);
  EXPECT_EQ(s.view.window, 8192 + 1000);
  EXPECT_GE(e.counters().right_edge_holds[0].get(), 2u);
}

TEST(Engine, FloorAppliesBelowMinWindow) {
  EngineParams p = static_params(1000);
  Engine e(100, p);
  Conn c(e);
  c.handshake(7, 7);
  const Sent s = c.server_ack(100000, 1000);
  EXPECT_EQ(s.view.window, encode_window_round_up(2920, 7));
  EXPECT_EQ(e.counters().floor_holds[0].get(), 1u);
}

TEST(Engine, DataCarryingAckOddLengthIsClamped) {
  Engine e(100, static_params(16384));
  Conn c(e);
  c.handshake(7, 7);
  const Sent s = c.server_ack(70000, 1000, 1333);
  EXPECT_TRUE(s.result.modified);
  EXPECT_EQ(s.view.window, 128);
  EXPECT_EQ(s.view.payload_len, 1333u);
}

TEST(Engine, DownlinkKnobClampsAcksFromPhoneThroughPhoneScale) {
  Engine e(100, static_params(1 << 30, 32768));
  Conn c(e);
  c.handshake(6, 9);
  const Sent s = c.from_phone({.seq = kPhoneIsn + 1,
                               .ack = kServerIsn + 1 + 200000,
                               .window = 3000});  // 192000 bytes at 2^6
  EXPECT_EQ(s.view.window, 512);
  EXPECT_EQ(packets(e, Direction::kFromSubscriber, Outcome::kRewritten), 1u);
}

TEST(Engine, ObserveNeverModifies) {
  EngineParams p = static_params(4096);
  p.uplink.policy = Policy::kObserve;
  Engine e(100, p);
  Conn c(e);
  c.handshake(7, 7);
  const Sent s = c.server_ack(70000, 1000);
  EXPECT_FALSE(s.result.modified);
  EXPECT_EQ(e.active_flows(), 1u);
}

TEST(Engine, BothOffTracksNothing) {
  EngineParams p = static_params(4096);
  p.uplink.policy = Policy::kOff;
  Engine e(100, p);
  Conn c(e);
  c.handshake(7, 7);
  EXPECT_FALSE(c.server_ack(70000, 1000).result.modified);
  EXPECT_EQ(e.active_flows(), 0u);
}

TEST(Engine, ReloadAppliesToExistingFlows) {
  Engine e(100, static_params(65535 * 4));
  Conn c(e);
  c.handshake(7, 7);
  EXPECT_EQ(c.server_ack(70000, 1000).view.window, 1000);
  e.set_params(static_params(16384));
  EXPECT_EQ(c.server_ack(200000, 1000).view.window, 128);
  EXPECT_EQ(e.active_flows(), 1u);
}

TEST(Engine, NonSubscriberAndUnparsedPassUnchanged) {
  Engine e(100, static_params(4096));
  std::vector<uint8_t> other = testpkt::build({.src = "203.0.113.1", .dst = "198.19.0.2"});
  const auto before = other;
  EXPECT_EQ(e.process(other, 0).outcome, Outcome::kNotSubscriber);
  EXPECT_EQ(other, before);
  std::vector<uint8_t> junk = {0x45, 0, 0, 20, 1, 2, 3};
  const auto junk_before = junk;
  EXPECT_EQ(e.process(junk, 0).outcome, Outcome::kUnparsed);
  EXPECT_EQ(junk, junk_before);
  size_t reasons = 0;
  for (const auto& r : e.counters().parse_errors) reasons += r.get();
  EXPECT_EQ(reasons, 1u);
}

TEST(Engine, TruncatedCopyIsNeverModified) {
  Engine e(100, static_params(4096));
  Conn c(e);
  c.handshake(7, 7);
  std::vector<uint8_t> b = testpkt::build({.src = "198.19.0.2",
                                           .dst = "198.18.0.2",
                                           .sport = 443,
                                           .dport = 40000,
                                           .seq = kServerIsn + 1,
                                           .ack = kPhoneIsn + 100000,
                                           .window = 1000});
  const auto before = b;
  const PacketResult r = e.process(b, 5 * kMilli, {.truncated = true});
  EXPECT_FALSE(r.modified);
  EXPECT_EQ(r.outcome, Outcome::kTruncatedCopy);
  EXPECT_EQ(b, before);
}

TEST(Engine, ChecksumNotReadyGetsFullChecksum) {
  Engine e(100, static_params(4096));
  Conn c(e);
  c.handshake(7, 7);
  TcpSpec s{.src = "198.19.0.2",
            .dst = "198.18.0.2",
            .sport = 443,
            .dport = 40000,
            .seq = kServerIsn + 1,
            .ack = kPhoneIsn + 100000,
            .window = 1000,
            .payload_len = 101,
            .partial_checksum = true};
  std::vector<uint8_t> b = testpkt::build(s);
  const PacketResult r = e.process(b, 5 * kMilli, {.checksum = ChecksumState::kNotReady});
  ASSERT_TRUE(r.modified);
  PacketView v;
  ASSERT_EQ(parse_packet(b, v), ParseError::kNone);
  EXPECT_EQ(v.checksum, tcp_checksum(b, v));
  EXPECT_EQ(e.counters().checksum_full.get(), 1u);
}

TEST(Engine, LifecycleFinRstAndIdleExpiry) {
  EngineParams p = static_params(4096);
  p.closed_timeout = 10 * kSecond;
  p.idle_timeout = 300 * kSecond;
  Engine e(100, p);
  Conn c(e);
  c.handshake(7, 7);
  EXPECT_EQ(e.active_flows(), 1u);
  c.from_phone(
      {.seq = kPhoneIsn + 1, .ack = kServerIsn + 1, .flags = tcpflag::kFin | tcpflag::kAck});
  c.from_server(
      {.seq = kServerIsn + 1, .ack = kPhoneIsn + 2, .flags = tcpflag::kFin | tcpflag::kAck});
  EXPECT_EQ(e.counters().flows_closed.get(), 1u);
  e.expire(c.now + 5 * kSecond);
  EXPECT_EQ(e.active_flows(), 1u) << "closed flows linger for late ACKs";
  e.expire(c.now + 11 * kSecond);
  EXPECT_EQ(e.active_flows(), 0u);

  Conn d(e);
  d.now = 1000 * kSecond;
  d.handshake(7, 7);
  e.expire(d.now + 299 * kSecond);
  EXPECT_EQ(e.active_flows(), 1u);
  e.expire(d.now + 301 * kSecond);
  EXPECT_EQ(e.active_flows(), 0u);
  EXPECT_EQ(e.counters().flows_expired.get(), 2u);
}

TEST(Engine, PortReuseWithNewIsnStartsOver) {
  Engine e(100, static_params(16384));
  Conn c(e);
  c.handshake(7, 7);
  c.from_phone({.seq = kPhoneIsn + 1, .ack = kServerIsn + 1, .flags = tcpflag::kRst});
  // New connection on the same ports without window scaling: windows are now unscaled.
  c.from_phone({.seq = 77, .flags = tcpflag::kSyn, .window = 64240});
  c.from_server({.seq = 88, .ack = 78, .flags = tcpflag::kSyn | tcpflag::kAck, .window = 65535});
  const Sent s = c.from_server({.seq = 89, .ack = 78 + 70000, .window = 60000});
  EXPECT_EQ(s.view.window, 16384);
}

TEST(Engine, HostileFlowCountStaysWithinCapacity) {
  Engine e(64, static_params(4096));
  for (uint32_t i = 0; i < 10000; ++i) {
    std::vector<uint8_t> b = testpkt::build({.src = "198.18.0.2",
                                             .dst = "198.19.0.2",
                                             .sport = static_cast<uint16_t>(1024 + i),
                                             .flags = tcpflag::kSyn});
    e.process(b, i);
  }
  EXPECT_EQ(e.active_flows(), 64u);
  EXPECT_EQ(e.counters().flows_evicted.get(), 10000u - 64u);
}

}  // namespace
}  // namespace rsfc
