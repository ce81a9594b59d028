#include "amon_pim.hpp"

#include "bytes.h"

namespace amon::pim_plugin {

namespace {

struct Walk {
  const uint8_t* p;
  uint32_t end;
  Parsed& r;
  uint32_t o = 4;
  bool ok = true;
  // An encoded address (RFC 7761 4.9): family, encoding type, `extra` bytes
  // (a group's or a source's flags and mask length), the address.
  void addr(unsigned extra) {
    if (!ok || end - o < 2 + extra || p[o + 1] != 0) return void(ok = false);
    const uint8_t fam = p[o];
    const uint32_t n = fam == 1 ? 4 : fam == 2 ? 16 : 0;
    if (!n || end - o < 2 + extra + n) return void(ok = false);
    r.addrs.add(o + 2 + extra, fam == 1 ? 4 : 6);
    o += 2 + extra + n;
  }
  void unicast() { addr(0); }
  void group() { addr(2); }
  void source() { addr(2); }
  void skip(uint32_t n) {
    if (!ok || end - o < n) ok = false;
    else o += n;
  }
  uint32_t u8() { return ok && o < end ? p[o] : (ok = false, 0); }
  uint32_t u16() { return ok && end - o >= 2 ? rd16(p + o) : (ok = false, 0); }
};

// Register: flags, then the multicast packet. One with data is a tunnel
// the decoder descends into (plugins/l2l4); what is left here is a
// Null-Register's dummy header, and data after it is malformed.
bool register_msg(const uint8_t* p, uint32_t len, Parsed& r) {
  r.summed = 8;
  if (len < 8) return false;
  if (len == 8) return true;
  const uint8_t* in = p + 8;
  const uint32_t n = len - 8;
  if (in[0] >> 4 == 4) {
    const uint32_t ihl = (in[0] & 0xf) * 4u;
    if (ihl < 20 || n != ihl) return false;
    r.addrs.add(8 + 12, 4), r.addrs.add(8 + 16, 4);
    r.inner = ihl;
    return true;
  }
  if (in[0] >> 4 == 6 && n == 40) {
    r.addrs.add(8 + 8, 6), r.addrs.add(8 + 24, 6);
    return true;
  }
  return false;
}

}  // namespace

Result parse(const uint8_t* p, uint32_t len, Parsed& r) {
  r.addrs.clear();
  r.summed = len, r.inner = 0;
  if (len < 4 || p[0] >> 4 != 2) return Result::Malformed;
  Walk w{p, len, r};
  switch (p[0] & 0xf) {
    case 0:  // Hello: options; the address list's (24, and 65001 before it was numbered) are encoded unicast
      while (w.ok && w.o < len) {
        const uint32_t t = w.u16();
        w.skip(2);
        const uint32_t l = w.u16();
        w.skip(2);
        if (!w.ok || len - w.o < l) return Result::Malformed;
        const uint32_t opt_end = w.o + l;
        if (t == 24 || t == 65001) {
          Walk a{p, opt_end, r, w.o};
          while (a.ok && a.o < opt_end) a.unicast();
          if (!a.ok) return Result::Malformed;
        }
        w.o = opt_end;
      }
      break;
    case 1: return register_msg(p, len, r) ? Result::Ok : Result::Malformed;
    case 2: w.group(), w.unicast(); break;  // Register-Stop
    case 3:
    case 6:
    case 7: {  // Join/Prune, Graft, Graft-Ack: upstream neighbour, groups with their sources
      w.unicast();
      w.skip(1);
      const uint32_t groups = w.u8();
      w.skip(3);
      for (uint32_t g = 0; w.ok && g < groups; ++g) {
        w.group();
        const uint32_t n = w.u16();
        w.skip(2);
        const uint32_t m = w.u16();
        w.skip(2);
        for (uint32_t s = 0; w.ok && s < n + m; ++s) w.source();
      }
      break;
    }
    case 4:  // Bootstrap: fragment tag, hash mask, priority, the BSR, then groups and their RPs
      w.skip(4);
      w.unicast();
      while (w.ok && w.o < len) {
        w.group();
        w.skip(1);
        const uint32_t rps = w.u8();
        w.skip(3);
        for (uint32_t i = 0; w.ok && i < rps; ++i) w.unicast(), w.skip(4);
      }
      break;
    case 5: w.group(), w.unicast(), w.skip(8); break;  // Assert
    case 8: {  // Candidate-RP-Advertisement: prefix count, priority, holdtime, the RP, its groups
      const uint32_t n = w.u8();
      w.skip(4);
      w.unicast();
      for (uint32_t i = 0; w.ok && i < n; ++i) w.group();
      break;
    }
    case 9: w.group(), w.unicast(), w.unicast(), w.skip(12); break;  // State Refresh: group, source, originator
    default: return Result::Malformed;
  }
  // Bytes after the last field could be anything: none is allowed.
  return w.ok && w.o == len ? Result::Ok : Result::Malformed;
}

}  // namespace amon::pim_plugin
