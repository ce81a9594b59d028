#include "amon_ospf.hpp"

#include "bytes.h"

namespace amon::ospf_plugin {

namespace {

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
  // type). OSPFv3's link state ID is a number.
  void header(uint32_t o) {
    if (!v3) a4(o + 4);
    a4(o + 8);
  }
  bool lsa_v2(uint32_t o, uint32_t end);
  bool lsa_v3(uint32_t o, uint32_t end);
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
        if (!v3) w.a4(k + 4);
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
