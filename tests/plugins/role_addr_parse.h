// What a carrier plugin's parser (one of plugins/core's role_addrs.h
// parsers: parse(p, len, Parsed&) -> Result, Parsed::addrs) finds in a
// message, for the plugins' parser tests: the addresses' bytes in the
// order found, the spans checked to lie within the message.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "frames.h"
#include "role_addrs.h"

namespace amon_test {

template <class Parsed, class Result, class Parse>
std::vector<Bytes> found_addrs(Parse parse, const Bytes& m, Result want) {
  static Parsed r;  // large: not on the stack
  REQUIRE(parse(m.data(), uint32_t(m.size()), r) == want);
  REQUIRE(amon::spans_sound(r.addrs, uint32_t(m.size())));
  std::vector<Bytes> v;
  for (unsigned i = 0; i < r.addrs.n; ++i)
    v.emplace_back(m.begin() + r.addrs.a[i].off, m.begin() + r.addrs.a[i].off + r.addrs.a[i].len);
  return v;
}

inline bool has(const std::vector<Bytes>& v, const Bytes& a) { return std::find(v.begin(), v.end(), a) != v.end(); }

}  // namespace amon_test
