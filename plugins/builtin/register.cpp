// The one place where every built-in plugin is registered.
#include <mutex>

#include "actions.h"
#include "amon_bgp.hpp"
#include "amon_dhcp.hpp"
#include "amon_dns.hpp"
#include "amon_http.hpp"
#include "amon_irc.hpp"
#include "amon_lisp.hpp"
#include "amon_mip6.hpp"
#include "amon_netbios.hpp"
#include "amon_ospf.hpp"
#include "amon_pim.hpp"
#include "amon_quic.hpp"
#include "amon_sctp.hpp"
#include "amon_stun.hpp"
#include "amon_tls.hpp"
#include "amon_wlan.hpp"
#include "carriers.h"
#include "l2l4.h"
#include "registry.h"

namespace amon {

static void register_settings(Registry& r) {
  r.add_setting({"identifier",
                 "who counts as one user for z-anonymity: the client address, or its prefix (IPv6 clients "
                 "often change the low 64 bits)",
                 "ip.client | ip.client/N | eth.src",
                 {"ip.client", "ip.src", "eth.src"}});
  r.add_setting({"clients", "address ranges of the monitored users; their end of a flow is ip.client",
                 "{ CIDR, ... }", {}});
  r.add_setting({"on_error",
                 "what to do with a packet that cannot be decoded far enough to apply a protecting rule: "
                 "drop it, cut it after the last header that could be anonymized, or snap it there (the "
                 "record ends there but every length field and the record's original length stay, as with "
                 "a capture snap length)",
                 "drop | cut | snap", {"drop", "cut", "snap"}});
  r.add_setting({"on_unknown",
                 "non-IP frames (ARP, LLDP, unknown EtherTypes): drop, keep, or cut to the Ethernet header; "
                 "default drop when the policy protects addresses, else keep",
                 "drop | keep | cut", {"drop", "keep", "cut"}});
  r.add_setting({"payload_default", "action for payload when no rule names it (default keep())",
                 "keep() | cut() | zero() | ...", {}});
  r.add_setting({"addr_text",
                 "a packet's own addresses written as text in payload the policy keeps (an HTTP Host, an FTP "
                 "PORT, a log line): map them as the packet's addresses are mapped, at the same length (default), "
                 "or keep them (no payload scan: faster, and the addresses stay in clear there)",
                 "map | keep", {"map", "keep"}});
  r.add_setting({"echoes",
                 "values the policy rewrote (other hosts' addresses and MACs, cookies and credentials, hidden "
                 "names) found again in payload it keeps, as text or binary: rewritten as their field was, at "
                 "the same length (default; not inside the fields parsed in the packet that a rule names, and a value only "
                 "z-anonymity hid leaves once a field releases it), or kept (no search: faster, and such copies "
                 "stay in clear)",
                 "map | keep", {"map", "keep"}});
}


void register_builtin_plugins() {
  static std::once_flag once;
  std::call_once(once, [] {
    Registry& r = Registry::instance();
    register_settings(r);
    l2l4::register_fields(r);
    wlan::register_plugin(r);
    carriers::register_ports(r);
    r.add_protocol(dns::protocol_plugin());
    r.add_protocol(dns::tcp_protocol_plugin());
    r.add_protocol(dns::nbns_protocol_plugin());
    r.add_protocol(tls::protocol_plugin());
    r.add_protocol(quic::protocol_plugin());
    r.add_protocol(http::protocol_plugin());
    r.add_protocol(dhcp::protocol_plugin());
    r.add_protocol(http::ssdp_plugin());
    r.add_protocol(stun_plugin::protocol_plugin());
    r.add_protocol(stun_plugin::tcp_protocol_plugin());
    r.add_protocol(netbios_plugin::protocol_plugin());
    r.add_protocol(sctp_plugin::protocol_plugin());
    r.add_protocol(ospf_plugin::protocol_plugin());
    r.add_protocol(pim_plugin::protocol_plugin());
    r.add_protocol(lisp_plugin::protocol_plugin());
    r.add_protocol(bgp_plugin::protocol_plugin());
    r.add_protocol(irc::protocol_plugin());
    r.add_protocol(mip6_plugin::protocol_plugin());
    actions::register_actions(r);
  });
}

}  // namespace amon
