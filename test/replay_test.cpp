// rsfc-replay's library on scripted captures: a handshake and ACKs under static and observe,
// a flow without its handshake, an unanswered SYN, non-IP / non-subscriber / unparsable
// frames, cut records, port reuse, decision records, and a capture broken part-way.
#include "rsfc/tools/replay.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "packet_builder.h"
#include "pcap_builder.h"
#include "thin_download_script.h"

namespace rsfc::replay {
namespace {

using testpkt::TcpSpec;

constexpr uint32_t kPhoneIsn = 1000, kServerIsn = 500000;
constexpr uint32_t kT0 = 1'700'000'000;

EngineParams params(DirectionParams uplink, DirectionParams downlink = {}) {
  EngineParams p;
  p.subscriber_networks = {*Prefix::parse("198.18.0.0/16"), *Prefix::parse("2001:2:0:1::/64")};
  p.uplink = uplink;
  p.downlink = downlink;
  p.min_window_bytes = 2920;
  return p;
}
DirectionParams static_policy(uint32_t n) {
  return {.policy = Policy::kStatic, .static_window_bytes = n};
}

// A handshake's SYN and SYN-ACK as the captures' endpoints send them (MSS 1460, scale 7, SACK,
// timestamps); addresses and ports are the caller's.
TcpSpec syn(uint32_t isn, uint16_t window, uint32_t tsval) {
  return {.seq = isn,
          .flags = tcpflag::kSyn,
          .window = window,
          .mss = 1460,
          .wscale = 7,
          .sack_permitted = true,
          .timestamps = true,
          .tsval = tsval};
}
TcpSpec syn_ack(uint32_t isn, uint32_t ack, uint16_t window, uint32_t tsval, uint32_t tsecr) {
  return {.seq = isn,
          .ack = ack,
          .flags = tcpflag::kSyn | tcpflag::kAck,
          .window = window,
          .mss = 1460,
          .wscale = 7,
          .sack_permitted = true,
          .timestamps = true,
          .tsval = tsval,
          .tsecr = tsecr};
}

// A capture as a gateway's 802.1Q trunk would give it: Ethernet + one VLAN tag, 1 ms apart.
class Capture {
 public:
  uint32_t us = 0;
  testpcap::Writer w{{.linktype = pcap::linktype::kEthernet}};

