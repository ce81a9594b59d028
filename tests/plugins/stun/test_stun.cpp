// The STUN/TURN plugins: the parser on its own, then registered as the
// product registers them and run through a consumer's policy on built
// frames (every address takes its role's rewrite, XOR-ed ones in clear and
// XOR-ed again, the FINGERPRINT computed again, the UDP checksum right, a
// malformed message failing closed), and their values as amon audit reads
// them (PayloadValues: the XOR-ed addresses in clear).
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <zlib.h>

#include "amon_stun.hpp"
#include "bytes.h"
#include "frames.h"
#include "l2l4.h"
#include "l7.h"
#include "policy.h"
#include "registry.h"
#include "plugin_consumer.h"
#include "runtime.h"
#include "values.h"

using namespace amon;
using namespace amon_test;
namespace sp = amon::stun_plugin;

namespace {

const Bytes kTxid = {0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae};

Bytes attr(uint16_t t, const Bytes& v) {
  Bytes b;
  put16(b, t), put16(b, uint16_t(v.size()));
  put(b, v);
  while (b.size() % 4) put8(b, 0);
  return b;
}
// An address attribute's value: family, port, address; XOR-ed as RFC 8489 14.2 says.
Bytes addr_value(const Bytes& a, uint16_t port, bool x) {
  Bytes key = {0x21, 0x12, 0xa4, 0x42};
  put(key, kTxid);
  Bytes b;
  put8(b, 0), put8(b, a.size() == 4 ? 1 : 2), put16(b, x ? uint16_t(port ^ 0x2112) : port);
  for (size_t i = 0; i < a.size(); ++i) put8(b, x ? uint8_t(a[i] ^ key[i]) : a[i]);
  return b;
}
Bytes text_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
Bytes arr(const std::array<uint8_t, 4>& a) { return Bytes(a.begin(), a.end()); }
Bytes arr(const std::array<uint8_t, 16>& a) { return Bytes(a.begin(), a.end()); }

// A message of `type` with these attributes, a FINGERPRINT last when asked.
Bytes message(uint16_t type, const Bytes& attrs, bool finger = true, bool cookie = true) {
  Bytes m;
  put16(m, type), put16(m, uint16_t(attrs.size() + (finger ? 8 : 0)));
  put32(m, cookie ? sp::kCookie : 0x01020304u);
  put(m, kTxid);
  put(m, attrs);
  if (finger) {
    const uint32_t c = uint32_t(crc32(0, m.data(), unsigned(m.size()))) ^ 0x5354554eu;
    Bytes v;
    put32(v, c);
    put(m, attr(0x8028, v));
  }
  return m;
}

const auto kClient = v4("198.51.100.7"), kServer = v4("192.0.2.10");
const auto kPeer = v6("2001:db8:77::5");

// A Binding success response from the server to the client: the client's
// mapped address (XOR-ed and plain), a peer's (XOR-ed IPv6), a USERNAME.
Bytes response() {
  return message(0x0101, cat({attr(0x0020, addr_value(arr(kClient), 50000, true)),
                              attr(0x0001, addr_value(arr(kClient), 50000, false)),
                              attr(0x0012, addr_value(arr(kPeer), 6000, true)), attr(0x0006, text_bytes("alice:example")),
                              attr(0x8022, text_bytes("test server"))}));
}

Bytes datagram(const Bytes& pl, uint16_t sport, uint16_t dport) {
  V4 h;
  h.proto = 17;
  h.src = kServer, h.dst = kClient;
  return cat({eth(0x0800), ipv4(h, cat({udp_hdr(sport, dport, uint16_t(8 + pl.size())), pl}))});
}
constexpr size_t kPayload = 14 + 20 + 8;

bool holds(const Bytes& f, const Bytes& s) { return std::search(f.begin(), f.end(), s.begin(), s.end()) != f.end(); }

void check_udp_checksum(const Bytes& f) {
  const uint8_t* ip = &f[14];
  CHECK(get16(&f[34 + 6]) == ref_l4_checksum(ip + 12, ip + 16, false, 17, &f[34], f.size() - 34, 6, true));
}

// The client (the frames' destination) started the flow.
struct Consumer : PluginConsumer {
  explicit Consumer(const std::string& src) : PluginConsumer(register_builtin_plugins, src, false) {}
};

// The address at `off` of the payload in clear (XOR-ed with the cookie and transaction ID when `x`).
Bytes clear_at(const Bytes& f, size_t off, size_t n, bool x) {
  Bytes b(f.begin() + long(kPayload + off), f.begin() + long(kPayload + off + n));
  if (x)
    for (size_t i = 0; i < n; ++i) b[i] ^= f[kPayload + 4 + i];
  return b;
}

}  // namespace

