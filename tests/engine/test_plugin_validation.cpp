// Registry::add_protocol refuses a protocol plugin whose descriptor the
// runtime would call through a null pointer, or whose values amon audit
// and amon whatif could not read, at start-up and with the rule named: one
// refused descriptor per rule, each a working plugin but for that one
// member. A refused plugin leaves nothing behind in the registry. Its own
// binary: it registers into the process's registry.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "protocol.h"
#include "registry.h"

using namespace amon;

namespace {

void* make_state() { return nullptr; }
void free_state(void*) {}
ProtoStatus parse(void*, const ProtoPacket&, ProtoOccs&) { return ProtoStatus::None; }
void rewrite_name(void*, uint8_t*, const ProtoOcc&, const names::Decision&) {}
bool rewrite(void*, void*, RewriteHost&, uint8_t*, const uint8_t*, uint32_t, const ProtoRewrite&) { return true; }
void values(void*, const uint8_t*, uint32_t, void (*)(void*, const ProtoOcc&), void*) {}
void* make_consumer(ConsumerSetup&) { return nullptr; }
bool message_start(const uint8_t*, uint32_t, bool) { return true; }
// Refuses what a real message start test refuses: a start needs bytes.
bool strict_start(const uint8_t* pl, uint32_t len, bool) { return len >= 4 && pl[0] == 'V'; }
bool payload_ends(const uint8_t*, uint32_t, bool) { return true; }
bool parse_datagram(void*, const uint8_t*, uint32_t) { return true; }

// A plugin that passes every rule, on a port nobody else has.
ProtocolPlugin good(const char* name) {
  ProtocolPlugin p{};
  p.name = name;
  p.l4_proto = 17;
  p.ports[0] = 40000;
  p.make_state = make_state;
  p.free_state = free_state;
  p.parse = parse;
  p.rewrite_name = rewrite_name;
  return p;
}

void name_field(Registry& r) {
  r.add_field({"vt.name", ValueType::Name, "vt", FieldRole::QuasiIdentifier, "domain", "a name", {}});
}
void name_field_no_class(Registry& r) {
  r.add_field({"vt.name", ValueType::Name, "vt", FieldRole::QuasiIdentifier, "", "a name", {}});
}
void port_field(Registry& r) { r.add_field({"vt.port", ValueType::Port, "vt", FieldRole::Other, "", "a port", {}}); }
void body_field(Registry& r) {
  r.add_field({"vt.body", ValueType::Bytes, "vt", FieldRole::Content, "", "a body", {}});
}

// What add_protocol says of `p` (empty: it joined).
std::string refusal(const ProtocolPlugin& p) {
  try {
    Registry::instance().add_protocol(p);
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("every built-in protocol plugin passes the registration checks", "[plugins][validate]") {
  REQUIRE_NOTHROW(register_builtin_plugins());
  CHECK(Registry::instance().protocols().size() >= 7);
}

TEST_CASE("add_protocol refuses a descriptor that breaks one rule, naming the plugin and the rule",
          "[plugins][validate]") {
  register_builtin_plugins();
  Registry& reg = Registry::instance();
  const size_t fields = reg.fields().size(), protocols = reg.protocols().size();

  constexpr int kRules = 18;
  static ProtocolPlugin p[kRules];
  for (auto& x : p) x = good("vt");
  p[0].l4_proto = 1;
  p[1].parse = nullptr;
  p[2].free_state = nullptr;
  p[3].rewrite = rewrite, p[3].values = values, p[3].make_consumer = make_consumer;
  p[4].rewrite = rewrite;
  p[5].l4_proto = 6, p[5].ordered = true;
  p[6].register_fields = body_field, p[6].payload_field = "vt.body";
  p[7].rewrite = rewrite, p[7].values = values, p[7].shortcut = true;
  p[8].ports[0] = 53;
  p[9].register_fields = name_field, p[9].rewrite_name = nullptr;
  p[10].register_fields = name_field_no_class;
  p[11].register_fields = port_field;
  p[12].parse_datagram = parse_datagram;
  p[13].l4_proto = 6, p[13].payload_field = "vt.nothing", p[13].payload_ends = payload_ends;
  p[14].shortcut = true;
  p[15].ordered = true, p[15].message_start = message_start;
  p[16].message_start = strict_start;
  p[17].l4_proto = 6, p[17].message_start = message_start;
  const char* rules[kRules] = {
      "l4_proto is 1; it must be 6 (TCP), 17 (UDP) or an IP protocol whose payload no decoder reads",
      "no parse",
      "make_state and free_state must both be set",
      "make_consumer and free_consumer must be set together",
      "rewrite without values: amon audit and amon whatif would read none of its values",
      "ordered without message_start",
      "payload_field without payload_ends",
      "a second UDP shortcut (dns has the one the runtime takes)",
      "UDP port 53 is also dns's, and a shortcut takes every datagram on its ports",
      "field vt.name: a name field without rewrite_name (or rewrite)",
      "field vt.name: a name field without a value class",
      "field vt.port: a port in the payload: no occurrence kind carries it",
      "parse_datagram without shortcut",
      "payload_field vt.nothing is not a registered field of vt",
      "shortcut without rewrite",
      "ordered on a transport other than TCP",
      "message_start on a transport other than TCP",
      "message_start accepts an empty or one-byte segment",
  };
  for (int i = 0; i < kRules; ++i) {
    const std::string err = refusal(p[i]);
    INFO(i << ": " << err);
    CHECK(err.rfind("protocol plugin vt: ", 0) == 0);
    CHECK(err.find(rules[i]) != std::string::npos);
    // Nothing of it stays: not its fields, not the plugin.
    CHECK(reg.fields().size() == fields);
    CHECK(reg.protocols().size() == protocols);
    CHECK(reg.field("vt.name") == nullptr);
  }

  // The same plugin with the rule kept joins, fields and all.
  static ProtocolPlugin ok = good("vt");
  ok.register_fields = name_field;
  CHECK(refusal(ok).empty());
  CHECK(reg.field("vt.name") != nullptr);
  CHECK(reg.protocol("vt") == &ok);
}

TEST_CASE("the registry takes protocol plugins up to its limit and refuses the next one", "[plugins][validate]") {
  register_builtin_plugins();
  Registry& reg = Registry::instance();
  // Plugins carrying the first filler's fields: a protocol name is a limit of its own.
  static ProtocolPlugin fill[Registry::kMaxProtocolPlugins + 1];
  static std::string names[Registry::kMaxProtocolPlugins + 1];
  for (unsigned i = 0; reg.protocols().size() < Registry::kMaxProtocolPlugins; ++i) {
    names[i] = "vtfill" + std::to_string(i);
    fill[i] = good(names[i].c_str());
    fill[i].ports[0] = uint16_t(41000 + i);
    if (i) fill[i].carries = "vtfill0";
    REQUIRE(refusal(fill[i]).empty());
  }
  CHECK(reg.protocols().size() == Registry::kMaxProtocolPlugins);
  ProtocolPlugin more = good("vtfillmore");
  more.ports[0] = 41999;
  more.carries = "vtfill0";
  CHECK(refusal(more).find("too many protocol plugins (24 at most)") != std::string::npos);
  CHECK(reg.protocols().size() == Registry::kMaxProtocolPlugins);
}
