// The values a consumer rewrote, found again in kept payload (echo.h): the
// table, the direct search of values not yet compiled, the background
// database, and that both give the same bytes.
#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>

#include "echo.h"

using namespace amon;
using namespace std::string_literals;

namespace {

const uint8_t kOld4[4] = {192, 168, 7, 7}, kNew4[4] = {10, 9, 8, 77};
const uint8_t kOldMac[6] = {0x00, 0x1b, 0x21, 0x3a, 0x4f, 0x5d}, kNewMac[6] = {0x02, 0, 0, 0, 0, 0x2a};

std::string scanned(EchoScan& s, std::string p, EchoCount* c = nullptr) {
  const EchoCount n = s.scan(reinterpret_cast<uint8_t*>(p.data()), uint32_t(p.size()));
  if (c) *c = n;
  return p;
}

void fill(EchoScan& s) {
  s.addr(kOld4, kNew4, 4);
  s.mac(kOldMac, kNewMac);
  const std::string cookie = "SID=31d4d96e407aad42; Path=/", hidden = "xxxxxxxxxxxxxxxxxxxxxxxxxxxx";
  s.bytes(reinterpret_cast<const uint8_t*>(cookie.data()), reinterpret_cast<const uint8_t*>(hidden.data()),
          uint32_t(cookie.size()));
  s.name("laptop-anna.example.org", names::Decision::redact(true));
}

const std::string kPayload =
    "peer 192.168.7.7 said; mac 00:1B:21:3A:4F:5D and 00-1b-21-3a-4f-5d; raw \xc0\xa8\x07\x07|"
    "\x00\x1b\x21\x3a\x4f\x5d| token 31d4d96e407aad42 host Laptop-Anna.Example.org; "
    "not 192.168.7.70 nor 31d4d96e407aad42ff nor mylaptop-anna.example.orgs"s;

void check_rewritten(const std::string& out) {
  REQUIRE(out.size() == kPayload.size());
  CHECK(out.find("192.168.7.7 ") == std::string::npos);
  CHECK(out.find("peer 010.09.8.77 said") != std::string::npos);
  CHECK(out.find("mac 02:00:00:00:00:2A and 02-00-00-00-00-2a;") != std::string::npos);
  // IPv4 in binary is not searched (four bytes turn up by chance); a MAC is.
  CHECK(out.find("raw \xc0\xa8\x07\x07|\x02\x00\x00\x00\x00\x2a|"s) != std::string::npos);
  CHECK(out.find("token xxxxxxxxxxxxxxxx host") != std::string::npos);
  CHECK(out.find("host xxxxxxxxxxxxxxxxxxxxxxx;") != std::string::npos);
  // Part of a longer number, hex string or name: left alone.
  CHECK(out.find("not 192.168.7.70 nor 31d4d96e407aad42ff nor mylaptop-anna.example.orgs") != std::string::npos);
}

}  // namespace

TEST_CASE("values just recorded are found before the database holds them") {
  EchoScan s;
  fill(s);
  CHECK(s.size() >= 5);  // the address, the MAC, the cookie and its part, the name
  EchoCount c;
  const std::string out = scanned(s, kPayload, &c);
  check_rewritten(out);
  CHECK(c.mapped == 6);
  CHECK(c.filled == 0);
}

TEST_CASE("the background database finds what the direct search finds, byte for byte") {
  EchoScan direct, built;
  fill(direct);
  fill(built);
  REQUIRE(built.wait_built(5000));
  CHECK(built.pending() == 0);
  const std::string a = scanned(direct, kPayload), b = scanned(built, kPayload);
  CHECK(a == b);
  check_rewritten(b);
}

TEST_CASE("what a value becomes follows its latest rewrite; kept values are not recorded") {
  EchoScan s;
  s.mac(kOldMac, kNewMac);
  const uint8_t later[6] = {0x02, 0, 0, 0, 0, 0x2b};
  s.mac(kOldMac, later);
  s.addr(kOld4, kOld4, 4);  // kept
  const uint8_t zero[6] = {}, bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  s.mac(zero, kNewMac);  // names no one
  s.mac(bcast, kNewMac);
  CHECK(s.size() == 1);
  REQUIRE(s.wait_built(5000));
  CHECK(scanned(s, "at 00:1b:21:3a:4f:5d, kept 192.168.7.7") == "at 02:00:00:00:00:2b, kept 192.168.7.7");
}