  void tcp(const TcpSpec& s) { frame(testpcap::ethernet(testpkt::build(s), {0x8100})); }
  void frame(const std::vector<uint8_t>& f, uint32_t orig_len = 0) {
    w.add(kT0 + us / 1'000'000, us % 1'000'000, f, orig_len);
    us += 1000;
  }
  std::string write(const std::string& tag) const {
    const std::string path =
        ::testing::TempDir() + "rsfc_replay_" + tag + "_" + std::to_string(::getpid()) + ".pcap";
    testpcap::write_file(path, w.bytes);
    return path;
  }
};

// Flow A: phone 198.18.0.2:40000 uploads to 198.19.0.2:5201 (both scale 7). The server's
// 20 ACKs offer 1000 << 7 = 128000 bytes, two final ones 100 << 7 = 12800.
void flow_a(Capture& c) {
  auto phone = [&](TcpSpec s) {
    s.src = "198.18.0.2", s.dst = "198.19.0.2", s.sport = 40000, s.dport = 5201;
    c.tcp(s);
  };
  auto server = [&](TcpSpec s) {
    s.src = "198.19.0.2", s.dst = "198.18.0.2", s.sport = 5201, s.dport = 40000;
    c.tcp(s);
  };
  phone(syn(kPhoneIsn, 64240, 1));
  server(syn_ack(kServerIsn, kPhoneIsn + 1, 65535, 9, 1));
  phone({.seq = kPhoneIsn + 1, .ack = kServerIsn + 1, .window = 502});
  for (uint32_t i = 0; i < 5; ++i) {
    phone({.seq = kPhoneIsn + 1 + 1000 * i,
           .ack = kServerIsn + 1,
           .flags = tcpflag::kAck | tcpflag::kPsh,
           .window = 502,
           .payload_len = 1000});
  }
  for (uint32_t i = 1; i <= 20; ++i) {
    server({.seq = kServerIsn + 1, .ack = kPhoneIsn + 1 + 10000 * i, .window = 1000});
  }
  for (uint32_t i = 21; i <= 22; ++i) {
    server({.seq = kServerIsn + 1, .ack = kPhoneIsn + 1 + 10000 * i, .window = 100});
  }
}

// Everything else in the mixed capture.
void others(Capture& c) {
  // Flow B (IPv6): ACKs of a connection whose handshake came before the capture.
  for (uint32_t i = 0; i < 3; ++i) {
    c.tcp({.src = "2001:2:0:2::2",
           .dst = "2001:2:0:1::2",
           .sport = 443,
           .dport = 40001,
           .seq = 77,
           .ack = 1000 + 1000 * i,
           .window = 800});
  }
  // Flow C: an unanswered SYN, retransmitted.
  for (int i = 0; i < 2; ++i) {
    c.tcp({.src = "198.18.0.2",
           .dst = "198.19.0.2",
           .sport = 40002,
           .dport = 80,
           .seq = 42,
           .flags = tcpflag::kSyn,
           .window = 64240,
           .wscale = 7});
  }
  // Neither end a subscriber.
  c.tcp({.src = "198.19.0.2", .dst = "198.19.0.3", .sport = 1, .dport = 2});
  // ARP.
  c.frame(testpcap::ethernet(std::vector<uint8_t>(28, 0), {}, 0x0806));
  // An "IPv4" ethertype carrying a version-5 packet.
  c.frame(testpcap::ethernet(
      std::vector<uint8_t>{0x55, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string line_with(const std::vector<std::string>& lines, const std::string& a,
                      const std::string& b) {
  for (const auto& l : lines) {
    if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return l;
  }
  return "";
}

#define EXPECT_HAS(text, fragment)                                                            \
  EXPECT_NE((text).find(fragment), std::string::npos) << "missing " << (fragment) << " in:\n" \
                                                      << (text)

TEST(ReplayPolicy, ArgumentsAreCheckedLikeTheConfig) {
  struct Case {
    const char* arg;
    bool uplink;
    bool ok;
    Policy policy;
    uint32_t bytes;
    const char* error;
  } cases[] = {
      {"rsfc", true, true, Policy::kRsfc, 0, ""},
      {"observe", true, true, Policy::kObserve, 0, ""},
      {"off", false, true, Policy::kOff, 0, ""},
      {"drwa", false, true, Policy::kDrwa, 0, ""},
      {"static:16384", true, true, Policy::kStatic, 16384, ""},
      {"static:1073725440", false, true, Policy::kStatic, 1073725440, ""},
      {"rsfc", false, true, Policy::kRsfc, 0, ""},
      {"drwa", true, false, Policy::kOff, 0, "downlink knob only"},
      {"static:", true, false, Policy::kOff, 0, "plain decimal"},
      {"static:12k", true, false, Policy::kOff, 0, "plain decimal"},
      {"static:-5", true, false, Policy::kOff, 0, "plain decimal"},
      {"static:1000", true, false, Policy::kOff, 0, "1072 .. 1073725440"},
      {"static:1073725441", true, false, Policy::kOff, 0, "1072 .. 1073725440"},
      {"static:2000", true, false, Policy::kOff, 0, "below min_window_bytes (2920)"},
      {"Static:5000", true, false, Policy::kOff, 0, "expected rsfc, drwa, static:N"},
      {"", true, false, Policy::kOff, 0, "expected"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.arg);
    auto d = parse_policy(c.arg, c.uplink, 2920);
    ASSERT_EQ(d.has_value(), c.ok) << (d ? "" : d.error().message);
    if (c.ok) {
      EXPECT_EQ(d->policy, c.policy);
      if (c.policy == Policy::kStatic) {
        EXPECT_EQ(d->static_window_bytes, c.bytes);
      }
    } else {
      EXPECT_HAS(d.error().message, c.error);
    }
  }
}

TEST(ReplayPolicy, ParamsMustTrackSomethingAndKnowSubscribers) {
  EXPECT_TRUE(check_params(params(static_policy(16384))));
  auto off = check_params(params({}, {}));
  ASSERT_FALSE(off);
  EXPECT_HAS(off.error().message, "both knobs are off");
  EngineParams p = params({.policy = Policy::kObserve});
  p.subscriber_networks.clear();
  auto nosub = check_params(p);
  ASSERT_FALSE(nosub);
  EXPECT_HAS(nosub.error().message, "subscriber_networks");
}

TEST(ReplayStats, WindowSamplesMinAndLowerMedian) {
  WindowSamples w;
  EXPECT_FALSE(w.min());
  EXPECT_FALSE(w.median());
  for (uint64_t v : {500, 500, 100, 900, 900, 900}) w.add(v);
  EXPECT_EQ(w.count(), 6u);
  EXPECT_EQ(*w.min(), 100u);
  EXPECT_EQ(*w.median(), 500u) << "sorted 100 500 500 900 900 900: lower median";
  w.add(900);
  EXPECT_EQ(*w.median(), 900u);
  EXPECT_FALSE(median({}));
  EXPECT_DOUBLE_EQ(*median({3.0}), 3.0);
  EXPECT_DOUBLE_EQ(*median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(*median({5.0, 1.0, 3.0}), 3.0);
}

TEST(Replay, StaticClampOfASyntheticCapture) {
  Capture c;
  flow_a(c);
  others(c);
  const std::string path = c.write("static");
  std::ostringstream out;
  auto s = replay_file(path, 1000, params(static_policy(16384)), &out);
  std::remove(path.c_str());
  ASSERT_TRUE(s) << s.error().message;

  EXPECT_FALSE(s->error);
  EXPECT_EQ(s->linktype, pcap::linktype::kEthernet);
  EXPECT_EQ(s->records, 3u + 5u + 22u + 3u + 2u + 3u);
  EXPECT_EQ(s->packets_to_engine, s->records - 1) << "all but the ARP frame";
  EXPECT_EQ(s->link_errors[static_cast<size_t>(pcap::LinkError::kNotIp)], 1u);
  EXPECT_EQ(s->parse_errors[static_cast<size_t>(ParseError::kBadIpVersion)], 1u);
  EXPECT_EQ(s->outcomes[static_cast<size_t>(Outcome::kNotSubscriber)], 1u);
  EXPECT_EQ(s->outcomes[static_cast<size_t>(Outcome::kUnregulated)], 3u);
  EXPECT_EQ(s->outcomes[static_cast<size_t>(Outcome::kRewritten)], 20u);
  EXPECT_EQ(s->flows_total, 3u);
  EXPECT_EQ(s->flows_regulated, 1u);
  EXPECT_EQ(s->flows_unregulated, 1u);
  EXPECT_EQ(s->flows_without_acks, 1u);
  EXPECT_EQ(s->flows_clamped, 1u);
  EXPECT_EQ(s->engine_flows_unregulated, 1u) << "the engine's own count agrees";
  EXPECT_EQ(s->knobs[0].acks, 22u);
  EXPECT_EQ(s->knobs[0].acks_rewritten, 20u);
  EXPECT_EQ(s->knobs[1].acks, 0u) << "downlink knob off";
  ASSERT_TRUE(s->share_acks_clamped());
  EXPECT_DOUBLE_EQ(*s->share_acks_clamped(), 20.0 / 22.0);
  EXPECT_FALSE(s->median_t_buff_ms) << "static makes no decision records";
  EXPECT_EQ(s->last_time - s->first_time, static_cast<Nanos>(s->records - 1) * kMilli);

  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 3u) << "one line per flow, no decisions under static:\n" << out.str();
  const std::string a = line_with(lines, "\"subscriber_port\":40000,", "\"type\":\"flow\"");
  ASSERT_FALSE(a.empty()) << out.str();
  EXPECT_HAS(a, "\"start_s\":0.000000,");
  EXPECT_HAS(a, "\"time_s\":0.029000,");
  EXPECT_HAS(a,
             "\"subscriber\":\"198.18.0.2\",\"subscriber_port\":40000,\"peer\":\"198.19.0.2\","
             "\"peer_port\":5201,\"status\":\"regulated\",\"initiator\":\"subscriber\"");
  EXPECT_HAS(a,
             "\"packets_to_subscriber\":23,\"packets_from_subscriber\":7,"
             "\"bytes_to_subscriber\":0,\"bytes_from_subscriber\":5000");
  // 20 ACKs lowered (4 held by the SYN-ACK's right edge, 16 to 16384), 2 already below.
  EXPECT_HAS(a,
             "\"uplink\":{\"policy\":\"static:16384\",\"acks\":22,\"acks_rewritten\":20,"
             "\"window_min\":12800,\"window_median\":16384,\"advertised_min\":12800,"
             "\"advertised_median\":128000}");
  EXPECT_HAS(a,
             "\"downlink\":{\"policy\":\"off\",\"acks\":0,\"acks_rewritten\":0,"
             "\"window_min\":null");
  EXPECT_HAS(a, "\"decisions\":0,\"t_buff_median_ms\":null}");
  const std::string b = line_with(lines, "\"subscriber_port\":40001,", "\"type\":\"flow\"");
  EXPECT_HAS(b, "\"subscriber\":\"2001:2:0:1::2\"");
  EXPECT_HAS(b, "\"status\":\"unregulated\",\"initiator\":null");
  EXPECT_HAS(b, "\"acks\":0,");
  const std::string c3 = line_with(lines, "\"subscriber_port\":40002,", "\"type\":\"flow\"");
  EXPECT_HAS(c3, "\"status\":\"without_acks\",\"initiator\":\"subscriber\"");
  EXPECT_HAS(c3, "\"packets_from_subscriber\":2,");

  const std::string json = to_json(*s);
  EXPECT_HAS(json, "\"complete\":true");
  EXPECT_HAS(json,
             "\"flows\":{\"total\":3,\"regulated\":1,\"unregulated\":1,\"without_acks\":1,"
             "\"clamped\":1}");
  EXPECT_HAS(json, "\"uplink\":{\"policy\":\"static:16384\",\"acks\":22,\"clamped\":20}");
  EXPECT_HAS(json, "\"clamped_share\":0.909091");
  EXPECT_HAS(json, "\"median_t_buff_ms\":null");
  EXPECT_HAS(json, "\"bad_ip_version\":1");
  EXPECT_HAS(json, "\"not_ip\":1");
  const std::string text = to_text(*s);
  EXPECT_HAS(text, "flows: 3 total, 1 regulated, 1 unregulated (handshake not in capture)");
  EXPECT_HAS(text, "would have been clamped: 1 flows; 20 of 22 ACKs (90.9%)");
  EXPECT_HAS(text, "parse errors: bad_ip_version 1, not_ip 1");
}

// A reset far outside the phone's window (a blind spoof) is passed, counted, and leaves the
// flow regulated; the summary says how many there were.
TEST(Replay, ResetsOutsideTheWindowAreCountedAndLeaveTheFlow) {
  Capture c;
  flow_a(c);
  c.tcp({.src = "198.19.0.2",
         .dst = "198.18.0.2",
         .sport = 5201,
         .dport = 40000,
         .seq = kServerIsn + 0x40000000u,
         .flags = tcpflag::kRst});
  c.tcp({.src = "198.19.0.2",
         .dst = "198.18.0.2",
         .sport = 5201,
         .dport = 40000,
         .seq = kServerIsn + 1,
         .ack = kPhoneIsn + 1 + 10000 * 23,
         .window = 1000});
  const std::string path = c.write("rst");
  auto s = replay_file(path, 1000, params(static_policy(16384)), nullptr);
  std::remove(path.c_str());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->engine_rst_ignored, 1u);
  EXPECT_EQ(s->flows_total, 1u);
  EXPECT_EQ(s->knobs[0].acks_rewritten, 21u) << "the ACK after the reset is still clamped";
  EXPECT_HAS(to_json(*s), "\"rst_ignored\":1");
  EXPECT_HAS(to_text(*s), "1 RSTs outside their receiver's window passed");
  Capture plain;
  flow_a(plain);
  const std::string path2 = plain.write("norst");
  auto s2 = replay_file(path2, 1000, params(static_policy(16384)), nullptr);
  std::remove(path2.c_str());
  ASSERT_TRUE(s2) << s2.error().message;
  EXPECT_EQ(s2->engine_rst_ignored, 0u);
  EXPECT_EQ(to_text(*s2).find("RSTs"), std::string::npos);
}

TEST(Replay, ObserveTracksButNeverClamps) {
  Capture c;
  flow_a(c);
  const std::string path = c.write("observe");
  std::ostringstream out;
  auto s = replay_file(path, 1000, params({.policy = Policy::kObserve}), &out);
  std::remove(path.c_str());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->flows_regulated, 1u);
  EXPECT_EQ(s->flows_clamped, 0u);
  EXPECT_EQ(s->knobs[0].acks, 22u);
  EXPECT_EQ(s->knobs[0].acks_rewritten, 0u);
  EXPECT_FALSE(s->share_acks_clamped()) << "no knob enforces";
  EXPECT_HAS(out.str(),
             "\"uplink\":{\"policy\":\"observe\",\"acks\":22,\"acks_rewritten\":0,"
             "\"window_min\":12800,\"window_median\":128000,");
  EXPECT_HAS(to_json(*s), "\"clamped_share\":null");
}

TEST(Replay, CutRecordsReachTheEngineMarkedTruncated) {
  Capture c;
  flow_a(c);
  // One more server ACK whose frame lost its 4-byte FCS in capture: the IP packet is whole,
  // but the record says caplen < len.
  const auto ack = testpkt::build({.src = "198.19.0.2",
                                   .dst = "198.18.0.2",
                                   .sport = 5201,
                                   .dport = 40000,
                                   .seq = kServerIsn + 1,
                                   .ack = kPhoneIsn + 1 + 300000,
                                   .window = 1000});
  const auto f = testpcap::ethernet(ack, {0x8100});
  c.frame(f, static_cast<uint32_t>(f.size() + 4));
  // And a data packet cut by a 100-byte snap length: its headers are all there.
  const auto data = testpkt::build({.src = "198.18.0.2",
                                    .dst = "198.19.0.2",
                                    .sport = 40000,
                                    .dport = 5201,
                                    .seq = kPhoneIsn + 5001,
                                    .ack = kServerIsn + 1,
                                    .payload_len = 1200});
  const auto df = testpcap::ethernet(data, {0x8100});
  c.frame(std::vector<uint8_t>(df.begin(), df.begin() + 100), static_cast<uint32_t>(df.size()));
  const std::string path = c.write("cut");
  auto s = replay_file(path, 1000, params(static_policy(16384)), nullptr);
  std::remove(path.c_str());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->truncated_records, 2u);
  // Both have their IP and TCP headers: replayed from them, and decided as the daemon, which
  // gets whole packets, decides them: the ACK's window is rewritten like the others' (the
  // daemon's own truncated copies are never modified: Engine.TruncatedCopyIsNeverModified).
  EXPECT_EQ(s->header_only_records, 2u);
  EXPECT_EQ(s->headers_cut_records, 0u);
  EXPECT_EQ(s->outcomes[static_cast<size_t>(Outcome::kTruncatedCopy)], 0u);
  EXPECT_EQ(s->outcomes[static_cast<size_t>(Outcome::kRewritten)], 21u);
  EXPECT_EQ(s->outcomes[static_cast<size_t>(Outcome::kUnparsed)], 0u);
  EXPECT_EQ(s->knobs[0].acks, 23u);
  EXPECT_EQ(s->knobs[0].acks_rewritten, 21u);
  EXPECT_HAS(to_text(*s),
             "2 records were cut by the capture's snap length: 2 replayed from their headers");
}

// An upload (phone 198.18.0.2:40000 -> :5201) and a download (:40001 <- :80) of one phone,
// timestamps on, `n` rounds of one data segment and its ACK each way, every frame cut to
// `snap` bytes (0: whole) as `tcpdump -s snap` keeps them.
Capture two_way(uint32_t n, size_t snap) {
  Capture c;
  auto put = [&](const TcpSpec& spec) {
    const auto f = testpcap::ethernet(testpkt::build(spec), {0x8100});
    if (snap == 0 || f.size() <= snap) return c.frame(f);
    c.frame(std::vector<uint8_t>(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(snap)),
            static_cast<uint32_t>(f.size()));
  };
  const auto hs = [&](uint16_t sport, uint16_t dport, uint32_t isn_p, uint32_t isn_s) {
    TcpSpec s = syn(isn_p, 64240, 1);
    s.sport = sport, s.dport = dport;
    put(s);
    s = syn_ack(isn_s, isn_p + 1, 65160, 7, 1);
    s.src = "198.19.0.2", s.dst = "198.18.0.2", s.sport = dport, s.dport = sport;
    put(s);
    put({.sport = sport,
         .dport = dport,
         .seq = isn_p + 1,
         .ack = isn_s + 1,
         .window = 502,
         .timestamps = true,
         .tsval = 2,
         .tsecr = 7});
  };
  hs(40000, 5201, 1000, 50000);
  hs(40001, 80, 3000, 90000);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t ts = 3 + 4 * i;  // the phone's 1 ms clock: 4 frames a round
    // Upload: a segment, the server's ACK.
    put({.sport = 40000,
         .dport = 5201,
         .seq = 1001 + 1448 * i,
         .ack = 50001,
         .window = 502,
         .timestamps = true,
         .tsval = ts,
         .tsecr = 7 + i,
         .payload_len = 1448});
    put({.src = "198.19.0.2",
         .dst = "198.18.0.2",
         .sport = 5201,
         .dport = 40000,
         .seq = 50001,
         .ack = 1001 + 1448 * (i + 1),
         .window = 2000,
         .timestamps = true,
         .tsval = 8 + i,
         .tsecr = ts});
    // Download: the server's segment, the phone's ACK.
    put({.src = "198.19.0.2",
         .dst = "198.18.0.2",
         .sport = 80,
         .dport = 40001,
         .seq = 90001 + 1448 * i,
         .ack = 3001,
         .window = 501,
         .timestamps = true,
         .tsval = 8 + i,
         .tsecr = ts,
         .payload_len = 1448});
    put({.sport = 40001,
         .dport = 80,
         .seq = 3001,
         .ack = 90001 + 1448 * (i + 1),
         .window = 3000,
         .timestamps = true,
         .tsval = ts + 2,
         .tsecr = 8 + i});
  }
  return c;
}

// Replays a capture under rsfc on both knobs; the JSON lines written.
std::vector<std::string> replay_lines(const Capture& c, Summary& s) {
  DirectionParams rsfc;
  rsfc.policy = Policy::kRsfc;
  std::ostringstream out;
  Replayer r(1000, params(rsfc, rsfc), &out);
  auto reader = pcap::PcapReader::from_bytes(c.w.bytes);
  EXPECT_TRUE(reader);
  pcap::Record rec;
  while (*reader->next(rec)) r.feed(rec, reader->header().linktype);
  s = r.finish();
  return lines_of(out.str());
}

// Operators keep header-only captures (tcpdump -s 96 / -s 128). The engine needs the headers
// only: a capture cut to 96 bytes replays as the whole one does, decision for decision, on
// both knobs; only the summary says the records were cut.
TEST(Replay, HeaderOnlyCaptureDecidesAsTheWholeOne) {
  Summary whole, cut96, cut128;
  const auto a = replay_lines(two_way(3000, 0), whole);
  const auto b = replay_lines(two_way(3000, 96), cut96);
  const auto c = replay_lines(two_way(3000, 128), cut128);
  size_t up = 0, down = 0;
  for (const std::string& l : a) {
    up += l.find("\"knob\":\"uplink\"") != std::string::npos;
    down += l.find("\"knob\":\"downlink\"") != std::string::npos;
  }
  EXPECT_GT(up, 0u);
  EXPECT_GT(down, 0u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(whole.truncated_records, 0u);
  EXPECT_EQ(cut96.truncated_records, 2u * 3000);  // every data segment; no ACK reaches 96 B
  EXPECT_EQ(cut96.header_only_records, cut96.truncated_records);
  EXPECT_EQ(cut96.headers_cut_records, 0u);
  EXPECT_EQ(cut96.decision_records, whole.decision_records);
  EXPECT_EQ(cut96.knobs[0].acks_rewritten, whole.knobs[0].acks_rewritten);
  EXPECT_EQ(cut96.knobs[1].acks_rewritten, whole.knobs[1].acks_rewritten);
  EXPECT_HAS(to_text(cut96),
             "replayed from their headers (lengths from the IP header; TCP "
             "checksums not checked)");
}

// A 2G download (lab/EXPERIMENTS.md Q23) as a capture: the phone 95 ms from the gateway each
// way, 116 ms to deliver a 1448-byte segment; every segment acknowledged for 6 s, then two
// segments a round trip acknowledged together. The ACKs come further apart than the control
// interval, so no delivered rate closes and the downlink regulator's steps hold its window:
// the summary says how many (the daemon's rsfcd_downlink_steps_held_total).
Capture thin_download() {
  Capture c;
  const Nanos path = 95 * kMilli, service = 116 * kMilli, server_half = 10 * kMilli;
  constexpr uint32_t kSrvIsn = 7000, kPhIsn = 1000;
  const auto phone_ts = [](Nanos t) { return 5000u + static_cast<uint32_t>(t / kMilli); };
  auto at = [&c](Nanos t, const TcpSpec& spec) {
    c.us = static_cast<uint32_t>(t / kMicro);
    c.tcp(spec);
  };
  auto phone = [&](Nanos t, TcpSpec spec) {
    spec.src = "198.18.0.2", spec.dst = "198.19.0.2", spec.sport = 40002, spec.dport = 80;
    at(t, spec);
  };
  auto server = [&](Nanos t, TcpSpec spec) {
    spec.src = "198.19.0.2", spec.dst = "198.18.0.2", spec.sport = 80, spec.dport = 40002;
    at(t, spec);
  };
  phone(0, syn(kPhIsn, 64240, phone_ts(0)));
  server(server_half / 2, syn_ack(kSrvIsn, kPhIsn + 1, 65160, 300, phone_ts(0)));
  auto ack = [&](Nanos t, uint32_t acked, Nanos received) {
    phone(t, {.seq = kPhIsn + 1,
              .ack = acked,
              .window = 2000,  // 256 KB at scale 7
              .timestamps = true,
              .tsval = phone_ts(received),
              .tsecr = 300});
  };
  ack(server_half / 2 + 2 * path, kSrvIsn + 1, server_half / 2 + path);
  for (const auto& e : testscript::thin_download_events(path, service, server_half, 300 * kMilli,
                                                        6 * kSecond, 30 * kSecond, kSrvIsn + 1)) {
    if (!e.data) {
      ack(e.at, e.seq, e.received);
      continue;
    }
    server(e.at, {.seq = e.seq,
                  .ack = kPhIsn + 1,
                  .window = 501,
                  .timestamps = true,
                  .tsval = 300 + static_cast<uint32_t>(e.at / kMilli),
                  .tsecr = phone_ts(e.at),
                  .payload_len = 1448});
  }
  return c;
}

TEST(Replay, HeldDownlinkStepsAreReported) {
  Summary s;
  const auto lines = replay_lines(thin_download(), s);
  EXPECT_GT(s.decision_records, 5u) << "the download is regulated while every segment is ACKed";
  EXPECT_GT(s.engine_downlink_steps_held, 20u);
  EXPECT_HAS(to_json(s), "\"downlink_steps_held\":" + std::to_string(s.engine_downlink_steps_held));
  EXPECT_HAS(to_text(s), std::to_string(s.engine_downlink_steps_held) +
                             " downlink control steps came due without a delivered rate");
  // A capture whose ACKs close their rate samples holds nothing, and says nothing of it.
  Summary busy;
  (void)replay_lines(two_way(3000, 0), busy);
  EXPECT_EQ(busy.engine_downlink_steps_held, 0u);
  EXPECT_EQ(to_text(busy).find("downlink control steps"), std::string::npos);
}

// A snap length that cuts into the TCP options (60 bytes: Ethernet + VLAN, IPv4, 20 bytes of
// TCP, 2 of its 12 option bytes): those records are counted, never half-parsed.
TEST(Replay, RecordsCutInsideTheirHeadersAreCountedNotParsed) {
  Summary s;
  replay_lines(two_way(50, 60), s);
  EXPECT_EQ(s.truncated_records, s.records);  // every frame of this capture is longer than 60
  EXPECT_EQ(s.header_only_records, 0u);
  EXPECT_EQ(s.headers_cut_records, s.records);
  EXPECT_EQ(s.parse_errors[static_cast<size_t>(ParseError::kTruncatedTcp)], s.records);
  EXPECT_EQ(s.decision_records, 0u);
  EXPECT_HAS(to_text(s), "cut inside their IP or TCP headers");
}

TEST(Replay, ReusedPortsAfterAFinishedConnectionAreANewFlow) {
  Capture c;
  flow_a(c);
  // The same 4-tuple again, new ISN.
  c.tcp({.src = "198.18.0.2",
         .dst = "198.19.0.2",
         .sport = 40000,
         .dport = 5201,
         .seq = 900000,
         .flags = tcpflag::kSyn,
         .window = 64240,
         .wscale = 7});
  const std::string path = c.write("reuse");
  std::ostringstream out;
  auto s = replay_file(path, 1000, params(static_policy(16384)), &out);
  std::remove(path.c_str());
  ASSERT_TRUE(s);
  EXPECT_EQ(s->flows_total, 2u);
  EXPECT_EQ(s->flows_regulated, 1u);
  EXPECT_EQ(s->flows_without_acks, 1u);
}

// The books are the engine's flows: a flow it dropped (closed and expired) and sees again
// is another flow, unregulated (no handshake); a flow whose SYN the capture missed has the
// initiator the engine infers from the SYN-ACK.
TEST(Replay, FlowsAreTheEnginesFlows) {
  Capture c;
  flow_a(c);
  auto fin = [&](const char* src, const char* dst, uint16_t sport, uint16_t dport, uint32_t seq,
                 uint32_t ack) {
    c.tcp({.src = src,
           .dst = dst,
           .sport = sport,
           .dport = dport,
           .seq = seq,
           .ack = ack,
           .flags = tcpflag::kFin | tcpflag::kAck});
  };
  fin("198.18.0.2", "198.19.0.2", 40000, 5201, kPhoneIsn + 5001, kServerIsn + 1);
  fin("198.19.0.2", "198.18.0.2", 5201, 40000, kServerIsn + 1, kPhoneIsn + 5002);
  c.us += 11'000'000;  // past closed_timeout (10 s): the engine drops the flow
  c.tcp({.src = "198.19.0.2",
         .dst = "198.18.0.2",
         .sport = 5201,
         .dport = 40000,
         .seq = kServerIsn + 2,
         .ack = kPhoneIsn + 5002,
         .window = 1000});
  c.tcp({.src = "198.19.0.2",
         .dst = "198.18.0.2",
         .sport = 443,
         .dport = 40003,
         .seq = 7,
         .ack = 9,
         .flags = tcpflag::kSyn | tcpflag::kAck,
         .wscale = 7});
  const std::string path = c.write("engine_flows");
  std::ostringstream out;
  auto s = replay_file(path, 1000, params(static_policy(16384)), &out);
  std::remove(path.c_str());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->flows_total, 3u);
  EXPECT_EQ(s->flows_regulated, 1u);
  EXPECT_EQ(s->flows_unregulated, 1u);
  EXPECT_EQ(s->flows_without_acks, 1u);
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 3u) << out.str();
  EXPECT_HAS(lines[0], "\"subscriber_port\":40000,");
  EXPECT_HAS(lines[0], "\"status\":\"regulated\",\"initiator\":\"subscriber\"");
  EXPECT_HAS(lines[0], "\"packets_to_subscriber\":24,\"packets_from_subscriber\":8,");
  EXPECT_HAS(lines[1], "\"subscriber_port\":40000,");
  EXPECT_HAS(lines[1], "\"status\":\"unregulated\",\"initiator\":null");
  EXPECT_HAS(lines[1], "\"packets_to_subscriber\":1,\"packets_from_subscriber\":0,");
  EXPECT_HAS(lines[2], "\"subscriber_port\":40003,");
  EXPECT_HAS(lines[2], "\"status\":\"without_acks\",\"initiator\":\"subscriber\"");
}

TEST(Replay, DecisionRecordsBecomeLinesAndTBuffMedians) {
  Capture c;
  flow_a(c);
  std::ostringstream out;
  // Under static the engine itself makes no decisions: the three below are all there are.
  Replayer r(1000, params(static_policy(16384)), &out);
  auto reader = pcap::PcapReader::from_bytes(c.w.bytes);
  ASSERT_TRUE(reader);
  pcap::Record rec;
  while (*reader->next(rec)) r.feed(rec, reader->header().linktype);
  ASSERT_EQ(r.flows().front().decisions, 0u);
  DecisionRecord d;
  d.subscriber = *IpAddr::parse("198.18.0.2");
  d.peer = *IpAddr::parse("198.19.0.2");
  d.subscriber_port = 40000;
  d.peer_port = 5201;
  d.knob = "uplink";
  d.state = "fast";
  d.tick_ms = 1;
  d.rate_bps = 1.25e6;
  d.rtt_min_ms = 20;
  d.rtt_ms = 35.5;
  d.window_bytes = 44032;
  d.target_bytes = 43750;
  d.timestamps = true;
  d.flow = r.flows().front().engine_flow;  // the engine's records name their flow's slot
  for (double tb : {10.0, 30.0, -1.0}) {
    d.time = Nanos{kT0} * kSecond + 2500 * kMicro;
    d.t_buff_ms = tb;
    r.on_decision(d);
  }
  // A decision for a flow the capture does not have is still written (and counted).
  d.subscriber_port = 1;
  d.flow = kNoFlow;
  d.t_buff_ms = 99;
  d.state = "slow";
  r.on_decision(d);
  const Summary s = r.finish();
  const auto lines = lines_of(out.str());
  const std::string first = line_with(lines, "\"type\":\"decision\"", "\"t_buff_ms\":10.000");
  EXPECT_EQ(first,
            "{\"type\":\"decision\",\"time_s\":0.002500,\"subscriber\":\"198.18.0.2\","
            "\"subscriber_port\":40000,\"peer\":\"198.19.0.2\",\"peer_port\":5201,"
            "\"knob\":\"uplink\",\"state\":\"fast\",\"tick_ms\":1.000,\"t_buff_ms\":10.000,"
            "\"rate_bps\":1250000,\"rtt_min_ms\":20.000,\"rtt_ms\":35.500,"
            "\"window_bytes\":44032,\"target_bytes\":43750,\"timestamps\":true}");
  EXPECT_FALSE(line_with(lines, "\"type\":\"decision\"", "\"t_buff_ms\":null").empty())
      << "an unknown t_buff is null, not -1";
  const std::string flow = line_with(lines, "\"type\":\"flow\"", "\"subscriber_port\":40000,");
  EXPECT_HAS(flow, "\"decisions\":3,");
  EXPECT_HAS(flow, "\"t_buff_median_ms\":20.000}") << "median of 10 and 30; unknown skipped";
  EXPECT_EQ(s.flows_with_t_buff, 1u);
  ASSERT_TRUE(s.median_t_buff_ms);
  EXPECT_DOUBLE_EQ(*s.median_t_buff_ms, 20.0);
  EXPECT_EQ(s.decision_records, 4u);
  EXPECT_EQ(s.decision_states.at("fast"), 3u);
  EXPECT_EQ(s.decision_states.at("slow"), 1u);
  EXPECT_HAS(to_json(s), "\"decision_states\":{\"fast\":3,\"slow\":1}");
}

TEST(Replay, ACaptureBrokenPartWayReportsWhatCameBefore) {
  Capture c;
  flow_a(c);
  c.w.add_header(kT0 + 1, 0, 500000, 500000);  // absurd caplen
  const std::string path = c.write("broken");
  auto s = replay_file(path, 1000, params(static_policy(16384)), nullptr);
  std::remove(path.c_str());
  ASSERT_TRUE(s) << "a broken tail is a summary with an error, not a failure";
  ASSERT_TRUE(s->error);
  EXPECT_HAS(*s->error, "record 30 (file offset");
  EXPECT_HAS(*s->error, "exceeds the maximum 262144");
  EXPECT_EQ(s->records, 30u);
  EXPECT_EQ(s->flows_clamped, 1u);
  EXPECT_HAS(to_json(*s), "\"complete\":false,\n  \"error\":\"" + path);
  EXPECT_HAS(to_text(*s), "CAPTURE BROKEN");
}

TEST(Replay, FilesThatCannotBeReadAreErrors) {
  auto missing = replay_file("/nonexistent/x.pcap", 10, params(static_policy(16384)), nullptr);
  ASSERT_FALSE(missing);
  EXPECT_HAS(missing.error().message, "/nonexistent/x.pcap");
  const std::string path = ::testing::TempDir() + "rsfc_replay_ng_" + std::to_string(::getpid());
  testpcap::write_file(path, {0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a});
  auto ng = replay_file(path, 10, params(static_policy(16384)), nullptr);
  std::remove(path.c_str());
  ASSERT_FALSE(ng);
  EXPECT_HAS(ng.error().message, "pcapng is not supported");
  auto off = replay_file(path, 10, params({}), nullptr);
  ASSERT_FALSE(off);
  EXPECT_HAS(off.error().message, "both knobs are off");
}

}  // namespace
}  // namespace rsfc::replay
