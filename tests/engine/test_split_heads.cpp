// Heads split over TCP segments as amon audit and the offline pre-pass
// follow them (plugins/core/split_heads.h), with the builtin HTTP plugin
// telling where a head starts and when it is whole (PayloadValues).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "registry.h"
#include "split_heads.h"
#include "values.h"

using namespace amon;

namespace {

void register_once() {
  static bool once = (register_builtin_plugins(), true);
  (void)once;
}

const uint8_t* u(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// The http.cookie values PayloadValues finds in `b`, read as sent by the client.
std::vector<std::string> cookies(PayloadValues& pv, const uint8_t* b, uint32_t n, bool ends = false) {
  std::vector<std::string> out;
  const FieldId cookie = Registry::instance().field("http.cookie")->id;
  pv.read(6, b, n, 40000, 80, true, [&](const ProtocolPlugin&, const ProtoOcc& o) {
    if (o.field == cookie) out.emplace_back(reinterpret_cast<const char*>(b + o.off), o.len);
  }, ends);
  return out;
}

const std::string kA = "GET /cart HTTP/1.1\r\nHost: shop.example.org\r\n";
const std::string kB = "Cookie: sid=Qx7Lm2Rp9TvK4sWd\r\n";
const std::string kC = "Accept: */*\r\n\r\n";

}  // namespace

TEST_CASE("a head split in three segments, one out of order, is read whole", "[split_heads]") {
  register_once();
  PayloadValues pv;
  REQUIRE(pv.split_head(u(kA), uint32_t(kA.size()), 40000, 80, true));
  CHECK(cookies(pv, u(kB), uint32_t(kB.size())).empty());  // the Cookie's segment alone holds no field

  SplitHeads heads;
  const std::string k = "flow";
  SplitHeads::Head* h = heads.start(k, 1000, u(kA), uint32_t(kA.size()), 1);
  REQUIRE(h);
  CHECK(heads.add(*h, uint32_t(1000 + kA.size() + kB.size()), u(kC), uint32_t(kC.size()), 2) ==
        SplitHeads::Add::Waiting);
  CHECK(heads.stats().out_of_order == 1);
  CHECK(heads.add(*h, 1000, u(kA), uint32_t(kA.size()), 3) == SplitHeads::Add::Waiting);  // a retransmission
  CHECK(heads.add(*h, uint32_t(1000 + kA.size()), u(kB), uint32_t(kB.size()), 4) == SplitHeads::Add::Grew);
  REQUIRE(h->contiguous == kA.size() + kB.size() + kC.size());
  REQUIRE(h->bytes.size() >= h->contiguous + SplitHeads::kSlack);
  CHECK_FALSE(pv.split_head(h->bytes.data(), h->contiguous, 40000, 80, true));
  CHECK(cookies(pv, h->bytes.data(), h->contiguous) == std::vector<std::string>{"sid=Qx7Lm2Rp9TvK4sWd"});
  heads.end(k, true);
  CHECK(heads.stats().held == 1);
  CHECK(heads.stats().completed == 1);
  CHECK(heads.size() == 0);
}

TEST_CASE("a head that never completes is read as far as it was whole", "[split_heads]") {
  register_once();
  PayloadValues pv;
  SplitHeads heads;
  SplitHeads::Head* h = heads.start("f", 5, u(kA), uint32_t(kA.size()), 1);
  REQUIRE(h);
  REQUIRE(heads.add(*h, uint32_t(5 + kA.size()), u(kB), uint32_t(kB.size()), 2) == SplitHeads::Add::Grew);
  CHECK(pv.split_head(h->bytes.data(), h->contiguous, 40000, 80, true));  // the blank line has not come
  // Read as a head the stream cut, its complete lines' values are found.
  CHECK(cookies(pv, h->bytes.data(), h->contiguous, true) == std::vector<std::string>{"sid=Qx7Lm2Rp9TvK4sWd"});
  std::vector<std::string> left;
  heads.expire(20ULL * 1000000000ULL, [&](const std::string& k, const SplitHeads::Head&) { left.push_back(k); });
  CHECK(left == std::vector<std::string>{"f"});
  CHECK(heads.stats().unfinished == 1);
}

TEST_CASE("split heads are bounded", "[split_heads]") {
  SplitHeads::Limits lim;
  lim.heads = 2, lim.bytes = 100, lim.segments = 3;
  SplitHeads heads(lim);
  const std::string b(60, 'x');
  SplitHeads::Head* h = heads.start("a", 0, u(b), 60, 1);
  REQUIRE(h);
  CHECK(heads.add(*h, 60, u(b), 60, 1) == SplitHeads::Add::Outside);            // past the bytes
  CHECK(heads.add(*h, 0xfffffff0u, u(b), 10, 1) == SplitHeads::Add::Outside);  // before the start
  CHECK(heads.add(*h, 60, u(b), 10, 1) == SplitHeads::Add::Grew);
  CHECK(heads.add(*h, 70, u(b), 10, 1) == SplitHeads::Add::Grew);
  CHECK(heads.add(*h, 80, u(b), 10, 1) == SplitHeads::Add::Outside);  // a fourth segment
  CHECK(heads.stats().outside == 3);
  CHECK(heads.start("b", 0, u(b), 10, 1));
  CHECK_FALSE(heads.start("c", 0, u(b), 10, 1));  // two heads at once
  CHECK_FALSE(heads.start("b", 0, u(b), 10, 1));  // one per direction
  CHECK(heads.stats().refused == 2);
  CHECK(heads.full());
  heads.flush([](const std::string&, const SplitHeads::Head&) {});
  CHECK(heads.size() == 0);
  CHECK(heads.stats().unfinished == 2);
}

TEST_CASE("a segment no holding plugin recognises starts no head", "[split_heads]") {
  register_once();
  PayloadValues pv;
  // A DNS length prefix longer than the segment, on a port not DNS's: the
  // DNS-over-TCP parse alone would ask to hold it.
  const std::string junk = std::string("\x40\x00", 2) + std::string(40, 'a');
  CHECK_FALSE(pv.split_head(u(junk), uint32_t(junk.size()), 40000, 9999, true));
  const std::string on53 = junk.substr(0, 2) + std::string(10, '\0');
  CHECK(pv.split_head(u(on53), 12, 40000, 53, true));
  // A TLS record on 443 whose first bytes pass DNS's message start (a
  // 0x1703-byte message, one question): TLS's by its port, and no head.
  const std::string rec = std::string("\x17\x03\x03\x01\x00\x00\x00\x01", 8) + std::string(40, 'r');
  CHECK_FALSE(pv.split_head(u(rec), uint32_t(rec.size()), 40000, 443, true));
  CHECK(pv.split_head(u(rec), uint32_t(rec.size()), 40000, 9999, true));  // on no one's port, DNS's by its start
}
