// The BGP plugin's parser on crafted messages: an OPEN's identifier and
// capabilities (ADD-PATH noted; unknown ones, other parameters refused);
// UPDATEs with every attribute that carries an address, prefixes of their
// stored length, MP_REACH/MP_UNREACH of IPv4 and IPv6 (next hops with a
// link-local address), ADD-PATH path identifiers known, settled by the
// prefixes or ambiguous; several messages in one payload, one cut at its
// end; the types, attributes, families and lengths refused. Then the
// plugin as the runtime calls it: the OPENs' negotiation kept in the
// flow's state, a cut message held, or masked once nothing more comes.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "amon_bgp.hpp"
#include "role_addr_parse.h"

using namespace amon;
using namespace amon_test;
namespace bg = amon::bgp_plugin;

namespace {

const Bytes kId = {10, 9, 0, 1}, kNh = {10, 9, 0, 2}, kAgg = {10, 9, 0, 3}, kOrig = {10, 9, 0, 4};
const Bytes kCl1 = {10, 9, 0, 5}, kCl2 = {10, 9, 0, 6}, kRt = {10, 9, 0, 7}, kAgg4 = {10, 9, 0, 8};
const Bytes kNh6 = {0x20, 0x01, 0x0d, 0xb8, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
const Bytes kLl6 = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0xff, 0xfe, 0, 0, 2};

Bytes msg(uint8_t type, const Bytes& body) {
  Bytes b(16, 0xff);
  put16(b, unsigned(19 + body.size()));
  b.push_back(type);
  put(b, body);
  return b;
}
Bytes cap(uint8_t code, const Bytes& v) {
  Bytes b{code, uint8_t(v.size())};
  put(b, v);
  return b;
}
Bytes open_msg(const std::vector<Bytes>& caps, const Bytes& id = kId) {
  Bytes params;
  for (const Bytes& c : caps) params.push_back(2), params.push_back(uint8_t(c.size())), put(params, c);
  Bytes b{4};
  put16(b, 65001), put16(b, 90), put(b, id);
  b.push_back(uint8_t(params.size()));
  put(b, params);
  return msg(1, b);
}
Bytes attr(uint8_t type, const Bytes& v, uint8_t flags = 0x40) {
  Bytes b{flags, type};
  if (flags & 0x10) put16(b, unsigned(v.size()));
  else b.push_back(uint8_t(v.size()));
  put(b, v);
  return b;
}
Bytes update(const Bytes& withdrawn, const std::vector<Bytes>& attrs, const Bytes& nlri) {
  Bytes a;
  for (const Bytes& x : attrs) put(a, x);
  Bytes b;
  put16(b, unsigned(withdrawn.size())), put(b, withdrawn);
  put16(b, unsigned(a.size())), put(b, a);
  put(b, nlri);
  return msg(2, b);
}
Bytes cat2(const Bytes& a, const Bytes& b) {
  Bytes x = a;
  put(x, b);
  return x;
}

std::vector<Bytes> found(const Bytes& m, bg::Result want = bg::Result::Ok, uint8_t modes = 0) {
  return found_addrs<bg::Parsed>(
      [&](const uint8_t* p, uint32_t n, bg::Parsed& r) { return bg::parse(p, n, modes, r); }, m, want);
}

// Every family without path identifiers, as two OPENs without ADD-PATH negotiate.
const uint8_t kPlain = bg::negotiated(0, 0);

}  // namespace

TEST_CASE("bgp: OPEN: the identifier; capabilities that hold numbers only") {
  const Bytes o = open_msg({cap(1, {0, 1, 0, 1}), cap(2, {}), cap(65, {0, 0, 0xfd, 0xe9}),
                            cap(64, {0x40, 0x78, 0, 1, 1, 0x80}), cap(69, {0, 2, 1, 3}), cap(70, {}), cap(6, {})});
  const auto v = found(o);
  REQUIRE(v.size() == 1);
  CHECK(v[0] == kId);
  static bg::Parsed r;
  uint8_t modes = 0;
  REQUIRE(bg::parse(o.data(), uint32_t(o.size()), modes, r) == bg::Result::Ok);
  CHECK(r.open);
  CHECK(r.addpath == 3 << 4);  // IPv6 unicast: receive and send
  // RFC 9072: the parameters' length in two bytes after 255, 255.
  Bytes ext{4, 0xfd, 0xe9, 0, 90};
  put(ext, kId), put(ext, {255, 255, 0, 9, 2, 0, 6});
  put(ext, cap(1, {0, 2, 0, 1}));
  CHECK(found(msg(1, ext)) == std::vector<Bytes>{kId});
}

