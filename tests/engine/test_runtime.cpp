// The per-consumer runtime on crafted frames: what each action writes, the
// roles of ip.client/ip.server, and that every length and checksum is right
// afterwards (checked against frames.h's own checksum, not amon's).
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>

#include "frames.h"
#include "zanon.h"
#include "l7_build.hpp"
#include "quic_build.hpp"
#include "l2l4.h"
#include "l7.h"
#include "policy.h"
#include "registry.h"
#include "runtime.h"
#include "scratch.h"

using namespace amon;
using namespace amon_test;

namespace {

// The reference Crypto-PAn sample key (Crypto-PAn 1.0 sample.cpp), so the
// expected addresses are the published ones, not amon's own output.
const char* kSampleKey = "1522178d33a4cf80130a5b1649907d10d8988f837979652762574c2d2a842202";

std::string key_file() {
  static const std::string path = scratch_key("sample.hex", kSampleKey);
  return path;
}

struct Consumer {
  std::shared_ptr<const dsl::Policy> policy;
  SharedServices svc;
  std::unique_ptr<Program> prog;
  std::unique_ptr<ProgramInstance> inst;
  ConsumerCounters c;
  uint32_t wire = 0;

  explicit Consumer(const std::string& body, zanon::Store* zs = nullptr) {
    svc.zstore = zs;
    static bool once = (register_builtin_plugins(), true);
    (void)once;
    std::string src = "key k = file(\"" + key_file() + "\")\n" + body;
    dsl::Diagnostics diags;
    policy = dsl::compile_string(src, "test.amon", diags);
    INFO(diags.render_text());
    REQUIRE(policy);
    REQUIRE(diags.errors() == 0);
    prog = std::make_unique<Program>(policy, 0, &svc);
    inst = prog->instantiate();
  }

  // Runs the frame through the consumer; f is resized to what is forwarded.
  Verdict run(Bytes& f, PacketMeta m = {}, uint32_t wire_len = 0, uint32_t cap_len = UINT32_MAX) {
    uint32_t cap = cap_len == UINT32_MAX ? uint32_t(f.size()) : cap_len;
    wire = wire_len ? wire_len : uint32_t(f.size());
    Decoded d;
    decode(f.data(), cap, wire, d);
    Verdict v = inst->process(f.data(), cap, wire, d, m, c);
    f.resize(cap);
    return v;
  }
};

PacketMeta meta(bool initiator_is_src = true, uint64_t ts = 1700000000123456789ULL) {
  PacketMeta m;
  m.initiator_is_src = initiator_is_src;
  m.ts_ns = ts;
  return m;
}

// A DNS query for secret.example.com, the UDP datagram's payload.
Bytes dns_query_secret() {
  Bytes q;
  put16(q, 0x1234), put16(q, 0x0100), put16(q, 1), put16(q, 0), put16(q, 0), put16(q, 0);
  for (const char* l : {"secret", "example", "com"}) {
    put8(q, unsigned(std::strlen(l)));
    q.insert(q.end(), l, l + std::strlen(l));
  }
  put8(q, 0), put16(q, 1), put16(q, 1);
  return q;
}

// Runs the frame through the consumer with its application fields parsed,
// as the worker does.
Verdict run_parsed(Consumer& c, Bytes& f) {
  PacketMeta m = meta();
  Decoded d;
  decode(f.data(), uint32_t(f.size()), uint32_t(f.size()), d);
  L7Parse parse;
  m.parse = &parse;
  FlowState fs;
  m.flow = &fs;
  analyze_l7(f.data(), d, m, parse);
  uint32_t cap = uint32_t(f.size()), wire = cap;
  const Verdict v = c.inst->process(f.data(), cap, wire, d, m, c.c);
  f.resize(cap);
  return v;
}

// Every length and checksum of an Ethernet/[VLAN]/IP/L4 frame, recomputed
// from scratch: the frame must be one a receiver accepts as is.
void check_lengths_and_checksums(const Bytes& f, uint32_t l3) {
  INFO("frame of " << f.size() << " bytes, IP at " << l3);
  REQUIRE(f.size() >= l3 + 20);
  const uint8_t* ip = &f[l3];
  bool is6 = (ip[0] >> 4) == 6;
  uint32_t l4, l4len;
  uint8_t proto;
  if (!is6) {
    uint32_t ihl = (ip[0] & 15) * 4u;
    CHECK(get16(ip + 2) == f.size() - l3);
    CHECK(get16(ip + 10) == ref_ipv4_hdr_checksum(ip, ihl));
    l4 = l3 + ihl;
    proto = ip[9];
    if (get16(ip + 6) & 0x1fff) return;  // later fragment: no L4 header
  } else {
    CHECK(get16(ip + 4) == f.size() - l3 - 40);
    l4 = l3 + 40;
    proto = ip[6];
    while (proto == 0 || proto == 60 || proto == 43) {
      proto = f[l4];
      l4 += (f[l4 + 1] + 1u) * 8u;
    }
  }
  l4len = uint32_t(f.size()) - l4;
  size_t co = proto == 6 ? 16 : proto == 17 ? 6 : (proto == 1 || proto == 58) ? 2 : 0;
  if (!co || l4len < co + 2) return;
  if (proto == 17) CHECK(get16(&f[l4 + 4]) == l4len);
  if (proto == 17 && !is6 && get16(&f[l4 + 6]) == 0) return;  // no checksum in use
  uint16_t want = ref_l4_checksum(ip + (is6 ? 8 : 12), ip + (is6 ? 24 : 16), is6, proto, &f[l4], l4len, co, proto != 1);
  CHECK(get16(&f[l4 + co]) == want);
}

std::string a4(const Bytes& f, uint32_t off) { return str4(&f[off]); }
std::string a6(const Bytes& f, uint32_t off) { return str6(&f[off]); }

Bytes udp4(const char* src, const char* dst, size_t n = 20) {
  V4 h;
  h.proto = 17, h.src = v4(src), h.dst = v4(dst);
  return cat({eth(0x0800), ipv4(h, cat({udp_hdr(40000, 53, uint16_t(8 + n)), payload(n)}))});
}

}  // namespace

TEST_CASE("cryptopan on ip.client: the flow initiator without a clients set", "[runtime][roles]") {
  Consumer c("ip.client : cryptopan(key=k)\n");
  Bytes f = udp4("128.11.68.132", "129.118.74.4");
  REQUIRE(c.run(f, meta(true)) == Verdict::Forward);
  CHECK(a4(f, 26) == "135.242.180.132");  // published vector
  CHECK(a4(f, 30) == "129.118.74.4");
  check_lengths_and_checksums(f, 14);

  f = udp4("128.11.68.132", "129.118.74.4");
  REQUIRE(c.run(f, meta(false)) == Verdict::Forward);
  CHECK(a4(f, 26) == "128.11.68.132");
  CHECK(a4(f, 30) == "134.136.186.123");
  check_lengths_and_checksums(f, 14);
}

TEST_CASE("cryptopan on ip.server is the other end", "[runtime][roles]") {
  Consumer c("ip.server : cryptopan(key=k)\n");
  Bytes f = udp4("128.11.68.132", "129.118.74.4");
  c.run(f, meta(true));
  CHECK(a4(f, 26) == "128.11.68.132");
  CHECK(a4(f, 30) == "134.136.186.123");
}

