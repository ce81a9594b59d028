// The LISP control plugin's parser on crafted messages: a Map-Request's
// source EID, ITR-RLOCs and requested prefix; a Map-Reply's and a
// Map-Register's records (EID prefix, IPv4 and IPv6 locators); LCAFs
// (instance ID, source/dest key, AFI list, NAT traversal, explicit locator
// path, application data, nested); malformed LCAFs (unknown types,
// lengths, nesting), Encapsulated Control Messages, lengths and trailing
// bytes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "amon_lisp.hpp"
#include "role_addr_parse.h"

using namespace amon;
using namespace amon_test;
namespace lp = amon::lisp_plugin;

namespace {

const Bytes kEid = {10, 8, 0, 5}, kRloc = {198, 51, 100, 20}, kItr = {10, 8, 0, 1};
const Bytes kRloc6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20};

Bytes afi(const Bytes& a) {
  Bytes b{0, uint8_t(a.empty() ? 0 : a.size() == 4 ? 1 : 2)};
  put(b, a);
  return b;
}
Bytes record(const Bytes& eid, const std::vector<Bytes>& locs) {
  Bytes b = {0, 0, 0, 60, uint8_t(locs.size()), 24, 0, 0, 0, 0};
  put(b, afi(eid));
  for (const Bytes& l : locs) {
    put(b, {1, 100, 255, 0, 0, 5});
    put(b, afi(l));
  }
  return b;
}
const Bytes kNonce(8, 0x77);

std::vector<Bytes> found(const Bytes& m, lp::Result want = lp::Result::Ok) {
  return found_addrs<lp::Parsed>(lp::parse, m, want);
}

}  // namespace

TEST_CASE("lisp: Map-Request: source EID, ITR-RLOCs, requested prefix") {
  Bytes m = {0x10, 0, 1, 1};  // two ITR-RLOCs, one record
  put(m, kNonce), put(m, afi(kEid)), put(m, afi(kItr)), put(m, afi(kRloc6));
  put(m, {0, 32}), put(m, afi({10, 8, 0, 9}));
  const auto v = found(m);
  REQUIRE(v.size() == 4);
  CHECK(has(v, kItr));
  CHECK(has(v, kRloc6));
  CHECK(has(v, {10, 8, 0, 9}));
}

TEST_CASE("lisp: Map-Reply and Map-Register records") {
  Bytes reply = {0x20, 0, 0, 1};
  put(reply, kNonce), put(reply, record(kEid, {kRloc, kRloc6}));
  const auto v = found(reply);
  REQUIRE(v.size() == 3);
  CHECK(has(v, kEid));
  Bytes reg = {0x30, 0, 0, 1};
  put(reg, kNonce), put(reg, {0, 1, 0, 4, 9, 9, 9, 9}), put(reg, record(kEid, {kRloc}));
  CHECK(found(reg).size() == 2);
  reg[0] |= 0x02;  // I: an xTR-ID and site ID follow
  put(reg, Bytes(24, 3));
  CHECK(found(reg).size() == 2);
}

TEST_CASE("lisp: malformed: LCAF, an Encapsulated Control Message, lengths, trailing bytes") {
  Bytes lcaf = {0x20, 0, 0, 1};
  put(lcaf, kNonce), put(lcaf, record(kEid, {}));
  lcaf[lcaf.size() - 6] = 0x40, lcaf[lcaf.size() - 5] = 0x03;  // AFI 16387 (LCAF)
  found(lcaf, lp::Result::Malformed);
  Bytes ecm = {0x80, 0, 0, 0};
  put(ecm, Bytes(40, 0));
  found(ecm, lp::Result::Malformed);
  Bytes shortr = {0x20, 0, 0, 2};
  put(shortr, kNonce), put(shortr, record(kEid, {kRloc}));
  found(shortr, lp::Result::Malformed);
  Bytes extra = {0x20, 0, 0, 1};
  put(extra, kNonce), put(extra, record(kEid, {kRloc})), put(extra, {1, 2});
  found(extra, lp::Result::Malformed);
}