TEST_CASE("a MAC written without separators or in dotted groups of four is found, in its own form") {
  const std::string pay =
      "USN: uuid:295c0004-6807-106d-80cf-001b213a4f5d::urn AP001B.213A.4F5D up; "
      "not 001b213a4f5d0 nor 0001b213a4f5d nor 001b.213a.4f5d.0";
  for (const bool built : {false, true}) {
    EchoScan s;
    s.mac(kOldMac, kNewMac);
    if (built) REQUIRE(s.wait_built(5000));
    EchoCount c;
    const std::string out = scanned(s, pay, &c);
    CHECK(out.substr(0, 73) == "USN: uuid:295c0004-6807-106d-80cf-02000000002a::urn AP0200.0000.002A up; ");
    CHECK(out.substr(73) == pay.substr(73));  // inside longer hex runs or dotted groups: left alone
    CHECK(c.mapped == 2);
  }
}

TEST_CASE("a MAC in dashes that begins a serial number is found; inside a longer run of groups it is not") {
  // A Sonos player's serial: its MAC in dashes, a dash and a digit, after
  // a URN's colon. Not a MAC: one continued by a seventh group and more,
  // by a tail too long for a serial, or after an address group and a colon.
  const std::string pay =
      "urn:sonos:serial:00-1B-21-3A-4F-5D-7\x86 id 00-1b-21-3a-4f-5d-a1b2; "
      "not 00-1b-21-3a-4f-5d-00-01 nor 00-1b-21-3a-4f-5d-12345 nor ab:00-1b-21-3a-4f-5d nor 00-1b-21-3a-4f-5d-7:1"s;
  const size_t keep_from = pay.find("not ");
  for (const bool built : {false, true}) {
    EchoScan s;
    s.mac(kOldMac, kNewMac);
    if (built) REQUIRE(s.wait_built(5000));
    EchoCount c;
    const std::string out = scanned(s, pay, &c);
    CHECK(out.substr(0, keep_from) == "urn:sonos:serial:02-00-00-00-00-2A-7\x86 id 02-00-00-00-00-2a-a1b2; "s);
    CHECK(out.substr(keep_from) == pay.substr(keep_from));
    CHECK(c.mapped == 2);
  }
}

TEST_CASE("the table is bounded: the oldest values leave it") {
  EchoScan s;
  uint8_t o[4] = {172, 16, 0, 0}, n[4] = {10, 0, 0, 0};
  for (unsigned i = 0; i < EchoScan::kEntries + 10; ++i) {
    o[2] = uint8_t(i >> 8), o[3] = uint8_t(i), n[3] = uint8_t(i | 1);
    s.addr(o, n, 4);
  }
  CHECK(s.size() == EchoScan::kEntries);
  REQUIRE(s.wait_built(10000));
  // The newest is found, by the database; the first recorded has left.
  CHECK(scanned(s, "x 172.16.4.9 y") != "x 172.16.4.9 y");
  CHECK(scanned(s, "x 172.16.0.1 y") == "x 172.16.0.1 y");
}

TEST_CASE("an address text longer than its pseudonym's shortest form is padded; a shorter one is zeroed") {
  EchoScan s;
  const uint8_t o6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x17};
  uint8_t n6[16];
  for (int i = 0; i < 16; ++i) n6[i] = uint8_t(0x20 + i * 7);
  s.addr(o6, n6, 16);
  EchoCount c;
  // No text of the pseudonym is 8 characters long: the zero address is.
  const std::string out = scanned(s, "v6 fd00::17 and FD00::17.", &c);
  REQUIRE(out.size() == 25);
  for (size_t at : {3u, 16u}) {
    uint8_t a[16];
    REQUIRE(inet_pton(AF_INET6, out.substr(at, 8).c_str(), a) == 1);
    CHECK(std::memcmp(a, std::string(16, '\0').data(), 16) == 0);
  }
  CHECK(c.filled == 2);
  const std::string full = scanned(s, "fd00:0000:0000:0000:0000:0000:0000:0017", &c);
  CHECK(full == "2027:2e35:3c43:4a51:585f:666d:747b:8289");
  CHECK(c.mapped == 1);
}

TEST_CASE("random payloads: found by the database or directly, the same bytes") {
  std::mt19937 rng(11);
  EchoScan direct, built;
  for (int i = 0; i < 50; ++i) {
    uint8_t o[4], n[4];
    for (auto& b : o) b = uint8_t(rng());
    for (auto& b : n) b = uint8_t(rng());
    direct.addr(o, n, 4), built.addr(o, n, 4);
  }
  REQUIRE(built.wait_built(5000));
  for (int t = 0; t < 200; ++t) {
    std::string p(64 + rng() % 512, '\0');
    for (auto& ch : p) ch = char(rng() % 4 ? '0' + rng() % 10 : '.');
    CHECK(scanned(direct, p) == scanned(built, p));
  }
}

