// DHCPv4 / DHCPv6 parser and rewriters: crafted messages with known bytes,
// malformed and truncated messages (fail closed), rewrite round trips, the
// registry declarations.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "amon_dhcp.hpp"
#include "dhcp_samples.hpp"
#include "keyed_hash.h"
#include "registry.h"

using namespace amon;
using namespace amon::l7test;
using namespace amon::l7test::dhcpb;
using dhcp::Field;
using dhcp::Kind;
using dhcp::Status;

namespace {

std::unique_ptr<dhcp::Result> parsed(const Bytes& m, bool v6, Status want = Status::Ok) {
  auto r = std::make_unique<dhcp::Result>();
  const Status s = dhcp::parse(m.data(), m.size(), v6 ? dhcp::Version::V6 : dhcp::Version::V4, *r);
  CAPTURE(dhcp::error_name(r->error), r->error_off);
  REQUIRE(s == want);
  return r;
}

struct Want {
  Field f;
  Kind k;
  uint16_t option;
  size_t off, len;
};

// Offset of the first occurrence of `needle` in `hay` (test helper).
size_t find_at(const Bytes& hay, const Bytes& needle, size_t from = 0) {
  auto it = std::search(hay.begin() + long(from), hay.end(), needle.begin(), needle.end());
  REQUIRE(it != hay.end());
  return size_t(it - hay.begin());
}

std::array<uint8_t, 16> test_key() {
  std::array<uint8_t, 16> k;
  for (unsigned i = 0; i < 16; ++i) k[i] = uint8_t(i * 7 + 1);
  return k;
}

// Rewrites every occurrence the way a protecting policy would: names masked,
// identifiers hashed, MACs pseudonymised, addresses bit-inverted (the
// address action is the runtime's; any bijection serves here).
void protect_all(Bytes& m, const dhcp::Result& r, KeyedHash& h) {
  for (unsigned i = 0; i < r.n_occ; ++i) {
    const dhcp::Occurrence& o = r.occ[i];
    switch (o.kind) {
      case Kind::NameText:
      case Kind::NameWire: dhcp::rewrite_name(m.data(), r, o, names::Decision::mask(0x5eed)); break;
      case Kind::Bytes:
      case Kind::Text: dhcp::hash_identifier(h, m.data(), o); break;
      case Kind::Mac: h.anon_mac(m.data() + o.off, m.data() + o.off); break;
      case Kind::Addr4:
      case Kind::Addr6:
      case Kind::Prefix6:
        for (unsigned k = 0; k < o.len; ++k) m[o.off + k] = uint8_t(~m[o.off + k]);
        dhcp::fix_prefix(m.data(), o);
        break;
    }
  }
}

}  // namespace

TEST_CASE("dhcp: recognition by ports and by content") {
  using dhcp::Version;
  CHECK(dhcp::version_for_ports(68, 67) == Version::V4);
  CHECK(dhcp::version_for_ports(67, 67) == Version::V4);
  CHECK(dhcp::version_for_ports(40000, 67) == Version::V4);
  CHECK(dhcp::version_for_ports(546, 547) == Version::V6);
  CHECK(dhcp::version_for_ports(547, 547) == Version::V6);
  CHECK(dhcp::version_for_ports(53, 40000) == Version::None);
  const Bytes d = v4_discover();
  CHECK(dhcp::probe(d.data(), d.size()) == Version::V4);
  CHECK(dhcp::probe(d.data(), 239) == Version::None);
  Bytes x = d;
  x[238] ^= 1;  // cookie
  CHECK(dhcp::probe(x.data(), x.size()) == Version::None);
  x = d;
  x[0] = 3;
  CHECK(dhcp::probe(x.data(), x.size()) == Version::None);
  const Bytes s6 = v6_solicit();
  CHECK(dhcp::probe(s6.data(), s6.size()) == Version::None);
}