TEST_CASE("the clients set decides the roles when exactly one end is inside", "[runtime][roles]") {
  Consumer c("clients = { 129.118.0.0/16 }\nip.client : cryptopan(key=k)\nip.server : prefix(8)\n");
  // src initiated, but dst is the one inside the clients set.
  Bytes f = udp4("128.11.68.132", "129.118.74.4");
  c.run(f, meta(true));
  CHECK(a4(f, 26) == "128.0.0.0");
  CHECK(a4(f, 30) == "134.136.186.123");
  check_lengths_and_checksums(f, 14);
  // Both inside: both are users, both take the client's rule.
  f = udp4("129.118.74.4", "129.118.1.1");
  c.run(f, meta(true));
  CHECK(a4(f, 26) == "134.136.186.123");
  CHECK(a4(f, 30) == "134.136.253.14");
  // Neither inside: same.
  f = udp4("128.11.68.132", "141.223.7.43");
  c.run(f, meta(false));
  CHECK(a4(f, 26) == "128.0.0.0");
  CHECK(a4(f, 30) == "141.167.8.160");
}

TEST_CASE("cryptopan on IPv6 keeps special classes, the published vector below them", "[runtime]") {
  // The published vector maps 2001:db8::1 to 4401:2bc:603f:d91d:27f:ff8e:
  // e6f1:dc1e and ::1 to 78ff:...: the class-preserving mapping keeps the
  // documentation prefix 2001:db8::/32 (the vector's bits below it) and
  // the loopback address (doc/cryptopan.md).
  Consumer c("ip.src, ip.dst : cryptopan(key=k)\n");
  V6 h;
  h.src = v6("2001:db8::1"), h.dst = v6("::1");
  Bytes f = cat({eth(0x86dd), ipv6(h, {}, 6, cat({tcp_hdr(1, 2), payload(9)}))});
  c.run(f);
  CHECK(a6(f, 22) == "2001:db8:603f:d91d:27f:ff8e:e6f1:dc1e");
  CHECK(a6(f, 38) == "::1");
  check_lengths_and_checksums(f, 14);
}

TEST_CASE("prefix keeps N bits, v6=M for IPv6 (default 48)", "[runtime]") {
  Consumer c("ip.src : prefix(24, v6=64)\nip.dst : prefix(12)\n");
  Bytes f = udp4("192.0.2.77", "198.51.100.200");
  c.run(f);
  CHECK(a4(f, 26) == "192.0.2.0");
  CHECK(a4(f, 30) == "198.48.0.0");
  check_lengths_and_checksums(f, 14);
  V6 h;
  h.src = v6("2001:db8:1:2:3:4:5:6"), h.dst = v6("2001:db8:aaaa:bbbb:cccc::1");
  Bytes g = cat({eth(0x86dd), ipv6(h, {}, 17, cat({udp_hdr(1, 2, 12), payload(4)}))});
  c.run(g);
  CHECK(a6(g, 22) == "2001:db8:1:2::");
  CHECK(a6(g, 38) == "2001:db8:aaaa::");
  check_lengths_and_checksums(g, 14);
  // A 6to4 address's next 32 bits are an IPv4 address: no more of them is
  // kept than of an IPv4 address (24 bits here, 40 in all; 12 for prefix(12)).
  h.src = v6("2002:c288:1c4c:1::1"), h.dst = v6("2002:c288:1c4c::9");
  Bytes t = cat({eth(0x86dd), ipv6(h, {}, 17, cat({udp_hdr(1, 2, 12), payload(4)}))});
  c.run(t);
  CHECK(a6(t, 22) == "2002:c288:1c00::");
  CHECK(a6(t, 38) == "2002:c280::");
  check_lengths_and_checksums(t, 14);
}

TEST_CASE("zero on addresses and MACs", "[runtime]") {
  Consumer c("ip.src : zero()\neth.src : zero()\n");
  Bytes f = udp4("192.0.2.77", "198.51.100.200");
  c.run(f);
  CHECK(a4(f, 26) == "0.0.0.0");
  CHECK(a4(f, 30) == "198.51.100.200");
  CHECK(Bytes(f.begin() + 6, f.begin() + 12) == Bytes(6, 0));
  CHECK(Bytes(f.begin(), f.begin() + 6) == Bytes({2, 0, 0, 0, 0, 1}));
  check_lengths_and_checksums(f, 14);
}

TEST_CASE("timestamp(): eth.dst = seconds, eth.src = ns within the second, 48-bit big-endian", "[runtime]") {
  Consumer c("eth.src, eth.dst : timestamp()\n");
  Bytes f = udp4("192.0.2.1", "192.0.2.2");
  const uint64_t ts = 1700000000ULL * 1000000000ULL + 123456789ULL;
  c.run(f, meta(true, ts));
  // 1700000000 = 0x6553F100, 123456789 = 0x075BCD15
  CHECK(Bytes(f.begin(), f.begin() + 6) == Bytes({0x00, 0x00, 0x65, 0x53, 0xf1, 0x00}));
  CHECK(Bytes(f.begin() + 6, f.begin() + 12) == Bytes({0x00, 0x00, 0x07, 0x5b, 0xcd, 0x15}));
  CHECK((f[0] & 1) == 0);  // unicast
}

TEST_CASE("payload cut removes the bytes and fixes every length and checksum", "[runtime][cut]") {
  Consumer c("ip.client : cryptopan(key=k)\npayload : cut()\n");
  SECTION("IPv4/TCP") {
    V4 h;
    Bytes f = cat({eth(0x0800), ipv4(h, cat({tcp_hdr(1, 2, 0x18, 1), payload(100)}))});
    REQUIRE(c.run(f) == Verdict::Forward);
    CHECK(f.size() == 14 + 20 + 24);
    CHECK(c.wire == f.size());
    check_lengths_and_checksums(f, 14);
  }
  SECTION("IPv4/UDP with IP options") {
    V4 h;
    h.proto = 17, h.opt_words = 3;
    Bytes f = cat({eth(0x0800), ipv4(h, cat({udp_hdr(1, 2, 8 + 33), payload(33)}))});
    c.run(f);
    CHECK(f.size() == 14 + 32 + 8);
    check_lengths_and_checksums(f, 14);
  }
  SECTION("IPv4/UDP padded to 60 bytes: the padding goes too") {
    Bytes f = udp4("192.0.2.1", "192.0.2.2", 2);
    f.resize(60, 0);
    c.run(f);
    CHECK(f.size() == 42);
    check_lengths_and_checksums(f, 14);
  }
  SECTION("IPv6/UDP behind hop-by-hop options") {
    V6 h;
    h.nh = 0;
    Bytes f = cat({eth(0x86dd), ipv6(h, v6ext(17, 1), 17, cat({udp_hdr(1, 2, 8 + 50), payload(50)}))});
    c.run(f);
    CHECK(f.size() == 14 + 40 + 8 + 8);
    check_lengths_and_checksums(f, 14);
  }
  SECTION("IPv6/TCP") {
    Bytes f = cat({eth(0x86dd), ipv6(V6{}, {}, 6, cat({tcp_hdr(1, 2), payload(77)}))});
    c.run(f);
    CHECK(f.size() == 14 + 40 + 20);
    check_lengths_and_checksums(f, 14);
  }
  SECTION("PPPoE over QinQ: the PPPoE length follows") {
    V4 h;
    h.proto = 17;
    Bytes ip = ipv4(h, cat({udp_hdr(1, 2, 8 + 25), payload(25)}));
    Bytes pp;
    put8(pp, 0x11), put8(pp, 0), put16(pp, 1), put16(pp, unsigned(ip.size() + 2)), put16(pp, 0x0021);
    Bytes f = cat({eth(0x8864, {{0x88a8, 1}, {0x8100, 2}}), pp, ip});
    c.run(f);
    CHECK(f.size() == 30 + 28);
    CHECK(get16(&f[22 + 4]) == 28 + 2);
    check_lengths_and_checksums(f, 30);
  }
  SECTION("a snaplen-truncated record: the uncaptured payload is gone from the lengths too") {
    V4 h;
    Bytes f = cat({eth(0x0800), ipv4(h, cat({tcp_hdr(1, 2), payload(1000)}))});
    uint32_t wire = uint32_t(f.size());
    f.resize(54);  // captured exactly up to the end of the TCP header
    c.run(f, meta(), wire);
    CHECK(f.size() == 54);
    CHECK(c.wire == 54);
    CHECK(get16(&f[14 + 2]) == 40);
  }
}

