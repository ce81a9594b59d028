// NBNS (UDP 137) as the builtin registry has it, through a consumer's
// policy on built frames: the addresses of NB records as addresses of the
// network (the packet's own take its header's rewrite, others their role's
// rule), NBSTAT answers' node names under the device host name's rule and
// their unit ID under the source MAC's, records RFC 1002 does not define
// failing closed; and the parser on its own in NBNS mode.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>

#include "amon_dns.hpp"
#include "frames.h"
#include "plugin_consumer.h"
#include "registry.h"
#include "values.h"

using namespace amon;
using namespace amon_test;

namespace {

void register_once() {
  static bool once = (register_builtin_plugins(), true);
  (void)once;
}

struct Consumer : PluginConsumer {
  explicit Consumer(const std::string& src) : PluginConsumer(register_once, src) {}
};

Bytes encoded(const std::string& n, uint8_t suffix) {
  Bytes b;
  for (unsigned i = 0; i < 16; ++i) {
    const uint8_t c = i < 15 ? uint8_t(i < n.size() ? n[i] : ' ') : suffix;
    b.push_back(uint8_t('A' + (c >> 4))), b.push_back(uint8_t('A' + (c & 15)));
  }
  return b;
}

Bytes header(uint16_t id, uint16_t flags, unsigned qd, unsigned an, unsigned ar) {
  Bytes b;
  put16(b, id), put16(b, flags), put16(b, qd), put16(b, an), put16(b, 0), put16(b, ar);
  return b;
}

Bytes nb_label(const std::string& n, uint8_t suffix) { return cat({{32}, encoded(n, suffix), {0}}); }

// A record after the question: a pointer to the question's name, its type,
// class IN, a TTL and the data.
Bytes rr_to_question(uint16_t type, const Bytes& rd) {
  Bytes b = {0xc0, 0x0c};
  put16(b, type), put16(b, 1), put32(b, 300000), put16(b, uint16_t(rd.size()));
  put(b, rd);
  return b;
}

// A registration of USER-PC<00> from 10.1.2.3, the address in an ADDITIONAL
// NB record: `addr` there.
Bytes registration(const char* addr) {
  Bytes q = nb_label("USER-PC", 0x00);
  put16(q, 0x20), put16(q, 1);
  const auto a = v4(addr);
  Bytes rd = {0x00, 0x00};
  rd.insert(rd.end(), a.begin(), a.end());
  return cat({header(0x8107, 0x2910, 1, 0, 1), q, rr_to_question(0x20, rd)});
}

// A node status answer: USER-PC<00>, USER-PC<20>, WORKGROUP<00> (a group),
// then the statistics led by the unit ID.
Bytes nbstat_answer(const Bytes& unit = {0x00, 0x1c, 0xc4, 0x10, 0x79, 0x0f}) {
  Bytes rd = {3};
  for (auto [n, s, f] : {std::tuple{"USER-PC", 0x00, 0x0400}, {"USER-PC", 0x20, 0x0400}, {"WORKGROUP", 0x00, 0x8400}}) {
    const std::string name = std::string(n) + std::string(15 - std::string(n).size(), ' ');
    rd.insert(rd.end(), name.begin(), name.end());
    rd.push_back(uint8_t(s));
    put16(rd, unsigned(f));
  }
  put(rd, unit);
  put(rd, Bytes(40, 0));
  Bytes owner = {32, 'C', 'K'};
  owner.insert(owner.end(), 30, 'A');
  owner.push_back(0);
  Bytes b = cat({header(0x20a8, 0x8400, 0, 1, 0), owner});
  put16(b, 0x21), put16(b, 1), put32(b, 0), put16(b, uint16_t(rd.size()));
  put(b, rd);
  return b;
}

Bytes datagram(const Bytes& pl, const char* src = "10.1.2.3", const char* dst = "10.1.2.255", uint16_t dport = 137) {
  V4 h;
  h.proto = 17;
  h.src = v4(src), h.dst = v4(dst);
  return cat({eth(0x0800), ipv4(h, cat({udp_hdr(dport == 137 ? 137 : 40000, dport, uint16_t(8 + pl.size())), pl}))});
}
constexpr size_t kPayload = 14 + 20 + 8;

bool holds(const Bytes& f, const std::string& s) { return std::search(f.begin(), f.end(), s.begin(), s.end()) != f.end(); }
bool holds(const Bytes& f, const Bytes& s) { return std::search(f.begin(), f.end(), s.begin(), s.end()) != f.end(); }

void check_udp_checksum(const Bytes& f) {
  const uint8_t* ip = &f[14];
  CHECK(get16(&f[34 + 6]) == ref_l4_checksum(ip + 12, ip + 16, false, 17, &f[34], f.size() - 34, 6, true));
}

}  // namespace