TEST_CASE("dhcp: v4 discover, every located field") {
  const Bytes m = v4_discover();
  auto r = parsed(m, false);
  CHECK(r->msg_type == 1);
  CHECK_FALSE(r->bootp);
  CHECK_FALSE(r->missing_end);
  const size_t host = find_at(m, str("Alices-Laptop")), fq = find_at(m, fqdn_wire("alices-laptop.corp.example.com"));
  const std::vector<Want> want = {
      {Field::Addr, Kind::Addr4, 0, 12, 4},
      {Field::Addr, Kind::Addr4, 0, 16, 4},
      {Field::Chaddr, Kind::Mac, 0, 28, 6},
      {Field::ClientId, Kind::Bytes, 61, find_at(m, cat(bytes({61, 7, 1}), kMac)) + 2, 7},
      {Field::Hostname, Kind::NameText, 12, host, 13},
      {Field::VendorClass, Kind::Text, 60, find_at(m, str("MSFT 5.0")), 8},
      {Field::Addr, Kind::Addr4, 50, find_at(m, bytes({192, 0, 2, 77})), 4},
      {Field::Hostname, Kind::NameWire, 81, fq, 32},
      {Field::ClientId, Kind::Bytes, 97, find_at(m, bytes({97, 17, 0})) + 2, 17},
      {Field::RelayId, Kind::Bytes, 82, find_at(m, str("eth0/1/7:vlan42")), 15},
      {Field::RelayId, Kind::Bytes, 82, find_at(m, bytes({0x00, 0x11, 0x22, 0x33, 0x44, 0x55})), 6},
  };
  REQUIRE(r->n_occ == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    const auto& o = r->occ[i];
    CHECK(o.field == want[i].f);
    CHECK(o.kind == want[i].k);
    CHECK(o.option == want[i].option);
    CHECK(o.off == want[i].off);
    CHECK(o.len == want[i].len);
    CHECK(o.depth == 0);
  }
  CHECK(r->name_text(r->occ[4]) == "alices-laptop");
  CHECK(r->name_text(r->occ[7]) == "alices-laptop.corp.example.com");
  CHECK(r->occ[7].n_labels == 4);
  CHECK(r->occ[3].tag_len == 1);
  CHECK(r->occ[3].mac_off == r->occ[3].off + 1);  // type 1: Ethernet MAC follows
  CHECK(r->occ[8].mac_off == 0);
  CHECK(std::string(dhcp::field_name(Field::Hostname)) == "dhcp.hostname");
}

TEST_CASE("dhcp: v4 options overloaded into file and sname") {
  const Bytes m = v4_ack_overload();
  auto r = parsed(m, false);
  CHECK(r->msg_type == 5);
  CHECK(r->overload == 3);
  bool host_in_file = false, cid_in_sname = false, ascii_fqdn = false;
  for (unsigned i = 0; i < r->n_occ; ++i) {
    const auto& o = r->occ[i];
    if (o.option == 12) {
      host_in_file = o.area == 1 && o.off == 108 + 2 && o.len == 13;
      CHECK(r->name_text(o) == "alices-laptop");
    }
    if (o.option == 61) cid_in_sname = o.area == 2 && o.off == 44 + 2 && o.mac_off == 44 + 3;
    if (o.option == 81) {
      ascii_fqdn = o.kind == Kind::NameText && o.area == 0;
      CHECK(r->name_text(o) == "alices-laptop.corp.example.com");
    }
  }
  CHECK(host_in_file);
  CHECK(cid_in_sname);
  CHECK(ascii_fqdn);

  SECTION("without option 52 the same bytes are a server name and a file name, not options") {
    Bytes n = m;
    const size_t at = find_at(n, bytes({52, 1, 3}), 240);
    n[at] = 0, n[at + 1] = 0, n[at + 2] = 0;  // pad
    auto r2 = parsed(n, false);
    for (unsigned i = 0; i < r2->n_occ; ++i) CHECK(r2->occ[i].area != 1);
    CHECK(r2->overload == 0);
  }
}