TEST_CASE("incremental checksum after address and payload rewrites equals a full recompute", "[runtime][checksum]") {
  std::mt19937_64 rng(20240611);
  const char* policies[] = {
      "ip.src, ip.dst : cryptopan(key=k)\n",
      "ip.src, ip.dst : hash(key=k)\n",
      "ip.client : cryptopan(key=k)\nip.server : prefix(16)\npayload : zero()\n",
      "ip.src : zero()\npayload : redact()\n",
  };
  for (const char* pol : policies) {
    Consumer c(pol);
    for (int i = 0; i < 1500; ++i) {
      bool six = i & 1;
      int kind = int(rng() % 3);  // tcp, udp, icmp
      size_t n = rng() % 300;
      Bytes data(n);
      for (auto& b : data) b = uint8_t(rng());
      Bytes f;
      if (!six) {
        V4 h;
        for (auto& b : h.src) b = uint8_t(rng());
        for (auto& b : h.dst) b = uint8_t(rng());
        h.proto = kind == 0 ? 6 : kind == 1 ? 17 : 1;
        Bytes l4 = kind == 0 ? tcp_hdr(uint16_t(rng()), 80) : kind == 1 ? udp_hdr(uint16_t(rng()), 53, uint16_t(8 + n))
                                                                        : icmp_hdr(8, 0);
        f = cat({eth(0x0800), ipv4(h, cat({l4, data}))});
      } else {
        V6 h;
        for (auto& b : h.src) b = uint8_t(rng());
        for (auto& b : h.dst) b = uint8_t(rng());
        uint8_t p = kind == 0 ? 6 : kind == 1 ? 17 : 58;
        h.nh = p;
        Bytes l4 = kind == 0 ? tcp_hdr(uint16_t(rng()), 80) : kind == 1 ? udp_hdr(uint16_t(rng()), 53, uint16_t(8 + n))
                                                                        : icmp_hdr(128, 0);
        f = cat({eth(0x86dd), ipv6(h, {}, p, cat({l4, data}))});
      }
      Bytes before = f;
      INFO("policy " << pol << "packet " << i << (six ? " v6" : " v4") << " kind " << kind << " payload " << n);
      REQUIRE(c.run(f, meta(rng() & 1)) == Verdict::Forward);
      REQUIRE(f.size() == before.size());
      check_lengths_and_checksums(f, 14);
    }
  }
}

TEST_CASE("UDP checksum 0 (none) stays 0 on IPv4", "[runtime][checksum]") {
  auto nocsum = [] {
    Bytes f = udp4("192.0.2.1", "198.51.100.2", 40);
    set16(&f[34 + 6], 0);
    return f;
  };
  for (const char* pol : {"ip.src, ip.dst : cryptopan(key=k)\n", "ip.src : zero()\npayload : zero()\n",
                          "ip.src : prefix(8)\npayload : cut()\n"}) {
    INFO(pol);
    Consumer c(pol);
    Bytes f = nocsum();
    c.run(f);
    CHECK(get16(&f[34 + 6]) == 0);
    CHECK(get16(&f[24]) == ref_ipv4_hdr_checksum(&f[14], 20));
  }
}

TEST_CASE("fail closed: truncated or malformed packets when the payload is protected", "[runtime][on_error]") {
  V4 h;
  Bytes tcp = cat({eth(0x0800), ipv4(h, cat({tcp_hdr(1, 2), payload(200)}))});
  const uint32_t wire = uint32_t(tcp.size());
  SECTION("on_error cut (default): keep the decoded headers, fix the IP header") {
    Consumer c("ip.src, ip.dst : cryptopan(key=k)\npayload : zero()\n");
    Bytes f(tcp.begin(), tcp.begin() + 44);  // ends inside the TCP header
    REQUIRE(c.run(f, meta(), wire) == Verdict::Forward);
    CHECK(f.size() == 34);
    CHECK(c.wire == 34);
    CHECK(c.c.err_cut == 1);
    CHECK(a4(f, 26) != "192.0.2.1");
    check_lengths_and_checksums(f, 14);
  }
  SECTION("on_error = drop") {
    Consumer c("on_error = drop\nip.src, ip.dst : cryptopan(key=k)\npayload : zero()\n");
    Bytes f(tcp.begin(), tcp.begin() + 44);
    CHECK(c.run(f, meta(), wire) == Verdict::Drop);
    CHECK(c.c.err_drop == 1);
  }
  SECTION("malformed UDP length, payload protected: cut after the IP header") {
    Consumer c("payload : zero()\n");
    V4 u;
    u.proto = 17;
    Bytes f = cat({eth(0x0800), ipv4(u, cat({udp_hdr(1, 2, 500), payload(30)}))});
    REQUIRE(c.run(f) == Verdict::Forward);
    CHECK(f.size() == 34);
    CHECK(c.c.err_cut == 1);
    check_lengths_and_checksums(f, 14);
    Consumer d("on_error = drop\npayload : redact()\n");
    f = cat({eth(0x0800), ipv4(u, cat({udp_hdr(1, 2, 500), payload(30)}))});
    CHECK(d.run(f) == Verdict::Drop);
  }
  SECTION("payload kept: a truncated packet goes out whole, addresses rewritten") {
    Consumer c("ip.src, ip.dst : cryptopan(key=k)\npayload : keep()\n");
    Bytes f(tcp.begin(), tcp.begin() + 44);
    REQUIRE(c.run(f, meta(), wire) == Verdict::Forward);
    CHECK(f.size() == 44);
    CHECK(c.wire == wire);
    CHECK(a4(f, 26) != "192.0.2.1");
    CHECK(get16(&f[24]) == ref_ipv4_hdr_checksum(&f[14], 20));
  }
  SECTION("addresses not captured in full: the IP layer is removed") {
    Consumer c("ip.src, ip.dst : cryptopan(key=k)\n");
    Bytes f(tcp.begin(), tcp.begin() + 30);  // ends inside the destination address
    REQUIRE(c.run(f, meta(), wire) == Verdict::Forward);
    CHECK(f.size() == 14);
  }
}

