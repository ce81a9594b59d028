// ns per parse for a DNS response, a ClientHello, an HTTP request and DHCP, on
// crafted messages and (if present) real payloads from the shared captures.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "amon_dhcp.hpp"
#include "amon_dns.hpp"
#include "amon_http.hpp"
#include "amon_tls.hpp"
#include "dhcp_samples.hpp"
#include "keyed_hash.h"
#include "l7_build.hpp"
#include "pcap_walk.hpp"

using namespace amon;
using Clock = std::chrono::steady_clock;

template <class F>
static double ns_per(const char* what, size_t n_items, F&& f, unsigned iters) {
  for (unsigned i = 0; i < iters / 10 + 1; ++i) f();  // warm up
  const auto t0 = Clock::now();
  size_t sink = 0;
  for (unsigned i = 0; i < iters; ++i) sink += f();
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / (double(iters) * n_items);
  std::printf("%-44s %8.1f ns/msg  (%zu)\n", what, ns, sink % 7);
  return ns;
}

int main() {
  auto dr = std::make_unique<dns::ParseResult>();
  const auto resp = l7test::dns_sample_response();
  const auto query = l7test::dns_query("www.example.com");
  ns_per("dns parse: crafted query", 1, [&] { return size_t(dns::parse(query.data(), query.size(), *dr)); }, 2000000);
  ns_per("dns parse: crafted compressed response", 1, [&] { return size_t(dns::parse(resp.data(), resp.size(), *dr)); }, 1000000);
  auto w = resp;
  ns_per("dns parse+rewrite(mask all)", 1, [&] {
    dns::parse(w.data(), w.size(), *dr);
    return size_t(dns::rewrite_names(w.data(), w.size(), *dr, [](const dns::NameView&) { return names::Decision::mask(1); }));
  }, 300000);

  std::vector<std::vector<uint8_t>> real;
  l7test::walk(l7test::pcap_path("dns-udp-many-queries.pcap"), [&](const l7test::Pkt& k) {
    if (!k.tcp && (k.sport == 53 || k.dport == 53)) real.emplace_back(k.payload, k.payload + k.len);
  });
  if (!real.empty())
    ns_per("dns parse: real (dns-udp-many-queries)", real.size(), [&] {
      size_t s = 0;
      for (const auto& m : real) s += size_t(dns::parse(m.data(), m.size(), *dr));
      return s;
    }, 2000);

  auto ch = std::make_unique<tls::ClientHello>();
  const auto hello = l7test::sample_client_hello();
  ns_per("tls parse: crafted ClientHello", 1, [&] { return size_t(tls::parse_client_hello(hello.data(), hello.size(), *ch)); }, 2000000);
  std::vector<std::vector<uint8_t>> hellos;
  for (auto& [k, st] : l7test::tcp_streams(l7test::pcap_path("tls-clienthello-many-sni.pcap"), 8192))
    if (st.data.size() > 5 && st.data[0] == 22 && st.data[5] == 1) hellos.push_back(st.data);
  if (!hellos.empty())
    ns_per("tls parse: real ClientHellos (many-sni)", hellos.size(), [&] {
      size_t s = 0;
      for (const auto& m : hellos) s += size_t(tls::parse_client_hello(m.data(), m.size(), *ch));
      return s;
    }, 2000);

  http::Matcher m;
  http::Scratch sc(m);
  auto hr = std::make_unique<http::Result>();
  const std::string req =
      "GET /index.html?q=1 HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) "
      "Gecko/20100101 Firefox/115.0\r\nAccept: text/html,application/xhtml+xml\r\nAccept-Language: en-US,en;q=0.5\r\n"
      "Accept-Encoding: gzip, deflate\r\nReferer: https://www.example.org/start\r\nCookie: session=abcdef0123456789\r\n"
      "Connection: keep-alive\r\n\r\n";
  std::string req_buf = req;
  req_buf.reserve(req.size() + 64);  // readable slack for Hyperscan (plugins/http/README.md)
  ns_per("http parse: crafted request (9 headers)", 1, [&] {
    return size_t(http::parse(reinterpret_cast<const uint8_t*>(req_buf.data()), req_buf.size(), http::Direction::Request, m, sc, *hr));
  }, 1000000);
  std::vector<std::vector<uint8_t>> reqs;
  l7test::walk(l7test::pcap_path("http-many-user-agents.pcap"), [&](const l7test::Pkt& k) {
    if (k.tcp && k.len > 16 && (k.dport == 80 || k.dport == 8080)) {
      reqs.emplace_back(k.payload, k.payload + k.len);
      reqs.back().reserve(k.len + 64);  // readable slack for Hyperscan (plugins/http/README.md)
    }
  });
  if (!reqs.empty())
    ns_per("http parse: real requests (nikto)", reqs.size(), [&] {
      size_t s = 0;
      for (const auto& q : reqs) s += size_t(http::parse(q.data(), q.size(), http::Direction::Request, m, sc, *hr));
      return s;
    }, 500);

  auto dh = std::make_unique<dhcp::Result>();
  const auto disc = l7test::dhcpb::v4_discover();
  const auto relayed = l7test::dhcpb::v6_relayed();
  ns_per("dhcp parse: crafted v4 discover (11 occurrences)", 1,
         [&] { return size_t(dhcp::parse(disc.data(), disc.size(), dhcp::Version::V4, *dh)); }, 2000000);
  ns_per("dhcp parse: crafted v6 relay-forw x2 (13 occurrences)", 1,
         [&] { return size_t(dhcp::parse(relayed.data(), relayed.size(), dhcp::Version::V6, *dh)); }, 2000000);
  KeyedHash kh(std::array<uint8_t, 16>{1, 2, 3});
  auto dw = disc;
  ns_per("dhcp parse+rewrite: v4 discover (names, ids)", 1, [&] {
    dhcp::parse(dw.data(), dw.size(), dhcp::Version::V4, *dh);
    for (unsigned i = 0; i < dh->n_occ; ++i) {
      const auto& o = dh->occ[i];
      if (o.kind == dhcp::Kind::NameText || o.kind == dhcp::Kind::NameWire)
        dhcp::rewrite_name(dw.data(), *dh, o, names::Decision::mask(1));
      else if (o.kind == dhcp::Kind::Bytes || o.kind == dhcp::Kind::Text)
        dhcp::hash_identifier(kh, dw.data(), o);
    }
    return size_t(dh->n_occ);
  }, 300000);
  std::vector<std::vector<uint8_t>> leases;
  l7test::walk(l7test::pcap_path("mixed-capture2.pcap"), [&](const l7test::Pkt& k) {
    if (!k.tcp && dhcp::version_for_ports(k.sport, k.dport) == dhcp::Version::V4)
      leases.emplace_back(k.payload, k.payload + k.len);
  });
  if (!leases.empty())
    ns_per("dhcp parse: real (mixed-capture2, 297 msgs)", leases.size(), [&] {
      size_t s = 0;
      for (const auto& q : leases) s += size_t(dhcp::parse(q.data(), q.size(), dhcp::Version::V4, *dh));
      return s;
    }, 5000);
  return 0;
}