TEST_CASE("dhcp: Broadband Forum serial numbers and product classes") {
  SECTION("DHCPv4 options 124 and 125") {
    const Bytes m = v4_request_cpe();
    auto r = parsed(m, false);
    std::vector<std::pair<std::string, Field>> got;
    for (unsigned i = 0; i < r->n_occ; ++i)
      if (r->occ[i].option >= 124) {
        CHECK(r->occ[i].kind == Kind::Text);
        got.push_back({std::string(m.begin() + r->occ[i].off, m.begin() + r->occ[i].off + r->occ[i].len), r->occ[i].field});
      }
    const std::vector<std::pair<std::string, Field>> want = {
        {"SN123456789", Field::ClientId}, {"HGW-5", Field::VendorClass}, {"GW-SERIAL-42", Field::ClientId},
        {"STB", Field::VendorClass},      {"dslforum", Field::VendorClass}, {"hgw", Field::VendorClass}};
    CHECK(got == want);
  }
  SECTION("DHCPv6 option 17") {
    const Bytes m = v6_inforeq_cpe();
    auto r = parsed(m, true);
    REQUIRE(r->n_occ == 3);
    CHECK(r->occ[1].field == Field::ClientId);
    CHECK(r->occ[1].off == find_at(m, str("SER-V6-77")));
    CHECK(r->occ[2].field == Field::VendorClass);
    CHECK(r->occ[2].len == 3);
  }
}

TEST_CASE("dhcp: BOOTP without options, chaddr of other lengths") {
  Bytes m = v4_header(1, kMac);
  auto r = parsed(m, false);
  CHECK(r->bootp);
  CHECK(r->n_occ == 3);
  Bytes ib = v4_header(1, Bytes(16, 0xab));  // a 16-byte hardware address
  cookie(ib);
  ib.push_back(255);
  r = parsed(ib, false);
  REQUIRE(r->n_occ == 3);
  CHECK(r->occ[2].field == Field::Chaddr);
  CHECK(r->occ[2].kind == Kind::Bytes);
  CHECK(r->occ[2].len == 16);
  Bytes none = v4_header(1, {});  // hlen 0 (InfiniBand, RFC 4390)
  r = parsed(none, false);
  CHECK(r->n_occ == 2);
}

TEST_CASE("dhcp: v4 without End is accepted (areas are bounded) and noted") {
  Bytes m = v4_header(1, kMac);
  cookie(m);
  opt(m, 12, str("host"));
  auto r = parsed(m, false);
  CHECK(r->missing_end);
  CHECK(r->n_occ == 4);
}

