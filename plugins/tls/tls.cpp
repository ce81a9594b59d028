#include <algorithm>
#include "amon_tls.hpp"
#include "bytes.h"

#include <cstring>

namespace amon::tls {
namespace {


struct Parser {
  const uint8_t* buf;
  size_t len;
  ClientHello& c;
  const uint8_t* h = nullptr;  // contiguous handshake body (after the 4-byte header)
  uint32_t hlen = 0;
  bool bare = false;  // no record layer: buf starts at the handshake header (QUIC CRYPTO)

  Status fail(Status s, Error e) {
    c.status = s;
    c.error = e;
    if (e == Error::Capacity) c.overflow = true;
    return s;
  }

  // Map a logical handshake offset (counting the 4-byte header) to a span.
  Span span(uint32_t logical, uint32_t n) const {
    for (unsigned i = 0; i < c.n_frags; ++i) {
      const auto& f = c.frags[i];
      if (logical >= f.logical && logical < f.logical + f.len)
        return {f.phys + (logical - f.logical), n, logical + n <= f.logical + f.len};
    }
    // Zero-length field at the very end of the message.
    const auto& f = c.frags[c.n_frags - 1];
    return {f.phys + f.len, n, true};
  }
  Span bspan(uint32_t body_off, uint32_t n) const { return span(body_off + 4, n); }

  // QUIC carries the handshake in CRYPTO frames without records: one
  // fragment, the whole message, from the first byte.
  Status message() {
    if (len < 4) {
      c.need = 4;
      return fail(Status::Truncated, Error::NeedMore);
    }
    if (buf[0] != 1) return fail(Status::Malformed, Error::NotClientHello);
    const uint32_t hs = uint32_t(buf[1]) << 16 | uint32_t(buf[2]) << 8 | buf[3];
    if (hs > ClientHello::kMaxHello) return fail(Status::Malformed, Error::HelloTooLarge);
    c.hs_len = hs;
    if (len < 4 + size_t(hs)) {
      c.need = 4 + hs;
      return fail(Status::Truncated, Error::NeedMore);
    }
    c.frags[0] = {0, 0, 4 + hs};
    c.n_frags = 1;
    c.consumed = 4 + hs;
    h = buf + 4;
    hlen = hs;
    return Status::Ok;
  }

  Status records() {
    if (bare) return message();
    size_t p = 0;
    uint32_t have = 0;           // handshake bytes gathered
    uint32_t want = 0;           // 4 + hs_len once known
    uint8_t hdr[4];
    for (;;) {
      if (want && have >= want) break;
      if (len - p < 5) {
        // Another record header is needed; at least one byte of body more.
        c.need = uint32_t(p + 5 + (want ? want - have : 4 - have));
        return fail(Status::Truncated, Error::NeedMore);
      }
      const uint8_t type = buf[p];
      const uint16_t ver = rd16(buf + p + 1), rlen = rd16(buf + p + 3);
      if (type != 22) return fail(Status::Malformed, Error::NotHandshake);
      if ((ver >> 8) != 3 || (ver & 0xff) > 4) return fail(Status::Malformed, Error::RecordVersion);
      if (rlen == 0 || rlen > 16384) return fail(Status::Malformed, Error::RecordLength);
      if (c.n_records == 0) c.record_version = ver;
      ++c.n_records;
      const uint32_t body = uint32_t(p + 5);
      const uint32_t avail = uint32_t(len - body < rlen ? len - body : rlen);
      // Only the bytes this message still needs belong to it.
      uint32_t take = avail;
      if (want && take > want - have) take = want - have;
      if (c.n_frags >= ClientHello::kMaxFrags) return fail(Status::Malformed, Error::Capacity);
      if (take) c.frags[c.n_frags++] = {body, have, take};
      for (uint32_t i = 0; have + i < 4 && i < take; ++i) hdr[have + i] = buf[body + i];
      have += take;
      if (!want && have >= 4) {
        if (hdr[0] != 1) return fail(Status::Malformed, Error::NotClientHello);
        const uint32_t hs = uint32_t(hdr[1]) << 16 | uint32_t(hdr[2]) << 8 | hdr[3];
        if (hs > ClientHello::kMaxHello) return fail(Status::Malformed, Error::HelloTooLarge);
        c.hs_len = hs;
        want = 4 + hs;
        if (have > want) {  // the first record carried more than the hello
          c.frags[c.n_frags - 1].len -= have - want;
          have = want;
        }
      }
      if (avail < rlen) {
        c.need = uint32_t(body + rlen);
        if (want && have + (rlen - avail) < want) c.need += 5 + (want - have - (rlen - avail));
        // Record incomplete: if it would also complete the hello, need is exact.
        if (!want || have < want) return fail(Status::Truncated, Error::NeedMore);
      }
      p = body + rlen;
      c.consumed = uint32_t(p);
    }
    if (c.n_frags == 1) {
      h = buf + c.frags[0].phys + 4;
    } else {
      uint8_t* s = c.scratch;
      for (unsigned i = 0; i < c.n_frags; ++i) std::memcpy(s + c.frags[i].logical, buf + c.frags[i].phys, c.frags[i].len);
      h = s + 4;
    }
    hlen = c.hs_len;
    return Status::Ok;
  }

