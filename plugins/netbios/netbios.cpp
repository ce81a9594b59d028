// The NetBIOS datagram parser: bytes in, spans out, no registry and no
// policy, so it can be tested and fuzzed on its own.
#include "amon_netbios.hpp"

namespace amon::netbios_plugin {

namespace {

// A name field at `off`: the length byte 32, the encoded letters, then the
// scope's labels up to a zero byte. A scope (a domain-like suffix) is
// refused: it would be text nothing rewrites.
bool name_at(const uint8_t* p, uint32_t len, uint32_t off, uint32_t& letters, uint32_t& next) {
  if (off + 2 + kEncodedLen > len || p[off] != kEncodedLen) return false;
  for (uint32_t i = 0; i < kEncodedLen; ++i)
    if (p[off + 1 + i] < 'A' || p[off + 1 + i] > 'P') return false;
  if (p[off + 1 + kEncodedLen] != 0) return false;
  letters = off + 1, next = off + 2 + kEncodedLen;
  return true;
}

}  // namespace

bool parse_datagram(const uint8_t* p, uint32_t len, Datagram& out) {
  out = {};
  // Message type, flags, datagram id, source IP, source port.
  if (len < 10) return false;
  const uint8_t type = p[0];
  out.src_ip = 4;
  if (type == 0x13) {  // error: an error code after the header
    out.data_off = out.data_len = 0;
    return len == 11;
  }
  uint32_t off = 10;
  const bool direct = type >= 0x10 && type <= 0x12, query = type >= 0x14 && type <= 0x16;
  if (!direct && !query) return false;
  // Direct and broadcast datagrams: datagram length, packet offset, source
  // and destination names, user data. Queries: the destination name only.
  if (direct) off += 4;
  for (unsigned k = 0; k < (direct ? 2u : 1u); ++k) {
    uint32_t at;
    if (!name_at(p, len, off, at, off)) return false;
    out.name_off[out.n_names++] = at;
  }
  out.data_off = off, out.data_len = len - off;
  return true;
}

void decode_name(const uint8_t* e, uint8_t name[16]) {
  for (unsigned i = 0; i < 16; ++i) name[i] = uint8_t((e[2 * i] - 'A') << 4 | (e[2 * i + 1] - 'A'));
}

void encode_name(const uint8_t name[16], uint8_t* e) {
  for (unsigned i = 0; i < 16; ++i) e[2 * i] = uint8_t('A' + (name[i] >> 4)), e[2 * i + 1] = uint8_t('A' + (name[i] & 15));
}

}  // namespace amon::netbios_plugin