TEST_CASE("bgp: OPEN: unknown capabilities, other parameters, bad lengths refused") {
  found(open_msg({cap(73, {3, 'r', 't', '1', 0})}), bg::Result::Malformed);  // FQDN: a name
  found(open_msg({cap(1, {0, 1, 0})}), bg::Result::Malformed);
  found(open_msg({cap(2, {0})}), bg::Result::Malformed);
  Bytes auth = open_msg({});
  auth[28] = 4, put(auth, {1, 2, 0xaa, 0xbb});  // an authentication parameter (type 1)
  auth[17] = uint8_t(auth.size());
  found(auth, bg::Result::Malformed);
  Bytes v3 = open_msg({});
  v3[19] = 3;
  found(v3, bg::Result::Malformed);
  Bytes longer = open_msg({cap(2, {})});
  longer[28] = 3;  // parameters' length short of the message's end
  found(longer, bg::Result::Malformed);
}

TEST_CASE("bgp: UPDATE: withdrawn routes, NLRI and every attribute that holds an address") {
  const Bytes u = update({24, 10, 9, 1, 20, 10, 9, 0x20},
                         {attr(1, {0}), attr(2, {2, 1, 0, 0, 0xfd, 0xe9}), attr(3, kNh), attr(4, {0, 0, 0, 5}, 0x80),
                          attr(5, {0, 0, 0, 100}), attr(6, {}), attr(7, cat2({0xfd, 0xe9}, kAgg), 0xc0),
                          attr(8, {0xfd, 0xe9, 0, 1}, 0xc0), attr(9, kOrig, 0x80), attr(10, cat2(kCl1, kCl2), 0x80),
                          attr(16, cat2(cat2({0x01, 0x02}, kRt), {0, 7}), 0xc0), attr(17, {2, 1, 0, 1, 0, 0}, 0xc0),
                          attr(18, cat2({0, 1, 0, 0}, kAgg4), 0xc0), attr(32, Bytes(12, 1), 0xc0),
                          attr(16, {0x00, 0x02, 0xfd, 0xe9, 0, 0, 0, 9, 0x43, 0x0b, 0, 0, 0, 0, 0, 1}, 0xc0)},
                         {32, 10, 9, 2, 1, 17, 10, 9, 0x80, 0});
  const auto v = found(u);
  REQUIRE(v.size() == 11);
  for (const Bytes& a : {kNh, kAgg, kOrig, kCl1, kCl2, kRt, kAgg4}) CHECK(has(v, a));
  CHECK(has(v, {10, 9, 1}));        // a /24: its three bytes
  CHECK(has(v, {10, 9, 0x20}));     // a /20
  CHECK(has(v, {10, 9, 2, 1}));     // a /32
  CHECK(has(v, {10, 9, 0x80}));     // a /17
  // The 4-byte AS form of AGGREGATOR, and one with the extended length flag.
  const auto w = found(update({}, {attr(7, cat2({0, 1, 0, 0}, kAgg), 0xd0), attr(3, kNh, 0x50)}, {}));
  CHECK(w == std::vector<Bytes>{kAgg, kNh});
  static bg::Parsed r;
  uint8_t modes = 0;
  REQUIRE(bg::parse(u.data(), uint32_t(u.size()), modes, r) == bg::Result::Ok);
  unsigned with_bits = 0;
  for (unsigned i = 0; i < r.addrs.n; ++i) with_bits += r.bits[i] != 0;
  CHECK(with_bits == 4);  // the prefixes, not the addresses
}