TEST_CASE("a value only z-anonymity hid leaves the table when a field releases it; one another action rewrote stays") {
  const std::string pay = "see 192.168.7.7 and laptop-anna.example.org and 00:1b:21:3a:4f:5d here";
  for (const bool built : {false, true}) {
    EchoScan s;
    s.addr(kOld4, kNew4, 4, true);
    s.name("laptop-anna.example.org", names::Decision::hidden(), true);
    s.mac(kOldMac, kNewMac);
    if (built) REQUIRE(s.wait_built(5000));
    CHECK(scanned(s, pay).find("192.168.7.7") == std::string::npos);
    CHECK(scanned(s, pay).find("laptop-anna.example.org") == std::string::npos);
    CHECK(s.has_z());
    // Kept in clear by their fields now (z users reached): released.
    s.addr(kOld4, kOld4, 4);
    s.name("Laptop-Anna.example.org.", names::Decision::keep());
    s.mac(kOldMac, kOldMac);  // a MAC left as it came releases nothing: no rule hid it by z-anonymity
    CHECK_FALSE(s.has_z());
    if (built) REQUIRE(s.wait_built(5000));
    const std::string out = scanned(s, pay);
    CHECK(out.find("see 192.168.7.7 and laptop-anna.example.org and ") != std::string::npos);
    CHECK(out.find("00:1b:21:3a:4f:5d") == std::string::npos);
    // Hidden again by z-anonymity (a flow decided before z users had it):
    // released lately, it stays out; another action brings it back.
    s.name("laptop-anna.example.org", names::Decision::hidden(), true);
    CHECK_FALSE(s.has_z());
    CHECK(scanned(s, pay).find("laptop-anna.example.org") != std::string::npos);
    s.name("laptop-anna.example.org", names::Decision::redact(true));
    CHECK(scanned(s, pay).find("laptop-anna.example.org") == std::string::npos);
  }
}

TEST_CASE("a value some action other than z-anonymity rewrote is not released by a field that keeps it") {
  EchoScan s;
  const std::string cookie = "SID=31d4d96e407aad42", hidden = "xxxxxxxxxxxxxxxxxxxx";
  const auto* c = reinterpret_cast<const uint8_t*>(cookie.data());
  s.bytes(c, reinterpret_cast<const uint8_t*>(hidden.data()), uint32_t(cookie.size()), true);
  s.bytes(c, reinterpret_cast<const uint8_t*>(hidden.data()), uint32_t(cookie.size()));  // redact(): not z
  s.bytes(c, c, uint32_t(cookie.size()));  // kept by another field
  CHECK_FALSE(s.has_z());
  CHECK(scanned(s, "token 31d4d96e407aad42 end").find("31d4d96e407aad42") == std::string::npos);
  // z alone: its parts leave with it.
  EchoScan z;
  z.bytes(c, reinterpret_cast<const uint8_t*>(hidden.data()), uint32_t(cookie.size()), true);
  z.bytes(c, c, uint32_t(cookie.size()));
  CHECK(scanned(z, "token 31d4d96e407aad42 end") == "token 31d4d96e407aad42 end");
}

TEST_CASE("the spans of fields parsed in the packet are never rewritten") {
  EchoScan s;
  s.name("laptop-anna.example.org", names::Decision::redact(true));
  std::string p = "Host: laptop-anna.example.org\r\n\r\nbody names laptop-anna.example.org";
  const EchoScan::Span keep[] = {{6, 29}};
  const EchoCount n = s.scan(reinterpret_cast<uint8_t*>(p.data()), uint32_t(p.size()), keep, 1);
  CHECK(n.mapped == 1);
  CHECK(p == "Host: laptop-anna.example.org\r\n\r\nbody names xxxxxxxxxxxxxxxxxxxxxxx");
  // A match that only overlaps a parsed span is left too.
  std::string q = "xlaptop-anna.example.org";
  q[0] = ' ';
  const EchoScan::Span part[] = {{0, 2}};
  CHECK(s.scan(reinterpret_cast<uint8_t*>(q.data()), uint32_t(q.size()), part, 1).mapped == 0);
}

