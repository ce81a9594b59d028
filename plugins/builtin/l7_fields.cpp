// Fields of the application protocols (DNS, TLS, HTTP). Their parsers live
// in plugins/dns, plugins/tls and plugins/http; the fields are declared here,
// in the one registration file, so the language and linter see them all.
#include "registry.h"

namespace amon {

void register_l7_fields(Registry& r) {
  using VT = ValueType;
  using R = FieldRole;
  r.add_field({"dns.qname", VT::Name, "dns", R::QuasiIdentifier, "domain", "DNS question name",
               {"dns.answer.name", "dns.rdata.name", "dns.answer.addr"}});
  r.add_field({"dns.answer.name", VT::Name, "dns", R::QuasiIdentifier, "domain",
               "owner names of answer, authority and additional records", {"dns.qname"}});
  r.add_field({"dns.rdata.name", VT::Name, "dns", R::QuasiIdentifier, "domain",
               "names inside record data (CNAME, NS, PTR, MX, SRV, SOA, DNAME)", {"dns.qname"}});
  r.add_field({"dns.answer.addr", VT::Addr, "dns", R::QuasiIdentifier, "server-addr",
               "addresses in A/AAAA record data", {"dns.qname"}});
  r.add_field({"dns.ecs", VT::Addr, "dns", R::Identifier, "",
               "EDNS Client Subnet address (the client's own network)", {}});
  r.add_field({"tls.sni", VT::Name, "tls", R::QuasiIdentifier, "domain", "TLS ClientHello server_name (over TCP, and in QUIC Initials)",
               {"dns.qname", "http.host"}});
  r.add_field({"http.host", VT::Name, "http", R::QuasiIdentifier, "domain", "HTTP Host header",
               {"http.referer", "http.uri", "tls.sni"}});
  r.add_field({"http.method", VT::Text, "http", R::Other, "", "HTTP request method", {}});
  r.add_field({"http.uri", VT::Text, "http", R::QuasiIdentifier, "", "HTTP request target", {"http.host"}});
  r.add_field({"http.user_agent", VT::Text, "http", R::QuasiIdentifier, "user-agent", "HTTP User-Agent header", {}});
  r.add_field({"http.referer", VT::Text, "http", R::QuasiIdentifier, "", "HTTP Referer header", {"http.host"}});
  r.add_field({"http.cookie", VT::Text, "http", R::Identifier, "", "HTTP Cookie header", {"http.set_cookie"}});
  r.add_field({"http.set_cookie", VT::Text, "http", R::Identifier, "", "HTTP Set-Cookie response header",
               {"http.cookie"}});
  r.add_field({"http.authorization", VT::Text, "http", R::Identifier, "", "HTTP Authorization header", {}});
  r.add_field({"http.xff", VT::Text, "http", R::Identifier, "",
               "X-Forwarded-For and Forwarded headers (client addresses)", {}});
  r.add_field({"http.location", VT::Text, "http", R::QuasiIdentifier, "", "HTTP Location response header",
               {"http.host"}});
  r.add_field({"http.server", VT::Text, "http", R::Other, "", "HTTP Server response header", {}});
}

}  // namespace amon
