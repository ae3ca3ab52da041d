// Parser tests: raw-byte fixtures (each with a tcpdump-style line), builder round trips, and
// robustness against truncated, mutated and random input (run under ASan/UBSan too).
#include "rsfc/core/packet.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "packet_builder.h"

namespace rsfc {
namespace {

// "4500 0028 ..." -> bytes; spaces ignored.
std::vector<uint8_t> hex(std::string_view s) {
  std::vector<uint8_t> out;
  int hi = -1;
  for (char c : s) {
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else {
      continue;
    }
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  EXPECT_LT(hi, 0) << "odd number of hex digits in fixture";
  return out;
}

struct ErrorCase {
  const char* name;
  ParseError want;
  const char* bytes;
};

// Generated with scapy, then the named byte altered where the line says so.
const ErrorCase kErrorCases[] = {
    // (zero bytes)
    {"empty", ParseError::kEmpty, ""},
    // version nibble 5
    {"ip_version_5", ParseError::kBadIpVersion,
     "55000028 00014000 4006aea5 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "50100200 77f70000"},
    // IP header cut at 19 bytes
    {"ipv4_19_bytes", ParseError::kTruncatedIp, "45000028 00014000 4006aea5 c6120002 c61300"},
    // IP6 header cut at 39 bytes
    {"ipv6_39_bytes", ParseError::kTruncatedIp,
     "60000000 00140640 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 000000"},
    // IP ihl 15 (60 bytes) but 40 bytes given
    {"ipv4_ihl_beyond_bytes", ParseError::kTruncatedIp,
     "4f000028 00014000 4006aea5 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "50100200 77f70000"},
    // IP ihl 4
    {"ipv4_ihl_4", ParseError::kBadIpv4HeaderLength,
     "44000028 00014000 4006aea5 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "50100200 77f70000"},
    // IP total length 41, 40 bytes given
    {"ipv4_total_gt_bytes", ParseError::kBadIpv4TotalLength,
     "45000029 00014000 4006aea5 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "50100200 77f70000"},
    // IP total length 19 < header 20
    {"ipv4_total_lt_ihl", ParseError::kBadIpv4TotalLength,
     "45000013 00014000 4006aea5 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "50100200 77f70000"},
    // IP options [RR len 1]
    {"ipv4_opt_len_1", ParseError::kBadIpv4Options,
     "4600002c 00014000 4006a6a0 c6120002 c6130002 07010000 9c4001bb 000003e8"
     "000007d0 50100200 77f70000"},
    // IP options [nop, RTRALT len 8 in 3 bytes]
    {"ipv4_opt_past_header", ParseError::kBadIpv4Options,
     "4600002c 00014000 4006a40d c6120002 c6130002 01940800 9c4001bb 000003e8"
     "000007d0 50100200 77f70000"},
    // IP options [nop,nop,nop, kind 148 without length byte]
    {"ipv4_opt_no_len_byte", ParseError::kBadIpv4Options,
     "4600002c 00014000 4006ab0c c6120002 c6130002 01010194 9c4001bb 000003e8"
     "000007d0 50100200 77f70000"},
    // IP flags [+], frag offset 0 (first fragment)
    {"ipv4_mf", ParseError::kIpv4Fragment,
     "45000028 00012000 4006cea5 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "50100200 77f70000"},
    // IP frag offset 185*8 (last fragment; 20 bytes of data)
    {"ipv4_frag_offset", ParseError::kIpv4Fragment,
     "45000028 000100b9 4006edec c6120002 c6130002 00000000 00000000 00000000"
     "00000000 00000000"},
    // IP 198.18.0.2.5353 > 198.19.0.2.53: UDP, length 12
    {"ipv4_udp", ParseError::kNotTcp,
     "45000028 00010000 4011ee9a c6120002 c6130002 14e90035 00148bab 78787878"
     "78787878 78787878"},
    // IP 198.18.0.2 > 198.19.0.2: AH(spi=0x1,seq=0x1)
    {"ipv4_ah", ParseError::kNotTcp,
     "45000040 00010000 4033ee60 c6120002 c6130002 06000000 00000001 00000001"
     "00000000 00000000 00000000 00140050 00000000 00000000 50022000 00000000"},
    // IP6 payload length 21, 20 bytes given
    {"ipv6_plen_gt_bytes", ParseError::kBadIpv6PayloadLength,
     "60000000 00150640 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 9c4001bb 000003e8 000007d0 50100200 a8aa0000"},
    // IP6 hop-by-hop len 16 bytes, only 8 before end
    {"ipv6_hbh_past_end", ParseError::kBadIpv6ExtHeader,
     "60000000 00080040 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 06010000 00000000"},
    // IP6 hop-by-hop, 4 bytes of payload
    {"ipv6_hbh_short", ParseError::kBadIpv6ExtHeader,
     "60000000 00040040 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 06000000"},
    // IP6 DSTOPT, HBH, TCP (hop-by-hop must come first)
    {"ipv6_hbh_not_first", ParseError::kBadIpv6ExtHeader,
     "60000000 00243c40 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 00000104 00000000 06000104 00000000 9c4001bb 00000000"
     "00000000 50102000 96620000"},
    // IP6 AH len (4+2)*4=24 bytes, 16 before end
    {"ipv6_ah_past_end", ParseError::kBadIpv6ExtHeader,
     "60000000 00103340 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 06040000 00000000 00000000 00000000"},
    // IP6 frag (0|20) 40000 > 443: Flags [.] (first fragment)
    {"ipv6_fragment", ParseError::kIpv6Fragment,
     "60000000 001c2c40 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 06000001 00000007 9c4001bb 000003e8 000007d0 50100200"
     "a8aa0000"},
    // IP6 HBH, frag (0|20) (atomic fragment after hop-by-hop)
    {"ipv6_hbh_fragment", ParseError::kIpv6Fragment,
     "60000000 00240040 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 2c000104 00000000 06000000 00000007 9c4001bb 000003e8"
     "000007d0 50100200 a8aa0000"},
    // IP6 2001:db8::2.5353 > 2001:db8:1::2.53: UDP, length 4
    {"ipv6_udp", ParseError::kNotTcp,
     "60000000 000c1140 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 14e90035 000cca7a 61626364"},
    // IP6 2001:db8::2 > 2001:db8:1::2: ESP(spi=0x1,seq=0x1), length 16
    {"ipv6_esp", ParseError::kNotTcp,
     "60000000 00103240 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 00000001 00000001 00000000 00000000"},
    // IP6 2001:db8::2 > 2001:db8:1::2: no next header
    {"ipv6_no_next", ParseError::kNotTcp,
     "60000000 00003b40 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002"},
    // IP6 AH(spi=0x1,seq=0x1): 40000 > 443: Flags [.] (authenticated: must not be rewritten)
    {"ipv6_ah_tcp", ParseError::kNotTcp,
     "60000000 002c3340 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 06040000 00000001 00000001 00000000 00000000 00000000"
     "9c4001bb 000003e8 000007d0 50100200 00000000"},
    // IP 198.18.0.2 > 198.19.0.2: tcp 19 [|tcp] (total length 39)
    {"ipv4_tcp_19_bytes", ParseError::kTruncatedTcp,
     "45000027 00010000 4006eea6 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "50100200 77f700"},
    // IP6 2001:db8::2 > 2001:db8:1::2: tcp 0 (payload length 0)
    {"ipv6_tcp_0_bytes", ParseError::kTruncatedTcp,
     "60000000 00000640 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002"},
    // IP total length 30 cuts TCP at 10 bytes; 40 bytes given
    {"ipv4_tcp_ip_len_cuts_header", ParseError::kTruncatedTcp,
     "4500001e 00014000 4006aea5 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "50100200 77f70000"},
    // IP 198.18.0.2.40000 > 198.19.0.2.443: Flags [.] (data offset 4)
    {"tcp_doff_4", ParseError::kBadTcpDataOffset,
     "45000028 00014000 4006aea5 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "40100200 77f70000"},
    // IP 198.18.0.2.40000 > 198.19.0.2.443: Flags [.] (data offset 6, 20 bytes of TCP)
    {"tcp_doff_past_ip", ParseError::kBadTcpDataOffset,
     "45000028 00014000 4006aea5 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "60100200 77f70000"},
    // IP6 2001:db8::2.40000 > 2001:db8:1::2.443: Flags [.] (data offset 15, 20 bytes of TCP)
    {"tcp_doff_15_v6", ParseError::kBadTcpDataOffset,
     "60000000 00140640 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 9c4001bb 000003e8 000007d0 f0100200 a8aa0000"},
    // IP 40000 > 443: Flags [.], options [kind 30 len 0]
    {"tcp_opt_len_0", ParseError::kBadTcpOptions,
     "4500002c 00014000 4006aea1 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "60100200 00000000 1e000101"},
    // IP 40000 > 443: Flags [.], options [kind 30 len 1]
    {"tcp_opt_len_1", ParseError::kBadTcpOptions,
     "4500002c 00014000 4006aea1 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "60100200 00000000 1e010101"},
    // IP 40000 > 443: Flags [.], options [nop,nop,kind 30 len 4 in 2 bytes]
    {"tcp_opt_past_header", ParseError::kBadTcpOptions,
     "4500002c 00014000 4006aea1 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "60100200 00000000 01011e04"},
    // IP 40000 > 443: Flags [.], options [nop,nop,nop,kind 30 without length]
    {"tcp_opt_no_len_byte", ParseError::kBadTcpOptions,
     "4500002c 00014000 4006aea1 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "60100200 00000000 0101011e"},
    // IP 40000 > 443: Flags [S], options [mss len 3,nop]
    {"tcp_mss_len_3", ParseError::kBadTcpOptions,
     "4500002c 00014000 4006aea1 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "60020200 00000000 02030501"},
    // IP 40000 > 443: Flags [S], options [mss len 6,nop,nop]
    {"tcp_mss_len_6", ParseError::kBadTcpOptions,
     "45000030 00014000 4006ae9d c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "70020200 00000000 020605b4 00000101"},
    // IP 40000 > 443: Flags [S], options [wscale len 4]
    {"tcp_wscale_len_4", ParseError::kBadTcpOptions,
     "4500002c 00014000 4006aea1 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "60020200 00000000 03040700"},
    // IP 40000 > 443: Flags [S], options [wscale len 2,nop,nop]
    {"tcp_wscale_len_2", ParseError::kBadTcpOptions,
     "4500002c 00014000 4006aea1 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "60020200 00000000 03020101"},
    // IP 40000 > 443: Flags [S], options [sackOK len 3,nop]
    {"tcp_sackok_len_3", ParseError::kBadTcpOptions,
     "4500002c 00014000 4006aea1 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "60020200 00000000 04030001"},
    // IP 40000 > 443: Flags [.], options [nop,nop,TS len 8,nop,nop]
    {"tcp_ts_len_8", ParseError::kBadTcpOptions,
     "45000034 00014000 4006ae99 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "80100200 00000000 01010808 00000001 00000002"},
    // IP 40000 > 443: Flags [.], options [nop,nop,sack len 12]
    {"tcp_sack_len_12", ParseError::kBadTcpOptions,
     "45000038 00014000 4006ae95 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "90100200 00000000 0101050c 00000001 00000002 00000003"},
    // IP 40000 > 443: Flags [.], options [nop,nop,sack len 2]
    {"tcp_sack_no_blocks", ParseError::kBadTcpOptions,
     "4500002c 00014000 4006aea1 c6120002 c6130002 9c4001bb 000003e8 000007d0"
     "60100200 00000000 01010502"},
    // IP6 40000 > 443: Flags [.], options [TS len 10 in 8 bytes]
    {"tcp_opt_past_header_v6", ParseError::kBadTcpOptions,
     "60000000 001c0640 20010db8 00000000 00000000 00000002 20010db8 00010000"
     "00000000 00000002 9c4001bb 000003e8 000007d0 70100200 00000000 080a0000"
     "00010000"},
};

void PrintTo(const ErrorCase& c, std::ostream* os) {
  *os << c.name;
}

class ParseErrorCase : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ParseErrorCase, ReturnsReason) {
  const ErrorCase& c = GetParam();
  // Exactly-sized heap copy so that ASan catches any read past the end.
  const std::vector<uint8_t> pkt = hex(c.bytes);
  PacketView v;
  EXPECT_EQ(to_string(parse_packet(pkt, v)), std::string(to_string(c.want))) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Raw, ParseErrorCase, ::testing::ValuesIn(kErrorCases),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(ParseErrorTable, CoversEveryReason) {
  std::set<ParseError> seen;
  for (const auto& c : kErrorCases) seen.insert(c.want);
  for (int i = 1; i < static_cast<int>(ParseError::kCount); ++i) {
    EXPECT_TRUE(seen.count(static_cast<ParseError>(i))) << to_string(static_cast<ParseError>(i));
  }
}

TEST(ParseErrorNames, AreDistinctAndKnown) {
  std::set<std::string> names;
  for (int i = 0; i < static_cast<int>(ParseError::kCount); ++i) {
    std::string n = to_string(static_cast<ParseError>(i));
    EXPECT_NE(n, "unknown");
    EXPECT_TRUE(names.insert(n).second) << n;
  }
}

struct ValidCase {
  const char* name;
  const char* bytes;
  uint8_t ip_version;
  const char* src;
  const char* dst;
  uint16_t ip_header_len;
  uint16_t tcp_header_len;
  uint32_t ip_total_len;
  uint32_t payload_len;
  uint16_t sport, dport;
  uint32_t seq, ack;
  uint8_t flags;
  uint16_t window;
  TcpOptions opts;
  bool checksum_valid;  // scapy computed the checksum (not for hand-made option bytes)
};

const ValidCase kValidCases[] = {
    // IP 198.18.0.2.40000 > 198.19.0.2.443: Flags [S], seq 1000, win 64240,
    //   options [mss 1460,sackOK,TS val 1 ecr 0,nop,wscale 7], length 0
    {.name = "v4_syn",
     .bytes = "4500003c 00014000 4006ae91 c6120002 c6130002 9c4001bb 000003e8 00000000"
              "a002faf0 1f010000 020405b4 0402080a 00000001 00000000 01030307",
     .ip_version = 4,
     .src = "198.18.0.2",
     .dst = "198.19.0.2",
     .ip_header_len = 20,
     .tcp_header_len = 40,
     .ip_total_len = 60,
     .payload_len = 0,
     .sport = 40000,
     .dport = 443,
     .seq = 1000,
     .ack = 0,
     .flags = tcpflag::kSyn,
     .window = 64240,
     .opts = {.has_mss = true,
              .mss = 1460,
              .has_wscale = true,
              .wscale = 7,
              .sack_permitted = true,
              .sack_blocks = 0,
              .has_timestamps = true,
              .tsval = 1,
              .tsecr = 0,
              .unknown_options = 0},
     .checksum_valid = true},
    // IP 198.18.0.2.40000 > 198.19.0.2.443: Flags [P.], seq 1000:1005, ack 2000, win 512,
    //   length 5 (+ 6 bytes of Ethernet padding after the IP packet)
    {.name = "v4_ack_padded",
     .bytes = "4500002d 00014000 4006aea0 c6120002 c6130002 9c4001bb 000003e8 000007d0"
              "50180200 34180000 68656c6c 6f000000 000000",
     .ip_version = 4,
     .src = "198.18.0.2",
     .dst = "198.19.0.2",
     .ip_header_len = 20,
     .tcp_header_len = 20,
     .ip_total_len = 45,
     .payload_len = 5,
     .sport = 40000,
     .dport = 443,
     .seq = 1000,
     .ack = 2000,
     .flags = tcpflag::kPsh | tcpflag::kAck,
     .window = 512,
     .opts = {},
     .checksum_valid = true},
    // IP (options [RA value 0, nop, nop, nop, nop]) 198.18.0.2.40000 > 198.19.0.2.443:
    //   Flags [.], ack 2000, win 512, length 0
    {.name = "v4_ipopts",
     .bytes = "47000030 00014000 40061697 c6120002 c6130002 94040000 01010101 9c4001bb"
              "000003e8 000007d0 50100200 77f70000",
     .ip_version = 4,
     .src = "198.18.0.2",
     .dst = "198.19.0.2",
     .ip_header_len = 28,
     .tcp_header_len = 20,
     .ip_total_len = 48,
     .payload_len = 0,
     .sport = 40000,
     .dport = 443,
     .seq = 1000,
     .ack = 2000,
     .flags = tcpflag::kAck,
     .window = 512,
     .opts = {},
     .checksum_valid = true},
    // IP6 2001:db8::2.40000 > 2001:db8:1::2.443: Flags [.], ack 2000, win 512,
    //   options [nop,nop,TS val 7 ecr 9,nop,nop,sack 2 {3000:4000}{5000:6000}], length 3
    {.name = "v6_sack",
     .bytes = "60000000 00370640 20010db8 00000000 00000000 00000002 20010db8 00010000"
              "00000000 00000002 9c4001bb 000003e8 000007d0 d0100200 0ea60000 0101080a"
              "00000007 00000009 01010512 00000bb8 00000fa0 00001388 00001770 616263",
     .ip_version = 6,
     .src = "2001:db8::2",
     .dst = "2001:db8:1::2",
     .ip_header_len = 40,
     .tcp_header_len = 52,
     .ip_total_len = 95,
     .payload_len = 3,
     .sport = 40000,
     .dport = 443,
     .seq = 1000,
     .ack = 2000,
     .flags = tcpflag::kAck,
     .window = 512,
     .opts = {.has_mss = false,
              .mss = 0,
              .has_wscale = false,
              .wscale = 0,
              .sack_permitted = false,
              .sack_blocks = 2,
              .has_timestamps = true,
              .tsval = 7,
              .tsecr = 9,
              .unknown_options = 0},
     .checksum_valid = true},
    // IP6 HBH, DSTOPT, RT0 (segleft 1, [2001:db8:2::2]), DSTOPT: 2001:db8::2.40000 >
    //   2001:db8:1::2.443: Flags [.], ack 2000, win 512, length 1
    //   (the checksum's pseudo-header uses the final destination 2001:db8:2::2)
    {.name = "v6_ext_chain",
     .bytes = "60000000 00450040 20010db8 00000000 00000000 00000002 20010db8 00010000"
              "00000000 00000002 3c000104 00000000 2b000104 00000000 3c020001 00000000"
              "20010db8 00020000 00000000 00000002 06000104 00000000 9c4001bb 000003e8"
              "000007d0 50100200 2ea80000 7a",
     .ip_version = 6,
     .src = "2001:db8::2",
     .dst = "2001:db8:1::2",
     .ip_header_len = 88,
     .tcp_header_len = 20,
     .ip_total_len = 109,
     .payload_len = 1,
     .sport = 40000,
     .dport = 443,
     .seq = 1000,
     .ack = 2000,
     .flags = tcpflag::kAck,
     .window = 512,
     .opts = {},
     .checksum_valid = true},
    // IP 198.18.0.2.40000 > 198.19.0.2.443: Flags [.], ack 2000, win 512,
    //   options [mptcp len 4,unknown-254 len 2,eol] + 0xff junk after EOL, length 0
    {.name = "v4_unknown_eol",
     .bytes = "45000034 00014000 4006ae99 c6120002 c6130002 9c4001bb 000003e8 000007d0"
              "80100200 00000000 1e040000 fe0200ff ffffffff",
     .ip_version = 4,
     .src = "198.18.0.2",
     .dst = "198.19.0.2",
     .ip_header_len = 20,
     .tcp_header_len = 32,
     .ip_total_len = 52,
     .payload_len = 0,
     .sport = 40000,
     .dport = 443,
     .seq = 1000,
     .ack = 2000,
     .flags = tcpflag::kAck,
     .window = 512,
     .opts = {.has_mss = false,
              .mss = 0,
              .has_wscale = false,
              .wscale = 0,
              .sack_permitted = false,
              .sack_blocks = 0,
              .has_timestamps = false,
              .tsval = 0,
              .tsecr = 0,
              .unknown_options = 2},
     .checksum_valid = false},
};

void PrintTo(const ValidCase& c, std::ostream* os) {
  *os << c.name;
}

class ParseValidCase : public ::testing::TestWithParam<ValidCase> {};

TEST_P(ParseValidCase, FillsView) {
  const ValidCase& c = GetParam();
  const std::vector<uint8_t> pkt = hex(c.bytes);
  PacketView v;
  ASSERT_EQ(to_string(parse_packet(pkt, v)), std::string("none"));
  EXPECT_EQ(v.ip_version, c.ip_version);
  EXPECT_EQ(v.src.to_string(), c.src);
  EXPECT_EQ(v.dst.to_string(), c.dst);
  EXPECT_EQ(v.ip_header_len, c.ip_header_len);
  EXPECT_EQ(v.tcp_offset, c.ip_header_len);
  EXPECT_EQ(v.tcp_header_len, c.tcp_header_len);
  EXPECT_EQ(v.ip_total_len, c.ip_total_len);
  EXPECT_EQ(v.payload_len, c.payload_len);
  EXPECT_EQ(v.sport, c.sport);
  EXPECT_EQ(v.dport, c.dport);
  EXPECT_EQ(v.seq, c.seq);
  EXPECT_EQ(v.ack, c.ack);
  EXPECT_EQ(v.flags, c.flags);
  EXPECT_EQ(v.window, c.window);
  EXPECT_EQ(v.opts.has_mss, c.opts.has_mss);
  EXPECT_EQ(v.opts.mss, c.opts.mss);
  EXPECT_EQ(v.opts.has_wscale, c.opts.has_wscale);
  EXPECT_EQ(v.opts.wscale, c.opts.wscale);
  EXPECT_EQ(v.opts.sack_permitted, c.opts.sack_permitted);
  EXPECT_EQ(v.opts.sack_blocks, c.opts.sack_blocks);
  EXPECT_EQ(v.opts.has_timestamps, c.opts.has_timestamps);
  EXPECT_EQ(v.opts.tsval, c.opts.tsval);
  EXPECT_EQ(v.opts.tsecr, c.opts.tsecr);
  EXPECT_EQ(v.opts.unknown_options, c.opts.unknown_options);
  EXPECT_EQ(v.checksum, (pkt[v.tcp_offset + 16] << 8) | pkt[v.tcp_offset + 17]);
  if (c.checksum_valid) {
    // Independent check against scapy's checksum, pseudo-header included.
    EXPECT_EQ(tcp_checksum(pkt, v), v.checksum);
  }
}

INSTANTIATE_TEST_SUITE_P(Raw, ParseValidCase, ::testing::ValuesIn(kValidCases),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// A valid packet cut anywhere before its IP length is an error; trailing bytes beyond the
// IP length are ignored.
TEST(ParseTruncation, EveryPrefixOfValidFixturesFails) {
  for (const auto& c : kValidCases) {
    const std::vector<uint8_t> full = hex(c.bytes);
    PacketView v;
    ASSERT_EQ(parse_packet(full, v), ParseError::kNone) << c.name;
    for (size_t cut = 0; cut < v.ip_total_len; ++cut) {
      const std::vector<uint8_t> part(full.begin(), full.begin() + static_cast<long>(cut));
      PacketView pv;
      EXPECT_NE(parse_packet(part, pv), ParseError::kNone) << c.name << " cut at " << cut;
    }
  }
}

// A cut copy (a capture's snap length, NFQA_CAP_LEN) parses from its headers when asked to:
// every prefix that holds the IP and TCP headers with their options gives the whole packet's
// view (lengths from the IP header); a shorter one is kTruncatedIp / kTruncatedTcp, and
// never reads past what it has (ASan checks the copies below, each its own allocation).
TEST(ParseTruncation, CutCopiesParseFromTheirHeaders) {
  for (const auto& c : kValidCases) {
    const std::vector<uint8_t> full = hex(c.bytes);
    PacketView whole;
    ASSERT_EQ(parse_packet(full, whole), ParseError::kNone) << c.name;
    const size_t headers = size_t{whole.tcp_offset} + whole.tcp_header_len;
    for (size_t cut = 0; cut < whole.ip_total_len; ++cut) {
      const std::vector<uint8_t> part(full.begin(), full.begin() + static_cast<long>(cut));
      PacketView v;
      const ParseError e = parse_packet(part, v, true);
      if (cut < headers) {
        EXPECT_TRUE(e != ParseError::kNone) << c.name << " cut at " << cut;
        continue;
      }
      ASSERT_EQ(e, ParseError::kNone) << c.name << " cut at " << cut;
      EXPECT_EQ(v.ip_total_len, whole.ip_total_len);
      EXPECT_EQ(v.payload_len, whole.payload_len);
      EXPECT_EQ(v.seq, whole.seq);
      EXPECT_EQ(v.ack, whole.ack);
      EXPECT_EQ(v.window, whole.window);
      EXPECT_EQ(v.opts.has_timestamps, whole.opts.has_timestamps);
      EXPECT_EQ(v.opts.tsval, whole.opts.tsval);
    }
  }
}

TEST(ParseTruncation, CutCopiesNameWhatIsMissing) {
  const std::vector<uint8_t> seg = testpkt::build(
      {.timestamps = true, .tsval = 5, .payload_len = 1000});  // IPv4 20 + TCP 32 + 1000
  PacketView v;
  EXPECT_EQ(parse_packet(std::span(seg).first(60), v, false), ParseError::kBadIpv4TotalLength);
  EXPECT_EQ(parse_packet(std::span(seg).first(60), v, true), ParseError::kNone);
  EXPECT_EQ(v.payload_len, 1000u);
  EXPECT_EQ(parse_packet(std::span(seg).first(48), v, true), ParseError::kTruncatedTcp);
  EXPECT_EQ(parse_packet(std::span(seg).first(30), v, true), ParseError::kTruncatedTcp);
  EXPECT_EQ(parse_packet(std::span(seg).first(12), v, true), ParseError::kTruncatedIp);
  const std::vector<uint8_t> v6 =
      testpkt::build({.src = "2001:2::2",
                      .dst = "2001:3::2",
                      .payload_len = 500,
                      .ipv6_ext = {testpkt::Ipv6Ext::hop_by_hop(std::vector<uint8_t>(14, 1))}});
  EXPECT_EQ(parse_packet(std::span(v6).first(50), v, true), ParseError::kTruncatedIp);
  EXPECT_EQ(parse_packet(std::span(v6).first(80), v, true), ParseError::kNone);
  EXPECT_EQ(v.payload_len, 500u);
}

TEST(ParseBuilder, RoundTripsSpecFields) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 3000; ++i) {
    const testpkt::TcpSpec s = testpkt::random_spec(rng);
    const std::vector<uint8_t> pkt = testpkt::build(s);
    PacketView v;
    ASSERT_EQ(to_string(parse_packet(pkt, v)), std::string("none")) << testpkt::describe(s);
    SCOPED_TRACE(testpkt::describe(s));
    EXPECT_EQ(v.ip_version, s.is_v6() ? 6 : 4);
    EXPECT_EQ(v.src, *IpAddr::parse(s.src));
    EXPECT_EQ(v.dst, *IpAddr::parse(s.dst));
    EXPECT_EQ(v.sport, s.sport);
    EXPECT_EQ(v.dport, s.dport);
    EXPECT_EQ(v.seq, s.seq);
    EXPECT_EQ(v.ack, s.ack);
    EXPECT_EQ(v.flags, s.flags);
    EXPECT_EQ(v.window, s.window);
    EXPECT_EQ(v.payload_len, s.payload.empty() ? s.payload_len : s.payload.size());
    EXPECT_EQ(v.ip_total_len + s.trailing_padding, pkt.size());
    EXPECT_EQ(size_t{v.tcp_offset} + v.tcp_header_len + v.payload_len, v.ip_total_len);
    EXPECT_EQ(v.opts.has_mss, s.mss.has_value());
    if (s.mss) {
      EXPECT_EQ(v.opts.mss, *s.mss);
    }
    EXPECT_EQ(v.opts.has_wscale, s.wscale.has_value());
    if (s.wscale) {
      EXPECT_EQ(v.opts.wscale, *s.wscale);
    }
    EXPECT_EQ(v.opts.sack_permitted, s.sack_permitted);
    EXPECT_EQ(v.opts.has_timestamps, s.timestamps);
    if (s.timestamps) {
      EXPECT_EQ(v.opts.tsval, s.tsval);
      EXPECT_EQ(v.opts.tsecr, s.tsecr);
    }
    EXPECT_EQ(v.opts.sack_blocks, s.sack.size());
    EXPECT_EQ(tcp_checksum(pkt, v), v.checksum);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(ParseBuilder, Ipv6RoutingHeaderFinalDestination) {
  struct Case {
    const char* what;
    testpkt::Ipv6Ext rh;
    const char* final_dst;  // nullptr: header dst
  };
  const Case cases[] = {
      {"type 0, 2 addresses, segments left 2",
       testpkt::Ipv6Ext::routing(0, 2, {"2001:db8:5::1", "2001:db8:5::2"}), "2001:db8:5::2"},
      {"type 0, segments left 0", testpkt::Ipv6Ext::routing(0, 0, {"2001:db8:5::1"}), nullptr},
      {"type 2 (mobile IPv6 home address)", testpkt::Ipv6Ext::routing(2, 1, {"2001:db8:6::9"}),
       "2001:db8:6::9"},
      {"type 4 (SRH), list[0] is final",
       testpkt::Ipv6Ext::routing(4, 1, {"2001:db8:7::1", "2001:db8:7::2"}), "2001:db8:7::1"},
  };
  for (const auto& c : cases) {
    testpkt::TcpSpec s{
        .src = "2001:db8::2", .dst = "2001:db8:1::2", .payload_len = 9, .ipv6_ext = {c.rh}};
    std::vector<uint8_t> pkt = testpkt::build(s);
    PacketView v;
    ASSERT_EQ(parse_packet(pkt, v), ParseError::kNone) << c.what;
    EXPECT_EQ(v.dst.to_string(), "2001:db8:1::2") << c.what;  // flows key on the header dst
    if (c.final_dst) {
      ASSERT_NE(v.pseudo_dst_offset, 0) << c.what;
      EXPECT_EQ(IpAddr::v6(pkt.data() + v.pseudo_dst_offset).to_string(), c.final_dst) << c.what;
    } else {
      EXPECT_EQ(v.pseudo_dst_offset, 0) << c.what;
    }
    EXPECT_EQ(tcp_checksum(pkt, v), v.checksum) << c.what;
  }
}

TEST(PacketBuilder, RendersForFailureMessages) {
  const testpkt::TcpSpec s{.flags = tcpflag::kSyn | tcpflag::kAck,
                           .window = 512,
                           .mss = 1460,
                           .wscale = 7,
                           .sack_permitted = true};
  EXPECT_EQ(testpkt::describe(s),
            "IP 198.18.0.2.40000 > 198.19.0.2.443: Flags [S.], seq 1000, ack 0, win 512, "
            "options [mss 1460,sackOK,wscale 7], length 0");
  const std::vector<uint8_t> pkt = testpkt::build(s);
  const std::string from_bytes = testpkt::describe(pkt);
  EXPECT_NE(from_bytes.find("IP 198.18.0.2.40000 > 198.19.0.2.443: Flags [S.]"), std::string::npos)
      << from_bytes;
  EXPECT_NE(from_bytes.find("win 512, wscale 7"), std::string::npos) << from_bytes;
  EXPECT_EQ(testpkt::describe(std::span<const uint8_t>()), "<unparsed: empty, 0 bytes>");
  EXPECT_NE(testpkt::to_scapy(s).find("('WScale', 7)"), std::string::npos);
}

// Parses under ASan: every byte read must be inside the exactly-sized buffer.
void parse_and_check_invariants(const std::vector<uint8_t>& bytes) {
  PacketView v;
  if (parse_packet(bytes, v) != ParseError::kNone) return;
  ASSERT_LE(v.ip_total_len, bytes.size());
  ASSERT_EQ(size_t{v.tcp_offset} + v.tcp_header_len + v.payload_len, v.ip_total_len);
  ASSERT_GE(v.tcp_header_len, 20);
  ASSERT_TRUE(v.ip_version == 4 || v.ip_version == 6);
  (void)tcp_checksum(bytes, v);
  std::vector<uint8_t> copy = bytes;
  set_tcp_window(copy, v, static_cast<uint16_t>(v.window / 2), ChecksumState::kNotReady);
  ASSERT_EQ(tcp_checksum(copy, v), v.checksum);
}

TEST(ParseRobustness, EveryTruncationOfRandomPackets) {
  std::mt19937 rng(777);
  for (int i = 0; i < 300; ++i) {
    const std::vector<uint8_t> full = testpkt::build(testpkt::random_spec(rng));
    for (size_t cut = 0; cut <= full.size(); ++cut) {
      parse_and_check_invariants(
          std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(cut)));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(ParseRobustness, MutatedPackets) {
  std::mt19937 rng(4242);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> pkt = testpkt::build(testpkt::random_spec(rng));
    const int flips = 1 + static_cast<int>(rng() % 4);
    // Mutations concentrate on the headers, where the parser looks.
    const size_t span = std::min<size_t>(pkt.size(), 160);
    for (int f = 0; f < flips; ++f) pkt[rng() % span] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) pkt.resize(rng() % (pkt.size() + 1));
    parse_and_check_invariants(pkt);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(ParseRobustness, RandomBytes) {
  std::mt19937 rng(99);
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> pkt(rng() % 120);
    for (auto& b : pkt) b = static_cast<uint8_t>(rng());
    if (!pkt.empty()) {
      // Steer most inputs past the version check.
      const uint8_t versions[] = {0x45, 0x46, 0x4f, 0x60, 0x00};
      pkt[0] = static_cast<uint8_t>((versions[rng() % 5] & 0xf0) | (pkt[0] & 0x0f));
    }
    PacketView v;
    if (parse_packet(pkt, v) == ParseError::kNone) ++parsed;
    parse_and_check_invariants(pkt);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Random bytes almost never form a TCP packet; the point is not reading out of bounds.
  EXPECT_LT(parsed, 200);
}

// The SACK blocks' edges as sent, and the bytes above the cumulative ACK they say the
// receiver holds (Engine::with_sacked's allowance).
TEST(PacketSack, BlocksAreParsedAndSummedAboveTheAck) {
  // v6_sack above: ack 2000, sack {3000:4000}{5000:6000}.
  PacketView v;
  const std::vector<uint8_t> b =
      hex("60000000 00370640 20010db8 00000000 00000000 00000002 20010db8 00010000"
          "00000000 00000002 9c4001bb 000003e8 000007d0 d0100200 0ea60000 0101080a"
          "00000007 00000009 01010512 00000bb8 00000fa0 00001388 00001770 616263");
  ASSERT_EQ(parse_packet(b, v), ParseError::kNone);
  ASSERT_EQ(v.opts.sack_blocks, 2);
  EXPECT_EQ(v.opts.sack_left[0], 3000u);
  EXPECT_EQ(v.opts.sack_right[0], 4000u);
  EXPECT_EQ(v.opts.sack_left[1], 5000u);
  EXPECT_EQ(v.opts.sack_right[1], 6000u);
  EXPECT_EQ(sacked_above(v.opts, v.ack), 2000u);
  EXPECT_EQ(sacked_above(v.opts, 3500), 1500u) << "a block straddling the ACK: its upper part";
  EXPECT_EQ(sacked_above(v.opts, 6000), 0u) << "D-SACKs: nothing above the ACK";
}

TEST(PacketSack, SequenceWrapAndBogusBlocks) {
  TcpOptions o;
  o.sack_blocks = 1;
  o.sack_left[0] = 0xffffff00u;  // wraps through 0
  o.sack_right[0] = 0x100u;
  EXPECT_EQ(sacked_above(o, 0xfffff000u), 0x200u);
  EXPECT_EQ(sacked_above(o, 0xffffff80u), 0x180u);
  o.sack_right[0] = o.sack_left[0];  // empty block
  EXPECT_EQ(sacked_above(o, 0xfffff000u), 0u);
  o.sack_left[0] = 100;
  o.sack_right[0] = 100 + (1u << 30) + 1;  // longer than any window
  EXPECT_EQ(sacked_above(o, 50), 0u);
  o.sack_right[0] = 100 + (1u << 30);
  EXPECT_EQ(sacked_above(o, 50), 1u << 30);
  // One bogus block voids the option; blocks beyond sack_blocks are not read.
  o.sack_blocks = 2;
  o.sack_left[1] = 500;
  o.sack_right[1] = 400;
  EXPECT_EQ(sacked_above(o, 50), 0u);
  o.sack_blocks = 0;
  EXPECT_EQ(sacked_above(o, 50), 0u);
}

}  // namespace
}  // namespace rsfc