TEST_CASE("addresses rewritten in a malformed datagram keep a valid IPv4 header checksum", "[runtime][checksum]") {
  // dns-truncated-badpackets.pcap: IPv4 total length beyond the frame. The
  // addresses are still rewritten (good), so the header checksum must follow.
  Consumer c("ip.src, ip.dst : cryptopan(key=k)\n");
  V4 h;
  h.tot_len = 1500;
  Bytes f = cat({eth(0x0800), ipv4(h, cat({tcp_hdr(1, 2), payload(40)}))});
  REQUIRE(c.run(f) == Verdict::Forward);
  CHECK(a4(f, 26) != "192.0.2.1");
  CHECK(get16(&f[24]) == ref_ipv4_hdr_checksum(&f[14], 20));
}

TEST_CASE("first fragment of a UDP datagram: the checksum follows the address rewrite", "[runtime][checksum]") {
  // The UDP checksum in the first fragment covers the reassembled datagram;
  // rewriting the pseudo-header addresses must update it incrementally.
  Consumer c("ip.src, ip.dst : cryptopan(key=k)\n");
  V4 h;
  h.proto = 17;
  Bytes whole = cat({udp_hdr(2049, 789, 8 + 2000), payload(2000)});
  Bytes first = ipv4(h, whole);  // full datagram, correct UDP checksum
  uint16_t ck_before = get16(&first[20 + 6]);
  // Keep the first 1480 bytes of the datagram as fragment 1 (MF, offset 0).
  Bytes frag(first.begin(), first.begin() + 20 + 1480);
  set16(&frag[2], 1500);
  set16(&frag[6], 0x2000);
  set16(&frag[10], ref_ipv4_hdr_checksum(frag.data(), 20));
  Bytes f = cat({eth(0x0800), frag});
  REQUIRE(c.run(f) == Verdict::Forward);
  // Expected: the datagram's checksum recomputed with the new addresses.
  Bytes rewritten = whole;
  uint16_t want = ref_l4_checksum(&f[26], &f[30], false, 17, rewritten.data(), rewritten.size(), 6);
  CHECK(ck_before != want);
  CHECK(get16(&f[34 + 6]) == want);
}

TEST_CASE("on_unknown: non-IP frames", "[runtime][on_unknown]") {
  Bytes arp = cat({eth(0x0806), payload(28)});
  SECTION("default drops them when addresses are protected") {
    Consumer c("ip.client : cryptopan(key=k)\n");
    Bytes f = arp;
    CHECK(c.run(f) == Verdict::Drop);
    CHECK(c.c.unknown_drop == 1);
  }
  SECTION("default keeps them otherwise") {
    Consumer c("eth.src : zero()\npayload : cut()\n");
    Bytes f = arp;
    CHECK(c.run(f) == Verdict::Forward);
    CHECK(f.size() == arp.size());
    CHECK(c.c.unknown_keep == 1);
  }
  SECTION("cut leaves the L2 header") {
    Consumer c("on_unknown = cut\nip.client : cryptopan(key=k)\n");
    Bytes f = cat({eth(0x0806, {{0x8100, 5}}), payload(28)});
    CHECK(c.run(f) == Verdict::Forward);
    CHECK(f.size() == 18);
    CHECK(c.wire == 18);
    CHECK(c.c.unknown_cut == 1);
  }
  SECTION("keep overrides the default") {
    Consumer c("on_unknown = keep\nip.client : cryptopan(key=k)\n");
    Bytes f = arp;
    CHECK(c.run(f) == Verdict::Forward);
    CHECK(f == arp);
  }
}

namespace {
// Inner TCP from a subscriber to a server, carried in GTP-U over UDP with
// its checksum in use (ipv4() fills it), or in VXLAN.
Bytes inner_tcp(const char* src, const char* dst, size_t n = 40) {
  V4 h;
  h.src = v4(src), h.dst = v4(dst);
  return ipv4(h, cat({tcp_hdr(40000, 443), payload(n)}));
}
Bytes over_udp(uint16_t port, const Bytes& body) {
  V4 h;
  h.proto = 17, h.src = v4("100.64.0.7"), h.dst = v4("100.127.0.1");
  return cat({eth(0x0800), ipv4(h, cat({udp_hdr(port, port, uint16_t(8 + body.size())), body}))});
}
constexpr uint32_t kOuter = 14, kGtpInner = 14 + 20 + 8 + 8;
}  // namespace

