#include "protos.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace amon::gen {

// ---------------------------------------------------------------- DNS

void dns_name(Writer& w, std::string_view name) {
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    w.u8(static_cast<unsigned>(dot - start));
    w.str(name.substr(start, dot - start));
    start = dot + 1;
  }
  w.u8(0);
}

static void dns_opt(Writer& w) {
  w.u8(0);       // root owner
  w.u16(41);     // OPT
  w.u16(1232);   // UDP payload size, the 2020 DNS flag day value
  w.u32(0);      // ext rcode, version, flags
  w.u16(0);
}

Bytes dns_query(uint16_t id, std::string_view qname, uint16_t qtype, bool edns) {
  Bytes b;
  b.reserve(32 + qname.size());
  Writer w{b};
  w.u16(id);
  w.u16(0x0100);  // RD
  w.u16(1), w.u16(0), w.u16(0), w.u16(edns ? 1 : 0);
  dns_name(w, qname);
  w.u16(qtype), w.u16(1);
  if (edns) dns_opt(w);
  return b;
}

Bytes dns_response(uint16_t id, std::string_view qname, uint16_t qtype, bool edns,
                   const std::vector<std::string>& cnames, const std::vector<std::array<uint8_t, 16>>& addrs,
                   uint32_t ttl) {
  Bytes b;
  b.reserve(64 + qname.size() * 2 + cnames.size() * 40 + addrs.size() * 28);
  Writer w{b};
  w.u16(id);
  w.u16(0x8180);  // QR, RD, RA, NOERROR
  w.u16(1), w.u16(static_cast<unsigned>(cnames.size() + addrs.size())), w.u16(0), w.u16(edns ? 1 : 0);
  dns_name(w, qname);
  w.u16(qtype), w.u16(1);
  unsigned owner = 12;  // offset of the name the next record answers for
  for (const std::string& c : cnames) {
    w.u16(0xc000 | owner);
    w.u16(kTypeCname), w.u16(1), w.u32(ttl);
    size_t len = w.mark(2);
    owner = static_cast<unsigned>(b.size());
    dns_name(w, c);
    w.patch(len, 2);
  }
  const unsigned alen = qtype == kTypeAAAA ? 16 : 4;
  for (const auto& a : addrs) {
    w.u16(0xc000 | owner);
    w.u16(qtype), w.u16(1), w.u32(ttl);
    w.u16(alen);
    w.raw(a.data(), alen);
  }
  if (edns) dns_opt(w);
  return b;
}

// ---------------------------------------------------------------- TLS

static const uint16_t kGrease[16] = {0x0a0a, 0x1a1a, 0x2a2a, 0x3a3a, 0x4a4a, 0x5a5a, 0x6a6a, 0x7a7a,
                                     0x8a8a, 0x9a9a, 0xaaaa, 0xbaba, 0xcaca, 0xdada, 0xeaea, 0xfafa};

bool is_grease(uint16_t v) { return (v & 0x0f0f) == 0x0a0a && (v >> 8) == (v & 0xff); }

namespace {

struct Ext {
  uint16_t type;
  Bytes body;
};

Ext ext(uint16_t type, std::initializer_list<uint8_t> body) { return {type, Bytes(body)}; }

Ext ext_sni(std::string_view host) {
  Ext e{0, {}};
  Writer w{e.body};
  w.u16(static_cast<unsigned>(host.size() + 3));
  w.u8(0);
  w.u16(static_cast<unsigned>(host.size()));
  w.str(host);
  return e;
}

Ext ext_u16list(uint16_t type, std::initializer_list<uint16_t> v, uint16_t grease, unsigned prefix = 2) {
  Ext e{type, {}};
  Writer w{e.body};
  unsigned n = static_cast<unsigned>(v.size() + (grease ? 1 : 0)) * 2;
  if (prefix == 2) w.u16(n); else w.u8(n);
  if (grease) w.u16(grease);
  for (uint16_t x : v) w.u16(x);
  return e;
}

Ext ext_alpn(bool h2) {
  Ext e{16, {}};
  Writer w{e.body};
  size_t l = w.mark(2);
  if (h2) w.u8(2), w.str("h2");
  w.u8(8), w.str("http/1.1");
  w.patch(l, 2);
  return e;
}

Ext ext_key_share(Rng& r, uint16_t grease, bool p256) {
  Ext e{51, {}};
  Writer w{e.body};
  size_t l = w.mark(2);
  if (grease) w.u16(grease), w.u16(1), w.u8(0);
  w.u16(0x001d), w.u16(32), w.rnd(r, 32);
  if (p256) w.u16(0x0017), w.u16(65), w.u8(4), w.rnd(r, 64);
  w.patch(l, 2);
  return e;
}

const std::initializer_list<uint16_t> kSigAlgs = {0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601};

}  // namespace

