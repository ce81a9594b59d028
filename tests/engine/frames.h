// Crafted frames for the decoder and runtime tests, and an independent
// reference for the Internet checksum (written from RFC 1071/768/793/8200,
// not from plugins/crypto), so a shared bug cannot hide in both.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include <arpa/inet.h>

namespace amon_test {

using Bytes = std::vector<uint8_t>;

inline void put8(Bytes& b, unsigned v) { b.push_back(uint8_t(v)); }
inline void put16(Bytes& b, unsigned v) { b.push_back(uint8_t(v >> 8)), b.push_back(uint8_t(v)); }
inline void put32(Bytes& b, uint32_t v) { put16(b, v >> 16), put16(b, v & 0xffff); }
inline void put(Bytes& b, const Bytes& x) { b.insert(b.end(), x.begin(), x.end()); }
inline uint16_t get16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
inline void set16(uint8_t* p, unsigned v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); }

inline std::array<uint8_t, 4> v4(const char* s) {
  std::array<uint8_t, 4> a{};
  inet_pton(AF_INET, s, a.data());
  return a;
}
inline std::array<uint8_t, 16> v6(const char* s) {
  std::array<uint8_t, 16> a{};
  inet_pton(AF_INET6, s, a.data());
  return a;
}
inline std::string str4(const uint8_t* p) {
  char b[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, p, b, sizeof b);
  return b;
}
inline std::string str6(const uint8_t* p) {
  char b[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, p, b, sizeof b);
  return b;
}

// Plain ones-complement sum of 16-bit big-endian words, folded.
inline uint32_t ref_sum(const uint8_t* p, size_t n, uint32_t acc = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) acc += uint32_t(p[i] << 8 | p[i + 1]);
  if (n & 1) acc += uint32_t(p[n - 1] << 8);
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return acc;
}
inline uint16_t ref_fold(uint32_t acc) {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return uint16_t(~acc & 0xffff);
}

// Checksum field value for an L4 segment at seg (len bytes) with the field at
// seg+csum_off taken as zero. v6: 16-byte addresses, else 4. pseudo=false: ICMPv4.
inline uint16_t ref_l4_checksum(const uint8_t* src, const uint8_t* dst, bool v6, uint8_t proto, const uint8_t* seg,
                                size_t len, size_t csum_off, bool pseudo = true) {
  Bytes tmp(seg, seg + len);
  tmp[csum_off] = tmp[csum_off + 1] = 0;
  uint32_t acc = 0;
  if (pseudo) {
    size_t al = v6 ? 16 : 4;
    acc = ref_sum(src, al, acc);
    acc = ref_sum(dst, al, acc);
    acc += proto;
    acc += uint32_t(len & 0xffff) + uint32_t(len >> 16);
  }
  acc = ref_sum(tmp.data(), tmp.size(), acc);
  uint16_t c = ref_fold(acc);
  if (proto == 17 && c == 0) c = 0xffff;  // RFC 768: a computed 0 is sent as all ones
  return c;
}

inline uint16_t ref_ipv4_hdr_checksum(const uint8_t* ip, size_t ihl) {
  Bytes tmp(ip, ip + ihl);
  tmp[10] = tmp[11] = 0;
  return ref_fold(ref_sum(tmp.data(), ihl));
}

// Ethernet header; `tags` are (TPID, TCI) pairs inserted before `ethertype`.
inline Bytes eth(uint16_t ethertype, std::initializer_list<std::pair<uint16_t, uint16_t>> tags = {}) {
  Bytes b = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
  for (auto [tpid, tci] : tags) put16(b, tpid), put16(b, tci);
  put16(b, ethertype);
  return b;
}

inline Bytes tcp_hdr(uint16_t sport, uint16_t dport, uint8_t flags = 0x18, size_t opt_words = 0) {
  Bytes b;
  put16(b, sport), put16(b, dport), put32(b, 1000), put32(b, 2000);
  put8(b, uint8_t((5 + opt_words) << 4)), put8(b, flags), put16(b, 65535), put16(b, 0), put16(b, 0);
  for (size_t i = 0; i < opt_words; ++i) put32(b, 0x01010101);  // NOPs
  return b;
}
inline Bytes udp_hdr(uint16_t sport, uint16_t dport, uint16_t len) {
  Bytes b;
  put16(b, sport), put16(b, dport), put16(b, len), put16(b, 0);
  return b;
}
inline Bytes icmp_hdr(uint8_t type, uint8_t code, uint16_t id = 0x1234, uint16_t seq = 1) {
  Bytes b;
  put8(b, type), put8(b, code), put16(b, 0), put16(b, id), put16(b, seq);
  return b;
}
inline Bytes payload(size_t n, uint8_t seed = 1) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(seed + i * 7);
  return b;
}