TEST_CASE("bgp: MP_REACH_NLRI and MP_UNREACH_NLRI of IPv4 and IPv6, unicast and multicast") {
  Bytes reach = {0, 2, 1, 32};
  put(reach, kNh6), put(reach, kLl6), put(reach, {0, 48, 0x20, 0x01, 0x0d, 0xb8, 0, 9, 64, 0x20, 0x01, 0x0d, 0xb8, 0, 9, 0, 1});
  const Bytes unreach = {0, 2, 2, 56, 0x20, 0x01, 0x0d, 0xb8, 0, 9, 7};
  const auto v = found(update({}, {attr(1, {0}), attr(14, reach, 0x80), attr(15, unreach, 0x80)}, {}));
  REQUIRE(v.size() == 5);
  CHECK(v[0] == kNh6);
  CHECK(v[1] == kLl6);
  CHECK(has(v, {0x20, 0x01, 0x0d, 0xb8, 0, 9}));
  CHECK(has(v, {0x20, 0x01, 0x0d, 0xb8, 0, 9, 0, 1}));
  CHECK(has(v, {0x20, 0x01, 0x0d, 0xb8, 0, 9, 7}));
  // IPv4 routes: an IPv4 next hop, and an IPv6 one (RFC 8950); multicast.
  Bytes r4 = {0, 1, 2, 4};
  put(r4, kNh), put(r4, {0, 24, 10, 9, 3});
  CHECK(found(update({}, {attr(14, r4, 0x80)}, {})) == std::vector<Bytes>{kNh, {10, 9, 3}});
  Bytes r46 = {0, 1, 1, 16};
  put(r46, kNh6), put(r46, {0, 8, 10});
  CHECK(found(update({}, {attr(14, r46, 0x80)}, {})) == std::vector<Bytes>{kNh6, {10}});
}

TEST_CASE("bgp: AIGP metrics and Only-to-Customer hold numbers only") {
  // RFC 7311's metric TLV and RFC 9234's OTC beside a next hop: the
  // message parses, the next hop its one address.
  const auto v = found(update({}, {attr(3, kNh), attr(26, {1, 0, 11, 0, 0, 0, 0, 0, 0, 0, 5}, 0x80),
                                   attr(35, {0, 0, 0xfd, 0xe9}, 0xc0)},
                              {24, 10, 9, 1}));
  CHECK(v == std::vector<Bytes>{kNh, {10, 9, 1}});
}

TEST_CASE("bgp: attributes, families and lengths not known refused") {
  auto bad = [](const std::vector<Bytes>& attrs, const Bytes& nlri = {}) {
    found(update({}, attrs, nlri), bg::Result::Malformed);
  };
  bad({attr(26, {2, 0, 11, 0, 0, 0, 0, 0, 0, 0, 5}, 0x80)});  // an AIGP TLV of an unknown type
  bad({attr(26, {1, 0, 12, 0, 0, 0, 0, 0, 0, 0, 5, 0}, 0x80)});
  bad({attr(26, {1, 0, 11, 0, 0, 0}, 0x80)});
  bad({attr(35, {0, 0, 0xfd}, 0xc0)});                        // OTC of 3 bytes
  bad({attr(16, {0x06, 0, 0, 0, 0, 0, 0, 1}, 0xc0)});         // EVPN extended community
  bad({attr(16, {0x80, 0x08, 10, 9, 0, 7, 0, 0}, 0xc0)});     // flow spec redirect to IP
  bad({attr(16, Bytes(7, 0), 0xc0)});
  // An End-of-RIB of any family holds no route; withdrawn VPN routes do.
  CHECK(found(update({}, {attr(15, {0, 1, 128}, 0x90)}, {})).empty());
  bad({attr(15, {0, 1, 128, 112, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 10, 9, 0}, 0x80)});
  Bytes vpn = {0, 1, 128, 12};
  put(vpn, Bytes(8, 0)), put(vpn, kNh), put(vpn, {0});
  bad({attr(14, vpn, 0x80)});                                 // L3VPN
  Bytes evpn = {0, 25, 70, 4};
  put(evpn, kNh), put(evpn, {0});
  bad({attr(14, evpn, 0x80)});                                // EVPN
  Bytes snpa = {0, 1, 1, 4};
  put(snpa, kNh), put(snpa, {1, 8, 10});                      // RFC 2858's SNPAs
  bad({attr(14, snpa, 0x80)});
  Bytes nh8 = {0, 1, 1, 8};
  put(nh8, Bytes(8, 1)), put(nh8, {0});
  bad({attr(14, nh8, 0x80)});
  bad({attr(3, {10, 9, 0})});
  bad({attr(7, {0, 1, 10, 9, 0})});
  bad({attr(10, {10, 9, 0, 5, 1})});
  bad({attr(18, kAgg4)});
  bad({attr(1, {0, 0})});
  bad({}, {33, 10, 9, 0, 0, 0});                              // a /33
  bad({}, {24, 10, 9});                                       // past its end
  Bytes over = update({}, {attr(3, kNh)}, {});
  over[22] = 40;                                              // attributes' length past the message
  found(over, bg::Result::Malformed);
}