TEST_CASE("payloads made of the values themselves: the direct search finds what the database finds") {
  std::mt19937 rng(5);
  EchoScan direct, built;
  std::vector<std::string> pieces = {" ", ".", ":", "-", "=", ";", "a", "Z", "\x01"};
  auto both = [&](auto&& f) { f(direct), f(built); };
  for (int i = 0; i < 40; ++i) {
    uint8_t o6[16] = {}, n6[16] = {};
    o6[15] = uint8_t(1 + i);  // "::1" ... : forms of three characters
    for (auto& b : n6) b = uint8_t(rng());
    both([&](EchoScan& s) { s.addr(o6, n6, 16); });
    std::string name;
    for (int k = 0, len = 4 + int(rng() % 8); k < len; ++k) name += char('a' + rng() % 3);
    both([&](EchoScan& s) { s.name(name, names::Decision::redact(true), i % 2); });
    pieces.push_back(name), pieces.push_back("::" + std::to_string(1 + i));
    std::string up = name;
    for (char& c : up) c = char(std::toupper(uint8_t(c)));
    pieces.push_back(up);
  }
  REQUIRE(built.wait_built(5000));
  unsigned found = 0;
  for (int t = 0; t < 300; ++t) {
    std::string p;
    while (p.size() < 200) p += pieces[rng() % pieces.size()];
    EchoCount c;
    const std::string a = scanned(direct, p, &c);
    found += c.mapped + c.filled;
    CHECK(a == scanned(built, p));
  }
  CHECK(found > 100);
}

TEST_CASE("a value quoted in a query string after a percent-escape is found; one inside a word is not") {
  EchoScan s;
  fill(s);
  const std::string out = scanned(s, "utmcc=SID%3D31d4d96e407aad42%3B and xyz31d4d96e407aad42");
  CHECK(out == "utmcc=SID%3Dxxxxxxxxxxxxxxxx%3B and xyz31d4d96e407aad42");
}

TEST_CASE("a Set-Cookie attribute's value names no one: a Host header repeating its domain stays") {
  EchoScan s;
  const std::string sc = "SID=31d4d96e407aad42; Domain=.example-site.com; Path=/account/settings",
                    hid(sc.size(), 'x');
  s.bytes(reinterpret_cast<const uint8_t*>(sc.data()), reinterpret_cast<const uint8_t*>(hid.data()),
          uint32_t(sc.size()));
  CHECK(scanned(s, "Host: www.example-site.com\r\nGET /account/settings sid 31d4d96e407aad42\r\n") ==
        "Host: www.example-site.com\r\nGET /account/settings sid xxxxxxxxxxxxxxxx\r\n");
}

TEST_CASE("consumers sharing a database: each rewrites only its own values, as its field became") {
  EchoScan a, b, alone_a, alone_b;
  EchoScan::share({&a, &b});
  const uint8_t kOther[4] = {172, 16, 1, 2}, kOtherNew[4] = {10, 1, 1, 1}, kNewB[4] = {10, 7, 7, 7};
  const std::string p = "one 192.168.7.7 two 172.16.1.2 end"s;
  // a: both addresses; b: the first only, to another value.
  for (EchoScan* s : {&a, &alone_a}) s->addr(kOld4, kNew4, 4), s->addr(kOther, kOtherNew, 4);
  for (EchoScan* s : {&b, &alone_b}) s->addr(kOld4, kNewB, 4);
  const std::string da = scanned(a, p), db = scanned(b, p);  // direct search: nothing built yet
  REQUIRE(a.wait_built(5000));
  REQUIRE(b.wait_built(5000));
  CHECK(a.pending() == 0);
  CHECK(b.pending() == 0);
  // The database holds 172.16.1.2 (a's): b, which never rewrote it, leaves it.
  CHECK(scanned(b, p) == db);
  CHECK(db == scanned(alone_b, p));
  CHECK(db.find("172.16.1.2") != std::string::npos);
  CHECK(db.find("192.168.7.7") == std::string::npos);
  CHECK(scanned(a, p) == da);
  CHECK(da == scanned(alone_a, p));
  CHECK(da != db);
  // A value b records now that a brought into the database is found by it
  // at once, as b's own.
  b.addr(kOther, kNewB, 4);
  CHECK(b.pending() == 0);
  const std::string db2 = scanned(b, p);
  CHECK(db2.find("172.16.1.2") == std::string::npos);
  alone_b.addr(kOther, kNewB, 4);
  CHECK(db2 == scanned(alone_b, p));
}

