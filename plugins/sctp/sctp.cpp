#include "amon_sctp.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "bytes.h"

namespace amon::sctp_plugin {

namespace {

uint32_t pad4(uint32_t n) { return (n + 3) & ~3u; }

// An opaque region (a State Cookie, a COOKIE ECHO, error causes): what an
// implementation copies there from the INIT it answers. Address
// parameters at any offset (the cookie's layout is its maker's), and the
// packet's own addresses; spans never overlap.
void opaque(const uint8_t* p, uint32_t from, uint32_t to, const uint8_t* src, const uint8_t* dst, uint8_t alen,
            Parsed& r) {
  for (uint32_t i = from; i < to;) {
    const uint32_t left = to - i;
    if (left >= 8 && rd16(p + i) == 5 && rd16(p + i + 2) == 8) {
      r.addrs.add(i + 4, 4);
      i += 8;
    } else if (left >= 20 && rd16(p + i) == 6 && rd16(p + i + 2) == 20) {
      r.addrs.add(i + 4, 6);
      i += 20;
    } else if (alen && left >= alen && (std::memcmp(p + i, src, alen) == 0 || std::memcmp(p + i, dst, alen) == 0)) {
      r.addrs.add(i, alen == 4 ? 4 : 6);
      i += alen;
    } else {
      ++i;
    }
  }
}

// Parameters (type, length, value, padded to 4) in [from, to).
bool params(const uint8_t* p, uint32_t from, uint32_t to, const uint8_t* src, const uint8_t* dst, uint8_t alen,
            Parsed& r, int depth = 0) {
  for (uint32_t o = from; o < to;) {
    if (to - o < 4) return false;
    const uint16_t t = rd16(p + o), l = rd16(p + o + 2);
    if (l < 4 || l > to - o) return false;
    switch (t) {
      case 5:  // IPv4 address
        if (l != 8) return false;
        r.addrs.add(o + 4, 4);
        break;
      case 6:  // IPv6 address
        if (l != 20) return false;
        r.addrs.add(o + 4, 6);
        break;
      case 11:  // Host Name Address: a name, which no address rule maps
        return false;
      case 7:       // State Cookie
      case 0xc003:  // Error Cause Indication: causes that may quote the request
        opaque(p, o + 4, o + l, src, dst, alen, r);
        break;
      case 0xc001:  // Add IP Address
      case 0xc002:  // Delete IP Address
      case 0xc004:  // Set Primary Address: a correlation ID, then an address parameter
        if (l < 8 || depth) return false;
        if (!params(p, o + 8, o + l, src, dst, alen, r, depth + 1)) return false;
        break;
      default: break;  // no address (supported types, ECN, AUTH's random and lists, ...)
    }
    o += std::min(pad4(l), to - o);
  }
  return true;
}

bool carries_addresses(uint8_t type) {
  switch (type) {
    case 1: case 2: case 4: case 5: case 6: case 9: case 10: case 0x80: case 0xc1: return true;
    default: return false;
  }
}

}  // namespace

Result parse(const uint8_t* p, uint32_t len, const uint8_t* src, const uint8_t* dst, uint8_t alen, Parsed& r,
             bool cut) {
  r.addrs.clear();
  if (len < 12) return Result::Malformed;
  if (alen != 4 && alen != 16) src = dst = nullptr, alen = 0;
  for (uint32_t o = 12; o < len;) {
    if (len - o < 4) return cut ? Result::Ok : Result::Malformed;
    const uint8_t type = p[o];
    const uint16_t l = rd16(p + o + 2);
    if (l < 4) return Result::Malformed;
    // Cut by the capture inside a chunk that carries no address (DATA, as
    // a snap length leaves most): what was captured is all parsed.
    if (l > len - o) return cut && !carries_addresses(type) ? Result::Ok : Result::Malformed;
    const uint32_t end = o + l;
    bool ok = true;
    switch (type) {
      case 1:  // INIT
      case 2:  // INIT ACK: tag, window, streams, TSN, then parameters
        ok = l >= 20 && params(p, o + 20, end, src, dst, alen, r);
        break;
      case 0xc1:  // ASCONF: serial, the sender's address parameter, requests
      case 0x80:  // ASCONF-ACK: serial, responses
        ok = l >= 8 && params(p, o + 8, end, src, dst, alen, r);
        break;
      case 4:   // HEARTBEAT
      case 5:   // HEARTBEAT ACK: the sender's information (Linux's holds the path's address)
      case 6:   // ABORT
      case 9:   // ERROR: causes (an unresolvable address, a restart's new addresses)
      case 10:  // COOKIE ECHO: the State Cookie as it came back
        opaque(p, o + 4, end, src, dst, alen, r);
        break;
      default: break;  // DATA, SACK, SHUTDOWN, ...
    }
    if (!ok) return Result::Malformed;
    o += std::min(pad4(l), len - o);
  }
  return Result::Ok;
}

uint32_t checksum(const uint8_t* p, uint32_t len) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = ~0u;
  for (uint32_t i = 0; i < len; ++i) c = table[(c ^ (i >= 8 && i < 12 ? 0 : p[i])) & 0xff] ^ (c >> 8);
  return ~c;
}

}  // namespace amon::sctp_plugin
