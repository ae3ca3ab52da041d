// Bounds-checked IPv4/IPv6 + TCP parsing and the TCP window rewrite with its checksum.
//
// Per-packet path: no allocation, no exceptions, no strings. Every read is checked against
// `limit` (the IP length as stated, never more than the bytes given).
#include "rsfc/core/packet.h"

#include <bit>
#include <cstring>

namespace rsfc {
namespace {

constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kIpv6HopByHop = 0;
constexpr uint8_t kIpv6Routing = 43;
constexpr uint8_t kIpv6Fragment = 44;
constexpr uint8_t kIpv6Esp = 50;
constexpr uint8_t kIpv6Ah = 51;
constexpr uint8_t kIpv6NoNext = 59;
constexpr uint8_t kIpv6DestOpts = 60;

constexpr size_t kIpv4MinHeader = 20;
constexpr size_t kIpv6Header = 40;
constexpr size_t kTcpMinHeader = 20;
constexpr size_t kTcpWindowAt = 14;
constexpr size_t kTcpChecksumAt = 16;

inline uint16_t be16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}
inline uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
inline void put_be16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// One's complement sum of `n` bytes read in host byte order (RFC 1071: the sum is byte-order
// independent; swap once at the end). 32 bits at a time into a 64-bit accumulator; the
// caller must start at an even offset of the checksummed region. Returns an unfolded sum.
uint64_t sum_host_order(const uint8_t* p, size_t n) {
  uint64_t acc = 0;
  while (n >= 8) {
    uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + 4, 4);
    acc += uint64_t{a} + b;
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    uint32_t a;
    std::memcpy(&a, p, 4);
    acc += a;
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    uint16_t a;
    std::memcpy(&a, p, 2);
    acc += a;
    p += 2;
    n -= 2;
  }
  if (n == 1) {
    // The odd byte is the high byte of a zero-padded big-endian word.
    acc += (std::endian::native == std::endian::little) ? uint64_t{p[0]} : uint64_t{p[0]} << 8;
  }
  return acc;
}

inline uint16_t fold(uint64_t acc) {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<uint16_t>(acc);
}

// Host-order folded sum -> the same sum as big-endian 16-bit words.
inline uint16_t to_be_words(uint16_t host_sum) {
  if constexpr (std::endian::native == std::endian::little) {
    return static_cast<uint16_t>((host_sum >> 8) | (host_sum << 8));
  } else {
    return host_sum;
  }
}

// Sum of the 16 bytes of an address as big-endian words.
inline uint32_t sum_addr(const uint8_t* p, size_t n) {
  uint32_t acc = 0;
  for (size_t i = 0; i < n; i += 2) acc += be16(p + i);
  return acc;
}

ParseError parse_tcp_options(const uint8_t* p, size_t len, TcpOptions& o) {
  size_t i = 0;
  while (i < len) {
    const uint8_t kind = p[i];
    if (kind == 0) break;  // EOL
    if (kind == 1) {       // NOP
      ++i;
      continue;
    }
    if (i + 1 >= len) return ParseError::kBadTcpOptions;
    const uint8_t olen = p[i + 1];
    if (olen < 2 || olen > len - i) return ParseError::kBadTcpOptions;
    const uint8_t* v = p + i + 2;
    switch (kind) {
      case 2:  // MSS
        if (olen != 4) return ParseError::kBadTcpOptions;
        o.has_mss = true;
        o.mss = be16(v);
        break;
      case 3:  // window scale
        if (olen != 3) return ParseError::kBadTcpOptions;
        o.has_wscale = true;
        o.wscale = v[0];
        break;
      case 4:  // SACK permitted
        if (olen != 2) return ParseError::kBadTcpOptions;
        o.sack_permitted = true;
        break;
      case 5:  // SACK: 1..4 blocks of 8 bytes (a block-less SACK is malformed)
        if (olen < 10 || (olen - 2) % 8 != 0) return ParseError::kBadTcpOptions;
        o.sack_blocks = static_cast<uint8_t>((olen - 2) / 8);
        if (o.sack_blocks > o.sack_left.size()) return ParseError::kBadTcpOptions;
        for (uint8_t b = 0; b < o.sack_blocks; ++b) {
          o.sack_left[b] = be32(v + 8 * b);
          o.sack_right[b] = be32(v + 8 * b + 4);
        }
        break;
      case 8:  // timestamps
        if (olen != 10) return ParseError::kBadTcpOptions;
        o.has_timestamps = true;
        o.tsval = be32(v);
        o.tsecr = be32(v + 4);
        break;
      default:
        if (o.unknown_options < 255) ++o.unknown_options;
        break;
    }
    i += olen;
  }
  return ParseError::kNone;
}