TEST_CASE("nbns: the parser in NBNS mode locates NB addresses, NBSTAT names and unit IDs", "[plugins][nbns]") {
  auto r = std::make_unique<dns::ParseResult>();
  const Bytes reg = registration("10.1.2.3");
  REQUIRE(dns::parse(reg.data(), reg.size(), *r, true) == dns::Status::Ok);
  REQUIRE(r->n_addrs == 1);
  CHECK(r->addrs[0].section == dns::Section::Additional);
  CHECK(r->addrs[0].off == reg.size() - 4);

  const Bytes st = nbstat_answer();
  REQUIRE(dns::parse(st.data(), st.size(), *r, true) == dns::Status::Ok);
  REQUIRE(r->n_nb_names == 3);
  CHECK(std::string(st.begin() + r->nb_name[0], st.begin() + r->nb_name[0] + 7) == "USER-PC");
  CHECK(st[r->nb_name[1] + 15] == 0x20);
  CHECK(std::string(st.begin() + r->nb_name[2], st.begin() + r->nb_name[2] + 9) == "WORKGROUP");
  REQUIRE(r->n_nb_units == 1);
  CHECK(st[r->nb_unit[0] + 1] == 0x1c);
  // As DNS, type 33 is SRV: its layout does not hold.
  CHECK(dns::parse(st.data(), st.size(), *r) != dns::Status::Ok);

  // Layouts RFC 1002 does not give NBNS records: an NB record of a length
  // that is no whole entry, NULL with data, another type, another class,
  // an NBSTAT answer shorter than its count says.
  Bytes bad = reg;
  set16(&bad[bad.size() - 8], 5);  // RDLENGTH 6 -> 5
  bad.pop_back();
  CHECK(dns::parse(bad.data(), bad.size(), *r, true) == dns::Status::Malformed);
  bad = reg;
  set16(&bad[bad.size() - 16], 10);  // NULL with 6 bytes
  CHECK(dns::parse(bad.data(), bad.size(), *r, true) == dns::Status::Malformed);
  set16(&bad[bad.size() - 16], 99);
  CHECK(dns::parse(bad.data(), bad.size(), *r, true) == dns::Status::Malformed);
  bad = reg;
  set16(&bad[bad.size() - 14], 3);  // class CH
  CHECK(dns::parse(bad.data(), bad.size(), *r, true) == dns::Status::Malformed);
  bad = st;
  bad[12 + 34 + 10] = 9;  // nine names in the room of three
  CHECK(dns::parse(bad.data(), bad.size(), *r, true) == dns::Status::Malformed);
  // A WACK's data is flags alone.
  bad = reg;
  bad.resize(bad.size() - 4);
  bad[bad.size() - 3] = 2;
  CHECK(dns::parse(bad.data(), bad.size(), *r, true) == dns::Status::Ok);
  CHECK(r->n_addrs == 0);
}

TEST_CASE("nbns: registered addresses: the packet's own as its header, others by their role", "[plugins][nbns]") {
  // The packet's own takes whatever rewrote the header, a positional rule
  // included: the same address in clear beside it would undo it.
  for (const char* pol : {"clients = { 10.0.0.0/8 }\nip.client : prefix(16)\n", "clients = { 10.0.0.0/8 }\nip.src : zero()\n"}) {
    Consumer c(pol);
    Bytes fr = datagram(registration("10.1.2.3"));
    REQUIRE(c.run(fr) == Verdict::Forward);
    CHECK(fr[26 + 2] == 0);  // the header's source: 10.1.0.0, or zero
    CHECK(Bytes(fr.end() - 4, fr.end()) == Bytes(fr.begin() + 26, fr.begin() + 30));
    check_udp_checksum(fr);
  }
  // Another user's address (a WINS server registering for a client):
  // ip.client's rule; a server's: ip.server's, as in an IP header.
  Consumer c("clients = { 10.0.0.0/8 }\nip.client : prefix(16)\nip.server : zero()\n");
  Bytes fr = datagram(registration("10.7.8.9"));
  REQUIRE(c.run(fr) == Verdict::Forward);
  CHECK(Bytes(fr.end() - 4, fr.end()) == Bytes{10, 7, 0, 0});
  fr = datagram(registration("198.51.100.7"));
  REQUIRE(c.run(fr) == Verdict::Forward);
  CHECK(Bytes(fr.end() - 4, fr.end()) == Bytes{0, 0, 0, 0});
  check_udp_checksum(fr);
}

