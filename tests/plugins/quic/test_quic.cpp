#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "amon_quic.hpp"
#include "l7_build.hpp"
#include "quic_build.hpp"

using namespace amon;
using namespace amon::quictest;
using quic::Status;

namespace {

// RFC 9001 A.2 / RFC 9369 A.2: the client Initial's frames (a CRYPTO frame
// holding a ClientHello for example.com), padded to 1162 bytes.
const char* kA2Frames =
    "060040f1010000ed0303ebf8fa56f12939b9584a3896472ec40bb863cfd3e868"
    "04fe3a47f06a2b69484c00000413011302010000c000000010000e00000b6578"
    "616d706c652e636f6dff01000100000a00080006001d00170018001000070005"
    "04616c706e000500050100000000003300260024001d00209370b2c9caa47fba"
    "baf4559fedba753de171fa71f50f1ce15d43e994ec74d748002b000302030400"
    "0d0010000e0403050306030203080408050806002d00020101001c0002400100"
    "3900320408ffffffffffffffff05048000ffff07048000ffff08011001048000"
    "75300901100f088394c8f03e51570806048000ffff";
const char* kDcid = "8394c8f03e515708";

std::string tohex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += d[p[i] >> 4], s += d[p[i] & 15];
  return s;
}

struct Ctx {
  quic::Crypto c;
  std::unique_ptr<quic::Datagram> d = std::make_unique<quic::Datagram>();
  quic::FlowState st;
  Status run(const Bytes& b, int dir = 0, uint64_t flow = 1) { return quic::analyze(b.data(), b.size(), dir, flow, c, st, *d); }
};

// Protects the A.2 frames as an unprotected header with packet number 2.
Bytes a2_packet(quic::Crypto& c, uint32_t version, const std::string& unprot_header) {
  const quic::VersionInfo* vi = quic::version_info(version);
  quic::Keys k{};
  Bytes dcid = hex(kDcid);
  REQUIRE(c.initial_keys(*vi, dcid.data(), dcid.size(), false, k));
  Bytes h = hex(unprot_header), pt = hex(kA2Frames);
  pt.resize(1162, 0);
  Bytes out(h);
  out.resize(h.size() + pt.size() + 16);
  REQUIRE(c.seal(k, 2, h.data(), h.size(), pt.data(), pt.size(), out.data() + h.size()));
  uint8_t mask[5];
  REQUIRE(c.hp_mask(k.hp, out.data() + 18 + 4, mask));
  out[0] ^= mask[0] & 0x0f;
  for (int i = 0; i < 4; ++i) out[18 + i] ^= mask[1 + i];
  return out;
}

// A ClientHello whose server_name comes after `before` bytes of another extension.
Bytes hello(const std::string& sni, size_t before = 0, size_t after = 0) {
  std::vector<l7test::Ext> ex;
  if (before) ex.push_back({0x11ec, Bytes(before, 0x42)});
  ex.push_back(l7test::sni_ext({sni}));
  if (after) ex.push_back({0x0015, Bytes(after, 0)});
  return l7test::client_hello_body(0x0303, ex);
}

}  // namespace

TEST_CASE("quic: RFC 9001 A.1 and RFC 9369 A.1 client Initial keys") {
  quic::Crypto c;
  Bytes dcid = hex(kDcid);
  uint8_t secret[32];
  quic::Keys k{};
  REQUIRE(c.initial_secret(*quic::version_info(1), dcid.data(), dcid.size(), false, secret));
  CHECK(tohex(secret, 32) == "c00cf151ca5be075ed0ebfb5c80323c42d6b7db67881289af4008f1f6c357aea");
  REQUIRE(c.initial_keys(*quic::version_info(1), dcid.data(), dcid.size(), false, k));
  CHECK(tohex(k.key, 16) == "1f369613dd76d5467730efcbe3b1a22d");
  CHECK(tohex(k.iv, 12) == "fa044b2f42a3fd3b46fb255c");
  CHECK(tohex(k.hp, 16) == "9f50449e04a0e810283a1e9933adedd2");
  REQUIRE(c.initial_secret(*quic::version_info(quic::kVersion2), dcid.data(), dcid.size(), false, secret));
  CHECK(tohex(secret, 32) == "14ec9d6eb9fd7af83bf5a668bc17a7e283766aade7ecd0891f70f9ff7f4bf47b");
  REQUIRE(c.initial_keys(*quic::version_info(quic::kVersion2), dcid.data(), dcid.size(), false, k));
  CHECK(tohex(k.key, 16) == "8b1a0bc121284290a29e0971b5cd045d");
  CHECK(tohex(k.iv, 12) == "91f73e2351d8fa91660e909f");
  CHECK(tohex(k.hp, 16) == "45b95e15235d6f45a6b19cbcb0294ba9");
  // Unknown versions have no keys.
  CHECK(quic::version_info(0x51303530) == nullptr);
  CHECK(quic::version_info(0x0a0a0a0a) == nullptr);
}

