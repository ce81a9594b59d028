// The OSPF plugin's parser on crafted packets: OSPFv2 Hellos and an update
// with router, network and AS-external LSAs; OSPFv3 Hellos and an update
// with a Link-LSA (link-local address, prefixes of their stored length)
// and an intra-area prefix LSA; opaque LSAs (TE, grace, router
// information, extended prefix and link; OSPFv3 TE) and OSPFv3 extended
// LSAs by their TLVs;
// malformed lengths, unknown TLVs and opaque types refused;
// the Fletcher checksum as routers compute it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "amon_ospf.hpp"
#include "role_addr_parse.h"
#include "bytes.h"

using namespace amon;
using namespace amon_test;
namespace op = amon::ospf_plugin;

namespace {

const Bytes kRid = {10, 1, 0, 1}, kNbr = {10, 1, 0, 2}, kDr = {10, 1, 0, 3};
const Bytes kLl = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0xff, 0xfe, 0, 0, 1};

Bytes packet(uint8_t v, uint8_t type, const Bytes& body) {
  Bytes b{v, type};
  put16(b, uint16_t((v == 3 ? 16 : 24) + body.size()));
  put(b, kRid);
  put32(b, 0);   // area
  put16(b, 0);   // checksum
  put16(b, 0);   // autype / instance
  if (v == 2) put(b, Bytes(8, 0));
  put(b, body);
  return b;
}
// An LSA with its header (age 1, the given type, link state ID, advertising
// router), its length and a right checksum.
Bytes lsa(uint8_t v, uint16_t type, const Bytes& lsid, const Bytes& body) {
  Bytes b;
  put16(b, 1);
  if (v == 2) b.push_back(0x22), b.push_back(uint8_t(type));
  else put16(b, type);
  put(b, lsid), put(b, kRid);
  put32(b, 0x80000001), put16(b, 0), put16(b, uint16_t(20 + body.size()));
  put(b, body);
  wr16(b.data() + 16, op::lsa_checksum(b.data(), uint32_t(b.size())));
  return b;
}
Bytes update(uint8_t v, const std::vector<Bytes>& lsas) {
  Bytes b;
  put32(b, uint32_t(lsas.size()));
  for (const Bytes& l : lsas) put(b, l);
  return packet(v, 4, b);
}
// The addresses found, as their bytes.
std::vector<Bytes> found(const Bytes& pkt, op::Result want = op::Result::Ok) {
  return found_addrs<op::Parsed>(op::parse, pkt, want);
}

}  // namespace

TEST_CASE("ospf: the Fletcher checksum of an LSA sums to zero") {
  const Bytes l = lsa(2, 1, kRid, {0, 0, 0, 1, 10, 1, 0, 2, 10, 1, 0, 1, 1, 0, 0, 10});
  uint32_t c0 = 0, c1 = 0;
  for (size_t i = 2; i < l.size(); ++i) c0 = (c0 + l[i]) % 255, c1 = (c1 + c0) % 255;
  CHECK(c0 == 0);
  CHECK(c1 == 0);
}

TEST_CASE("ospf: v2 Hello: router ID, DR, BDR, neighbours") {
  Bytes body = {255, 255, 255, 0, 0, 10, 2, 1, 0, 0, 0, 40};
  put(body, kDr), put(body, Bytes(4, 0)), put(body, kNbr);
  const auto v = found(packet(2, 1, body));
  REQUIRE(v.size() == 4);
  CHECK(v[0] == kRid);
  CHECK(has(v, kDr));
  CHECK(has(v, kNbr));
}

