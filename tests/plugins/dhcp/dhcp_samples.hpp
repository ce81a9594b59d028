// Crafted DHCP messages with every located field, for the tests and the
// fuzz corpus. Values are easy to spot in tshark's output.
#pragma once
#include "dhcp_build.hpp"

namespace amon::l7test::dhcpb {

struct Sample {
  const char* name;
  bool v6;
  Bytes msg;
};

inline const Bytes kMac = bytes({0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc});

// Discover with host name, client id, vendor class, requested address,
// client FQDN in wire form, relay agent information, machine UUID.
inline Bytes v4_discover() {
  Bytes b = v4_header(1, kMac);
  cookie(b);
  opt(b, 53, bytes({1}));
  opt(b, 61, cat(bytes({1}), kMac));
  opt(b, 12, str("Alices-Laptop"));
  opt(b, 60, str("MSFT 5.0"));
  opt(b, 50, bytes({192, 0, 2, 77}));
  opt(b, 81, cat(bytes({0x05, 0, 0}), fqdn_wire("alices-laptop.corp.example.com")));
  opt(b, 97, cat(bytes({0}), Bytes{0x4c, 0x4c, 0x45, 0x44, 0x00, 0x54, 0x35, 0x10,
                                    0x80, 0x38, 0xb4, 0xc0, 0x4f, 0x39, 0x31, 0x32}));
  Bytes ai;
  opt(ai, 1, str("eth0/1/7:vlan42"));
  opt(ai, 2, bytes({0x00, 0x11, 0x22, 0x33, 0x44, 0x55}));
  opt(b, 82, ai);
  opt(b, 55, bytes({1, 3, 6, 15}));
  b.push_back(255);
  while (b.size() < 300) b.push_back(0);
  return b;
}

// ACK with yiaddr, ciaddr, the FQDN in the deprecated ASCII form, options
// overloaded into file and sname (RFC 2131 4.1).
inline Bytes v4_ack_overload() {
  Bytes b = v4_header(2, kMac, bytes({192, 0, 2, 77}), bytes({192, 0, 2, 77}));
  Bytes file;
  opt(file, 12, str("alices-laptop"));
  file.push_back(255);
  file.resize(128, 0);
  Bytes sname;
  opt(sname, 61, cat(bytes({1}), kMac));
  sname.push_back(255);
  sname.resize(64, 0);
  std::copy(sname.begin(), sname.end(), b.begin() + 44);
  std::copy(file.begin(), file.end(), b.begin() + 108);
  cookie(b);
  opt(b, 53, bytes({5}));
  opt(b, 54, bytes({192, 0, 2, 1}));
  opt(b, 52, bytes({3}));
  opt(b, 51, bytes({0, 1, 0x51, 0x80}));
  opt(b, 81, cat(bytes({0x01, 0xff, 0xff}), str("alices-laptop.corp.example.com")));
  b.push_back(255);
  return b;
}

inline Bytes duid_llt() { return cat(bytes({0, 1, 0, 1, 0x1d, 0x11, 0x0a, 0x8c}), kMac); }
inline Bytes duid_ll() { return cat(bytes({0, 3, 0, 1}), kMac); }

// Solicit: client DUID-LLT, IA_NA with an address, IA_TA, IA_PD with a
// prefix, client FQDN, vendor class with two items, link-layer address.
inline Bytes v6_solicit() {
  Bytes b = v6_msg(1);
  opt6(b, 8, bytes({0, 0}));
  opt6(b, 1, duid_llt());
  Bytes iaaddr = cat(addr6(0x2001, 0x0db8), bytes({0, 0, 0x0e, 0x10, 0, 0, 0x1c, 0x20}));
  iaaddr[2] = 0x0d; iaaddr[3] = 0xb8;  // 2001:db8::db8
  opt6(b, 3, cat(bytes({0x0e, 0, 0x50, 0x56, 0, 0, 0, 0, 0, 0, 0, 0}), o6(5, iaaddr)));
  Bytes ta = addr6(0x2001, 0x7a7a);
  ta[2] = 0x0d; ta[3] = 0xb8;
  opt6(b, 4, cat(bytes({0, 0, 0, 2}), o6(5, cat(ta, bytes({0, 0, 0, 0, 0, 0, 0, 0})))));
  Bytes pfx = addr6(0x2001, 0);
  pfx[2] = 0x0d; pfx[3] = 0xb8; pfx[4] = 0x12; pfx[5] = 0x34; pfx[6] = 0x56; pfx[7] = 0x00;
  opt6(b, 25, cat(bytes({0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0}),
                  o6(26, cat(bytes({0, 0, 0x0e, 0x10, 0, 0, 0x1c, 0x20, 56}), pfx))));
  opt6(b, 39, cat(bytes({0x01}), fqdn_wire("alices-laptop.corp.example.com")));
  Bytes vc = bytes({0, 0, 0x01, 0x37});
  put16(vc, 8);
  vc = cat(vc, str("MSFT 5.0"));
  put16(vc, 6);
  vc = cat(vc, str("Laptop"));
  opt6(b, 16, vc);
  opt6(b, 6, bytes({0, 23, 0, 24, 0, 39}));
  return b;
}

// Relay-forward of a relay-forward of the Solicit, with the relays'
// interface-id, remote-id, subscriber-id and client link-layer address.
inline Bytes v6_relayed() {
  Bytes inner = relay6(12, 0, addr6(0x2001, 1), addr6(0xfe80, 0x0a0b));
  inner[2] = 0x20; inner[3] = 0x01;
  opt6(inner, 18, str("Gi0/0/1.42"));
  opt6(inner, 79, cat(bytes({0, 1}), kMac));
  opt6(inner, 9, v6_solicit());
  Bytes outer = relay6(12, 1, addr6(0x2001, 2), addr6(0x2001, 3));
  opt6(outer, 37, cat(bytes({0, 0, 0x0d, 0xe9}), str("subscriber-line-7")));
  opt6(outer, 38, str("sub-1234"));
  opt6(outer, 9, inner);
  return outer;
}

// Reply with the server DUID-LL and the client's lease.
inline Bytes v6_reply() {
  Bytes b = v6_msg(7);
  opt6(b, 1, duid_llt());
  opt6(b, 2, duid_ll());
  Bytes iaaddr = cat(addr6(0x2001, 0x0db8), bytes({0, 0, 0x0e, 0x10, 0, 0, 0x1c, 0x20}));
  opt6(b, 3, cat(bytes({0x0e, 0, 0x50, 0x56, 0, 0, 0x07, 0x08, 0, 0, 0x0b, 0x40}), o6(5, iaaddr)));
  return b;
}

// DHCPv4 over DHCPv6 (RFC 7341): DHCPV4-QUERY carrying the Discover.
inline Bytes v6_4o6() {
  Bytes b = v6_msg(20, 0);
  opt6(b, 87, v4_discover());
  return b;
}

// A home gateway's Request (Broadband Forum TR-111): V-I vendor class
// (option 124) and V-I vendor-specific information (125) with the device's
// and the gateway's OUI, serial number and product class; a user class.
inline Bytes v4_request_cpe() {
  Bytes b = v4_header(1, kMac);
  cookie(b);
  opt(b, 53, bytes({3}));
  opt(b, 50, bytes({100, 64, 7, 9}));
  Bytes sub;
  opt(sub, 1, str("00D09E"));
  opt(sub, 2, str("SN123456789"));
  opt(sub, 3, str("HGW-5"));
  opt(sub, 4, str("001B21"));
  opt(sub, 5, str("GW-SERIAL-42"));
  opt(sub, 6, str("STB"));
  Bytes vi = bytes({0, 0, 0x0d, 0xe9});
  vi.push_back(uint8_t(sub.size()));
  opt(b, 125, cat(vi, sub));
  Bytes items;
  items.push_back(8);
  items = cat(items, str("dslforum"));
  items.push_back(3);
  items = cat(items, str("hgw"));
  Bytes vc = bytes({0, 0, 0x0d, 0xe9});
  vc.push_back(uint8_t(items.size()));
  opt(b, 124, cat(vc, items));
  opt(b, 77, str("iPXE"));
  b.push_back(255);
  return b;
}

// The same box over DHCPv6 (TR-124: vendor-specific information, option 17).
inline Bytes v6_inforeq_cpe() {
  Bytes b = v6_msg(11);
  opt6(b, 1, duid_llt());
  Bytes vo = bytes({0, 0, 0x0d, 0xe9});
  opt6(vo, 11, str("001B21"));
  opt6(vo, 12, str("SER-V6-77"));
  opt6(vo, 13, str("STB"));
  opt6(b, 17, vo);
  opt6(b, 17, cat(bytes({0, 0, 0x01, 0x37}), str("opaque vendor data")));  // another enterprise: not read
  return b;
}

inline std::vector<Sample> samples() {
  return {{"v4_discover", false, v4_discover()}, {"v4_ack_overload", false, v4_ack_overload()},
          {"v6_solicit", true, v6_solicit()},    {"v6_relayed", true, v6_relayed()},
          {"v6_reply", true, v6_reply()},        {"v6_4o6", true, v6_4o6()},
          {"v4_request_cpe", false, v4_request_cpe()}, {"v6_inforeq_cpe", true, v6_inforeq_cpe()}};
}

inline Bytes sample_frame(const Sample& s) {
  return s.v6 ? udp_frame(true, 547, 547, s.msg) : udp_frame(false, 68, 67, s.msg);
}

}  // namespace amon::l7test::dhcpb
