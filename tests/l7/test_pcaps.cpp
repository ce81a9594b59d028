// Real captures: names found by the parsers vs tshark, and
// parse -> rewrite(mask all) -> re-parse round trips on every real message.
#include <catch2/catch.hpp>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "amon_dns.hpp"
#include "amon_http.hpp"
#include "amon_tls.hpp"
#include "pcap_walk.hpp"

using namespace amon;
using namespace amon::l7test;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::string cur;
  for (char c : s) {
    if (c == sep) { v.push_back(cur); cur.clear(); }
    else cur += c;
  }
  v.push_back(cur);
  return v;
}

std::string show(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + ",";
  return s;
}

bool is_dns_port(uint16_t p) { return p == 53; }

// Round trip: mask every name, re-parse, same structure, every name changed.
void dns_roundtrip(const uint8_t* msg, size_t len, const dns::ParseResult& r, dns::ParseResult& r2, unsigned& checked) {
  std::vector<uint8_t> w(msg, msg + len);
  const int n = dns::rewrite_names(w.data(), w.size(), r, [](const dns::NameView&) { return names::Decision::mask(0xfeedface); });
  REQUIRE(n >= 0);
  REQUIRE(dns::parse(w.data(), w.size(), r2) == dns::Status::Ok);
  REQUIRE(r2.n_names == r.n_names);
  REQUIRE(r2.n_labels == r.n_labels);
  REQUIRE(r2.n_addrs == r.n_addrs);
  for (unsigned i = 0; i < r.n_names; ++i) {
    REQUIRE(r2.names[i].off == r.names[i].off);
    REQUIRE(r2.names[i].role == r.names[i].role);
    REQUIRE(r2.names[i].n_labels == r.names[i].n_labels);
    for (unsigned k = 0; k < r.names[i].n_labels; ++k) {
      REQUIRE(r2.name_label(i, k).off == r.name_label(i, k).off);
      REQUIRE(r2.name_label(i, k).len == r.name_label(i, k).len);
    }
    if (r.names[i].n_labels) {
      CAPTURE(r.name_text(i), r2.name_text(i));
      REQUIRE(r2.name_text(i) != r.name_text(i));
    }
  }
  ++checked;
}

struct DnsFrame { std::vector<std::string> q, resp; };

void compare_dns(const std::string& file, unsigned min_frames) {
  const std::string path = pcap_path(file);
  auto r = std::make_unique<dns::ParseResult>();
  auto r2 = std::make_unique<dns::ParseResult>();
  std::map<uint64_t, DnsFrame> mine;
  unsigned ok = 0, bad = 0, roundtrips = 0;
  REQUIRE(walk(path, [&](const Pkt& k) {
    if (!is_dns_port(k.sport) && !is_dns_port(k.dport)) return;
    if (k.truncated) return;
    DnsFrame f;
    auto one = [&](const uint8_t* m, size_t n) -> bool {
      if (dns::parse(m, n, *r) != dns::Status::Ok) return false;
      for (unsigned i = 0; i < r->n_names; ++i) {
        const auto role = r->names[i].role;
        std::string t(r->name_text(i));
        if (t.empty()) t = "<Root>";
        if (role == dns::NameRole::Qname) f.q.push_back(t);
        else if (role == dns::NameRole::AnswerOwner || role == dns::NameRole::AuthorityOwner ||
                 role == dns::NameRole::AdditionalOwner)
          f.resp.push_back(t);
      }
      dns_roundtrip(m, n, *r, *r2, roundtrips);
      return true;
    };
    bool good = true;
    if (k.tcp) {
      if (k.len == 0) return;
      dns::TcpSplit t;
      if (dns::split_tcp(k.payload, k.len, t) != dns::Status::Ok) return;  // partial: tshark reassembles differently
      for (unsigned i = 0; i < t.n; ++i) good &= one(k.payload + t.msgs[i].off, t.msgs[i].len);
    } else {
      good = one(k.payload, k.len);
    }
    if (good) { mine[k.frame] = f; ++ok; } else { ++bad; }
  }));
  INFO(file << ": ok " << ok << " not-ok " << bad << " roundtrips " << roundtrips);
  CHECK(ok >= min_frames);
  if (!have_tshark()) {
    WARN("tshark not found: skipping the tshark comparison for " << file);
    return;
  }
  // No reassembly: names are compared per frame, as the walker sees them.
  const auto lines = run_lines("tshark -r '" + path +
                               "' -n -o tcp.desegment_tcp_streams:FALSE -o ip.defragment:FALSE -o ipv6.defragment:FALSE"
                               " -Y 'dns' -T fields -E occurrence=a -E aggregator=, -e frame.number -e dns.qry.name -e dns.resp.name 2>/dev/null");
  REQUIRE(!lines.empty());
  unsigned compared = 0, mismatched = 0;
  for (const auto& l : lines) {
    const auto cols = split(l, '\t');
    if (cols.size() < 3) continue;
    const uint64_t fr = std::stoull(cols[0]);
    auto it = mine.find(fr);
    if (it == mine.end()) continue;
    // tshark keeps the wire case; the parser reports lowercased names.
    for (auto& col : {1, 2})
      for (auto& ch : const_cast<std::string&>(cols[size_t(col)])) ch = char(std::tolower(uint8_t(ch)));
    const auto tq = cols[1].empty() ? std::vector<std::string>{} : split(cols[1], ',');
    const auto tr = cols[2].empty() ? std::vector<std::string>{} : split(cols[2], ',');
    for (auto* v : {&tq, &tr})
      for (auto& x : const_cast<std::vector<std::string>&>(*v))
        if (x == "<root>") x = "<Root>";
    ++compared;
    if (tq != it->second.q || tr != it->second.resp) {
      ++mismatched;
      if (mismatched <= 5) WARN(file << " frame " << fr << " tshark q=" << show(tq) << " r=" << show(tr) << " | mine q=" << show(it->second.q) << " r=" << show(it->second.resp));
    }
  }
  INFO("compared " << compared << " mismatched " << mismatched);
  CHECK(compared == mine.size());
  CHECK(mismatched == 0);
}

}  // namespace