TlsHello tls_client_hello(Rng& r, std::string_view sni, TlsProfile prof) {
  TlsHello h;
  const bool grease = prof == TlsProfile::Chrome || prof == TlsProfile::Safari;
  auto g = [&] { return grease ? kGrease[r.below(16)] : uint16_t{0}; };
  h.tls13 = prof != TlsProfile::Legacy12;
  h.resume = prof == TlsProfile::Legacy12 && r.chance(0.6);
  h.sid = h.tls13 || h.resume;  // 1.3 clients send a fake id for middlebox compatibility
  if (h.sid) r.fill(h.session_id, 32);
  h.h2 = prof != TlsProfile::Legacy12 && r.chance(0.9);

  std::vector<uint16_t> suites;
  if (grease) suites.push_back(g());
  if (h.tls13) {
    if (prof == TlsProfile::Firefox) suites.insert(suites.end(), {0x1301, 0x1303, 0x1302});
    else suites.insert(suites.end(), {0x1301, 0x1302, 0x1303});
  }
  suites.insert(suites.end(), {0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c, 0x009d,
                               0x002f, 0x0035});
  if (prof == TlsProfile::Legacy12 || prof == TlsProfile::Curl) suites.push_back(0x00ff);  // SCSV renegotiation

  // The extension set each client family sends; Chrome then shuffles its order
  // (it has since version 110), the others keep theirs.
  std::vector<Ext> ex;
  ex.push_back(ext_sni(sni));
  ex.push_back(ext(23, {}));              // extended_master_secret
  ex.push_back(ext(0xff01, {0}));         // renegotiation_info
  ex.push_back(ext_u16list(10, {0x001d, 0x0017, 0x0018}, g()));  // supported_groups
  ex.push_back(ext(11, {1, 0}));          // ec_point_formats
  if (prof != TlsProfile::Curl) {
    Ext t{35, {}};                          // session_ticket, sometimes carrying one
    if (r.chance(0.3)) Writer{t.body}.rnd(r, r.range(160, 220));
    ex.push_back(std::move(t));
  }
  if (prof != TlsProfile::Legacy12) ex.push_back(ext_alpn(h.h2));
  if (prof != TlsProfile::Curl) ex.push_back(ext(5, {1, 0, 0, 0, 0}));  // status_request
  ex.push_back(ext_u16list(13, kSigAlgs, 0));
  if (prof == TlsProfile::Chrome || prof == TlsProfile::Safari) ex.push_back(ext(18, {}));  // SCT
  if (h.tls13) {
    ex.push_back(ext_key_share(r, g(), prof == TlsProfile::Firefox));
    ex.push_back(ext(45, {1, 1}));  // psk_key_exchange_modes
    ex.push_back(ext_u16list(43, {0x0304, 0x0303}, g(), 1));
  }
  if (prof == TlsProfile::Chrome) ex.push_back(ext(27, {2, 0, 2}));          // compress_certificate brotli
  if (prof == TlsProfile::Firefox) ex.push_back(ext(28, {0x40, 0x01}));      // record_size_limit
  if (prof == TlsProfile::Curl) ex.push_back(ext(22, {}));                   // encrypt_then_mac
  if (prof == TlsProfile::Chrome) r.shuffle(ex.data(), ex.size());
  if (grease) {
    // Two GREASE extensions, as Chrome sends: distinct types, since a
    // ClientHello may not repeat an extension (RFC 8446 4.2).
    unsigned first = r.below(16);
    ex.insert(ex.begin(), Ext{kGrease[first], {}});
    ex.push_back(Ext{kGrease[(first + 1 + r.below(15)) % 16], {0}});
  }

  Writer w{h.record};
  w.u8(22), w.u16(0x0301);
  size_t rec = w.mark(2);
  w.u8(1);
  size_t hs = w.mark(3);
  w.u16(0x0303);
  w.rnd(r, 32);
  w.u8(h.sid ? 32 : 0);
  if (h.sid) w.raw(h.session_id, 32);
  w.u16(static_cast<unsigned>(suites.size() * 2));
  for (uint16_t s : suites) w.u16(s);
  w.u8(1), w.u8(0);
  size_t exl = w.mark(2);
  for (const Ext& e : ex) {
    w.u16(e.type);
    w.u16(static_cast<unsigned>(e.body.size()));
    w.raw(e.body.data(), e.body.size());
  }
  // Chrome and Firefox pad hellos of 256..511 bytes to 512 (RFC 7685) to step
  // around a bug in F5 load balancers.
  const size_t hs_len = h.record.size() - hs - 3 + 4;  // plus the 4-byte handshake header
  if ((prof == TlsProfile::Chrome || prof == TlsProfile::Firefox) && hs_len >= 256 && hs_len < 512) {
    size_t pad = 512 - hs_len;
    pad = pad >= 5 ? pad - 4 : 1;
    w.u16(21), w.u16(static_cast<unsigned>(pad));
    h.record.resize(h.record.size() + pad, 0);
  }
  w.patch(exl, 2);
  w.patch(hs, 3);
  w.patch(rec, 2);
  return h;
}

