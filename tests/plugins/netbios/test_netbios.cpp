// The NetBIOS datagram plugin: its parser on its own, then as the builtin
// registry has it, through a consumer's policy on built frames (the names
// under the device host name's rule, written back in first-level encoding,
// the header's source address as the packet's, the mailslot data with the
// names, checksums right, fail closed on a datagram it cannot read), and
// its values as amon audit and amon whatif read them (PayloadValues).
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "amon_netbios.hpp"
#include "frames.h"
#include "l2l4.h"
#include "l7.h"
#include "policy.h"
#include "registry.h"
#include "plugin_consumer.h"
#include "runtime.h"
#include "values.h"

using namespace amon;
using namespace amon_test;
namespace tp = amon::netbios_plugin;

namespace {

void register_once() {
  static bool once = (register_builtin_plugins(), true);
  (void)once;
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

// A NetBIOS name field: length 32, the encoded name (15 characters padded
// with spaces, then the suffix), no scope.
Bytes nb_name(const std::string& n, uint8_t suffix) {
  uint8_t raw[16];
  for (unsigned i = 0; i < 15; ++i) raw[i] = uint8_t(i < n.size() ? n[i] : ' ');
  raw[15] = suffix;
  Bytes b(34, 0);
  b[0] = 32;
  tp::encode_name(raw, &b[1]);
  return b;
}

// An SMB Trans request writing `msg` to a mailslot (\\MAILSLOT\\BROWSE
// unless told), as Windows sends browser messages: the SMB header, 17
// words (3 of setup), the byte count, the mailslot's name, the message.
Bytes mailslot(const Bytes& msg, const std::string& slot = "\\MAILSLOT\\BROWSE") {
  Bytes b = {0xff, 'S', 'M', 'B', 0x25};
  b.resize(32, 0);
  b.push_back(17);
  const unsigned data_off = 32 + 1 + 34 + 2 + unsigned(slot.size()) + 1;
  auto le = [&](unsigned v) { b.push_back(uint8_t(v)), b.push_back(uint8_t(v >> 8)); };
  le(0), le(unsigned(msg.size())), le(0), le(0), b.push_back(0), b.push_back(0), le(0), le(1000), le(0), le(0);
  le(0), le(0), le(unsigned(msg.size())), le(data_off), b.push_back(3), b.push_back(0), le(1), le(1), le(2);
  le(unsigned(slot.size() + 1 + msg.size()));
  b.insert(b.end(), slot.begin(), slot.end());
  b.push_back(0);
  b.insert(b.end(), msg.begin(), msg.end());
  return b;
}

// A host announcement ([MS-BRWS] 2.2.1) of `name` with `comment`; `pad`
// fills its 16-byte name field after the NUL.
Bytes host_announcement(const std::string& name, const std::string& comment, uint8_t op = 0x01, uint8_t pad = 0) {
  Bytes m = {op, 0, 0x80, 0xfc, 0x0a, 0x00};
  m.insert(m.end(), name.begin(), name.end());
  m.push_back(0);
  m.resize(6 + 16, pad);
  for (uint8_t x : {6, 1, 3, 0x10, 1, 0, 0x0f, 1, 0x55, 0xaa}) m.push_back(x);
  m.insert(m.end(), comment.begin(), comment.end());
  m.push_back(0);
  return m;
}

// A broadcast datagram from USER-PC (10.1.2.3) to WORKGROUP<1e> carrying
// `user` (a browser host announcement unless told).
Bytes dgm_payload(const Bytes& user = mailslot(host_announcement("USER-PC", "Yael's laptop"))) {
  Bytes h = {0x11, 0x02, 0x12, 0x34, 10, 1, 2, 3, 0x00, 0x8a, 0, 0, 0, 0};
  const Bytes rest = cat({nb_name("USER-PC", 0x00), nb_name("WORKGROUP", 0x1e), user});
  h[10] = uint8_t(rest.size() >> 8), h[11] = uint8_t(rest.size());
  return cat({h, rest});
}

Bytes datagram(const Bytes& pl, uint16_t dport = tp::kPort, uint16_t sport = 138) {
  V4 h;
  h.proto = 17;
  h.src = v4("10.1.2.3");
  return cat({eth(0x0800), ipv4(h, cat({udp_hdr(sport, dport, uint16_t(8 + pl.size())), pl}))});
}
constexpr size_t kPayload = 14 + 20 + 8;

bool holds(const Bytes& f, const std::string& s) {
  return std::search(f.begin(), f.end(), s.begin(), s.end()) != f.end();
}
bool holds(const Bytes& f, const Bytes& s) { return std::search(f.begin(), f.end(), s.begin(), s.end()) != f.end(); }

// The UDP checksum over the frame as it is now, against the one it carries.
void check_udp_checksum(const Bytes& f) {
  const uint8_t* ip = &f[14];
  const size_t l4 = f.size() - 34;
  CHECK(get16(&f[34 + 6]) == ref_l4_checksum(ip + 12, ip + 16, false, 17, &f[34], l4, 6, true));
}

struct Consumer : PluginConsumer {
  explicit Consumer(const std::string& src) : PluginConsumer(register_once, src) {}
};

}  // namespace

TEST_CASE("the NetBIOS datagram parser finds names, source address and data", "[plugins][netbios]") {
  const Bytes p = dgm_payload();
  tp::Datagram g;
  REQUIRE(tp::parse_datagram(p.data(), uint32_t(p.size()), g));
  CHECK(g.src_ip == 4);
  REQUIRE(g.n_names == 2);
  CHECK(g.name_off[0] == 15);
  CHECK(g.name_off[1] == 15 + 34);
  CHECK(g.data_off == 14 + 68);
  CHECK(g.data_len == p.size() - g.data_off);
  // The announcement's name and comment.
  REQUIRE(g.n_values == 2);
  CHECK(std::string(p.begin() + g.values[0].off, p.begin() + g.values[0].off + g.values[0].len) == "USER-PC");
  CHECK_FALSE(g.values[0].comment);
  CHECK(std::string(p.begin() + g.values[1].off, p.begin() + g.values[1].off + g.values[1].len) == "Yael's laptop");
  CHECK(g.values[1].comment);
  uint8_t raw[16];
  tp::decode_name(&p[15], raw);
  CHECK(std::string(raw, raw + 15) == "USER-PC        ");
  Bytes bad = p;
  bad[20] = 'Q';  // no first-level letter
  CHECK_FALSE(tp::parse_datagram(bad.data(), uint32_t(bad.size()), g));
  bad = p;
  bad[15 + 32] = 3;  // a scope label
  CHECK_FALSE(tp::parse_datagram(bad.data(), uint32_t(bad.size()), g));
  bad = p;
  bad[0] = 0x20;  // no datagram type
  CHECK_FALSE(tp::parse_datagram(bad.data(), uint32_t(bad.size()), g));
  for (uint32_t n = 0; n < 15 + 34; ++n) CHECK_FALSE(tp::parse_datagram(p.data(), n, g));
}

TEST_CASE("the NetBIOS datagram parser reads browser messages and refuses other user data", "[plugins][netbios]") {
  tp::Datagram g;
  auto values = [&](const Bytes& p) {
    std::vector<std::string> v;
    for (uint32_t k = 0; k < g.n_values; ++k)
      v.push_back((g.values[k].comment ? "#" : "") +
                  std::string(p.begin() + g.values[k].off, p.begin() + g.values[k].off + g.values[k].len));
    return v;
  };
  using V = std::vector<std::string>;
  // A domain announcement's comment is its master browser's name.
  Bytes p = dgm_payload(mailslot(host_announcement("WORKGROUP", "USER-PC", 0x0c)));
  REQUIRE(tp::parse_datagram(p.data(), uint32_t(p.size()), g));
  CHECK(values(p) == V{"WORKGROUP", "USER-PC"});
  // What Windows leaves in the name's field after its NUL: text under the rule.
  p = dgm_payload(mailslot(host_announcement("USER-PC", "", 0x0f, 'Q')));
  REQUIRE(tp::parse_datagram(p.data(), uint32_t(p.size()), g));
  CHECK(values(p) == V{"USER-PC", "#QQQQQQQQ"});
  // Backup list response: count, token, the names.
  p = dgm_payload(mailslot(cat({{0x0a, 2, 7, 0, 0, 0}, text(std::string("SRV-ONE") + '\0' + "SRV-TWO" + '\0')})));
  REQUIRE(tp::parse_datagram(p.data(), uint32_t(p.size()), g));
  CHECK(values(p) == V{"SRV-ONE", "SRV-TWO"});
  // Election request: version, criteria, uptime, reserved, the sender.
  p = dgm_payload(mailslot(cat({{0x08, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, text(std::string("USER-PC") + '\0')})));
  REQUIRE(tp::parse_datagram(p.data(), uint32_t(p.size()), g));
  CHECK(values(p) == V{"USER-PC"});
  // Announcement request, backup list request.
  p = dgm_payload(mailslot(cat({{0x02, 0}, text(std::string("USER-PC") + '\0')})));
  REQUIRE(tp::parse_datagram(p.data(), uint32_t(p.size()), g));
  CHECK(values(p) == V{"USER-PC"});
  p = dgm_payload(mailslot(Bytes{0x09, 1, 7, 0, 0, 0}));
  REQUIRE(tp::parse_datagram(p.data(), uint32_t(p.size()), g));
  CHECK(g.n_values == 0);

  // Refused: another mailslot (NETLOGON's queries name users and domains),
  // an opcode no layout here has, bytes after the message, a name without
  // its NUL, a fragment, free text that is no SMB.
  const Bytes ok = mailslot(host_announcement("USER-PC", "c"));
  for (const Bytes& user : {mailslot(host_announcement("USER-PC", "c"), "\\MAILSLOT\\NET\\NETLOGON"),
                            mailslot(Bytes{0x42, 0, 0}), cat({ok, {1}}), mailslot(Bytes{0x0b, 'U', 'S', 'E', 'R'}),
                            text(std::string("\\MAILSLOT\\BROWSE") + '\0' + "USER-PC")}) {
    p = dgm_payload(user);
    CHECK_FALSE(tp::parse_datagram(p.data(), uint32_t(p.size()), g));
  }
  p = dgm_payload();
  p[1] |= 0x01;  // more fragments follow
  CHECK_FALSE(tp::parse_datagram(p.data(), uint32_t(p.size()), g));
  for (uint32_t n = 15 + 68; n < p.size(); ++n) {
    p = dgm_payload();
    CHECK_FALSE(tp::parse_datagram(p.data(), n, g));
  }
}

TEST_CASE("NetBIOS datagram names take the device host name's rule", "[plugins][netbios]") {
  register_once();
  const FieldDesc* f = Registry::instance().field("netbios.name");
  REQUIRE(f);
  CHECK(f->split_from == std::vector<std::string>{"dns.qname", "dhcp.hostname"});
  Consumer c("dhcp.hostname : redact()\n");
  Bytes fr = datagram(dgm_payload());
  const size_t size = fr.size();
  REQUIRE(c.run(fr) == Verdict::Forward);
  REQUIRE(fr.size() == size);
  CHECK_FALSE(holds(fr, nb_name("USER-PC", 0x00)));
  CHECK_FALSE(holds(fr, nb_name("WORKGROUP", 0x1e)));
  CHECK_FALSE(holds(fr, "USER-PC"));
  CHECK_FALSE(holds(fr, "Yael"));
  // Still a datagram whose names decode: same length, letters A-P, the
  // padding and the suffix kept.
  tp::Datagram g;
  const uint8_t* p = &fr[kPayload];
  REQUIRE(tp::parse_datagram(p, uint32_t(fr.size() - kPayload), g));
  uint8_t raw[16];
  tp::decode_name(p + g.name_off[0], raw);
  CHECK(std::string(raw, raw + 15) == "xxxxxxx        ");
  CHECK(raw[15] == 0x00);
  tp::decode_name(p + g.name_off[1], raw);
  CHECK(raw[15] == 0x1e);
  // The announcement's name, plain, redacted at its length; the comment too.
  REQUIRE(g.n_values == 2);
  CHECK(std::string(p + g.values[0].off, p + g.values[0].off + g.values[0].len) == "xxxxxxx");
  check_udp_checksum(fr);
}

TEST_CASE("a datagram whose user data is no browser message fails closed where addresses are protected",
          "[plugins][netbios]") {
  // No rule names the datagram's fields: the header's address alone makes
  // a consumer that protects addresses parse it, and a NETLOGON query
  // (its names and the domain's addresses are located nowhere) is cut.
  Consumer c("clients = { 10.0.0.0/8 }\nip.client : prefix(16)\non_error = cut\n");
  Bytes fr = datagram(dgm_payload(mailslot(host_announcement("USER-PC", "c"), "\\MAILSLOT\\NET\\NETLOGON")));
  const size_t size = fr.size();
  const Verdict v = c.run(fr);
  CHECK((v == Verdict::Drop || fr.size() < size));
  CHECK_FALSE(holds(fr, "USER-PC"));
}

TEST_CASE("a datagram's host name written as text elsewhere takes the name's rule", "[plugins][netbios]") {
  // An agent's report on another port names the host the datagram named:
  // the echo search finds its plain form (not the first-level encoding).
  Consumer c("dhcp.hostname : redact()\npayload : keep()\n");
  Bytes fr = datagram(dgm_payload());
  REQUIRE(c.run(fr) == Verdict::Forward);
  Bytes rep = datagram(text("statver=2.10\nlan_addr=user-pc\n"), 9999, 40000);
  REQUIRE(c.run(rep) == Verdict::Forward);
  CHECK_FALSE(holds(rep, "user-pc"));
  CHECK(holds(rep, "lan_addr=xxxxxxx\n"));
}

TEST_CASE("the datagram's source address is the packet's, one address one treatment", "[plugins][netbios]") {
  Consumer c("clients = { 10.0.0.0/8 }\nip.client : prefix(16)\n");
  Bytes fr = datagram(dgm_payload());
  REQUIRE(c.run(fr) == Verdict::Forward);
  CHECK(fr[14 + 12 + 2] == 0);  // the header's source: 10.1.0.0
  CHECK(Bytes(fr.begin() + kPayload + 4, fr.begin() + kPayload + 8) == Bytes(fr.begin() + 26, fr.begin() + 30));
  check_udp_checksum(fr);
}

TEST_CASE("a datagram on 138 the parser cannot read fails closed", "[plugins][netbios]") {
  Consumer c("dhcp.hostname : redact()\non_error = cut\n");
  Bytes p = dgm_payload();
  p[16] = 'z';
  Bytes fr = datagram(p);
  const Verdict v = c.run(fr);
  CHECK((v == Verdict::Drop || !holds(fr, "USER-PC")));
}

TEST_CASE("without a rule for device names the datagram travels as it came", "[plugins][netbios]") {
  Consumer c("ip.src : zero()\n");
  Bytes fr = datagram(dgm_payload());
  REQUIRE(c.run(fr) == Verdict::Forward);
  CHECK(holds(fr, nb_name("USER-PC", 0x00)));
  CHECK(holds(fr, "Yael's laptop"));
}

TEST_CASE("amon audit and amon whatif read the datagram's values", "[plugins][netbios]") {
  register_once();
  const Bytes f = datagram(dgm_payload());
  PayloadValues pv(PayloadValues::Datagrams::Recognised);
  std::vector<std::string> names;
  bool role_addr = false;
  pv.read(17, f.data() + kPayload, uint32_t(f.size() - kPayload), 138, tp::kPort, true,
          [&](const ProtocolPlugin& p, const ProtoOcc& o) {
            if (std::string(p.name) != "netbios") return;
            if (o.kind == OccKind::Name) names.emplace_back(o.text);
            role_addr = role_addr || (o.kind == OccKind::Addr4 && o.role);
          });
  // The header's two names, then the announcement's, decided as USER-PC<00>.
  REQUIRE(names.size() == 3);
  CHECK(names[0] == "fffdeffccnfaedcacacacacacacacaaa");
  CHECK(names[2] == names[0]);
  CHECK(role_addr);
}
