// SipHash (J.-P. Aumasson, D. J. Bernstein, "SipHash: a fast short-input PRF", 2012): a
// keyed hash whose output nobody can predict, or make collide on purpose, without the
// 128-bit key. The flow and subscriber tables hash attacker-chosen addresses and ports with
// it under a per-worker random key, so that no one outside can aim keys at one bucket.
// SipHash-c-d: c rounds per 8-byte block, d rounds of finalisation; 1-3 is the variant hash
// tables use (Python, Rust's HashMap), 2-4 the original. Both match the reference vectors
// (test/siphash_test.cpp). Header-only: it runs once per packet.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>

namespace rsfc {

struct SipKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

namespace sip_detail {

struct State {
  uint64_t v0, v1, v2, v3;

  explicit State(const SipKey& k)
      : v0(k.k0 ^ 0x736f6d6570736575ull),  // "somepseudorandomlygeneratedbytes"
        v1(k.k1 ^ 0x646f72616e646f6dull),
        v2(k.k0 ^ 0x6c7967656e657261ull),
        v3(k.k1 ^ 0x7465646279746573ull) {}

  void round() {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  }

  template <int C>
  void compress(uint64_t m) {
    v3 ^= m;
    for (int i = 0; i < C; ++i) round();
    v0 ^= m;
  }
};

// Little-endian read of n <= 8 bytes (the message is defined over little-endian words).
inline uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace sip_detail

template <int C, int D>
inline uint64_t siphash(const SipKey& key, std::span<const uint8_t> msg) {
  sip_detail::State s(key);
  const uint8_t* p = msg.data();
  const size_t blocks = msg.size() / 8;
  for (size_t i = 0; i < blocks; ++i, p += 8) {
    uint64_t m;
    std::memcpy(&m, p, 8);
    if constexpr (std::endian::native == std::endian::big) m = sip_detail::load_le(p, 8);
    s.compress<C>(m);
  }
  // Last block: the remaining bytes, and the message length (mod 256) in the top byte.
  s.compress<C>(sip_detail::load_le(p, msg.size() % 8) | uint64_t{msg.size() & 0xff} << 56);
  s.v2 ^= 0xff;
  for (int i = 0; i < D; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

inline uint64_t siphash13(const SipKey& key, std::span<const uint8_t> msg) {
  return siphash<1, 3>(key, msg);
}
inline uint64_t siphash24(const SipKey& key, std::span<const uint8_t> msg) {
  return siphash<2, 4>(key, msg);
}

// The 128-bit key from a 64-bit seed (two splitmix64 outputs): equal seeds, equal keys.
inline SipKey sip_key_from_seed(uint64_t seed) {
  auto splitmix = [&seed] {
    uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t k0 = splitmix();
  return {k0, splitmix()};
}

}  // namespace rsfc
