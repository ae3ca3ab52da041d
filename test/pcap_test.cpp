// The pcap reader on files written byte by byte by test/pcap_builder.h: every link type,
// both magics, both byte orders, IPv4 and IPv6; malformed files give one clear error and
// never a crash (also under random corruption).
#include "rsfc/tools/pcap.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "packet_builder.h"
#include "pcap_builder.h"

namespace rsfc::pcap {
namespace {

using testpkt::TcpSpec;

std::vector<uint8_t> ack_v4() {
  return testpkt::build({.src = "198.19.0.2",
                         .dst = "198.18.0.2",
                         .sport = 443,
                         .dport = 40000,
                         .seq = 7,
                         .ack = 9,
                         .window = 1000});
}
std::vector<uint8_t> data_v6() {
  return testpkt::build({.src = "2001:2:0:1::2",
                         .dst = "2001:2:0:2::2",
                         .sport = 40000,
                         .dport = 443,
                         .seq = 11,
                         .ack = 13,
                         .window = 2000,
                         .timestamps = true,
                         .tsval = 5,
                         .payload_len = 100});
}

enum class Frame { kEth, kEthDot1q, kEthQinQ, kEthTripleTag, kSll, kSllVlan, kSll2, kRaw };

struct LinkCase {
  const char* name;
  uint32_t linktype;
  Frame frame;
};

std::vector<uint8_t> frame_for(Frame f, const std::vector<uint8_t>& ip) {
  switch (f) {
    case Frame::kEth:
      return testpcap::ethernet(ip);
    case Frame::kEthDot1q:
      return testpcap::ethernet(ip, {0x8100});
    case Frame::kEthQinQ:
      return testpcap::ethernet(ip, {0x88a8, 0x8100});
    case Frame::kEthTripleTag:
      return testpcap::ethernet(ip, {0x9100, 0x88a8, 0x8100});
    case Frame::kSll:
      return testpcap::sll(ip);
    case Frame::kSllVlan:
      return testpcap::sll(ip, {0x8100});
    case Frame::kSll2:
      return testpcap::sll2(ip);
    case Frame::kRaw:
      return ip;
  }
  return {};
}

const LinkCase kLinks[] = {
    {"ethernet", linktype::kEthernet, Frame::kEth},
    {"ethernet_802.1q", linktype::kEthernet, Frame::kEthDot1q},
    {"ethernet_qinq", linktype::kEthernet, Frame::kEthQinQ},
    {"ethernet_three_tags", linktype::kEthernet, Frame::kEthTripleTag},
    {"linux_sll", linktype::kLinuxSll, Frame::kSll},
    {"linux_sll_vlan", linktype::kLinuxSll, Frame::kSllVlan},
    {"linux_sll2", linktype::kLinuxSll2, Frame::kSll2},
    {"raw_101", linktype::kRaw, Frame::kRaw},
    {"raw_dlt12", linktype::kRawDlt12, Frame::kRaw},
    {"raw_dlt14", linktype::kRawDlt14, Frame::kRaw},
};

struct Variant {
  bool nanosecond;
  bool big_endian;
};
void PrintTo(const LinkCase& c, std::ostream* os) {
  *os << c.name;
}
void PrintTo(const Variant& v, std::ostream* os) {
  *os << (v.nanosecond ? "nano" : "micro") << (v.big_endian ? "/big-endian" : "/little-endian");
}

class ReadEveryLinkType : public ::testing::TestWithParam<std::tuple<LinkCase, Variant>> {};

TEST_P(ReadEveryLinkType, RecordsAndIpPacketsComeBackExactly) {
  const auto [link, var] = GetParam();
  const std::vector<std::vector<uint8_t>> ips = {ack_v4(), data_v6()};
  testpcap::Writer w({.linktype = link.linktype,
                      .nanosecond = var.nanosecond,
                      .big_endian = var.big_endian,
                      .snaplen = 65535});
  // 1.7e9 s, plus a sub-second part that needs every bit of its unit.
  const uint32_t frac0 = var.nanosecond ? 999'999'999u : 999'999u;
  w.add(1'700'000'000u, frac0, frame_for(link.frame, ips[0]));
  w.add(1'700'000'001u, 1, frame_for(link.frame, ips[1]));

  auto r = PcapReader::from_bytes(w.bytes, "t.pcap");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->header().linktype, link.linktype);
  EXPECT_EQ(r->header().nanosecond, var.nanosecond);
  EXPECT_EQ(r->header().big_endian, var.big_endian);
  EXPECT_EQ(r->header().version_major, 2);
  EXPECT_EQ(r->header().version_minor, 4);
  EXPECT_EQ(r->header().snaplen, 65535u);

  const Nanos unit = var.nanosecond ? 1 : kMicro;
  const Nanos want_time[] = {1'700'000'000 * kSecond + Nanos{frac0} * unit,
                             1'700'000'001 * kSecond + unit};
  Record rec;
  for (size_t i = 0; i < ips.size(); ++i) {
    auto more = r->next(rec);
    ASSERT_TRUE(more) << more.error().message;
    ASSERT_TRUE(*more);
    EXPECT_EQ(rec.index, i);
    EXPECT_EQ(rec.header.time, want_time[i]);
    EXPECT_FALSE(rec.truncated());
    const LinkResult lr = ip_packet(r->header().linktype, rec.data);
    ASSERT_EQ(lr.error, LinkError::kNone) << to_string(lr.error);
    // Exactly the IP packet: Ethernet's minimum-frame padding is gone.
    EXPECT_EQ(std::vector<uint8_t>(lr.ip.begin(), lr.ip.end()), ips[i])
        << link.name << " record " << i << ": " << testpkt::describe(ips[i]);
    EXPECT_EQ(lr.ethertype, i == 0 ? 0x0800 : 0x86dd);
    PacketView v;
    EXPECT_EQ(parse_packet(lr.ip, v), ParseError::kNone);
  }
  auto end = r->next(rec);
  ASSERT_TRUE(end);
  EXPECT_FALSE(*end) << "clean end of file after the last record";
  auto again = r->next(rec);
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
}

INSTANTIATE_TEST_SUITE_P(
    Pcap, ReadEveryLinkType,
    ::testing::Combine(::testing::ValuesIn(kLinks),
                       ::testing::Values(Variant{false, false}, Variant{true, false},
                                         Variant{false, true}, Variant{true, true})),
    [](const auto& p) {
      std::string n = std::get<0>(p.param).name;
      for (char& c : n)
        if (c == '.') c = '_';
      const Variant v = std::get<1>(p.param);
      return n + (v.nanosecond ? "_nano" : "_micro") + (v.big_endian ? "_be" : "_le");
    });

TEST(Pcap, MagicBytesAsOnDisk) {
  // The four magics as a reader sees them in the first four bytes.
  struct Case {
    std::vector<uint8_t> magic;
    bool big_endian, nanosecond;
  } cases[] = {{{0xd4, 0xc3, 0xb2, 0xa1}, false, false},
               {{0xa1, 0xb2, 0xc3, 0xd4}, true, false},
               {{0x4d, 0x3c, 0xb2, 0xa1}, false, true},
               {{0xa1, 0xb2, 0x3c, 0x4d}, true, true}};
  for (const Case& c : cases) {
    testpcap::Writer w({.nanosecond = c.nanosecond, .big_endian = c.big_endian});
    ASSERT_EQ(std::vector<uint8_t>(w.bytes.begin(), w.bytes.begin() + 4), c.magic);
    auto h = parse_file_header(w.bytes);
    ASSERT_TRUE(h) << h.error().message;
    EXPECT_EQ(h->big_endian, c.big_endian);
    EXPECT_EQ(h->nanosecond, c.nanosecond);
  }
}

TEST(Pcap, FcsBitsInTheLinkTypeFieldAreNotPartOfTheType) {
  testpcap::Writer w({.linktype = linktype::kEthernet | 0x14000000u});  // F bit, FCS len 1
  auto h = parse_file_header(w.bytes);
  ASSERT_TRUE(h) << h.error().message;
  EXPECT_EQ(h->linktype, linktype::kEthernet);
}

TEST(Pcap, CutRecordIsReturnedMarkedTruncated) {
  const auto ip = data_v6();
  testpcap::Writer w({.linktype = linktype::kRaw, .snaplen = 80});
  w.add(10, 0, std::vector<uint8_t>(ip.begin(), ip.begin() + 80), static_cast<uint32_t>(ip.size()));
  auto r = PcapReader::from_bytes(w.bytes);
  ASSERT_TRUE(r);
  Record rec;
  auto more = r->next(rec);
  ASSERT_TRUE(more && *more);
  EXPECT_TRUE(rec.truncated());
  EXPECT_EQ(rec.header.caplen, 80u);
  EXPECT_EQ(rec.header.len, ip.size());
  const LinkResult lr = ip_packet(linktype::kRaw, rec.data);
  EXPECT_EQ(lr.error, LinkError::kNone);
  EXPECT_EQ(lr.ip.size(), 80u) << "a cut packet is passed as captured, not trimmed";
}

TEST(Pcap, OpensAFileFromDisk) {
  testpcap::Writer w({.linktype = linktype::kEthernet});
  w.add(1, 2, testpcap::ethernet(ack_v4()));
  const std::string path =
      ::testing::TempDir() + "rsfc_pcap_test_" + std::to_string(::getpid()) + ".pcap";
  testpcap::write_file(path, w.bytes);
  auto r = PcapReader::open(path);
  ASSERT_TRUE(r) << r.error().message;
  Record rec;
  auto more = r->next(rec);
  ASSERT_TRUE(more && *more);
  EXPECT_EQ(rec.header.time, kSecond + 2 * kMicro);
  EXPECT_EQ(rec.data.size(), 60u);
  more = r->next(rec);
  ASSERT_TRUE(more);
  EXPECT_FALSE(*more);
  std::remove(path.c_str());

  auto missing = PcapReader::open(path);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find(path), std::string::npos);
  EXPECT_NE(missing.error().message.find("No such file"), std::string::npos);
}

// ---- link layer ------------------------------------------------------------------------

struct LinkErrorCase {
  const char* name;
  uint32_t linktype;
  std::vector<uint8_t> frame;
  LinkError want;
};

std::vector<uint8_t> arp_frame() {
  return testpcap::ethernet(std::vector<uint8_t>(28, 0), {}, 0x0806);
}
std::vector<uint8_t> first(std::vector<uint8_t> v, size_t n) {
  v.resize(n);
  return v;
}

TEST(PcapLink, FramesThatAreNotIpSayWhy) {
  const LinkErrorCase cases[] = {
      {"arp", linktype::kEthernet, arp_frame(), LinkError::kNotIp},
      {"empty_ethernet", linktype::kEthernet, {}, LinkError::kTruncatedLinkHeader},
      {"ethernet_13_bytes", linktype::kEthernet, first(testpcap::ethernet(ack_v4()), 13),
       LinkError::kTruncatedLinkHeader},
      {"vlan_tag_cut", linktype::kEthernet, first(testpcap::ethernet(ack_v4(), {0x8100}), 16),
       LinkError::kTruncatedLinkHeader},
      {"nine_vlan_tags", linktype::kEthernet,
       testpcap::ethernet(ack_v4(), std::vector<uint16_t>(9, 0x8100)), LinkError::kTooManyVlanTags},
      {"vlan_then_arp", linktype::kEthernet,
       [] {
         auto f = testpcap::ethernet(std::vector<uint8_t>(28, 0), {0x8100}, 0x0806);
         return f;
       }(),
       LinkError::kNotIp},
      {"llc_length_field", linktype::kEthernet, testpcap::ethernet(ack_v4(), {}, 0x0040),
       LinkError::kNotIp},
      {"sll_15_bytes", linktype::kLinuxSll, first(testpcap::sll(ack_v4()), 15),
       LinkError::kTruncatedLinkHeader},
      {"sll2_19_bytes", linktype::kLinuxSll2, first(testpcap::sll2(ack_v4()), 19),
       LinkError::kTruncatedLinkHeader},
      {"sll_arp", linktype::kLinuxSll,
       [] {
         auto f = testpcap::sll(ack_v4());
         f[14] = 0x08, f[15] = 0x06;
         return f;
       }(),
       LinkError::kNotIp},
  };
  for (const auto& c : cases) {
    const LinkResult r = ip_packet(c.linktype, c.frame);
    EXPECT_EQ(r.error, c.want) << c.name << ": got " << to_string(r.error);
    EXPECT_TRUE(r.ip.empty()) << c.name;
  }
}

TEST(PcapLink, RawFramesGoToTheEngineAsTheyAre) {
  // Raw IP has no header to judge: a bad version nibble is the engine's parse error.
  const std::vector<uint8_t> junk{0x50, 1, 2, 3};
  const LinkResult r = ip_packet(linktype::kRaw, junk);
  EXPECT_EQ(r.error, LinkError::kNone);
  EXPECT_EQ(r.ip.size(), junk.size());
  EXPECT_EQ(ip_packet(linktype::kRaw, {}).error, LinkError::kNone);
}

TEST(PcapLink, TrailingBytesAfterTheIpPacketAreTrimmed) {
  auto ip = ack_v4();
  auto frame = testpcap::ethernet(ip);
  frame.insert(frame.end(), {0xde, 0xad, 0xbe, 0xef});  // an FCS
  const LinkResult r = ip_packet(linktype::kEthernet, frame);
  ASSERT_EQ(r.error, LinkError::kNone);
  EXPECT_EQ(std::vector<uint8_t>(r.ip.begin(), r.ip.end()), ip);
}

// ---- malformed files -------------------------------------------------------------------

struct BadFile {
  const char* name;
  std::vector<uint8_t> bytes;
  bool header_error;    // the open fails (else the first next() fails)
  const char* message;  // a fragment the error must contain
};

std::vector<uint8_t> with_records(std::initializer_list<std::vector<uint8_t>> frames,
                                  testpcap::Options o = {}) {
  testpcap::Writer w(o);
  for (const auto& f : frames) w.add(1, 0, f);
  return w.bytes;
}

std::vector<uint8_t> header_then(void (*f)(testpcap::Writer&), testpcap::Options o = {}) {
  testpcap::Writer w(o);
  f(w);
  return w.bytes;
}

TEST(PcapMalformed, EveryBrokenFileGivesOneClearError) {
  const std::vector<uint8_t> good = with_records({ack_v4()});
  const BadFile cases[] = {
      {"empty", {}, true, "shorter than a pcap file header"},
      {"three_bytes", {0xd4, 0xc3, 0xb2}, true, "shorter than a pcap file header"},
      {"header_cut", std::vector<uint8_t>(good.begin(), good.begin() + 20), true,
       "file header cut short: 20 of 24"},
      {"pcapng",
       {0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a},
       true,
       "pcapng is not supported"},
      {"gzip", {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0}, true, "gzip"},
      {"text", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'}, true, "not a pcap file"},
      {"kuznetzov", {0x34, 0xcd, 0xb2, 0xa1, 2, 0, 4, 0}, true, "Kuznetzov"},
      {"version_1", with_records({}, {.version_major = 1}), true, "unsupported pcap version 1.4"},
      {"linktype_802_11", with_records({}, {.linktype = 105}), true, "unsupported link type 105"},
      {"record_header_cut", std::vector<uint8_t>(good.begin(), good.begin() + 24 + 7), false,
       "record header cut short (7 of 16 bytes)"},
      {"record_data_cut", std::vector<uint8_t>(good.begin(), good.end() - 5), false,
       "packet data cut short (35 of 40 bytes)"},
      {"absurd_caplen",
       header_then([](testpcap::Writer& w) { w.add_header(1, 0, 0x7fffffff, 0x7fffffff); }), false,
       "captured length 2147483647 exceeds the maximum 262144"},
      {"caplen_over_len", header_then([](testpcap::Writer& w) { w.add_header(1, 0, 60, 40); }),
       false, "captured length 60 exceeds the original length 40"},
      {"microseconds_out_of_range",
       header_then([](testpcap::Writer& w) { w.add_header(1, 1'000'000, 0, 0); }), false,
       "microseconds 1000000 out of range"},
      {"nanoseconds_out_of_range",
       header_then([](testpcap::Writer& w) { w.add_header(1, 1'000'000'000, 0, 0); },
                   {.nanosecond = true}),
       false, "nanoseconds 1000000000 out of range"},
  };
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = PcapReader::from_bytes(c.bytes, "bad.pcap");
    if (c.header_error) {
      ASSERT_FALSE(r) << "opened";
      EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
      EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << "one line";
      continue;
    }
    ASSERT_TRUE(r) << r.error().message;
    Record rec;
    auto more = r->next(rec);
    ASSERT_FALSE(more) << "read a record from a broken file";
    const std::string& m = more.error().message;
    EXPECT_NE(m.find(c.message), std::string::npos) << m;
    EXPECT_NE(m.find("bad.pcap: record 0 (file offset 24)"), std::string::npos) << m;
    // The reader stays at the error.
    auto again = r->next(rec);
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().message, m);
  }
}

TEST(PcapMalformed, ErrorNamesTheRecordAfterGoodOnes) {
  testpcap::Writer w;
  w.add(1, 0, ack_v4());
  w.add(2, 0, ack_v4());
  w.add_header(3, 0, 300000, 300000);
  auto r = PcapReader::from_bytes(w.bytes, "x.pcap");
  ASSERT_TRUE(r);
  Record rec;
  ASSERT_TRUE(*r->next(rec));
  ASSERT_TRUE(*r->next(rec));
  auto bad = r->next(rec);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("x.pcap: record 2 (file offset " +
                                     std::to_string(24 + 2 * (16 + 40)) + ")"),
            std::string::npos)
      << bad.error().message;
}

// Random corruption of a valid multi-link file: the reader and the link decoder either
// succeed or fail cleanly, always terminate, and never read out of bounds (run under ASan in
// the sanitizer build).
TEST(PcapMalformed, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(12345);
  testpcap::Writer w({.linktype = linktype::kEthernet});
  for (uint32_t i = 0; i < 20; ++i) {
    w.add(i, 0,
          testpcap::ethernet(i % 2 ? ack_v4() : data_v6(),
                             i % 3 ? std::vector<uint16_t>{} : std::vector<uint16_t>{0x8100}));
  }
  const std::vector<uint8_t> base = w.bytes;
  size_t records_read = 0, errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b = base;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    auto r = PcapReader::from_bytes(std::move(b));
    if (!r) {
      ++errors;
      continue;
    }
    Record rec;
    for (int n = 0; n < 100; ++n) {
      auto more = r->next(rec);
      if (!more) {
        ++errors;
        break;
      }
      if (!*more) break;
      ++records_read;
      ASSERT_LE(rec.data.size(), kMaxCaplen);
      const LinkResult lr = ip_packet(r->header().linktype, rec.data);
      if (lr.error == LinkError::kNone) {
        ASSERT_GE(lr.ip.data(), rec.data.data());
        ASSERT_LE(lr.ip.data() + lr.ip.size(), rec.data.data() + rec.data.size());
        PacketView v;
        (void)parse_packet(lr.ip, v);
      }
    }
  }
  EXPECT_GT(records_read, 1000u);
  EXPECT_GT(errors, 100u);
}

}  // namespace
}  // namespace rsfc::pcap
