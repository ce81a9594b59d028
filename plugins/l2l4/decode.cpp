// The decoder: the link layer (Ethernet, VLAN tags, PPPoE, MPLS), IPv4 and
// IPv6 with their options and extension headers, the transport headers, and
// the fast path of the plain frames nearly every packet is. Encapsulations
// are in tunnels.cpp.
#include <algorithm>
#include <cstring>
#include <utility>

#include "decode_impl.h"

namespace amon {

using namespace l2l4_decode;

void decode_foreign_link(const LinkLayer& L, const uint8_t* p, uint32_t cap, Decoded& d);

namespace {

void decode_ipv4(const uint8_t* p, uint32_t cap, Decoded& d);
void decode_ipv6(const uint8_t* p, uint32_t cap, Decoded& d);

void decode_l4(const uint8_t* p, uint32_t cap, Decoded& d) {
  const uint32_t ip_end = d.l3_off + d.l3_len;
  const uint32_t off = d.l4_off;
  d.payload_off = off;
  d.payload_len = ip_end > off ? ip_end - off : 0;
  d.good_until = off;
  if (d.flags & kFlagLaterFragment) {  // continuation data only: all of it is payload
    d.status = DecodeStatus::Ok;
    return;
  }
  auto need = [&](uint32_t n) -> bool {
    if (off + n > ip_end) {
      d.status = DecodeStatus::Malformed;
      return false;
    }
    if (off + n > cap) {
      d.status = DecodeStatus::Truncated;
      return false;
    }
    return true;
  };
  switch (d.l4_proto) {
    case kProtoTcp: {
      if (!need(20)) return;
      uint32_t hl = (p[off + 12] >> 4) * 4u;
      if (hl < 20) { d.status = DecodeStatus::Malformed; return; }
      if (!need(hl)) return;
      d.l4_hdr_len = uint16_t(hl);
      d.sport = rd16(p + off);
      d.dport = rd16(p + off + 2);
      d.tcp_flags = p[off + 13];
      if (hl > 20 && tcp_carries_addr(p + off + 20, hl - 20)) d.flags |= kFlagAddrBody;
      break;
    }
    case kProtoUdp: {
      if (!need(8)) return;
      uint16_t ulen = rd16(p + off + 4);
      // A UDP length larger than the IP payload, or below the header, is
      // impossible; a smaller one leaves trailing bytes that are still ours
      // to protect, so the payload keeps running to the IP end.
      // A first fragment carries the datagram's UDP length, longer than the fragment.
      bool frag = d.flags & kFlagFragment;
      if (ulen < 8 || (!frag && ulen > d.l3_len - (off - d.l3_off))) { d.status = DecodeStatus::Malformed; return; }
      d.l4_hdr_len = 8;
      d.sport = rd16(p + off);
      d.dport = rd16(p + off + 2);
      // A first fragment's UDP length is the datagram's: what it holds ends with the fragment.
      if (is_udp_tunnel(p, off + 8, std::min({cap, ip_end, off + ulen}), off + ulen, d.sport, d.dport) ||
          (!frag && ulen >= 48 && teredo_by_content(p, off + 8, std::min(cap, off + ulen), off + ulen)))
        d.flags |= kFlagTunnel;
      d.flags |= l4_class(kProtoUdp, d.sport, d.dport);  // RIP, RIPng route entries
      break;
    }
    case kProtoIcmp:
    case kProtoIcmpv6: {
      if (!need(8)) return;
      d.l4_hdr_len = 8;
      uint8_t type = p[off], code = p[off + 1];
      d.sport = uint16_t(type << 8 | code);
      d.dport = rd16(p + off + 4);  // echo identifier
      d.flags |= l4_class(d.l4_proto, d.sport, d.dport);
      break;
    }
    case kProtoPim:
      // A Register with its multicast packet is a tunnel; every other
      // message (a Null-Register's header-only packet included) is the PIM
      // plugin's.
      d.status = DecodeStatus::Ok;
      if (!pim_register_data(p, off, cap, ip_end)) return;
      d.flags |= kFlagTunnel;
      if (!(d.flags & kFlagFragment)) descend(p, cap, d);
      return;
    case kProtoIpIp:
    case kProtoIpv6:
    case kProtoGre:
      d.flags |= kFlagTunnel;
      d.status = DecodeStatus::Ok;
      if (!(d.flags & kFlagFragment)) descend(p, cap, d);
      return;
    default:
      d.status = DecodeStatus::Ok;
      return;
  }
  d.payload_off = off + d.l4_hdr_len;
  d.payload_len = ip_end > d.payload_off ? ip_end - d.payload_off : 0;
  d.good_until = d.payload_off;
  d.status = DecodeStatus::Ok;
  // A fragment of a tunnel datagram carries only part of the inner packet:
  // without reassembly it stays opaque.
  if ((d.flags & (kFlagTunnel | kFlagFragment)) == kFlagTunnel) descend(p, cap, d);
}

void decode_ipv4(const uint8_t* p, uint32_t cap, Decoded& d) {
  const uint32_t o = d.l3_off;
  d.ip_version = 4;
  d.good_until = o;
  if (o + 20 > cap) { d.status = DecodeStatus::Truncated; return; }
  if ((p[o] >> 4) != 4) { d.status = DecodeStatus::Malformed; return; }
  uint32_t ihl = (p[o] & 0xf) * 4u;
  uint32_t tot = rd16(p + o + 2);
  if (ihl < 20 || tot < ihl) { d.status = DecodeStatus::Malformed; return; }
  if (o + ihl > cap) { d.status = DecodeStatus::Truncated; return; }
  // Known before the length check so that a rewrite of the addresses can
  // still fix the header checksum of a datagram whose length is impossible.
  d.l3_hdr_len = uint16_t(ihl);
  // The wire frame must hold the datagram; Ethernet padding after it is fine.
  if (o + tot > d.wire_len) {
    d.status = DecodeStatus::Malformed;
    // Still note a captured transport header: its checksum covers the
    // addresses, and must follow them when they are rewritten.
    d.l4_proto = p[o + 9];
    d.l4_off = d.payload_off = o + ihl;
    uint32_t l4 = o + ihl;
    uint16_t frag = rd16(p + o + 6);
    if (!(frag & 0x1fff)) {
      if (d.l4_proto == kProtoTcp && l4 + 20 <= cap && (p[l4 + 12] >> 4) * 4u >= 20 && l4 + (p[l4 + 12] >> 4) * 4u <= cap)
        d.l4_hdr_len = uint16_t((p[l4 + 12] >> 4) * 4u);
      else if ((d.l4_proto == kProtoUdp || d.l4_proto == kProtoIcmp) && l4 + 8 <= cap)
        d.l4_hdr_len = 8;
    }
    d.good_until = l4;
    return;
  }
  d.l3_len = tot;
  d.l4_proto = p[o + 9];
  // Options may record addresses (Record Route, Timestamp, a source
  // route): the runtime's address-body step reads them.
  if (ihl > 20) d.flags |= kFlagAddrBody;
  uint16_t frag = rd16(p + o + 6);
  if (frag & 0x3fff) {
    d.flags |= kFlagFragment;
    if (frag & 0x1fff) d.flags |= kFlagLaterFragment;
  }
  d.l4_off = o + ihl;
  decode_l4(p, cap, d);
}

// The Mobility Header (135) is no extension header to walk through: it
// ends the chain (its Payload Proto is always 59) and is the message a
// protocol plugin parses.
bool v6_ext(uint8_t nh) { return nh == 0 || nh == 43 || nh == 44 || nh == 60 || nh == kProtoAh || nh == 139 || nh == 140; }

// A Destination Options header's options (RFC 8200 4.2) at [o, end): the
// Home Address option's address (Mobile IPv6, RFC 6275 6.3: type 0xC9, 16
// bytes) in `hao`. False when the options do not fill the header exactly,
// or hold a Home Address option of another length or a second one: the
// receiver discards such a packet, and an address could lie where the
// walk cannot vouch for what the bytes are.
bool dst_options(const uint8_t* p, uint32_t o, uint32_t end, uint16_t& hao) {
  while (o < end) {
    if (p[o] == 0) {  // Pad1
      ++o;
      continue;
    }
    if (end - o < 2 || end - o - 2 < p[o + 1]) return false;
    if (p[o] == kOptHomeAddress) {
      if (p[o + 1] != 16 || hao) return false;
      hao = uint16_t(o + 2);
    }
    o += 2u + p[o + 1];
  }
  return true;
}

void decode_ipv6(const uint8_t* p, uint32_t cap, Decoded& d) {
  const uint32_t o = d.l3_off;
  d.ip_version = 6;
  d.good_until = o;
  if (o + 40 > cap) { d.status = DecodeStatus::Truncated; return; }
  if ((p[o] >> 4) != 6) { d.status = DecodeStatus::Malformed; return; }
  uint32_t plen = rd16(p + o + 4);
  // Jumbograms (payload length 0 with a hop-by-hop jumbo option) do not occur
  // on Ethernet; a zero length with data after it is treated as malformed.
  d.l3_len = 40 + plen;
  if (o + d.l3_len > d.wire_len) { d.status = DecodeStatus::Malformed; return; }
  uint8_t nh = p[o + 6];
  uint32_t off = o + 40;
  const uint32_t end = o + d.l3_len;
  for (int i = 0; i < kMaxV6Ext && v6_ext(nh); ++i) {
    if (off + 8 > end) { d.status = DecodeStatus::Malformed; return; }
    if (off + 8 > cap) { d.status = DecodeStatus::Truncated; return; }
    uint32_t len;
    if (nh == 44) {  // fragment header: fixed 8 bytes
      len = 8;
      d.ipv6_frag_hdr_off = uint16_t(off);
      uint16_t fo = rd16(p + off + 2);
      d.flags |= kFlagFragment;
      if (fo & 0xfff8) d.flags |= kFlagLaterFragment;
    } else if (nh == kProtoAh) {
      len = (p[off + 1] + 2u) * 4u;
    } else {
      len = (p[off + 1] + 1u) * 8u;
    }
    if (off + len > end) { d.status = DecodeStatus::Malformed; return; }
    if (off + len > cap) { d.status = DecodeStatus::Truncated; return; }
    if (nh == 43) {
      const uint8_t rtype = p[off + 2];
      // Type 0 (deprecated), RPL's (3, compressed addresses) and segment
      // routing (4) list addresses of the path; Mobile IPv6's (2) holds
      // the destination's home address: identifiers outside the fixed
      // header. One of type 2 is the runtime's to rewrite; any other
      // takes its place in ipv6_rh_off (the runtime cannot rewrite it).
      // Two of type 2 are not allowed (RFC 6275 6.4).
      if (rtype == 0 || rtype == 2 || rtype == 3 || rtype == 4) {
        if (d.ipv6_rh_off && rtype == 2 && p[d.ipv6_rh_off + 2] == 2) {
          d.status = DecodeStatus::Malformed;
          return;
        }
        d.flags |= kFlagV6Routing;
        if (!d.ipv6_rh_off || rtype != 2) d.ipv6_rh_off = uint16_t(off);
      }
    } else if (nh == 60) {
      uint16_t hao = d.ipv6_hao_off;
      if (!dst_options(p, off + 2, off + len, hao)) { d.status = DecodeStatus::Malformed; return; }
      if (hao) d.flags |= kFlagV6Routing, d.ipv6_hao_off = hao;
    }
    nh = p[off];
    off += len;
    if (d.flags & kFlagLaterFragment) break;  // the rest belongs to the fragment's data
  }
  if (v6_ext(nh) && !(d.flags & kFlagLaterFragment)) { d.status = DecodeStatus::Malformed; return; }
  d.l3_hdr_len = uint16_t(off - o);
  d.l4_proto = nh;
  d.l4_off = off;
  decode_l4(p, cap, d);
}


// The frame nearly every packet is: Ethernet II with at most two VLAN tags,
// IPv4 without options or IPv6 without extension headers, not a fragment,
// TCP, UDP, ICMP or ICMPv6, every header captured and every length
// consistent. For such a frame the full decoder makes exactly the checks
// made here, so the result is the same; what it costs beyond them (the
// Decoded{} reset, the loops, the truncation and malformation bookkeeping)
// was ~40 % of decode's instructions on small packets (166 -> 103 per
// packet with this path, callgrind, small.pcap). Anything else
// returns false (d partly written) and takes the full way.
// tests/engine/test_decode.cpp and fuzz_packet check that both give
// identical results.
// 2: a UDP datagram to or from a tunnel port, d's outer IP fields and
// ports written (decode_tunnel).
inline int decode_fast(const uint8_t* p, uint32_t cap, uint32_t wire, Decoded& d) {
  // Fields are stored as soon as they are known rather than held to the
  // end: fewer live registers, so fewer saved and restored per call. On a
  // false return the full decoder starts from Decoded{} anyway.
  if (cap < 14 + 20) return false;
  uint16_t et = rd16(p + 12);
  uint32_t o = 14;
  uint8_t n_vlan = 0;
  if (et != kEthIpv4 && et != kEthIpv6) {  // untagged frames test two EtherTypes, not five
    for (; n_vlan < 2 && (et == kEthVlan || et == kEthQinq || et == kEthQinqOld); ++n_vlan) {
      if (o + 4 > cap) return false;
      et = rd16(p + o + 2);
      o += 4;
    }
  }
  uint32_t l3_len, l4;
  uint8_t proto;
  if (!fast_ip(p, cap, wire, o, et, l3_len, l4, proto, d)) return false;
  d.n_vlan = n_vlan;
  d.ethertype = et;
  d.l3_off = uint16_t(o);
  d.l3_hdr_len = uint16_t(l4 - o);
  d.l3_len = l3_len;
  const uint32_t ip_end = o + l3_len;
  uint32_t hl = 8;
  uint8_t flags = 0, tcp_flags = 0;
  if (proto == kProtoTcp) {
    if (l4 + 20 > ip_end || l4 + 20 > cap) return false;
    hl = (p[l4 + 12] >> 4) * 4u;
    if (hl < 20 || l4 + hl > ip_end || l4 + hl > cap) return false;
    tcp_flags = p[l4 + 13];
    if (hl > 20 && tcp_carries_addr(p + l4 + 20, hl - 20)) flags = kFlagAddrBody;
    d.sport = rd16(p + l4);
    d.dport = rd16(p + l4 + 2);
  } else if (proto == kProtoUdp) {
    if (l4 + 8 > ip_end || l4 + 8 > cap) return false;
    const uint32_t ulen = rd16(p + l4 + 4);
    if (ulen < 8 || ulen > ip_end - l4) return false;
    const uint16_t sport = rd16(p + l4), dport = rd16(p + l4 + 2);
    d.sport = sport;
    d.dport = dport;
    if (is_udp_tunnel(p, l4 + 8, std::min(cap, l4 + ulen), l4 + ulen, sport, dport)) return 2;  // decoded through
    // Peer-to-peer Teredo: the full way.
    if (ulen >= 48 && teredo_by_content(p, l4 + 8, std::min(cap, l4 + ulen), l4 + ulen)) return false;
    flags = l4_class(kProtoUdp, sport, dport);  // RIP, RIPng route entries
  } else if (proto == kProtoIcmp || proto == kProtoIcmpv6) {
    if (l4 + 8 > ip_end || l4 + 8 > cap) return false;
    const uint16_t type_code = uint16_t(p[l4] << 8 | p[l4 + 1]);
    d.sport = type_code;
    d.dport = rd16(p + l4 + 4);
    flags = l4_class(proto, type_code, 0);
  } else {
    return false;  // IP in IP and GRE among the rest
  }
  const uint32_t pay = l4 + hl;
  d.status = DecodeStatus::Ok;
  d.n_mpls = 0;
  d.flags = flags;
  d.l4_proto = proto;
  d.tcp_flags = tcp_flags;
  d.pppoe_off = 0;
  d.l4_off = l4;
  d.l4_hdr_len = uint16_t(hl);
  d.payload_off = pay;
  d.payload_len = ip_end - pay;
  d.good_until = pay;
  d.ipv6_frag_hdr_off = 0;
  d.ipv6_rh_off = d.ipv6_hao_off = 0;
  d.cap_len = cap;
  d.wire_len = wire;
  d.n_encap = 0;
  d.inner_eth_off = 0;
  d.tun_ctx = 0;
  return true;
}

}  // namespace

void decode(const uint8_t* p, uint32_t cap, uint32_t wire_len, Decoded& d) {
  const int r = decode_fast(p, cap, wire_len < cap ? cap : wire_len, d);
  if (r == 1) return;
  if (r == 2) return decode_tunnel(p, cap, wire_len, d);
  decode_full(p, cap, wire_len, d);
}

void decode_full(const uint8_t* p, uint32_t cap, uint32_t wire_len, Decoded& d) {
  d = Decoded{};
  d.cap_len = cap;
  d.wire_len = wire_len < cap ? cap : wire_len;
  if (cap < 14) { d.status = DecodeStatus::Truncated; return; }
  d.good_until = 14;
  const uint16_t et = rd16(p + 12);
  if (et == kEthLinkStandIn) [[unlikely]]
    if (const LinkLayer* L = link_layer()) return decode_foreign_link(*L, p, cap, d);
  decode_link(p, cap, 14, et, d);
}

namespace {
const LinkLayer* g_link = nullptr;
}  // namespace

void link_stand_in(int dlt, uint8_t* eth) {
  std::memset(eth, 0, 14);
  wr16(eth + 4, uint16_t(dlt));
  wr16(eth + 12, kEthLinkStandIn);
}

int link_stand_in_dlt(const uint8_t* p, uint32_t cap) {
  if (cap < 14 || rd16(p + 12) != kEthLinkStandIn) return 0;
  for (int i : {0, 1, 2, 3, 6, 7, 8, 9, 10, 11})
    if (p[i]) return 0;
  const int dlt = rd16(p + 4);
  return link_layer_for(dlt) ? dlt : 0;
}

void set_link_layer(const LinkLayer* l) { g_link = l; }
const LinkLayer* link_layer() { return g_link; }
const LinkLayer* link_layer_for(int dlt) {
  if (!g_link || dlt <= 0) return nullptr;
  for (int x : g_link->dlts)
    if (x == dlt) return g_link;
  return nullptr;
}

// A stand-in Ethernet header (link_stand_in) before a link layer's
// frame: the layer's header, then what it carries. An Ethernet frame that
// merely looks like one (the experimental EtherType, the same bytes) is
// walked the same way: its bytes are rewritten as a frame's would be, never
// passed on unread.
void decode_foreign_link(const LinkLayer& L, const uint8_t* p, uint32_t cap, Decoded& d) {
  const int dlt = link_stand_in_dlt(p, cap);
  if (!dlt) return decode_link(p, cap, 14, kEthLinkStandIn, d);
  d.flags |= kFlagLink;
  LinkDecode r;
  r.good_until = 14;
  L.decode(dlt, p, cap, 14, r);
  d.good_until = std::max<uint32_t>(14, std::min(r.good_until, cap));
  if (r.status == DecodeStatus::Ok && r.off <= cap) {
    decode_link(p, cap, r.off, r.ethertype, d);
    // A malformed packet inside resets the decode: the frame is still the
    // link layer's, whose fields must be found (fail closed).
    d.flags |= kFlagLink;
    return;
  }
  d.status = r.status == DecodeStatus::Ok ? DecodeStatus::Truncated : r.status;
  d.ethertype = kEthLinkStandIn;
  d.l3_off = uint16_t(std::min<uint32_t>(r.off ? r.off : d.good_until, 0xffff));
  d.link_body = uint8_t(r.body);
}

namespace l2l4_decode {

// From an EtherType `et` whose header ends at `off`: VLAN tags, a PPPoE
// session or an MPLS stack, then IP. Also the entry of an Ethernet frame or
// MPLS stack carried in a tunnel.
void decode_link(const uint8_t* p, uint32_t cap, uint32_t off, uint16_t et, Decoded& d) {
  int n_vlan = 0;
  while (et == kEthVlan || et == kEthQinq || et == kEthQinqOld) {
    if (n_vlan == kMaxVlan) { d.status = DecodeStatus::Malformed; return; }
    if (off + 4 > cap) { d.status = DecodeStatus::Truncated; return; }
    et = rd16(p + off + 2);
    off += 4;
    d.n_vlan = uint8_t(++n_vlan);
    d.good_until = off;
  }
  if (et == kEthPppoeSess) {
    if (off + 8 > cap) { d.status = DecodeStatus::Truncated; d.ethertype = et; return; }
    d.pppoe_off = uint16_t(off);
    uint16_t ppp = rd16(p + off + 6);
    off += 8;
    d.good_until = off;
    if (ppp == 0x0021) et = kEthIpv4;
    else if (ppp == 0x0057) et = kEthIpv6;
    else { d.ethertype = kEthPppoeSess; d.l3_off = uint16_t(off); d.status = DecodeStatus::NotIp; return; }
  } else if (et == kEthMpls || et == kEthMplsMc) {
    for (int n = 0;; ++n) {
      if (n == kMaxMpls) { d.status = DecodeStatus::Malformed; return; }
      if (off + 4 > cap) { d.status = DecodeStatus::Truncated; return; }
      bool bos = p[off + 2] & 1;
      off += 4;
      d.n_mpls = uint8_t(n + 1);
      if (bos) break;
    }
    d.good_until = off;
    // MPLS does not say what it carries; the first nibble does for IP.
    if (off >= cap) { d.status = DecodeStatus::Truncated; return; }
    uint8_t v = p[off] >> 4;
    if (v == 4) et = kEthIpv4;
    else if (v == 6) et = kEthIpv6;
    else { d.ethertype = kEthMpls; d.l3_off = uint16_t(off); d.status = DecodeStatus::NotIp; return; }
  }
  d.ethertype = et;
  if (off > 0xffff) { d.status = DecodeStatus::Malformed; return; }
  d.l3_off = uint16_t(off);
  if (et == kEthIpv4) decode_ipv4(p, cap, d);
  else if (et == kEthIpv6) decode_ipv6(p, cap, d);
  else { d.status = DecodeStatus::NotIp; d.good_until = off; }
}


}  // namespace l2l4_decode

// tcp_carries_addr's walk over options other than NOP NOP timestamp.
// Also true when bytes that are no option are not all zero: those after
// the End of Option List (padding, zero by RFC 9293 3.1) or from an option
// whose length cannot be (under 2, past the header). They can be anything
// (a fuzzer's or a broken stack's copy of the frame's own headers, MACs
// and addresses among them), and the runtime zeroes them where it protects
// addresses (ProgramInstance::mptcp_addrs).
[[gnu::noinline]] bool tcp_options_walk_addr(const uint8_t* o, uint32_t n) {
  auto junk = [&](uint32_t from) {
    for (uint32_t k = from; k < n; ++k)
      if (o[k]) return true;
    return false;
  };
  for (uint32_t i = 0; i < n;) {
    if (o[i] == 0) return junk(i + 1);
    if (o[i] == 1) {
      ++i;
      continue;
    }
    if (i + 1 >= n || o[i + 1] < 2 || o[i + 1] > n - i) return junk(i);
    if (o[i] == kTcpOptMptcp && o[i + 1] > 2 && (o[i + 2] >> 4) == kMptcpAddAddr) return true;
    i += o[i + 1];
  }
  return false;
}

}  // namespace amon
