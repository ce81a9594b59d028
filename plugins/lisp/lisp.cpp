#include "amon_lisp.hpp"

#include "bytes.h"

namespace amon::lisp_plugin {

namespace {

constexpr uint16_t kAfiLcaf = 16387;
constexpr unsigned kMaxLcafDepth = 4;

struct Walk {
  const uint8_t* p;
  uint32_t end;
  Parsed& r;
  uint32_t o = 0;
  bool ok = true;
  void skip(uint32_t n) {
    if (!ok || end - o < n) ok = false;
    else o += n;
  }
  // An AFI and its address: IPv4, IPv6, an LCAF, or none.
  void afi_addr(unsigned depth = 0) {
    if (!ok || end - o < 2) return void(ok = false);
    const uint16_t afi = rd16(p + o);
    o += 2;
    if (afi == 0) return;
    if (afi == kAfiLcaf) return lcaf(depth);
    const uint32_t n = afi == 1 ? 4 : afi == 2 ? 16 : 0;
    if (!n || end - o < n) return void(ok = false);
    r.addrs.add(o, afi == 1 ? 4 : 6);
    o += n;
  }
  // An LCAF (RFC 8060) after its AFI: reserved, flags, type, a byte of the
  // type's, the length of what follows; then the type's body, whose
  // addresses are AFI-encoded (LCAFs among them, nested a few deep).
  void lcaf(unsigned depth) {
    if (depth == kMaxLcafDepth || end - o < 6) return void(ok = false);
    const uint8_t type = p[o + 2];
    const uint32_t l = rd16(p + o + 4);
    o += 6;
    if (end - o < l) return void(ok = false);
    const uint32_t outer = end;
    end = o + l;
    auto rest = [&](uint32_t hop) {  // AFI addresses to the end, each after `hop` bytes
      while (ok && o < end) skip(hop), afi_addr(depth + 1);
    };
    switch (type) {
      case 1: rest(0); break;                                     // AFI list
      case 2:                                                     // instance ID
      case 3: skip(4), afi_addr(depth + 1); break;                // AS number
      case 4: skip(12), afi_addr(depth + 1); break;               // application data: TOS, protocol, port ranges
      case 7: skip(4), rest(0); break;                            // NAT traversal: ports, then RLOCs
      case 8: skip(4), afi_addr(depth + 1); break;                // nonce locator: nonce, locator
      case 9: skip(8), afi_addr(depth + 1), afi_addr(depth + 1); break;  // multicast info: IID, mask lengths, source, group
      case 10: rest(2); break;                                    // explicit locator path: flags, then a hop
      case 12: skip(4), afi_addr(depth + 1), afi_addr(depth + 1); break;  // source/dest key: mask lengths, source, dest
      default: ok = false;  // geo-coordinates, keys, JSON and other layouts: not read
    }
    ok = ok && o == end;
    end = outer;
  }
  // A mapping record: TTL, locator count, mask length, flags, version,
  // the EID prefix, then its locators (priorities, weights, flags, address).
  void record() {
    if (!ok || end - o < 12) return void(ok = false);
    const uint32_t locs = p[o + 4];
    o += 10;
    afi_addr();
    for (uint32_t i = 0; ok && i < locs; ++i) skip(6), afi_addr();
  }
};

}  // namespace

Result parse(const uint8_t* p, uint32_t len, Parsed& r) {
  r.addrs.clear();
  if (len < 12) return Result::Malformed;
  Walk w{p, len, r};
  const uint8_t type = p[0] >> 4;
  const uint32_t records = p[3];
  uint32_t trailer = 0;  // bytes after the records that carry no address
  switch (type) {
    case 1: {  // Map-Request: nonce, source EID, ITR-RLOCs, EID prefixes, a Map-Reply record (M)
      const uint32_t itrs = (p[2] & 0x1f) + 1u;
      w.o = 12;
      w.afi_addr();
      for (uint32_t i = 0; w.ok && i < itrs; ++i) w.afi_addr();
      for (uint32_t i = 0; w.ok && i < records; ++i) w.skip(2), w.afi_addr();
      if (p[0] & 0x04) w.record();
      break;
    }
    case 2: w.o = 12; break;  // Map-Reply: nonce, records
    case 3:
    case 4:
    case 5: {  // Map-Register, Map-Notify, Map-Notify-Ack: nonce, key ID, authentication data, records
      w.o = 12;
      if (len - w.o < 4) return Result::Malformed;
      w.skip(4 + rd16(p + 14));
      if (type == 3 && (p[0] & 0x02)) trailer = 24;  // I: the xTR-ID and site ID
      break;
    }
    default: return Result::Malformed;  // an Encapsulated Control Message, Map-Referral, ...
  }
  if (type != 1)
    for (uint32_t i = 0; w.ok && i < records; ++i) w.record();
  return w.ok && len - w.o == trailer ? Result::Ok : Result::Malformed;
}

}  // namespace amon::lisp_plugin
