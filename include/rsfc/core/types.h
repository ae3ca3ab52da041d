// Small value types shared by the core: time, addresses, prefixes.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace rsfc {

// Monotonic time in nanoseconds since an arbitrary epoch. The core never reads a clock:
// the I/O shell (or a test, or the pcap replayer) passes `now` in.
using Nanos = int64_t;
constexpr Nanos kMicro = 1'000;
constexpr Nanos kMilli = 1'000'000;
constexpr Nanos kSecond = 1'000'000'000;

// An IPv4 or IPv6 address. IPv4 is stored in the first 4 bytes, the rest zero.
struct IpAddr {
  std::array<uint8_t, 16> bytes{};
  uint8_t family = 0;  // 4 or 6; 0 = unset

  static IpAddr v4(const uint8_t* p) {
    IpAddr a;
    a.family = 4;
    std::memcpy(a.bytes.data(), p, 4);
    return a;
  }
  static IpAddr v6(const uint8_t* p) {
    IpAddr a;
    a.family = 6;
    std::memcpy(a.bytes.data(), p, 16);
    return a;
  }
  // Parses "198.18.0.1" or "2001:2::1". Empty on error.
  static std::optional<IpAddr> parse(std::string_view text);
  std::string to_string() const;
  size_t size() const { return family == 4 ? 4 : 16; }
  friend bool operator==(const IpAddr&, const IpAddr&) = default;
};

// An address prefix such as 198.18.0.0/15 or 2001:2::/48.
struct Prefix {
  IpAddr addr;  // host bits cleared
  uint8_t length = 0;

  // Parses "a.b.c.d/len" or "v6::/len"; a bare address is a host prefix. Host bits set
  // after the length are an error (they usually mean a typo in the length).
  static std::optional<Prefix> parse(std::string_view text, std::string* error = nullptr);
  bool contains(const IpAddr& a) const;
  std::string to_string() const;
  friend bool operator==(const Prefix&, const Prefix&) = default;
};

// Sequence-space arithmetic (RFC 793 / RFC 1982): a is before b.
constexpr bool seq_lt(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) < 0;
}
constexpr bool seq_le(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) <= 0;
}
constexpr bool seq_gt(uint32_t a, uint32_t b) {
  return seq_lt(b, a);
}
constexpr bool seq_ge(uint32_t a, uint32_t b) {
  return seq_le(b, a);
}

// A deadline in four bytes, for per-flow state where eight do not fit (a million flows'
// regulators are budgeted to within a few bytes a flow of issue 17's 512 MiB). Time is kept in
// units of 2^20 ns (about 1.05 ms) and compared in serial arithmetic, as sequence numbers are:
// right for deadlines up to about 26 days ahead or behind. One passed longer ago than that
// reads as pending again (for up to as long): use it where pending is the cautious reading.
// Unset, it is never pending.
class CoarseDeadline {
 public:
  void set(Nanos at) { units_ = units(at) == 0 ? 1 : units(at); }
  bool pending(Nanos now) const { return units_ != 0 && seq_gt(units_, units(now)); }

 private:
  static uint32_t units(Nanos t) { return static_cast<uint32_t>(static_cast<uint64_t>(t) >> 20); }
  uint32_t units_ = 0;
};

}  // namespace rsfc
