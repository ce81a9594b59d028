#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "amon_tls.hpp"
#include "l7_build.hpp"

using namespace amon::tls;
using namespace amon::l7test;
namespace names = amon::names;

static std::unique_ptr<ClientHello> ch_new() { return std::make_unique<ClientHello>(); }

TEST_CASE("tls: ClientHello in every record version with SNI, GREASE, supported_versions") {
  for (uint16_t rv : {0x0300, 0x0301, 0x0302, 0x0303, 0x0304}) {
    CAPTURE(rv);
    Bytes b = sample_client_hello("www.Example.com", rv);
    auto c = ch_new();
    REQUIRE(parse_client_hello(b.data(), b.size(), *c) == Status::Ok);
    CHECK(c->record_version == rv);
    CHECK(c->legacy_version == 0x0303);
    CHECK(c->max_supported_version == 0x0304);
    CHECK(c->has_grease);
    CHECK(c->consumed == b.size());
    REQUIRE(c->n_sni == 1);
    CHECK(c->sni_text(0) == "www.example.com");
    CHECK(std::string(reinterpret_cast<char*>(b.data()) + c->sni[0].span.off, c->sni[0].span.len) == "www.Example.com");
    CHECK(c->n_ext == 4);
    CHECK(c->ext[0].grease);
  }
  SECTION("legacy 1.0 hello without extensions block") {
    Bytes b = records(client_hello_body(0x0301, {}, false), 0x0301);
    auto c = ch_new();
    REQUIRE(parse_client_hello(b.data(), b.size(), *c) == Status::Ok);
    CHECK(c->n_ext == 0);
    CHECK(c->n_sni == 0);
  }
}

TEST_CASE("tls: extension order does not matter; ECH and ESNI are reported") {
  Bytes ech{0, 0, 1, 0, 1, 7, 0, 2, 0xaa, 0xbb, 0, 3, 1, 2, 3};  // outer: suite, config 7, enc, payload
  Bytes esni{0x13, 0x01, 0, 29, 0, 1, 9, 0, 1, 8, 0, 2, 7, 7};
  Bytes b = records(client_hello_body(0x0303, {{0xfe0d, ech}, {0xffce, esni}, {0x0a0a, {0}}, sni_ext({"cloudflare-ech.com"})}), 0x0301);
  auto c = ch_new();
  REQUIRE(parse_client_hello(b.data(), b.size(), *c) == Status::Ok);
  CHECK(c->has_ech);
  CHECK(c->ech_type == 0);
  CHECK(c->ech.len == ech.size());
  CHECK(c->has_esni);
  CHECK(c->esni.len == 14);
  REQUIRE(c->n_sni == 1);
  CHECK(c->sni_text(0) == "cloudflare-ech.com");
  // A fuzzed inner length (ESNI encrypted_sni longer than the extension) fails closed.
  Bytes bad_esni{0x13, 0x01, 0, 29, 0, 2, 1, 2, 0, 0, 0xb0, 0x93, 9};
  Bytes b2 = records(client_hello_body(0x0303, {{0xffce, bad_esni}}), 0x0301);
  CHECK(parse_client_hello(b2.data(), b2.size(), *c) == Status::Malformed);
  Bytes bad_ech{0, 0, 1, 0, 1, 7, 0, 9, 1};
  Bytes b3 = records(client_hello_body(0x0303, {{0xfe0d, bad_ech}}), 0x0301);
  CHECK(parse_client_hello(b3.data(), b3.size(), *c) == Status::Malformed);
}

TEST_CASE("tls: truncated record stream reports the bytes needed") {
  Bytes b = sample_client_hello();
  auto c = ch_new();
  for (size_t cut : {size_t(0), size_t(3), size_t(5), size_t(8), size_t(40), b.size() - 1}) {
    CAPTURE(cut);
    REQUIRE(parse_client_hello(b.data(), cut, *c) == Status::Truncated);
    CHECK(c->need >= cut + 1);
    if (cut >= 5) CHECK(c->need == b.size());
  }
}

