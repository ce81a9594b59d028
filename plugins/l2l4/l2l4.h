// L2-L4 protocols: Ethernet, 802.1Q/802.1ad (QinQ), MPLS, PPPoE session,
// IPv4 (options), IPv6 (extension headers), TCP, UDP, ICMP, ICMPv6, and the
// encapsulations that carry them: GTP-U v1, VXLAN, VXLAN-GPE, Geneve, GRE
// (with key/sequence/checksum, transparent Ethernet bridging, ERSPAN I/II/III),
// IPv4/IPv6 in IPv4/IPv6, Teredo, AYIYA, a PIM Register's multicast packet.
//
// An encapsulated packet is decoded through to the innermost packet, which is
// what Decoded's L3/L4 fields then describe: every consumer treats it as if it
// had arrived alone. The layers around it are listed outermost first in
// Decoded::encap, so the runtime can rewrite their addresses and fix their
// lengths and checksums; Decoded::tun_ctx names the tunnel for the flow key.
// An encapsulation that cannot be parsed (an unknown GRE protocol, GTP
// signalling, a fragmented outer datagram) or nesting deeper than
// kMaxEncap stops the descent there with kFlagTunnel set: its payload is
// opaque and the runtime cuts it for consumers that protect anything in it.
//
// decode() runs once per packet on the original bytes; every consumer's
// pipeline then works by offset on its own copy. It never reads past `cap`
// and records how far it got, so a packet that cannot be decoded far enough
// is handled by the policy's on_error (fail closed) rather than forwarded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "protocol.h"
#include "registry.h"

