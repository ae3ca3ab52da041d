// Engine::adopt(): flows first seen mid-stream get the window scales conntrack recorded of
// their handshake, and are then clamped exactly like flows whose handshake rsfcd saw.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "packet_builder.h"
#include "rsfc/core/engine.h"
#include "rsfc/core/window.h"

namespace rsfc {
namespace {

using testpkt::TcpSpec;

constexpr uint32_t kPhoneIsn = 1000, kServerIsn = 500000;
constexpr uint16_t kPhonePort = 40000, kServerPort = 443;

EngineParams params(Policy up = Policy::kStatic, uint32_t up_bytes = 16384,
                    uint32_t down_bytes = 8192) {
  EngineParams p;
  p.subscriber_networks = {*Prefix::parse("198.18.0.0/16"), *Prefix::parse("2001:2:0:1::/64")};
  p.uplink = {.policy = up, .static_window_bytes = up_bytes};
  p.downlink = {.policy = Policy::kStatic, .static_window_bytes = down_bytes};
  return p;
}

IpAddr addr(const std::string& s) {
  IpAddr a;
  if (s.find(':') != std::string::npos) {
    a.family = 6;
    EXPECT_EQ(inet_pton(AF_INET6, s.c_str(), a.bytes.data()), 1);
  } else {
    a.family = 4;
    EXPECT_EQ(inet_pton(AF_INET, s.c_str(), a.bytes.data()), 1);
  }
  return a;
}

// A phone-server connection at the gateway, and what conntrack says of it.
class Conn {
 public:
  explicit Conn(Engine& e, bool v6 = false)
      : e_(e),
        phone_(v6 ? "2001:2:0:1::2" : "198.18.0.2"),
        server_(v6 ? "2001:2:0:2::2" : "198.19.0.2") {}
  Nanos now = kSecond;

  PacketResult from_phone(TcpSpec s, uint16_t* window_out = nullptr) {
    s.src = phone_;
    s.dst = server_;
    s.sport = kPhonePort;
    s.dport = kServerPort;
    return run(s, window_out);
  }
  PacketResult from_server(TcpSpec s, uint16_t* window_out = nullptr) {
    s.src = server_;
    s.dst = phone_;
    s.sport = kServerPort;
    s.dport = kPhonePort;
    return run(s, window_out);
  }
  // A server ACK of `acked` phone bytes with the raw window `raw`; the window it leaves with.
  uint16_t server_ack(uint32_t acked, uint16_t raw, PacketResult* r = nullptr) {
    uint16_t w = 0;
    const PacketResult res =
        from_server({.seq = kServerIsn + 1, .ack = kPhoneIsn + 1 + acked, .window = raw}, &w);
    if (r) *r = res;
    return w;
  }
  uint16_t phone_ack(uint32_t acked, uint16_t raw) {
    uint16_t w = 0;
    from_phone({.seq = kPhoneIsn + 1, .ack = kServerIsn + 1 + acked, .window = raw}, &w);
    return w;
  }
  void handshake(uint8_t phone_ws, uint8_t server_ws) {
    from_phone({.seq = kPhoneIsn, .flags = tcpflag::kSyn, .window = 64240, .wscale = phone_ws});
    from_server({.seq = kServerIsn,
                 .ack = kPhoneIsn + 1,
                 .flags = tcpflag::kSyn | tcpflag::kAck,
                 .window = 65535,
                 .wscale = server_ws});
    from_phone({.seq = kPhoneIsn + 1, .ack = kServerIsn + 1, .window = 502});
  }

  // Conntrack's entry: the phone initiated (original = phone -> server) or the server did.
  ConntrackTcp conntrack(bool phone_initiated, uint8_t phone_ws, uint8_t server_ws,
                         bool phone_flag = true, bool server_flag = true) const {
    const ConnTuple up{addr(phone_), addr(server_), kPhonePort, kServerPort};
    const ConnTuple down{addr(server_), addr(phone_), kServerPort, kPhonePort};
    ConntrackTcp ct;
    ct.original = phone_initiated ? up : down;
    ct.reply = phone_initiated ? down : up;
    ct.original_scale = phone_initiated ? phone_ws : server_ws;
    ct.reply_scale = phone_initiated ? server_ws : phone_ws;
    ct.original_scale_seen = phone_initiated ? phone_flag : server_flag;
    ct.reply_scale_seen = phone_initiated ? server_flag : phone_flag;
    return ct;
  }

