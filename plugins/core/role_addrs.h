// Addresses of the network a parser finds in a message (ProtoOcc::role),
// for the plugins whose messages carry addresses and little else (SCTP,
// OSPF, PIM, LISP): where each lies, turned into occurrences.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "protocol.h"

namespace amon {

struct AddrSpan {
  uint32_t off;
  uint8_t family;  // 4 or 6
  uint8_t len;     // below the family's length: a prefix stored in its first bytes
};

struct AddrSpans {
  // More than a jumbo frame's worth of 4-byte addresses is no message.
  static constexpr unsigned kMax = 2048;
  unsigned n = 0;
  bool full = false;  // an address was left out: the parse must fail
  AddrSpan a[kMax];
  void clear() { n = 0, full = false; }
  void add(uint32_t off, uint8_t family, uint8_t len = 0) {
    if (n == kMax) full = true;
    else a[n++] = {off, family, len ? len : uint8_t(family == 4 ? 4 : 16)};
  }
};

// What the runtime needs of a parse's spans (the fuzz targets check it):
// each inside the `len` bytes, no longer than its family's address, and no
// two overlapping (their rules apply in any order).
inline bool spans_sound(const AddrSpans& s, uint32_t len) {
  for (unsigned i = 0; i < s.n; ++i) {
    const AddrSpan& a = s.a[i];
    if ((a.family != 4 && a.family != 6) || !a.len || a.len > (a.family == 4 ? 4 : 16)) return false;
    if (uint64_t(a.off) + a.len > len) return false;
    for (unsigned j = 0; j < i; ++j)
      if (a.off < s.a[j].off + s.a[j].len && s.a[j].off < a.off + a.len) return false;
  }
  return true;
}

// A prefix's `len` bytes at `a` keep their first `bits` bits; the rest are
// zeroed (a rewritten prefix must not carry bits past its length).
inline void zero_past_prefix(uint8_t* a, uint32_t len, unsigned bits) {
  for (uint32_t i = 0; i < len; ++i) {
    const unsigned keep = bits > i * 8 ? std::min(bits - i * 8, 8u) : 0u;
    a[i] &= uint8_t(0xff00 >> keep);
  }
}

// Each span as a role occurrence. An address all zero, as sent where none
// is known, names nobody and is left out. `prefix_fixup`: a prefix (a span
// shorter than its family's length) comes back to the plugin's after_action;
// `bits` (per span, its prefix length in bits): only a prefix whose length
// leaves bits of its last byte does.
// Malformed when the table is full (a value left out would leave in clear).
inline ProtoStatus role_occurrences(const AddrSpans& s, const uint8_t* p, ProtoOccs& out, bool prefix_fixup = false,
                                    const uint8_t* bits = nullptr) {
  if (s.full) return ProtoStatus::Malformed;
  for (unsigned i = 0; i < s.n; ++i) {
    const AddrSpan& a = s.a[i];
    bool zero = true;
    for (uint32_t k = 0; k < a.len && zero; ++k) zero = p[a.off + k] == 0;
    if (zero) continue;
    ProtoOcc o;
    o.role = true;
    o.kind = a.family == 4 ? OccKind::Addr4 : OccKind::Addr6;
    o.off = a.off, o.len = a.len;
    o.index = uint16_t(i);
    o.fixup = bits ? bits[i] % 8 != 0 : prefix_fixup && a.len < (a.family == 4 ? 4u : 16u);
    if (!out.add(o)) return ProtoStatus::Malformed;
  }
  return ProtoStatus::Parsed;
}

}  // namespace amon