namespace amon {

enum class DecodeStatus : uint8_t {
  Ok,         // decoded through L4 (or through L3 for protocols without L4 header)
  NotIp,      // no IP layer: ARP, LLDP, unknown EtherType
  Truncated,  // captured bytes end inside a header (snaplen or a short frame)
  Malformed,  // a length or header field is impossible
};

// Mobile IPv6 (RFC 6275): the Home Address destination option's type.
constexpr uint8_t kOptHomeAddress = 0xc9;

enum L4Proto : uint8_t {
  kProtoIcmp = 1, kProtoIpIp = 4, kProtoTcp = 6, kProtoUdp = 17, kProtoIpv6 = 41,
  kProtoGre = 47, kProtoEsp = 50, kProtoAh = 51, kProtoIcmpv6 = 58, kProtoNone = 59, kProtoPim = 103,
  kProtoSctp = 132, kProtoMobility = 135,
};

enum : uint8_t {  // Decoded::flags
  kFlagFragment = 1,      // IPv4 MF/offset or IPv6 fragment header present
  kFlagLaterFragment = 2, // not the first fragment: no L4 header in this packet
  kFlagTunnel = 4,        // IP payload is another network layer (IP-in-IP, GRE, known UDP tunnels)
  kFlagV6Routing = 8,     // IPv6 extension headers carrying addresses: a routing header (ipv6_rh_off), the Home Address option (ipv6_hao_off)
  kFlagIcmpError = 16,    // ICMP/ICMPv6 error quoting an earlier packet's IP header
  kFlagEncap = 32,        // the L3/L4 fields are of a packet carried in the encapsulations listed in encap
  kFlagAddrBody = 64,     // addresses in a body the header rules map: ICMPv6 neighbour discovery (133-137), RIPng (UDP 521), RIP (UDP 520), IPv4 options, TCP options (MPTCP ADD_ADDR, bytes past the list)
  kFlagLink = 128,        // a link layer's frame follows the stand-in Ethernet header (LinkLayer below)
};

// RIP (RFC 2453, IPv4) and RIPng (RFC 2080, IPv6) route entries: from and
// to the protocol's port.
constexpr uint16_t kPortRip = 520, kPortRipng = 521;

// The flags a transport header's first bytes give (kFlagIcmpError,
// kFlagAddrBody): UDP by its ports, ICMP and ICMPv6 by the type in
// `sport`'s high byte (Decoded::sport holds type << 8 | code for them).
// Every decoder path classifies through this one function.
[[gnu::always_inline]] inline uint8_t l4_class(uint8_t proto, uint16_t sport, uint16_t dport) {
  if (proto == kProtoUdp)
    return sport == dport && (sport == kPortRip || sport == kPortRipng) ? uint8_t(kFlagAddrBody) : 0;
  const uint8_t type = uint8_t(sport >> 8);
  if (proto == kProtoIcmp)  // destination unreachable, source quench, redirect, time exceeded, parameter problem
    return type == 3 || type == 4 || type == 5 || type == 11 || type == 12 ? uint8_t(kFlagIcmpError) : 0;
  if (proto == kProtoIcmpv6)  // errors below 128 (RFC 4443); neighbour discovery 133-137 (RFC 4861)
    return type < 128 ? uint8_t(kFlagIcmpError) : type >= 133 && type <= 137 ? uint8_t(kFlagAddrBody) : 0;
  return 0;
}

// Which route list a kFlagAddrBody UDP datagram carries: RIP over IPv4,
// RIPng over IPv6, else none (the other port on the other family).
enum class RouteList : uint8_t { None, Rip, Ripng };
inline RouteList route_list(uint8_t ip_version, uint16_t sport) {
  if (ip_version == 4 && sport == kPortRip) return RouteList::Rip;
  if (ip_version == 6 && sport == kPortRipng) return RouteList::Ripng;
  return RouteList::None;
}

// Multipath TCP's ADD_ADDR option (kind 30, subtype 3) names another
// address of a host: RFC 6824's version 0 (the low nibble the IP version,
// 8/10 bytes for IPv4, 20/22 for IPv6, with the port) and RFC 8684's
// version 1 (the low nibble the echo flag; without it an 8-byte truncated
// HMAC follows the address and port: 8/10/16/18 bytes for IPv4, 20/22/28/30
// for IPv6). Offsets are from the option's first byte; `hmac` 0: none.
struct AddAddr {
  uint8_t off = 0, len = 0;   // the option
  uint8_t addr = 0, family = 0;
  uint8_t hmac = 0;
  // Version 1's echo (E): the receiver repeats the address it was sent, an
  // address of this packet's destination; otherwise one of its source.
  bool echo = false;
};
constexpr uint8_t kTcpOptMptcp = 30, kMptcpAddAddr = 3;

// An ADD_ADDR of a known shape at `o` (o[0] == 30, `n` bytes of options
// left from it); false: none, or one whose length fits no version (which
// the runtime then treats as an address it cannot place).
inline bool add_addr_at(const uint8_t* o, uint32_t n, AddAddr& a) {
  if (n < 3 || o[0] != kTcpOptMptcp || o[1] > n || (o[2] >> 4) != kMptcpAddAddr) return false;
  const uint8_t len = o[1], low = o[2] & 0xf;
  a.len = len, a.addr = 4, a.hmac = 0, a.echo = false;
  if (low == 4 || low == 6) {  // version 0: the IP version, optional port
    a.family = low;
    const uint8_t base = low == 4 ? 8 : 20;
    return len == base || len == base + 2;
  }
  if (low > 1) return false;
  // Version 1: bit 0 is E (an echo carries no HMAC).
  a.echo = low & 1;
  for (uint8_t fam : {uint8_t(4), uint8_t(6)}) {
    const uint8_t base = fam == 4 ? 8 : 20;
    if (len == base || len == base + 2 || (!(low & 1) && (len == base + 8 || len == base + 10))) {
      a.family = fam;
      if (len >= base + 8) a.hmac = uint8_t(len - 8);
      return true;
    }
  }
  return false;
}

// Whether a TCP header's options (`n` bytes after the fixed 20) hold an
// MPTCP ADD_ADDR, well-formed or not, or bytes past the options that are
// not zero (kFlagAddrBody: the runtime's address-body step reads the
// first and zeroes the second). An established segment's options are
// almost always NOP NOP timestamp: one compare settles those, and the walk
// over the others stays out of the decoder's line.
bool tcp_options_walk_addr(const uint8_t* o, uint32_t n);
[[gnu::always_inline]] inline bool tcp_carries_addr(const uint8_t* o, uint32_t n) {
  uint32_t w;
  std::memcpy(&w, o, 4);
  if (n == 12 && w == (1u | 1u << 8 | 8u << 16 | 10u << 24)) [[likely]]
    return false;
  return tcp_options_walk_addr(o, n);
}

// Calls f(const AddAddr&) for each ADD_ADDR in a TCP header's options
// (`o`, `n` bytes). One whose length no version gives (or that runs past
// the header) comes with family 0 and `len` the bytes it has in the header.
template <class F>
void each_add_addr(const uint8_t* o, uint32_t n, F&& f) {
  for (uint32_t i = 0; i < n;) {
    if (o[i] == 0) break;
    if (o[i] == 1) { ++i; continue; }
    if (i + 1 >= n || o[i + 1] < 2) break;
    if (o[i] == kTcpOptMptcp && i + 2 < n && (o[i + 2] >> 4) == kMptcpAddAddr) {
      AddAddr a;
      if (!add_addr_at(o + i, n - i, a)) a = AddAddr{}, a.len = uint8_t(std::min<uint32_t>(o[i + 1], n - i));
      a.off = uint8_t(i);
      f(static_cast<const AddAddr&>(a));
    }
    i += o[i + 1];
  }
}

// Encapsulations decoded, at most (deeper nesting stops with kFlagTunnel).
constexpr int kMaxEncap = 4;

enum class Encap : uint8_t { None, Ip, Gre, Erspan, Vxlan, VxlanGpe, Geneve, GtpU, Teredo, Ayiya, PimRegister };

// One encapsulating layer: the IP datagram (and its UDP or GRE header) that
// carries the next layer in.
struct EncapLayer {
  uint16_t l3_off = 0;      // outer IP header
  uint16_t l3_hdr_len = 0;  // IPv4 IHL*4, or IPv6 40 + extension headers
  uint16_t udp_off = 0;     // outer UDP header (UDP encapsulations), 0 none
  uint16_t hdr_off = 0;     // GTP-U, VXLAN, Geneve, GRE or PIM header; the inner IP header for IP in IP
  uint16_t inner_off = 0;   // first byte of what it carries (Ethernet or IP, MPLS, PPP)
  uint16_t pppoe_off = 0;   // a PPPoE session header below this IP header, 0 none
  uint8_t ip_version = 0;
  Encap kind = Encap::None;
  uint8_t gre_csum = 0;     // GRE header carries a checksum (at hdr_off + 4)
  uint8_t gre_v1 = 0;       // PPTP's enhanced GRE: a payload length at hdr_off + 4
  uint8_t has_id = 0;
  uint32_t id = 0;          // VXLAN/Geneve VNI, GTP-U TEID, GRE key
  bool operator==(const EncapLayer&) const = default;
};

struct Decoded {
  DecodeStatus status = DecodeStatus::Malformed;
  uint8_t ip_version = 0;   // 0 (no IP), 4, 6
  uint8_t n_vlan = 0;
  uint8_t n_mpls = 0;
  uint8_t flags = 0;
  uint8_t l4_proto = 0;     // IP protocol / IPv6 upper-layer header
  uint8_t tcp_flags = 0;
  uint16_t ethertype = 0;   // innermost EtherType (after VLAN tags)
  uint16_t pppoe_off = 0;   // offset of the PPPoE header, 0 when none
  uint16_t l3_off = 0;      // IP header offset
  uint16_t l3_hdr_len = 0;  // IPv4 IHL*4, or IPv6 40 + extension headers
  uint32_t l3_len = 0;      // IP datagram length per the header (may exceed captured bytes)
  uint32_t l4_off = 0;      // transport header offset (== payload_off when none)
  uint16_t l4_hdr_len = 0;
  uint16_t sport = 0, dport = 0;  // host order; ICMP: type<<8|code in sport, id in dport
  uint32_t payload_off = 0; // first payload byte
  uint32_t payload_len = 0; // payload bytes per the IP length (may exceed captured bytes)
  uint32_t good_until = 0;  // bytes up to here were decoded and are safe to keep after anonymization
  uint16_t ipv6_frag_hdr_off = 0;
  uint16_t ipv6_rh_off = 0; // IPv6 routing header carrying addresses (type 0, 2, 3, 4), 0 none
  uint16_t ipv6_hao_off = 0; // the address in a Home Address destination option (Mobile IPv6), 0 none
  uint32_t cap_len = 0;     // bytes captured
  uint32_t wire_len = 0;    // bytes on the wire (>= cap_len)
  uint8_t n_encap = 0;      // layers in encap (kFlagEncap)
  uint16_t inner_eth_off = 0;  // the innermost Ethernet header when an encapsulation carries one, else 0
  uint64_t tun_ctx = 0;     // the encapsulations' identity, 0 when none (see tunnel_context in tunnels.cpp)
  EncapLayer encap[kMaxEncap];
  uint8_t link_body = 0;    // kFlagLink, status NotIp: what follows the link header (LinkBody)

