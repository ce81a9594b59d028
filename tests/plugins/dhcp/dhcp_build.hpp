// Builders for crafted DHCPv4 / DHCPv6 messages and the UDP frames that carry
// them (tests, fuzz corpus). Written from RFC 2131/2132, 3046, 4702, 8415,
// 4649, 4704, 6939 and 7341, not from the parser.
#pragma once
#include <pcap/pcap.h>

#include <cstdint>
#include <string>
#include <vector>

#include "l7_build.hpp"

namespace amon::l7test::dhcpb {

inline Bytes bytes(std::initializer_list<int> v) {
  Bytes b;
  for (int x : v) b.push_back(uint8_t(x));
  return b;
}
inline Bytes str(const std::string& s) { return Bytes(s.begin(), s.end()); }
inline Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The 236-byte BOOTP header (RFC 2131 figure 1) with the given chaddr.
inline Bytes v4_header(uint8_t op, const Bytes& chaddr, const Bytes& ciaddr = Bytes(4, 0),
                       const Bytes& yiaddr = Bytes(4, 0), uint32_t xid = 0x3903f326) {
  Bytes b;
  b.push_back(op);
  b.push_back(1);                      // htype Ethernet
  b.push_back(uint8_t(chaddr.size()));  // hlen
  b.push_back(0);                      // hops
  put32(b, xid);
  put16(b, 0);       // secs
  put16(b, 0x8000);  // flags: broadcast
  b.insert(b.end(), ciaddr.begin(), ciaddr.end());
  b.insert(b.end(), yiaddr.begin(), yiaddr.end());
  for (int i = 0; i < 8; ++i) b.push_back(0);  // siaddr, giaddr
  Bytes ch = chaddr;
  ch.resize(16, 0);
  b.insert(b.end(), ch.begin(), ch.end());
  b.resize(236, 0);  // sname (64), file (128)
  return b;
}
inline void cookie(Bytes& b) {
  b.push_back(99); b.push_back(130); b.push_back(83); b.push_back(99);
}
inline void opt(Bytes& b, uint8_t code, const Bytes& v) {
  b.push_back(code);
  b.push_back(uint8_t(v.size()));
  b.insert(b.end(), v.begin(), v.end());
}
// RFC 4702/4704 wire form: labels, root label when fully qualified.
inline Bytes fqdn_wire(const std::string& dotted, bool fully = true) {
  Bytes b;
  dns_name(b, dotted);  // DNS labels, ending in the root label
  if (!fully) b.pop_back();
  return b;
}

// DHCPv6
inline Bytes v6_msg(uint8_t type, uint32_t xid = 0x8e866d) {
  Bytes b;
  b.push_back(type);
  b.push_back(uint8_t(xid >> 16)); b.push_back(uint8_t(xid >> 8)); b.push_back(uint8_t(xid));
  return b;
}
inline void opt6(Bytes& b, uint16_t code, const Bytes& v) {
  put16(b, code);
  put16(b, uint16_t(v.size()));
  b.insert(b.end(), v.begin(), v.end());
}
inline Bytes o6(uint16_t code, const Bytes& v) {
  Bytes b;
  opt6(b, code, v);
  return b;
}
inline Bytes relay6(uint8_t type, uint8_t hops, const Bytes& link, const Bytes& peer) {
  Bytes b{type, hops};
  b.insert(b.end(), link.begin(), link.end());
  b.insert(b.end(), peer.begin(), peer.end());
  return b;
}
inline Bytes addr6(uint16_t a, uint16_t z) {  // a::z
  Bytes b(16, 0);
  b[0] = uint8_t(a >> 8); b[1] = uint8_t(a);
  b[14] = uint8_t(z >> 8); b[15] = uint8_t(z);
  return b;
}

// Frames: Ethernet / IPv4 or IPv6 / UDP, lengths and checksums correct (the
// Internet checksum written here from RFC 1071, not amon's).
inline uint32_t sum16(const uint8_t* p, size_t n, uint32_t s = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) s += uint32_t(p[i] << 8 | p[i + 1]);
  if (n & 1) s += uint32_t(p[n - 1] << 8);
  return s;
}
inline uint16_t fold(uint32_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return uint16_t(~s);
}
inline Bytes udp_frame(bool v6, uint16_t sport, uint16_t dport, const Bytes& payload) {
  Bytes f = bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x5e, 0x10, 0x20, 0x30});
  put16(f, v6 ? 0x86dd : 0x0800);
  const uint16_t ulen = uint16_t(8 + payload.size());
  Bytes src = v6 ? addr6(0xfe80, 0x1234) : bytes({192, 0, 2, 10});
  Bytes dst = v6 ? bytes({0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2}) : bytes({192, 0, 2, 1});
  const size_t ip = f.size();
  if (v6) {
    put32(f, 0x60000000);
    put16(f, ulen);
    f.push_back(17);
    f.push_back(64);
  } else {
    f.push_back(0x45); f.push_back(0);
    put16(f, uint16_t(20 + ulen));
    put32(f, 0);
    f.push_back(64); f.push_back(17);
    put16(f, 0);
  }
  f.insert(f.end(), src.begin(), src.end());
  f.insert(f.end(), dst.begin(), dst.end());
  if (!v6) set16(f, ip + 10, fold(sum16(f.data() + ip, 20)));
  const size_t u = f.size();
  put16(f, sport); put16(f, dport); put16(f, ulen); put16(f, 0);
  f.insert(f.end(), payload.begin(), payload.end());
  uint32_t s = sum16(src.data(), src.size()) + sum16(dst.data(), dst.size()) + 17 + ulen;
  uint16_t c = fold(sum16(f.data() + u, ulen, s));
  set16(f, u + 6, c ? c : 0xffff);
  return f;
}

inline bool write_pcap(const std::string& path, const std::vector<Bytes>& frames) {
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
  if (!dead) return false;
  pcap_dumper_t* d = pcap_dump_open(dead, path.c_str());
  if (!d) { pcap_close(dead); return false; }
  uint32_t t = 1700000000;
  for (const Bytes& f : frames) {
    pcap_pkthdr h{};
    h.ts.tv_sec = t++;
    h.caplen = h.len = uint32_t(f.size());
    pcap_dump(reinterpret_cast<u_char*>(d), &h, f.data());
  }
  pcap_dump_close(d);
  pcap_close(dead);
  return true;
}

}  // namespace amon::l7test::dhcpb
