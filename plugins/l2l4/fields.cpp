// Fields of the L2-L4 protocols (Ethernet, 802.1Q/QinQ, IPv4, IPv6, TCP, UDP,
// ICMP). The decoder that finds them is decode.cpp beside this file.
#include "l2l4.h"

namespace amon::l2l4 {

FieldIds g_fields;

void register_fields(Registry& r) {
  g_fields.eth_src = r.add_field({"eth.src", ValueType::Mac, "eth", FieldRole::Identifier, "",
                                  "Ethernet source MAC address", {"eth.dst"}, kNoField, kCondCompare});
  g_fields.eth_dst = r.add_field({"eth.dst", ValueType::Mac, "eth", FieldRole::Identifier, "",
                                  "Ethernet destination MAC address", {"eth.src"}, kNoField, kCondCompare});
  g_fields.ip_src = r.add_field({"ip.src", ValueType::Addr, "ip", FieldRole::Identifier, "",
                                 "IPv4/IPv6 source address (both roles; prefer ip.client/ip.server)",
                                 {"ip.dst"}, kNoField, kCondCompare});
  g_fields.ip_dst = r.add_field({"ip.dst", ValueType::Addr, "ip", FieldRole::Identifier, "",
                                 "IPv4/IPv6 destination address (both roles; prefer ip.client/ip.server)",
                                 {"ip.src"}, kNoField, kCondCompare});
  g_fields.ip_client = r.add_field(
      {"ip.client", ValueType::Addr, "ip", FieldRole::Identifier, "client-addr",
       "address of the flow's client: inside `clients` when set, else the flow initiator (SYN sender or "
       "first packet seen)",
       {}, kNoField, kCondCompare});
  g_fields.ip_server = r.add_field({"ip.server", ValueType::Addr, "ip", FieldRole::QuasiIdentifier,
                                    "server-addr", "address of the flow's server (the other end from ip.client)",
                                    {}, kNoField, kCondCompare});
  g_fields.payload = r.add_field({"payload", ValueType::Bytes, "l4", FieldRole::Content, "",
                                  "transport payload (bytes after the TCP/UDP/ICMP header; after the IP header "
                                  "for other protocols and non-first fragments)",
                                  {}, kNoField, kCondMatch});
}

}  // namespace amon::l2l4