  bool has_ip() const { return ip_version != 0 && status != DecodeStatus::NotIp; }
  uint32_t src_off() const { return l3_off + (ip_version == 4 ? 12u : 8u); }
  uint32_t dst_off() const { return l3_off + (ip_version == 4 ? 16u : 24u); }
  uint32_t addr_len() const { return ip_version == 4 ? 4u : 16u; }
  bool has_l4_header() const { return l4_hdr_len != 0; }
  // Field by field; the layers only up to n_encap (the fast decoder leaves
  // the array as it was).
  bool operator==(const Decoded& o) const {
    auto head = [](const Decoded& x) {
      return std::tie(x.status, x.ip_version, x.n_vlan, x.n_mpls, x.flags, x.l4_proto, x.tcp_flags, x.ethertype,
                      x.pppoe_off, x.l3_off, x.l3_hdr_len, x.l3_len, x.l4_off, x.l4_hdr_len, x.sport, x.dport,
                      x.payload_off, x.payload_len, x.good_until, x.ipv6_frag_hdr_off, x.ipv6_rh_off, x.ipv6_hao_off, x.cap_len,
                      x.wire_len, x.n_encap, x.inner_eth_off, x.tun_ctx);
    };
    if (head(*this) != head(o)) return false;
    if ((flags & kFlagLink) && link_body != o.link_body) return false;
    for (int i = 0; i < n_encap && i < kMaxEncap; ++i)
      if (!(encap[i] == o.encap[i])) return false;
    return true;
  }
};

const char* encap_name(Encap e);
// An AYIYA layer's identity field, [at, at + len) when captured: the
// sending endpoint's tunnel address (a SixXS identity is the IPv6 address
// of the tunnel's end), or a number or name that identifies it.
bool ayiya_identity(const uint8_t* p, uint32_t cap, const EncapLayer& L, uint32_t& at, uint32_t& len);
// A Teredo layer's origin indication (RFC 4380 5.1.1), 8 bytes at `at`
// when captured: the port and IPv4 address of the host a relay or server
// heard from (in a qualification answer, the client's own public mapping),
// each XORed with all ones, a disguise anyone undoes.
bool teredo_origin(const uint8_t* p, uint32_t cap, const EncapLayer& L, uint32_t& at);
// The bytes after a Teredo layer's IPv6 packet within its datagram,
// [at, end) within the captured bytes (false: none). A client's bubbles
// carry trailers there (RFC 6081, MS-TERD), each a type, a length and its
// value: nonce (1), alternate address (3), neighbour discovery option (4),
// random port (5).
bool teredo_trailers(const uint8_t* p, uint32_t cap, const EncapLayer& L, uint32_t& at, uint32_t& end);
// Calls f(offset) for each IPv4 address of the alternate address trailers
// in [at, end): the client's other addresses (its LAN one among them), in
// clear, each followed by its port (2 reserved bytes, then 6-byte entries).
// Returns where the trailers it knows stop: end when every byte is a known
// trailer's or zero padding; what lies after the return is no trailer a
// reader can vouch for.
template <class F>
uint32_t each_teredo_alt_addr(const uint8_t* p, uint32_t at, uint32_t end, F&& f) {
  while (at < end) {
    if (p[at] == 0) {  // padding to the end
      uint32_t z = at;
      while (z < end && p[z] == 0) ++z;
      return z == end ? end : at;
    }
    if (at + 2 > end) return at;
    const uint8_t type = p[at], len = p[at + 1];
    if (at + 2u + len > end) return at;
    // Nonce, neighbour discovery option (its type and 3 reserved bytes),
    // random port, alternate addresses (one to four).
    const bool ok = (type == 1 && len == 4) || (type == 4 && len == 4) || (type == 5 && len == 2) ||
                    (type == 3 && len >= 8 && len <= 26 && (len - 2) % 6 == 0);
    if (!ok) return at;
    if (type == 3)
      for (uint32_t e = at + 4; e + 6 <= at + 2u + len; e += 6) f(e);
    at += 2u + len;
  }
  return at;
}

// One fragment of an outer IP datagram (no encapsulation decoded above it,
// no PPPoE, every byte captured; IPv6: the fragment header after the fixed
// one and the hop-by-hop, routing and destination options headers that may
// precede it): which datagram it belongs to and where its data lies. A
// datagram that carries a tunnel is made whole so the packet inside can be
// decoded (the engine's outer_frag.h, the audit).
struct FragInfo {
  uint8_t version = 0, proto = 0;
  bool more = false;
  uint32_t id = 0;
  uint8_t src[16] = {}, dst[16] = {};
  uint32_t l3_off = 0;      // the IP header in the frame
  uint32_t off = 0;         // data offset in the datagram
  uint32_t len = 0;         // data bytes
  uint32_t data_start = 0;  // first data byte in the frame
  uint32_t nh_at = 0;       // IPv6: the Next Header byte that names the fragment header
  uint32_t ip_end = 0;      // end of the IP datagram in the frame (padding may follow)
};
// False: not such a fragment (it keeps the per-fragment path).
bool outer_frag_info(const uint8_t* p, const Decoded& d, FragInfo& fi);
bool same_datagram(const FragInfo& a, const FragInfo& b);
// The whole datagram's headers: the first fragment's link and IP headers
// with the lengths and fragment fields of an unfragmented datagram of
// `total` data bytes (IPv6: the fragment header removed, the header before
// it naming what it named). Its data follows
// at whole_header_len.
uint32_t whole_header_len(const FragInfo& first);
void whole_header(const uint8_t* first_frame, const FragInfo& first, uint32_t total, uint8_t* out);

// The sums of the spans the encapsulations' UDP and GRE checksums cover,
// taken before the inner packet is rewritten (bit i of valid: layer i has
// a checksum in use over captured bytes).
struct EncapSums {
  uint16_t sum[kMaxEncap];
  // The input's checksum error per layer: the ones' complement sum of
  // pseudo-header, span and checksum, 0xffff when it was right. A cut
  // recomputes the checksum and adds it back: a wrong one stays wrong.
  uint16_t err[kMaxEncap];
  uint8_t valid = 0;
};
void encap_sums(const uint8_t* p, uint32_t cap, const Decoded& d, EncapSums& s);
// After the inner packet and the outer addresses were rewritten, and the
// frame maybe cut at `cap` (cut): every layer's lengths (IP, UDP, GTP-U,
// PPPoE) shrink by what was cut from it, its IPv4 header checksum is
// recomputed, and its UDP/GRE checksum follows: recomputed in full after a
// cut (then made as wrong as it was in the input: EncapSums::err), updated
// incrementally otherwise (so one that was wrong stays wrong),
// left 0 when it was 0. old_addrs[i]: layer i's source and destination
// before the rewrite, for the layers in addr_changed.
void encap_fix(uint8_t* p, uint32_t cap, bool cut, const Decoded& d, const EncapSums& s,
               const uint8_t (*old_addrs)[32], uint8_t addr_changed);

// Decodes bytes [0, cap) of a frame whose wire length is wire_len.
void decode(const uint8_t* p, uint32_t cap, uint32_t wire_len, Decoded& d);
// The same without decode()'s fast paths for plain Ethernet/IP/TCP|UDP
// frames and for one GTP-U or VXLAN layer over such a frame: the
// reference the fast paths are tested against.
void decode_full(const uint8_t* p, uint32_t cap, uint32_t wire_len, Decoded& d);

// Link layers other than Ethernet whose frames carry fields of their own
// (802.11 with radiotap, PPI or nothing before it). A capture reader hands
// such a record to the packet path as a stand-in Ethernet header (both
// addresses zero but bytes 4-5, the record's link type), EtherType
// kEthLinkStandIn) followed by the record as the
// layer's `normalize` left it; the decoder then walks the layer's header
// (`decode`), the runtime gives the fields its `locate` finds their rules,
// and the writer puts the frame back without the stand-in. A plugin
// registers its layer (set_link_layer); nothing here names it.
constexpr uint16_t kEthLinkStandIn = 0x88b5;  // IEEE 802 local experimental EtherType 1

// What follows a link header that carries no IP (Decoded::link_body).
enum class LinkBody : uint8_t {
  Unknown = 0,  // another protocol: on_unknown applies, as to a non-IP Ethernet frame
  Located,      // every byte is the header's, its fields located: nothing else to decide
  Opaque,       // encrypted: no field can be in clear in it; the payload rule decides it
};

// What the layer's decode found: the next protocol (an EtherType, at `off`)
// or a body without IP, how far the bytes are known, and whether they end
// cleanly.
struct LinkDecode {
  DecodeStatus status = DecodeStatus::Malformed;  // Ok: `ethertype` at `off`; NotIp: `body` at `off`
  LinkBody body = LinkBody::Unknown;
  uint16_t ethertype = 0;
  uint32_t off = 0;
  uint32_t good_until = 0;  // every byte before is the header's, located (Malformed/Truncated: cut there)
};

// Values a link header holds: its addresses (Mac), names (Name) and opaque
// identifiers (Bytes), offsets from the first byte of the packet (the
// stand-in included). Room for every value of a frame; a frame with more
// is Malformed at its first value past kMax.
struct LinkOccs {
  static constexpr unsigned kMax = 64;
  uint32_t n = 0;
  ProtoOcc occ[kMax];
};

struct LinkLayer {
  const char* name;  // its protocol name (FieldDesc::protocol of its fields)
  int dlts[4];       // libpcap DLT_* values it reads, 0 ends the list
  // The record of link type `dlt` as the frame the packet path sees, into
  // `out` (room for cap + 64 bytes): what a monitor needs of the capture
  // header and nothing that names a device. Returns the bytes written and
  // sets `out_wire`, the record's wire length less what was removed.
  uint32_t (*normalize)(int dlt, const uint8_t* in, uint32_t cap, uint32_t wire, uint8_t* out, uint32_t& out_wire);
  // The frame of link type `dlt` at `off` (after the stand-in) of a packet
  // of `cap` captured bytes.
  void (*decode)(int dlt, const uint8_t* p, uint32_t cap, uint32_t off, LinkDecode& r);
  // Its values before the decode's good_until, in the order found.
  void (*locate)(int dlt, const uint8_t* p, uint32_t cap, uint32_t off, LinkOccs& out);
  // A name decision written into a Name occurrence, length kept.
  void (*rewrite_name)(uint8_t* p, const ProtoOcc& o, const names::Decision& d);
};
// One link layer at most; null clears.
void set_link_layer(const LinkLayer* l);
const LinkLayer* link_layer();
// The layer that reads link type `dlt`, or null.
const LinkLayer* link_layer_for(int dlt);
// The stand-in Ethernet header for a record of link type `dlt` (14 bytes);
// and the link type a packet's stand-in names (0: none, or not a layer's).
void link_stand_in(int dlt, uint8_t* eth);
int link_stand_in_dlt(const uint8_t* p, uint32_t cap);

namespace l2l4 {
struct FieldIds {
  FieldId eth_src = kNoField, eth_dst = kNoField, ip_src = kNoField, ip_dst = kNoField, ip_client = kNoField,
          ip_server = kNoField, payload = kNoField;
  // The layers around an encapsulated packet (EncapLayer).
  FieldId tunnel_addr = kNoField, tunnel_vni = kNoField, gre_key = kNoField, gtp_teid = kNoField;
};
extern FieldIds g_fields;
void register_fields(Registry& r);
}  // namespace l2l4

}  // namespace amon