TEST_CASE("tls: handshake fragmented over several records, SNI straddling a boundary") {
  const Bytes hs = client_hello_body(0x0303, {sni_ext({"secret.example.net"})});
  for (size_t frag : {size_t(20), size_t(50), size_t(97), size_t(100), size_t(128)}) {
    CAPTURE(frag);
    Bytes b = records(hs, 0x0301, frag);
    auto c = ch_new();
    REQUIRE(parse_client_hello(b.data(), b.size(), *c) == Status::Ok);
    CHECK(c->n_records == (hs.size() + frag - 1) / frag);
    REQUIRE(c->n_sni == 1);
    CHECK(c->sni_text(0) == "secret.example.net");
    Bytes w = b;
    REQUIRE(rewrite_sni(w.data(), w.size(), *c, 0, names::Decision::mask_left_of(2, 5)));
    auto c2 = ch_new();
    REQUIRE(parse_client_hello(w.data(), w.size(), *c2) == Status::Ok);
    CHECK(c2->sni_text(0).size() == 18);
    CHECK(c2->sni_text(0).substr(6) == ".example.net");
    CHECK(c2->sni_text(0).substr(0, 6) != "secret");
    std::string t = "secret.example.net";
    names::apply_to_text(t.data(), t.size(), names::Decision::mask_left_of(2, 5));
    CHECK(c2->sni_text(0) == t);
    // partial stream
    REQUIRE(parse_client_hello(b.data(), b.size() - 1, *c2) == Status::Truncated);
  }
}

TEST_CASE("tls: malformed lengths fail closed") {
  auto c = ch_new();
  SECTION("extension vector longer than the record") {
    Bytes b = sample_client_hello();
    // the extensions block length sits right after compression methods
    const size_t ext_len_at = 5 + 4 + 2 + 32 + 1 + 32 + 2 + 6 + 2;
    set16(b, ext_len_at, 45203);
    CHECK(parse_client_hello(b.data(), b.size(), *c) == Status::Malformed);
    CHECK(c->error == Error::VectorLength);
  }
  SECTION("SNI list length mismatch") {
    Ext e = sni_ext({"a.b"});
    e.body[1] += 1;
    Bytes b = records(client_hello_body(0x0303, {e}), 0x0303);
    CHECK(parse_client_hello(b.data(), b.size(), *c) == Status::Malformed);
  }
  SECTION("duplicate extension") {
    Bytes b = records(client_hello_body(0x0303, {sni_ext({"a.b"}), sni_ext({"c.d"})}), 0x0303);
    CHECK(parse_client_hello(b.data(), b.size(), *c) == Status::Malformed);
    CHECK(c->error == Error::DuplicateExtension);
  }
  SECTION("not a handshake / not a ClientHello / bad record version") {
    Bytes b = sample_client_hello();
    b[0] = 23;
    CHECK(parse_client_hello(b.data(), b.size(), *c) == Status::Malformed);
    b = sample_client_hello();
    b[5] = 2;
    CHECK(parse_client_hello(b.data(), b.size(), *c) == Status::Malformed);
    b = sample_client_hello();
    b[1] = 2;
    CHECK(parse_client_hello(b.data(), b.size(), *c) == Status::Malformed);
    Bytes v2{0x80, 0x2e, 0x01, 0x03, 0x01};
    CHECK(parse_client_hello(v2.data(), v2.size(), *c) == Status::Malformed);
  }
  SECTION("interleaved non-handshake record") {
    const Bytes hs = client_hello_body(0x0303, {sni_ext({"a.example"})});
    Bytes b = records(hs, 0x0301, 60);
    b[5 + 60] = 21;  // second record becomes an alert
    CHECK(parse_client_hello(b.data(), b.size(), *c) == Status::Malformed);
  }
  SECTION("session id longer than 32") {
    Bytes b = sample_client_hello();
    b[5 + 4 + 2 + 32] = 33;
    CHECK(parse_client_hello(b.data(), b.size(), *c) == Status::Malformed);
  }
}