TEST_CASE("pcap dns: names match tshark and survive a mask round trip") {
  compare_dns("dns-udp-many-queries.pcap", 400);
  compare_dns("dns-udp-1200-names-vlan.pcap", 1200);
  compare_dns("dns-udp-bad-traffic.pcap", 300);
  compare_dns("dns-tcp-multirequest.pcap", 21);
  compare_dns("dns-tcp-simple.pcap", 2);
  compare_dns("mixed-capture2.pcap", 300);
  compare_dns("ipv6-mixed-dns-ssh.pcap", 1);
  compare_dns("mixed-browsing-example.pcap", 50);
}

TEST_CASE("pcap dns: malformed captures fail closed") {
  auto r = std::make_unique<dns::ParseResult>();
  for (const char* f : {"dns-malformed-zlip-1.pcap", "dns-malformed-zlip-2.pcap", "dns-malformed-zlip-3.pcap",
                        "dns-malformed-fwdptr.pcap", "dns-malformed-badlabel.pcap", "dns-malformed-stack-overflow.pcap",
                        "dns-malformed-too-many-rr.pcap"}) {
    unsigned seen = 0;
    REQUIRE(walk(pcap_path(f), [&](const Pkt& k) {
      if (k.tcp) return;
      // zlip frames lie in the UDP length: use what the IP header carries.
      const size_t n = k.len < 12 ? k.ip_payload_after_udp : k.len;
      ++seen;
      const dns::Status s = dns::parse(k.payload, n, *r);
      CAPTURE(f, int(r->error), n);
      CHECK(s == dns::Status::Malformed);
    }));
    CAPTURE(f);
    CHECK(seen == 1);
  }
}

