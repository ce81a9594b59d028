// Fields of the L2-L4 protocols (Ethernet, 802.1Q/QinQ, IPv4, IPv6, TCP, UDP,
// ICMP) and of the encapsulations around a tunnelled packet. The decoder
// that finds them is decode.cpp (and tunnels.cpp) beside this file.
#include "l2l4.h"

namespace amon::l2l4 {

FieldIds g_fields;

void register_fields(Registry& r) {
  // What the decoder tells of every packet, for `proto in { ... }`.
  for (const char* p : {"eth", "vlan", "ip", "ipv4", "ipv6", "tcp", "udp", "icmp", "icmpv6", "sctp", "tunnel", "gtp",
                        "addr_carrier"})
    r.add_proto_name(p);
  g_fields.eth_src = r.add_field({"eth.src", ValueType::Mac, "eth", FieldRole::Identifier, "",
                                  "Ethernet source MAC address", {"eth.dst"}, kNoField, kCondCompare, /*trailing=*/false,
                                  /*header=*/true});
  g_fields.eth_dst = r.add_field({"eth.dst", ValueType::Mac, "eth", FieldRole::Identifier, "",
                                  "Ethernet destination MAC address", {"eth.src"}, kNoField, kCondCompare, /*trailing=*/false,
                                  /*header=*/true});
  g_fields.ip_src = r.add_field({"ip.src", ValueType::Addr, "ip", FieldRole::Identifier, "",
                                 "IPv4/IPv6 source address (both roles; prefer ip.client/ip.server)",
                                 {"ip.dst"}, kNoField, kCondCompare, /*trailing=*/false,
                                  /*header=*/true});
  g_fields.ip_dst = r.add_field({"ip.dst", ValueType::Addr, "ip", FieldRole::Identifier, "",
                                 "IPv4/IPv6 destination address (both roles; prefer ip.client/ip.server)",
                                 {"ip.src"}, kNoField, kCondCompare, /*trailing=*/false,
                                  /*header=*/true});
  g_fields.ip_client = r.add_field(
      {"ip.client", ValueType::Addr, "ip", FieldRole::Identifier, "client-addr",
       "address of the flow's client: inside `clients` when set, else by evidence (SYN sender, a server seen "
       "on the other end's port, likely server port; see doc/language.md, Roles)",
       {}, kNoField, kCondCompare, /*trailing=*/false,
                                  /*header=*/true});
  g_fields.ip_server = r.add_field({"ip.server", ValueType::Addr, "ip", FieldRole::QuasiIdentifier,
                                    "server-addr", "address of the flow's server (the other end from ip.client)",
                                    {}, kNoField, kCondCompare, /*trailing=*/false,
                                  /*header=*/true});
  g_fields.payload = r.add_field({"payload", ValueType::Bytes, "l4", FieldRole::Content, "",
                                  "transport payload (bytes after the TCP/UDP/ICMP header; after the IP header "
                                  "for other protocols and non-first fragments)",
                                  {}, kNoField, kCondMatch, /*trailing=*/true, /*header=*/true});
  // A tunnelled packet's own addresses are ip.*; these are the
  // infrastructure's: the IP headers that carry it, and their identifiers.
  g_fields.tunnel_addr = r.add_field(
      {"tunnel.addr", ValueType::Addr, "tunnel", FieldRole::QuasiIdentifier, "",
       "addresses of every IP header that carries a tunnelled packet (GTP-U, VXLAN, Geneve, GRE, ERSPAN, IP in "
       "IP, Teredo, AYIYA, PIM Register endpoints: eNodeB/gNB, SGW/UPF, VTEP, mirror source and collector, a multicast "
       "source's router and its RP). No rule: a policy that "
       "protects addresses gives them ip.server's action (its fallback when that is zanon), others keep them",
       {}});
  g_fields.tunnel_vni = r.add_field({"tunnel.vni", ValueType::Bytes, "tunnel", FieldRole::Other, "",
                                     "VXLAN, VXLAN-GPE or Geneve network identifier (3 bytes; tenant segment). No "
                                     "rule: kept",
                                     {}});
  g_fields.gre_key = r.add_field({"gre.key", ValueType::Bytes, "tunnel", FieldRole::Other, "",
                                  "GRE key (4 bytes; tunnel or ERSPAN session). No rule: kept", {}});
  g_fields.gtp_teid = r.add_field(
      {"gtp.teid", ValueType::Bytes, "gtp", FieldRole::QuasiIdentifier, "",
       "GTP-U tunnel endpoint identifier (4 bytes): names one subscriber's bearer in one direction. No rule: kept; "
       "hash(key=K) keeps it linkable per bearer without the operator's value",
       {}});
}

}  // namespace amon::l2l4