TEST_CASE("tls: several host_names, GREASE values recognised") {
  CHECK(is_grease(0x0a0a));
  CHECK(is_grease(0xfafa));
  CHECK(!is_grease(0x0a1a));
  CHECK(!is_grease(0x1301));
  Bytes b = records(client_hello_body(0x0303, {sni_ext({"one.example", "TWO.example"})}), 0x0303);
  auto c = ch_new();
  REQUIRE(parse_client_hello(b.data(), b.size(), *c) == Status::Ok);
  REQUIRE(c->n_sni == 2);
  CHECK(c->sni_text(1) == "two.example");
  REQUIRE(rewrite_sni(b.data(), b.size(), *c, 1, names::Decision::redact()));
  REQUIRE(parse_client_hello(b.data(), b.size(), *c) == Status::Ok);
  CHECK(c->sni_text(1) == "xxx.xxxxxxx");
  CHECK(c->sni_text(0) == "one.example");
}

TEST_CASE("tls: the SNI is found in the prefix of a ClientHello split across segments") {
  const Bytes full = sample_client_hello("www.Example.com");
  amon::tls::PrefixSni ps;
  // Whole hello: found, lowercased, and the span points at the name.
  REQUIRE(amon::tls::find_sni_in_prefix(full.data(), full.size(), ps));
  REQUIRE(ps.n == 1);
  CHECK(std::string(ps.text[0], ps.text_len[0]) == "www.example.com");
  CHECK(std::string(reinterpret_cast<const char*>(full.data()) + ps.span[0].off, ps.span[0].len) == "www.Example.com");
  // Every prefix either finds the whole name or reports nothing: never a
  // partial span.
  size_t first_found = 0;
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    amon::tls::PrefixSni p;
    bool ok = amon::tls::find_sni_in_prefix(full.data(), cut, p);
    if (ok) {
      REQUIRE(p.span[0].off + p.span[0].len <= cut);
      if (!first_found) first_found = cut;
    } else {
      CHECK(cut < ps.span[0].off + ps.span[0].len);
    }
  }
  CHECK(first_found == ps.span[0].off + ps.span[0].len);
  // Not a ClientHello: nothing.
  Bytes other = full;
  other[5] = 16;  // ClientKeyExchange
  CHECK_FALSE(amon::tls::find_sni_in_prefix(other.data(), other.size(), ps));
}

namespace {
// A ServerHello handshake message: legacy version, random, session id,
// cipher, compression, then the given extensions block (absent when null).
Bytes server_hello(uint16_t legacy, const Bytes* exts) {
  Bytes body = {uint8_t(legacy >> 8), uint8_t(legacy)};
  body.insert(body.end(), 32, 0x5a);
  body.push_back(32);
  body.insert(body.end(), 32, 0x11);
  body.insert(body.end(), {0x13, 0x01, 0x00});
  if (exts) {
    body.push_back(uint8_t(exts->size() >> 8));
    body.push_back(uint8_t(exts->size()));
    body.insert(body.end(), exts->begin(), exts->end());
  }
  Bytes m = {0x02, uint8_t(body.size() >> 16), uint8_t(body.size() >> 8), uint8_t(body.size())};
  m.insert(m.end(), body.begin(), body.end());
  return m;
}
}  // namespace

TEST_CASE("tls: the version a ServerHello selects (TLS 1.3 hides the certificate)") {
  Bytes v13 = {0x00, 0x33, 0x00, 0x02, 0x00, 0x1d, 0x00, 0x2b, 0x00, 0x02, 0x03, 0x04};  // key_share stub, supported_versions
  Bytes none = {0xff, 0x01, 0x00, 0x01, 0x00};                                           // renegotiation_info only
  CHECK(server_hello_version(server_hello(0x0303, &v13).data(), server_hello(0x0303, &v13).size()) == 0x0304);
  Bytes s12 = server_hello(0x0303, &none);
  CHECK(server_hello_version(s12.data(), s12.size()) == 0x0303);
  Bytes bare = server_hello(0x0301, nullptr);
  CHECK(server_hello_version(bare.data(), bare.size()) == 0x0301);
  // Cut short, a wrong type, an extensions block that overruns: not a ServerHello.
  Bytes full = server_hello(0x0303, &v13);
  for (size_t n = 0; n < full.size(); ++n) CHECK(server_hello_version(full.data(), n) == 0);
  Bytes wrong = full;
  wrong[0] = 0x01;
  CHECK(server_hello_version(wrong.data(), wrong.size()) == 0);
  Bytes over = full;
  over[4 + 2 + 32 + 1 + 32 + 3 + 1] += 1;  // extensions length one too many
  CHECK(server_hello_version(over.data(), over.size()) == 0);
}