  bool put_text(char ch) {
    if (c.text_len >= ClientHello::kTextCap) return false;
    c.text[c.text_len++] = ch;
    return true;
  }

  Status sni(uint32_t off, uint32_t n) {
    if (n < 2) return fail(Status::Malformed, Error::SniList);
    const uint32_t list = rd16(h + off);
    if (list + 2 != n || list < 3) return fail(Status::Malformed, Error::SniList);
    uint32_t p = off + 2;
    const uint32_t end = off + n;
    while (p < end) {
      if (p + 3 > end) return fail(Status::Malformed, Error::SniList);
      const uint8_t nt = h[p];
      const uint16_t nl = rd16(h + p + 1);
      if (p + 3 + nl > end || nl == 0) return fail(Status::Malformed, Error::SniList);
      if (c.n_sni >= ClientHello::kMaxSni) return fail(Status::Malformed, Error::Capacity);
      ServerName& s = c.sni[c.n_sni++];
      s.name_type = nt;
      s.span = bspan(p + 3, nl);
      s.text_off = uint16_t(c.text_len);
      for (uint32_t i = 0; i < nl; ++i) {
        uint8_t ch = h[p + 3 + i];
        if (ch >= 'A' && ch <= 'Z') ch = uint8_t(ch + 32);
        // Non-printable bytes would make the text ambiguous for decisions;
        // the rewrite works on the wire bytes, not on this copy.
        if (ch < 0x21 || ch > 0x7e) ch = '?';
        if (!put_text(char(ch))) return fail(Status::Malformed, Error::Capacity);
      }
      s.text_len = uint16_t(c.text_len - s.text_off);
      p += 3u + nl;
    }
    return Status::Ok;
  }

  // `count` consecutive 16-bit-length vectors exactly filling [p, end),
  // the last one at least `min_last` bytes long.
  bool vectors16(uint32_t p, uint32_t end, int count, uint32_t min_last) const {
    if (p > end) return false;
    uint32_t n = 0;
    for (int i = 0; i < count; ++i) {
      if (p + 2 > end) return false;
      n = rd16(h + p);
      if (p + 2 + n > end) return false;
      p += 2 + n;
    }
    return p == end && n >= min_last;
  }