TEST_CASE("the STUN parser finds every address attribute and USERNAME", "[plugins][stun]") {
  const Bytes m = response();
  sp::Parsed r;
  REQUIRE(sp::parse(m.data(), uint32_t(m.size()), false, false, r) == sp::Result::Ok);
  REQUIRE(r.n_addr == 3);
  CHECK(r.addr[0].at.off == 20 + 8);
  CHECK(r.addr[0].at.len == 4);
  CHECK(r.addr[0].coded);
  CHECK(r.addr[0].key == 4);
  CHECK_FALSE(r.addr[1].coded);
  CHECK(r.addr[2].at.len == 16);
  REQUIRE(r.n_user == 1);
  CHECK(r.n_finger == 1);
  // Without the cookie: classic STUN only where the caller allows it (the
  // STUN port), and then no XOR-ed attribute.
  const Bytes classic = message(0x0101, attr(0x0001, addr_value(arr(kClient), 1, false)), false, false);
  CHECK(sp::parse(classic.data(), uint32_t(classic.size()), false, false, r) == sp::Result::NotStun);
  CHECK(sp::parse(classic.data(), uint32_t(classic.size()), false, true, r) == sp::Result::Ok);
  const Bytes classic_xor = message(0x0101, attr(0x0020, addr_value(arr(kClient), 1, true)), false, false);
  CHECK(sp::parse(classic_xor.data(), uint32_t(classic_xor.size()), false, true, r) == sp::Result::Malformed);
  // Malformed: an unknown family, an address of the wrong length, an
  // attribute past the message, a length that is not the datagram's.
  Bytes fam = addr_value(arr(kClient), 1, true);
  fam[1] = 3;
  Bytes longer = addr_value(arr(kClient), 1, true);
  put8(longer, 0);
  for (const Bytes& bad : {message(0x0101, attr(0x0020, fam)), message(0x0101, attr(0x0020, longer))}) {
    CHECK(sp::parse(bad.data(), uint32_t(bad.size()), false, false, r) == sp::Result::Malformed);
  }
  Bytes over = m;
  over[20 + 3] = 0x40;  // the first attribute's length runs past the message
  CHECK(sp::parse(over.data(), uint32_t(over.size()), false, false, r) == sp::Result::Malformed);
  Bytes shorter(m.begin(), m.end() - 4);
  CHECK(sp::parse(shorter.data(), uint32_t(shorter.size()), false, false, r) == sp::Result::Malformed);
  // A TCP segment: messages and ChannelData back to back; the last may continue.
  Bytes chan;
  put16(chan, 0x4001), put16(chan, 5), put(chan, payload(5)), put(chan, Bytes(3, 0));
  const Bytes seg = cat({m, chan, m});
  REQUIRE(sp::parse(seg.data(), uint32_t(seg.size()), true, false, r) == sp::Result::Ok);
  CHECK(r.n_addr == 6);
  CHECK(sp::parse(seg.data(), uint32_t(seg.size() - 10), true, false, r) == sp::Result::Incomplete);
}