ParseError parse_ipv4_options(const uint8_t* p, size_t len) {
  size_t i = 0;
  while (i < len) {
    const uint8_t kind = p[i];
    if (kind == 0) break;  // end of option list
    if (kind == 1) {       // no-operation
      ++i;
      continue;
    }
    if (i + 1 >= len) return ParseError::kBadIpv4Options;
    const uint8_t olen = p[i + 1];
    if (olen < 2 || olen > len - i) return ParseError::kBadIpv4Options;
    i += olen;
  }
  return ParseError::kNone;
}

// Fills `out` with the IPv4 header; on success `off` is the TCP offset and `limit` the IP
// total length.
ParseError parse_ipv4(const uint8_t* p, size_t n, bool cut, PacketView& out, size_t& off,
                      size_t& limit) {
  if (n < kIpv4MinHeader) return ParseError::kTruncatedIp;
  const size_t ihl = size_t{p[0] & 0x0fu} * 4;
  if (ihl < kIpv4MinHeader) return ParseError::kBadIpv4HeaderLength;
  if (ihl > n) return ParseError::kTruncatedIp;
  const size_t total = be16(p + 2);
  if (total < ihl || (total > n && !cut)) return ParseError::kBadIpv4TotalLength;
  if (ParseError e = parse_ipv4_options(p + kIpv4MinHeader, ihl - kIpv4MinHeader);
      e != ParseError::kNone) {
    return e;
  }
  if (be16(p + 6) & 0x3fff) return ParseError::kIpv4Fragment;  // MF or fragment offset
  if (p[9] != kProtoTcp) return ParseError::kNotTcp;
  out.ip_version = 4;
  out.src = IpAddr::v4(p + 12);
  out.dst = IpAddr::v4(p + 16);
  out.pseudo_dst_offset = 0;
  off = ihl;
  limit = total;
  return ParseError::kNone;
}

// Walks the IPv6 extension-header chain up to TCP.
ParseError parse_ipv6(const uint8_t* p, size_t n, bool cut, PacketView& out, size_t& off,
                      size_t& limit) {
  if (n < kIpv6Header) return ParseError::kTruncatedIp;
  const size_t total = kIpv6Header + be16(p + 4);
  if (total > n && !cut) return ParseError::kBadIpv6PayloadLength;
  out.pseudo_dst_offset = 0;
  uint8_t next = p[6];
  size_t at = kIpv6Header;
  bool authenticated = false;
  // Every header is at least 8 bytes and `at` only grows, so the loop ends.
  for (;;) {
    switch (next) {
      case kProtoTcp: {
        if (authenticated) return ParseError::kNotTcp;          // rewriting would break the AH ICV
        if (at > 0xffff) return ParseError::kBadIpv6ExtHeader;  // offsets are 16-bit
        out.ip_version = 6;
        out.src = IpAddr::v6(p + 8);
        out.dst = IpAddr::v6(p + 24);
        off = at;
        limit = total;
        return ParseError::kNone;
      }
      case kIpv6HopByHop:
        if (at != kIpv6Header) return ParseError::kBadIpv6ExtHeader;  // must come first
        [[fallthrough]];
      case kIpv6DestOpts:
      case kIpv6Routing: {
        if (total - at < 8) return ParseError::kBadIpv6ExtHeader;
        if (n - at < 8) return ParseError::kTruncatedIp;  // at <= n: all before it is there
        const size_t len = (size_t{p[at + 1]} + 1) * 8;
        if (len > total - at) return ParseError::kBadIpv6ExtHeader;
        if (len > n - at) return ParseError::kTruncatedIp;
        if (next == kIpv6Routing && p[at + 3] != 0) {  // segments left
          const uint8_t type = p[at + 2];
          const size_t addrs = (len - 8) / 16;
          size_t final_at = 0;
          if ((type == 0 || type == 2) && addrs > 0) {
            final_at = at + 8 + 16 * (addrs - 1);
          } else if (type == 4 && addrs > 0) {
            final_at = at + 8;
          }
          if (final_at > 0xffff) return ParseError::kBadIpv6ExtHeader;  // offsets are 16-bit
          out.pseudo_dst_offset = static_cast<uint16_t>(final_at);
        }
        next = p[at];
        at += len;
        break;
      }
      case kIpv6Ah: {
        if (total - at < 8) return ParseError::kBadIpv6ExtHeader;
        if (n - at < 8) return ParseError::kTruncatedIp;
        const size_t len = (size_t{p[at + 1]} + 2) * 4;
        if (len > total - at) return ParseError::kBadIpv6ExtHeader;
        if (len > n - at) return ParseError::kTruncatedIp;
        authenticated = true;
        next = p[at];
        at += len;
        break;
      }
      case kIpv6Fragment:
        return ParseError::kIpv6Fragment;
      case kIpv6Esp:
      case kIpv6NoNext:
      default:
        return ParseError::kNotTcp;
    }
  }
}

}  // namespace