TEST_CASE("a tunnelled packet gets the policy on its inner packet", "[runtime][tunnel]") {
  SECTION("inner addresses rewritten, outer kept (ip.server kept), every checksum right") {
    Consumer c("ip.client : cryptopan(key=k)\nip.server : keep()\n");
    Bytes f = over_udp(2152, gtpu(0x1234, inner_tcp("10.1.2.3", "203.0.113.9")));
    const Bytes orig = f;
    CHECK(c.run(f, meta()) == Verdict::Forward);
    REQUIRE(f.size() == orig.size());
    CHECK(c.c.tunnel_cut == 0);
    CHECK(a4(f, kGtpInner + 12) != "10.1.2.3");
    CHECK(a4(f, kGtpInner + 16) == "203.0.113.9");
    CHECK(a4(f, kOuter + 12) == "100.64.0.7");
    CHECK(a4(f, kOuter + 16) == "100.127.0.1");
    CHECK(get16(&f[kOuter + 20 + 6]) != 0);
    check_lengths_and_checksums(f, kOuter);
    check_lengths_and_checksums(f, kGtpInner);
  }
  SECTION("a Geneve option naming the carried packet's source by address takes its mapping") {
    // Google Cloud's endpoint ID option: a word, then the VM's address.
    Consumer c("ip.client : cryptopan(key=k)\nip.server : keep()\n");
    Bytes gnv = {0x05, 0x00, 0x08, 0x00, 0x00, 0x00, 0x0d, 0x00,  // 5 option words, IPv4, VNI 13
                 0x01, 0x32, 0x02, 0x04, 0x08, 0x00, 0x00, 0x0d,  // class 0x0132, type 2, 4 data words
                 10, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0};
    Bytes f = over_udp(6081, cat({gnv, inner_tcp("10.1.2.3", "203.0.113.9")}));
    const uint32_t opt = kOuter + 20 + 8 + 16, inner = kOuter + 20 + 8 + 28;
    CHECK(c.run(f, meta()) == Verdict::Forward);
    CHECK(a4(f, inner + 12) != "10.1.2.3");
    CHECK(a4(f, opt) == a4(f, inner + 12));
    CHECK(a4(f, inner + 16) == "203.0.113.9");
    CHECK(get16(&f[kOuter + 20 + 6]) != 0);
    check_lengths_and_checksums(f, kOuter);
    check_lengths_and_checksums(f, inner);
  }
  SECTION("a cut shrinks every layer: inner IP, outer IP, UDP, GTP-U") {
    Consumer c("ip.client : cryptopan(key=k)\npayload : cut()\n");
    Bytes f = over_udp(2152, gtpu(7, inner_tcp("10.1.2.3", "203.0.113.9", 100), true));
    const uint32_t inner = kGtpInner + 8;  // the extension words
    CHECK(c.run(f, meta()) == Verdict::Forward);
    REQUIRE(f.size() == inner + 40);
    CHECK(get16(&f[kOuter + 20 + 8 + 2]) == 8 + 40);  // GTP-U length: after the first 8 bytes
    check_lengths_and_checksums(f, kOuter);
    check_lengths_and_checksums(f, inner);
  }
  SECTION("outer addresses take ip.server's action; zanon's fallback") {
    zanon::Config zc;
    zc.max_values = 1024;
    zanon::Store zs(zc);
    Consumer c("ip.client : cryptopan(key=k)\nip.server : zanon(z=5, dt=1h, fallback=prefix(16))\n", &zs);
    FlowState fs;
    PacketMeta m = meta();
    m.flow = &fs;
    m.flow_first = true;
    Bytes f = over_udp(4789, vxlan(42, cat({eth(0x0800), inner_tcp("10.1.2.3", "203.0.113.9")})));
    CHECK(c.run(f, m) == Verdict::Forward);
    CHECK(a4(f, kOuter + 12) == "100.64.0.0");
    CHECK(a4(f, kOuter + 16) == "100.127.0.0");
    check_lengths_and_checksums(f, kOuter);
    check_lengths_and_checksums(f, kOuter + 20 + 8 + 8 + 14);
  }
  SECTION("a rule for tunnel.addr; identifiers by rule") {
    Consumer c("tunnel.addr : zero()\ngtp.teid : hash(key=k)\nip.client : keep()\n");
    Bytes f = over_udp(2152, gtpu(0x01020304, inner_tcp("10.1.2.3", "203.0.113.9")));
    CHECK(c.run(f, meta()) == Verdict::Forward);
    CHECK(a4(f, kOuter + 12) == "0.0.0.0");
    CHECK(get16(&f[kOuter + 28 + 4]) != 0x0102);
    CHECK(a4(f, kGtpInner + 12) == "10.1.2.3");
    check_lengths_and_checksums(f, kOuter);
  }
  SECTION("conditions see the inner packet, and `tunnel`/`gtp`") {
    Consumer c("payload : cut() when proto in { gtp }\npayload : zero() when proto in { tunnel } and proto in { tcp }\n");
    Bytes g = over_udp(2152, gtpu(1, inner_tcp("10.1.2.3", "203.0.113.9")));
    const size_t gsize = g.size();
    CHECK(c.run(g, meta()) == Verdict::Forward);
    CHECK(g.size() == gsize - 40);
    check_lengths_and_checksums(g, kOuter);
    Bytes v = over_udp(4789, vxlan(3, cat({eth(0x0800), inner_tcp("10.1.2.3", "203.0.113.9")})));
    const size_t vsize = v.size();
    CHECK(c.run(v, meta()) == Verdict::Forward);
    REQUIRE(v.size() == vsize);
    CHECK(v[vsize - 1] == 0);
    check_lengths_and_checksums(v, kOuter);
    Bytes plain = cat({eth(0x0800), inner_tcp("10.1.2.3", "203.0.113.9")});
    const Bytes before = plain;
    CHECK(c.run(plain, meta()) == Verdict::Forward);
    CHECK(plain == before);
  }
  SECTION("an outer UDP checksum that was wrong stays wrong; 0 stays 0") {
    Consumer c("ip.client : cryptopan(key=k)\n");
    Bytes f = over_udp(2152, gtpu(1, inner_tcp("10.1.2.3", "203.0.113.9")));
    const uint16_t good = get16(&f[kOuter + 26]);
    set16(&f[kOuter + 26], good ^ 0x0101);
    Bytes g = f;
    CHECK(c.run(g, meta()) == Verdict::Forward);
    Bytes ref = over_udp(2152, gtpu(1, inner_tcp("10.1.2.3", "203.0.113.9")));
    CHECK(c.run(ref, meta()) == Verdict::Forward);
    CHECK(get16(&g[kOuter + 26]) == (get16(&ref[kOuter + 26]) ^ 0x0101));
    set16(&f[kOuter + 26], 0);
    CHECK(c.run(f, meta()) == Verdict::Forward);
    CHECK(get16(&f[kOuter + 26]) == 0);
  }
  SECTION("the inner packet's names: a DNS query in VXLAN is rewritten") {
    Consumer c("dns.qname : redact()\n");
    V4 h;
    h.proto = 17;
    const Bytes q = dns_query_secret();
    Bytes in = cat({eth(0x0800), ipv4(h, cat({udp_hdr(5353, 53, uint16_t(8 + q.size())), q}))});
    Bytes f = over_udp(4789, vxlan(9, in));
    CHECK(run_parsed(c, f) == Verdict::Forward);
    const std::string s(f.begin(), f.end());
    CHECK(s.find("secret") == std::string::npos);
    check_lengths_and_checksums(f, kOuter);
  }
}

TEST_CASE("contents the policy cannot see into are removed when addresses are protected", "[runtime]") {
  Consumer c("ip.src, ip.dst : cryptopan(key=k)\n");
  SECTION("GRE tunnel payload") {
    V4 h;
    h.proto = 47;
    Bytes f = cat({eth(0x0800), ipv4(h, payload(60))});
    c.run(f);
    CHECK(f.size() == 34);
    CHECK(c.c.tunnel_cut == 1);
    check_lengths_and_checksums(f, 14);
  }
  SECTION("UDP to VXLAN's port without a VXLAN header") {
    // Not a tunnel (the flags byte is not VXLAN's): plain UDP, its payload
    // kept as the policy says, its addresses rewritten. (A datagram with a
    // VXLAN header whose inner frame is not IP is dropped as not IP.)
    V4 h;
    h.proto = 17;
    Bytes f = cat({eth(0x0800), ipv4(h, cat({udp_hdr(1234, 4789, 8 + 50), payload(50)}))});
    c.run(f);
    CHECK(f.size() == 92);
    check_lengths_and_checksums(f, 14);
  }
  SECTION("the quoted header of an ICMP error gets the flow's mapping") {
    // A router (not in the flow) tells 192.0.2.1 that its datagram to
    // 203.0.113.9 expired: the quoted source is the outer destination and
    // must read as its rewritten value; the quoted destination appears
    // nowhere else and takes the outer source's rule (Crypto-PAn maps any
    // address alone), as it would as a packet's source. The packet stays
    // whole and valid.
    V4 h;
    h.proto = 1;
    h.src = v4("198.51.100.2");
    h.dst = v4("192.0.2.1");
    V4 inner;
    inner.proto = 17;
    inner.src = v4("192.0.2.1");
    inner.dst = v4("203.0.113.9");
    Bytes f = cat({eth(0x0800), ipv4(h, cat({icmp_hdr(11, 0, 0, 0), ipv4(inner, udp_hdr(1, 2, 8))}))});
    const size_t before = f.size();
    c.run(f);
    CHECK(f.size() == before);
    CHECK(c.c.icmp_quote_cut == 0);
    const uint8_t* outer_dst = f.data() + 14 + 16;
    const uint8_t* q = f.data() + 14 + 20 + 8;
    CHECK(std::equal(q + 12, q + 16, outer_dst));
    CHECK(std::memcmp(q + 12, inner.src.data(), 4) != 0);
    Bytes g = udp4("203.0.113.9", "192.0.2.1");
    c.run(g);
    CHECK(std::equal(q + 16, q + 20, g.data() + 14 + 12));
    CHECK(std::memcmp(q + 16, inner.dst.data(), 4) != 0);
    check_lengths_and_checksums(f, 14);
  }
  SECTION("IPv6 routing header with addresses: dropped") {
    V6 h;
    h.nh = 43;
    Bytes f = cat({eth(0x86dd), ipv6(h, v6ext(17, 3, 0), 17, udp_hdr(1, 2, 8))});
    CHECK(c.run(f) == Verdict::Drop);
  }
}

