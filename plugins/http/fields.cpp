// HTTP's policy fields: the registry entries (what `amon fields`, the
// linter and the docs list) and, for each, the parser's occurrence kinds
// that hold its value. The runtime reads both through this table only, so a
// header becomes a field by adding it here and to the parser's patterns.
#include "amon_http.hpp"
#include "registry.h"

#include <algorithm>

namespace amon::http {

namespace {

struct Spec {
  const char* name;
  ValueType type;
  FieldRole role;
  const char* value_class;
  const char* doc;
  std::vector<std::string> related;
  Field kinds[2];  // occurrence kinds whose span is this field's value (Other: none)
  // A header whose value http.other_headers would hold without this field:
  // it takes that field's rules while no rule names it (FieldDesc::split_from).
  bool split = false;
};

const std::vector<Spec>& specs() {
  using VT = ValueType;
  using R = FieldRole;
  static const std::vector<Spec> s = {
      {"http.host", VT::Name, R::QuasiIdentifier, "domain", "HTTP Host header",
       {"http.referer", "http.uri", "tls.sni"}, {Field::HostDomain, Field::Host}},
      {"http.method", VT::Text, R::Other, "", "HTTP request method", {}, {Field::Method, Field::Other}},
      {"http.uri", VT::Text, R::QuasiIdentifier, "", "HTTP request target", {"http.host"}, {Field::Uri, Field::Other}},
      {"http.user_agent", VT::Text, R::QuasiIdentifier, "user-agent", "HTTP User-Agent header", {},
       {Field::UserAgent, Field::Other}, true},
      {"http.referer", VT::Text, R::QuasiIdentifier, "", "HTTP Referer header", {"http.host"},
       {Field::Referer, Field::Other}, true},
      {"http.cookie", VT::Text, R::Identifier, "", "HTTP Cookie header", {"http.set_cookie"},
       {Field::Cookie, Field::Other}, true},
      {"http.set_cookie", VT::Text, R::Identifier, "", "HTTP Set-Cookie response header", {"http.cookie"},
       {Field::SetCookie, Field::Other}, true},
      {"http.authorization", VT::Text, R::Identifier, "", "HTTP Authorization header", {},
       {Field::Authorization, Field::Other}, true},
      {"http.xff", VT::Text, R::Identifier, "", "X-Forwarded-For and Forwarded headers (client addresses)", {},
       {Field::Xff, Field::Forwarded}, true},
      {"http.location", VT::Text, R::QuasiIdentifier, "", "HTTP Location response header", {"http.host"},
       {Field::Location, Field::Other}, true},
      {"http.server", VT::Text, R::Other, "", "HTTP Server response header", {}, {Field::Server, Field::Other}},
      {"http.origin", VT::Text, R::QuasiIdentifier, "", "HTTP Origin header (scheme, host and port of the page)",
       {"http.host", "http.referer"}, {Field::Origin, Field::Other}, true},
      {"http.proxy_authorization", VT::Text, R::Identifier, "", "HTTP Proxy-Authorization header (credentials)",
       {"http.authorization"}, {Field::ProxyAuthorization, Field::Other}, true},
      {"http.x_real_ip", VT::Text, R::Identifier, "", "X-Real-IP header (a client address set by a proxy)",
       {"http.xff"}, {Field::XRealIp, Field::Other}, true},
      {"http.other_headers", VT::Text, R::QuasiIdentifier, "",
       "the value of every HTTP header no other http.* field names (Content-Location, P3P, Via, Link, Refresh, "
       "vendor headers...); Content-Length and Transfer-Encoding stay out: they frame the message",
       {"http.host", "http.uri"}, {Field::OtherHeader, Field::Other}},
      // Located by body_spans, not by an occurrence kind.
      {"http.body", VT::Bytes, R::Other, "",
       "HTTP message bodies, chunk framing included: every byte of an HTTP flow's payload outside a parsed "
       "message head (zero, redact, hash keep them in place; snap removes them from the record, lengths kept)",
       {}, {Field::Other, Field::Other}},
      {"http.from", VT::Text, R::Identifier, "",
       "HTTP From header (the e-mail address of the user making the request, RFC 9110 10.1.2)",
       {"http.authorization"}, {Field::From, Field::Other}, true},
      // Content description and caching: what traffic meters (Tstat, nDPI)
      // classify content and services with. Standard tokens, media types and
      // times; none names a person, a site or a page.
      {"http.content_type", VT::Text, R::Other, "", "HTTP Content-Type header (media type, charset, boundary)",
       {"http.content_encoding"}, {Field::ContentType, Field::Other}, true},
      {"http.content_encoding", VT::Text, R::Other, "", "HTTP Content-Encoding header (gzip, br, ...)",
       {"http.content_type"}, {Field::ContentEncoding, Field::Other}, true},
      {"http.cache_control", VT::Text, R::Other, "", "HTTP Cache-Control header (caching directives)",
       {"http.expires", "http.pragma"}, {Field::CacheControl, Field::Other}, true},
      {"http.date", VT::Text, R::Other, "", "HTTP Date header (when the message was sent)", {"http.expires"},
       {Field::Date, Field::Other}, true},
      {"http.expires", VT::Text, R::Other, "", "HTTP Expires header (when a response goes stale)",
       {"http.cache_control", "http.date"}, {Field::Expires, Field::Other}, true},
      {"http.pragma", VT::Text, R::Other, "", "HTTP Pragma header (no-cache)", {"http.cache_control"},
       {Field::Pragma, Field::Other}, true},
  };
  return s;
}

}  // namespace

void register_fields(Registry& r) {
  for (const Spec& s : specs()) {
    FieldDesc d{s.name, s.type, "http", s.role, s.value_class, s.doc, s.related};
    if (s.split) d.split_from = {"http.other_headers"};
    // A body is no value a condition could compare.
    d.cond_ops = s.type == ValueType::Bytes ? 0 : kCondAll;
    r.add_field(std::move(d));
  }
}

bool locates(std::string_view field) {
  for (const Spec& s : specs())
    if (field == s.name) return true;
  return false;
}

const char* registry_field(Field k) {
  if (k == Field::Other) return nullptr;
  for (const Spec& s : specs())
    for (Field f : s.kinds)
      if (f == k) return s.name;
  return nullptr;
}

bool is_field_value(const Result& r, unsigned i) {
  const Occurrence& oc = r.occ[i];
  if (oc.kind != Field::Host) return registry_field(oc.kind) != nullptr;
  // A Host with a domain is that domain (port stripped); one without (an
  // address literal) names the server all the same: the whole value.
  for (unsigned k = 0; k < r.n_occ; ++k)
    if (r.occ[k].kind == Field::HostDomain && r.occ[k].header == oc.header) return false;
  return true;
}

unsigned body_spans(const Result& r, uint32_t from, uint32_t to, Span* out, unsigned max) {
  // The complement of the heads: bytes the parse did not place in a head
  // (a body, a framing line, what follows an unparsed message) are body.
  unsigned n = 0;
  uint32_t at = from;
  auto add = [&](uint32_t b, uint32_t e) {
    if (e <= b) return;
    if (n == max) {  // no room: the last span runs on to the end (more body, never less)
      out[n - 1].len = to - out[n - 1].off;
      return;
    }
    out[n++] = {b, e - b};
  };
  for (unsigned i = 0; i < r.n_msgs && at < to; ++i) {
    const Message& m = r.msgs[i];
    const uint32_t hb = std::max(m.off, from), he = std::min(m.off + m.head_len, to);
    if (he <= at) continue;
    if (hb > at) add(at, std::min(hb, to));
    at = std::max(at, he);
  }
  add(at, to);
  return n;
}

}  // namespace amon::http