TEST_CASE("dhcp: v4 malformed and truncated fail closed") {
  struct Case {
    const char* what;
    Bytes m;
    Status want;
  };
  auto with = [](std::initializer_list<Bytes> opts) {
    Bytes b = v4_header(1, kMac);
    cookie(b);
    for (const Bytes& o : opts) b = cat(b, o);
    return b;
  };
  Bytes bad_cookie = with({bytes({255})});
  bad_cookie[236] = 0x63;
  bad_cookie[239] = 0x64;
  Bytes bad_op = with({bytes({255})});
  bad_op[0] = 3;
  Bytes bad_hlen = with({bytes({255})});
  bad_hlen[2] = 17;
  Bytes ov_sname = v4_header(1, kMac);
  ov_sname[44] = 52, ov_sname[45] = 1, ov_sname[46] = 1;
  cookie(ov_sname);
  opt(ov_sname, 52, bytes({2}));
  ov_sname.push_back(255);
  Bytes ov_file_past = v4_header(1, kMac);
  ov_file_past[108 + 127] = 12;  // its length byte would be past the file field
  cookie(ov_file_past);
  opt(ov_file_past, 52, bytes({1}));
  ov_file_past.push_back(255);
  Bytes ov_file_value_past = v4_header(1, kMac);
  ov_file_value_past[108 + 120] = 12, ov_file_value_past[108 + 121] = 10;  // value crosses into nothing
  cookie(ov_file_value_past);
  opt(ov_file_value_past, 52, bytes({1}));
  ov_file_value_past.push_back(255);
  const std::vector<Case> cases = {
      {"shorter than the header", Bytes(235, 0), Status::Truncated},
      {"cookie cut", Bytes(238, 1), Status::Truncated},
      {"wrong cookie", bad_cookie, Status::Malformed},
      {"op 3", bad_op, Status::Malformed},
      {"hlen 17", bad_hlen, Status::Malformed},
      {"option length past the end", with({bytes({12, 20, 'a', 'b'})}), Status::Malformed},
      {"option code with no length byte", with({bytes({12})}), Status::Malformed},
      {"requested address of 3 bytes", with({bytes({50, 3, 1, 2, 3, 255})}), Status::Malformed},
      {"associated addresses of 6 bytes", with({bytes({92, 6, 10, 0, 0, 1, 10, 0, 255})}), Status::Malformed},
      {"associated addresses of none", with({bytes({92, 0, 255})}), Status::Malformed},
      {"overload 4", with({bytes({52, 1, 4, 255})}), Status::Malformed},
      {"overload of 2 bytes", with({bytes({52, 2, 1, 1, 255})}), Status::Malformed},
      {"overload twice", with({bytes({52, 1, 1, 52, 1, 1, 255})}), Status::Malformed},
      {"overload inside sname", ov_sname, Status::Malformed},
      {"option past the end of the file field", ov_file_past, Status::Malformed},
      {"option value past the end of the file field", ov_file_value_past, Status::Malformed},
      {"FQDN shorter than its flags", with({bytes({81, 2, 4, 0, 255})}), Status::Malformed},
      {"FQDN label of 64", with({cat(bytes({81, 3 + 65, 4, 0, 0, 64}), Bytes(64, 'a'))}), Status::Malformed},
      {"FQDN compression pointer", with({bytes({81, 8, 4, 0, 0, 1, 'a', 0xc0, 0x0c, 0})}), Status::Malformed},
      {"FQDN bytes after the root", with({bytes({81, 7, 4, 0, 0, 1, 'a', 0, 'x', 255})}), Status::Malformed},
      {"FQDN label past the option", with({bytes({81, 6, 4, 0, 0, 5, 'a', 'b', 255})}), Status::Malformed},
      {"FQDN twice (split, RFC 3396)", with({bytes({81, 5, 4, 0, 0, 1, 'a', 81, 4, 4, 0, 0, 0, 255})}),
       Status::Malformed},
      {"relay sub-option past its option", with({bytes({82, 4, 1, 5, 'a', 'b', 255})}), Status::Malformed},
      {"relay sub-option code only", with({bytes({82, 1, 1, 255})}), Status::Malformed},
      {"V-I vendor class data past the option", with({bytes({124, 6, 0, 0, 0x0d, 0xe9, 2, 1, 255})}), Status::Malformed},
      {"V-I vendor class item past its data", with({bytes({124, 7, 0, 0, 0x0d, 0xe9, 2, 4, 'a', 255})}),
       Status::Malformed},
      {"V-I vendor class enterprise cut", with({bytes({124, 3, 0, 0, 0x0d, 255})}), Status::Malformed},
      {"TR-111 sub-option past its data", with({bytes({125, 8, 0, 0, 0x0d, 0xe9, 3, 2, 5, 'a', 255})}),
       Status::Malformed},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    dhcp::Result r;
    CHECK(dhcp::parse(c.m.data(), c.m.size(), dhcp::Version::V4, r) == c.want);
    CHECK(r.error != dhcp::Error::None);
  }
  // A leasequery reply's associated addresses (RFC 4388) are the client's:
  // each is dhcp.addr.
  const Bytes lq = with({bytes({53, 1, 13, 92, 8, 10, 50, 4, 4, 10, 50, 4, 5, 255})});
  auto lr = parsed(lq, false);
  std::vector<size_t> assoc;
  for (unsigned i = 0; i < lr->n_occ; ++i)
    if (lr->occ[i].option == 92) {
      CHECK(lr->occ[i].field == Field::Addr);
      CHECK(lr->occ[i].kind == Kind::Addr4);
      CHECK(lr->occ[i].len == 4);
      assoc.push_back(lr->occ[i].off);
    }
  CHECK(assoc == std::vector<size_t>{find_at(lq, bytes({10, 50, 4, 4})), find_at(lq, bytes({10, 50, 4, 5}))});
  // Relay sub-options that do fit are fine, as are ones the parser does not name,
  // and another enterprise's vendor-specific data is not read.
  auto ok = parsed(with({bytes({82, 8, 5, 4, 10, 0, 0, 0, 9, 0, 255})}), false);
  CHECK(ok->n_occ == 3);
  ok = parsed(with({bytes({125, 8, 0, 0, 1, 0x37, 3, 2, 5, 'a', 255})}), false);
  CHECK(ok->n_occ == 3);
}