 private:
  PacketResult run(const TcpSpec& s, uint16_t* window_out) {
    std::vector<uint8_t> bytes = testpkt::build(s);
    const PacketResult r = e_.process(bytes, now);
    PacketView v;
    EXPECT_EQ(parse_packet(bytes, v), ParseError::kNone);
    EXPECT_EQ(tcp_checksum(bytes, v), v.checksum);
    EXPECT_LE(v.window, s.window) << "window raised";
    if (window_out) *window_out = v.window;
    now += kMilli;
    return r;
  }
  Engine& e_;
  std::string phone_, server_;
};

TEST(Adoption, MidstreamFlowIsReportedOnceForAdoption) {
  Engine e(100, params());
  Conn c(e);
  PacketResult r;
  c.server_ack(5000, 65535, &r);
  EXPECT_TRUE(r.adopt_request);
  EXPECT_EQ(r.outcome, Outcome::kUnregulated);
  c.server_ack(6000, 65535, &r);
  EXPECT_FALSE(r.adopt_request) << "asked once, on the flow's first packet";
  Engine with_syn(100, params());
  Conn h(with_syn);
  EXPECT_FALSE(h.from_phone({.seq = kPhoneIsn, .flags = tcpflag::kSyn, .wscale = 7}).adopt_request);
}

TEST(Adoption, AdoptedMidstreamFlowIsClampedLikeAHandshakeSeenOne) {
  Engine seen(100, params());
  Conn s(seen);
  s.handshake(6, 9);
  Engine adopted(100, params());
  Conn a(adopted);
  EXPECT_EQ(a.server_ack(1000, 65535), 65535) << "unregulated before the answer";
  EXPECT_EQ(adopted.adopt(a.conntrack(true, 6, 9), a.now), AdoptResult::kAdopted);
  EXPECT_EQ(adopted.counters().flows_adopted.get(), 1u);
  EXPECT_EQ(adopted.counters().flows_unregulated.get(), 1u);
  // The handshake-seen flow's first ACKs are held by the SYN-ACK's right edge; far enough
  // on, both flows get the same windows: 16384 B through the server's 2^9, 8192 B through
  // the phone's 2^6.
  for (uint32_t acked : {200000u, 300000u, 400000u}) {
    const uint16_t want = s.server_ack(acked, 4000);
    EXPECT_EQ(want, encode_window_round_up(16384, 9));
    EXPECT_EQ(a.server_ack(acked, 4000), want) << "acked " << acked;
    EXPECT_EQ(a.phone_ack(acked, 3000), s.phone_ack(acked, 3000));
  }
  EXPECT_EQ(a.phone_ack(500000, 3000), encode_window_round_up(8192, 6));
  const Flow& f = adopted.flow(0);
  EXPECT_EQ(f.state, FlowState::kEstablished);
  EXPECT_TRUE(f.sub_initiated);
}

TEST(Adoption, RightEdgeIsLearntFromTheFirstClampAfterAdoption) {
  Engine e(100, params());
  Conn c(e);
  c.server_ack(1000, 65535);
  ASSERT_EQ(e.adopt(c.conntrack(true, 0, 0), c.now), AdoptResult::kAdopted);
  EXPECT_EQ(c.server_ack(100000, 65535), 16384) << "no edge known yet: the target";
  // A reordered older ACK must still reach the edge just advertised.
  EXPECT_EQ(c.server_ack(99000, 65535), 16384 + 1000);
}

TEST(Adoption, OrientationFollowsTheInitiator) {
  for (bool phone_initiated : {true, false}) {
    Engine e(100, params());
    Conn c(e);
    c.server_ack(1000, 65535);
    ASSERT_EQ(e.adopt(c.conntrack(phone_initiated, 3, 11), c.now), AdoptResult::kAdopted);
    const Flow& f = e.flow(0);
    EXPECT_EQ(f.sub_scale, 3) << "phone initiated: " << phone_initiated;
    EXPECT_EQ(f.peer_scale, 11);
    EXPECT_EQ(f.sub_initiated, phone_initiated);
    EXPECT_EQ(c.server_ack(100000, 2000), encode_window_round_up(16384, 11));
    EXPECT_EQ(c.phone_ack(100000, 2000), encode_window_round_up(8192, 3));
  }
}

TEST(Adoption, MissingScaleFlagLeavesTheFlowUnregulated) {
  for (const auto& [phone_flag, server_flag] :
       {std::pair{false, true}, {true, false}, {false, false}}) {
    Engine e(100, params());
    Conn c(e);
    c.server_ack(1000, 65535);
    EXPECT_EQ(e.adopt(c.conntrack(true, 7, 7, phone_flag, server_flag), c.now),
              AdoptResult::kNoScale);
    PacketResult r;
    EXPECT_EQ(c.server_ack(100000, 65535, &r), 65535);
    EXPECT_EQ(r.outcome, Outcome::kUnregulated);
    EXPECT_EQ(e.counters().flows_adopted.get(), 0u);
    EXPECT_EQ(e.flow(0).state, FlowState::kMidstream);
  }
}

TEST(Adoption, HandshakeSeenSinceIsNeverOverridden) {
  Engine e(100, params());
  Conn c(e);
  c.handshake(7, 7);
  EXPECT_EQ(e.adopt(c.conntrack(true, 2, 2), c.now), AdoptResult::kNotNeeded);
  EXPECT_EQ(e.flow(0).peer_scale, 7);
  EXPECT_EQ(c.server_ack(100000, 4000), encode_window_round_up(16384, 7));
  // A flow first seen mid-stream that then saw a new handshake (the answer came late).
  Engine m(100, params());
  Conn d(m);
  d.server_ack(1000, 65535);
  d.handshake(7, 7);
  EXPECT_EQ(m.adopt(d.conntrack(true, 2, 2), d.now), AdoptResult::kNotNeeded);
  EXPECT_EQ(m.flow(0).peer_scale, 7);
  // Adopted once: a second answer (the start-up dump and a lookup) changes nothing.
  Engine twice(100, params());
  Conn t(twice);
  t.server_ack(1000, 65535);
  EXPECT_EQ(twice.adopt(t.conntrack(true, 5, 5), t.now), AdoptResult::kAdopted);
  EXPECT_EQ(twice.adopt(t.conntrack(true, 2, 2), t.now), AdoptResult::kNotNeeded);
  EXPECT_EQ(twice.flow(0).peer_scale, 5);
  EXPECT_EQ(twice.counters().flows_adopted.get(), 1u);
}

TEST(Adoption, AbsentFlowIsCreatedAlreadyRegulated) {
  for (bool v6 : {false, true}) {
    Engine e(100, params());
    Conn c(e, v6);
    EXPECT_EQ(e.adopt(c.conntrack(false, 4, 8), c.now), AdoptResult::kAdopted);
    EXPECT_EQ(e.active_flows(), 1u);
    PacketResult r;
    EXPECT_EQ(c.server_ack(100000, 4000, &r), encode_window_round_up(16384, 8));
    EXPECT_FALSE(r.adopt_request);
    EXPECT_FALSE(r.new_flow);
    EXPECT_EQ(r.outcome, Outcome::kRewritten);
  }
}

TEST(Adoption, StartupAdoptionNeverEvictsATrackedFlow) {
  Engine e(1, params());
  Conn c(e);
  c.handshake(7, 7);
  ConntrackTcp other = c.conntrack(true, 7, 7);
  other.original.sport = other.reply.dport = 40001;
  EXPECT_EQ(e.adopt(other, c.now), AdoptResult::kNoRoom);
  EXPECT_EQ(e.counters().flows_evicted.get(), 0u);
  EXPECT_EQ(e.flow(0).key.sub_port, kPhonePort);
  // A subscriber at its cap keeps its own embryonic flow (a new packet would take its place).
  EngineParams p = params();
  p.max_flows_per_subscriber = 1;
  Engine capped(100, p);
  Conn d(capped);
  d.from_phone({.seq = kPhoneIsn, .flags = tcpflag::kSyn, .wscale = 7});
  EXPECT_EQ(capped.adopt(other, d.now), AdoptResult::kNoRoom);
  EXPECT_EQ(capped.active_flows(), 1u);
  EXPECT_EQ(capped.counters().flows_evicted.get(), 0u);
  EXPECT_EQ(capped.counters().flows_subscriber_cap[0].get() +
                capped.counters().flows_subscriber_cap[1].get(),
            0u);
  // Another subscriber's flow is adopted.
  ConntrackTcp neighbour = other;
  neighbour.original.src = neighbour.reply.dst = addr("198.18.0.3");
  EXPECT_EQ(capped.adopt(neighbour, d.now), AdoptResult::kAdopted);
  EXPECT_EQ(capped.active_flows(), 2u);
}

TEST(Adoption, NotASubscribersConnection) {
  Engine e(100, params());
  ConntrackTcp ct;
  ct.original = {addr("10.0.0.1"), addr("10.0.0.2"), 1, 2};
  ct.reply = {addr("10.0.0.2"), addr("10.0.0.1"), 2, 1};
  ct.original_scale_seen = ct.reply_scale_seen = true;
  EXPECT_EQ(e.adopt(ct, 0), AdoptResult::kNotSubscriber);
  ct.original.dst = ct.reply.src = addr("198.18.0.9");  // both ends subscribers
  ct.original.src = ct.reply.dst = addr("198.18.0.8");
  EXPECT_EQ(e.adopt(ct, 0), AdoptResult::kNotSubscriber);
  EXPECT_EQ(e.active_flows(), 0u);
}

TEST(Adoption, TurnedOffNeitherAsksNorAdopts) {
  EngineParams p = params();
  p.adopt_from_conntrack = false;
  Engine e(100, p);
  Conn c(e);
  PacketResult r;
  c.server_ack(1000, 65535, &r);
  EXPECT_FALSE(r.adopt_request);
  EXPECT_EQ(e.adopt(c.conntrack(true, 7, 7), c.now), AdoptResult::kOff);
  EXPECT_EQ(c.server_ack(100000, 65535), 65535);
}

TEST(Adoption, NewConnectionOnTheAdoptedPortsStartsOver) {
  Engine e(100, params());
  Conn c(e);
  ASSERT_EQ(e.adopt(c.conntrack(true, 2, 2), c.now), AdoptResult::kAdopted);
  // No ACK has gone either way yet, so no edge is known: a SYN is a new connection.
  c.handshake(7, 9);
  EXPECT_EQ(e.flow(0).peer_scale, 9);
  EXPECT_EQ(c.server_ack(200000, 4000), encode_window_round_up(16384, 9));
}

TEST(Adoption, RsfcRegulatesAnAdoptedUpload) {
  Engine e(100, params(Policy::kRsfc));
  Conn c(e);
  c.from_phone({.seq = kPhoneIsn + 1, .ack = kServerIsn + 1, .window = 502, .payload_len = 1400});
  ASSERT_EQ(e.adopt(c.conntrack(true, 7, 9), c.now), AdoptResult::kAdopted);
  // The server advertises 32 MB; rsfc's start-up clamp keeps it within reach at once.
  PacketResult r;
  const uint16_t w = c.server_ack(1400, 65535, &r);
  EXPECT_TRUE(r.knob_ack);
  EXPECT_EQ(r.outcome, Outcome::kRewritten);
  EXPECT_LE(window_bytes(w, 9), uint64_t{1} << 20);
  EXPECT_GE(e.counters().rsfc_windows_applied.get(), 1u);
}

}  // namespace
}  // namespace rsfc
