#include <catch2/catch.hpp>

#include <set>

#include "catalog.hpp"
#include "protos.hpp"
#include "rng.hpp"
#include "wire.hpp"

using namespace amon::gen;

TEST_CASE("splitmix64 stream is fixed by its definition", "[gen]") {
  // Reference values of splitmix64 seeded with 0 (as in Vigna's splitmix64.c):
  // if these move, every generated file changes.
  Rng r(0);
  CHECK(r.next() == 0xe220a8397b1dcdafULL);
  CHECK(r.next() == 0x6e789e6aa1b965f4ULL);
  CHECK(r.next() == 0x06c45d188009454fULL);
}

TEST_CASE("bounded draws stay in range and reach both ends", "[gen]") {
  Rng r(42);
  std::set<uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t x = r.range(3, 9);
    REQUIRE(x >= 3);
    REQUIRE(x <= 9);
    seen.insert(x);
  }
  CHECK(seen.size() == 7);
  CHECK(r.below(1) == 0);
}

TEST_CASE("Zipf sampler favours low ranks like 1/k", "[gen]") {
  Zipf z(1000, 1.0);
  Rng r(7);
  std::vector<unsigned> hits(1000);
  const int n = 200000;
  for (int i = 0; i < n; ++i) ++hits.at(z.sample(r));
  // P(rank 1) = 1/H_1000 = 0.1336, P(rank 2) = half of that.
  CHECK(hits[0] / double(n) == Approx(0.1336).margin(0.005));
  CHECK(hits[1] / double(n) == Approx(0.0668).margin(0.004));
  CHECK(z.cdf(999) == 1.0);
  Zipf flat(10, 0.0);
  CHECK(flat.cdf(4) == Approx(0.5));
}

TEST_CASE("RFC 1071 checksum of a known IPv4 header", "[gen]") {
  // Header from RFC 1071 discussions / Wikipedia's IPv4 checksum example: 0xb861.
  const uint8_t h[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                         0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  CHECK(static_cast<uint16_t>(~csum_fold(csum_add(h, 20, 0))) == 0xb861);
}

TEST_CASE("emitted frames verify: IPv4 header and UDP checksums sum to 0xffff", "[gen]") {
  Path p;
  p.cip[0] = 10, p.cip[3] = 7;
  p.sip[0] = 192, p.sip[2] = 2, p.sip[3] = 53;
  FlowBuf fb;
  const Bytes q = dns_query(0x1234, "www.example.com", kTypeA, true);
  Bytes seg(8 + q.size());
  seg[0] = 0xc0, seg[1] = 0x00, seg[3] = 53, seg[5] = static_cast<uint8_t>(seg.size());
  std::copy(q.begin(), q.end(), seg.begin() + 8);
  emit(fb, 0, p, true, kUdp, seg.data(), seg.size());
  REQUIRE(fb.pkts.size() == 1);
  const uint8_t* ip = fb.bytes.data() + 14;
  CHECK(csum_fold(csum_add(ip, 20, 0)) == 0xffff);
  uint32_t ps = csum_add(ip + 12, 8, 0) + kUdp + static_cast<uint32_t>(seg.size());
  CHECK(csum_fold(csum_add(ip + 20, seg.size(), ps)) == 0xffff);
}

TEST_CASE("ClientHello carries the SNI at the offsets the structure says", "[gen]") {
  Rng r(3);
  for (auto prof : {TlsProfile::Chrome, TlsProfile::Firefox, TlsProfile::Safari, TlsProfile::Legacy12, TlsProfile::Curl}) {
    const TlsHello h = tls_client_hello(r, "api.example.co.uk", prof);
    const Bytes& b = h.record;
    REQUIRE(b.size() > 60);
    CHECK(b[0] == 22);
    CHECK(size_t(b[3] << 8 | b[4]) == b.size() - 5);
    CHECK(b[5] == 1);
    CHECK(size_t(b[6] << 16 | b[7] << 8 | b[8]) == b.size() - 9);
    size_t o = 9 + 2 + 32;
    o += 1 + b[o];
    o += 2 + (b[o] << 8 | b[o + 1]);
    o += 1 + b[o];
    const size_t ext_end = o + 2 + (b[o] << 8 | b[o + 1]);
    CHECK(ext_end == b.size());
    o += 2;
    bool found = false;
    while (o + 4 <= ext_end) {
      const unsigned type = b[o] << 8 | b[o + 1], len = b[o + 2] << 8 | b[o + 3];
      if (type == 0) {
        CHECK(std::string(b.begin() + o + 9, b.begin() + o + 4 + len) == "api.example.co.uk");
        found = true;
      }
      o += 4 + len;
    }
    CHECK(o == ext_end);
    CHECK(found);
  }
}

TEST_CASE("catalogue is a function of the seed", "[gen]") {
  Rng a(99), b(99);
  const auto x = make_services(a, 500), y = make_services(b, 500);
  REQUIRE(x.size() == 500);
  std::set<std::string> names;
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(x[i].fqdn == y[i].fqdn);
    names.insert(x[i].fqdn);
    CHECK(x[i].fqdn.ends_with(x[i].registrable));
  }
  CHECK(names.size() == 500);
}
