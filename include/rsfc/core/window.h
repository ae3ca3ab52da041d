// The rewrite rules every policy obeys (docs/DESIGN.md §5), as one pure function:
// only lower; never below the floor; never pull back a right edge already advertised;
// encode through the ACK sender's window scale, rounding up.
#pragma once

#include <cstdint>

namespace rsfc {

constexpr uint8_t kMaxWindowScale = 14;  // RFC 7323 §2.3: a larger shift counts as 14

constexpr uint8_t effective_scale(uint8_t announced) {
  return announced > kMaxWindowScale ? kMaxWindowScale : announced;
}

// Bytes a raw 16-bit window field means under `scale`.
constexpr uint64_t window_bytes(uint16_t raw, uint8_t scale) {
  return static_cast<uint64_t>(raw) << scale;
}

// The largest window TCP can advertise: 65535 << 14.
constexpr uint64_t kMaxWindowBytes = window_bytes(0xffff, kMaxWindowScale);
// The smallest window floor (min_window_bytes) and static window that make sense: two
// segments of the smallest default MSS (RFC 1122: 536).
constexpr uint64_t kMinWindowFloor = 2 * 536;

// Smallest raw window whose bytes are >= `bytes` (saturates at 65535).
constexpr uint16_t encode_window_round_up(uint64_t bytes, uint8_t scale) {
  const uint64_t unit = uint64_t{1} << scale;
  const uint64_t raw = (bytes + unit - 1) >> scale;
  return raw > 0xffff ? uint16_t{0xffff} : static_cast<uint16_t>(raw);
}

struct ClampRequest {
  uint16_t raw_window = 0;        // as the ACK's sender wrote it
  uint8_t scale = 0;              // the ACK sender's effective shift
  uint32_t ack = 0;               // the ACK number (left edge)
  bool edge_valid = false;        // a right edge was already advertised to the receiver
  uint32_t edge = 0;              // highest ack + window already advertised to the receiver
  uint64_t target_bytes = 0;      // what the policy wants
  uint32_t min_window_bytes = 0;  // floor
};

enum class ClampLimit : uint8_t {
  kNone,       // target >= original: unchanged
  kTarget,     // lowered to the target (rounded up to the scale)
  kFloor,      // lowered, but held at min_window_bytes
  kRightEdge,  // lowered, but held so the advertised right edge does not move back
};

struct ClampResult {
  uint16_t raw_window = 0;  // what to write (== request.raw_window when unchanged)
  ClampLimit limit = ClampLimit::kNone;
  bool changed() const { return limit != ClampLimit::kNone; }
};

ClampResult clamp_window(const ClampRequest& r);

// The right edge an ACK advertises: ack + window << scale (mod 2^32).
constexpr uint32_t right_edge(uint32_t ack, uint16_t raw, uint8_t scale) {
  return ack + static_cast<uint32_t>(window_bytes(raw, scale));
}

}  // namespace rsfc
