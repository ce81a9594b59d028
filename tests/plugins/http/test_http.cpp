#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "amon_http.hpp"

using namespace amon::http;

namespace {
struct Fx {
  Matcher m;
  Scratch s{m};
  std::unique_ptr<Result> r = std::make_unique<Result>();
  std::vector<uint8_t> buf;
  // Parsed from a copy with 64 readable bytes after it: Hyperscan's AVX-512
  // matcher may read past the end (vectorscan#322; plugins/http/README.md).
  Status parse(const std::string& b, Direction d = Direction::Auto) {
    buf.assign(b.begin(), b.end());
    buf.resize(b.size() + 64);
    return amon::http::parse(buf.data(), b.size(), d, m, s, *r);
  }
  std::string text(const std::string& b, Span sp) const { return b.substr(sp.off, sp.len); }
  std::vector<std::string> find(const std::string& b, Field k) const {
    std::vector<std::string> v;
    for (unsigned i = 0; i < r->n_occ; ++i)
      if (r->occ[i].kind == k) v.push_back(text(b, r->occ[i].span));
    return v;
  }
};
using V = std::vector<std::string>;
}  // namespace

TEST_CASE("http: request head fields, odd casing, domains") {
  Fx f;
  const std::string b =
      "GET http://proxy.example/x?y HTTP/1.1\r\n"
      "hOsT: www.Example.com:8080\r\n"
      "USER-AGENT:   Mozilla/5.0 (X11)  \r\n"
      "Referer: https://user:pw@ref.example.org:443/path?q#f\r\n"
      "Cookie: a=1; b=2\r\n"
      "cookie: c=3\r\n"
      "Authorization: Basic Zm9vOmJhcg==\r\n"
      "X-Forwarded-For: 10.0.0.1, 10.0.0.2\r\n"
      "Forwarded: for=192.0.2.60\r\n"
      "X-Host: not-a-host\r\n"
      "Hostname: also-not\r\n"
      "\r\n";
  REQUIRE(f.parse(b) == Status::Ok);
  REQUIRE(f.r->n_msgs == 1);
  CHECK(f.r->msgs[0].request);
  CHECK(f.find(b, Field::Method) == V{"GET"});
  CHECK(f.find(b, Field::Uri) == V{"http://proxy.example/x?y"});
  CHECK(f.find(b, Field::UriDomain) == V{"proxy.example"});
  CHECK(f.find(b, Field::Host) == V{"www.Example.com:8080"});
  CHECK(f.find(b, Field::HostDomain) == V{"www.Example.com"});
  CHECK(f.find(b, Field::UserAgent) == V{"Mozilla/5.0 (X11)"});
  CHECK(f.find(b, Field::RefererDomain) == V{"ref.example.org"});
  CHECK(f.find(b, Field::Cookie) == V{"a=1; b=2", "c=3"});
  CHECK(f.find(b, Field::Authorization) == V{"Basic Zm9vOmJhcg=="});
  CHECK(f.find(b, Field::Xff) == V{"10.0.0.1, 10.0.0.2"});
  CHECK(f.find(b, Field::Forwarded) == V{"for=192.0.2.60"});
  CHECK(f.r->consumed == b.size());
  CHECK(f.r->msgs[0].body_off == b.size());
}

TEST_CASE("http: pipelined requests with bodies, then a partial head") {
  Fx f;
  const std::string one = "POST /a HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n\r\nhello";
  const std::string two = "GET /b HTTP/1.0\r\nHost: b.example\r\n\r\n";
  const std::string three = "\r\nGET /c HTTP/1.1\r\nHost: c.example\r\n\r\n";
  std::string b = one + two + three;
  REQUIRE(f.parse(b) == Status::Ok);
  REQUIRE(f.r->n_msgs == 3);
  CHECK(f.r->msgs[0].content_length == 5);
  CHECK(f.r->msgs[1].version_minor == 0);
  CHECK(f.find(b, Field::Host) == V{"a.example", "b.example", "c.example"});
  std::string partial = one + "GET /b HTTP/1.1\r\nHost: b.ex";
  REQUIRE(f.parse(partial) == Status::Truncated);
  CHECK(f.r->consumed == one.size());
  CHECK(f.r->n_msgs == 1);
  std::string body_cut = one.substr(0, one.size() - 2);
  REQUIRE(f.parse(body_cut) == Status::Truncated);
  CHECK(f.r->body_missing == 2);
}

