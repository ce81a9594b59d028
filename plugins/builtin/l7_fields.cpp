// Fields of DNS (its parser lives in plugins/dns). Conditions can test
// dns.qname (the question); the other DNS fields have no evaluator, so the
// checker refuses conditions on them. The protocol plugins declare theirs.
#include "registry.h"

namespace amon {

void register_l7_fields(Registry& r) {
  // The runtime's own application (every other protocol is a plugin and
  // gets its name from Registry::add_protocol).
  r.add_proto_name("dns");
  using VT = ValueType;
  using R = FieldRole;
  r.add_field({"dns.qname", VT::Name, "dns", R::QuasiIdentifier, "domain", "DNS question name",
               {"dns.answer.name", "dns.rdata.name", "dns.answer.addr"}, kNoField, kCondAll});
  r.add_field({"dns.answer.name", VT::Name, "dns", R::QuasiIdentifier, "domain",
               "owner names of answer, authority and additional records", {"dns.qname"}});
  r.add_field({"dns.rdata.name", VT::Name, "dns", R::QuasiIdentifier, "domain",
               "names inside record data (CNAME, NS, PTR, MX, SRV, SOA, DNAME)", {"dns.qname"}});
  r.add_field({"dns.answer.addr", VT::Addr, "dns", R::QuasiIdentifier, "server-addr",
               "addresses in A/AAAA record data", {"dns.qname"}});
  r.add_field({"dns.ecs", VT::Addr, "dns", R::Identifier, "",
               "EDNS Client Subnet address (the client's own network)", {}});
}

}  // namespace amon
