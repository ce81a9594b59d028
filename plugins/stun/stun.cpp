// The STUN parser: bytes in, spans out, no registry and no policy, so it
// can be tested and fuzzed on its own. Every read bounds-checked.
#include "amon_stun.hpp"

#include <zlib.h>

#include "bytes.h"

namespace amon::stun_plugin {

namespace {

// The attributes whose value is a transport address: family at +1, port
// at +2, the address at +4. XOR-ed ones carry it XOR-ed with the cookie
// (and the transaction ID).
enum class AddrAttr : uint8_t { No, Plain, Xor };

AddrAttr addr_attr(uint16_t t) {
  switch (t) {
    case 0x0001:  // MAPPED-ADDRESS
    case 0x0002:  // RESPONSE-ADDRESS (RFC 3489)
    case 0x0004:  // SOURCE-ADDRESS (RFC 3489)
    case 0x0005:  // CHANGED-ADDRESS (RFC 3489)
    case 0x000b:  // REFLECTED-FROM (RFC 3489)
    case 0x8023:  // ALTERNATE-SERVER
    case 0x802b:  // RESPONSE-ORIGIN (RFC 5780)
    case 0x802c:  // OTHER-ADDRESS (RFC 5780)
      return AddrAttr::Plain;
    case 0x0012:  // XOR-PEER-ADDRESS (TURN)
    case 0x0016:  // XOR-RELAYED-ADDRESS (TURN)
    case 0x0020:  // XOR-MAPPED-ADDRESS
    case 0x8020:  // XOR-MAPPED-ADDRESS as drafts of RFC 5389 numbered it
    case 0x0027:  // XOR-RESPONSE-TARGET (drafts of RFC 5780)
    case 0x0028:  // XOR-REFLECTED-FROM (drafts of RFC 5780)
      return AddrAttr::Xor;
    default: return AddrAttr::No;
  }
}

constexpr uint16_t kUsername = 0x0006, kFingerprint = 0x8028;

// One message at o, [o, end) with end = o + 20 + its length.
Result message(const uint8_t* p, uint32_t o, uint32_t end, bool cookie, Parsed& out) {
  for (uint32_t a = o + 20; a < end;) {
    if (a + 4 > end) return Result::Malformed;
    const uint16_t t = rd16(p + a), l = rd16(p + a + 2);
    const uint32_t v = a + 4;
    if (v + l > end) return Result::Malformed;
    const AddrAttr k = addr_attr(t);
    if (k != AddrAttr::No) {
      if (l < 8) return Result::Malformed;
      const uint8_t fam = p[v + 1];
      const uint32_t al = fam == 1 ? 4 : fam == 2 ? 16 : 0;
      if (!al || l != 4 + al || (k == AddrAttr::Xor && !cookie)) return Result::Malformed;
      if (out.n_addr == Parsed::kMax) return Result::Malformed;
      out.addr[out.n_addr++] = {{v + 4, al}, k == AddrAttr::Xor, o + 4};
    } else if (t == kUsername && l) {
      if (out.n_user == Parsed::kMax) return Result::Malformed;
      out.user[out.n_user++] = {v, l};
    } else if (t == kFingerprint && l == 4 && rd32(p + v) == fingerprint(p, o, a)) {
      if (out.n_finger == Parsed::kMax) return Result::Malformed;
      out.finger[out.n_finger++] = {o, a};
    }
    a = v + ((l + 3u) & ~3u);
    if (a > end) return Result::Malformed;
  }
  return Result::Ok;
}

bool header(const uint8_t* p, uint32_t o) { return (p[o] & 0xc0) == 0 && (rd16(p + o + 2) & 3) == 0; }
bool cookie_at(const uint8_t* p, uint32_t o) { return rd32(p + o + 4) == kCookie; }

}  // namespace

uint32_t fingerprint(const uint8_t* p, uint32_t msg, uint32_t attr) {
  return uint32_t(crc32(0, p + msg, attr - msg)) ^ 0x5354554eu;
}

bool has_cookie(const uint8_t* p, uint32_t len) { return len >= 20 && header(p, 0) && cookie_at(p, 0); }

Result parse(const uint8_t* p, uint32_t len, bool stream, bool classic, Parsed& out) {
  out.n_addr = out.n_user = out.n_finger = 0;
  if (!stream) {
    if (len < 20 || !header(p, 0)) return Result::NotStun;
    const bool cookie = cookie_at(p, 0);
    if (!cookie && !classic) return Result::NotStun;
    if (20u + rd16(p + 2) != len) return Result::Malformed;
    return message(p, 0, len, cookie, out);
  }
  for (uint32_t o = 0; o < len;) {
    if (o + 4 > len) return Result::Incomplete;
    if ((p[o] & 0xc0) == 0x40) {  // ChannelData: channel number, length, data padded to a word over TCP
      o += 4 + ((rd16(p + o + 2) + 3u) & ~3u);
      continue;
    }
    if (o + 20 > len) return o == 0 || header(p, o) ? Result::Incomplete : Result::Malformed;
    if (!header(p, o) || !cookie_at(p, o)) return o == 0 ? Result::NotStun : Result::Malformed;
    const uint32_t end = o + 20 + rd16(p + o + 2);
    if (end > len) return Result::Incomplete;
    if (const Result r = message(p, o, end, true, out); r != Result::Ok) return r;
    o = end;
  }
  return Result::Ok;
}

}  // namespace amon::stun_plugin