TEST_CASE("http: responses: Set-Cookie, Location, Server, bodyless statuses") {
  Fx f;
  const std::string b =
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 302 Found\r\nLocation: //cdn.example.net/x\r\nSet-Cookie: id=42; Path=/\r\nServer: nginx\r\n"
      "Content-Length: 0\r\n\r\n"
      "HTTP/1.1 200\r\nContent-Length: 3\r\n\r\nabc"
      "HTTP/1.1 200 OK\r\n\r\nuntil-close";
  REQUIRE(f.parse(b, Direction::Response) == Status::Ok);
  REQUIRE(f.r->n_msgs == 4);
  CHECK(f.r->msgs[1].status == 302);
  CHECK(f.find(b, Field::LocationDomain) == V{"cdn.example.net"});
  CHECK(f.find(b, Field::SetCookie) == V{"id=42; Path=/"});
  CHECK(f.find(b, Field::Server) == V{"nginx"});
  CHECK(f.r->msgs[3].body_unbounded);
  CHECK(f.r->consumed == b.size() - 11);
  CHECK(f.parse("GET / HTTP/1.1\r\n\r\n", Direction::Response) == Status::Malformed);
}

TEST_CASE("http: obs-fold extends the value span over the fold") {
  Fx f;
  const std::string b = "GET / HTTP/1.1\r\nUser-Agent: part1\r\n  part2\r\nHost: h\r\n\r\n";
  REQUIRE(f.parse(b) == Status::Ok);
  CHECK(f.find(b, Field::UserAgent) == V{"part1\r\n  part2"});
  CHECK(f.find(b, Field::Host) == V{"h"});
  CHECK(f.parse(" folded-first\r\n\r\n") == Status::Malformed);
  CHECK(f.parse("GET / HTTP/1.1\r\n x: y\r\n\r\n") == Status::Malformed);
}

TEST_CASE("http: strictness: bare LF, stray CR, bad names, CTLs, conflicting lengths") {
  Fx f;
  CHECK(f.parse("GET / HTTP/1.1\nHost: a\n\n") == Status::Malformed);
  CHECK(f.r->error == Error::BareLf);
  CHECK(f.parse("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n") == Status::Malformed);
  CHECK(f.parse("GET / HTTP/1.1\r\nHost : a\r\n\r\n") == Status::Malformed);
  CHECK(f.parse("GET / HTTP/1.1\r\nHo st: a\r\n\r\n") == Status::Malformed);
  CHECK(f.parse("GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n") == Status::Malformed);
  CHECK(f.parse("GET  / HTTP/1.1\r\n\r\n") == Status::Malformed);
  CHECK(f.parse("GET / HTTP/2.0\r\n\r\n") == Status::Malformed);
  CHECK(f.parse("GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n") == Status::Malformed);
  CHECK(f.parse("GET / HTTP/1.1\r\nContent-Length: 5x\r\n\r\n") == Status::Malformed);
  CHECK(f.parse("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n") == Status::Malformed);
  REQUIRE(f.parse("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n") == Status::Ok);
  CHECK(f.r->msgs[0].chunked);
  CHECK(f.parse("GET / HTTP/1.1\r\nHost: a\r\n") == Status::Truncated);
  CHECK(f.parse("GET / HTTP/1.1\r") == Status::Truncated);
}

TEST_CASE("http: 64 KiB of headers parse; beyond the limit is Malformed, not Truncated") {
  Fx f;
  std::string b = "GET / HTTP/1.1\r\nHost: big.example\r\nCookie: " + std::string(64 * 1024 - 64, 'c') + "\r\n";
  for (int i = 0; i < 20; ++i) b += "X-H" + std::to_string(i) + ": v\r\n";
  b += "User-Agent: ua\r\n\r\n";
  REQUIRE(f.parse(b) == Status::Ok);
  CHECK(f.find(b, Field::Cookie)[0].size() == 64 * 1024 - 64);
  CHECK(f.find(b, Field::UserAgent) == V{"ua"});
  std::string huge = "GET / HTTP/1.1\r\nCookie: " + std::string(Result::kMaxHeadBytes + 10, 'c');
  CHECK(f.parse(huge) == Status::Malformed);
  CHECK(f.r->error == Error::HeadTooLarge);
  std::string many = "GET / HTTP/1.1\r\n";
  for (unsigned i = 0; i < Result::kMaxHeaders + 1; ++i) many += "A: b\r\n";
  many += "\r\n";
  CHECK(f.parse(many) == Status::Malformed);
  CHECK(f.r->overflow);
}

