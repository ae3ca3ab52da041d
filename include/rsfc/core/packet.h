// Bounds-checked view of an IPv4/IPv6 + TCP packet and the one mutation rsfcd ever makes:
// lowering the TCP window, with a correct TCP checksum.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "rsfc/core/types.h"

namespace rsfc {

// Why a packet was not parsed as a TCP segment rsfcd may touch. Every such packet is
// passed unchanged and counted by this reason.
enum class ParseError : uint8_t {
  kNone = 0,
  kEmpty,                 // zero bytes
  kBadIpVersion,          // first nibble neither 4 nor 6
  kTruncatedIp,           // fewer bytes than the IP header (or its stated length) needs
  kBadIpv4HeaderLength,   // IHL < 5
  kBadIpv4TotalLength,    // total length < header length, or > bytes given
  kBadIpv4Options,        // option list malformed (bad length, runs past header)
  kIpv4Fragment,          // MF set or offset != 0
  kBadIpv6PayloadLength,  // payload length > bytes given (jumbograms unsupported)
  kBadIpv6ExtHeader,      // extension header runs past the packet
  kIpv6Fragment,          // fragment header present
  kNotTcp,                // transport protocol is not TCP (incl. ESP/AH/no-next-header)
  kTruncatedTcp,          // fewer than 20 bytes of TCP header
  kBadTcpDataOffset,      // data offset < 5 or beyond the IP payload
  kBadTcpOptions,         // an option with length < 2 or running past the header
  kCount                  // number of reasons (array size), not a reason
};
const char* to_string(ParseError e);

namespace tcpflag {
constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10, kUrg = 0x20,
                  kEce = 0x40, kCwr = 0x80;
}

struct TcpOptions {
  bool has_mss = false;
  uint16_t mss = 0;
  bool has_wscale = false;
  uint8_t wscale = 0;  // raw shift as sent (may exceed 14; users clamp)
  bool sack_permitted = false;
  uint8_t sack_blocks = 0;  // number of SACK blocks in this segment
  bool has_timestamps = false;
  uint32_t tsval = 0;
  uint32_t tsecr = 0;
  uint8_t unknown_options = 0;  // options of kinds we do not interpret (still valid)
  // The SACK blocks' edges as sent (left, right; the first sack_blocks of them).
  std::array<uint32_t, 4> sack_left{}, sack_right{};
};

// Bytes the sender of `o` says it holds above `ack` (RFC 2018 SACK blocks, RFC 6675's
// "sacked"): the sum of its blocks' parts above the cumulative ACK. A block at or below `ack`
// (a D-SACK, RFC 2883) counts nothing; a block with its right edge not after its left, or
// longer than a window can be (2^30 bytes), makes the whole option count nothing: a receiver
// never sends one. Blocks are disjoint by RFC 2018; overlapping ones are summed as they come
// (at most 4 x 2^30), and a user must bound the result by what the receiver offers.
uint64_t sacked_above(const TcpOptions& o, uint32_t ack);

// Offsets are from the first byte of the IP header (what NFQUEUE hands out).
struct PacketView {
  uint8_t ip_version = 0;  // 4 or 6
  IpAddr src, dst;
  uint16_t ip_header_len = 0;  // IPv4 header incl. options, or IPv6 header + ext headers
  uint16_t tcp_offset = 0;     // == ip_header_len
  uint16_t tcp_header_len = 0;
  uint32_t ip_total_len = 0;  // bytes of the packet as its IP header states (<= bytes given)
  uint32_t payload_len = 0;   // TCP payload bytes
  uint16_t sport = 0, dport = 0;
  uint32_t seq = 0, ack = 0;
  uint8_t flags = 0;
  uint16_t window = 0;  // raw 16-bit field, unscaled
  uint16_t checksum = 0;
  TcpOptions opts;
  // IPv6 only: offset of the final destination address inside a routing header (type 0/2:
  // last address, type 4: segment list[0]) while segments are left; the TCP pseudo-header
  // uses it (RFC 8200 8.1). 0 = use `dst` (no routing header, segments left 0, or a
  // routing type whose final destination we do not decode, such as RPL type 3).
  uint16_t pseudo_dst_offset = 0;

  bool syn() const { return flags & tcpflag::kSyn; }
  bool ack_flag() const { return flags & tcpflag::kAck; }
  bool fin() const { return flags & tcpflag::kFin; }
  bool rst() const { return flags & tcpflag::kRst; }
};

// Parses `pkt` (starting at the IP header). Never reads outside `pkt`. On success fills
// `out` and returns kNone; otherwise `out` is unspecified. `cut`: `pkt` may be the first
// bytes of a longer packet (a snap length, NFQA_CAP_LEN): lengths then come from the IP
// header (out.ip_total_len and out.payload_len may reach beyond `pkt`) as long as the IP and
// TCP headers with their options are all there (else kTruncatedIp / kTruncatedTcp). Such a
// view must never be written to or checksummed: the segment is not all there.
ParseError parse_packet(std::span<const uint8_t> pkt, PacketView& out, bool cut = false);

// RFC 1624 eqn. 3: the checksum after one 16-bit word changes from `old_word` to `new_word`.
uint16_t checksum_adjust(uint16_t checksum, uint16_t old_word, uint16_t new_word);

// Full TCP checksum (pseudo-header + TCP header + payload) of a parsed packet, computed
// with the checksum field taken as zero. Covers `view.tcp_header_len + view.payload_len`
// bytes from `view.tcp_offset`.
uint16_t tcp_checksum(std::span<const uint8_t> pkt, const PacketView& view);

// How the kernel handed the packet to us.
enum class ChecksumState : uint8_t {
  kComplete,  // the TCP checksum field is a full, valid (or deliberately invalid) checksum
  kNotReady,  // NFQA_SKB_CSUMNOTREADY: the field holds only a partial (pseudo-header) sum
};

// Writes `new_window` into the TCP header and fixes the checksum: incremental (RFC 1624)
// when the checksum was complete (an invalid checksum stays exactly as invalid), a full
// computation when the kernel flagged it not ready (the kernel treats a mangled packet as
// fully checksummed). Updates view.window and view.checksum. `pkt` must hold the TCP header,
// and the payload too for the full computation; otherwise nothing is written.
void set_tcp_window(std::span<uint8_t> pkt, PacketView& view, uint16_t new_window,
                    ChecksumState state);

}  // namespace rsfc
