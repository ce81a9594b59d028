#include "amon_ospf.hpp"

#include "bytes.h"

namespace amon::ospf_plugin {

namespace {

// Opaque LSA kinds: OSPFv2's opaque types (RFC 5250), and OSPFv3's
// function codes mapped past them.
enum : uint8_t { kTe = 1, kGrace = 3, kRouterInfo = 4, kExtPrefix = 7, kExtLink = 8, kTeV3 = 0x80 };

struct Walk {
  const uint8_t* p;
  Parsed& r;
  bool v3;
  void a4(uint32_t off) { r.addrs.add(off, 4); }
  // An OSPFv3 address prefix at `o` (length, options, 16 bits, then the
  // prefix in whole 32-bit words); its end, 0 when it runs past `end`.
  uint32_t prefix(uint32_t o, uint32_t end) {
    if (end - o < 4 || p[o] > 128) return 0;
    const uint32_t n = (p[o] + 31u) / 32u * 4u;
    if (end - o - 4 < n) return 0;
    if (n) r.addrs.add(o + 4, 6, uint8_t(n));
    return o + 4 + n;
  }
  // An LSA header at `o`: the advertising router, and OSPFv2's link state
  // ID (a router ID, an interface address, a network: an address in every
  // type but the opaque ones, where it is an opaque type and a number).
  // OSPFv3's link state ID is a number.
  void header(uint32_t o) {
    if (!v3 && !opaque_v2(p[o + 3])) a4(o + 4);
    a4(o + 8);
  }
  static bool opaque_v2(uint8_t type) { return type >= 9 && type <= 11; }
  bool lsa_v2(uint32_t o, uint32_t end);
  bool lsa_v3(uint32_t o, uint32_t end);
  bool opaque(uint8_t type, uint32_t k, uint32_t end);
  bool te_link(uint32_t k, uint32_t end);
  bool e_tlvs(uint32_t k, uint32_t end);
  bool e_sub(uint32_t k, uint32_t end);
  bool lsa(uint32_t o, uint32_t end) {
    header(o);
    if (lsa_checksum(p + o, end - o) == rd16(p + o + 16)) {
      if (r.n_lsa == Parsed::kMaxLsas) return false;
      r.lsa[r.n_lsa++] = o;
    }
    return v3 ? lsa_v3(o, end) : lsa_v2(o, end);
  }
};

bool Walk::lsa_v2(uint32_t o, uint32_t end) {
  const uint32_t b = o + 20;
  switch (p[o + 3]) {
    case 1: {  // router: links of ID, data, type, TOS count, metric, TOS entries
      if (end - o < 24) return false;
      uint32_t k = b + 4;
      for (unsigned i = 0, n = rd16(p + b + 2); i < n; ++i) {
        if (end - k < 12) return false;
        a4(k);
        if (p[k + 8] != 3) a4(k + 4);  // a stub network's data is its mask
        k += 12 + 4u * p[k + 9];
        if (k > end) return false;
      }
      return true;
    }
    case 2:  // network: mask, attached routers
      if (end - o < 24 || (end - b) % 4) return false;
      for (uint32_t k = b + 4; k < end; k += 4) a4(k);
      return true;
    case 3:
    case 4:  // summaries: mask, metrics (the network is the link state ID)
      return end - o >= 28;
    case 5:
    case 7:  // AS-external, NSSA: mask, then metric, forwarding address, tag per TOS
      if (end - o < 36 || (end - b - 4) % 12) return false;
      for (uint32_t k = b + 4; k < end; k += 12) a4(k + 4);
      return true;
    case 9:
    case 10:
    case 11: return opaque(p[o + 4], b, end);  // RFC 5250: the opaque type is the link state ID's first byte
    default: return false;
  }
}

bool Walk::lsa_v3(uint32_t o, uint32_t end) {
  const uint32_t b = o + 20;
  switch (rd16(p + o + 2) & 0x1fff) {
    case 1:  // router: interfaces of type, metric, IDs, the neighbour's router ID
      if (end - o < 24 || (end - b - 4) % 16) return false;
      for (uint32_t k = b + 4; k < end; k += 16) a4(k + 12);
      return true;
    case 2:  // network: options, attached routers
      if (end - o < 24 || (end - b) % 4) return false;
      for (uint32_t k = b + 4; k < end; k += 4) a4(k);
      return true;
    case 3:  // inter-area prefix: metric, prefix
      return end - o >= 24 && prefix(b + 4, end);
    case 4:  // inter-area router: options, metric, destination router ID
      if (end - o < 32) return false;
      a4(b + 8);
      return true;
    case 5:
    case 7: {  // AS-external, NSSA: flags and metric, prefix, then what the flags say
      // The referenced LS type sits in the prefix's own header (b + 6).
      if (end - o < 28) return false;
      const uint8_t flags = p[b];
      const uint16_t ref_type = rd16(p + b + 6);
      uint32_t k = prefix(b + 4, end);
      if (!k) return false;
      if (flags & 2) {  // F: a forwarding address
        if (end - k < 16) return false;
        r.addrs.add(k, 6);
        k += 16;
      }
      if (flags & 1) k += 4;  // T: a route tag
      if (ref_type) k += 4;   // a referenced link state ID
      return k <= end;
    }
    case 8: {  // link: priority, options, link-local address, prefixes
      if (end - o < 44) return false;
      r.addrs.add(b + 4, 6);
      uint32_t k = b + 24;
      for (uint32_t i = 0, n = rd32(p + b + 20); i < n; ++i)
        if (!(k = prefix(k, end))) return false;
      return true;
    }
    case 9: {  // intra-area prefix: count, the referenced LSA, prefixes
      if (end - o < 32) return false;
      a4(b + 8);
      uint32_t k = b + 12;
      for (uint32_t i = 0, n = rd16(p + b); i < n; ++i)
        if (!(k = prefix(k, end))) return false;
      return true;
    }
    case 10: return opaque(kTeV3, b, end);     // intra-area TE (RFC 5329)
    case 11: return opaque(kGrace, b, end);    // grace (RFC 5187)
    case 12: return opaque(kRouterInfo, b, end);  // router information (RFC 7770)
    // Extended LSAs (RFC 8362): the legacy body's fixed part, then TLVs.
    case 33:
    case 34:  // E-router, E-network: options
    case 40:  // E-link: priority, options
      return end - b >= 4 && e_tlvs(b + 4, end);
    case 35:
    case 36:
    case 37:
    case 39: return e_tlvs(b, end);  // E-inter-area prefix and router, E-AS-external, E-NSSA
    case 41:  // E-intra-area prefix: the referenced LSA (type, link state ID, advertising router)
      if (end - b < 12) return false;
      a4(b + 8);
      return e_tlvs(b + 12, end);
    default: return false;
  }
}

// The TLVs from `k` to `end` (type, length, the value padded to 32 bits),
// each handed to `f(type, value offset, length)`; false when one runs past
// `end` or `f` refuses it.
template <class F>
bool tlvs(const uint8_t* p, uint32_t k, uint32_t end, F&& f) {
  while (k < end) {
    if (end - k < 4) return false;
    const uint32_t t = rd16(p + k), l = rd16(p + k + 2), padded = (l + 3u) & ~3u;
    if (end - k - 4 < padded || !f(t, k + 4, l)) return false;
    k += 4 + padded;
  }
  return true;
}

// Sub-TLVs and TLVs that hold numbers only (metrics, bandwidths, groups,
// identifiers local to a router, SIDs, capabilities): a type not listed
// here and not parsed for its addresses may hold one, and fails the parse.
bool te_numbers(uint32_t t) {  // RFC 3630, 4203, 4124, 5392 (AS number), 7471
  return t == 1 || (t >= 5 && t <= 9) || t == 11 || (t >= 14 && t <= 17) || t == 21 || (t >= 27 && t <= 33);
}
bool ri_numbers(uint32_t t) {  // RFC 7770, 5073, 8665, 7777, 7884, 8476
  return t == 1 || t == 2 || t == 5 || (t >= 8 && t <= 12) || t == 14 || t == 15;
}

// A TE link TLV's sub-TLVs (RFC 3630 2.5, RFC 5329 3.2, RFC 5392 3.3).
bool Walk::te_link(uint32_t k, uint32_t end) {
  return tlvs(p, k, end, [&](uint32_t t, uint32_t v, uint32_t l) {
    switch (t) {
      case 2:   // link ID: the neighbour's router ID or the DR's address
      case 22:  // IPv4 remote ASBR ID
        if (l != 4) return false;
        a4(v);
        return true;
      case 3:
      case 4:  // local, remote interface addresses (OSPFv2)
        if (v3 || !l || l % 4) return false;
        for (uint32_t i = 0; i < l; i += 4) a4(v + i);
        return true;
      case 18:  // neighbour ID (OSPFv3): the neighbour's interface ID, its router ID
        if (!v3 || l != 8) return false;
        a4(v + 4);
        return true;
      case 19:
      case 20:  // local, remote interface IPv6 addresses (OSPFv3)
        if (!v3 || !l || l % 16) return false;
        for (uint32_t i = 0; i < l; i += 16) r.addrs.add(v + i, 6);
        return true;
      case 23:  // IPv6 remote ASBR ID
        if (l != 16) return false;
        r.addrs.add(v, 6);
        return true;
      default: return te_numbers(t);
    }
  });
}

// An extended LSA's TLVs (RFC 8362 3), each by its own layout whichever
// LSA carries it. A TLV of another type may hold an address: it fails the
// parse, where RFC 8362 would have a router skip it.
bool Walk::e_tlvs(uint32_t k, uint32_t end) {
  return tlvs(p, k, end, [&](uint32_t t, uint32_t v, uint32_t l) {
    const uint32_t e = v + l;
    switch (t) {
      case 1:  // router link: type, metric, interface IDs, the neighbour's router ID
        if (l < 16) return false;
        a4(v + 12);
        return e_sub(v + 16, e);
      case 2:  // attached routers
        if (!l || l % 4) return false;
        for (uint32_t i = 0; i < l; i += 4) a4(v + i);
        return true;
      case 3:
      case 5:
      case 6: {  // inter-area, external, intra-area prefix: metric (and flags), the prefix
        const uint32_t after = l >= 4 ? prefix(v + 4, e) : 0;
        return after && e_sub(after, e);
      }
      case 4:  // inter-area router: options, metric, the destination's router ID
        if (l < 12) return false;
        a4(v + 8);
        return e_sub(v + 12, e);
      case 7:  // IPv6 link-local address
        if (l < 16) return false;
        r.addrs.add(v, 6);
        return e_sub(v + 16, e);
      case 8:  // IPv4 link-local address
        if (l < 4) return false;
        a4(v);
        return e_sub(v + 4, e);
      default: return false;
    }
  });
}

// An extended LSA TLV's sub-TLVs: forwarding addresses, a LAN adjacency's
// neighbour; route tags, SIDs and the link MSD are numbers.
bool Walk::e_sub(uint32_t k, uint32_t end) {
  return tlvs(p, k, end, [&](uint32_t t, uint32_t v, uint32_t l) {
    switch (t) {
      case 1:  // IPv6 forwarding address
        if (l != 16) return false;
        r.addrs.add(v, 6);
        return true;
      case 2:  // IPv4 forwarding address
        if (l != 4) return false;
        a4(v);
        return true;
      case 6:  // LAN adjacency SID: flags, weight, 16 bits, the neighbour's router ID, the SID
        if (l < 8) return false;
        a4(v + 4);
        return true;
      case 3:   // route tag
      case 4:   // prefix SID
      case 5:   // adjacency SID
      case 7:   // SID/label
      case 9:   // link MSD
        return true;
      default: return false;
    }
  });
}

// An opaque LSA's body from `k` to `end`, by its opaque type (RFC 5250;
// OSPFv3's by function code, mapped to the same kinds). A type of unknown
// layout fails the parse, as before it was parsed.
bool Walk::opaque(uint8_t type, uint32_t k, uint32_t end) {
  switch (type) {
    case kTe:
    case kTeV3:  // TE: router address, links
      return tlvs(p, k, end, [&](uint32_t t, uint32_t v, uint32_t l) {
        if (t == 1 && type == kTe && l == 4) return a4(v), true;             // router address
        if (t == 3 && type == kTeV3 && l == 16) return r.addrs.add(v, 6), true;  // router IPv6 address
        return t == 2 && te_link(v, v + l);
      });
    case kGrace:  // grace period, restart reason, the restarting interface's address
      return tlvs(p, k, end, [&](uint32_t t, uint32_t v, uint32_t l) {
        if (t == 3 && !v3 && l == 4) return a4(v), true;
        return t == 1 || t == 2;
      });
    case kRouterInfo:  // capabilities, SR ranges, tags; a host name, PCE or mesh addresses are not parsed
      return tlvs(p, k, end, [&](uint32_t t, uint32_t, uint32_t) { return ri_numbers(t); });
    case kExtPrefix:  // RFC 7684: route type, prefix length, family, flags, the prefix; SIDs
      return tlvs(p, k, end, [&](uint32_t t, uint32_t v, uint32_t l) {
        if (t != 1 || l < 8 || p[v + 2] != 0 || p[v + 1] > 32) return false;
        a4(v + 4);
        return tlvs(p, v + 8, v + l, [](uint32_t st, uint32_t, uint32_t) { return st == 2; });
      });
    case kExtLink:  // RFC 7684: link type, link ID, link data; adjacency SIDs
      return tlvs(p, k, end, [&](uint32_t t, uint32_t v, uint32_t l) {
        if (t != 1 || l < 12) return false;
        a4(v + 4);
        if (p[v] != 3) a4(v + 8);  // a stub network's data is its mask
        return tlvs(p, v + 12, v + l, [&](uint32_t st, uint32_t sv, uint32_t sl) {
          if (st == 3) {  // LAN adjacency SID: flags, MT, weight, the neighbour's router ID, the SID
            if (sl < 8) return false;
            a4(sv + 4);
            return true;
          }
          return st == 2;  // adjacency SID
        });
      });
    default: return false;
  }
}

}  // namespace

uint16_t lsa_checksum(const uint8_t* lsa, uint32_t len) {
  if (len < 20) return 0;
  // Over the LSA from its options (offset 2), the checksum (at 16) as zero.
  uint64_t c0 = 0, c1 = 0;
  for (uint32_t i = 2; i < len; ++i) {
    c0 += i == 16 || i == 17 ? 0 : lsa[i];
    c1 += c0;
    if ((i & 0xfff) == 0) c0 %= 255, c1 %= 255;
  }
  c0 %= 255, c1 %= 255;
  const uint32_t n = len - 2, at = 14;  // bytes summed; the checksum's place among them
  int32_t x = int32_t(((n - at - 1) * c0 + 255 * 255 - c1) % 255);
  if (x <= 0) x += 255;
  int32_t y = 510 - int32_t(c0) - x;
  if (y > 255) y -= 255;
  return uint16_t(x << 8 | y);
}

Result parse(const uint8_t* p, uint32_t len, Parsed& r) {
  r.addrs.clear();
  r.n_lsa = 0;
  if (len < 16) return Result::Malformed;
  r.version = p[0];
  const bool v3 = p[0] == 3;
  if (p[0] != 2 && !v3) return Result::Malformed;
  const uint32_t hdr = v3 ? 16 : 24;
  r.len = rd16(p + 2);
  if (r.len < hdr || r.len > len) return Result::Malformed;
  const uint32_t end = r.len;
  Walk w{p, r, v3};
  w.a4(4);  // the router ID
  const uint32_t b = hdr;
  auto headers = [&](uint32_t k) {  // LSA headers to the end
    if ((end - k) % 20) return false;
    for (; k < end; k += 20) w.header(k);
    return true;
  };
  bool ok = false;
  switch (p[1]) {
    case 1:  // Hello: DR, BDR, neighbours (the same places in both versions)
      ok = end - b >= 20 && (end - b) % 4 == 0;
      if (ok) {
        w.a4(b + 12), w.a4(b + 16);
        for (uint32_t k = b + 20; k < end; k += 4) w.a4(k);
      }
      break;
    case 2: ok = end - b >= (v3 ? 12u : 8u) && headers(b + (v3 ? 12 : 8)); break;  // database description
    case 3:  // link state request: type, link state ID, advertising router
      ok = (end - b) % 12 == 0;
      for (uint32_t k = b; ok && k < end; k += 12) {
        if (!v3 && !Walk::opaque_v2(p[k + 3])) w.a4(k + 4);
        w.a4(k + 8);
      }
      break;
    case 4: {  // link state update: a count, then LSAs
      ok = end - b >= 4;
      uint32_t k = b + 4;
      for (uint32_t i = 0, n = ok ? rd32(p + b) : 0; ok && i < n; ++i) {
        const uint32_t l = end - k >= 20 ? rd16(p + k + 18) : 0;
        ok = l >= 20 && l <= end - k && w.lsa(k, k + l);
        k += l;
      }
      ok = ok && k == end;
      break;
    }
    case 5: ok = headers(b); break;  // link state acknowledgement
    default: break;
  }
  return ok ? Result::Ok : Result::Malformed;
}

}  // namespace amon::ospf_plugin
