// Network-order (big-endian) reads and writes of packet fields. Every parser
// and rewriter uses these, so one definition decides how a field is touched.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace amon {

inline uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

inline uint32_t rd32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

// One 2-byte store: the checksums read these fields back as part of wider
// words, and two byte stores under one load stall store forwarding.
inline void wr16(uint8_t* p, uint16_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap16(v);
  std::memcpy(p, &v, 2);
}

// p[i] ^= key[i] for n bytes: a value stored XOR-ed (ProtoOcc::coded), in
// clear and back.
inline void xor_with(uint8_t* p, const uint8_t* key, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) p[i] ^= key[i];
}

}  // namespace amon