TEST_CASE("ospf: v2 update: router links (a stub's mask kept), network, AS-external forwarding address") {
  const Bytes transit = {10, 1, 0, 3, 10, 1, 0, 1, 2, 0, 0, 10};
  const Bytes stub = {10, 2, 0, 0, 255, 255, 0, 0, 3, 0, 0, 10};
  Bytes rbody = {0, 0, 0, 2};
  put(rbody, transit), put(rbody, stub);
  Bytes nbody = {255, 255, 255, 0};
  put(nbody, kRid), put(nbody, kNbr);
  Bytes ebody = {255, 255, 255, 0, 0x80, 0, 0, 20, 10, 7, 0, 9, 0, 0, 0, 0};
  const auto v = found(update(2, {lsa(2, 1, kRid, rbody), lsa(2, 2, kDr, nbody), lsa(2, 5, {10, 3, 0, 0}, ebody)}));
  CHECK(has(v, {10, 2, 0, 0}));
  CHECK(!has(v, {255, 255, 0, 0}));
  CHECK(has(v, kNbr));
  CHECK(has(v, {10, 7, 0, 9}));
  CHECK(has(v, {10, 3, 0, 0}));
}

TEST_CASE("ospf: v3 Link-LSA: link-local address and prefixes of their stored length") {
  Bytes body = {1, 0, 0, 0x13};
  put(body, kLl);
  put32(body, 2);
  put(body, {64, 0, 0, 0, 0xfd, 0, 0, 1, 0, 2, 0, 0});  // fd00:1:2::/64: 8 bytes
  put(body, {0, 0, 0, 0});                              // ::/0: no bytes
  Bytes ia = {0, 1, 0x20, 1};
  put(ia, {0, 0, 0, 0}), put(ia, kRid);
  put(ia, {128, 0, 0, 10, 0xfd, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7});
  static op::Parsed r;
  const Bytes pkt = update(3, {lsa(3, 0x0008, {0, 0, 0, 5}, body), lsa(3, 0x2009, {0, 0, 0, 0}, ia)});
  REQUIRE(op::parse(pkt.data(), uint32_t(pkt.size()), r) == op::Result::Ok);
  CHECK(r.n_lsa == 2);
  const auto v = found(pkt);
  CHECK(has(v, kLl));
  CHECK(has(v, {0xfd, 0, 0, 1, 0, 2, 0, 0}));
  CHECK(has(v, {0xfd, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}));
  CHECK(has(v, kRid));
}

TEST_CASE("ospf: v3 Hello and a request") {
  Bytes hello = {0, 0, 0, 5, 1, 0, 0, 0x13, 0, 10, 0, 40};
  put(hello, kDr), put(hello, Bytes(4, 0)), put(hello, kNbr);
  CHECK(has(found(packet(3, 1, hello)), kNbr));
  Bytes req = {0, 0, 0x20, 1, 0, 0, 0, 0};
  put(req, kNbr);
  CHECK(has(found(packet(3, 3, req)), kNbr));
}

TEST_CASE("ospf: malformed: lengths past their container, opaque LSAs, another version") {
  Bytes p = packet(2, 1, Bytes(20, 0));
  p[3] += 4;  // longer than the bytes
  found(p, op::Result::Malformed);
  found(update(2, {lsa(2, 10, {1, 0, 0, 1}, Bytes(8, 0))}), op::Result::Malformed);  // TLVs of type 0
  Bytes bad = update(3, {lsa(3, 0x0008, {0, 0, 0, 5}, Bytes(24, 0))});
  bad[bad.size() - 1] = 9;  // nine prefixes in none
  found(bad, op::Result::Malformed);
  // An AS-external LSA whose body ends inside its prefix's header.
  found(update(3, {lsa(3, 0x4005, {0, 0, 0, 1}, {0, 0, 0, 1})}), op::Result::Malformed);
  found(update(3, {lsa(3, 0x4005, {0, 0, 0, 1}, {0, 0, 0, 1, 0, 0})}), op::Result::Malformed);
  Bytes v4 = packet(2, 1, Bytes(20, 0));
  v4[0] = 4;
  found(v4, op::Result::Malformed);
}

