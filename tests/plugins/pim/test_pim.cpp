// The PIM plugin's parser on crafted messages: Hello address lists, a
// Null-Register's inner header, Join/Prune with groups and sources, a
// Bootstrap's BSR and RPs, a Candidate-RP-Advertisement, IPv6 encodings;
// malformed families, lengths, trailing bytes and a Register with data.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "amon_pim.hpp"
#include "role_addr_parse.h"

using namespace amon;
using namespace amon_test;
namespace pp = amon::pim_plugin;

namespace {

const Bytes kA = {10, 5, 0, 1}, kB = {10, 5, 0, 2}, kG = {239, 1, 2, 3};
const Bytes kA6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x51};

Bytes uni(const Bytes& a) {
  Bytes b{uint8_t(a.size() == 4 ? 1 : 2), 0};
  put(b, a);
  return b;
}
Bytes grp(const Bytes& a) {
  Bytes b{uint8_t(a.size() == 4 ? 1 : 2), 0, 0, uint8_t(a.size() * 8)};
  put(b, a);
  return b;
}
Bytes msg(uint8_t type, const Bytes& body) {
  Bytes b{uint8_t(0x20 | type), 0, 0, 0};
  put(b, body);
  return b;
}
std::vector<Bytes> found(const Bytes& m, pp::Result want = pp::Result::Ok) {
  return found_addrs<pp::Parsed>(pp::parse, m, want);
}

}  // namespace

TEST_CASE("pim: Hello's address list, other options skipped") {
  Bytes body = {0, 1, 0, 2, 0, 105};  // holdtime
  Bytes list = uni(kB);
  put(list, uni(kA6));
  put16(body, 24), put16(body, uint16_t(list.size())), put(body, list);
  const auto v = found(msg(0, body));
  REQUIRE(v.size() == 2);
  CHECK(has(v, kB));
  CHECK(has(v, kA6));
}

TEST_CASE("pim: Null-Register's inner header; a Register with data is malformed") {
  Bytes inner = {0x45, 0, 0, 20, 0, 0, 0, 0, 1, 17, 0, 0};
  put(inner, kA), put(inner, kG);
  Bytes body = {0x40, 0, 0, 0};
  put(body, inner);
  const auto v = found(msg(1, body));
  CHECK(has(v, kA));
  CHECK(has(v, kG));
  put(body, {1, 2, 3, 4});
  found(msg(1, body), pp::Result::Malformed);
}

TEST_CASE("pim: Join/Prune: upstream neighbour, group, joined and pruned sources") {
  Bytes body = uni(kB);
  put(body, {0, 1, 0, 210});
  put(body, grp(kG));
  put(body, {0, 1, 0, 1});
  put(body, grp(kA)), put(body, grp({10, 5, 0, 9}));
  const auto v = found(msg(3, body));
  REQUIRE(v.size() == 4);
  CHECK(has(v, {10, 5, 0, 9}));
}

TEST_CASE("pim: Bootstrap's BSR and RPs; a Candidate-RP-Advertisement") {
  Bytes body = {0, 7, 30, 64};
  put(body, uni(kA));
  put(body, grp({224, 0, 0, 0}));
  put(body, {2, 2, 0, 0});
  put(body, uni(kB)), put(body, {0, 150, 1, 0});
  put(body, uni(kA6)), put(body, {0, 150, 1, 0});
  const auto v = found(msg(4, body));
  CHECK(has(v, kA));
  CHECK(has(v, kB));
  CHECK(has(v, kA6));
  Bytes crp = {1, 0, 0, 150};
  put(crp, uni(kB)), put(crp, grp(kG));
  CHECK(found(msg(8, crp)).size() == 2);
}

TEST_CASE("pim: malformed families, lengths, trailing bytes, versions, types") {
  Bytes bad = uni(kB);
  bad[0] = 3;  // no such family here
  found(msg(2, bad), pp::Result::Malformed);
  Bytes stop = grp(kG);
  put(stop, uni(kA));
  found(msg(2, stop));
  stop.push_back(0);
  found(msg(2, stop), pp::Result::Malformed);
  Bytes hello = {0, 24, 0, 9};
  put(hello, uni(kB));
  found(msg(0, hello), pp::Result::Malformed);
  Bytes v1 = msg(2, {});
  v1[0] = 0x12;
  found(v1, pp::Result::Malformed);
  found(msg(12, {}), pp::Result::Malformed);
}