// With a STUN rule (as rules/ids.amon) and with another application's rule
// only: a policy that protects addresses, parses applications and keeps
// payload parses STUN for its addresses (a header-only policy without
// `clients` keeps its header kernel instead).
TEST_CASE("STUN addresses take their role's rewrite on any port, in clear and XOR-ed", "[plugins][stun]") {
  const std::string src = GENERATE(std::string("ip.client : prefix(8)\nip.server : prefix(16, v6=32)\nstun.username : redact()\n"),
                                   std::string("ip.client : prefix(8)\nip.server : prefix(16, v6=32)\ndns.qname : redact()\n"));
  INFO(src);
  Consumer c(src);
  Bytes f = datagram(response(), 19302, 50000);  // Google's STUN port: known by the cookie
  const size_t size = f.size();
  REQUIRE(c.run(f) == Verdict::Forward);
  REQUIRE(f.size() == size);
  const Bytes dst(f.begin() + 30, f.begin() + 34);  // the client's header address, rewritten
  CHECK(dst == Bytes({198, 0, 0, 0}));
  CHECK(clear_at(f, 28, 4, true) == dst);   // XOR-MAPPED-ADDRESS
  CHECK(clear_at(f, 40, 4, false) == dst);  // MAPPED-ADDRESS
  // The peer is no address of this packet: ip.server's rule (no `clients`).
  const Bytes peer = clear_at(f, 52, 16, true);
  CHECK(Bytes(peer.begin(), peer.begin() + 4) == Bytes({0x20, 0x01, 0x0d, 0xb8}));
  CHECK(std::all_of(peer.begin() + 4, peer.end(), [](uint8_t b) { return b == 0; }));
  CHECK_FALSE(holds(f, arr(kClient)));
  CHECK_FALSE(holds(f, arr(kPeer)));
  // The FINGERPRINT verifies again; the UDP checksum is right.
  const size_t fp = f.size() - 8;
  const uint32_t want = uint32_t(crc32(0, &f[kPayload], unsigned(fp - kPayload))) ^ 0x5354554eu;
  CHECK(get16(&f[fp + 4]) == uint16_t(want >> 16));
  CHECK(get16(&f[fp + 6]) == uint16_t(want));
  check_udp_checksum(f);
}

TEST_CASE("a datagram without the cookie off the STUN port is no STUN", "[plugins][stun]") {
  Consumer c("ip.client : prefix(8)\nip.server : prefix(16)\nstun.username : redact()\n");
  // Another host's address (kPeer): the packet's own addresses in kept
  // payload are rewritten in any case (addr_text), STUN or not.
  Bytes f = datagram(message(0x0101, attr(0x0001, addr_value(arr(kPeer), 1, false)), false, false), 19302, 50000);
  REQUIRE(c.run(f) == Verdict::Forward);
  CHECK(holds(Bytes(f.begin() + long(kPayload), f.end()), arr(kPeer)));
}

TEST_CASE("a malformed STUN message fails closed where its fields are protected", "[plugins][stun]") {
  Consumer c("stun.username : redact()\nip.client : prefix(8)\non_error = cut\n");
  Bytes fam = addr_value(arr(kClient), 1, true);
  fam[1] = 3;
  Bytes f = datagram(message(0x0101, cat({attr(0x0020, fam), attr(0x0006, text_bytes("alice:example"))})), 3478,
                     50000);
  const Verdict v = c.run(f);
  CHECK((v == Verdict::Drop || !holds(f, text_bytes("alice"))));
  Bytes g = datagram(response(), 3478, 50000);
  REQUIRE(c.run(g) == Verdict::Forward);
  CHECK_FALSE(holds(g, text_bytes("alice")));
}

TEST_CASE("amon audit reads STUN's addresses in clear", "[plugins][stun]") {
  register_builtin_plugins();
  const Bytes f = datagram(response(), 19302, 50000);
  PayloadValues pv(PayloadValues::Datagrams::Recognised);
  std::vector<Bytes> seen;
  pv.read(17, f.data() + kPayload, uint32_t(f.size() - kPayload), 19302, 50000, false,
          [&](const ProtocolPlugin& p, const ProtoOcc& o) {
            if (std::string(p.name) != "stun" || !o.role) return;
            Bytes v(f.begin() + long(kPayload + o.off), f.begin() + long(kPayload + o.off + o.len));
            if (o.coded) xor_with(v.data(), f.data() + kPayload + o.key, o.len);
            seen.push_back(v);
          });
  REQUIRE(seen.size() == 3);
  CHECK(seen[0] == arr(kClient));
  CHECK(seen[1] == arr(kClient));
  CHECK(seen[2] == arr(kPeer));
}