TEST_CASE("quic: RFC 9001 A.2 / RFC 9369 A.2 sample packet protection") {
  quic::Crypto c;
  SECTION("v1") {
    Bytes p = a2_packet(c, 1, "c300000001088394c8f03e5157080000449e00000002");
    REQUIRE(p.size() == 1200);
    CHECK(tohex(p.data(), 22) == "c000000001088394c8f03e5157080000449e7b9aec34");
    CHECK(tohex(p.data(), 32) == "c000000001088394c8f03e5157080000449e7b9aec34d1b1c98dd7689fb8ec11");
    CHECK(tohex(p.data() + 1200 - 48, 48) ==
          "7e78bfe706ca4cf5e9c5453e9f7cfd2b8b4c8d169a44e55c88d4a9a7f9474241e221af44860018ab0856972e194cd934");
  }
  SECTION("v2") {
    Bytes p = a2_packet(c, quic::kVersion2, "d36b3343cf088394c8f03e5157080000449e00000002");
    REQUIRE(p.size() == 1200);
    CHECK(tohex(p.data(), 32) == "d76b3343cf088394c8f03e5157080000449ea0c95e82ffe67b6abcdb4298b485");
    CHECK(tohex(p.data() + 1200 - 80, 80) ==
          "6f4c4938ae79324dc402894b44faf8afbab35282ab659d13c93f70412e85cb19"
          "9a37ddec600545473cfb5a05e08d0b209973b2172b4d21fb69745a262ccde96b"
          "a18b2faa745b6fe189cf772a9f84cbfc");
  }
}

TEST_CASE("quic: the RFC packets decrypt, their SNI is located, rewritten, and decrypts again") {
  for (auto [ver, hdr] : {std::pair<uint32_t, const char*>{1, "c300000001088394c8f03e5157080000449e00000002"},
                          {quic::kVersion2, "d36b3343cf088394c8f03e5157080000449e00000002"}}) {
    CAPTURE(ver);
    Ctx x;
    Bytes p = a2_packet(x.c, ver, hdr);
    REQUIRE(x.run(p) == Status::Located);
    REQUIRE(x.d->n_names == 1);
    CHECK(x.d->name_text(0) == "example.com");
    CHECK(x.d->n_pkt == 1);
    CHECK(x.d->pkt[0].pn == 2);
    CHECK(x.st.mode == 2);
    Bytes w = p;
    names::Decision keep = names::Decision::keep();
    REQUIRE(quic::rewrite(w.data(), w.size(), *x.d, &keep, x.c));
    CHECK(w == p);  // keep() changes nothing, not even the tag
    names::Decision dec = names::Decision::redact();
    REQUIRE(quic::rewrite(w.data(), w.size(), *x.d, &dec, x.c));
    CHECK(w.size() == p.size());
    CHECK(w != p);
    CHECK(std::memcmp(w.data() + 1, p.data() + 1, 17) == 0);  // version, CIDs, token, length untouched
    Ctx y;
    REQUIRE(y.run(w) == Status::Located);
    REQUIRE(y.d->n_names == 1);
    CHECK(y.d->name_text(0).size() == 11);
    CHECK(y.d->name_text(0) != "example.com");
    CHECK(y.d->name_text(0).find("example") == std::string::npos);
    // Same plaintext apart from the name.
    size_t diff = 0;
    for (uint32_t i = y.d->pkt[0].pay_off; i < y.d->pkt[0].pay_off + y.d->pkt[0].pay_len; ++i)
      diff += x.d->plain[i] != y.d->plain[i];
    CHECK(diff > 0);
    CHECK(diff <= 11);
  }
}

