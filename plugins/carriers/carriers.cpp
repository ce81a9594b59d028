#include "carriers.h"

namespace amon::carriers {

void register_ports(Registry& r) {
  r.add_addr_carrier("ftp", {21});                          // PORT, PASV, EPRT, EPSV
  r.add_addr_carrier("smtp", {25, 587});                    // Received headers, EHLO [address]
  r.add_addr_carrier("kerberos", {88});                     // ticket addresses
  r.add_addr_carrier("netbios", {139});                     // sessions (NBNS, datagrams: plugins dns, netbios)
  r.add_addr_carrier("snmp", {161, 162});                   // agent addresses, tables
  r.add_addr_carrier("smb", {445});
  r.add_addr_carrier("syslog", {514});                      // log lines
  r.add_addr_carrier("rpki-rtr", {323});                    // prefixes, to /32 and /128
  r.add_addr_carrier("rtsp", {554});                        // Transport destinations
  r.add_addr_carrier("radius", {1645, 1646, 1812, 1813});   // Framed-IP-Address, NAS address
  r.add_addr_carrier("h323", {1719, 1720});                 // RAS and call signalling
  r.add_addr_carrier("skinny", {2000});                     // Cisco SCCP: media addresses in binary
  r.add_addr_carrier("ldp", {646});                         // LSR identifiers, transport addresses, address lists, FECs
  r.add_addr_carrier("flow-export", {2055, 4739, 6343, 9995, 9996});  // NetFlow, IPFIX, sFlow records
  r.add_addr_carrier("mgcp", {2427, 2727});                 // SDP
  r.add_addr_carrier("megaco", {2944, 2945});               // H.248 text (SDP) and binary
  r.add_addr_carrier("ws-discovery", {3702});               // XAddrs
  r.add_addr_carrier("sip", {5060});                        // SIP/SDP
  r.add_addr_carrier("babel", {6696});                      // router ids, next hops, neighbours, prefixes
  r.add_addr_carrier("afs", {7001, 7003, 7005});            // Rx: callback interface lists, VL and volume server sites
  r.add_addr_carrier("hncp", {8231});                       // node endpoints, assigned prefixes and addresses
  r.add_addr_carrier("syncthing-discovery", {21027});       // a device's addresses as URLs, in its other family's announcements
  r.add_addr_carrier("dlink-discovery", {62976});           // D-Link Smart Console: the switch's IPv4 and IPv6 addresses
  r.add_addr_carrier("openflow", {6633, 6653});             // PACKET_IN/OUT frames, flow matches, port MACs
  r.add_addr_carrier("capwap", {5246, 5247});               // AC and WTP addresses, radio MACs; stations' whole frames
  r.add_addr_carrier("lwapp", {12222, 12223});              // CAPWAP's forerunner: the same frames and names
}

}  // namespace amon::carriers
