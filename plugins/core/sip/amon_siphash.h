// SipHash-2-4 (Aumasson & Bernstein), the one implementation amon uses for
// its keyed hashes: z-anonymity value fingerprints (128-bit output), user
// identifiers (KeyedHash::hash64) and the seeds of hidden names' masks.
//
// Hand-written rather than OpenSSL's EVP_MAC "SIPHASH": these run several
// times per packet on short inputs, where the EVP call sequence costs about
// ten times the hash. The tests check every user against OpenSSL's SIPHASH
// and the published vectors. x86-64 only (the build's target): words load
// little-endian as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace amon::sip {

struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const Hash128&, const Hash128&) = default;
};

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t load_le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The last word: the n & 7 bytes left at p, and the total length in the top byte.
inline uint64_t tail_word(const uint8_t* p, size_t total) {
  uint64_t b = uint64_t(total) << 56;
  for (size_t i = 0; i < (total & 7); ++i) b |= uint64_t(p[i]) << (8 * i);
  return b;
}

struct State {
  uint64_t v0, v1, v2, v3;
  // out128: the 128-bit variant (its initialisation differs in v1).
  State(uint64_t k0, uint64_t k1, bool out128 = false)
      : v0(0x736f6d6570736575ULL ^ k0),
        v1(0x646f72616e646f6dULL ^ k1 ^ (out128 ? 0xee : 0)),
        v2(0x6c7967656e657261ULL ^ k0),
        v3(0x7465646279746573ULL ^ k1) {}
  void round() {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  }
  void absorb(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  // After the last word (tail_word) was absorbed.
  uint64_t finish64() {
    v2 ^= 0xff;
    // Unrolled: on the short inputs here the loop's counter and branch are a
    // tenth of the finalisation.
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) round();
    return v0 ^ v1 ^ v2 ^ v3;
  }
  Hash128 finish128() {
    Hash128 out;
    v2 ^= 0xee;
    for (int i = 0; i < 4; ++i) round();
    out.lo = v0 ^ v1 ^ v2 ^ v3;
    v1 ^= 0xdd;
    for (int i = 0; i < 4; ++i) round();
    out.hi = v0 ^ v1 ^ v2 ^ v3;
    return out;
  }
};

// The reference SipHash-2-4 (64-bit output) of data[0..n) under key (k0, k1).
inline uint64_t hash64(uint64_t k0, uint64_t k1, const uint8_t* data, size_t n) {
  State s(k0, k1);
  const uint8_t* p = data;
  const uint8_t* end = data + (n & ~size_t{7});
  for (; p != end; p += 8) s.absorb(load_le64(p));
  s.absorb(tail_word(p, n));
  return s.finish64();
}

}  // namespace amon::sip