namespace {

std::set<std::string> tshark_set(const std::string& path, const std::string& filter, const std::string& field) {
  std::set<std::string> s;
  for (const auto& l : run_lines("tshark -r '" + path + "' -n -Y '" + filter + "' -T fields -E occurrence=a -E aggregator='\x01' -e " +
                                 field + " 2>/dev/null"))
    for (const auto& x : split(l, '\x01'))
      if (!x.empty()) s.insert(x);
  return s;
}

std::string diff(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::string out;
  int n = 0;
  for (const auto& x : a)
    if (!b.count(x) && n++ < 8) out += "[" + x + "] ";
  return out;
}

void compare_tls(const std::string& file, unsigned min_hellos, bool exact = true) {
  const std::string path = pcap_path(file);
  auto c = std::make_unique<tls::ClientHello>();
  auto c2 = std::make_unique<tls::ClientHello>();
  std::set<std::string> mine;
  unsigned ok = 0, notok = 0;
  for (auto& [key, st] : tcp_streams(path)) {
    const auto& d = st.data;
    if (d.size() < 6 || d[0] != 22 || d[1] != 3 || d[5] != 1) continue;
    const tls::Status s = tls::parse_client_hello(d.data(), d.size(), *c);
    if (s != tls::Status::Ok) { ++notok; continue; }
    ++ok;
    std::vector<uint8_t> w = d;
    for (unsigned i = 0; i < c->n_sni; ++i) {
      mine.insert(std::string(c->sni_text(i)));
      REQUIRE(tls::rewrite_sni(w.data(), w.size(), *c, i, names::Decision::mask(77)));
    }
    REQUIRE(tls::parse_client_hello(w.data(), w.size(), *c2) == tls::Status::Ok);
    REQUIRE(c2->n_sni == c->n_sni);
    REQUIRE(c2->n_ext == c->n_ext);
    REQUIRE(c2->consumed == c->consumed);
    for (unsigned i = 0; i < c->n_sni; ++i) {
      REQUIRE(c2->sni[i].span.off == c->sni[i].span.off);
      REQUIRE(c2->sni_text(i).size() == c->sni_text(i).size());
      REQUIRE(c2->sni_text(i) != c->sni_text(i));
    }
  }
  INFO(file << ": ClientHellos ok " << ok << " not ok " << notok);
  CHECK(ok >= min_hellos);
  if (!have_tshark()) { WARN("tshark not found: skipping SNI comparison for " << file); return; }
  const auto ts = tshark_set(path, "tls.handshake.type==1 && tcp", "tls.handshake.extensions_server_name");
  INFO("tshark-only: " << diff(ts, mine) << " mine-only: " << diff(mine, ts));
  if (exact) CHECK(ts == mine);
  else for (const auto& x : mine) CHECK(ts.count(x));
}

}  // namespace

TEST_CASE("pcap tls: SNIs match tshark, SNI mask round trip") {
  compare_tls("tls-clienthello-many-sni.pcap", 300);
  compare_tls("tls13-ipv6-reddit.pcap", 50);
  compare_tls("tls13-quic-sites.pcap", 40);
  compare_tls("tls-clienthello-fragmented-mtu300.pcap", 1);
  compare_tls("tls13-ech.pcap", 1);
  compare_tls("tls-esni-and-sni.pcap", 1);
  compare_tls("tls-top100-fingerprints.pcap", 90);
  compare_tls("tls12-73-ciphers.pcap", 70);
}

TEST_CASE("pcap tls: ECH and ESNI extensions recognised; fuzzed ESNI hello fails closed") {
  auto c = std::make_unique<tls::ClientHello>();
  auto first_hello = [&](const std::string& f) {
    for (auto& [key, st] : tcp_streams(pcap_path(f)))
      if (st.data.size() > 5 && st.data[0] == 22 && st.data[5] == 1)
        return tls::parse_client_hello(st.data.data(), st.data.size(), *c);
    return tls::Status::Truncated;
  };
  REQUIRE(first_hello("tls13-ech.pcap") == tls::Status::Ok);
  CHECK(c->has_ech);
  CHECK(c->sni_text(0) == "cloudflare-ech.com");
  REQUIRE(first_hello("tls-esni-and-sni.pcap") == tls::Status::Ok);
  CHECK(c->has_esni);
  CHECK(c->n_sni == 1);
  unsigned malformed = 0;
  for (auto& [key, st] : tcp_streams(pcap_path("tls-esni-fuzzed.pcap")))
    if (st.data.size() > 5 && st.data[0] == 22 && st.data[5] == 1)
      malformed += tls::parse_client_hello(st.data.data(), st.data.size(), *c) == tls::Status::Malformed;
  CHECK(malformed >= 1);
}