TEST_CASE("quic: truncated, corrupted and unknown packets fail closed, never crash") {
  Ctx x;
  Bytes p = a2_packet(x.c, 1, "c300000001088394c8f03e5157080000449e00000002");
  for (size_t n = 0; n < p.size(); ++n) {
    Bytes t(p.begin(), p.begin() + long(n));
    Ctx y;
    Status s = y.run(t);
    CAPTURE(n);
    CHECK(s != Status::Located);
    if (n >= 7) CHECK(s == Status::Malformed);
  }
  for (size_t i = 0; i < p.size(); i += 7) {  // a flipped bit anywhere breaks the tag or the header
    Bytes t = p;
    t[i] ^= 0x10;
    Ctx y;
    CAPTURE(i);
    Status s = y.run(t);
    CHECK(s != Status::Located);
    if (i != 0) CHECK(s == Status::Malformed);
  }
  Bytes u = p;
  u[1] = 0x51, u[2] = 0x30, u[3] = 0x35, u[4] = 0x30;  // Q050: no Initial keys known
  REQUIRE(x.run(u) == Status::Malformed);
  CHECK(x.d->error == quic::Error::Version);
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    Bytes g(1 + rng() % 1400);
    for (auto& b : g) b = uint8_t(rng());
    g[0] |= 0xc0;
    if (i & 1) g[1] = g[2] = g[3] = 0, g[4] = 1;
    Ctx y;
    CHECK(y.run(g) != Status::Located);
  }
  // Short-header and Version Negotiation datagrams hold no client name.
  Bytes sh{0x40, 1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(x.run(sh) == Status::None);
  Bytes vn{0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  CHECK(x.run(vn) == Status::None);
}

TEST_CASE("quic: frames other than PADDING, PING, ACK, CRYPTO, CONNECTION_CLOSE are malformed") {
  quic::Crypto c;
  Bytes dcid = hex("0102030405060708"), h = hello("a.example.org");
  Bytes ok = crypto_frame(0, h, 0, h.size());
  Bytes ack{0x02, 0x05, 0x00, 0x01, 0x00, 0x01, 0x02, 0x01};  // largest 5, 1 extra range
  Bytes f = ack;
  f.push_back(0x01);
  f.insert(f.end(), ok.begin(), ok.end());
  Ctx x;
  REQUIRE(x.run(initial(c, 1, dcid, 0, f, 1100)) == Status::Located);
  CHECK(x.d->name_text(0) == "a.example.org");
  Bytes bad = ok;
  bad.push_back(0x08);  // STREAM
  Ctx y;
  REQUIRE(y.run(initial(c, 1, dcid, 0, bad, 1100)) == Status::Malformed);
  CHECK(y.d->error == quic::Error::Frame);
  // CRYPTO frames that disagree on the same bytes.
  Bytes h2 = h;
  h2[h2.size() - 3] ^= 1;
  Bytes two = crypto_frame(0, h, 0, h.size());
  Bytes again = crypto_frame(0, h2, 0, h2.size());
  two.insert(two.end(), again.begin(), again.end());
  Ctx z;
  REQUIRE(z.run(initial(c, 1, dcid, 0, two, 1100)) == Status::Malformed);
  CHECK(z.d->error == quic::Error::Overlap);
  // ACK-only client Initial: nothing to locate.
  Ctx w;
  CHECK(w.run(initial(c, 1, dcid, 1, ack, 1100)) == Status::None);
}

TEST_CASE("quic: scattered CRYPTO frames, a name split over two frames, coalesced packets") {
  quic::Crypto c;
  Bytes dcid = hex("a1a2a3a4a5a6a7a8a9"), h = hello("split.example.net", 40, 30);
  // Cut right inside the name and send the pieces in reverse order.
  const size_t cut = h.size() - 30 - 4 - 8;
  Bytes f = crypto_frame(cut, h, cut, h.size() - cut);
  Bytes g = crypto_frame(0, h, 0, cut);
  f.push_back(0x01);
  f.insert(f.end(), g.begin(), g.end());
  Bytes pkt = initial(c, 1, dcid, 0, f, 1000);
  // A Handshake packet coalesced after it (opaque bytes, same DCID).
  Bytes hs{0xe0, 0, 0, 0, 1, uint8_t(dcid.size())};
  hs.insert(hs.end(), dcid.begin(), dcid.end());
  hs.push_back(0);
  hs.push_back(0x40);
  hs.push_back(40);
  for (int i = 0; i < 40; ++i) hs.push_back(uint8_t(i * 7));
  Bytes dg = pkt;
  dg.insert(dg.end(), hs.begin(), hs.end());
  Ctx x;
  REQUIRE(x.run(dg) == Status::Located);
  REQUIRE(x.d->n_names == 1);
  CHECK(x.d->name_text(0) == "split.example.net");
  Bytes w = dg;
  names::Decision dec = names::Decision::mask(77);
  REQUIRE(quic::rewrite(w.data(), w.size(), *x.d, &dec, x.c));
  CHECK(std::equal(w.end() - long(hs.size()), w.end(), hs.begin()));  // the other packet untouched
  Ctx y;
  REQUIRE(y.run(w) == Status::Located);
  CHECK(y.d->name_text(0).size() == 17);
  CHECK(y.d->name_text(0) != "split.example.net");
}

TEST_CASE("quic: coalesced bytes of another connection ID: padding, unless they open as an Initial") {
  quic::Crypto c;
  Bytes dcid = hex("0102030405060708"), h = hello("second.example.org");
  Bytes ack{0x02, 0x00, 0x00, 0x00, 0x00};
  Bytes first = initial(c, 1, dcid, 0, ack, 300);
  // Random-looking padding after the first packet (Chrome appends some).
  Bytes pad = first;
  for (int i = 0; i < 200; ++i) pad.push_back(uint8_t(0xc3 ^ (i * 37)));
  Ctx x;
  CHECK(x.run(pad) == Status::None);
  // A readable Initial under another DCID: a monitor would show its SNI.
  Bytes two = first;
  Bytes other = initial(c, 1, hex("99999999"), 0, crypto_frame(0, h, 0, h.size()), 900);
  two.insert(two.end(), other.begin(), other.end());
  Ctx y;
  REQUIRE(y.run(two) == Status::Located);
  CHECK(y.d->name_text(0) == "second.example.org");
  names::Decision dec = names::Decision::redact();
  Bytes w = two;
  REQUIRE(quic::rewrite(w.data(), w.size(), *y.d, &dec, y.c));
  CHECK(std::equal(first.begin(), first.end(), w.begin()));  // the first packet untouched
  Ctx z;
  REQUIRE(z.run(w) == Status::Located);
  CHECK(z.d->name_text(0) != "second.example.org");
  // The same DCID with an unknown version after the first packet: not understood.
  Bytes bad = first;
  Bytes u = initial(c, 1, dcid, 1, ack, 100);
  u[1] = 0x51, u[2] = 0x30, u[3] = 0x35, u[4] = 0x30;
  bad.insert(bad.end(), u.begin(), u.end());
  CHECK(x.run(bad) == Status::Malformed);
}

TEST_CASE("quic: a ClientHello over several Initials (post-quantum key shares)") {
  quic::Crypto c;
  Bytes dcid = hex("0011223344556677");
  SECTION("SNI in the second packet: the first passes, the second is rewritten") {
    Bytes h = hello("late.example.com", 1500, 100);
    const size_t n1 = 1100;
    Ctx x;
    Bytes p1 = initial(c, 1, dcid, 0, crypto_frame(0, h, 0, n1), 1160);
    CHECK(x.run(p1) == Status::None);  // the name is not in it
    CHECK(x.st.mode == 1);
    // The rest, in three scattered frames.
    const size_t rest = h.size() - n1, a = n1 + rest / 3, b = n1 + 2 * rest / 3;
    Bytes f = crypto_frame(b, h, b, h.size() - b);
    Bytes f2 = crypto_frame(n1, h, n1, a - n1), f3 = crypto_frame(a, h, a, b - a);
    f.insert(f.end(), f2.begin(), f2.end());
    f.push_back(0);
    f.insert(f.end(), f3.begin(), f3.end());
    Bytes p2 = initial(c, 1, dcid, 1, f, 1160);
    quic::FlowState saved = x.st;
    REQUIRE(x.run(p2) == Status::Located);
    CHECK(x.d->name_text(0) == "late.example.com");
    CHECK(x.st.mode == 2);
    names::Decision dec = names::Decision::redact();
    Bytes w = p2;
    REQUIRE(quic::rewrite(w.data(), w.size(), *x.d, &dec, x.c));
    Ctx y;
    y.st = saved;
    REQUIRE(y.run(w) == Status::Located);
    CHECK(y.d->name_text(0) != "late.example.com");
    // Without the first packet's walk the second cannot be placed: fail closed.
    Ctx z;
    CHECK(z.run(p2) == Status::Incomplete);
    // A retransmission of the SNI bytes alone, after the walk: located again.
    const quic::FlowState done = x.st;
    Bytes r = initial(c, 1, dcid, 2, crypto_frame(done.a - 4, h, done.a - 4, done.b - done.a + 4), 1160);
    REQUIRE(x.run(r) == Status::Located);
    CHECK(x.d->name_text(0) == "late.example.com");
    // Later bytes only: pass.
    Bytes tail = initial(c, 1, dcid, 3, crypto_frame(h.size() - 50, h, h.size() - 50, 50), 1160);
    CHECK(x.run(tail) == Status::None);
  }
  SECTION("SNI in the first packet: rewritten there, the rest passes") {
    Bytes h = hello("early.example.com", 0, 2000);
    Ctx x;
    Bytes p1 = initial(c, 1, dcid, 0, crypto_frame(0, h, 0, 1100), 1160);
    REQUIRE(x.run(p1) == Status::Located);
    CHECK(x.d->name_text(0) == "early.example.com");
    Bytes p2 = initial(c, 1, dcid, 1, crypto_frame(1100, h, 1100, h.size() - 1100), 1160);
    CHECK(x.run(p2) == Status::None);
  }
  SECTION("the server_name extension cut by the packet boundary: both fail closed") {
    Bytes h = hello("cut.example.com", 1000, 500);  // the name spans offsets 1096..1111
    Ctx x;
    Bytes p1 = initial(c, 1, dcid, 0, crypto_frame(0, h, 0, 1100), 1160);
    CHECK(x.run(p1) == Status::Incomplete);
    Bytes p2 = initial(c, 1, dcid, 1, crypto_frame(1100, h, 1100, h.size() - 1100), 1160);
    CHECK(x.run(p2) == Status::Incomplete);
  }
  SECTION("Initials the client keys do not open: the server's pass, the client's fail closed") {
    Bytes h = hello("srv.example.com");
    Ctx x;
    REQUIRE(x.run(initial(c, 1, dcid, 0, crypto_frame(0, h, 0, h.size()), 1160), 0, 9) == Status::Located);
    // The server's Initial (its keys come from the client's DCID, it is
    // addressed to the client's SCID): opaque to client keys.
    Bytes srv = initial(c, 1, hex("5e5e5e5e"), 0, crypto_frame(0, h, 0, 40), 1160);
    for (size_t i = 30; i < 60; ++i) srv[i] ^= 0x5a;  // not openable
    CHECK(x.run(srv, 1, 10) == Status::None);
    CHECK(x.run(srv, 0, 9) == Status::Malformed);
    // The client's later Initial to the server's connection ID under the
    // first DCID's keys: opened through the flow's remembered DCID.
    Bytes later = initial(c, 1, hex("5e5e5e5e"), 1, Bytes{0x02, 0, 0, 0, 0}, 1160, {}, &dcid);
    Ctx y;
    CHECK(y.run(later, 0, 9) == Status::Malformed);  // nothing remembered yet
    REQUIRE(y.run(initial(c, 1, dcid, 0, crypto_frame(0, h, 0, h.size()), 1160), 0, 9) == Status::Located);
    CHECK(y.run(later, 0, 9) == Status::None);
  }
}