namespace {

// A TLV: type, length, the value padded to 32 bits.
Bytes tlv(uint16_t t, const Bytes& v) {
  Bytes b;
  put16(b, t), put16(b, uint16_t(v.size()));
  put(b, v);
  while (b.size() % 4) b.push_back(0);
  return b;
}

const Bytes kLocal = {192, 0, 2, 1}, kRemote = {192, 0, 2, 2}, kTeRid = {10, 9, 9, 9};
const Bytes kLocal6 = {0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
const Bytes kRemote6 = {0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

// An OSPFv2 TE LSA (area-local opaque, opaque type 1): router address, a
// point-to-point link to kNbr with its interface addresses and numbers.
Bytes te_v2() {
  const Bytes link = cat({tlv(1, {1}), tlv(2, kNbr), tlv(3, kLocal), tlv(4, kRemote), tlv(5, {0, 0, 0, 10}),
                          tlv(6, {0x4c, 0x9c, 0x4b, 0x40}), tlv(9, {0, 0, 0, 1}), tlv(11, {0, 0, 0, 7, 0, 0, 0, 8})});
  return lsa(2, 10, {1, 0, 0, 7}, cat({tlv(1, kTeRid), tlv(2, link)}));
}

}  // namespace

TEST_CASE("ospf: v2 opaque TE LSA: router address, link ID, local and remote interface addresses") {
  static op::Parsed r;
  const Bytes pkt = update(2, {te_v2()});
  REQUIRE(op::parse(pkt.data(), uint32_t(pkt.size()), r) == op::Result::Ok);
  CHECK(r.n_lsa == 1);
  const auto v = found(pkt);
  for (const Bytes& a : {kTeRid, kNbr, kLocal, kRemote, kRid}) CHECK(has(v, a));
  CHECK_FALSE(has(v, {1, 0, 0, 7}));  // the opaque type and ID are no address
  CHECK(v.size() == 6);               // the packet's router ID, the advertising router and four
  // The same LSA's header in an acknowledgement: its link state ID is no address either.
  const Bytes te = te_v2();
  const Bytes ack = packet(2, 5, Bytes(te.begin(), te.begin() + 20));
  CHECK_FALSE(has(found(ack), {1, 0, 0, 7}));
}

TEST_CASE("ospf: v2 opaque grace, router information, extended prefix and link LSAs") {
  const Bytes grace = lsa(2, 9, {3, 0, 0, 0}, cat({tlv(1, {0, 0, 0, 120}), tlv(2, {1}), tlv(3, kLocal)}));
  const Bytes ri = lsa(2, 10, {4, 0, 0, 0}, cat({tlv(1, {0x60, 0, 0, 0}), tlv(8, {0})}));
  const Bytes pfx = lsa(2, 10, {7, 0, 0, 1}, tlv(1, cat({{1, 24, 0, 0x40}, {198, 51, 100, 0}, tlv(2, Bytes(8, 1))})));
  const Bytes ext_link =
      lsa(2, 10, {8, 0, 0, 1}, tlv(1, cat({{1, 0, 0, 0}, kNbr, kLocal, tlv(2, Bytes(7, 1)), tlv(3, cat({{0, 0, 0, 0}, kRemote, {0, 0, 1}}))})));
  static op::Parsed r;
  const Bytes pkt = update(2, {grace, ri, pfx, ext_link});
  REQUIRE(op::parse(pkt.data(), uint32_t(pkt.size()), r) == op::Result::Ok);
  CHECK(r.n_lsa == 4);
  const auto v = found(pkt);
  for (const Bytes& a : {kLocal, kNbr, kRemote, Bytes{198, 51, 100, 0}}) CHECK(has(v, a));
}

TEST_CASE("ospf: v3 TE and router information LSAs") {
  const Bytes link = cat({tlv(1, {1}), tlv(2, kNbr), tlv(18, cat({{0, 0, 0, 5}, kDr})), tlv(19, kLocal6), tlv(20, kRemote6)});
  const Bytes te = lsa(3, 0xa00a, {0, 0, 0, 1}, cat({tlv(3, kLocal6), tlv(2, link)}));
  const Bytes ri = lsa(3, 0xa00c, {0, 0, 0, 0}, tlv(1, {0x60, 0, 0, 0}));
  const auto v = found(update(3, {te, ri}));
  for (const Bytes& a : {kNbr, kDr, kLocal6, kRemote6}) CHECK(has(v, a));
}

TEST_CASE("ospf: opaque LSAs fail closed: unknown kinds and TLVs, lengths past their LSA, truncation") {
  // An opaque type of unknown layout (inter-AS TE), a TLV of unknown layout.
  found(update(2, {lsa(2, 10, {6, 0, 0, 1}, tlv(1, kLocal))}), op::Result::Malformed);
  found(update(2, {lsa(2, 10, {1, 0, 0, 1}, tlv(7, kLocal))}), op::Result::Malformed);
  // A host name (router information TLV 7) is not parsed: the packet fails.
  found(update(2, {lsa(2, 10, {4, 0, 0, 0}, tlv(7, {'r', '1'}))}), op::Result::Malformed);
  // A link sub-TLV of unknown layout; interface addresses of a wrong length.
  found(update(2, {lsa(2, 10, {1, 0, 0, 1}, tlv(2, tlv(12, kLocal)))}), op::Result::Malformed);
  found(update(2, {lsa(2, 10, {1, 0, 0, 1}, tlv(2, tlv(3, {192, 0, 2})))}), op::Result::Malformed);
  // IPv4 interface addresses in an OSPFv3 TE LSA.
  found(update(3, {lsa(3, 0xa00a, {0, 0, 0, 1}, tlv(2, tlv(3, kLocal)))}), op::Result::Malformed);
  // A TLV longer than its LSA; a link TLV longer than the sub-TLVs it holds.
  Bytes body = tlv(1, kTeRid);
  body[3] = 40;
  found(update(2, {lsa(2, 10, {1, 0, 0, 1}, body)}), op::Result::Malformed);
  Bytes inner = tlv(2, tlv(3, kLocal));
  inner[7] = 12;  // the sub-TLV claims past the link TLV's value
  found(update(2, {lsa(2, 10, {1, 0, 0, 1}, inner)}), op::Result::Malformed);
  // Every cut of a valid update fails.
  const Bytes pkt = update(2, {te_v2()});
  for (size_t n = 24; n < pkt.size(); ++n) {
    Bytes cut(pkt.begin(), pkt.begin() + long(n));
    wr16(cut.data() + 2, uint16_t(n));
    found(cut, op::Result::Malformed);
  }
}

TEST_CASE("ospf: v3 extended LSAs: the addresses of their TLVs and sub-TLVs") {
  const Bytes kFwd4 = {192, 0, 2, 9}, kDest = {10, 4, 4, 4}, kLanNbr = {10, 5, 5, 5}, kRef = {10, 6, 6, 6};
  const Bytes kLl4 = {169, 254, 0, 7};
  // Router link: type, metric, interface IDs, the neighbour's router ID; a LAN adjacency SID naming kLanNbr.
  const Bytes rlink = tlv(1, cat({{2, 0, 0, 10, 0, 0, 0, 1, 0, 0, 0, 2}, kNbr, tlv(6, cat({{0, 0, 0, 0}, kLanNbr, {0, 0, 9}}))}));
  const Bytes e_router = lsa(3, 0xa021, {0, 0, 0, 0}, cat({{0, 0, 0, 0x13}, rlink}));
  const Bytes e_network = lsa(3, 0xa022, {0, 0, 0, 5}, cat({{0, 0, 0, 0x13}, tlv(2, cat({kRid, kDr}))}));
  const Bytes pfx64 = {0, 0, 0, 10, 64, 0, 0, 0, 0xfd, 0, 0, 1, 0, 3, 0, 0};  // metric, fd00:1:3::/64
  const Bytes e_iap = lsa(3, 0xa023, {0, 0, 0, 1}, tlv(3, pfx64));
  const Bytes e_iar = lsa(3, 0xa024, {0, 0, 0, 2}, tlv(4, cat({{0, 0, 0, 0x13, 0, 0, 0, 10}, kDest})));
  const Bytes ext = cat({{0, 0, 0, 20, 48, 0, 0, 0, 0x20, 1, 0xd, 0xb8, 0, 7}, {0, 0}, tlv(1, kRemote6), tlv(2, kFwd4), tlv(3, {0, 0, 0, 1})});
  const Bytes e_ase = lsa(3, 0xc025, {0, 0, 0, 3}, tlv(5, ext));
  const Bytes e_link = lsa(3, 0x8028, {0, 0, 0, 5}, cat({{1, 0, 0, 0x13}, tlv(7, kLocal6), tlv(8, kLl4), tlv(6, pfx64)}));
  const Bytes e_intra = lsa(3, 0xa029, {0, 0, 0, 0}, cat({{0, 0, 0x20, 1, 0, 0, 0, 0}, kRef, tlv(6, pfx64)}));
  static op::Parsed r;
  const Bytes pkt = update(3, {e_router, e_network, e_iap, e_iar, e_ase, e_link, e_intra});
  REQUIRE(op::parse(pkt.data(), uint32_t(pkt.size()), r) == op::Result::Ok);
  CHECK(r.n_lsa == 7);
  const auto v = found(pkt);
  for (const Bytes& a : {kNbr, kLanNbr, kRid, kDr, kDest, kRemote6, kFwd4, kLocal6, kLl4, kRef}) CHECK(has(v, a));
  CHECK(has(v, {0xfd, 0, 0, 1, 0, 3, 0, 0}));        // a /64: its 8 stored bytes
  CHECK(has(v, {0x20, 1, 0xd, 0xb8, 0, 7, 0, 0}));  // a /48 stored in two words
}

TEST_CASE("ospf: v3 extended LSAs fail closed: TLVs and sub-TLVs of unknown layout, short values") {
  found(update(3, {lsa(3, 0xa021, {0, 0, 0, 0}, cat({{0, 0, 0, 0}, tlv(9, kLocal)}))}), op::Result::Malformed);
  const Bytes unknown_sub = tlv(1, cat({{2, 0, 0, 10, 0, 0, 0, 1, 0, 0, 0, 2}, kNbr, tlv(30, kLocal)}));
  found(update(3, {lsa(3, 0xa021, {0, 0, 0, 0}, cat({{0, 0, 0, 0}, unknown_sub}))}), op::Result::Malformed);
  found(update(3, {lsa(3, 0xa024, {0, 0, 0, 2}, tlv(4, {0, 0, 0, 0, 0, 0, 0, 1}))}), op::Result::Malformed);
  found(update(3, {lsa(3, 0x8028, {0, 0, 0, 5}, cat({{1, 0, 0, 0x13}, tlv(7, Bytes(8, 0xfe))}))}), op::Result::Malformed);
  // A prefix longer than its TLV; a forwarding address of the wrong length.
  found(update(3, {lsa(3, 0xa023, {0, 0, 0, 1}, tlv(3, {0, 0, 0, 10, 128, 0, 0, 0, 0xfd, 0, 0, 1}))}), op::Result::Malformed);
  found(update(3, {lsa(3, 0xc025, {0, 0, 0, 3}, tlv(5, cat({{0, 0, 0, 20, 0, 0, 0, 0}, tlv(2, {192, 0, 2})})))}),
        op::Result::Malformed);
  // An E-intra-area prefix LSA too short for its referenced LSA.
  found(update(3, {lsa(3, 0xa029, {0, 0, 0, 0}, {0, 0, 0x20, 1, 0, 0, 0, 0})}), op::Result::Malformed);
}