TEST_CASE("a named item's value of 8 bytes or more is searched; a bare word that short is not") {
  EchoScan s;
  const std::string sc = "_dyid=268404678; tz=UTC; Expires=Fri, 01 Jan 1990 00:00:00 GMT", hid(sc.size(), 'x');
  s.bytes(reinterpret_cast<const uint8_t*>(sc.data()), reinterpret_cast<const uint8_t*>(hid.data()),
          uint32_t(sc.size()));
  // The visitor id copied into a query string leaves as in its field; the
  // expiry's time of day, a word of the date, stays wherever a Date header has it.
  CHECK(scanned(s, "GET /uia?id=268404678&se=1\r\nDate: Fri, 01 Jan 1990 00:00:00 GMT\r\n") ==
        "GET /uia?id=xxxxxxxxx&se=1\r\nDate: Fri, 01 Jan 1990 00:00:00 GMT\r\n");
}

TEST_CASE("preloaded values are searched from the first packet and never leave the table") {
  EchoPreload p;
  const std::string cookie = "SID=31d4d96e407aad42; Path=/", hidden(cookie.size(), 'x');
  p.add(cookie, hidden);
  p.add(cookie, hidden);  // once
  REQUIRE(p.size() == 2);  // the value and its part
  const std::string kPay = "a token 31d4d96e407aad42 here", kWant = "a token xxxxxxxxxxxxxxxx here";
  EchoScan direct, built;
  direct.preload(p);
  built.preload(p);
  CHECK(direct.preloaded() == 2);
  CHECK(scanned(direct, kPay) == kWant);
  // More new values than the table takes in turn: the preloaded ones stay,
  // found directly and by the database alike.
  uint8_t o[4] = {172, 16, 0, 0}, n[4] = {10, 0, 0, 0};
  for (EchoScan* s : {&direct, &built})
    for (unsigned i = 0; i < EchoScan::kEntries + 10; ++i) {
      o[2] = uint8_t(i >> 8), o[3] = uint8_t(i), n[3] = uint8_t(i | 1);
      s->addr(o, n, 4);
    }
  CHECK(direct.size() == EchoScan::kEntries + 2);
  CHECK(scanned(direct, kPay) == kWant);
  REQUIRE(built.wait_built(10000));
  CHECK(built.pending() == 0);
  CHECK(scanned(built, kPay) == kWant);
  CHECK(scanned(built, "x 172.16.0.1 y") == "x 172.16.0.1 y");  // a value that took its turn has left
}

TEST_CASE("the preload is bounded: entries past the cap are counted, not held") {
  EchoPreload p;
  for (unsigned i = 0; i < EchoPreload::kMax + 5; ++i) {
    const std::string v = "token-" + std::to_string(1000000 + i);
    p.add(v, std::string(v.size(), 'x'));
  }
  CHECK(p.size() == EchoPreload::kMax);
  CHECK(p.over == 5);
}

TEST_CASE("an IPv4 address in binary is found in structured payload, not in payload that looks random") {
  EchoScan s;
  s.addr(kOld4, kNew4, 4);
  const uint8_t two_zeros[4] = {10, 0, 0, 6}, two_zeros_new[4] = {10, 77, 1, 2};
  s.addr(two_zeros, two_zeros_new, 4);
  // A discovery record: a name padded with zeros, then the device's addresses.
  std::string rec = "\x00\x00\x02\x00\x27\x01" "DGS-1210-10P"s + std::string(52, '\0') + "\xc0\xa8\x07\x07\xff\xff"s +
                    std::string(8, '\0') + "\x0a\x00\x00\x06"s + "Port 10"s;
  EchoCount c;
  const std::string out = scanned(s, rec, &c);
  REQUIRE(out.size() == rec.size());
  CHECK(out.find("\xc0\xa8\x07\x07"s) == std::string::npos);
  CHECK(out.find(std::string(52, '\0') + "\x0a\x09\x08\x4d\xff\xff"s) != std::string::npos);
  CHECK(out.find("\x0a\x00\x00\x06"s) != std::string::npos);  // two zero bytes: not looked for
  CHECK(c.mapped == 1);
  // The same four bytes in bytes without zeros (compressed, encrypted):
  // a chance match, left alone.
  std::mt19937 rng(5);
  std::string noise(300, '\0');
  for (auto& ch : noise) ch = char(1 + rng() % 255);
  noise.replace(100, 4, "\xc0\xa8\x07\x07"s);
  CHECK(scanned(s, noise) == noise);
  // A value that left the table is no longer looked for.
  EchoScan z;
  z.addr(kOld4, kNew4, 4, true);
  CHECK(scanned(z, rec).find("\xc0\xa8\x07\x07"s) == std::string::npos);
  z.addr(kOld4, kOld4, 4);  // a field released it
  CHECK(scanned(z, rec) == rec);
}