TEST_CASE("an ICMP error's quote gives each address the rule of its role in its flow", "[runtime]") {
  // A router inside `clients` redirects a user's packet to a kept server:
  // the server stays as its flow's headers keep it (not the pseudonym the
  // router's position takes), and a user's address quoted as the far end
  // takes the pseudonym its own packets give it. The redirect's gateway
  // (192.168.1.42, a host of the users' link) is a user's address too.
  Consumer c("clients = { 192.168.0.0/16 }\nip.client : cryptopan(key=k)\nip.server : keep()\n");
  auto quote = [](const char* router, const char* to, const char* qsrc, const char* qdst) {
    V4 h;
    h.proto = 1;
    h.src = v4(router);
    h.dst = v4(to);
    V4 inner;
    inner.proto = 17;
    inner.src = v4(qsrc);
    inner.dst = v4(qdst);
    return cat({eth(0x0800), ipv4(h, cat({icmp_hdr(5, 1, 0xc0a8, 0x012a), ipv4(inner, udp_hdr(40000, 53, 8))}))});
  };
  const size_t q = 14 + 20 + 8;
  Bytes f = quote("192.168.1.1", "192.168.1.20", "192.168.1.20", "8.8.8.8");
  const Bytes in = f;
  CHECK(c.run(f, meta()) == Verdict::Forward);
  REQUIRE(f.size() == in.size());
  CHECK(std::equal(f.begin() + q + 12, f.begin() + q + 16, f.begin() + 14 + 16));  // the packet's own
  CHECK(std::equal(f.begin() + q + 16, f.begin() + q + 20, in.begin() + q + 16));  // the server, kept
  check_lengths_and_checksums(f, 14);
  Bytes gw = udp4("192.168.1.42", "8.8.8.8");
  CHECK(c.run(gw, meta()) == Verdict::Forward);
  CHECK(std::equal(f.begin() + 14 + 20 + 4, f.begin() + q, gw.begin() + 14 + 12));
  CHECK(std::memcmp(f.data() + 14 + 20 + 4, v4("192.168.1.42").data(), 4) != 0);
  // A router outside `clients` tells a server its reply to a user went astray.
  Bytes g = quote("203.0.113.1", "8.8.8.8", "8.8.8.8", "192.168.9.9");
  CHECK(c.run(g, meta()) == Verdict::Forward);
  Bytes u = udp4("192.168.9.9", "8.8.8.8");
  CHECK(c.run(u, meta()) == Verdict::Forward);
  CHECK(std::equal(g.begin() + q + 16, g.begin() + q + 20, u.begin() + 14 + 12));
  CHECK(std::memcmp(g.data() + q + 16, v4("192.168.9.9").data(), 4) != 0);
  check_lengths_and_checksums(g, 14);
  // Neither end of the quoted datagram inside `clients`: nothing in the
  // error tells the far end's role, so it takes the client's rule.
  Bytes h = quote("203.0.113.1", "198.51.100.7", "198.51.100.7", "203.0.113.50");
  CHECK(c.run(h, meta()) == Verdict::Forward);
  CHECK(std::memcmp(h.data() + q + 16, v4("203.0.113.50").data(), 4) != 0);
  check_lengths_and_checksums(h, 14);
}

TEST_CASE("identity() and protects_addresses()", "[runtime]") {
  CHECK(Consumer("eth.src, eth.dst : keep()\nip.src, ip.dst : keep()\npayload : keep()\n").prog->identity());
  CHECK(Consumer("ip.client : keep()\n").prog->identity());
  CHECK_FALSE(Consumer("payload : cut()\n").prog->identity());
  CHECK_FALSE(Consumer("eth.src : timestamp()\n").prog->identity());
  CHECK_FALSE(Consumer("on_unknown = drop\nip.src : keep()\n").prog->identity());
  Consumer cp("ip.client : cryptopan(key=k)\n");
  CHECK_FALSE(cp.prog->identity());
  CHECK(cp.prog->protects_addresses());
  CHECK_FALSE(Consumer("eth.src : zero()\n").prog->protects_addresses());

  // An identity consumer forwards every frame byte for byte.
  Consumer id("ip.src, ip.dst : keep()\n");
  V4 h;
  h.tot_len = 900;  // malformed
  for (Bytes f : {udp4("192.0.2.1", "192.0.2.2"), cat({eth(0x0806), payload(28)}),
                  cat({eth(0x0800), ipv4(h, tcp_hdr(1, 2))})}) {
    Bytes g = f;
    CHECK(id.run(g) == Verdict::Forward);
    CHECK(g == f);
  }
}

TEST_CASE("a ChangeCipherSpec record longer than the segment is not followed past it", "[runtime][l7]") {
  // Found by fuzz_packet: the record-skipping loop ran past the payload when
  // a ChangeCipherSpec record announced more bytes than the segment holds.
  register_builtin_plugins();
  V4 h;
  h.proto = 6;
  Bytes payload = {0x14, 0x03, 0x03, 0x00, 0x40, 0x01, 0x14, 0x03, 0x03};
  Bytes f = cat({eth(0x0800), ipv4(h, cat({tcp_hdr(40000, 443), payload}))});
  Decoded d;
  decode(f.data(), uint32_t(f.size()), uint32_t(f.size()), d);
  REQUIRE(d.status == DecodeStatus::Ok);
  L7Parse parse;
  FlowState flow;
  PacketMeta m;
  m.flow = &flow;
  m.orig = f.data();
  m.initiator_is_src = true;
  parse.reset(1);
  analyze_l7(f.data(), d, m, parse);
  CHECK(m.app == plugin_app("tls"));
  CHECK(m.l7 == L7State::None);  // no ClientHello in this segment
}

