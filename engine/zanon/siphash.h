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

#include "amon_siphash.h"

namespace amon::zanon {

using Hash128 = sip::Hash128;

// SipHash-2-4-128 of (prefix as 8 little-endian bytes) || data[0..n).
// Equal to the reference SipHash-2-4 with 16-byte output over that
// concatenation (the unit test checks it against OpenSSL's SIPHASH).
inline Hash128 siphash128(const uint8_t key[16], uint64_t prefix, const uint8_t* data, size_t n) {
  sip::State s(sip::load_le64(key), sip::load_le64(key + 8), true);
  s.absorb(prefix);
  const uint8_t* p = data;
  const uint8_t* end = data + (n & ~size_t{7});
  for (; p != end; p += 8) s.absorb(sip::load_le64(p));
  s.absorb(sip::tail_word(p, n + 8));  // the length counts the prefix
  return s.finish128();
}

}  // namespace amon::zanon