  Status hello() {
    uint32_t p = 0;
    if (hlen < 2 + 32 + 1) return fail(Status::Malformed, Error::VectorLength);
    c.legacy_version = rd16(h);
    c.random = bspan(2, 32);
    p = 34;
    const uint8_t sid = h[p];
    if (sid > 32 || p + 1 + sid > hlen) return fail(Status::Malformed, Error::VectorLength);
    c.session_id = bspan(p + 1, sid);
    p += 1u + sid;
    if (p + 2 > hlen) return fail(Status::Malformed, Error::VectorLength);
    const uint16_t cs = rd16(h + p);
    if (cs < 2 || (cs & 1) || p + 2 + cs > hlen) return fail(Status::Malformed, Error::VectorLength);
    c.cipher_suites = bspan(p + 2, cs);
    for (uint32_t i = 0; i < cs; i += 2) c.has_grease |= is_grease(rd16(h + p + 2 + i));
    p += 2u + cs;
    if (p + 1 > hlen) return fail(Status::Malformed, Error::VectorLength);
    const uint8_t cm = h[p];
    if (cm < 1 || p + 1 + cm > hlen) return fail(Status::Malformed, Error::VectorLength);
    c.compression_methods = bspan(p + 1, cm);
    p += 1u + cm;
    if (p == hlen) return Status::Ok;  // no extensions (SSL 3.0 / old TLS)
    if (p + 2 > hlen) return fail(Status::Malformed, Error::VectorLength);
    const uint16_t el = rd16(h + p);
    if (p + 2 + el != hlen) return fail(Status::Malformed, Error::VectorLength);
    c.extensions = bspan(p + 2, el);
    p += 2;
    while (p < hlen) {
      if (p + 4 > hlen) return fail(Status::Malformed, Error::VectorLength);
      const uint16_t type = rd16(h + p), n = rd16(h + p + 2);
      if (p + 4 + n > hlen) return fail(Status::Malformed, Error::VectorLength);
      for (unsigned i = 0; i < c.n_ext; ++i)
        if (c.ext[i].type == type) return fail(Status::Malformed, Error::DuplicateExtension);
      if (c.n_ext >= ClientHello::kMaxExt) return fail(Status::Malformed, Error::Capacity);
      const uint32_t body = p + 4;
      c.ext[c.n_ext++] = {type, is_grease(type), bspan(body, n)};
      c.has_grease |= is_grease(type);
      switch (type) {
        case 0:
          if (Status s = sni(body, n); s != Status::Ok) return s;
          break;
        case 43: {  // supported_versions (ClientHello form: 1-byte list length)
          if (n < 1 || h[body] + 1u != n || (h[body] & 1)) return fail(Status::Malformed, Error::VectorLength);
          for (uint32_t i = 1; i < n; i += 2) {
            const uint16_t v = rd16(h + body + i);
            if (!is_grease(v) && v > c.max_supported_version) c.max_supported_version = v;
          }
          break;
        }
        case 0xfe0d:
          if (n < 1) return fail(Status::Malformed, Error::VectorLength);
          c.has_ech = true;
          c.ech_type = h[body];
          c.ech = bspan(body, n);
          if (c.ech_type == 0) {
            // outer: cipher_suite(4) config_id(1) enc<0..2^16-1> payload<1..2^16-1>
            if (!vectors16(body + 6, body + n, 2, 1)) return fail(Status::Malformed, Error::VectorLength);
          } else if (c.ech_type == 1) {
            if (n != 1) return fail(Status::Malformed, Error::VectorLength);
          }
          break;
        case 0xffce:
          // draft-ietf-tls-esni: suite(2) key_share{group(2) key<..>}
          // record_digest<..> encrypted_sni<..>
          c.has_esni = true;
          c.esni = bspan(body, n);
          if (!vectors16(body + 4, body + n, 3, 0)) return fail(Status::Malformed, Error::VectorLength);
          break;
        default:
          break;
      }
      p = body + n;
    }
    return Status::Ok;
  }
};

}  // namespace

namespace {
Status parse_any(const uint8_t* buf, size_t len, ClientHello& out, bool bare) {
  out.status = Status::Malformed;
  out.error = Error::None;
  out.need = 0;
  out.consumed = 0;
  out.record_version = out.legacy_version = out.max_supported_version = 0;
  out.hs_len = 0;
  out.n_records = 0;
  out.overflow = out.has_grease = out.has_ech = out.has_esni = false;
  out.ech_type = 0;
  out.random = out.session_id = out.cipher_suites = out.compression_methods = out.extensions = out.ech = out.esni = {};
  out.n_ext = 0;
  out.n_sni = 0;
  out.text_len = 0;
  out.n_frags = 0;
  Parser p{buf, len, out};
  p.bare = bare;
  if (Status s = p.records(); s != Status::Ok) return s;
  if (Status s = p.hello(); s != Status::Ok) return s;
  out.status = Status::Ok;
  return Status::Ok;
}
}  // namespace

Status parse_client_hello(const uint8_t* buf, size_t len, ClientHello& out) { return parse_any(buf, len, out, false); }

Status parse_client_hello_message(const uint8_t* buf, size_t len, ClientHello& out) {
  return parse_any(buf, len, out, true);
}

bool rewrite_sni(uint8_t* buf, size_t len, const ClientHello& ch, unsigned i, const names::Decision& d) {
  if (ch.status != Status::Ok || i >= ch.n_sni || ch.sni[i].span.off + ch.sni[i].span.len > len) return false;
  const Span& s = ch.sni[i].span;
  if (s.contiguous) {
    names::apply_to_text(reinterpret_cast<char*>(buf + s.off), s.len, d);
    return true;
  }
  // Straddles records: gather, rewrite, scatter. HostNames are <= 255 in
  // practice; longer split ones are redacted byte by byte instead.
  char tmp[1024];
  const bool fits = s.len <= sizeof tmp;
  uint32_t logical = 0;
  for (unsigned f = 0; f < ch.n_frags; ++f)
    if (s.off >= ch.frags[f].phys && s.off < ch.frags[f].phys + ch.frags[f].len)
      logical = ch.frags[f].logical + (s.off - ch.frags[f].phys);
  for (int pass = 0; pass < 2; ++pass) {
    uint32_t done = 0;
    for (unsigned f = 0; f < ch.n_frags && done < s.len; ++f) {
      const auto& fr = ch.frags[f];
      const uint32_t a = logical + done;
      if (a < fr.logical || a >= fr.logical + fr.len) continue;
      uint32_t n = fr.logical + fr.len - a;
      if (n > s.len - done) n = s.len - done;
      uint8_t* p = buf + fr.phys + (a - fr.logical);
      if (!fits) {
        if (pass == 0) for (uint32_t k = 0; k < n; ++k) if (p[k] != '.') p[k] = 'x';
      } else if (pass == 0) {
        std::memcpy(tmp + done, p, n);
      } else {
        std::memcpy(p, tmp + done, n);
      }
      done += n;
    }
    if (!fits) return true;
    if (pass == 0) names::apply_to_text(tmp, s.len, d);
  }
  return true;
}

}  // namespace amon::tls

