#include "amon_mip6.hpp"

#include "bytes.h"

namespace amon::mip6_plugin {

namespace {

struct Walk {
  const uint8_t* p;
  Parsed& r;
  void a4(uint32_t off) { r.addrs.add(off, 4); }
  void a6(uint32_t off) { r.addrs.add(off, 6); }
  bool zero(uint32_t off, uint32_t len) {
    if (!len) return true;
    if (r.n_zero == Parsed::kMaxZero) return false;
    r.zero[r.n_zero++] = {off, len};
    return true;
  }
  // A prefix's length at `at`, the prefix's 16 bytes after it: a span of
  // the bytes the prefix is stored in, or the whole 16 when bytes past
  // them are not zero (an address written where a prefix belongs).
  bool prefix(uint32_t at) {
    const unsigned bits = p[at];
    if (bits > 128) return false;
    const uint32_t n = (bits + 7) / 8, o = at + 1;
    bool tail = false;
    for (uint32_t k = n; k < 16; ++k) tail = tail || p[o + k];
    if (tail) a6(o);
    else if (n) r.addrs.add(o, 6, uint8_t(n));
    return true;
  }
  bool option(uint8_t type, uint32_t d, uint32_t n);
};

// Mobility options by the IANA registry's types (RFC 6275, 3963, 4283,
// 4285, 4866, 5026, 5094, 5096, 5149, 5213, 5555, 5568, 5648, 5844, 5845,
// 5847, 5949, 6058, 6089, 6463, 6602, 6705, 6757). `d`: the data, `n`
// bytes.
bool Walk::option(uint8_t type, uint32_t d, uint32_t n) {
  switch (type) {
    case 1:   // PadN
    case 2:   // binding refresh advice: an interval
    case 4:   // nonce indices
    case 9:   // MN-HA/MN-AAA authentication: keyed by a secret of the two ends
    case 10:  // message identification: a timestamp
    case 11:  // CGA parameters request: empty
    case 14:  // permanent home keygen token
    case 15:  // care-of test init: empty
    case 16:  // care-of test: a keygen token
    case 21:  // FMIPv6 binding authorization: keyed by a secret of the two ends
    case 23:  // handoff indicator
    case 24:  // access technology type
    case 27:  // timestamp
    case 28:  // restart counter
    case 31:  // NAT detection: a flag and a refresh time
    case 33:  // GRE key
    case 39:  // IPv4 DHCP support mode
    case 40:  // context request: option types asked for
    case 43:  // transient binding: flags and a lifetime
    case 44:  // flow summary: flow identifiers
    case 46:  // redirect capability
    case 48:  // load information: numbers
    case 50:  // mobile node group identifier: a number
      return true;
    // Authorization data: HMAC over the care-of and correspondent addresses
    // keyed by Kbm, which hashes the keygen tokens Home Test and Care-of
    // Test carry in clear (RFC 6275 5.2.5): kept, it would confirm a guess
    // of the addresses. The others name the node itself: a link-layer
    // address (7, 25) or interface identifier (42), an NAI (8), CGA
    // parameters and a signature by their key (12, 13), a host name (17),
    // experimental and vendor data (18, 19; 3GPP's carry an MSISDN, IMSI
    // or IMEI), a service name (20), the access network's name, operator
    // and location (52).
    case 5: case 7: case 8: case 12: case 13: case 17: case 18: case 19: case 20: case 25: case 42: case 52:
      return zero(d, n);
    case 3:   // alternate care-of address
    case 26:  // link-local address
      if (n != 16) return false;
      return a6(d), true;
    case 6:   // mobile network prefix: reserved, length, prefix
    case 22:  // home network prefix: the same
      return n == 18 && prefix(d + 1);
    case 29:  // IPv4 home address: prefix length and flags, the address
    case 30:  // IPv4 address acknowledgement: status, prefix length, the address
    case 32:  // IPv4 care-of address: reserved, the address
    case 36:  // IPv4 home address request
    case 37:  // IPv4 home address reply
    case 38:  // IPv4 default router address
      if (n != 6) return false;
      return a4(d + 2), true;
    case 34:  // FMIPv6 address or prefix: code, length, an address (a prefix's bits past it kept as sent)
    case 51:  // MAG IPv6 address: reserved, length, the address
      if (n != 18) return false;
      return a6(d + 2), true;
    case 35:  // binding identifier: BID, status, flags, a care-of address of either family or none
      if (n == 8) a4(d + 4);
      else if (n == 20) a6(d + 4);
      return n == 4 || n == 8 || n == 20;
    case 41:  // local mobility anchor address: code 1 IPv6, 2 IPv4
      if (n < 2) return false;
      if (p[d] == 1 && n == 18) return a6(d + 2), true;
      if (p[d] == 2 && n == 6) return a4(d + 2), true;
      return false;
    case 47:  // redirect: flags, then an IPv6 and/or an IPv4 LMA address
      if (n == 18 || n == 22) a6(d + 2);
      if (n == 6) a4(d + 2);
      if (n == 22) a4(d + 18);
      return n == 2 || n == 6 || n == 18 || n == 22;
    case 49:  // alternate IPv4 care-of address
      if (n != 4) return false;
      return a4(d), true;
    default:  // flow identification (45, traffic selectors), unassigned
      return false;
  }
}

}  // namespace

Result parse(const uint8_t* p, uint32_t len, Parsed& r) {
  r.addrs.clear();
  r.n_zero = 0;
  if (len < 8) return Result::Malformed;
  r.len = (p[1] + 1u) * 8u;
  if (r.len != len) return Result::Malformed;
  const uint32_t end = r.len;
  Walk w{p, r};
  uint32_t o;
  switch (p[2]) {
    case 0: o = 8; break;                            // binding refresh request
    case 1: case 2: o = 16; break;                   // home/care-of test init: a cookie
    case 3: case 4: o = 24; break;                   // home/care-of test: index, cookie, token
    case 5: case 6: case 8: case 9: o = 12; break;   // (fast) binding update and acknowledgement
    case 7: o = 24, w.a6(8); break;                  // binding error: the home address
    case 10: o = 8; break;                           // fast neighbour advertisement
    case 12:                                         // home agent switch: the home agents
      o = 8 + 16u * p[6];
      if (o > end) return Result::Malformed;
      for (uint32_t k = 8; k < o; k += 16) w.a6(k);
      break;
    case 13: o = 12; break;                          // heartbeat
    case 14: case 15: o = 10; break;                 // handover initiate and acknowledge
    case 16: o = 12; break;                          // binding revocation indication and acknowledgement
    case 17: case 18: o = 12; break;                 // localized routing initiation and acknowledgement
    default: return Result::Malformed;               // experimental (11), unassigned
  }
  if (o > end) return Result::Malformed;
  while (o < end) {
    if (p[o] == 0) {  // Pad1
      ++o;
      continue;
    }
    if (end - o < 2 || end - o - 2 < p[o + 1]) return Result::Malformed;
    if (!w.option(p[o], o + 2, p[o + 1])) return Result::Malformed;
    o += 2u + p[o + 1];
  }
  return Result::Ok;
}

}  // namespace amon::mip6_plugin