static void encrypted_record(Writer& w, Rng& r, uint8_t type, size_t n) {
  w.u8(type), w.u16(0x0303), w.u16(static_cast<unsigned>(n));
  w.rnd(r, n);
}

Bytes tls_server_flight(Rng& r, const TlsHello& ch) {
  Bytes b;
  Writer w{b};
  w.u8(22), w.u16(0x0303);
  size_t rec = w.mark(2);
  w.u8(2);
  size_t hs = w.mark(3);
  w.u16(0x0303);
  w.rnd(r, 32);
  w.u8(ch.sid ? 32 : 0);
  if (ch.sid) w.raw(ch.session_id, 32);
  static const uint16_t k13[] = {0x1301, 0x1302, 0x1303};
  static const uint16_t k12[] = {0xc02f, 0xc02b, 0xc030};
  w.u16(ch.tls13 ? r.pick(k13) : r.pick(k12));
  w.u8(0);
  size_t exl = w.mark(2);
  if (ch.tls13) {
    w.u16(43), w.u16(2), w.u16(0x0304);
    w.u16(51), w.u16(36), w.u16(0x001d), w.u16(32), w.rnd(r, 32);
  } else {
    w.u16(0xff01), w.u16(1), w.u8(0);
    w.u16(23), w.u16(0);
  }
  w.patch(exl, 2);
  w.patch(hs, 3);
  w.patch(rec, 2);
  w.u8(20), w.u16(0x0303), w.u16(1), w.u8(1);  // ChangeCipherSpec
  if (ch.tls13) {
    // EncryptedExtensions, Certificate, CertificateVerify, Finished: one or two
    // opaque records the size of a typical certificate chain.
    size_t n = r.range(2200, 5200);
    if (r.chance(0.5)) {
      size_t a = r.range(40, 120);
      encrypted_record(w, r, 23, a);
      n -= a;
    }
    encrypted_record(w, r, 23, n);
  } else {
    encrypted_record(w, r, 22, 40);  // Finished under the resumed keys
  }
  return b;
}

Bytes tls_client_finish(Rng& r, const TlsHello& ch, size_t req) {
  Bytes b;
  Writer w{b};
  w.u8(20), w.u16(0x0303), w.u16(1), w.u8(1);
  if (ch.tls13) encrypted_record(w, r, 23, 53);
  else encrypted_record(w, r, 22, 40);
  if (req) encrypted_record(w, r, 23, req);
  return b;
}