TEST_CASE("bgp: ADD-PATH path identifiers: negotiated, settled by the prefixes, or ambiguous") {
  const Bytes with = update({}, {attr(3, kNh)}, {0, 0, 0, 1, 24, 10, 9, 4, 0, 0, 0, 2, 32, 10, 9, 4, 1});
  uint8_t all = 0;
  for (int f = 0; f < 4; ++f) bg::set_path_ids(all, f, bg::PathIds::With);
  const auto v = found(with, bg::Result::Ok, all);
  CHECK(v == std::vector<Bytes>{kNh, {10, 9, 4}, {10, 9, 4, 1}});
  found(with, bg::Result::Malformed, kPlain);
  // Not negotiated as far as the parse knows: the only reading that fits
  // is taken, and kept for the direction's later UPDATEs.
  static bg::Parsed r;
  uint8_t modes = 0;
  REQUIRE(bg::parse(with.data(), uint32_t(with.size()), modes, r) == bg::Result::Ok);
  CHECK(bg::path_ids(modes, 0) == bg::PathIds::With);
  CHECK(bg::path_ids(modes, 2) == bg::PathIds::Unknown);
  const Bytes plain = update({}, {attr(3, kNh)}, {24, 10, 9, 5});
  modes = 0;
  REQUIRE(bg::parse(plain.data(), uint32_t(plain.size()), modes, r) == bg::Result::Ok);
  CHECK(bg::path_ids(modes, 0) == bg::PathIds::Without);
  // Two /24s read as well with a path identifier (0x180a0905, then a /24):
  // no telling which, refused until the direction's mode is known.
  const Bytes both = update({}, {attr(3, kNh)}, {24, 10, 9, 5, 24, 10, 9, 6});
  found(both, bg::Result::Malformed);
  CHECK(found(both, bg::Result::Ok, kPlain).size() == 3);
  // MP_REACH's family is settled on its own.
  Bytes reach = {0, 2, 1, 16};
  put(reach, kNh6), put(reach, {0, 0, 0, 0, 9, 48, 0x20, 0x01, 0x0d, 0xb8, 0, 9});
  modes = 0;
  const Bytes mp = update({}, {attr(14, reach, 0x80)}, {});
  REQUIRE(bg::parse(mp.data(), uint32_t(mp.size()), modes, r) == bg::Result::Ok);
  CHECK(bg::path_ids(modes, 2) == bg::PathIds::With);
  CHECK(bg::path_ids(modes, 0) == bg::PathIds::Unknown);
  // What two OPENs negotiate: where one may send and the other receive.
  const uint8_t n = bg::negotiated(0x2 << 4 | 0x3, 0x1 << 4 | 0x2);
  CHECK(bg::path_ids(n, 0) == bg::PathIds::Without);  // the peer does not receive
  CHECK(bg::path_ids(n, 2) == bg::PathIds::With);
  CHECK(bg::path_ids(n, 1) == bg::PathIds::Without);
}

TEST_CASE("bgp: several messages in one payload; KEEPALIVE, ROUTE-REFRESH, NOTIFICATION") {
  const Bytes ka = msg(4, {}), rr = msg(5, {0, 1, 0, 1}), note = msg(3, {6, 2});
  Bytes all = cat2(cat2(ka, open_msg({})), cat2(rr, note));
  put(all, update({}, {attr(3, kNh)}, {}));
  CHECK(found(all) == std::vector<Bytes>{kId, kNh});
  found(msg(3, {6, 2, 5, 'b', 'y', 'e', '!', '!'}), bg::Result::Malformed);  // a shutdown communication
  found(msg(3, {3, 5, 0x40, 3, 4, 10, 9, 0, 2}), bg::Result::Malformed);       // quotes an attribute
  found(msg(5, {0, 1, 0, 1, 1, 0, 0}), bg::Result::Malformed);                  // ORF entries
  found(msg(4, {0}), bg::Result::Malformed);
  found(msg(6, {}), bg::Result::Malformed);
  Bytes marker = ka;
  marker[3] = 0;
  found(marker, bg::Result::Malformed);
}

