// Registry declarations of the DHCP fields. Kept here, with the parser that
// finds them, so the plugin is one folder.
#include "amon_dhcp.hpp"
#include "registry.h"

namespace amon::dhcp {

void register_fields(Registry& r) {
  using VT = ValueType;
  using R = FieldRole;
  r.add_field({"dhcp.hostname", VT::Name, "dhcp", R::Identifier, "domain",
               "client host name: DHCPv4 option 12, client FQDN (DHCPv4 option 81, DHCPv6 option 39); the "
               "BOOTP server host name (sname), a user's device where it shares its connection; the device "
               "names of mDNS, LLMNR and NBNS where no DNS name rule applies",
               {"dhcp.chaddr", "dhcp.client_id"}, kNoField, kCondAll});
  r.add_field({"dhcp.client_id", VT::Bytes, "dhcp", R::Identifier, "",
               "client identifier (DHCPv4 option 61, machine UUID option 97, DHCPv6 client DUID) and "
               "Broadband Forum serial numbers (DHCPv4 option 125, DHCPv6 option 17); type bytes are kept",
               {"dhcp.chaddr", "dhcp.hostname"}});
  r.add_field({"dhcp.chaddr", VT::Mac, "dhcp", R::Identifier, "",
               "client hardware address (BOOTP chaddr, DHCPv6 client link-layer address option 79)",
               {"eth.src", "dhcp.client_id"}});
  r.add_field({"dhcp.addr", VT::Addr, "dhcp", R::Identifier, "",
               "client addresses: ciaddr, yiaddr, requested address (option 50), a leasequery's associated "
               "addresses (option 92), DHCPv6 IA addresses and "
               "delegated prefixes, relay peer-address; give it ip.client's action so a lease and the "
               "traffic that follows keep one pseudonym",
               {"ip.client"}});
  r.add_field({"dhcp.vendor_class", VT::Text, "dhcp", R::QuasiIdentifier, "vendor-class",
               "vendor class (DHCPv4 options 60 and 124, DHCPv6 option 16) and Broadband Forum product "
               "classes: device make and model",
               {}, kNoField, kCondAll});
  r.add_field({"dhcp.relay_id", VT::Bytes, "dhcp", R::Identifier, "",
               "relay agent identifiers of the client's line: option 82 circuit, remote and subscriber IDs, "
               "DHCPv6 interface-id, remote-id, subscriber-id",
               {"dhcp.addr"}});
  r.add_field({"dhcp.server_id", VT::Bytes, "dhcp", R::Other, "",
               "DHCPv6 server DUID (names the server, often by its MAC)", {}});
}

}  // namespace amon::dhcp
