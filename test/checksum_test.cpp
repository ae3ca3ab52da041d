// Checksum tests: RFC 1624 incremental update vs. full recomputation over random packets,
// invalid checksums staying exactly as invalid, and the CHECKSUM_PARTIAL (not ready) path.
// The reference is the builder's naive byte-wise checksum, independent of src/core/packet.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "packet_builder.h"
#include "rsfc/core/packet.h"

namespace rsfc {
namespace {

uint16_t field16(const std::vector<uint8_t>& pkt, size_t at) {
  return static_cast<uint16_t>((pkt[at] << 8) | pkt[at + 1]);
}

// One's complement sum over the pseudo-header and the whole segment including the checksum
// field: 0xffff for a valid checksum; otherwise how far off it is.
uint16_t verify_sum(const std::vector<uint8_t>& pkt, const testpkt::TcpSpec& spec,
                    const PacketView& v) {
  const bool v6 = spec.is_v6();
  const auto src = testpkt::detail::addr_bytes(spec.src, v6);
  const auto dst = v6 ? testpkt::pseudo_dst(spec) : testpkt::detail::addr_bytes(spec.dst, false);
  const size_t seg = size_t{v.tcp_header_len} + v.payload_len;
  uint32_t acc = testpkt::detail::sum_bytes(src.data(), src.size());
  acc = testpkt::detail::sum_bytes(dst.data(), dst.size(), acc);
  acc += static_cast<uint32_t>(seg >> 16) + static_cast<uint32_t>(seg & 0xffff) + 6;
  acc = testpkt::detail::sum_bytes(pkt.data() + v.tcp_offset, seg, acc);
  return testpkt::detail::fold(acc);
}

uint16_t ones_add(uint16_t a, uint16_t b) {
  uint32_t s = uint32_t{a} + b;
  return static_cast<uint16_t>((s & 0xffff) + (s >> 16));
}

TEST(ChecksumAdjust, Rfc1624Example) {
  // RFC 1624 section 4: eqn. 3 gives 0x0000 where eqn. 2 would give -0 (0xffff).
  EXPECT_EQ(checksum_adjust(0xdd2f, 0x5555, 0x3285), 0x0000);
}

TEST(ChecksumAdjust, UnchangedWordKeepsChecksum) {
  for (uint16_t c : {uint16_t{0x0001}, uint16_t{0x1234}, uint16_t{0xfffe}}) {
    EXPECT_EQ(checksum_adjust(c, 0xabcd, 0xabcd), c);
  }
}

// The property test: for thousands of random valid packets (IPv4/IPv6, random options and
// extension headers, odd/even payloads, link padding) and random old/new windows, the
// incrementally updated packet is byte-identical to the builder's packet built with the new
// window, whose checksum the builder computes from scratch.
TEST(SetTcpWindow, IncrementalEqualsFullRecomputation) {
  std::mt19937 rng(20240611);
  int odd_payloads = 0, v6 = 0, zero_results = 0, zero_origins = 0;
  for (int i = 0; i < 20000; ++i) {
    testpkt::TcpSpec s = testpkt::random_spec(rng);
    std::vector<uint8_t> pkt = testpkt::build(s);
    PacketView v;
    ASSERT_EQ(parse_packet(pkt, v), ParseError::kNone) << testpkt::describe(s);
    auto new_window = static_cast<uint16_t>(rng());
    if (i % 5 == 0) {
      // Aim at the edge: pick the new window that makes the new checksum 0x0000.
      new_window = ones_add(v.checksum, v.window);
    }
    if (i % 7 == 0) new_window = static_cast<uint16_t>(i % 2 ? 0 : 0xffff);
    if (v.checksum == 0) ++zero_origins;

    set_tcp_window(pkt, v, new_window, ChecksumState::kComplete);
    s.window = new_window;
    const std::vector<uint8_t> want = testpkt::build(s);
    ASSERT_EQ(pkt, want) << testpkt::describe(s);
    EXPECT_EQ(v.window, new_window);
    EXPECT_EQ(v.checksum, field16(pkt, v.tcp_offset + 16));
    EXPECT_EQ(tcp_checksum(pkt, v), v.checksum);
    EXPECT_EQ(verify_sum(pkt, s, v), 0xffff);

    odd_payloads += v.payload_len % 2;
    v6 += v.ip_version == 6;
    zero_results += v.checksum == 0;
    // Chain a second change from the 0x0000 checksum (the "starts at zero" edge).
    if (v.checksum == 0) {
      ++zero_origins;
      const auto w2 = static_cast<uint16_t>(rng());
      set_tcp_window(pkt, v, w2, ChecksumState::kComplete);
      s.window = w2;
      ASSERT_EQ(pkt, testpkt::build(s)) << testpkt::describe(s);
    }
  }
  // The generator really produced the interesting cases.
  EXPECT_GT(odd_payloads, 5000);
  EXPECT_GT(v6, 5000);
  EXPECT_GT(zero_results, 1000);
  EXPECT_GT(zero_origins, 1000);
}

TEST(SetTcpWindow, UnalignedBuffer) {
  // The packet starts at an odd address: wide loads must not assume alignment (UBSan).
  std::mt19937 rng(5);
  for (int i = 0; i < 500; ++i) {
    testpkt::TcpSpec s = testpkt::random_spec(rng);
    const std::vector<uint8_t> built = testpkt::build(s);
    std::vector<uint8_t> storage(built.size() + 1);
    std::copy(built.begin(), built.end(), storage.begin() + 1);
    std::span<uint8_t> pkt(storage.data() + 1, built.size());
    PacketView v;
    ASSERT_EQ(parse_packet(pkt, v), ParseError::kNone);
    EXPECT_EQ(tcp_checksum(pkt, v), v.checksum);
    s.window = static_cast<uint16_t>(rng());
    set_tcp_window(pkt, v, s.window, ChecksumState::kNotReady);
    EXPECT_TRUE(std::equal(pkt.begin(), pkt.end(), testpkt::build(s).begin()))
        << testpkt::describe(s);
  }
}

// A deliberately wrong checksum stays wrong by exactly the same amount: the receiver drops
// the packet just as it would have without us.
TEST(SetTcpWindow, InvalidChecksumStaysAsInvalid) {
  std::mt19937 rng(31337);
  for (int i = 0; i < 5000; ++i) {
    testpkt::TcpSpec s = testpkt::random_spec(rng);
    const std::vector<uint8_t> good = testpkt::build(s);
    PacketView gv;
    ASSERT_EQ(parse_packet(good, gv), ParseError::kNone);
    uint16_t bad = static_cast<uint16_t>(rng());
    if (bad == gv.checksum || (gv.checksum == 0 && bad == 0xffff)) bad ^= 0x0101;
    s.checksum = bad;
    std::vector<uint8_t> pkt = testpkt::build(s);
    PacketView v;
    ASSERT_EQ(parse_packet(pkt, v), ParseError::kNone);
    const uint16_t before = verify_sum(pkt, s, v);
    ASSERT_NE(before, 0xffff) << "fixture checksum is accidentally valid";
    set_tcp_window(pkt, v, static_cast<uint16_t>(rng()), ChecksumState::kComplete);
    s.window = v.window;
    EXPECT_EQ(verify_sum(pkt, s, v), before) << testpkt::describe(s);
    EXPECT_NE(tcp_checksum(pkt, v), v.checksum);
  }
}

// NFQA_SKB_CSUMNOTREADY: the field holds only the folded pseudo-header sum. After the
// rewrite the packet carries the full checksum (the kernel then treats it as complete).
TEST(SetTcpWindow, NotReadyComputesFullChecksum) {
  std::mt19937 rng(8);
  for (int i = 0; i < 5000; ++i) {
    testpkt::TcpSpec s = testpkt::random_spec(rng);
    s.partial_checksum = true;
    std::vector<uint8_t> pkt = testpkt::build(s);
    PacketView v;
    ASSERT_EQ(parse_packet(pkt, v), ParseError::kNone);
    s.partial_checksum = false;
    const std::vector<uint8_t> full = testpkt::build(s);
    if (v.checksum == field16(full, v.tcp_offset + 16)) continue;  // 1 in 65536: proves nothing
    // Also when the window does not change: the field must still be completed.
    if (i % 10 != 0) s.window = static_cast<uint16_t>(rng());
    set_tcp_window(pkt, v, s.window, ChecksumState::kNotReady);
    ASSERT_EQ(pkt, testpkt::build(s)) << testpkt::describe(s);
    EXPECT_EQ(verify_sum(pkt, s, v), 0xffff);
  }
}

TEST(SetTcpWindow, SameWindowCompleteLeavesBytesUntouched) {
  testpkt::TcpSpec s{.window = 1234, .payload_len = 3};
  std::vector<uint8_t> pkt = testpkt::build(s);
  const std::vector<uint8_t> orig = pkt;
  PacketView v;
  ASSERT_EQ(parse_packet(pkt, v), ParseError::kNone);
  set_tcp_window(pkt, v, 1234, ChecksumState::kComplete);
  EXPECT_EQ(pkt, orig);
  // Even a 0xffff checksum field (which a no-op RFC 1624 update would turn into 0x0000).
  s.checksum = 0xffff;
  pkt = testpkt::build(s);
  const std::vector<uint8_t> orig2 = pkt;
  ASSERT_EQ(parse_packet(pkt, v), ParseError::kNone);
  set_tcp_window(pkt, v, 1234, ChecksumState::kComplete);
  EXPECT_EQ(pkt, orig2);
}

TEST(SetTcpWindow, OnlyWindowAndChecksumBytesChange) {
  // IPv4 with options, padding after the IP packet: nothing but bytes 14..17 of TCP move.
  testpkt::TcpSpec s{.flags = tcpflag::kAck,
                     .window = 40000,
                     .timestamps = true,
                     .tsval = 5,
                     .payload_len = 11,
                     .ipv4_options = {148, 4, 0, 0},
                     .trailing_padding = 5};
  std::vector<uint8_t> pkt = testpkt::build(s);
  const std::vector<uint8_t> orig = pkt;
  PacketView v;
  ASSERT_EQ(parse_packet(pkt, v), ParseError::kNone);
  set_tcp_window(pkt, v, 1000, ChecksumState::kComplete);
  for (size_t i = 0; i < pkt.size(); ++i) {
    if (i >= v.tcp_offset + 14u && i < v.tcp_offset + 18u) continue;
    EXPECT_EQ(pkt[i], orig[i]) << "byte " << i;
  }
  EXPECT_EQ(field16(pkt, v.tcp_offset + 14), 1000);
}

// A header-only copy (rsfc-replay of a capture cut at its snap length; its lengths parsed
// from the IP header): the incremental update needs only the header and gives the checksum
// the whole packet gets; the full computation needs the payload and writes nothing.
TEST(SetTcpWindow, HeaderOnlyCopyTakesTheIncrementalUpdateOnly) {
  const testpkt::TcpSpec s{.flags = tcpflag::kAck, .window = 40000, .payload_len = 1000};
  std::vector<uint8_t> whole = testpkt::build(s);
  PacketView vw;
  ASSERT_EQ(parse_packet(whole, vw), ParseError::kNone);
  set_tcp_window(whole, vw, 1000, ChecksumState::kComplete);

  std::vector<uint8_t> cut = testpkt::build(s);
  cut.resize(vw.tcp_offset + vw.tcp_header_len);
  PacketView vc;
  ASSERT_EQ(parse_packet(cut, vc, /*cut=*/true), ParseError::kNone);
  set_tcp_window(cut, vc, 1000, ChecksumState::kComplete);
  EXPECT_EQ(vc.window, 1000);
  EXPECT_EQ(vc.checksum, vw.checksum);
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), whole.begin()));

  std::vector<uint8_t> cut2 = testpkt::build(s);
  cut2.resize(cut.size());
  const std::vector<uint8_t> orig = cut2;
  ASSERT_EQ(parse_packet(cut2, vc, /*cut=*/true), ParseError::kNone);
  set_tcp_window(cut2, vc, 1000, ChecksumState::kNotReady);
  EXPECT_EQ(cut2, orig) << "no payload to compute the whole checksum over";
  cut2.resize(vc.tcp_offset + 10);  // not even the header
  const std::vector<uint8_t> orig3 = cut2;
  set_tcp_window(cut2, vc, 1000, ChecksumState::kComplete);
  EXPECT_EQ(cut2, orig3);
}

}  // namespace
}  // namespace rsfc