TEST_CASE("content probes name the application from a stream's first bytes, on any port", "[runtime][l7][probes]") {
  register_builtin_plugins();  // plugins contribute probes (TLS's handshake record)
  const ContentProbes& cp = content_probes();
  L7Parse P;  // owns a probe scratch
  auto classify = [&](const std::string& s) {
    std::vector<uint8_t> b(s.begin(), s.end());
    b.resize(b.size() + 64);  // readable slack, as mbufs have (vectorscan#322)
    return cp.classify(b.data(), uint32_t(s.size()), P.probe_scratch);
  };
  CHECK(classify(std::string("\x16\x03\x01\x02\x00\x01", 6)) == App(plugin_app("tls")));
  CHECK(classify(std::string("\x14\x03\x03\x00\x01\x01\x16\x03\x03\x00\x10", 11)) == App(plugin_app("tls")));
  CHECK(classify(std::string("\x17\x03\x03\x00\x10", 5)) == App::Unknown);  // application data: no hello here
  CHECK(classify("GET ") == App(plugin_app("http")));                                      // the line continues later
  CHECK(classify("SUBSCRIBE /upnp/event HTTP/1.1\r\nHOST: x\r\n") == App(plugin_app("http")));
  CHECK(classify("PROPFIND /dav/ HTTP/1.1\nHost: x\n") == App(plugin_app("http")));
  CHECK(classify("HTTP/1.1 200 OK\r\n") == App(plugin_app("http")));
  CHECK(classify("SSH-2.0-OpenSSH_9.2\r\n") == App::Other);
  CHECK(classify("get / http/1.1\r\n") == App::Unknown);     // methods are case-sensitive (RFC 9110 9.1)
  CHECK(classify("XGET / HTTP/1.1") == App::Unknown);        // no line end yet, not a known method
  CHECK(classify(" GET / HTTP/1.1\r\n") == App::Unknown);    // anchored at the stream's start
  CHECK(classify("") == App::Unknown);
}

TEST_CASE("QUIC Initial: the SNI is rewritten and re-encrypted, conditions see it, checksums hold", "[runtime][l7][quic]") {
  register_builtin_plugins();
  quic::Crypto qc;
  const auto hello = l7test::client_hello_body(0x0303, {l7test::sni_ext({"quic.Example.org"})});
  const auto pkt = quictest::initial(qc, quic::kVersion1, {1, 2, 3, 4, 5, 6, 7, 8}, 0,
                                     quictest::crypto_frame(0, hello, 0, hello.size()), 1162);
  V4 h;
  h.proto = 17;
  const Bytes f = cat({eth(0x0800), ipv4(h, cat({udp_hdr(50000, 443, uint16_t(8 + pkt.size())), pkt}))});
  // Runs one consumer on a copy: the packet's analysis first, as the engine does.
  auto through = [&](Consumer& c, L7Parse& parse, FlowState& flow, uint64_t id) {
    Decoded d;
    decode(f.data(), uint32_t(f.size()), uint32_t(f.size()), d);
    PacketMeta m = meta();
    m.flow = &flow;
    m.orig = f.data();
    parse.reset(id);
    analyze_l7(f.data(), d, m, parse);
    CHECK(m.app == plugin_app("quic"));
    CHECK(m.l7 == L7State::Parsed);
    Bytes g = f;
    CHECK(c.run(g, m) == Verdict::Forward);
    return g;
  };
  // The SNI as the output's Initial decrypts to (fresh state: a monitor).
  auto sni_of = [](const Bytes& g) {
    quic::Crypto c;
    auto dg = std::make_unique<quic::Datagram>();
    quic::FlowState st;
    const size_t at = 14 + 20 + 8;
    REQUIRE(quic::analyze(g.data() + at, g.size() - at, 0, 1, c, st, *dg) == quic::Status::Located);
    return std::string(dg->name_text(0));
  };
  L7Parse parse;
  FlowState flow;
  Consumer hide("tls.sni : redact()\n");
  Bytes out = through(hide, parse, flow, 1);
  check_lengths_and_checksums(out, 14);
  CHECK(out.size() == f.size());
  CHECK(sni_of(out) == "xxxx.xxxxxxx.xxx");
  CHECK(hide.c.l7_cut == 0);
  // keep(), and a condition that does not hold: the bytes are the input's.
  Consumer keep("tls.sni : keep()\n");
  CHECK(through(keep, parse, flow, 2) == f);
  Consumer other("tls.sni : redact() when tls.sni == \"other.example.org\"\n");
  CHECK(through(other, parse, flow, 3) == f);
  Consumer match("tls.sni : redact() when tls.sni == \"quic.example.org\"\n");
  Bytes m2 = through(match, parse, flow, 4);
  check_lengths_and_checksums(m2, 14);
  CHECK(sni_of(m2) == "xxxx.xxxxxxx.xxx");
  // An unknown version fails closed for the consumer that protects the name.
  Bytes bad = f;
  bad[14 + 20 + 8 + 1] = 0x51;  // version 0x51000001: no Initial keys
  // ... with its UDP checksum right (a wrong one would stay wrong through the cut).
  set16(&bad[14 + 20 + 6], ref_l4_checksum(&bad[14 + 12], &bad[14 + 16], false, 17, &bad[34], bad.size() - 34, 6, true));
  Decoded d;
  decode(bad.data(), uint32_t(bad.size()), uint32_t(bad.size()), d);
  PacketMeta m = meta();
  FlowState fl2;
  m.flow = &fl2;
  m.orig = bad.data();
  parse.reset(5);
  analyze_l7(bad.data(), d, m, parse);
  CHECK(m.l7 == L7State::Malformed);
  Bytes g = bad;
  CHECK(hide.run(g, m) == Verdict::Forward);
  CHECK(g.size() == 14 + 20 + 8u);  // payload cut
  CHECK(hide.c.l7_cut == 1);
  check_lengths_and_checksums(g, 14);
}

// An L4 checksum wrong in the input stays wrong by as much where a cut or a
// snap recomputes it (evidence an IDS looks for); a right one stays right.
TEST_CASE("a wrong L4 checksum stays wrong by as much through cut() and snap()", "[runtime][checksum]") {
  // A snapped record is shorter than its lengths say: what it left out
  // counts as the zeros the checksum was made over.
  auto err = [](Bytes f, uint32_t l4, uint32_t co, bool is6) {
    f.resize(14 + (is6 ? 40u + get16(&f[18]) : uint32_t(get16(&f[16]))), 0);
    const uint8_t* ip = &f[14];
    const uint8_t proto = is6 ? ip[6] : ip[9];
    const uint32_t len = (is6 ? 40u + get16(ip + 4) : uint32_t(get16(ip + 2))) - (l4 - 14);
    const uint16_t want = ref_l4_checksum(ip + (is6 ? 8 : 12), ip + (is6 ? 24 : 16), is6, proto, &f[l4], len, co, true);
    return uint16_t((get16(&f[l4 + co]) + 0xffff - want) % 0xffff);  // ones' complement difference
  };
  // Header rules only take the header kernel (its cut may rewrite a copy of
  // the headers alone), an application field the general path.
  for (const char* rule : {"payload : cut()\n", "http.user_agent : redact()\npayload : cut()\n", "payload : snap()\n"}) {
    Consumer c(std::string("ip.client : cryptopan(key=k)\n") + rule);
    for (bool is6 : {false, true})
      for (uint8_t proto : {uint8_t(6), uint8_t(17)}) {
        INFO(rule << (is6 ? " IPv6 " : " IPv4 ") << int(proto));
        const Bytes l4b = proto == 6 ? cat({tcp_hdr(40000, 80, 0x18, 1), payload(101)}) : cat({udp_hdr(40000, 9999, 8 + 101), payload(101)});
        V4 h4;
        h4.proto = proto;
        const Bytes good = is6 ? cat({eth(0x86dd), ipv6(V6{}, {}, proto, l4b)}) : cat({eth(0x0800), ipv4(h4, l4b)});
        const uint32_t l4 = is6 ? 54 : 34, co = proto == 6 ? 16 : 6;
        Bytes bad = good;
        set16(&bad[l4 + co], uint16_t(get16(&bad[l4 + co]) ^ 0x1234));
        const uint16_t in_err = err(bad, l4, co, is6), good_err = err(good, l4, co, is6);
        REQUIRE(in_err != good_err);
        Bytes g = good;
        c.run(g);
        c.run(bad);
        // The cut took the payload (the snap keeps the record's length).
        const uint32_t hl = l4 + (proto == 6 ? 24u : 8u);
        if (std::string(rule).find("cut") != std::string::npos) CHECK(g.size() == hl);
        else CHECK(g.size() < good.size());
        CHECK(err(g, l4, co, is6) == good_err);
        CHECK(err(bad, l4, co, is6) == in_err);
      }
  }
}

