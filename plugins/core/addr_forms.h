// Addresses written as text in a message (ProtoOcc::form): what a plugin
// that locates one accepts, and what the runtime and `amon audit` read
// back, one definition for all three.
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>

#include "protocol.h"

namespace amon {

// IPv4 as one decimal number: 1 to 10 digits, at most 4294967295 (leading
// zeros allowed: the runtime pads a shorter rewrite with them).
inline bool read_decimal_addr(const uint8_t* p, uint32_t len, uint8_t* out) {
  if (len == 0 || len > 10) return false;
  uint64_t v = 0;
  for (uint32_t i = 0; i < len; ++i) {
    if (p[i] < '0' || p[i] > '9') return false;
    v = v * 10 + (p[i] - '0');
  }
  if (v > 0xffffffffULL) return false;
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(v >> (24 - 8 * i));
  return true;
}

// IPv4 as a dotted quad: four decimal octets of 1 to 3 digits each, none
// above 255 (leading zeros allowed, as the runtime writes a shorter
// rewrite).
inline bool read_dotted_addr(const uint8_t* p, uint32_t len, uint8_t* out) {
  uint32_t i = 0;
  for (int k = 0; k < 4; ++k) {
    if (k && (i >= len || p[i++] != '.')) return false;
    unsigned v = 0, d = 0;
    while (i < len && d < 3 && p[i] >= '0' && p[i] <= '9') v = v * 10 + (p[i++] - '0'), ++d;
    if (d == 0 || v > 255) return false;
    out[k] = uint8_t(v);
  }
  return i == len;
}

// IPv6 text (inet_pton's forms: groups of up to four hex digits, "::",
// a dotted IPv4 tail); no zone.
inline bool read_ipv6_text(const uint8_t* p, uint32_t len, uint8_t* out) {
  if (len < 2 || len > 45) return false;
  char buf[46];
  std::memcpy(buf, p, len);
  buf[len] = 0;
  if (std::memchr(buf, 0, len)) return false;
  return inet_pton(AF_INET6, buf, out) == 1;
}

// The address `len` bytes at p hold in form f, as family (4 or 6) bytes.
inline bool read_addr_form(const uint8_t* p, uint32_t len, AddrForm f, uint8_t family, uint8_t* out) {
  switch (f) {
    case AddrForm::Binary:
      if (len != (family == 4 ? 4u : 16u)) return false;
      std::memcpy(out, p, len);
      return true;
    case AddrForm::Decimal: return family == 4 && read_decimal_addr(p, len, out);
    case AddrForm::Text: return family == 4 ? read_dotted_addr(p, len, out) : read_ipv6_text(p, len, out);
  }
  return false;
}

}  // namespace amon
