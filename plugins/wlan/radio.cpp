// The capture headers before an 802.11 frame (radiotap, PPI), reduced to
// what a monitor needs. Kept by name, never by exclusion: a field this file
// does not know (vendor namespaces, extended presence words, fields added
// to radiotap later, PPI's GPS and vendor fields) may name a device or a
// place, and is left out.
#include <algorithm>
#include <cstring>

#include "amon_wlan.hpp"

namespace amon::wlan {

namespace {

uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }
void put16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v), p[1] = uint8_t(v >> 8); }
void put32(uint8_t* p, uint32_t v) { put16(p, uint16_t(v)), put16(p + 2, uint16_t(v >> 16)); }

// Radiotap's defined fields 0-22 of the first presence word: size and
// alignment (radiotap.org). Fields 23 and up are not needed: everything
// kept comes before them.
struct RtField {
  uint8_t size, align;
};
constexpr RtField kRt[23] = {{8, 8}, {1, 1}, {1, 1}, {4, 2}, {2, 2},  {1, 1}, {1, 1}, {2, 2},
                             {2, 2}, {2, 2}, {1, 1}, {1, 1}, {1, 1},  {1, 1}, {2, 2}, {2, 2},
                             {1, 1}, {1, 1}, {8, 4}, {3, 1}, {8, 4}, {12, 2}, {12, 8}};
constexpr int kRtFlags = 1, kRtVht = 21;
// Flags, rate, channel, dBm antenna signal and noise, MCS, VHT.
constexpr uint32_t kRtKeep = 1u << 1 | 1u << 2 | 1u << 3 | 1u << 5 | 1u << 6 | 1u << 19 | 1u << 21;
constexpr uint8_t kRtFlagFcs = 0x10;

// The frame after a capture header of `hl` bytes: copied to out + at,
// without its FCS; returns the bytes written and sets out_wire.
uint32_t frame_after(const uint8_t* in, uint32_t cap, uint32_t wire, uint32_t hl, bool fcs, uint8_t* out,
                     uint32_t at, uint32_t& out_wire) {
  uint32_t body_wire = wire > hl ? wire - hl : 0;
  if (fcs) body_wire = body_wire >= 4 ? body_wire - 4 : 0;
  const uint32_t n = std::min(cap > hl ? cap - hl : 0, body_wire);
  std::memcpy(out + at, in + hl, n);
  out_wire = at + body_wire;
  return at + n;
}

uint32_t radiotap(const uint8_t* in, uint32_t cap, uint32_t wire, uint8_t* out, uint32_t& out_wire) {
  // The empty header: version 0, length 8, nothing present.
  std::memset(out, 0, 8);
  out[2] = 8;
  out_wire = 8;
  if (cap < 8 || in[0] != 0) return 8;
  const uint32_t len = le16(in + 2);
  if (len < 8 || len > cap) return 8;  // the frame's start is unknown: nothing of it
  // Presence words: the first, then as many as bit 31 chains.
  uint32_t o = 4;
  const uint32_t first = le32(in + 4);
  for (uint32_t w = first; w & 0x80000000u;) {
    o += 4;
    if (o + 4 > len) return frame_after(in, cap, wire, len, false, out, 8, out_wire);
    w = le32(in + o);
  }
  o += 4;
  // The first word's fields, in bit order, each at its alignment from the
  // header's start. One that does not fit ends the walk: what follows is unread.
  uint32_t at[23] = {};
  uint32_t found = 0;
  for (int b = 0; b < 23; ++b) {
    if (!(first >> b & 1)) continue;
    const RtField f = kRt[b];
    o = (o + f.align - 1) & ~uint32_t(f.align - 1);
    if (o + f.size > len) break;
    at[b] = o;
    found |= 1u << b;
    o += f.size;
  }
  const uint32_t keep = found & kRtKeep;
  bool fcs = false;
  uint32_t w = 8;
  for (int b = 0; b < 23; ++b) {
    if (!(keep >> b & 1)) continue;
    const RtField f = kRt[b];
    while (w & (f.align - 1)) out[w++] = 0;
    std::memcpy(out + w, in + at[b], f.size);
    if (b == kRtFlags) {
      fcs = out[w] & kRtFlagFcs;
      out[w] &= uint8_t(~kRtFlagFcs);
    }
    if (b == kRtVht) std::memset(out + w + 10, 0, 3);  // group id, partial AID (from the AID and BSSID)
    w += f.size;
  }
  put16(out + 2, uint16_t(w));
  put32(out + 4, keep);
  return frame_after(in, cap, wire, len, fcs, out, w, out_wire);
}

// PPI: version(1) flags(1) length(2, LE) link type(4, LE), then fields of
// type(2) length(2) data. Kept: the 802.11 common field (type 2, 20 bytes).
uint32_t ppi(const uint8_t* in, uint32_t cap, uint32_t wire, uint8_t* out, uint32_t& out_wire) {
  std::memset(out, 0, 8);
  out[2] = 8;
  put32(out + 4, kDltIeee80211);
  out_wire = 8;
  if (cap < 8 || in[0] != 0) return 8;
  const uint32_t len = le16(in + 2);
  if (len < 8 || len > cap) return 8;
  // Another link type inside is not read: its frame is not kept.
  if (le32(in + 4) != uint32_t(kDltIeee80211)) return 8;
  bool fcs = false;
  uint32_t w = 8;
  for (uint32_t o = 8; o + 4 <= len;) {
    const uint32_t type = le16(in + o), n = le16(in + o + 2);
    if (o + 4 + n > len) break;
    if (type == 2 && n == 20 && w == 8) {
      std::memcpy(out + w, in + o, 24);
      std::memset(out + w + 4, 0, 8);  // TSF: the radio's clock
      const uint16_t flags = le16(out + w + 12);
      fcs = flags & 1;
      put16(out + w + 12, uint16_t(flags & ~1u));
      w += 24;
    }
    o += 4 + n;
  }
  put16(out + 2, uint16_t(w));
  return frame_after(in, cap, wire, len, fcs, out, w, out_wire);
}

}  // namespace

uint32_t normalize(int dlt, const uint8_t* in, uint32_t cap, uint32_t wire, uint8_t* out, uint32_t& out_wire) {
  if (wire < cap) wire = cap;
  if (dlt == kDltRadiotap) return radiotap(in, cap, wire, out, out_wire);
  if (dlt == kDltPpi) return ppi(in, cap, wire, out, out_wire);
  return frame_after(in, cap, wire, 0, false, out, 0, out_wire);
}

}  // namespace amon::wlan