// A host capturing what it sends sees transmit offload at work: each TCP
// and UDP checksum holds the pseudo-header's sum alone (not complemented),
// which the NIC completes. Rewritten addresses move that sum as a sum; a
// cut's new length too; payload rewrites do not touch it. Each header-only
// policy runs through its kernel, the generic header path and the general
// path; a right checksum stays right and a wrong one wrong by as much.
TEST_CASE("a transmit-offload partial checksum reads as the new pseudo-header's after any rewrite", "[runtime][checksum]") {
  struct Seg {
    uint32_t l4, co, len;
    bool is6;
    uint8_t proto;
  };
  auto seg = [](const Bytes& f) {
    const uint8_t* ip = &f[14];
    Seg s;
    s.is6 = (ip[0] >> 4) == 6;
    s.proto = s.is6 ? ip[6] : ip[9];
    s.l4 = s.is6 ? 54 : 14 + (ip[0] & 15) * 4u;
    s.co = s.proto == 6 ? 16 : 6;
    s.len = (s.is6 ? 54u + get16(ip + 4) : 14u + get16(ip + 2)) - s.l4;
    return s;
  };
  auto pseudo = [&](const Bytes& f) {
    const Seg s = seg(f);
    const uint8_t* ip = &f[14];
    return uint16_t(ref_sum(ip + (s.is6 ? 8 : 12), s.is6 ? 32 : 8, s.proto + (s.len & 0xffff) + (s.len >> 16)));
  };
  auto right = [&](const Bytes& f) {
    const Seg s = seg(f);
    const uint8_t* ip = &f[14];
    return ref_l4_checksum(ip + (s.is6 ? 8 : 12), ip + (s.is6 ? 24 : 16), s.is6, s.proto, &f[s.l4], s.len, s.co);
  };
  auto ck = [&](const Bytes& f) { const Seg s = seg(f); return get16(&f[s.l4 + s.co]); };
  auto err = [&](const Bytes& f) { return uint16_t((ck(f) + 0xffff - right(f)) % 0xffff); };
  const char* policies[] = {
      "ip.client : cryptopan(key=k)\nip.server : prefix(24)\n",
      "ip.src, ip.dst : cryptopan(key=k)\npayload : zero()\n",
      "ip.client : prefix(16)\nip.server : cryptopan(key=k)\npayload : cut()\n",
      "ip.src : prefix(8)\npayload : snap()\n",
      "ip.client : cryptopan(key=k)\nip.server : keep()\npayload : redact()\n",
  };
  uint64_t partials = 0;
  for (const char* pol : policies)
    for (int path = 0; path < 3; ++path) {  // the kernel, process_hdr, the general path
      Consumer c(pol);
      c.inst->set_header_fast_path(path < 2, path == 0);
      for (bool is6 : {false, true})
        for (uint8_t proto : {uint8_t(6), uint8_t(17)})
          for (int kind = 0; kind < 3; ++kind) {  // partial, right, wrong
            INFO(pol << "path " << path << (is6 ? " IPv6 " : " IPv4 ") << int(proto) << " kind " << kind);
            const Bytes l4b = proto == 6 ? cat({tcp_hdr(40000, 80, 0x18, 1), payload(101)})
                                         : cat({udp_hdr(40000, 9999, 8 + 101), payload(101)});
            V4 h4;
            h4.proto = proto;
            V6 h6;
            Bytes in = is6 ? cat({eth(0x86dd), ipv6(h6, {}, proto, l4b)}) : cat({eth(0x0800), ipv4(h4, l4b)});
            const Seg s = seg(in);
            if (kind == 0) set16(&in[s.l4 + s.co], pseudo(in));
            if (kind == 2) set16(&in[s.l4 + s.co], ck(in) ^ 0x1234);
            REQUIRE((kind == 1) == (ck(in) == right(in)));
            Bytes out = in;
            REQUIRE(c.run(out, meta(true)) == Verdict::Forward);
            REQUIRE(out.size() >= s.l4 + s.co + 2);
            REQUIRE(std::memcmp(&out[is6 ? 22 : 26], &in[is6 ? 22 : 26], is6 ? 32 : 8) != 0);
            if (kind == 0) {
              CHECK(ck(out) == pseudo(out));
              partials += ck(out) == pseudo(out) && ck(out) != right(out);
            } else if (kind == 1) {
              CHECK(ck(out) == right(out));
            } else {
              CHECK(err(out) == err(in));
            }
          }
    }
  CHECK(partials == std::size(policies) * 3 * 4);
}

// The same through the DNS datagram shortcut and the general steps it
// stands for: a name rewrite changes the payload, which a partial does not
// cover.
TEST_CASE("a transmit-offload partial checksum is left as it is by a name rewrite", "[runtime][checksum]") {
  const Bytes q = dns_query_secret();
  V4 h;
  h.proto = 17;
  const Bytes good = cat({eth(0x0800), ipv4(h, cat({udp_hdr(5353, 53, uint16_t(8 + q.size())), q}))});
  const uint32_t ulen = uint32_t(8 + q.size());
  const uint16_t partial = uint16_t(ref_sum(&good[26], 8, 17 + ulen));
  for (bool shortcut : {true, false})
    for (bool offloaded : {true, false}) {
      INFO((shortcut ? "shortcut " : "general steps ") << (offloaded ? "partial" : "right"));
      Consumer c("dns.qname : redact()\n");
      c.inst->set_shortcut_path(shortcut);
      Bytes f = good;
      if (offloaded) set16(&f[40], partial);
      REQUIRE(run_parsed(c, f) == Verdict::Forward);
      REQUIRE(std::string(f.begin(), f.end()).find("secret") == std::string::npos);
      if (offloaded) CHECK(get16(&f[40]) == partial);
      else check_lengths_and_checksums(f, 14);
    }
}