namespace amon::tls {

bool find_sni_in_prefix(const uint8_t* b, size_t len, PrefixSni& out) {
  out.n = 0;
  auto u16 = [&](size_t o) { return uint32_t(b[o]) << 8 | b[o + 1]; };
  // Record header and handshake header: one handshake record, ClientHello.
  if (len < 9 || b[0] != 0x16 || b[1] != 0x03 || b[5] != 0x01) return false;
  const size_t rec_end = 5 + u16(3);
  const size_t end = std::min(len, rec_end);
  size_t o = 9 + 2 + 32;  // legacy_version, random
  if (o + 1 > end) return false;
  o += 1 + b[o];  // session id
  if (o + 2 > end) return false;
  o += 2 + u16(o);  // cipher suites
  if (o + 1 > end) return false;
  o += 1 + b[o];  // compression methods
  if (o + 2 > end) return false;
  const size_t ext_end = o + 2 + u16(o);
  o += 2;
  while (o + 4 <= end && o + 4 <= ext_end) {
    const uint32_t type = u16(o), elen = u16(o + 2);
    const size_t body = o + 4, bend = body + elen;
    if (bend > ext_end) return false;
    if (type == 0) {
      if (bend > end || elen < 2 || 2 + u16(body) != elen) return false;  // cut, or inconsistent
      for (size_t q = body + 2; q < bend;) {
        if (q + 3 > bend) return false;
        const uint32_t nl = u16(q + 1);
        if (q + 3 + nl > bend || nl == 0 || nl > 255) return false;
        if (b[q] == 0 && out.n < PrefixSni::kMax) {
          out.span[out.n] = {uint32_t(q + 3), nl, true};
          for (uint32_t k = 0; k < nl; ++k) {
            char c = char(b[q + 3 + k]);
            out.text[out.n][k] = (c >= 'A' && c <= 'Z') ? char(c + 32) : c;
          }
          out.text_len[out.n] = uint16_t(nl);
          ++out.n;
        }
        q += 3 + nl;
      }
      return out.n > 0;
    }
    o = bend;
  }
  return false;
}

uint16_t server_hello_version(const uint8_t* m, size_t len) {
  if (len < 4 || m[0] != 0x02) return 0;
  const size_t body = size_t(m[1]) << 16 | size_t(m[2]) << 8 | m[3];
  if (body + 4 > len || body < 38) return 0;
  const uint8_t* h = m + 4;
  const uint16_t legacy = rd16(h);
  size_t p = 2 + 32;
  const size_t sid = h[p];
  p += 1 + sid;
  if (p + 3 > body) return 0;
  p += 3;  // cipher suite, compression method
  if (p == body) return legacy;  // no extensions
  if (p + 2 > body) return 0;
  const size_t el = rd16(h + p);
  p += 2;
  if (p + el != body) return 0;
  while (p + 4 <= body) {
    const uint16_t type = rd16(h + p), n = rd16(h + p + 2);
    p += 4;
    if (p + n > body) return 0;
    if (type == 43) return n == 2 ? rd16(h + p) : 0;  // supported_versions: the selected version
    p += n;
  }
  return p == body ? legacy : 0;
}

}  // namespace amon::tls
