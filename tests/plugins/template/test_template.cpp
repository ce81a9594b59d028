// The template protocol plugin: its parser on its own, then registered as
// a plugin is (Registry::add_protocol) and run through a consumer's policy
// on built frames (the name decided and written back, every checksum right
// afterwards, fail closed on a datagram it cannot read), and its values as
// amon audit and amon whatif read them (PayloadValues).
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>

#include "amon_template.hpp"
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
namespace tp = amon::template_plugin;

namespace {

void register_once() {
  static bool once = (register_builtin_plugins(), Registry::instance().add_protocol(tp::protocol_plugin()), true);
  (void)once;
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

Bytes datagram(const std::string& body, uint16_t dport = tp::kPort) {
  V4 h;
  h.proto = 17;
  const Bytes pl = text(body);
  return cat({eth(0x0800), ipv4(h, cat({udp_hdr(40000, dport, uint16_t(8 + pl.size())), pl}))});
}
constexpr size_t kPayload = 14 + 20 + 8;

bool holds(const Bytes& f, const std::string& s) {
  return std::search(f.begin(), f.end(), s.begin(), s.end()) != f.end();
}

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

TEST_CASE("the template parser finds the announced host", "[plugins][template]") {
  tp::Span h;
  const Bytes ok = text("HELLO Alice-Laptop.example.com\r\n");
  REQUIRE(tp::find_host(ok.data(), uint32_t(ok.size()), h));
  CHECK(h.off == 6);
  CHECK(h.len == 24);
  for (const char* bad : {"", "HELLO", "HELO x.example", "HELLO a b", "HELLO name;rm"}) {
    const Bytes b = text(bad);
    CHECK_FALSE(tp::find_host(b.data(), uint32_t(b.size()), h));
  }
  const Bytes long_name = text("HELLO " + std::string(254, 'a'));
  CHECK_FALSE(tp::find_host(long_name.data(), uint32_t(long_name.size()), h));
}

TEST_CASE("the template plugin joins the registry with its field", "[plugins][template]") {
  register_once();
  const FieldDesc* f = Registry::instance().field("template.host");
  REQUIRE(f);
  CHECK(f->type == ValueType::Name);
  CHECK(Registry::instance().protocol("template") == &tp::protocol_plugin());
}

TEST_CASE("a rule on template.host rewrites the name in place, checksum right", "[plugins][template]") {
  Consumer c("template.host : redact()\n");
  Bytes f = datagram("HELLO Alice-Laptop.example.com\n");
  const size_t size = f.size();
  REQUIRE(c.run(f) == Verdict::Forward);
  REQUIRE(f.size() == size);
  CHECK_FALSE(holds(f, "Alice-Laptop"));
  CHECK_FALSE(holds(f, "example.com"));
  CHECK(std::string(f.begin() + kPayload, f.begin() + kPayload + 6) == "HELLO ");
  CHECK(f.back() == '\n');
  check_udp_checksum(f);

  // The same datagram on another port is no message of the protocol. A
  // consumer of its own: this one would find the name it redacted above in
  // the datagram's kept payload (echoes).
  Consumer c2("template.host : redact()\n");
  Bytes g = datagram("HELLO Alice-Laptop.example.com\n", 40405);
  REQUIRE(c2.run(g) == Verdict::Forward);
  CHECK(holds(g, "Alice-Laptop.example.com"));
}

TEST_CASE("a datagram the template parser cannot read fails closed", "[plugins][template]") {
  Consumer c("template.host : redact()\non_error = cut\n");
  Bytes f = datagram("HELLO Alice-Laptop;example.com\n");
  const Verdict v = c.run(f);
  CHECK((v == Verdict::Drop || !holds(f, "Alice-Laptop")));
}

TEST_CASE("without a rule on template.host the name travels as it came", "[plugins][template]") {
  Consumer c("ip.src : zero()\n");
  Bytes f = datagram("HELLO Alice-Laptop.example.com\n");
  REQUIRE(c.run(f) == Verdict::Forward);
  CHECK(holds(f, "Alice-Laptop.example.com"));
}

TEST_CASE("amon audit and amon whatif read the template's values", "[plugins][template]") {
  register_once();
  const Bytes f = datagram("HELLO Alice-Laptop.example.com\n");
  PayloadValues pv(PayloadValues::Datagrams::Recognised);
  std::string seen;
  pv.read(17, f.data() + kPayload, uint32_t(f.size() - kPayload), 40000, tp::kPort, true,
          [&](const ProtocolPlugin& p, const ProtoOcc& o) {
            if (std::string(p.name) == "template" && o.kind == OccKind::Name) seen = std::string(o.text);
          });
  CHECK(seen == "alice-laptop.example.com");
}