uint64_t sacked_above(const TcpOptions& o, uint32_t ack) {
  constexpr uint32_t kMaxBlock = 1u << 30;  // the largest window a scale allows
  uint64_t sum = 0;
  for (uint8_t b = 0; b < o.sack_blocks && b < o.sack_left.size(); ++b) {
    const uint32_t left = o.sack_left[b], right = o.sack_right[b];
    if (!seq_gt(right, left) || right - left > kMaxBlock) return 0;
    if (!seq_gt(right, ack)) continue;  // at or below the cumulative ACK (D-SACK)
    sum += right - (seq_gt(left, ack) ? left : ack);
  }
  return sum;
}

const char* to_string(ParseError e) {
  switch (e) {
    case ParseError::kNone:
      return "none";
    case ParseError::kEmpty:
      return "empty";
    case ParseError::kBadIpVersion:
      return "bad_ip_version";
    case ParseError::kTruncatedIp:
      return "truncated_ip";
    case ParseError::kBadIpv4HeaderLength:
      return "bad_ipv4_header_length";
    case ParseError::kBadIpv4TotalLength:
      return "bad_ipv4_total_length";
    case ParseError::kBadIpv4Options:
      return "bad_ipv4_options";
    case ParseError::kIpv4Fragment:
      return "ipv4_fragment";
    case ParseError::kBadIpv6PayloadLength:
      return "bad_ipv6_payload_length";
    case ParseError::kBadIpv6ExtHeader:
      return "bad_ipv6_ext_header";
    case ParseError::kIpv6Fragment:
      return "ipv6_fragment";
    case ParseError::kNotTcp:
      return "not_tcp";
    case ParseError::kTruncatedTcp:
      return "truncated_tcp";
    case ParseError::kBadTcpDataOffset:
      return "bad_tcp_data_offset";
    case ParseError::kBadTcpOptions:
      return "bad_tcp_options";
    case ParseError::kCount:
      break;
  }
  return "unknown";
}

ParseError parse_packet(std::span<const uint8_t> pkt, PacketView& out, bool cut) {
  const uint8_t* p = pkt.data();
  const size_t n = pkt.size();
  if (n == 0) return ParseError::kEmpty;
  size_t off = 0, limit = 0;
  ParseError e;
  switch (p[0] >> 4) {
    case 4:
      e = parse_ipv4(p, n, cut, out, off, limit);
      break;
    case 6:
      e = parse_ipv6(p, n, cut, out, off, limit);
      break;
    default:
      return ParseError::kBadIpVersion;
  }
  if (e != ParseError::kNone) return e;

  // TCP header within [off, limit), and (a cut packet) within the bytes we have.
  if (limit - off < kTcpMinHeader || n - off < kTcpMinHeader) return ParseError::kTruncatedTcp;
  const uint8_t* t = p + off;
  const size_t doff = size_t{t[12]} >> 4 << 2;
  if (doff < kTcpMinHeader || doff > limit - off) return ParseError::kBadTcpDataOffset;
  if (doff > n - off) return ParseError::kTruncatedTcp;
  out.opts = TcpOptions{};
  if (e = parse_tcp_options(t + kTcpMinHeader, doff - kTcpMinHeader, out.opts);
      e != ParseError::kNone) {
    return e;
  }
  out.ip_header_len = static_cast<uint16_t>(off);
  out.tcp_offset = static_cast<uint16_t>(off);
  out.tcp_header_len = static_cast<uint16_t>(doff);
  out.ip_total_len = static_cast<uint32_t>(limit);
  out.payload_len = static_cast<uint32_t>(limit - off - doff);
  out.sport = be16(t);
  out.dport = be16(t + 2);
  out.seq = be32(t + 4);
  out.ack = be32(t + 8);
  out.flags = t[13];
  out.window = be16(t + kTcpWindowAt);
  out.checksum = be16(t + kTcpChecksumAt);
  return ParseError::kNone;
}

