// L2-L4 protocols: Ethernet, 802.1Q/802.1ad (QinQ), MPLS, PPPoE session,
// IPv4 (options), IPv6 (extension headers), TCP, UDP, ICMP, ICMPv6.
//
// decode() runs once per packet on the original bytes; every consumer's
// pipeline then works by offset on its own copy. It never reads past `cap`
// and records how far it got, so a packet that cannot be decoded far enough
// is handled by the policy's on_error (fail closed) rather than forwarded.
#pragma once

#include <cstdint>

#include "registry.h"

namespace amon {

enum class DecodeStatus : uint8_t {
  Ok,         // decoded through L4 (or through L3 for protocols without L4 header)
  NotIp,      // no IP layer: ARP, LLDP, unknown EtherType
  Truncated,  // captured bytes end inside a header (snaplen or a short frame)
  Malformed,  // a length or header field is impossible
};

enum L4Proto : uint8_t {
  kProtoIcmp = 1, kProtoIpIp = 4, kProtoTcp = 6, kProtoUdp = 17, kProtoIpv6 = 41,
  kProtoGre = 47, kProtoEsp = 50, kProtoAh = 51, kProtoIcmpv6 = 58, kProtoNone = 59, kProtoSctp = 132,
};

enum : uint8_t {  // Decoded::flags
  kFlagFragment = 1,      // IPv4 MF/offset or IPv6 fragment header present
  kFlagLaterFragment = 2, // not the first fragment: no L4 header in this packet
  kFlagTunnel = 4,        // IP payload is another network layer (IP-in-IP, GRE, known UDP tunnels)
  kFlagV6Routing = 8,     // IPv6 routing header carrying addresses (type 0 or segment routing)
  kFlagIcmpError = 16,    // ICMP/ICMPv6 error quoting an earlier packet's IP header
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
  uint16_t ipv6_rh_off = 0; // IPv6 routing header offset when kFlagV6Routing
  uint32_t cap_len = 0;     // bytes captured
  uint32_t wire_len = 0;    // bytes on the wire (>= cap_len)

  bool has_ip() const { return ip_version != 0 && status != DecodeStatus::NotIp; }
  uint32_t src_off() const { return l3_off + (ip_version == 4 ? 12u : 8u); }
  uint32_t dst_off() const { return l3_off + (ip_version == 4 ? 16u : 24u); }
  uint32_t addr_len() const { return ip_version == 4 ? 4u : 16u; }
  bool has_l4_header() const { return l4_hdr_len != 0; }
  bool operator==(const Decoded&) const = default;  // field by field (padding ignored)
};

// Decodes bytes [0, cap) of a frame whose wire length is wire_len.
void decode(const uint8_t* p, uint32_t cap, uint32_t wire_len, Decoded& d);
// The same without decode()'s fast path for plain Ethernet/IP/TCP|UDP
// frames: the reference the fast path is tested against.
void decode_full(const uint8_t* p, uint32_t cap, uint32_t wire_len, Decoded& d);

namespace l2l4 {
struct FieldIds {
  FieldId eth_src = kNoField, eth_dst = kNoField, ip_src = kNoField, ip_dst = kNoField, ip_client = kNoField,
          ip_server = kNoField, payload = kNoField;
};
extern FieldIds g_fields;
void register_fields(Registry& r);
}  // namespace l2l4

}  // namespace amon