TEST_CASE("dhcp: v6 solicit, reply, nested relays, DHCPv4 over DHCPv6") {
  SECTION("solicit") {
    const Bytes m = v6_solicit();
    auto r = parsed(m, true);
    CHECK(r->msg_type == 1);
    std::vector<std::pair<Field, Kind>> got;
    for (unsigned i = 0; i < r->n_occ; ++i) got.push_back({r->occ[i].field, r->occ[i].kind});
    const std::vector<std::pair<Field, Kind>> want = {
        {Field::ClientId, Kind::Bytes}, {Field::Addr, Kind::Addr6},       {Field::Addr, Kind::Addr6},
        {Field::Addr, Kind::Prefix6},   {Field::Hostname, Kind::NameWire}, {Field::VendorClass, Kind::Text},
        {Field::VendorClass, Kind::Text}};
    CHECK(got == want);
    const auto& cid = r->occ[0];
    CHECK(cid.off == find_at(m, duid_llt()));
    CHECK(cid.len == 14);
    CHECK(cid.tag_len == 4);
    CHECK(cid.mac_off == cid.off + 8);
    CHECK(r->occ[1].depth == 1);
    CHECK(r->occ[3].prefix_len == 56);
    CHECK(r->name_text(r->occ[4]) == "alices-laptop.corp.example.com");
    CHECK(r->occ[5].off == find_at(m, str("MSFT 5.0")));
    CHECK(r->occ[6].off == find_at(m, str("Laptop")));
  }
  SECTION("reply: the server DUID is its own field") {
    const Bytes m = v6_reply();
    auto r = parsed(m, true);
    REQUIRE(r->n_occ == 3);
    CHECK(r->occ[1].field == Field::ServerId);
    CHECK(r->occ[1].tag_len == 4);
    CHECK(r->occ[1].mac_off == r->occ[1].off + 4);  // DUID-LL
  }
  SECTION("two relays") {
    const Bytes m = v6_relayed();
    auto r = parsed(m, true);
    CHECK(r->msg_type == 12);
    const Bytes inner = v6_solicit();
    const size_t at = find_at(m, inner);
    auto ri = parsed(inner, true);
    unsigned relay_ids = 0, peers = 0, macs = 0, shifted = 0;
    for (unsigned i = 0; i < r->n_occ; ++i) {
      const auto& o = r->occ[i];
      if (o.field == Field::RelayId) ++relay_ids;
      if (o.field == Field::Addr && o.option == 0) ++peers;
      if (o.field == Field::Chaddr && o.option == 79) {
        ++macs;
        CHECK(o.kind == Kind::Mac);
        CHECK(o.depth == 1);
      }
      if (o.depth == 2 || (o.depth == 3 && o.field == Field::Addr)) {
        // the Solicit's own occurrences, shifted by where it sits
        for (unsigned k = 0; k < ri->n_occ; ++k)
          if (ri->occ[k].off + at == o.off && ri->occ[k].len == o.len && ri->occ[k].field == o.field) ++shifted;
      }
    }
    CHECK(relay_ids == 3);  // interface-id, remote-id, subscriber-id
    CHECK(peers == 2);
    CHECK(macs == 1);
    CHECK(shifted == ri->n_occ);
    for (unsigned i = 0; i < r->n_occ; ++i)
      if (r->occ[i].option == 37) CHECK(r->occ[i].tag_len == 4);
  }
  SECTION("DHCPv4 over DHCPv6 carries the DHCPv4 occurrences") {
    const Bytes m = v6_4o6();
    auto r = parsed(m, true);
    const Bytes inner = v4_discover();
    auto ri = parsed(inner, false);
    REQUIRE(r->n_occ == ri->n_occ);
    for (unsigned i = 0; i < r->n_occ; ++i) {
      CHECK(r->occ[i].off == ri->occ[i].off + 8);
      CHECK(r->occ[i].field == ri->occ[i].field);
      CHECK(r->occ[i].depth == 1);
    }
    CHECK(r->msg_type == 20);
  }
}