uint16_t checksum_adjust(uint16_t checksum, uint16_t old_word, uint16_t new_word) {
  // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'); never yields -0 for a valid checksum.
  const uint32_t sum = uint32_t{static_cast<uint16_t>(~checksum)} +
                       uint32_t{static_cast<uint16_t>(~old_word)} + new_word;
  return static_cast<uint16_t>(~fold(sum));
}

// Precondition of the functions below: `view` came from parse_packet(pkt). They check it
// anyway rather than read or write out of bounds.
static bool view_fits(size_t pkt_size, const PacketView& view) {
  const size_t seg_len = size_t{view.tcp_header_len} + view.payload_len;
  return view.tcp_header_len >= kTcpMinHeader && view.tcp_offset <= pkt_size &&
         seg_len <= pkt_size - view.tcp_offset;
}

uint16_t tcp_checksum(std::span<const uint8_t> pkt, const PacketView& view) {
  if (!view_fits(pkt.size(), view)) return 0;
  const size_t seg_len = size_t{view.tcp_header_len} + view.payload_len;
  const uint8_t* t = pkt.data() + view.tcp_offset;
  // Segment with the checksum field (an even offset) skipped.
  const uint64_t host = sum_host_order(t, kTcpChecksumAt) +
                        sum_host_order(t + kTcpChecksumAt + 2, seg_len - kTcpChecksumAt - 2);
  uint32_t acc = to_be_words(fold(host));

  const size_t alen = view.ip_version == 4 ? 4 : 16;
  acc += sum_addr(view.src.bytes.data(), alen);
  const uint8_t* dst = view.dst.bytes.data();
  if (view.ip_version == 6 && view.pseudo_dst_offset != 0 &&
      size_t{view.pseudo_dst_offset} + 16 <= pkt.size()) {
    dst = pkt.data() + view.pseudo_dst_offset;
  }
  acc += sum_addr(dst, alen);
  acc += static_cast<uint32_t>(seg_len >> 16) + static_cast<uint32_t>(seg_len & 0xffff);
  acc += kProtoTcp;
  return static_cast<uint16_t>(~fold(acc));
}

void set_tcp_window(std::span<uint8_t> pkt, PacketView& view, uint16_t new_window,
                    ChecksumState state) {
  // The TCP header must be in `pkt`; the payload too when the whole checksum is computed (an
  // incremental update needs the header alone: a header-only copy replayed from a capture).
  const bool header_fits = view.tcp_header_len >= kTcpMinHeader && view.tcp_offset <= pkt.size() &&
                           view.tcp_header_len <= pkt.size() - view.tcp_offset;
  if (!header_fits) return;  // not a view of this packet
  if (state != ChecksumState::kComplete && !view_fits(pkt.size(), view)) return;
  uint8_t* t = pkt.data() + view.tcp_offset;
  const uint16_t old_window = be16(t + kTcpWindowAt);
  if (state == ChecksumState::kComplete) {
    if (old_window == new_window) return;  // nothing to change; keep the bytes identical
    put_be16(t + kTcpWindowAt, new_window);
    view.checksum = checksum_adjust(be16(t + kTcpChecksumAt), old_window, new_window);
  } else {
    // The field holds only a partial sum; the kernel will treat our mangled packet as
    // complete, so compute the whole checksum.
    put_be16(t + kTcpWindowAt, new_window);
    view.checksum = tcp_checksum(pkt, view);
  }
  put_be16(t + kTcpChecksumAt, view.checksum);
  view.window = new_window;
}

}  // namespace rsfc
