#include "l7.h"

#include <cstring>

namespace amon {

const L7Fields& L7Fields::get() {
  static const L7Fields f = [] {
    L7Fields x;
    auto& r = Registry::instance();
    auto id = [&](const char* n) { return r.field(n)->id; };
    x.dns_qname = id("dns.qname");
    x.dns_answer_name = id("dns.answer.name");
    x.dns_rdata_name = id("dns.rdata.name");
    x.dns_answer_addr = id("dns.answer.addr");
    x.dns_ecs = id("dns.ecs");
    x.tls_sni = id("tls.sni");
    x.http_host = id("http.host");
    x.http_method = id("http.method");
    x.http_uri = id("http.uri");
    x.http_user_agent = id("http.user_agent");
    x.http_referer = id("http.referer");
    x.http_cookie = id("http.cookie");
    x.http_set_cookie = id("http.set_cookie");
    x.http_authorization = id("http.authorization");
    x.http_xff = id("http.xff");
    x.http_location = id("http.location");
    x.http_server = id("http.server");
    x.first = x.dns_qname;
    x.last = x.http_server;
    return x;
  }();
  return f;
}

const http::Matcher& http_matcher() {
  static const http::Matcher m;
  return m;
}

L7Parse::L7Parse()
    : dns(std::make_unique<dns::ParseResult>()),
      split(std::make_unique<dns::TcpSplit>()),
      tls(std::make_unique<tls::ClientHello>()),
      http(std::make_unique<http::Result>()),
      hscratch(std::make_unique<http::Scratch>(http_matcher())) {}
L7Parse::~L7Parse() = default;

namespace {

bool is_dns_port(uint16_t p) { return p == 53 || p == 5353 || p == 5355; }

// Any request line "TOKEN SP target SP HTTP/1.x" (UPnP's SUBSCRIBE and
// NOTIFY, WebDAV, ...), on any port: a Host header is a Host header wherever
// it travels.
bool request_line(const uint8_t* p, uint32_t n) {
  uint32_t lim = std::min<uint32_t>(n, 8192), i = 0;
  while (i < lim && ((p[i] >= 'A' && p[i] <= 'Z') || p[i] == '-' || p[i] == '_')) ++i;
  if (i < 3 || i > 24 || i >= lim || p[i] != ' ') return false;
  uint32_t eol = i;
  while (eol < lim && p[eol] != '\r' && p[eol] != '\n') ++eol;
  return eol < lim && eol >= i + 10 && std::memcmp(p + eol - 9, " HTTP/1.", 8) == 0;
}

bool starts_with_method(const uint8_t* p, uint32_t n) {
  static const char* methods[] = {"GET ", "POST ", "HEAD ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "};
  for (const char* m : methods) {
    size_t l = std::strlen(m);
    if (n >= l && std::memcmp(p, m, l) == 0) return true;
  }
  return false;
}

}  // namespace

App detect_app(const uint8_t* p, const Decoded& d, bool from_client) {
  if (d.status != DecodeStatus::Ok || !d.l4_hdr_len || (d.flags & kFlagLaterFragment)) return App::Unknown;
  const uint32_t avail = d.payload_off < d.cap_len ? std::min(d.cap_len, d.payload_off + d.payload_len) - d.payload_off : 0;
  const uint8_t* pl = p + d.payload_off;
  if (d.l4_proto == kProtoUdp) {
    if (is_dns_port(d.sport) || is_dns_port(d.dport)) return App::Dns;
    // SSDP is HTTP over UDP.
    if (d.sport == 1900 || d.dport == 1900) return App::Http;
    // QUIC long header on any port: form and fixed bits, and a known version
    // (v1, v2, drafts, or 0 for version negotiation).
    if (avail >= 7 && (pl[0] & 0xc0) == 0xc0) {
      uint32_t v = uint32_t(pl[1]) << 24 | uint32_t(pl[2]) << 16 | uint32_t(pl[3]) << 8 | pl[4];
      // Google QUIC ('Q0xx', 'T0xx') too, and anything long-header on 443.
      bool gquic = (pl[1] == 'Q' || pl[1] == 'T') && pl[2] == '0';
      bool port = d.sport == 443 || d.dport == 443 || d.sport == 8443 || d.dport == 8443;
      if (v == 1 || v == 0x6b3343cf || (v >> 8) == 0xff0000 || (v >> 4) == 0xfaceb00 || v == 0 || (v & 0x0f0f0f0f) == 0x0a0a0a0a || gquic || port)
        return App::Quic;
    }
    return App::Other;
  }
  if (d.l4_proto != kProtoTcp) return App::Other;
  if (is_dns_port(d.sport) || is_dns_port(d.dport)) return App::DnsTcp;
  if (avail >= 3 && pl[0] == 0x16 && pl[1] == 0x03 && pl[2] <= 0x04) return App::Tls;
  if (avail >= 8 && (starts_with_method(pl, avail) || std::memcmp(pl, "HTTP/1.", 7) == 0 || request_line(pl, avail)))
    return App::Http;
  uint16_t sp = from_client ? d.dport : d.sport;
  if (sp == 443) return App::Tls;
  if (sp == 80 || sp == 8080 || sp == 8000) return App::Http;
  return App::Other;
}

}  // namespace amon
