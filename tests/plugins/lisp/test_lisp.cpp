// The LISP control plugin's parser on crafted messages: a Map-Request's
// source EID, ITR-RLOCs and requested prefix; a Map-Reply's and a
// Map-Register's records (EID prefix, IPv4 and IPv6 locators); malformed
// LCAFs, Encapsulated Control Messages, lengths and trailing bytes.
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
