// The encapsulations the decoder descends through: GTP-U v1, VXLAN,
// VXLAN-GPE, Geneve, GRE (v0 with ERSPAN, PPTP's v1), IP in IP, Teredo, AYIYA,
// a PIM Register's data packet; the
// tunnel context of the flow key; the fast path of one GTP-U or VXLAN layer.
#include <algorithm>
#include <cstring>
#include <utility>

#include "decode_impl.h"

namespace amon {

namespace l2l4_decode {

namespace {

// Where the IPv6 header of a Teredo datagram would start, after the
// optional authentication and origin indicators: [o, lim) the UDP payload,
// end the captured part of it.
uint32_t teredo_ipv6_at(const uint8_t* p, uint32_t o, uint32_t end) {
  uint32_t q = o;
  if (q + 4 <= end && p[q] == 0 && p[q + 1] == 1) q += 4 + p[q + 2] + p[q + 3] + 9;
  if (q + 2 <= end && p[q] == 0 && p[q + 1] == 0) q += 8;
  return q;
}

bool teredo_address(const uint8_t* a) { return a[0] == 0x20 && a[1] == 0x01 && a[2] == 0 && a[3] == 0; }

// An IPv6 header at q that fits in the rest of the datagram (bubbles come padded).
bool ipv6_fits(const uint8_t* p, uint32_t q, uint32_t end, uint32_t lim) {
  return q + 40 <= end && (p[q] >> 4) == 6 && uint32_t(p[q + 4] << 8 | p[q + 5]) + 40 <= lim - q;
}

// A datagram from or to the GTP-U port holds GTP-U: a version 1 header
// (protocol type GTP) of a GTP-U message type (TS 29.281 6.1). A G-PDU fits
// in the datagram and its packet, where captured, starts with an IPv4 or
// IPv6 header (extension headers are parse_gtpu's to follow; an inner
// datagram longer than its carrier is a malformed tunnel, not plain UDP:
// the decoder says so and the runtime fails closed); a signalling message is the rest of the datagram exactly, with
// the sequence number the specification requires of echo, error
// indication and extension header notification.
bool gtpu_plausible(const uint8_t* p, uint32_t o, uint32_t end, uint32_t lim) {
  if (o + 8 > end) return o + 8 <= lim;  // not captured: fail closed
  const uint8_t fl = p[o], type = p[o + 1];
  const uint32_t gend = o + 8 + rd16(p + o + 2);
  if ((fl >> 5) != 1 || !(fl & 0x10) || gend > lim) return false;
  if (type != 0xff) {
    if (gend != lim) return false;
    if (type == 1 || type == 2 || type == 26 || type == 31) return fl & 0x02;
    return type == 253 || type == 254;  // tunnel status, end marker
  }
  if (fl & 0x07) return true;  // optional fields and extension headers: parse_gtpu
  const uint32_t q = o + 8;
  if (q >= end) return true;  // not captured: fail closed
  return (p[q] >> 4) == 6 || (p[q] >> 4 == 4 && (p[q] & 0xf) >= 5);
}

// A datagram from or to the Teredo port holds an IPv6 packet that fits in
// it, from or to a Teredo address (2001:0::/32), or from a link-local one
// (a client's qualification: its router solicitation to the server).
bool teredo_plausible(const uint8_t* p, uint32_t o, uint32_t end, uint32_t lim) {
  const uint32_t q = teredo_ipv6_at(p, o, end);
  if (q + 40 > end) return q + 40 <= lim;  // not captured: fail closed
  if (!ipv6_fits(p, q, end, lim)) return false;
  return teredo_address(p + q + 8) || teredo_address(p + q + 24) || (p[q + 8] == 0xfe && (p[q + 9] & 0xc0) == 0x80);
}

// AYIYA (draft-massar-v6ops-ayiya, SixXS tunnels through NAT): an 8-byte
// header (identity length as a power of two and type, signature length in
// 4-byte words and hash, authentication method and opcode, next header,
// epoch time), the identity, the signature, then the packet. Each of those
// small enumerations within its defined values; a forwarded packet (opcode
// forward, or echo request and forward) of IPv4 or IPv6 that is what its
// next header says and fits in the datagram; any other message carries no
// packet (next header 59).
uint32_t ayiya_payload_at(const uint8_t* p, uint32_t o) {
  return o + 8 + (1u << (p[o] >> 4)) + (p[o + 1] >> 4) * 4u;
}

bool ayiya_forwards(const uint8_t* p, uint32_t o) {
  const uint8_t op = p[o + 2] & 0x0f, nh = p[o + 3];
  return (op == 1 || op == 3) && (nh == kProtoIpIp || nh == kProtoIpv6);
}

bool ayiya_plausible(const uint8_t* p, uint32_t o, uint32_t end, uint32_t lim) {
  if (o + 8 > end) return o + 8 <= lim;  // not captured: fail closed
  const uint8_t idlen = p[o] >> 4, idtype = p[o] & 0x0f, hash = p[o + 1] & 0x0f, auth = p[o + 2] >> 4,
                op = p[o + 2] & 0x0f;
  if (idlen > 8 || idtype > 2 || hash > 2 || auth > 2 || op > 7) return false;
  const uint32_t q = ayiya_payload_at(p, o);
  if (q > lim) return false;
  if (!ayiya_forwards(p, o)) return p[o + 3] == 59;
  if (q >= end) return q < lim;  // not captured: fail closed
  if (p[o + 3] == kProtoIpv6) return ipv6_fits(p, q, end, lim) || (q + 40 > end && (p[q] >> 4) == 6);
  return (p[q] >> 4) == 4 && (p[q] & 0x0f) >= 5 && (q + 4 > end || rd16(p + q + 2) <= lim - q);
}

}  // namespace

// Peer-to-peer Teredo: the IPv6 packet names a Teredo address at one end.
bool teredo_by_content(const uint8_t* p, uint32_t o, uint32_t end, uint32_t lim) {
  const uint32_t q = teredo_ipv6_at(p, o, end);
  return ipv6_fits(p, q, end, lim) && (teredo_address(p + q + 8) || teredo_address(p + q + 24));
}

namespace {
// A datagram to the VXLAN (RFC 7348), VXLAN-GPE or Geneve (RFC 8926) port
// holds such a header: the I flag (VXLAN, VXLAN-GPE) or version 0 (Geneve,
// VXLAN-GPE), the reserved bits zero (VXLAN's bytes 1-3 carry a group
// policy when its G flag is set), the options within the datagram and, for
// Geneve, a protocol it is known to carry (Ethernet, IP, MPLS, NSH). What
// it carries may still be unknown to the decoder: such a tunnel stays
// opaque, as before.
bool vni_header_plausible(Encap k, const uint8_t* p, uint32_t o, uint32_t end, uint32_t lim) {
  if (o + 8 > end) return o + 8 <= lim;  // not captured: fail closed
  const uint8_t fl = p[o];
  if (p[o + 7] != 0) return false;
  switch (k) {
    case Encap::Vxlan: return (fl & 0x08) && ((fl & 0x80) || (p[o + 1] | p[o + 2] | p[o + 3]) == 0);
    case Encap::VxlanGpe: return (fl & 0x08) && !(fl & 0x30) && p[o + 1] == 0 && p[o + 2] == 0;
    default: {  // Geneve: an EtherType it is known to carry
      const uint16_t et = rd16(p + o + 2);
      return (fl >> 6) == 0 && (p[o + 1] & 0x3f) == 0 && o + 8 + (fl & 0x3f) * 4u <= lim &&
             (et == 0x6558 || et == kEthIpv4 || et == kEthIpv6 || et == kEthMpls || et == kEthMplsMc || et == 0x894f);
    }
  }
}
}  // namespace

Encap udp_tunnel(const uint8_t* p, uint32_t o, uint32_t end, uint32_t lim, uint16_t sport, uint16_t dport) {
  if ((sport == kPortGtpU || dport == kPortGtpU) && gtpu_plausible(p, o, end, lim)) return Encap::GtpU;
  for (const auto& [port, k] : {std::pair{kPortVxlan, Encap::Vxlan}, std::pair{kPortVxlanGpe, Encap::VxlanGpe},
                               std::pair{kPortGeneve, Encap::Geneve}})
    if (dport == port && vni_header_plausible(k, p, o, end, lim)) return k;
  if ((sport == kPortTeredo || dport == kPortTeredo) && teredo_plausible(p, o, end, lim)) return Encap::Teredo;
  if ((sport == kPortAyiya || dport == kPortAyiya) && ayiya_plausible(p, o, end, lim)) return Encap::Ayiya;
  return Encap::None;
}

namespace {

// What an encapsulation header says it carries.
enum class Next : uint8_t { None, Eth, Ip4, Ip6, IpNibble, Mpls };

Next from_ethertype(uint16_t et) {
  switch (et) {
    case kEthIpv4: return Next::Ip4;
    case kEthIpv6: return Next::Ip6;
    case 0x6558: return Next::Eth;  // transparent Ethernet bridging
    case kEthMpls: case kEthMplsMc: return Next::Mpls;
    default: return Next::None;
  }
}

// GTP-U v1 (3GPP TS 29.281): only G-PDUs carry user packets; signalling
// (echo, error indication, end marker) and GTP' are left opaque.
Next parse_gtpu(const uint8_t* p, uint32_t o, uint32_t end, EncapLayer& L, uint32_t& inner) {
  if (o + 8 > end) return Next::None;
  const uint8_t fl = p[o];
  if ((fl >> 5) != 1 || !(fl & 0x10) || p[o + 1] != 0xff) return Next::None;
  const uint32_t len = rd16(p + o + 2);
  if (o + 8 + len > end) return Next::None;
  const uint32_t gend = o + 8 + len;
  L.id = uint32_t(p[o + 4]) << 24 | uint32_t(p[o + 5]) << 16 | uint32_t(p[o + 6]) << 8 | p[o + 7];
  L.has_id = 1;
  uint32_t q = o + 8;
  if (fl & 0x07) {  // E, S or PN: sequence number, N-PDU number, next extension type
    if (q + 4 > gend) return Next::None;
    uint8_t next = p[q + 3];
    q += 4;
    for (int i = 0; next != 0; ++i) {  // extension headers: length in 4-byte units, next type last
      if (i == 16 || !(fl & 0x04) || q + 1 > gend) return Next::None;
      const uint32_t el = p[q] * 4u;
      if (el == 0 || q + el > gend) return Next::None;
      next = p[q + el - 1];
      q += el;
    }
  }
  inner = q;
  return q < gend ? Next::IpNibble : Next::None;
}

Next parse_vxlan(const uint8_t* p, uint32_t o, uint32_t end, EncapLayer& L, uint32_t& inner) {
  if (o + 8 > end || !(p[o] & 0x08)) return Next::None;  // I flag: the VNI is valid
  L.id = uint32_t(p[o + 4]) << 16 | uint32_t(p[o + 5]) << 8 | p[o + 6];
  L.has_id = 1;
  inner = o + 8;
  return Next::Eth;
}

// VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe): the next protocol is named.
Next parse_vxlan_gpe(const uint8_t* p, uint32_t o, uint32_t end, EncapLayer& L, uint32_t& inner) {
  if (o + 8 > end || !(p[o] & 0x08) || (p[o] & 0x30)) return Next::None;  // I set, version 0
  L.id = uint32_t(p[o + 4]) << 16 | uint32_t(p[o + 5]) << 8 | p[o + 6];
  L.has_id = 1;
  inner = o + 8;
  if (!(p[o] & 0x04)) return Next::Eth;  // no P flag: Ethernet, as VXLAN
  switch (p[o + 3]) {
    case 1: return Next::Ip4;
    case 2: return Next::Ip6;
    case 3: return Next::Eth;
    case 5: return Next::Mpls;
    default: return Next::None;  // NSH and the rest
  }
}

// Geneve (RFC 8926): options are skipped by their total length; they are
// the fabric's metadata and stay as they are.
Next parse_geneve(const uint8_t* p, uint32_t o, uint32_t end, EncapLayer& L, uint32_t& inner) {
  if (o + 8 > end || (p[o] >> 6) != 0) return Next::None;
  const uint32_t hl = 8 + (p[o] & 0x3f) * 4u;
  if (o + hl > end) return Next::None;
  L.id = uint32_t(p[o + 4]) << 16 | uint32_t(p[o + 5]) << 8 | p[o + 6];
  L.has_id = 1;
  inner = o + hl;
  return from_ethertype(rd16(p + o + 2));
}

// PPTP's enhanced GRE (version 1, RFC 2637 4.1) carrying PPP: IPv4 and
// IPv6 datagrams are decoded; PPP's own control protocols (LCP, PAP and
// CHAP with the user's name and credentials, IPCP with the address it is
// given) and compressed or encrypted (MPPE) frames stay opaque. The key
// field is the payload length and the call ID, not an identifier a policy
// could rewrite (has_id stays 0).
Next parse_gre_v1(const uint8_t* p, uint32_t o, uint32_t end, uint16_t fl, uint32_t& inner) {
  // Key present, no checksum or routing, protocol PPP.
  if ((fl & 0xe000) != 0x2000 || rd16(p + o + 2) != 0x880b) return Next::None;
  if (!(fl & 0x1000)) return Next::None;  // no sequence number: an acknowledgement without payload
  uint32_t q = o + 12 + ((fl & 0x0080) ? 4u : 0u);
  if (q + 1 > end) return Next::None;
  // The payload length covers the PPP frame (a cut shortens it: encap_fix).
  if (q + rd16(p + o + 4) > end) return Next::None;
  if (q + 2 <= end && p[q] == 0xff && p[q + 1] == 0x03) q += 2;  // address and control, unless compressed away
  if (q + 1 > end) return Next::None;
  uint16_t proto;
  if (p[q] & 1) {  // protocol field compression: one byte
    proto = p[q];
    q += 1;
  } else {
    if (q + 2 > end) return Next::None;
    proto = rd16(p + q);
    q += 2;
  }
  inner = q;
  if (proto == 0x21) return Next::Ip4;
  if (proto == 0x57) return Next::Ip6;
  return Next::None;
}

// GRE version 0 (RFC 2784/2890) with checksum, key and sequence number;
// ERSPAN type I (no header), II and III (with its platform subheader).
// Source routing (R) is left opaque.
Next parse_gre(const uint8_t* p, uint32_t o, uint32_t end, EncapLayer& L, uint32_t& inner) {
  if (o + 4 > end) return Next::None;
  const uint16_t fl = rd16(p + o);
  if ((fl & 0x0007) == 1) {
    if (o + 8 > end) return Next::None;
    L.gre_v1 = 1;
    return parse_gre_v1(p, o, end, fl, inner);
  }
  if ((fl & 0x4000) || (fl & 0x0007) != 0) return Next::None;
  uint32_t q = o + 4;
  if (fl & 0x8000) L.gre_csum = 1, q += 4;
  if (fl & 0x2000) {
    if (q + 4 > end) return Next::None;
    L.id = uint32_t(p[q]) << 24 | uint32_t(p[q + 1]) << 16 | uint32_t(p[q + 2]) << 8 | p[q + 3];
    L.has_id = 1;
    q += 4;
  }
  const bool seq = fl & 0x1000;
  if (seq) q += 4;
  if (q > end) return Next::None;
  const uint16_t proto = rd16(p + o + 2);
  if (proto == 0x88be) {
    L.kind = Encap::Erspan;
    if (!seq) {  // type I: the mirrored frame follows the GRE header
      inner = q;
      return Next::Eth;
    }
    if (q + 8 > end || (p[q] >> 4) != 1) return Next::None;  // type II header, version 1
    inner = q + 8;
    return Next::Eth;
  }
  if (proto == 0x22eb) {  // type III
    L.kind = Encap::Erspan;
    if (q + 12 > end || (p[q] >> 4) != 2) return Next::None;
    const uint8_t ft = (p[q + 10] >> 2) & 0x1f;
    uint32_t hl = 12 + ((p[q + 11] & 1) ? 8u : 0u);  // O: platform-specific subheader
    if (ft != 0 || q + hl > end) return Next::None;  // frame type 0: Ethernet
    inner = q + hl;
    return Next::Eth;
  }
  inner = q;
  return from_ethertype(proto);
}

// Teredo (RFC 4380): IPv6 in UDP, after an optional authentication
// indicator and origin indication.
Next parse_teredo(const uint8_t* p, uint32_t o, uint32_t end, uint32_t& inner) {
  uint32_t q = o;
  if (q + 2 <= end && rd16(p + q) == 0x0001) {
    if (q + 4 > end) return Next::None;
    q += 4 + p[q + 2] + p[q + 3] + 9;  // client id, authentication value, nonce, confirmation
  }
  if (q + 2 <= end && rd16(p + q) == 0x0000) q += 8;
  if (q + 40 > end || (p[q] >> 4) != 6) return Next::None;
  inner = q;
  return Next::Ip6;
}

// AYIYA: the packet after the identity and signature, when the message
// forwards one; heartbeats, echoes and queries carry none (opaque).
Next parse_ayiya(const uint8_t* p, uint32_t o, uint32_t end, uint32_t& inner) {
  if (o + 8 > end || !ayiya_forwards(p, o)) return Next::None;
  inner = ayiya_payload_at(p, o);
  if (inner >= end) return Next::None;
  return p[o + 3] == kProtoIpv6 ? Next::Ip6 : Next::Ip4;
}

// Mixes one layer into the tunnel context: the encapsulation, the outer
// endpoints ordered (so both directions of an inner flow share it) and,
// for VXLAN, VXLAN-GPE and Geneve, the VNI (the same both ways). Not GTP-U's
// TEID (each direction of a bearer has its own) nor a GRE key (mirror
// sessions mark the direction there, as in tunnel-erspan.pcap; NVGRE puts
// per-flow entropy in its low byte).
inline void tunnel_context(const uint8_t* p, const EncapLayer& L, uint64_t& h) {
  // Two CRC32-C lanes with different seeds over the same words: 64 bits,
  // a few instructions per word (the flow key's hash uses the same unit).
  uint32_t a = uint32_t(h >> 32) ^ 0x9e3779b9u, b = uint32_t(h) ^ 0x7f4a7c15u;
  auto mix = [&](uint64_t w) {
    a = uint32_t(__builtin_ia32_crc32di(a, w));
    b = uint32_t(__builtin_ia32_crc32di(b, w ^ 0x5bd1e9955bd1e995ULL));
  };
  const bool vni = L.has_id && (L.kind == Encap::Vxlan || L.kind == Encap::VxlanGpe || L.kind == Encap::Geneve);
  mix(uint64_t(L.kind) | uint64_t(L.ip_version) << 8 | (vni ? uint64_t(L.id) << 16 | 1ULL << 48 : 0));
  const uint8_t* s = p + L.l3_off + (L.ip_version == 4 ? 12 : 8);
  if (L.ip_version == 4) {
    uint32_t x, y;
    std::memcpy(&x, s, 4);
    std::memcpy(&y, s + 4, 4);
    x = __builtin_bswap32(x), y = __builtin_bswap32(y);
    mix(x < y ? uint64_t(x) << 32 | y : uint64_t(y) << 32 | x);
  } else {
    const uint8_t* t = s + 16;
    if (std::memcmp(s, t, 16) > 0) std::swap(s, t);
    uint64_t w[4];
    std::memcpy(w, s, 16);
    std::memcpy(w + 2, t, 16);
    for (uint64_t x : w) mix(x);
  }
  h = (uint64_t(a) << 32 | b) | 1;
}


// One GTP-U G-PDU or VXLAN layer over the frame decode_fast takes (it
// stopped at the UDP header, d holding the outer IP fields and the ports),
// carrying a packet decode_fast_inner takes: most tunnelled traffic. The result is the full
// decoder's (descend's) to the field; anything else returns false.
// Without it a GTP-U packet cost ~640 instructions to decode instead of
// ~100 (decode_full, descend, a second decode_link and decode_l4).
inline bool decode_fast_tunnel(const uint8_t* p, uint32_t cap, uint32_t wire, Decoded& d) {
  const uint32_t l4 = d.l3_off + d.l3_hdr_len, ip_end = d.l3_off + d.l3_len, ulen = rd16(p + l4 + 4);
  const uint16_t sport = d.sport, dport = d.dport;
  // Written in place: on a false return the full decoder starts over.
  EncapLayer& L = d.encap[0];
  L = EncapLayer{};
  L.l3_off = d.l3_off;
  L.l3_hdr_len = d.l3_hdr_len;
  L.ip_version = d.ip_version;
  L.udp_off = uint16_t(l4);
  L.hdr_off = uint16_t(l4 + 8);
  const uint32_t lim = std::min(ip_end, l4 + ulen), end = std::min(lim, cap);
  uint32_t inner = 0, o;
  uint16_t et;
  uint8_t n_vlan = 0;
  uint16_t eth_off = 0;
  const Encap kind = udp_tunnel(p, l4 + 8, end, lim, sport, dport);
  if (kind == Encap::GtpU) {
    L.kind = Encap::GtpU;
    const uint32_t g = l4 + 8;
    if (g + 8 <= end && p[g] == 0x30 && p[g + 1] == 0xff) {
      // Version 1, a G-PDU without sequence number or extension headers:
      // what parse_gtpu finds for it, without its branches.
      const uint32_t gend = g + 8 + rd16(p + g + 2);
      uint32_t teid;
      std::memcpy(&teid, p + g + 4, 4);
      L.id = __builtin_bswap32(teid);
      L.has_id = 1;
      inner = g + 8;
      if (gend > end || inner >= gend) return false;
    } else if (parse_gtpu(p, g, end, L, inner) != Next::IpNibble) {
      return false;
    }
    if (inner >= end || inner > 0xffff) return false;
    const uint8_t v = p[inner] >> 4;
    if (v == 4) et = kEthIpv4;
    else if (v == 6) et = kEthIpv6;
    else return false;
    o = inner;
  } else if (kind == Encap::Vxlan) {
    L.kind = Encap::Vxlan;
    if (parse_vxlan(p, l4 + 8, end, L, inner) != Next::Eth || inner + 14 > end || inner > 0xffff) return false;
    eth_off = uint16_t(inner);
    et = rd16(p + inner + 12);
    o = inner + 14;
    for (; n_vlan < 2 && (et == kEthVlan || et == kEthQinq || et == kEthQinqOld); ++n_vlan) {
      if (o + 4 > cap) return false;
      et = rd16(p + o + 2);
      o += 4;
    }
  } else {
    return false;
  }
  L.inner_off = uint16_t(inner);
  if (!decode_fast_inner(p, cap, lim, o, et, d)) return false;
  d.n_vlan = n_vlan;
  d.n_mpls = 0;
  d.pppoe_off = 0;
  d.ipv6_frag_hdr_off = 0;
  d.ipv6_rh_off = d.ipv6_hao_off = 0;
  d.cap_len = cap;
  d.wire_len = wire;
  d.n_encap = 1;
  d.inner_eth_off = eth_off;
  d.tun_ctx = 0;
  tunnel_context(p, L, d.tun_ctx);
  return true;
}

}  // namespace

// Called with d decoded through an IP datagram whose payload is a tunnel
// (kFlagTunnel): decodes the packet it carries, which then becomes d's
// L3/L4. Leaves d as it was when the encapsulation cannot be parsed or the
// nesting is too deep.
void descend(const uint8_t* p, uint32_t cap, Decoded& d) {
  if (d.n_encap == kMaxEncap) return;
  // The runtime rewrites the addresses of the packet's own extension
  // headers, not a carrier's: a tunnel whose IPv6 header holds them stays
  // the packet (its payload opaque, kFlagTunnel).
  if (d.flags & kFlagV6Routing) return;
  EncapLayer L;
  L.l3_off = d.l3_off;
  L.l3_hdr_len = d.l3_hdr_len;
  L.ip_version = d.ip_version;
  L.pppoe_off = d.pppoe_off;
  // lim: where the carrier's payload ends; end: the same within the captured bytes.
  uint32_t lim = d.l3_off + d.l3_len;
  uint32_t inner = 0;
  Next next = Next::None;
  uint32_t end = std::min(lim, cap);
  if (d.l4_proto == kProtoUdp) {
    L.udp_off = uint16_t(d.l4_off);
    L.hdr_off = uint16_t(d.payload_off);
    lim = std::min<uint32_t>(lim, d.l4_off + rd16(p + d.l4_off + 4));
    end = std::min(lim, cap);
    const uint32_t o = d.payload_off;
    L.kind = tunnel_ports(d.sport, d.dport) ? udp_tunnel(p, o, end, lim, d.sport, d.dport) : Encap::None;
    if (L.kind == Encap::None && teredo_by_content(p, o, end, lim)) L.kind = Encap::Teredo;
    switch (L.kind) {
      case Encap::GtpU: next = parse_gtpu(p, o, end, L, inner); break;
      case Encap::Vxlan: next = parse_vxlan(p, o, end, L, inner); break;
      case Encap::VxlanGpe: next = parse_vxlan_gpe(p, o, end, L, inner); break;
      case Encap::Geneve: next = parse_geneve(p, o, end, L, inner); break;
      case Encap::Teredo: next = parse_teredo(p, o, end, inner); break;
      case Encap::Ayiya: next = parse_ayiya(p, o, end, inner); break;
      default: break;
    }
  } else if (d.l4_proto == kProtoGre) {
    L.hdr_off = uint16_t(d.l4_off);
    L.kind = Encap::Gre;
    next = parse_gre(p, d.l4_off, end, L, inner);
  } else if (d.l4_proto == kProtoPim) {  // a Register's multicast packet, IPv4 or IPv6
    L.hdr_off = uint16_t(d.l4_off);
    L.kind = Encap::PimRegister;
    inner = d.l4_off + 8;
    next = Next::IpNibble;
  } else {  // IPv4 or IPv6 in IP
    L.hdr_off = uint16_t(d.l4_off);
    L.kind = Encap::Ip;
    inner = d.l4_off;
    next = d.l4_proto == kProtoIpIp ? Next::Ip4 : Next::Ip6;
  }
  if (next == Next::None || inner > end || inner > 0xffff) return;
  if (next == Next::IpNibble) {
    if (inner >= end) return;
    const uint8_t v = p[inner] >> 4;
    if (v == 4) next = Next::Ip4;
    else if (v == 6) next = Next::Ip6;
    else return;
  }
  L.inner_off = uint16_t(inner);
  // From here on d describes the inner packet: its L2-L4 fields start over
  // (as decode_full's Decoded{} would set them); the layers and context stay.
  d.encap[d.n_encap++] = L;
  tunnel_context(p, L, d.tun_ctx);
  d.status = DecodeStatus::Malformed;
  d.ip_version = d.n_vlan = d.n_mpls = d.l4_proto = d.tcp_flags = 0;
  d.flags = kFlagEncap;
  d.ethertype = d.pppoe_off = d.l3_off = d.l3_hdr_len = d.l4_hdr_len = d.sport = d.dport = 0;
  d.ipv6_frag_hdr_off = d.ipv6_rh_off = d.ipv6_hao_off = d.inner_eth_off = 0;
  d.l3_len = d.l4_off = d.payload_off = d.payload_len = 0;
  d.good_until = inner;
  switch (next) {
    case Next::Eth:
      if (inner + 14 > end) {
        d.status = inner + 14 > lim ? DecodeStatus::Malformed : DecodeStatus::Truncated;
        return;
      }
      d.inner_eth_off = uint16_t(inner);
      d.good_until = inner + 14;
      decode_link(p, cap, inner + 14, rd16(p + inner + 12), d);
      break;
    case Next::Ip4: decode_link(p, cap, inner, kEthIpv4, d); break;
    case Next::Ip6: decode_link(p, cap, inner, kEthIpv6, d); break;
    case Next::Mpls: decode_link(p, cap, inner, kEthMpls, d); break;
    default: break;
  }
  // The inner datagram must lie within what carries it.
  if (d.has_ip() && d.l3_len && d.l3_off + d.l3_len > lim) {
    d.status = DecodeStatus::Malformed;
    d.good_until = std::min<uint32_t>(d.good_until, d.l3_off);
  }
}

// Called, as decode_full is, in tail position: decode() itself needs no
// stack frame, which a call whose result it had to test would cost every
// packet.
[[gnu::noinline]] void decode_tunnel(const uint8_t* p, uint32_t cap, uint32_t wire_len, Decoded& d) {
  if (!decode_fast_tunnel(p, cap, wire_len < cap ? cap : wire_len, d)) decode_full(p, cap, wire_len, d);
}

}  // namespace l2l4_decode

bool ayiya_identity(const uint8_t* p, uint32_t cap, const EncapLayer& L, uint32_t& at, uint32_t& len) {
  if (L.kind != Encap::Ayiya || L.hdr_off + 8u > cap || (p[L.hdr_off] & 0x0f) == 0) return false;
  at = L.hdr_off + 8u;
  len = 1u << (p[L.hdr_off] >> 4);
  return at + len <= std::min<uint32_t>(cap, L.inner_off);
}

bool teredo_origin(const uint8_t* p, uint32_t cap, const EncapLayer& L, uint32_t& at) {
  if (L.kind != Encap::Teredo || !L.udp_off) return false;
  uint32_t q = L.udp_off + 8u;
  const uint32_t end = std::min<uint32_t>(cap, L.inner_off);
  if (q + 4 <= end && rd16(p + q) == 0x0001) q += 4u + p[q + 2] + p[q + 3] + 9u;  // authentication indicator
  if (q + 8 > end || rd16(p + q) != 0x0000) return false;
  at = q;
  return true;
}

bool teredo_trailers(const uint8_t* p, uint32_t cap, const EncapLayer& L, uint32_t& at, uint32_t& end) {
  // Teredo runs over IPv4 only (RFC 4380): its trailers' addresses are IPv4.
  if (L.kind != Encap::Teredo || L.ip_version != 4 || !L.udp_off || L.inner_off + 40u > cap) return false;
  at = L.inner_off + 40u + rd16(p + L.inner_off + 4);
  end = std::min<uint32_t>(cap, L.udp_off + rd16(p + L.udp_off + 4));
  return at < end;
}

const char* encap_name(Encap e) {
  switch (e) {
    case Encap::Ip: return "ip-in-ip";
    case Encap::Gre: return "gre";
    case Encap::Erspan: return "erspan";
    case Encap::Vxlan: return "vxlan";
    case Encap::VxlanGpe: return "vxlan-gpe";
    case Encap::Geneve: return "geneve";
    case Encap::GtpU: return "gtp-u";
    case Encap::Teredo: return "teredo";
    case Encap::Ayiya: return "ayiya";
    case Encap::PimRegister: return "pim-register";
    default: return "none";
  }
}

}  // namespace amon