Bytes tls_app_data(Rng& r, size_t n) {
  Bytes b;
  b.reserve(n + n / 16000 * 5 + 16);
  Writer w{b};
  while (n) {
    size_t c = std::min<size_t>(n, 16401);
    encrypted_record(w, r, 23, c);
    n -= c;
  }
  return b;
}

// ---------------------------------------------------------------- HTTP

std::string http_request(const HttpReq& q, Rng& r) {
  static const char* kAccept[] = {
      "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
      "*/*",
      "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8",
      "application/json, text/plain, */*",
      "text/css,*/*;q=0.1",
  };
  static const char* kLang[] = {"en-US,en;q=0.9", "de-DE,de;q=0.9,en;q=0.8", "fr-FR,fr;q=0.9", "it-IT,it;q=0.9,en;q=0.5",
                                "en-GB,en;q=0.7"};
  std::string s;
  s.reserve(400);
  s += "GET " + q.path + " HTTP/1.1\r\nHost: " + q.host + "\r\n";
  if (!q.ua.empty()) s += "User-Agent: " + q.ua + "\r\n";
  s += std::string("Accept: ") + r.pick(kAccept) + "\r\n";
  if (r.chance(0.7)) s += std::string("Accept-Language: ") + r.pick(kLang) + "\r\n";
  if (!q.referer.empty()) s += "Referer: " + q.referer + "\r\n";
  if (!q.cookie.empty()) s += "Cookie: " + q.cookie + "\r\n";
  s += "Connection: keep-alive\r\n\r\n";
  return s;
}

Bytes http_response(Rng& r, int status, size_t body, std::string_view path) {
  static const char* kServer[] = {"nginx", "nginx/1.22.1", "Apache/2.4.57 (Debian)", "cloudflare", "Microsoft-IIS/10.0",
                                  "openresty", "gws", "AmazonS3", "LiteSpeed", "Caddy"};
  const char* reason = status == 200 ? "OK" : status == 204 ? "No Content" : status == 301 ? "Moved Permanently"
                     : status == 304 ? "Not Modified" : "Not Found";
  // Text types only: tshark dissects images and JSON bodies, which random bytes
  // would turn into malformed-packet reports.
  const bool binary = path.ends_with(".bin") || path.ends_with(".iso") || path.ends_with(".zip");
  const char* ctype = binary ? "application/octet-stream"
                    : path.ends_with(".js") ? "application/javascript"
                    : path.ends_with(".css") ? "text/css"
                    : "text/html; charset=utf-8";
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
  h += std::string("Server: ") + r.pick(kServer) + "\r\n";
  if (status != 204 && status != 304) {
    h += std::string("Content-Type: ") + ctype + "\r\n";
    h += "Content-Length: " + std::to_string(body) + "\r\n";
  } else {
    body = 0;
  }
  if (r.chance(0.5)) h += "Cache-Control: max-age=" + std::to_string(r.range(60, 86400)) + "\r\n";
  if (status == 301) h += "Location: /\r\n";
  h += "Connection: keep-alive\r\n\r\n";
  Bytes b(h.begin(), h.end());
  size_t o = b.size();
  b.resize(o + body);
  r.fill(b.data() + o, body);
  static const char kText[] = "abcdefghijklmnopqrstuvwxyz      etaoinshr<>/=\"\n";
  if (!binary)
    for (size_t i = o; i < b.size(); ++i) b[i] = static_cast<uint8_t>(kText[b[i] % (sizeof kText - 1)]);
  return b;
}

// ---- DHCP ----

namespace {
void dhcp_fqdn_wire(Writer& w, const std::string& host, const std::string& domain) {
  dns_name(w, host + "." + domain);
}
}  // namespace