TEST_CASE("dhcp: v6 malformed fails closed") {
  auto msg = [](std::initializer_list<Bytes> opts) {
    Bytes b = v6_msg(1);
    for (const Bytes& o : opts) b = cat(b, o);
    return b;
  };
  Bytes deep = v6_solicit();
  for (int i = 0; i < 20; ++i) {
    Bytes r = relay6(12, uint8_t(i), addr6(0x2001, 1), addr6(0xfe80, 1));
    opt6(r, 9, deep);
    deep = r;
  }
  Bytes short_relay = relay6(12, 0, addr6(0x2001, 1), addr6(0xfe80, 1));
  short_relay.resize(30);
  Bytes nested_short = relay6(12, 0, addr6(0x2001, 1), addr6(0xfe80, 1));
  opt6(nested_short, 9, bytes({12, 0, 1, 2}));
  struct Case {
    const char* what;
    Bytes m;
    Status want;
  };
  const std::vector<Case> cases = {
      {"empty", {}, Status::Truncated},
      {"header cut", bytes({1, 2}), Status::Truncated},
      {"relay header cut", short_relay, Status::Truncated},
      {"relayed message too short for its relay header", nested_short, Status::Malformed},
      {"option header cut", msg({bytes({0, 1, 0})}), Status::Malformed},
      {"option length past the end", msg({bytes({0, 1, 0, 20, 0, 1})}), Status::Malformed},
      {"IA_NA shorter than IAID+T1+T2", msg({o6(3, Bytes(11, 0))}), Status::Malformed},
      {"IA_TA shorter than its IAID", msg({o6(4, Bytes(3, 0))}), Status::Malformed},
      {"IAADDR shorter than address+lifetimes", msg({o6(3, cat(Bytes(12, 0), o6(5, Bytes(23, 0))))}),
       Status::Malformed},
      {"IAADDR past its IA_NA", msg({cat(bytes({0, 3, 0, 16}), cat(Bytes(12, 0), bytes({0, 5, 0, 24})))}),
       Status::Malformed},
      {"IAPREFIX length 129", msg({o6(25, cat(Bytes(12, 0), o6(26, cat(bytes({0, 0, 0, 0, 0, 0, 0, 0, 129}), Bytes(16, 0)))))}),
       Status::Malformed},
      {"vendor class item past the option", msg({o6(16, bytes({0, 0, 1, 0x37, 0, 9, 'a'}))}), Status::Malformed},
      {"vendor class without enterprise", msg({o6(16, bytes({0, 0}))}), Status::Malformed},
      {"remote-id without enterprise", msg({o6(37, bytes({0, 0, 1}))}), Status::Malformed},
      {"FQDN with a pointer", msg({o6(39, bytes({0, 1, 'a', 0xc0, 4}))}), Status::Malformed},
      {"FQDN bytes after the root", msg({o6(39, bytes({0, 1, 'a', 0, 1}))}), Status::Malformed},
      {"FQDN empty option", msg({o6(39, {})}), Status::Malformed},
      {"relay nesting deeper than the limit", deep, Status::Malformed},
      {"DHCPv4-message too short", msg({o6(87, Bytes(100, 0))}), Status::Malformed},
      {"client link-layer address without type", msg({o6(79, bytes({0}))}), Status::Malformed},
      {"vendor-specific information without enterprise", msg({o6(17, bytes({0, 0, 0x0d}))}), Status::Malformed},
      {"TR-124 sub-option past the option", msg({o6(17, bytes({0, 0, 0x0d, 0xe9, 0, 12, 0, 9, 'S'}))}),
       Status::Malformed},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    dhcp::Result r;
    CHECK(dhcp::parse(c.m.data(), c.m.size(), dhcp::Version::V6, r) == c.want);
    CHECK(r.error != dhcp::Error::None);
  }
}

TEST_CASE("dhcp: every prefix of a message either fails or finds a subset") {
  // A capture cut anywhere (snaplen, a first fragment) must never make the
  // parser see something the full message does not have.
  auto full = std::make_unique<dhcp::Result>();
  auto cut = std::make_unique<dhcp::Result>();
  for (const Sample& s : samples()) {
    CAPTURE(s.name);
    const dhcp::Version v = s.v6 ? dhcp::Version::V6 : dhcp::Version::V4;
    REQUIRE(dhcp::parse(s.msg.data(), s.msg.size(), v, *full) == Status::Ok);
    unsigned failed = 0;
    for (size_t n = 0; n < s.msg.size(); ++n) {
      if (dhcp::parse(s.msg.data(), n, v, *cut) != Status::Ok) {
        ++failed;
        continue;
      }
      for (unsigned i = 0; i < cut->n_occ; ++i) {
        bool found = false;
        for (unsigned k = 0; k < full->n_occ && !found; ++k)
          found = full->occ[k].off == cut->occ[i].off && full->occ[k].len == cut->occ[i].len &&
                  full->occ[k].field == cut->occ[i].field && full->occ[k].kind == cut->occ[i].kind;
        CAPTURE(n, i);
        CHECK(found);
      }
    }
    CHECK(failed > 0);
  }
}

