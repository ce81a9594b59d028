// BGP-4's messages (RFC 4271): byte spans only, every read bounds-checked.
// Whatever is not known to hold only numbers or the addresses located here
// makes the message Malformed, so that the runtime fails closed on it.
#include <cstring>

#include "amon_bgp.hpp"
#include "bytes.h"

namespace amon::bgp_plugin {

namespace {

constexpr uint32_t kHdr = 19;

enum Type : uint8_t { kOpen = 1, kUpdate = 2, kNotification = 3, kKeepalive = 4, kRouteRefresh = 5 };

// A list of prefixes (RFC 4271 4.3; RFC 4760 5) of `family` from `off` to
// `end`, each after a 4-byte path identifier when `ids` (RFC 7911 3):
// whether it fills its bytes exactly. Each prefix's bytes become a span of
// `s` (when given), its length in bits noted in `bits`.
bool prefixes(const uint8_t* p, uint32_t off, uint32_t end, uint8_t family, bool ids, Parsed* s) {
  const unsigned max = family == 4 ? 32 : 128;
  while (off < end) {
    if (ids) {
      if (end - off < 4) return false;
      off += 4;
    }
    if (off >= end) return false;
    const unsigned bits = p[off++];
    if (bits > max) return false;
    const uint32_t n = (bits + 7) / 8;
    if (end - off < n) return false;
    if (s && n) {
      if (s->addrs.n < AddrSpans::kMax) s->bits[s->addrs.n] = uint8_t(bits);
      s->addrs.add(off, family, uint8_t(n));
    }
    off += n;
  }
  return true;
}

void addr(Parsed& r, uint32_t off, uint8_t family) {
  if (r.addrs.n < AddrSpans::kMax) r.bits[r.addrs.n] = 0;
  r.addrs.add(off, family);
}

// The prefix lists of one UPDATE, parsed once the path identifiers of each
// family are settled.
struct Lists {
  static constexpr unsigned kMax = 8;
  struct List {
    int fam;
    uint8_t family;
    uint32_t off, end;
  } l[kMax];
  unsigned n = 0;
  bool add(int fam, uint8_t family, uint32_t off, uint32_t end) {
    if (off == end) return true;  // empty: no identifiers to tell
    if (n == kMax) return false;
    l[n++] = {fam, family, off, end};
    return true;
  }
};

bool lists_parse(const uint8_t* p, const Lists& L, uint8_t modes, Parsed* s) {
  for (unsigned i = 0; i < L.n; ++i)
    if (!prefixes(p, L.l[i].off, L.l[i].end, L.l[i].family, path_ids(modes, L.l[i].fam) == PathIds::With, s))
      return false;
  return true;
}

// A next hop of MP_REACH_NLRI (RFC 4760 3; RFC 2545 3: an IPv6 global
// address and, with 32 bytes, a link-local one; RFC 8950: IPv6 next hops
// of IPv4 routes).
bool next_hop(Parsed& r, uint16_t afi, uint32_t off, uint8_t len) {
  if (len == 4 && afi == 1) return addr(r, off, 4), true;
  if (len != 16 && len != 32) return false;
  addr(r, off, 6);
  if (len == 32) addr(r, off + 16, 6);
  return true;
}

// Extended communities (RFC 4360): the IPv4-address-specific types (RFC
// 4360 3.2: transitive 0x01, non-transitive 0x41) hold an address as their
// global administrator; the AS-specific (0x00, 0x40, 0x02, 0x42) and opaque
// (0x03, 0x43) types numbers only. Any other type may hold anything.
bool ext_communities(Parsed& r, const uint8_t* p, uint32_t off, uint32_t len) {
  if (len % 8) return false;
  for (uint32_t k = off; k < off + len; k += 8) switch (p[k]) {
      case 0x00: case 0x40: case 0x02: case 0x42: case 0x03: case 0x43: break;
      case 0x01: case 0x41: addr(r, k + 2, 4); break;
      default: return false;
    }
  return true;
}

// The path attributes of an UPDATE (RFC 4271 4.3, 5) from `off` to `end`.
bool attributes(Parsed& r, const uint8_t* p, uint32_t off, uint32_t end, Lists& L) {
  while (off < end) {
    if (end - off < 3) return false;
    const uint8_t flags = p[off], type = p[off + 1];
    uint32_t len, v;
    if (flags & 0x10) {  // extended length
      if (end - off < 4) return false;
      len = rd16(p + off + 2), v = off + 4;
    } else {
      len = p[off + 2], v = off + 3;
    }
    if (end - v < len) return false;
    switch (type) {
      case 1: if (len != 1) return false; break;                        // ORIGIN
      case 2: case 17: break;                                           // AS_PATH, AS4_PATH: AS numbers
      case 3: if (len != 4) return false; addr(r, v, 4); break;         // NEXT_HOP
      case 4: case 5: if (len != 4) return false; break;                // MULTI_EXIT_DISC, LOCAL_PREF
      case 6: if (len != 0) return false; break;                        // ATOMIC_AGGREGATE
      case 7:                                                           // AGGREGATOR: a 2- or 4-byte AS, the address
        if (len != 6 && len != 8) return false;
        addr(r, v + len - 4, 4);
        break;
      case 8: if (len % 4) return false; break;                         // COMMUNITIES
      case 9: if (len != 4) return false; addr(r, v, 4); break;         // ORIGINATOR_ID (RFC 4456)
      case 10:                                                          // CLUSTER_LIST (RFC 4456)
        if (len % 4) return false;
        for (uint32_t k = 0; k < len; k += 4) addr(r, v + k, 4);
        break;
      case 14: {  // MP_REACH_NLRI (RFC 4760 3)
        if (len < 5) return false;
        const uint16_t afi = rd16(p + v);
        const int fam = family_index(afi, p[v + 2]);
        const uint8_t nhl = p[v + 3];
        // The byte after the next hop was RFC 2858's count of SNPAs
        // (addresses of other kinds): reserved since, accepted as zero only.
        if (fam < 0 || len < 5u + nhl || p[v + 4 + nhl] != 0 || !next_hop(r, afi, v + 4, nhl)) return false;
        if (!L.add(fam, afi == 1 ? 4 : 6, v + 5 + nhl, v + len)) return false;
        break;
      }
      case 15: {  // MP_UNREACH_NLRI (RFC 4760 4)
        if (len < 3) return false;
        if (len == 3) break;  // no routes: a family's End-of-RIB (RFC 4724 2), whatever the family
        const uint16_t afi = rd16(p + v);
        const int fam = family_index(afi, p[v + 2]);
        if (fam < 0 || !L.add(fam, afi == 1 ? 4 : 6, v + 3, v + len)) return false;
        break;
      }
      case 16: if (!ext_communities(r, p, v, len)) return false; break;  // EXTENDED COMMUNITIES
      case 18: if (len != 8) return false; addr(r, v + 4, 4); break;    // AS4_AGGREGATOR (RFC 6793)
      case 26:  // AIGP (RFC 7311): TLVs; the one defined, the 8-byte metric
        for (uint32_t t = v; t < v + len;) {
          if (v + len - t < 3 || p[t] != 1 || rd16(p + t + 1) != 11 || v + len - t < 11) return false;
          t += 11;
        }
        break;
      case 32: if (len % 12) return false; break;                       // LARGE_COMMUNITY (RFC 8092)
      case 35: if (len != 4) return false; break;                       // OTC (RFC 9234): an AS number
      default: return false;
    }
    off = v + len;
  }
  return true;
}

// An UPDATE's body from `b` to `e`. Each family whose path identifiers are
// unknown is settled here: exactly one choice for them all must parse.
bool update(Parsed& r, const uint8_t* p, uint32_t b, uint32_t e, uint8_t& modes) {
  if (e - b < 4) return false;
  const uint32_t wl = rd16(p + b);
  if (e - b - 2 < wl + 2) return false;
  const uint32_t al = rd16(p + b + 2 + wl);
  const uint32_t a = b + 4 + wl;
  if (e - a < al) return false;
  Lists L;
  if (!L.add(0, 4, b + 2, b + 2 + wl) || !attributes(r, p, a, a + al, L) || !L.add(0, 4, a + al, e)) return false;
  uint8_t unknown = 0;
  for (unsigned i = 0; i < L.n; ++i)
    if (path_ids(modes, L.l[i].fam) == PathIds::Unknown) unknown |= uint8_t(1u << L.l[i].fam);
  uint8_t chosen = modes;
  unsigned fits = 0;
  for (unsigned pick = 0; pick < 16; ++pick) {
    if (pick & ~unknown) continue;
    uint8_t m = modes;
    for (int f = 0; f < 4; ++f)
      if (unknown >> f & 1) set_path_ids(m, f, pick >> f & 1 ? PathIds::With : PathIds::Without);
    if (lists_parse(p, L, m, nullptr)) ++fits, chosen = m;
  }
  if (fits != 1) return false;  // none, or more than one reading
  modes = chosen;
  return lists_parse(p, L, modes, &r);
}

// The capabilities of an OPEN's parameter (RFC 5492) from `off` to `end`:
// those known to hold numbers only; ADD-PATH's noted.
bool capabilities(Parsed& r, const uint8_t* p, uint32_t off, uint32_t end) {
  while (off < end) {
    if (end - off < 2) return false;
    const uint8_t code = p[off], len = p[off + 1];
    const uint32_t v = off + 2;
    if (end - v < len) return false;
    switch (code) {
      case 1: case 65: if (len != 4) return false; break;                  // multiprotocol, 4-byte AS
      case 2: case 6: case 70: case 128: if (len) return false; break;     // route refresh, extended message, enhanced route refresh, Cisco's route refresh
      case 3:                                                              // ORF (RFC 5291): families, ORF types
        for (uint32_t k = v; k < v + len;) {
          if (v + len - k < 5) return false;
          k += 5 + 2u * p[k + 4];
          if (k > v + len) return false;
        }
        break;
      case 5: if (len % 6) return false; break;                            // extended next hop (RFC 8950)
      case 7: if (len != 3) return false; break;                           // BGPsec (RFC 8205)
      case 8: case 69: if (len % 4) return false;                          // multiple labels (RFC 8277), ADD-PATH (RFC 7911)
        if (code == 69)
          for (uint32_t k = v; k < v + len; k += 4) {
            const int fam = family_index(rd16(p + k), p[k + 2]);
            if (fam >= 0) r.addpath |= uint8_t((p[k + 3] & 3) << (2 * fam));
          }
        break;
      case 9: if (len != 1) return false; break;                           // role (RFC 9234)
      case 64: if (len < 2 || (len - 2) % 4) return false; break;          // graceful restart (RFC 4724)
      case 71: if (len % 7) return false; break;                           // long-lived graceful restart (RFC 9494)
      default: return false;
    }
    off = v + len;
  }
  return true;
}

// An OPEN's body from `b` to `e` (RFC 4271 4.2; RFC 9072: extended
// optional parameters' length).
bool open(Parsed& r, const uint8_t* p, uint32_t b, uint32_t e) {
  if (e - b < 10 || p[b] != 4) return false;
  addr(r, b + 5, 4);  // BGP identifier
  uint32_t off = b + 10, plen = p[b + 9];
  bool ext = false;
  if (plen == 255 && e - off >= 3 && p[off] == 255) ext = true, plen = rd16(p + off + 1), off += 3;
  if (e - off != plen) return false;
  r.open = true;
  r.addpath = 0;
  while (off < e) {
    const uint32_t h = ext ? 3 : 2;
    if (e - off < h) return false;
    const uint8_t type = p[off];
    const uint32_t len = ext ? rd16(p + off + 1) : p[off + 1];
    if (e - off - h < len) return false;
    if (type != 2 || !capabilities(r, p, off + h, off + h + len)) return false;  // only capabilities are known
    off += h + len;
  }
  return true;
}

bool marker(const uint8_t* p) {
  for (int i = 0; i < 16; ++i)
    if (p[i] != 0xff) return false;
  return true;
}

}  // namespace

uint8_t negotiated(uint8_t sender_caps, uint8_t receiver_caps) {
  uint8_t m = 0;
  for (int f = 0; f < 4; ++f) {
    const bool sends = sender_caps >> (2 * f + 1) & 1, receives = receiver_caps >> (2 * f) & 1;
    set_path_ids(m, f, sends && receives ? PathIds::With : PathIds::Without);
  }
  return m;
}

bool message_start(const uint8_t* p, uint32_t len) {
  return len >= kHdr && marker(p) && rd16(p + 16) >= kHdr && p[18] >= kOpen && p[18] <= kRouteRefresh;
}

Result parse(const uint8_t* p, uint32_t len, uint8_t& modes, Parsed& r) {
  r.addrs.clear();
  r.end = r.need = 0;
  r.open = false;
  r.addpath = 0;
  if (!len) return Result::Malformed;
  uint32_t off = 0;
  while (off < len) {
    const uint32_t left = len - off;
    // A header cut at the end: what there is of it must look like one.
    if (left < kHdr) {
      for (uint32_t i = 0; i < left && i < 16; ++i)
        if (p[off + i] != 0xff) return Result::Malformed;
      if (left > 17 && rd16(p + off + 16) < kHdr) return Result::Malformed;
      r.end = off;
      return Result::Cut;
    }
    const uint32_t mlen = rd16(p + off + 16);
    const uint8_t type = p[off + 18];
    if (!marker(p + off) || mlen < kHdr || type < kOpen || type > kRouteRefresh) return Result::Malformed;
    if (mlen > left) {
      r.end = off, r.need = mlen - left;
      return Result::Cut;
    }
    const uint32_t b = off + kHdr, e = off + mlen;
    bool ok = false;
    switch (type) {
      case kOpen: ok = open(r, p, b, e); break;
      case kUpdate: ok = update(r, p, b, e, modes); break;
      // Its data may quote the attribute or message it complains of
      // (RFC 4271 6), or carry an operator's text (RFC 9003): known to
      // hold nothing only when there is none.
      case kNotification: ok = mlen == kHdr + 2; break;
      case kKeepalive: ok = mlen == kHdr; break;
      // RFC 2918; longer, it carries outbound route filters (RFC 5291:
      // prefixes among them).
      case kRouteRefresh: ok = mlen == kHdr + 4; break;
    }
    if (!ok || r.addrs.full) return Result::Malformed;
    off = e;
  }
  return Result::Ok;
}

}  // namespace amon::bgp_plugin