Bytes dhcp4_message(uint8_t type, const DhcpLease& l) {
  Bytes b;
  Writer w{b};
  const bool reply = type == 2 || type == 5;
  w.u8(reply ? 2 : 1);  // op
  w.u8(1), w.u8(6), w.u8(0);  // Ethernet, hlen 6, hops
  w.u32(l.xid);
  w.u16(reply ? 0 : 3), w.u16(0);  // secs, flags
  w.u32(0);                        // ciaddr: none yet
  if (reply) w.raw(l.addr.data(), 4);
  else w.u32(0);
  w.u32(0), w.u32(0);  // siaddr, giaddr
  w.raw(l.mac, 6);
  b.resize(b.size() + 10 + 64 + 128);  // chaddr padding, sname, file
  w.u8(99), w.u8(130), w.u8(83), w.u8(99);
  auto opt = [&](uint8_t code, const void* v, size_t n) {
    w.u8(code), w.u8(static_cast<unsigned>(n));
    w.raw(v, n);
  };
  opt(53, &type, 1);
  if (reply) {
    opt(54, l.server.data(), 4);
    const uint8_t lease[4] = {0, 1, 0x51, 0x80}, mask[4] = {255, 255, 255, 0};
    opt(51, lease, 4);
    opt(1, mask, 4);
    opt(3, l.server.data(), 4);
    opt(6, l.server.data(), 4);
    opt(15, l.domain.data(), l.domain.size());
  } else {
    uint8_t cid[7] = {1};
    std::memcpy(cid + 1, l.mac, 6);
    opt(61, cid, 7);
    if (type == 3) {
      opt(50, l.addr.data(), 4);
      opt(54, l.server.data(), 4);
    }
    opt(12, l.host.data(), l.host.size());
    if (type == 3) {
      // Client FQDN in canonical wire form (E), the server to update A and PTR (S).
      w.u8(81);
      const size_t at = w.mark(1);
      w.u8(0x05), w.u8(0), w.u8(0);
      dhcp_fqdn_wire(w, l.host, l.domain);
      w.patch(at, 1);
    }
    opt(60, l.vendor.data(), l.vendor.size());
    const uint8_t prl[] = {1, 3, 6, 15, 31, 33, 43, 44, 46, 47, 119, 121, 249, 252};
    opt(55, prl, sizeof prl);
  }
  w.u8(255);
  if (b.size() < 300) b.resize(300, 0);  // BOOTP's minimum message, as clients pad
  return b;
}

Bytes dhcp6_message(uint8_t type, const DhcpLease& l) {
  Bytes b;
  Writer w{b};
  w.u8(type), w.u24(l.xid & 0xffffff);
  auto duid = [&](uint16_t code, const uint8_t* mac) {  // DUID-LL, Ethernet
    w.u16(code), w.u16(10), w.u16(3), w.u16(1);
    w.raw(mac, 6);
  };
  if (type == 1 || type == 3) w.u16(8), w.u16(2), w.u16(0);  // elapsed time
  duid(1, l.mac);
  if (type != 1) duid(2, l.server_mac);
  w.u16(3);  // IA_NA: IAID from the MAC's last bytes, as many clients do
  const size_t ia = w.mark(2);
  w.raw(l.mac + 2, 4);
  w.u32(type == 1 ? 0 : 3600), w.u32(type == 1 ? 0 : 5400);
  if (type != 1) {
    w.u16(5), w.u16(24);
    w.raw(l.addr.data(), 16);
    w.u32(7200), w.u32(7500);
  }
  w.patch(ia, 2);
  if (type == 1 || type == 3) {
    w.u16(39);
    const size_t at = w.mark(2);
    w.u8(0x01);  // S: the server updates the AAAA record
    dhcp_fqdn_wire(w, l.host, l.domain);
    w.patch(at, 2);
    w.u16(16);  // vendor class: enterprise, one item
    const size_t vc = w.mark(2);
    w.u32(311), w.u16(static_cast<unsigned>(l.vendor.size()));
    w.str(l.vendor);
    w.patch(vc, 2);
    w.u16(6), w.u16(6), w.u16(23), w.u16(24), w.u16(39);  // option request
  } else {
    w.u16(23), w.u16(16);  // DNS recursive name server
    w.raw(l.server.data(), 16);
  }
  return b;
}

}  // namespace amon::gen
