// SipHash-2-4 with 128-bit output (Aumasson & Bernstein), used for value
// fingerprints and table placement.
//
// Why a keyed PRF and not rte_jhash/CRC: (1) a value longer than the inline
// limit is identified by its 128-bit fingerprint alone, and two values sharing
// a fingerprint would pool their users -- that could release a z-private value,
// so the fingerprint must resist chosen inputs; with a secret key an observer
// of the traffic cannot aim for a collision. (2) placement that an attacker can
// predict lets crafted names flood one bucket pair and evict (hide) popular
// values. The 2-4 rounds (not 1-3) because (1) is an integrity property.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace amon::zanon {

struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const Hash128&, const Hash128&) = default;
};

namespace detail {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // x86-64 only (the build targets it): little-endian already
}

struct SipState {
  uint64_t v0, v1, v2, v3;
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
};

}  // namespace detail

// SipHash-2-4-128 of (prefix as 8 little-endian bytes) || data[0..n).
// Equal to the reference SipHash-2-4 with 16-byte output over that
// concatenation (the unit test checks it against OpenSSL's SIPHASH).
inline Hash128 siphash128(const uint8_t key[16], uint64_t prefix, const uint8_t* data, size_t n) {
  using namespace detail;
  const uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
  SipState s{0x736f6d6570736575ULL ^ k0, 0x646f72616e646f6dULL ^ k1 ^ 0xee,
             0x6c7967656e657261ULL ^ k0, 0x7465646279746573ULL ^ k1};
  s.absorb(prefix);
  const uint8_t* p = data;
  const uint8_t* end = data + (n & ~size_t{7});
  for (; p != end; p += 8) s.absorb(load_le64(p));
  uint64_t b = uint64_t(n + 8) << 56;
  switch (n & 7) {
    case 7: b |= uint64_t(p[6]) << 48; [[fallthrough]];
    case 6: b |= uint64_t(p[5]) << 40; [[fallthrough]];
    case 5: b |= uint64_t(p[4]) << 32; [[fallthrough]];
    case 4: b |= uint64_t(p[3]) << 24; [[fallthrough]];
    case 3: b |= uint64_t(p[2]) << 16; [[fallthrough]];
    case 2: b |= uint64_t(p[1]) << 8; [[fallthrough]];
    case 1: b |= uint64_t(p[0]); break;
    case 0: break;
  }
  s.absorb(b);
  s.v2 ^= 0xee;
  for (int i = 0; i < 4; ++i) s.round();
  Hash128 out;
  out.lo = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
  s.v1 ^= 0xdd;
  for (int i = 0; i < 4; ++i) s.round();
  out.hi = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
  return out;
}

}  // namespace amon::zanon
