// The NetBIOS datagram parser: bytes in, spans out, no registry and no
// policy, so it can be tested and fuzzed on its own.
#include "amon_netbios.hpp"

#include <cctype>
#include <cstring>

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

uint32_t le16(const uint8_t* p) { return uint32_t(p[0] | p[1] << 8); }

// A NUL-terminated string at `off` that ends before `end`: its length
// without the NUL.
bool cstr(const uint8_t* p, uint32_t off, uint32_t end, uint32_t& n) {
  for (uint32_t i = off; i < end; ++i)
    if (!p[i]) return n = i - off, true;
  return false;
}

bool zeros(const uint8_t* p, uint32_t from, uint32_t to) {
  for (uint32_t i = from; i < to; ++i)
    if (p[i]) return false;
  return true;
}

bool add(Datagram& g, uint32_t off, uint32_t n, bool comment) {
  if (!n) return true;
  if (g.n_values == Datagram::kMaxValues) return false;
  g.values[g.n_values++] = {off, n, comment};
  return true;
}

// A name ending in a NUL at `at`, before `e`; `at` moves past it.
bool name_str(const uint8_t* p, uint32_t& at, uint32_t e, Datagram& g) {
  uint32_t n;
  if (at > e || !cstr(p, at, e, n) || !add(g, at, n, false)) return false;
  at += n + 1;
  return true;
}

// A browser message ([MS-BRWS] 2.2) in [b, e): every name it gives, its
// comment, nothing after them but zeros. Messages of other opcodes are
// refused.
bool browser(const uint8_t* p, uint32_t b, uint32_t e, Datagram& g) {
  if (b >= e) return false;
  const uint8_t op = p[b];
  uint32_t at = b + 1, n;
  switch (op) {
    case 0x01:    // host announcement
    case 0x0c:    // domain (workgroup) announcement
    case 0x0f: {  // local master announcement
      // Update count, periodicity, the server's (the workgroup's) name in
      // 16 NUL-padded bytes, OS version, server type, browser version,
      // signature, then the comment: free text, or a domain
      // announcement's master browser name.
      // Windows leaves what the buffer held after the name's NUL: bytes
      // that may be an older name's, taking the rule on their bytes.
      if (at + 32 > e) return false;
      const uint32_t name = at + 5;
      if (!cstr(p, name, name + 16, n) || !add(g, name, n, false)) return false;
      if (!zeros(p, name + n, name + 16) && !add(g, name + n + 1, 15 - n, true)) return false;
      at = name + 26;
      if (!cstr(p, at, e, n) || !add(g, at, n, op != 0x0c)) return false;
      at += n + 1;
      break;
    }
    case 0x02:  // announcement request: a reserved byte, the name to answer
      at += 1;
      if (!name_str(p, at, e, g)) return false;
      break;
    case 0x08:  // election request: version, criteria, uptime, reserved, the sender's name
      at += 13;
      if (!name_str(p, at, e, g)) return false;
      break;
    case 0x09:  // backup list request: count, token
      at += 5;
      break;
    case 0x0a: {  // backup list response: count, token, the backup browsers' names
      if (at + 5 > e) return false;
      const unsigned count = p[at];
      at += 5;
      for (unsigned k = 0; k < count && at < e; ++k)
        if (!name_str(p, at, e, g)) return false;
      break;
    }
    case 0x0b:  // become backup: the browser to promote
    case 0x0d:  // master announcement: the master browser's name
      if (!name_str(p, at, e, g)) return false;
      break;
    case 0x0e:  // reset state: options
      at += 1;
      break;
    default: return false;
  }
  return at <= e && zeros(p, at, e);
}

// The user data from `s` to `e`: an SMB Trans request writing to the
// browser's mailslot. Its header and words hold no name; the data
// (DataOffset from the SMB header, DataCount bytes) is the browser message.
bool mailslot(const uint8_t* p, uint32_t s, uint32_t e, Datagram& g) {
  static constexpr uint8_t kSmb[4] = {0xff, 'S', 'M', 'B'};
  if (s + 33 > e || std::memcmp(p + s, kSmb, 4) != 0 || p[s + 4] != 0x25) return false;
  const uint32_t w = p[s + 32], words = s + 33;
  if (w < 14 || words + 2 * w + 2 > e || w != 14u + p[words + 26]) return false;
  const uint32_t bytes = words + 2 * w + 2, bend = bytes + le16(p + words + 2 * w);
  // Parameters would be bytes no layout here explains.
  if (le16(p + words + 18) != 0 || bend > e) return false;
  static constexpr char kBrowse[] = "\\mailslot\\browse";
  uint32_t n;
  if (!cstr(p, bytes, bend, n) || n != sizeof kBrowse - 1) return false;
  for (uint32_t i = 0; i < n; ++i)
    if (char(std::tolower(p[bytes + i])) != kBrowse[i]) return false;
  const uint32_t d = s + le16(p + words + 24), dn = le16(p + words + 22);
  if (d < bytes + n + 1 || d + dn > bend || !zeros(p, bytes + n + 1, d) || !zeros(p, d + dn, e)) return false;
  return browser(p, d, d + dn, g);
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
  // A fragment (more to come, or a later one) holds part of a message.
  if (direct && (len < 14 || (p[1] & 0x01) || p[12] || p[13])) return false;
  if (direct) off += 4;
  for (unsigned k = 0; k < (direct ? 2u : 1u); ++k) {
    uint32_t at;
    if (!name_at(p, len, off, at, off)) return false;
    out.name_off[out.n_names++] = at;
  }
  out.data_off = off, out.data_len = len - off;
  return !out.data_len || mailslot(p, off, len, out);
}

void decode_name(const uint8_t* e, uint8_t name[16]) {
  for (unsigned i = 0; i < 16; ++i) name[i] = uint8_t((e[2 * i] - 'A') << 4 | (e[2 * i + 1] - 'A'));
}

void encode_name(const uint8_t name[16], uint8_t* e) {
  for (unsigned i = 0; i < 16; ++i) e[2 * i] = uint8_t('A' + (name[i] >> 4)), e[2 * i + 1] = uint8_t('A' + (name[i] & 15));
}

}  // namespace amon::netbios_plugin