TEST_CASE("dhcp: rewriting keeps every length and structure") {
  KeyedHash h(test_key());
  auto r = std::make_unique<dhcp::Result>();
  auto r2 = std::make_unique<dhcp::Result>();
  for (const Sample& s : samples()) {
    CAPTURE(s.name);
    const dhcp::Version v = s.v6 ? dhcp::Version::V6 : dhcp::Version::V4;
    REQUIRE(dhcp::parse(s.msg.data(), s.msg.size(), v, *r) == Status::Ok);
    Bytes m = s.msg;
    protect_all(m, *r, h);
    REQUIRE(dhcp::parse(m.data(), m.size(), v, *r2) == Status::Ok);
    REQUIRE(r2->n_occ == r->n_occ);
    for (unsigned i = 0; i < r->n_occ; ++i) {
      const auto &a = r->occ[i], &b = r2->occ[i];
      CAPTURE(i, dhcp::field_name(a.field));
      CHECK(a.off == b.off);
      CHECK(a.len == b.len);
      CHECK(a.field == b.field);
      CHECK(a.kind == b.kind);
      CHECK(a.n_labels == b.n_labels);
      CHECK(a.tag_len == b.tag_len);
      for (unsigned k = 0; k < a.n_labels; ++k) {
        CHECK(r->labels[a.first_label + k].off == r2->labels[b.first_label + k].off);
        CHECK(r->labels[a.first_label + k].len == r2->labels[b.first_label + k].len);
      }
      // The value changed, its type tag did not.
      CHECK(std::memcmp(s.msg.data() + a.off, m.data() + a.off, a.tag_len) == 0);
      if (a.kind != Kind::Prefix6)
        CHECK(std::memcmp(s.msg.data() + a.off + a.tag_len, m.data() + a.off + a.tag_len, a.len - a.tag_len) != 0);
      if (a.kind == Kind::NameText || a.kind == Kind::NameWire) CHECK(r2->name_text(b) != r->name_text(a));
    }
    // Occurrences do not overlap, and outside them not one byte moved.
    std::vector<bool> inside(m.size(), false);
    for (unsigned i = 0; i < r->n_occ; ++i)
      for (unsigned k = 0; k < r->occ[i].len; ++k) {
        REQUIRE_FALSE(inside[r->occ[i].off + k]);
        inside[r->occ[i].off + k] = true;
      }
    for (size_t k = 0; k < m.size(); ++k)
      if (!inside[k]) REQUIRE(m[k] == s.msg[k]);
  }
}

TEST_CASE("dhcp: names take the same masks as in DNS, SNI and Host") {
  const Bytes m = v4_discover();
  auto r = parsed(m, false);
  Bytes w = m;
  const auto d = names::Decision::mask_left_of(2, 0xabcdef);
  for (unsigned i = 0; i < r->n_occ; ++i) dhcp::rewrite_name(w.data(), *r, r->occ[i], d);
  // option 81's wire name vs the same name as text through names::
  std::string text = "alices-laptop.corp.example.com";
  names::apply_to_text(text.data(), text.size(), d);
  auto r2 = parsed(w, false);
  const auto& fq = r2->occ[7];
  REQUIRE(fq.option == 81);
  CHECK(r2->name_text(fq) == text);
  CHECK(text.substr(text.size() - 11) == "example.com");
  CHECK(text.substr(0, 13) != "alices-laptop");
  // Keep leaves the bytes, Redact fills with 'x'.
  Bytes k = m;
  dhcp::rewrite_name(k.data(), *r, r->occ[4], names::Decision::keep());
  CHECK(k == m);
  dhcp::rewrite_name(k.data(), *r, r->occ[4], names::Decision::redact());
  CHECK(std::string(k.begin() + r->occ[4].off, k.begin() + r->occ[4].off + 13) == "xxxxxxxxxxxxx");
}

