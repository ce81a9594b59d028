// The SCTP plugin: the parser on crafted packets (the addresses of INIT,
// INIT ACK and ASCONF parameters, those a State Cookie copies, the
// packet's own addresses in a COOKIE ECHO; malformed lengths and host
// names refused), the CRC32c against RFC 3720's vector, and the registry
// taking it as the plugin of IP protocol 132 (refusing a second one, ports
// on it, a pseudo-header checksum on UDP).
#include <catch2/catch.hpp>

#include <vector>

#include "amon_sctp.hpp"
#include "frames.h"
#include "registry.h"

using namespace amon;
using namespace amon_test;
namespace sp = amon::sctp_plugin;

namespace {

void pad(Bytes& b) {
  while (b.size() % 4) b.push_back(0);
}
Bytes tlv(uint16_t t, const Bytes& v) {
  Bytes b;
  put16(b, t), put16(b, uint16_t(4 + v.size()));
  b.insert(b.end(), v.begin(), v.end());
  pad(b);
  return b;
}
Bytes chunk(uint8_t t, const Bytes& v) {
  Bytes b{t, 0};
  put16(b, uint16_t(4 + v.size()));
  b.insert(b.end(), v.begin(), v.end());
  pad(b);
  return b;
}
const Bytes kHeader = {0x13, 0x88, 0x8e, 0x3c, 0, 0, 0x12, 0x34, 0, 0, 0, 0};
const Bytes kInitFixed = Bytes(16, 1);
const Bytes kA4 = {10, 9, 0, 2}, kSrc = {10, 9, 0, 1}, kDst = {198, 51, 100, 7};
const Bytes kA6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x18};

std::vector<std::pair<uint32_t, uint8_t>> spans(const Bytes& pkt, sp::Result want = sp::Result::Ok) {
  static sp::Parsed r;
  REQUIRE(sp::parse(pkt.data(), uint32_t(pkt.size()), kSrc.data(), kDst.data(), 4, r) == want);
  REQUIRE(spans_sound(r.addrs, uint32_t(pkt.size())));
  std::vector<std::pair<uint32_t, uint8_t>> v;
  for (unsigned i = 0; i < r.addrs.n; ++i) v.push_back({r.addrs.a[i].off, r.addrs.a[i].len});
  return v;
}

}  // namespace

TEST_CASE("sctp: INIT address parameters, IPv4 and IPv6") {
  const Bytes pkt = cat({kHeader, chunk(1, cat({kInitFixed, tlv(5, kA4), tlv(12, {0, 5}), tlv(6, kA6)}))});
  const auto v = spans(pkt);
  REQUIRE(v.size() == 2);
  CHECK(v[0] == std::make_pair(uint32_t(12 + 20 + 4), uint8_t(4)));
  CHECK(Bytes(pkt.begin() + v[1].first, pkt.begin() + v[1].first + 16) == kA6);
}

TEST_CASE("sctp: INIT ACK's State Cookie and the COOKIE ECHO that returns it") {
  // A cookie copying the INIT's parameters and the peer's address (Linux's
  // and FreeBSD's do), at no particular alignment.
  const Bytes cookie = cat({Bytes(37, 0xaa), kSrc, Bytes(3, 0), tlv(5, kA4)});
  const Bytes ack = cat({kHeader, chunk(2, cat({kInitFixed, tlv(7, cookie)}))});
  const auto v = spans(ack);
  REQUIRE(v.size() == 2);
  CHECK(Bytes(ack.begin() + v[0].first, ack.begin() + v[0].first + 4) == kSrc);
  CHECK(Bytes(ack.begin() + v[1].first, ack.begin() + v[1].first + 4) == kA4);
  const Bytes echo = cat({kHeader, chunk(10, cookie)});
  CHECK(spans(echo).size() == 2);
}