TEST_CASE("http: url_host") {
  auto h = [](const std::string& s) {
    Span sp = url_host(reinterpret_cast<const uint8_t*>(s.data()), Span{0, uint32_t(s.size())});
    return s.substr(sp.off, sp.len);
  };
  CHECK(h("http://a.example/x") == "a.example");
  CHECK(h("https://u:p@b.example:8443") == "b.example");
  CHECK(h("//c.example?q") == "c.example");
  CHECK(h("/relative/path") == "");
  CHECK(h("http://[2001:db8::1]:80/") == "");
  CHECK(h("mailto:x@y") == "");
  CHECK(h("HTTP://D.Example#frag") == "D.Example");
}

TEST_CASE("http: Origin, Proxy-Authorization and X-Real-IP are located, and are policy fields") {
  Fx f;
  const std::string b =
      "POST /form HTTP/1.1\r\n"
      "Host: a.example\r\n"
      "origin: https://page.example.net:8443\r\n"
      "Proxy-Authorization: Basic cHJveHk6cHc=\r\n"
      "X-Real-IP: 198.51.100.77\r\n"
      "X-Origin: not-it\r\n"
      "Content-Length: 0\r\n"
      "\r\n";
  REQUIRE(f.parse(b) == Status::Ok);
  CHECK(f.find(b, Field::Origin) == V{"https://page.example.net:8443"});
  CHECK(f.find(b, Field::ProxyAuthorization) == V{"Basic cHJveHk6cHc="});
  CHECK(f.find(b, Field::XRealIp) == V{"198.51.100.77"});
  CHECK(std::string(registry_field(Field::Origin)) == "http.origin");
  CHECK(std::string(registry_field(Field::ProxyAuthorization)) == "http.proxy_authorization");
  CHECK(std::string(registry_field(Field::XRealIp)) == "http.x_real_ip");
  for (unsigned i = 0; i < f.r->n_occ; ++i)
    if (f.r->occ[i].kind == Field::Origin) CHECK(is_field_value(*f.r, i));
}

TEST_CASE("http: From is located as http.from, and is no longer among the other headers") {
  Fx f;
  const std::string b =
      "GET /robots.txt HTTP/1.1\r\n"
      "Host: a.example\r\n"
      "FROM: crawler-admin@mail.example\r\n"
      "X-From: not-it\r\n"
      "\r\n";
  REQUIRE(f.parse(b) == Status::Ok);
  CHECK(f.find(b, Field::From) == V{"crawler-admin@mail.example"});
  CHECK(f.find(b, Field::OtherHeader) == V{"not-it"});
  CHECK(std::string(registry_field(Field::From)) == "http.from");
  CHECK(locates("http.from"));
  CHECK_FALSE(locates("http.accept_language"));
}

TEST_CASE("http: every header no other field names is http.other_headers, framing headers aside") {
  Fx f;
  const std::string b =
      "HTTP/1.1 200 OK\r\n"
      "Content-Length: 0\r\n"
      "P3P: policyref=\"http://www.ads.example/p3p.xml\", CP=\"NOI\"\r\n"
      "Content-Location: http://go.example.co.il/short/38/index.html\r\n"
      "Server: cafe\r\n"
      "Set-Cookie: id=1\r\n"
      "X-Vendor: 10.0.0.138\r\n"
      "\r\n";
  REQUIRE(f.parse(b, Direction::Response) == Status::Ok);
  CHECK(f.find(b, Field::OtherHeader) ==
        V{"policyref=\"http://www.ads.example/p3p.xml\", CP=\"NOI\"", "http://go.example.co.il/short/38/index.html",
          "10.0.0.138"});
  CHECK(std::string(registry_field(Field::OtherHeader)) == "http.other_headers");
  for (unsigned i = 0; i < f.r->n_occ; ++i)
    if (f.r->occ[i].kind == Field::OtherHeader) CHECK(is_field_value(*f.r, i));
}