TEST_CASE("bgp: a message cut at the payload's end") {
  const Bytes u = update({}, {attr(3, kNh)}, {24, 10, 9, 5});
  Bytes two = cat2(msg(4, {}), u);
  static bg::Parsed r;
  for (uint32_t cut = 20; cut < two.size(); ++cut) {
    uint8_t modes = kPlain;
    INFO(cut);
    REQUIRE(bg::parse(two.data(), cut, modes, r) == bg::Result::Cut);
    CHECK(r.end == 19);
    CHECK(r.need == (cut >= 19 + 19 ? two.size() - cut : 0));
    CHECK(r.addrs.n == 0);
  }
  uint8_t modes = kPlain;
  CHECK(bg::parse(two.data(), uint32_t(two.size()), modes, r) == bg::Result::Ok);
  Bytes junk = cat2(msg(4, {}), {0xff, 0xff, 0x12});
  CHECK(bg::parse(junk.data(), uint32_t(junk.size()), modes, r) == bg::Result::Malformed);
  CHECK(bg::message_start(u.data(), 19));
  CHECK_FALSE(bg::message_start(u.data(), 18));
  CHECK_FALSE(bg::message_start(u.data() + 1, uint32_t(u.size() - 1)));
}

TEST_CASE("bgp: the plugin: the OPENs' negotiation kept per flow, a cut message held or masked") {
  const ProtocolPlugin& pp = bg::protocol_plugin();
  void* st = pp.make_state();
  static ProtoOccs out;
  uint8_t fs[kAppStateBytes] = {};
  auto run = [&](const Bytes& b, bool init, bool ends = false) {
    ProtoPacket pkt{b.data(), uint32_t(b.size()), 50179, 179, nullptr, nullptr, 0, init, false, fs};
    pkt.ends = ends;
    out.clear();
    return pp.parse(st, pkt, out);
  };
  // The initiator sends path identifiers for IPv4 unicast; the peer receives them.
  CHECK(run(open_msg({cap(69, {0, 1, 1, 2})}), true) == ProtoStatus::Parsed);
  CHECK(run(open_msg({cap(69, {0, 1, 1, 1})}, kAgg), false) == ProtoStatus::Parsed);
  REQUIRE(out.n == 1);
  CHECK(out.occ[0].role);
  // Two /24s that read either way: the negotiation says which.
  const Bytes u = update({}, {attr(3, kNh)}, {0, 0, 0, 1, 24, 10, 9, 5});
  CHECK(run(u, true) == ProtoStatus::Parsed);
  REQUIRE(out.n == 2);
  CHECK(out.occ[1].off == u.size() - 3);
  CHECK(out.occ[1].fixup == false);
  // The other way, none: the same bytes read as a /1 and a /10.
  CHECK(run(u, false) == ProtoStatus::Parsed);
  CHECK(out.n == 3);
  // A /20: its last byte's low bits come back to after_action.
  const Bytes p20 = update({}, {}, {0, 0, 0, 1, 20, 10, 9, 0x2f});
  CHECK(run(p20, true) == ProtoStatus::Parsed);
  REQUIRE(out.n == 1);
  CHECK(out.occ[0].fixup);
  Bytes w = p20;
  pp.after_action(st, w.data(), out.occ[0]);
  CHECK(w.back() == 0x20);
  // Cut: held for the rest, with the bytes still to come; masked where nothing more comes.
  const Bytes two = cat2(msg(4, {}), u);
  const Bytes part(two.begin(), two.end() - 2);
  CHECK(run(part, true) == ProtoStatus::Incomplete);
  CHECK(out.hold);
  CHECK(out.need == 2);
  CHECK(run(part, true, true) == ProtoStatus::Parsed);
  CHECK(out.mask_from == 19);
  CHECK(out.n == 0);
  pp.free_state(st);
}
