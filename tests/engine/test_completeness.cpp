// Start-up against an incomplete registry: a field no plugin locates and an
// action that declares a value type its runtime does not implement are
// registered into the process's own registry (as a plugin would register
// them), and loading a policy, which is what the engine does at start-up
// and at every reload, is refused with a message naming each of them and
// what is missing. Its own binary: the registry cannot be emptied again.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <string>

#include "actions_rt.h"
#include "policy.h"
#include "registry.h"
#include "runtime.h"

using namespace amon;

namespace {

// What Program's constructor throws for this policy (empty: it loaded).
std::string load_error(const std::string& src) {
  dsl::Diagnostics diags;
  auto policy = dsl::compile_string(src, "test.amon", diags);
  REQUIRE(policy);
  REQUIRE(diags.errors() == 0);
  SharedServices svc;
  try {
    Program p(policy, 0, &svc);
    p.instantiate();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("a policy load refuses a registry with an unlocated field or an unimplemented action type",
          "[completeness]") {
  register_builtin_plugins();
  Registry& reg = Registry::instance();
  const std::string policy = "ip.client : zero()\n";
  REQUIRE(load_error(policy).empty());
  REQUIRE(registry_problems().empty());

  // A header field registered the obvious way (name, type, protocol) with
  // no parser that finds it: its policy would lint clean and leave it clear.
  FieldDesc f{"http.accept_language", ValueType::Text, "http", FieldRole::QuasiIdentifier, "",
              "Accept-Language header", {}};
  reg.add_field(f);
  std::string err = load_error(policy);
  INFO(err);
  CHECK(err.find("the plugin registry is incomplete") != std::string::npos);
  CHECK(err.find("http.accept_language: no plugin locates it in packets") != std::string::npos);
  CHECK(registry_problems() == err);

  // An action declaring addresses whose runtime (cut's) implements bytes only.
  ActionDesc a{"snip", "cut, declared on addresses too", {ValueType::Bytes, ValueType::Addr}, {}, true, true};
  a.kind = ActionKind::Cut;
  reg.add_action(a);
  err = load_error(policy);
  INFO(err);
  CHECK(err.find("http.accept_language: no plugin locates it in packets") != std::string::npos);
  CHECK(err.find("ip.client: snip() is accepted on addr fields but has no applier for addr") != std::string::npos);
  CHECK(err.find("dns.answer.addr: snip() is accepted on addr fields but has no applier for addr") != std::string::npos);
  // Its bytes are implemented: nothing is said of payload.
  CHECK(err.find("payload: snip()") == std::string::npos);
  // An action no runtime knows at all: every type it declares.
  reg.add_action({"scramble", "no runtime", {ValueType::Mac}, {}});
  err = load_error(policy);
  CHECK(err.find("eth.src: scramble() is accepted on mac fields but has no applier for mac") != std::string::npos);
}
