// Application payloads for amon-gen: DNS messages, TLS ClientHello/ServerHello
// and records, HTTP/1.1 requests and responses. Each is built field by field so
// a dissector (tshark, or amon's own plugins) finds real structure to walk.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rng.hpp"

namespace amon::gen {

using Bytes = std::vector<uint8_t>;

struct Writer {
  Bytes& b;
  void u8(unsigned v) { b.push_back(static_cast<uint8_t>(v)); }
  void u16(unsigned v) { u8(v >> 8), u8(v); }
  void u24(unsigned v) { u8(v >> 16), u16(v & 0xffff); }
  void u32(uint32_t v) { u16(v >> 16), u16(v & 0xffff); }
  void raw(const void* p, size_t n) { b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); }
  void str(std::string_view s) { raw(s.data(), s.size()); }
  void rnd(Rng& r, size_t n) { size_t o = b.size(); b.resize(o + n); r.fill(b.data() + o, n); }
  // Length prefixes: reserve now, patch once the body is written.
  size_t mark(unsigned width) { size_t at = b.size(); b.resize(at + width); return at; }
  void patch(size_t at, unsigned width) {
    size_t n = b.size() - at - width;
    for (unsigned i = 0; i < width; ++i) b[at + i] = static_cast<uint8_t>(n >> (8 * (width - 1 - i)));
  }
};

// ---- DNS ----
enum : uint16_t { kTypeA = 1, kTypeCname = 5, kTypeAAAA = 28 };
void dns_name(Writer& w, std::string_view name);
Bytes dns_query(uint16_t id, std::string_view qname, uint16_t qtype, bool edns);
// Answers: the CNAME chain (each link's target), then `addrs` (4 or 16 bytes each)
// for the last name, owners written as compression pointers like real servers do.
Bytes dns_response(uint16_t id, std::string_view qname, uint16_t qtype, bool edns,
                   const std::vector<std::string>& cnames, const std::vector<std::array<uint8_t, 16>>& addrs,
                   uint32_t ttl);

// ---- TLS ----
enum class TlsProfile { Chrome, Firefox, Safari, Legacy12, Curl };
struct TlsHello {
  Bytes record;        // the whole TLS record carrying the ClientHello
  bool tls13 = false;  // offers TLS 1.3 (and the server picks it)
  bool resume = false; // TLS 1.2 abbreviated handshake (session id reuse)
  uint8_t session_id[32]{};
  bool sid = false;
  bool h2 = false;     // offered ALPN h2
};
TlsHello tls_client_hello(Rng& r, std::string_view sni, TlsProfile prof);
// The server's first flight: ServerHello, then (1.3) ChangeCipherSpec and the
// encrypted rest of the handshake, or (1.2 resumption) CCS and encrypted Finished.
Bytes tls_server_flight(Rng& r, const TlsHello& ch);
// The client's reply to it, then `req` bytes of application data.
Bytes tls_client_finish(Rng& r, const TlsHello& ch, size_t req);
// `n` bytes of application data, split into records the way servers size them.
Bytes tls_app_data(Rng& r, size_t n);
bool is_grease(uint16_t v);

// ---- HTTP/1.1 ----
struct HttpReq {
  std::string host, path, ua, referer, cookie;
};
std::string http_request(const HttpReq& q, Rng& r);
// Header block plus a body of `body` bytes; status chosen by the caller.
Bytes http_response(Rng& r, int status, size_t body, std::string_view path);

// ---- DHCP ----
// One client's lease exchange, built from RFC 2131/2132/4702 and RFC 8415:
// DHCPv4 Discover (1), Offer (2), Request (3), ACK (5) with the client's MAC
// as chaddr and client identifier, its host name (option 12 and the client
// FQDN, option 81) and vendor class; DHCPv6 Solicit (1), Advertise (2),
// Request (3), Reply (7) with a DUID-LL, an IA_NA holding the address and the
// client FQDN (option 39). `addr` is the leased address (4 or 16 bytes used),
// `server` the server's address, `server_mac` its DUID's link-layer address.
struct DhcpLease {
  uint8_t mac[6]{}, server_mac[6]{};
  std::array<uint8_t, 16> addr{}, server{};
  std::string host, domain, vendor;
  uint32_t xid = 0;
};
Bytes dhcp4_message(uint8_t type, const DhcpLease& l);
Bytes dhcp6_message(uint8_t type, const DhcpLease& l);

}  // namespace amon::gen