TEST_CASE("nbns: NBSTAT node names take the device host name's rule, the unit ID the MAC rule", "[plugins][nbns]") {
  Consumer c("dhcp.hostname : redact()\neth.src : zero()\n");
  const Bytes pl = nbstat_answer();
  Bytes fr = datagram(pl);
  const size_t size = fr.size();
  REQUIRE(c.run(fr) == Verdict::Forward);
  REQUIRE(fr.size() == size);
  CHECK_FALSE(holds(fr, "USER-PC"));
  CHECK_FALSE(holds(fr, "WORKGROUP"));
  CHECK_FALSE(holds(fr, Bytes{0x00, 0x1c, 0xc4, 0x10, 0x79, 0x0f}));
  auto r = std::make_unique<dns::ParseResult>();
  REQUIRE(dns::parse(&fr[kPayload], fr.size() - kPayload, *r, true) == dns::Status::Ok);
  REQUIRE(r->n_nb_names == 3);
  // The characters redacted, the padding, suffix and flags kept.
  const uint8_t* n1 = &fr[kPayload + r->nb_name[1]];
  CHECK(std::string(n1, n1 + 15) == "xxxxxxx        ");
  CHECK(n1[15] == 0x20);
  CHECK(get16(n1 + 16) == 0x0400);
  CHECK(Bytes(&fr[kPayload + r->nb_unit[0]], &fr[kPayload + r->nb_unit[0]] + 6) == Bytes(6, 0));
  check_udp_checksum(fr);
}

TEST_CASE("nbns: an NBSTAT node name hidden is searched for in kept payload", "[plugins][nbns]") {
  // An agent's report after the answer names the host in plain: the echo
  // search knows the name from the answer alone.
  Consumer c("dhcp.hostname : redact()\npayload : keep()\n");
  Bytes st = datagram(nbstat_answer());
  REQUIRE(c.run(st) == Verdict::Forward);
  Bytes txt = datagram(Bytes{'h', 'o', 's', 't', ' ', 'u', 's', 'e', 'r', '-', 'p', 'c', '\n'}, "10.1.2.3", "10.9.9.9", 9999);
  REQUIRE(c.run(txt) == Verdict::Forward);
  CHECK_FALSE(holds(txt, "user-pc"));
  CHECK(holds(txt, "host xxxxxxx\n"));
}

TEST_CASE("nbns: a record NBNS does not define fails closed", "[plugins][nbns]") {
  Consumer c("clients = { 10.0.0.0/8 }\nip.client : prefix(16)\non_error = cut\n");
  Bytes pl = registration("10.7.8.9");
  set16(&pl[pl.size() - 16], 99);
  Bytes fr = datagram(pl);
  const Verdict v = c.run(fr);
  CHECK((v == Verdict::Drop || !holds(fr, Bytes{10, 7, 8, 9})));
}

TEST_CASE("nbns: amon audit reads NB addresses as the network's, node names and unit IDs", "[plugins][nbns]") {
  register_once();
  PayloadValues pv(PayloadValues::Datagrams::Recognised);
  const Bytes reg = datagram(registration("10.1.2.3")), st = datagram(nbstat_answer());
  bool role = false;
  unsigned names = 0, macs = 0;
  auto each = [&](const ProtocolPlugin& p, const ProtoOcc& o) {
    if (std::string(p.name) != "nbns") return;
    role = role || (o.kind == OccKind::Addr4 && o.role);
    if (o.kind == OccKind::Name && o.len == 16) ++names;
    if (o.kind == OccKind::Mac) ++macs;
  };
  pv.read(17, reg.data() + kPayload, uint32_t(reg.size() - kPayload), 137, 137, true, each);
  pv.read(17, st.data() + kPayload, uint32_t(st.size() - kPayload), 137, 137, true, each);
  CHECK(role);
  CHECK(names == 3);
  CHECK(macs == 1);
}