struct V4 {
  std::array<uint8_t, 4> src = v4("192.0.2.1"), dst = v4("198.51.100.2");
  uint8_t proto = 6;
  uint16_t frag = 0x4000;  // DF
  size_t opt_words = 0;
  int tot_len = -1;        // -1: computed
  int ihl_words = -1;      // -1: computed
};

// IPv4 header + l4 (+ data), with a correct header checksum and, when
// fill_l4 is set, a correct TCP/UDP/ICMP checksum over everything after it.
inline Bytes ipv4(const V4& h, const Bytes& l4, bool fill_l4 = true) {
  Bytes b;
  size_t ihl = 20 + h.opt_words * 4;
  put8(b, 0x40 | (h.ihl_words >= 0 ? h.ihl_words : int(ihl / 4))), put8(b, 0);
  put16(b, h.tot_len >= 0 ? unsigned(h.tot_len) : unsigned(ihl + l4.size()));
  put16(b, 0x1111), put16(b, h.frag), put8(b, 64), put8(b, h.proto), put16(b, 0);
  b.insert(b.end(), h.src.begin(), h.src.end());
  b.insert(b.end(), h.dst.begin(), h.dst.end());
  for (size_t i = 0; i < h.opt_words; ++i) put32(b, 0x01010101);
  set16(&b[10], ref_ipv4_hdr_checksum(b.data(), ihl));
  size_t l4off = b.size();
  put(b, l4);
  if (fill_l4) {
    size_t co = h.proto == 6 ? 16 : h.proto == 17 ? 6 : h.proto == 1 ? 2 : 0;
    if (co && l4.size() >= co + 2)
      set16(&b[l4off + co], ref_l4_checksum(h.src.data(), h.dst.data(), false, h.proto, &b[l4off], l4.size(), co,
                                            h.proto != 1));
  }
  return b;
}

struct V6 {
  std::array<uint8_t, 16> src = v6("2001:db8::1"), dst = v6("2001:db8:1::2");
  uint8_t nh = 17;
  int plen = -1;
};

// IPv6 header + raw extension bytes + l4; the L4 checksum is filled for
// `l4_proto` (the upper layer after the extension headers).
inline Bytes ipv6(const V6& h, const Bytes& ext, uint8_t l4_proto, const Bytes& l4, bool fill_l4 = true) {
  Bytes b;
  put32(b, 0x60000000);
  put16(b, h.plen >= 0 ? unsigned(h.plen) : unsigned(ext.size() + l4.size()));
  put8(b, ext.empty() ? l4_proto : h.nh), put8(b, 64);  // no extension headers: the upper layer is next
  b.insert(b.end(), h.src.begin(), h.src.end());
  b.insert(b.end(), h.dst.begin(), h.dst.end());
  put(b, ext);
  size_t l4off = b.size();
  put(b, l4);
  size_t co = l4_proto == 6 ? 16 : l4_proto == 17 ? 6 : l4_proto == 58 ? 2 : 0;
  if (fill_l4 && co && l4.size() >= co + 2)
    set16(&b[l4off + co], ref_l4_checksum(h.src.data(), h.dst.data(), true, l4_proto, &b[l4off], l4.size(), co));
  return b;
}

// One IPv6 extension header of `len8` 8-byte units (len8 >= 1), options padded with PadN.
inline Bytes v6ext(uint8_t next, size_t len8, uint8_t first_bytes_after_len = 0) {
  Bytes b(len8 * 8, 0);
  b[0] = next;
  b[1] = uint8_t(len8 - 1);
  b[2] = first_bytes_after_len;
  return b;
}
inline Bytes v6frag(uint8_t next, uint16_t offset8, bool more, uint32_t id = 0xabcd) {
  Bytes b;
  put8(b, next), put8(b, 0), put16(b, unsigned(offset8 << 3 | (more ? 1 : 0))), put32(b, id);
  return b;
}

inline Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes b;
  for (auto& p : parts) put(b, p);
  return b;
}

// Encapsulation headers followed by what they carry.
inline Bytes vxlan(uint32_t vni, const Bytes& frame) {
  Bytes b;
  put32(b, 0x08000000), put32(b, vni << 8);
  put(b, frame);
  return b;
}
// A GTP-U G-PDU; ext: with a sequence/N-PDU word and one PDU session container.
inline Bytes gtpu(uint32_t teid, const Bytes& pkt, bool ext = false) {
  Bytes b;
  Bytes opt;
  if (ext) {
    put16(opt, 0), put8(opt, 0), put8(opt, 0x85);
    put8(opt, 1), put8(opt, 0x10), put8(opt, 0x09), put8(opt, 0);
  }
  put8(b, ext ? 0x34 : 0x30), put8(b, 0xff), put16(b, unsigned(opt.size() + pkt.size())), put32(b, teid);
  put(b, opt);
  put(b, pkt);
  return b;
}

}  // namespace amon_test
