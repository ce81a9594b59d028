// Builders for crafted DNS messages and TLS ClientHellos (tests, corpus, bench).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace amon::l7test {

using Bytes = std::vector<uint8_t>;

inline void put16(Bytes& b, uint16_t v) { b.push_back(uint8_t(v >> 8)); b.push_back(uint8_t(v)); }
inline void put32(Bytes& b, uint32_t v) { put16(b, uint16_t(v >> 16)); put16(b, uint16_t(v)); }
inline void set16(Bytes& b, size_t at, uint16_t v) { b[at] = uint8_t(v >> 8); b[at + 1] = uint8_t(v); }

// DNS
inline Bytes dns_header(uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar) {
  Bytes b;
  put16(b, id); put16(b, flags); put16(b, qd); put16(b, an); put16(b, ns); put16(b, ar);
  return b;
}
// Append "a.b.c" as labels; if ptr >= 0 end with a pointer instead of root.
inline size_t dns_name(Bytes& b, const std::string& dotted, int ptr = -1) {
  const size_t at = b.size();
  size_t s = 0;
  while (s < dotted.size()) {
    size_t e = dotted.find('.', s);
    if (e == std::string::npos) e = dotted.size();
    b.push_back(uint8_t(e - s));
    b.insert(b.end(), dotted.begin() + long(s), dotted.begin() + long(e));
    s = e + 1;
  }
  if (ptr >= 0) put16(b, uint16_t(0xc000 | ptr));
  else b.push_back(0);
  return at;
}
inline void dns_rr_fixed(Bytes& b, uint16_t type, uint16_t klass, uint32_t ttl, uint16_t rdlen) {
  put16(b, type); put16(b, klass); put32(b, ttl); put16(b, rdlen);
}

// A response: www.example.com CNAME cdn.example.com (compressed), cdn A, plus
// an authority NS and an additional AAAA and OPT with ECS.
inline Bytes dns_sample_response() {
  Bytes b = dns_header(0x1234, 0x8180, 1, 2, 1, 2);
  const size_t q = dns_name(b, "www.Example.com");   // 12
  put16(b, 1); put16(b, 1);
  dns_name(b, "", int(q));                           // answer owner -> www.example.com
  dns_rr_fixed(b, 5, 1, 300, 0);
  const size_t rdl = b.size() - 2, rd = b.size();
  const size_t cdn = dns_name(b, "cdn", int(q + 4)); // cdn + ptr to example.com
  set16(b, rdl, uint16_t(b.size() - rd));
  dns_name(b, "", int(cdn));
  dns_rr_fixed(b, 1, 1, 60, 4);
  b.insert(b.end(), {93, 184, 216, 34});
  dns_name(b, "", int(q + 4));                        // example.com NS ns1.example.com
  dns_rr_fixed(b, 2, 1, 3600, 0);
  const size_t rdl2 = b.size() - 2, rd2 = b.size();
  const size_t ns1 = dns_name(b, "ns1", int(q + 4));
  set16(b, rdl2, uint16_t(b.size() - rd2));
  dns_name(b, "", int(ns1));
  dns_rr_fixed(b, 28, 1, 3600, 16);
  for (int i = 0; i < 16; ++i) b.push_back(uint8_t(0x20 + i));
  b.push_back(0);                                     // OPT
  dns_rr_fixed(b, 41, 4096, 0, 4 + 4 + 3);
  put16(b, 8); put16(b, 7); put16(b, 1); b.push_back(24); b.push_back(0);
  b.insert(b.end(), {192, 0, 2});
  return b;
}

inline Bytes dns_query(const std::string& name, uint16_t qtype = 1) {
  Bytes b = dns_header(0x4242, 0x0100, 1, 0, 0, 0);
  dns_name(b, name);
  put16(b, qtype); put16(b, 1);
  return b;
}

// TLS
struct Ext { uint16_t type; Bytes body; };
inline Ext sni_ext(const std::vector<std::string>& names) {
  Bytes list;
  for (const auto& n : names) { list.push_back(0); put16(list, uint16_t(n.size())); list.insert(list.end(), n.begin(), n.end()); }
  Bytes body;
  put16(body, uint16_t(list.size()));
  body.insert(body.end(), list.begin(), list.end());
  return {0, body};
}
inline Bytes client_hello_body(uint16_t legacy, const std::vector<Ext>& exts, bool with_ext_block = true) {
  Bytes h;
  put16(h, legacy);
  for (int i = 0; i < 32; ++i) h.push_back(uint8_t(i));
  h.push_back(32);
  for (int i = 0; i < 32; ++i) h.push_back(uint8_t(0xa0 + i));
  put16(h, 6); put16(h, 0x1a1a); put16(h, 0x1301); put16(h, 0xc02f);
  h.push_back(1); h.push_back(0);
  if (with_ext_block) {
    Bytes e;
    for (const auto& x : exts) { put16(e, x.type); put16(e, uint16_t(x.body.size())); e.insert(e.end(), x.body.begin(), x.body.end()); }
    put16(h, uint16_t(e.size()));
    h.insert(h.end(), e.begin(), e.end());
  }
  Bytes hs;
  hs.push_back(1);
  hs.push_back(uint8_t(h.size() >> 16)); put16(hs, uint16_t(h.size()));
  hs.insert(hs.end(), h.begin(), h.end());
  return hs;
}
// Wrap handshake bytes in records of at most `frag` bytes.
inline Bytes records(const Bytes& hs, uint16_t rec_version, size_t frag = 16384) {
  Bytes r;
  for (size_t p = 0; p < hs.size(); p += frag) {
    const size_t n = std::min(frag, hs.size() - p);
    r.push_back(22); put16(r, rec_version); put16(r, uint16_t(n));
    r.insert(r.end(), hs.begin() + long(p), hs.begin() + long(p + n));
  }
  return r;
}
inline Bytes sample_client_hello(const std::string& sni = "www.Example.com", uint16_t rec = 0x0301, size_t frag = 16384) {
  Bytes sv; sv.push_back(6); put16(sv, 0x3a3a); put16(sv, 0x0304); put16(sv, 0x0303);
  return records(client_hello_body(0x0303, {{0x2a2a, {}}, sni_ext({sni}), {43, sv}, {10, {0, 2, 0, 0x1d}}}), rec, frag);
}

}  // namespace amon::l7test