TEST_CASE("sctp: a HEARTBEAT's information holding the path's address, as Linux's does") {
  const Bytes info = cat({{2, 0, 0x13, 0x88}, kDst, Bytes(20, 0)});
  const Bytes hb = cat({kHeader, chunk(4, tlv(1, info))});
  const auto v = spans(hb);
  REQUIRE(v.size() == 1);
  CHECK(Bytes(hb.begin() + v[0].first, hb.begin() + v[0].first + 4) == kDst);
}

TEST_CASE("sctp: ASCONF's own address and Add/Delete IP Address") {
  const Bytes add = cat({tlv(0xc001, cat({{0, 0, 0, 7}, tlv(5, kA4)})), tlv(0xc002, cat({{0, 0, 0, 8}, tlv(6, kA6)}))});
  const Bytes pkt = cat({kHeader, chunk(0xc1, cat({{0, 0, 0, 1}, tlv(5, kSrc), add}))});
  const auto v = spans(pkt);
  REQUIRE(v.size() == 3);
  CHECK(v[2].second == 16);
}

TEST_CASE("sctp: DATA carries no address; lengths past their container and host names are malformed") {
  CHECK(spans(cat({kHeader, chunk(0, Bytes(20, 7))})).empty());
  Bytes bad = cat({kHeader, chunk(1, cat({kInitFixed, tlv(5, kA4)}))});
  bad[12 + 20 + 3] = 12;  // the address parameter runs past the chunk
  spans(bad, sp::Result::Malformed);
  spans(cat({kHeader, chunk(1, cat({kInitFixed, tlv(11, {'h', 'o', 's', 't', 0})}))}), sp::Result::Malformed);
  spans(cat({kHeader, chunk(1, Bytes(8, 0))}), sp::Result::Malformed);  // an INIT shorter than its fixed part
  spans(Bytes(kHeader.begin(), kHeader.begin() + 8), sp::Result::Malformed);
}

TEST_CASE("sctp: a packet the capture cut inside DATA parses; inside an INIT it does not") {
  static sp::Parsed r;
  const Bytes data = cat({kHeader, chunk(0, Bytes(200, 7))});
  CHECK(sp::parse(data.data(), 60, nullptr, nullptr, 0, r, true) == sp::Result::Ok);
  CHECK(sp::parse(data.data(), 60, nullptr, nullptr, 0, r, false) == sp::Result::Malformed);
  const Bytes init = cat({kHeader, chunk(1, cat({kInitFixed, tlv(5, kA4), tlv(5, kSrc)}))});
  CHECK(sp::parse(init.data(), uint32_t(init.size() - 4), nullptr, nullptr, 0, r, true) == sp::Result::Malformed);
}

TEST_CASE("sctp: CRC32c") {
  // RFC 3720 B.4: 32 bytes of zeros.
  const Bytes zeros(32, 0);
  CHECK(sp::checksum(zeros.data(), 32) == 0x8a9136aau);
  // The checksum field itself is not summed.
  Bytes b = zeros;
  b[8] = b[9] = b[10] = b[11] = 0x5a;
  CHECK(sp::checksum(b.data(), 32) == 0x8a9136aau);
}

TEST_CASE("sctp: the registry takes it as IP protocol 132's plugin, one only") {
  const ProtocolPlugin& p = sp::protocol_plugin();
  Registry r;
  CHECK(plugin_problem(p, r).empty());
  r.add_protocol(p);
  CHECK(plugin_problem(p, r).find("132") != std::string::npos);
  ProtocolPlugin ported = p;
  ported.name = "sctp-ports";
  ported.ports[0] = 2905;
  Registry r2;
  CHECK(!plugin_problem(ported, r2).empty());
  ProtocolPlugin icmp = p;
  icmp.l4_proto = 1;
  CHECK(!plugin_problem(icmp, r2).empty());
  // The runtime keeps TCP's and UDP's checksums itself.
  ProtocolPlugin udp = p;
  udp.name = "sctp-udp", udp.l4_proto = 17, udp.pseudo_csum_v6 = 2;
  CHECK(plugin_problem(udp, r2).find("pseudo_csum_v6") != std::string::npos);
}
