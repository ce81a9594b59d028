// The decoder's pieces shared by its files: decode.cpp (link, IP, transport
// and the fast path of plain frames) and tunnels.cpp (the encapsulations).
// Private to plugins/l2l4.
#pragma once

#include <algorithm>
#include <cstdint>

#include "bytes.h"
#include "l2l4.h"

namespace amon::l2l4_decode {

constexpr uint16_t kEthIpv4 = 0x0800, kEthIpv6 = 0x86dd, kEthVlan = 0x8100, kEthQinq = 0x88a8,
                   kEthQinqOld = 0x9100, kEthMpls = 0x8847, kEthMplsMc = 0x8848, kEthPppoeSess = 0x8864;
constexpr int kMaxVlan = 4, kMaxMpls = 8, kMaxV6Ext = 8;

// UDP tunnels that carry whole frames or IP packets. Their payload holds
// other users' addresses: it is decoded as a packet of its own (descend),
// or, when that fails, cut for a consumer that protects addresses. VXLAN
// (RFC 7348), VXLAN-GPE and Geneve (RFC 8926) are sent to their port
// whatever the source: recognised by the destination port. GTP-U (3GPP TS
// 29.281), Teredo (RFC 4380) and AYIYA (a SixXS PoP answers from its port)
// use their port at either end. Windows and
// NAT gateways pick these ports as ephemeral ports too, so the datagram
// must also hold the tunnel's header (udp_tunnel): a DNS query from port
// 4789, and its answer to that port, are the plain UDP they are, never cut
// or dropped for failing to be a tunnel.
constexpr uint16_t kPortGtpU = 2152, kPortVxlan = 4789, kPortVxlanGpe = 4790, kPortGeneve = 6081,
                   kPortTeredo = 3544, kPortAyiya = 5072;
// The ports that may make a datagram a tunnel: the test every UDP packet
// takes before udp_tunnel's.
inline bool tunnel_ports(uint16_t sport, uint16_t dport) {
  return dport == kPortVxlan || dport == kPortGtpU || dport == kPortGeneve || dport == kPortVxlanGpe ||
         dport == kPortTeredo || dport == kPortAyiya || sport == kPortGtpU || sport == kPortTeredo ||
         sport == kPortAyiya;
}
// The tunnel a UDP datagram on such ports carries, Encap::None for plain
// UDP: [o, lim) the UDP payload, end the captured part of it (tunnels.cpp).
// What cannot be checked for want of captured bytes counts as the tunnel
// (its payload then stays opaque, fail closed).
Encap udp_tunnel(const uint8_t* p, uint32_t o, uint32_t end, uint32_t lim, uint16_t sport, uint16_t dport);
inline bool is_udp_tunnel(const uint8_t* p, uint32_t o, uint32_t end, uint32_t lim, uint16_t sport, uint16_t dport) {
  return tunnel_ports(sport, dport) && udp_tunnel(p, o, end, lim, sport, dport) != Encap::None;
}

// Teredo between two Teredo clients (RFC 4380 5.2.6) leaves port 3544: the
// peers talk from and to their NAT mappings, any port. Recognised by what it
// carries: an IPv6 header (after the optional authentication and origin
// indicators) that fits in the rest of the datagram (bubbles come padded)
// and names a Teredo address (2001:0::/32) at one end. [o, lim): the UDP payload; end:
// the captured part of it.
bool teredo_by_content(const uint8_t* p, uint32_t o, uint32_t end, uint32_t lim);

// A PIM Register (version 2, type 1) whose Null-Register bit is clear
// carries a multicast data packet after its 8-byte header (RFC 7761
// 4.9.3): [off, ip_end) the PIM message, cap the captured bytes. A
// Null-Register's dummy header, and a Register cut before its flags, are
// the PIM plugin's to parse.
inline bool pim_register_data(const uint8_t* p, uint32_t off, uint32_t cap, uint32_t ip_end) {
  return off + 8 <= cap && off + 8 < ip_end && p[off] == 0x21 && !(p[off + 4] & 0x40);
}

// From an EtherType `et` whose header ends at `off`: VLAN tags, a PPPoE
// session or an MPLS stack, then IP (decode.cpp).
void decode_link(const uint8_t* p, uint32_t cap, uint32_t off, uint16_t et, Decoded& d);
// Called with d decoded through an IP datagram whose payload is a tunnel
// (kFlagTunnel): decodes the packet it carries (tunnels.cpp).
void descend(const uint8_t* p, uint32_t cap, Decoded& d);
// A frame the fast path left at its UDP tunnel port (tunnels.cpp).
void decode_tunnel(const uint8_t* p, uint32_t cap, uint32_t wire_len, Decoded& d);

// The IP header both fast paths accept: IPv4 without options and not a
// fragment, or IPv6 (its next header is the caller's to accept), within
// `lim` and captured. Gives its length, the L4 offset and the protocol;
// false: the full way.
inline bool fast_ip(const uint8_t* p, uint32_t cap, uint32_t lim, uint32_t o, uint16_t et, uint32_t& l3_len,
                    uint32_t& l4, uint8_t& proto, Decoded& d) {
  if (et == kEthIpv4) {
    if (o + 20 > cap || p[o] != 0x45) return false;  // version 4, IHL 5
    l3_len = rd16(p + o + 2);
    if (l3_len < 20 || o + l3_len > lim || (rd16(p + o + 6) & 0x3fff)) return false;
    proto = p[o + 9];
    l4 = o + 20;
    d.ip_version = 4;
    return true;
  }
  if (et == kEthIpv6) {
    if (o + 40 > cap || (p[o] >> 4) != 6) return false;
    l3_len = 40 + rd16(p + o + 4);
    if (o + l3_len > lim) return false;
    proto = p[o + 6];
    l4 = o + 40;
    d.ip_version = 6;
    return true;
  }
  return false;
}

// The inner packet of the tunnelled frames most tunnels carry (decode_fast_tunnel):
// IPv4 without options or IPv6 without extension headers, not a fragment,
// TCP, UDP (not a tunnel's: that nests) or ICMP, its datagram within
// `lim` (what carries it) and every header captured. The same checks as
// decode_link, decode_ipv4|6 and decode_l4 make on such a packet.
inline bool decode_fast_inner(const uint8_t* p, uint32_t cap, uint32_t lim, uint32_t o, uint16_t et, Decoded& d) {
  uint32_t l3_len, l4;
  uint8_t proto;
  if (!fast_ip(p, cap, lim, o, et, l3_len, l4, proto, d)) return false;
  const uint32_t ip_end = o + l3_len;
  uint32_t hl = 8;
  uint8_t flags = kFlagEncap, tcp_flags = 0;
  if (proto == kProtoTcp) {
    if (l4 + 20 > ip_end || l4 + 20 > cap) return false;
    hl = (p[l4 + 12] >> 4) * 4u;
    if (hl < 20 || l4 + hl > ip_end || l4 + hl > cap) return false;
    tcp_flags = p[l4 + 13];
    if (hl > 20 && tcp_carries_addr(p + l4 + 20, hl - 20)) flags |= kFlagAddrBody;  // MPTCP ADD_ADDR
  } else if (proto == kProtoUdp) {
    if (l4 + 8 > ip_end || l4 + 8 > cap) return false;
    const uint32_t ulen = rd16(p + l4 + 4);
    if (ulen < 8 || ulen > ip_end - l4) return false;
    if (is_udp_tunnel(p, l4 + 8, std::min(cap, l4 + ulen), l4 + ulen, rd16(p + l4), rd16(p + l4 + 2))) return false;
    // Peer-to-peer Teredo nests too (decode_l4).
    if (ulen >= 48 && teredo_by_content(p, l4 + 8, std::min(cap, l4 + ulen), l4 + ulen)) return false;
    flags |= l4_class(kProtoUdp, rd16(p + l4), rd16(p + l4 + 2));  // RIP, RIPng route entries
  } else if (proto == kProtoIcmp || proto == kProtoIcmpv6) {
    if (l4 + 8 > ip_end || l4 + 8 > cap) return false;
    flags |= l4_class(proto, uint16_t(p[l4] << 8), 0);
  } else {
    return false;
  }
  if (proto == kProtoIcmp || proto == kProtoIcmpv6) {
    d.sport = uint16_t(p[l4] << 8 | p[l4 + 1]);
    d.dport = rd16(p + l4 + 4);
  } else {
    d.sport = rd16(p + l4);
    d.dport = rd16(p + l4 + 2);
  }
  const uint32_t pay = l4 + hl;
  d.status = DecodeStatus::Ok;
  d.ethertype = et;
  d.l3_off = uint16_t(o);
  d.l3_hdr_len = uint16_t(l4 - o);
  d.l3_len = l3_len;
  d.flags = flags;
  d.l4_proto = proto;
  d.tcp_flags = tcp_flags;
  d.l4_off = l4;
  d.l4_hdr_len = uint16_t(hl);
  d.payload_off = pay;
  d.payload_len = ip_end - pay;
  d.good_until = pay;
  return true;
}

}  // namespace amon::l2l4_decode
