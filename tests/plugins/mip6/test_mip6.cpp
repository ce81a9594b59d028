// The Mobility Header plugin's parser on crafted messages: a Binding
// Error's home address, a Home Agent Switch's home agents, a Binding
// Update's options (alternate care-of address, a mobile network prefix of
// its stored length, IPv4 home and care-of addresses, a binding
// identifier, a local mobility anchor's address), the option data that
// names the node zeroed; an unknown option or message type, a length past
// its container and bytes after the header refused.
#include <catch2/catch.hpp>

#include <vector>

#include "amon_mip6.hpp"
#include "role_addr_parse.h"

using namespace amon;
using namespace amon_test;
namespace mp = amon::mip6_plugin;

namespace {

const Bytes kHome = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11};
const Bytes kCoa = {0x20, 0x01, 0x0d, 0xb8, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x22};
const Bytes kHa = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};

// A Mobility Header of `type` with `body` after the checksum, padded with
// PadN to a multiple of 8 bytes.
Bytes mh(uint8_t type, const Bytes& body) {
  Bytes b = {59, 0, type, 0, 0, 0};
  put(b, body);
  const size_t pad = (8 - b.size() % 8) % 8;
  if (pad == 1) b.push_back(0);
  else if (pad) b.push_back(1), b.push_back(uint8_t(pad - 2)), put(b, Bytes(pad - 2, 0));
  b[1] = uint8_t(b.size() / 8 - 1);
  return b;
}
Bytes opt(uint8_t type, const Bytes& data) {
  Bytes b = {type, uint8_t(data.size())};
  put(b, data);
  return b;
}
Bytes bu(const Bytes& options) {
  Bytes b = {0x03, 0xe8, 0x80, 0, 0, 0x10};  // sequence, flags (A), lifetime
  put(b, options);
  return mh(5, b);
}
std::vector<Bytes> found(const Bytes& m, mp::Result want = mp::Result::Ok) {
  return found_addrs<mp::Parsed>(mp::parse, m, want);
}

}  // namespace

TEST_CASE("mip6: a Binding Error's home address; a Home Agent Switch's home agents") {
  Bytes be = {1, 0};
  put(be, kHome);
  auto v = found(mh(7, be));
  REQUIRE(v.size() == 1);
  CHECK(v[0] == kHome);

  Bytes has_ = {2, 0};
  put(has_, kHa), put(has_, kCoa);
  v = found(mh(12, has_));
  REQUIRE(v.size() == 2);
  CHECK(has(v, kHa));
  CHECK(has(v, kCoa));
  has_[0] = 3;  // a third home agent past the message
  found(mh(12, has_), mp::Result::Malformed);
}

TEST_CASE("mip6: a Binding Update's options: addresses of both families, a prefix of its stored length") {
  Bytes mnp = {0, 48};
  put(mnp, {0x20, 0x01, 0x0d, 0xb8, 0x00, 0x77}), put(mnp, Bytes(10, 0));
  Bytes bid = {0, 1, 0, 0};
  put(bid, kCoa);
  const Bytes lma4 = {2, 0, 192, 0, 2, 9};
  const Bytes m = bu(cat({opt(3, kCoa), opt(6, mnp), opt(29, {0x60, 0, 198, 51, 100, 7}),
                          opt(32, {0, 0, 203, 0, 113, 5}), opt(35, bid), opt(41, lma4), opt(4, {0, 1, 0, 2})}));
  const auto v = found(m);
  CHECK(v.size() == 6);
  CHECK(has(v, kCoa));
  CHECK(has(v, {0x20, 0x01, 0x0d, 0xb8, 0x00, 0x77}));
  CHECK(has(v, {198, 51, 100, 7}));
  CHECK(has(v, {203, 0, 113, 5}));
  CHECK(has(v, {192, 0, 2, 9}));
  // A prefix with bytes set past its length is an address: all 16 bytes.
  mnp[2 + 10] = 1;
  const auto w = found(bu(opt(22, mnp)));
  REQUIRE(w.size() == 1);
  CHECK(w[0].size() == 16);
}

TEST_CASE("mip6: option data naming the node otherwise is zeroed, an authenticator too") {
  const Bytes nai = {1, 'u', 's', 'e', 'r', '@', 'e', 'x', '.', 'o', 'r', 'g'};
  const Bytes m = bu(cat({opt(8, nai), opt(7, {2, 0x00, 0x1b, 0x21, 0x3a, 0x4f, 0x5d}), opt(5, Bytes(12, 0xab))}));
  static mp::Parsed r;
  REQUIRE(mp::parse(m.data(), uint32_t(m.size()), r) == mp::Result::Ok);
  REQUIRE(r.n_zero == 3);
  uint32_t total = 0;
  for (unsigned i = 0; i < r.n_zero; ++i) total += r.zero[i].len;
  CHECK(total == nai.size() + 7 + 12);
  CHECK(m[r.zero[0].off] == 1);
  CHECK(r.addrs.n == 0);
}

TEST_CASE("mip6: unknown options and types, lengths past their container, bytes after the header") {
  found(bu(opt(45, {0, 1, 0, 0})), mp::Result::Malformed);  // flow identification: traffic selectors
  found(bu(opt(200, {1, 2})), mp::Result::Malformed);
  found(bu(opt(3, Bytes(12, 1))), mp::Result::Malformed);   // an alternate care-of address of 12 bytes
  found(mh(11, Bytes(10, 0)), mp::Result::Malformed);       // experimental
  found(mh(40, {}), mp::Result::Malformed);
  Bytes m = bu(opt(3, kCoa));
  m[m.size() - 1] = 9;  // the PadN runs past the header
  found(m, mp::Result::Malformed);
  Bytes longer = bu(opt(3, kCoa));
  put(longer, Bytes(8, 0));
  found(longer, mp::Result::Malformed);
  Bytes shorter = bu(opt(3, kCoa));
  shorter.resize(shorter.size() - 8);
  found(shorter, mp::Result::Malformed);
}