TEST_CASE("dhcp: hashed identifiers are keyed, deterministic and keep an embedded MAC linkable") {
  KeyedHash h(test_key());
  const Bytes m = v4_discover();
  auto r = parsed(m, false);
  Bytes a = m, b = m;
  for (unsigned i = 0; i < r->n_occ; ++i)
    if (r->occ[i].kind == Kind::Bytes) {
      dhcp::hash_identifier(h, a.data(), r->occ[i]);
      dhcp::hash_identifier(h, b.data(), r->occ[i]);
    }
  CHECK(a == b);
  const auto& cid = r->occ[3];
  REQUIRE(cid.option == 61);
  uint8_t mac[6];
  h.anon_mac(kMac.data(), mac);
  CHECK(std::memcmp(a.data() + cid.mac_off, mac, 6) == 0);
  CHECK(a[cid.off] == 1);
  // Another key gives other bytes.
  auto k2 = test_key();
  k2[0] ^= 1;
  KeyedHash h2(k2);
  Bytes c = m;
  dhcp::hash_identifier(h2, c.data(), r->occ[8]);
  CHECK(std::memcmp(c.data() + r->occ[8].off, b.data() + r->occ[8].off, r->occ[8].len) != 0);
  // The v6 DUID-LLT's MAC takes the same pseudonym as a v4 chaddr.
  const Bytes s6 = v6_solicit();
  auto r6 = parsed(s6, true);
  Bytes w6 = s6;
  dhcp::hash_identifier(h, w6.data(), r6->occ[0]);
  CHECK(std::memcmp(w6.data() + r6->occ[0].mac_off, mac, 6) == 0);
  CHECK(std::memcmp(w6.data() + r6->occ[0].off, s6.data() + r6->occ[0].off, 4) == 0);  // type, hw type
}

TEST_CASE("dhcp: delegated prefixes stay prefixes") {
  const Bytes m = v6_solicit();
  auto r = parsed(m, true);
  Bytes w = m;
  const dhcp::Occurrence* p = nullptr;
  for (unsigned i = 0; i < r->n_occ; ++i)
    if (r->occ[i].kind == Kind::Prefix6) p = &r->occ[i];
  REQUIRE(p);
  std::memset(w.data() + p->off, 0xff, 16);
  dhcp::fix_prefix(w.data(), *p);
  for (unsigned i = 0; i < 7; ++i) CHECK(w[p->off + i] == 0xff);
  for (unsigned i = 7; i < 16; ++i) CHECK(w[p->off + i] == 0);
}

TEST_CASE("dhcp: field declarations") {
  Registry reg;
  dhcp::register_fields(reg);
  const std::vector<std::pair<Field, ValueType>> want = {
      {Field::Hostname, ValueType::Name}, {Field::ClientId, ValueType::Bytes}, {Field::Chaddr, ValueType::Mac},
      {Field::Addr, ValueType::Addr},     {Field::VendorClass, ValueType::Text}, {Field::RelayId, ValueType::Bytes},
      {Field::ServerId, ValueType::Bytes}};
  REQUIRE(want.size() == dhcp::kNumFields);
  CHECK(reg.fields().size() == dhcp::kNumFields);
  for (const auto& [f, t] : want) {
    const FieldDesc* d = reg.field(dhcp::field_name(f));
    REQUIRE(d);
    CHECK(d->type == t);
    CHECK(d->protocol == "dhcp");
    CHECK_FALSE(d->doc.empty());
  }
  CHECK(reg.field("dhcp.hostname")->value_class == "domain");
  CHECK(reg.field("dhcp.addr")->role == FieldRole::Identifier);
  CHECK(reg.field("dhcp.chaddr")->role == FieldRole::Identifier);
  CHECK(reg.field("dhcp.client_id")->role == FieldRole::Identifier);
  // The built-in registration adds DHCP as a protocol plugin: its fields
  // and its descriptor, under the protocol name the fields carry.
  register_builtin_plugins();
  CHECK(Registry::instance().field("dhcp.hostname") != nullptr);
  CHECK(Registry::instance().protocol("dhcp") == &dhcp::protocol_plugin());
}