namespace {

// An LCAF (AFI 16387) of `type` whose body is `body`.
Bytes lcaf(uint8_t type, const Bytes& body, uint8_t rsvd2 = 0) {
  Bytes b = {0x40, 0x03, 0, 0, type, rsvd2};
  put16(b, uint16_t(body.size()));
  put(b, body);
  return b;
}
Bytes rec_raw(const Bytes& eid_afi, const std::vector<Bytes>& loc_afis) {
  Bytes b = {0, 0, 0, 60, uint8_t(loc_afis.size()), 24, 0, 0, 0, 0};
  put(b, eid_afi);
  for (const Bytes& l : loc_afis) put(b, {1, 100, 255, 0, 0, 5}), put(b, l);
  return b;
}
Bytes reply(const Bytes& rec) {
  Bytes m = {0x20, 0, 0, 1};
  put(m, kNonce), put(m, rec);
  return m;
}
const Bytes kSrc = {10, 8, 1, 1}, kDst = {10, 8, 2, 2}, kRtr = {198, 51, 100, 40};

}  // namespace

TEST_CASE("lisp: LCAF: instance ID, source/dest key, AFI list, NAT traversal, ELP, nested") {
  // An EID in instance 7; locators as an AFI list (IPv4, IPv6) and as an explicit locator path.
  const Bytes iid = lcaf(2, cat({{0, 0, 0, 7}, afi(kEid)}), 24);
  const Bytes list = lcaf(1, cat({afi(kRloc), afi(kRloc6)}));
  const Bytes elp = lcaf(10, cat({{0, 1}, afi(kRtr), {0, 0}, afi(kItr)}));
  auto v = found(reply(rec_raw(iid, {list, elp})));
  REQUIRE(v.size() == 5);
  for (const Bytes& a : {kEid, kRloc, kRloc6, kRtr, kItr}) CHECK(has(v, a));
  // A source/dest key EID inside an instance ID; NAT traversal locators.
  const Bytes sd = lcaf(2, cat({{0, 0, 0, 7}, lcaf(12, cat({{0, 0, 32, 32}, afi(kSrc), afi(kDst)}))}));
  const Bytes nat = lcaf(7, cat({{0x10, 0xf6, 0x10, 0xf6}, afi(kRloc), afi(kRtr), afi({})}));
  v = found(reply(rec_raw(sd, {nat})));
  REQUIRE(v.size() == 4);
  for (const Bytes& a : {kSrc, kDst, kRloc, kRtr}) CHECK(has(v, a));
  // In a Map-Request: an LCAF source EID and ITR-RLOC.
  Bytes m = {0x10, 0, 0, 1};
  put(m, kNonce), put(m, lcaf(2, cat({{0, 0, 0, 7}, afi(kItr)}))), put(m, lcaf(1, cat({afi(kRloc)}))),
      put(m, {0, 32}), put(m, lcaf(4, cat({Bytes(12, 0), afi(kEid)})));
  v = found(m);
  REQUIRE(v.size() == 3);
  for (const Bytes& a : {kItr, kRloc, kEid}) CHECK(has(v, a));
}

TEST_CASE("lisp: LCAF fails closed: unknown types, lengths, nesting too deep, truncation") {
  found(reply(rec_raw(lcaf(5, Bytes(12, 1)), {})), lp::Result::Malformed);  // geo-coordinates
  found(reply(rec_raw(lcaf(14, afi(kEid)), {})), lp::Result::Malformed);    // JSON, not read
  // Its length past the address inside, short of it, past the message.
  Bytes l = lcaf(2, cat({{0, 0, 0, 7}, afi(kEid)}));
  for (uint8_t bad : {uint8_t(l[7] + 2), uint8_t(l[7] - 1), uint8_t(200)}) {
    Bytes b = l;
    b[7] = bad;
    found(reply(rec_raw(b, {})), lp::Result::Malformed);
  }
  Bytes deep = afi(kEid);
  for (int i = 0; i < 5; ++i) deep = lcaf(1, deep);
  found(reply(rec_raw(deep, {})), lp::Result::Malformed);
  const Bytes ok = reply(rec_raw(lcaf(12, cat({{0, 0, 32, 32}, afi(kSrc), afi(kDst)})), {lcaf(1, afi(kRloc))}));
  found(ok);
  for (size_t n = 12; n < ok.size(); ++n) found(Bytes(ok.begin(), ok.begin() + long(n)), lp::Result::Malformed);
}