namespace {

void compare_http(const std::string& file, unsigned min_requests) {
  const std::string path = pcap_path(file);
  http::Matcher m;
  http::Scratch s(m);
  auto r = std::make_unique<http::Result>();
  auto r2 = std::make_unique<http::Result>();
  std::set<std::string> hosts, uas;
  // Values inside messages the parser refused (Malformed): never forwarded in
  // clear, so tshark may list them without the parser reporting them.
  std::set<std::string> failed_closed;
  unsigned requests = 0, refused = 0;
  for (auto& [key, st] : tcp_streams(path, 16 << 20)) {
    std::vector<uint8_t> d = st.data;
    d.reserve(d.size() + 64);  // readable slack for Hyperscan's AVX-512 over-read (plugins/http/README.md)
    size_t p = 0;
    while (p < d.size()) {
      const http::Status status = http::parse(d.data() + p, d.size() - p, http::Direction::Request, m, s, *r);
      // Only streams that start like a request count as HTTP.
      if (status == http::Status::Malformed) {
        ++refused;
        const std::string rest(reinterpret_cast<const char*>(d.data() + p + r->consumed), d.size() - p - r->consumed);
        for (const char* h : {"\r\nUser-Agent: ", "\r\nHost: "})
          for (size_t at = rest.find(h); at != std::string::npos; at = rest.find(h, at + 1)) {
            const size_t v = at + std::strlen(h);
            failed_closed.insert(rest.substr(v, rest.find("\r\n", v) - v));
          }
      }
      if (r->n_msgs == 0) break;
      std::vector<uint8_t> w(d.begin() + long(p), d.end());
      w.reserve(w.size() + 64);
      for (unsigned i = 0; i < r->n_occ; ++i) {
        const auto& o = r->occ[i];
        const std::string v(reinterpret_cast<const char*>(d.data() + p + o.span.off), o.span.len);
        if (o.kind == http::Field::Host) hosts.insert(v);
        if (o.kind == http::Field::UserAgent) uas.insert(v);
        if (o.kind == http::Field::HostDomain) names::apply_to_text(reinterpret_cast<char*>(w.data() + o.span.off), o.span.len, names::Decision::mask(5));
        if (o.kind == http::Field::UserAgent) names::keyed_fill(reinterpret_cast<char*>(w.data() + o.span.off), o.span.len, 6);
      }
      requests += r->n_msgs;
      // Re-parse the rewritten bytes: same messages, headers and spans.
      const http::Status s2 = http::parse(w.data(), w.size(), http::Direction::Request, m, s, *r2);
      REQUIRE(s2 == status);
      REQUIRE(r2->n_msgs == r->n_msgs);
      REQUIRE(r2->n_occ == r->n_occ);
      for (unsigned i = 0; i < r->n_occ; ++i) {
        REQUIRE(r2->occ[i].kind == r->occ[i].kind);
        REQUIRE(r2->occ[i].span.off == r->occ[i].span.off);
        REQUIRE(r2->occ[i].span.len == r->occ[i].span.len);
      }
      if (status != http::Status::Ok || r->consumed == 0 || (!r->more && r->msgs[r->n_msgs - 1].body_unbounded)) break;
      p += r->consumed;
    }
  }
  INFO(file << ": requests " << requests << ", refused (Malformed) " << refused);
  CHECK(requests >= min_requests);
  if (!have_tshark()) { WARN("tshark not found: skipping HTTP comparison for " << file); return; }
  const auto th = tshark_set(path, "http.request", "http.host");
  const auto tu = tshark_set(path, "http.request", "http.user_agent");
  // tshark only dissects HTTP on known ports, the parser runs on every
  // client stream: everything tshark finds must be found, not the converse.
  INFO("hosts tshark-only: " << diff(th, hosts) << " mine-only: " << diff(hosts, th));
  for (const auto& x : th) CHECK((hosts.count(x) || failed_closed.count(x)));
  CHECK(th.size() > 0);
  INFO("UAs tshark-only: " << diff(tu, uas) << " mine-only: " << diff(uas, tu));
  for (const auto& x : tu) CHECK((uas.count(x) || failed_closed.count(x)));
}

}  // namespace

TEST_CASE("pcap http: Host and User-Agent match tshark, rewrite round trip") {
  compare_http("http-requests-4k.pcap", 139);
  compare_http("http-many-user-agents.pcap", 700);
  compare_http("http-ipv6-1000-requests.pcap", 1000);
  compare_http("mixed-browsing-example.pcap", 300);
}
