// One consumer of a policy, run on built frames as the engine runs it: the
// packet's application analysis first (once per packet, shared by every
// consumer), then this consumer's rules. The plugin tests drive their
// plugin through it, so what they check is what the runtime does.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "frames.h"
#include "l2l4.h"
#include "l7.h"
#include "policy.h"
#include "runtime.h"

namespace amon_test {

struct PluginConsumer {
  // register_plugins puts the plugin under test in the registry; it runs
  // before any member that reads the registry (L7Parse makes every
  // plugin's state), so `registered` is declared first.
  PluginConsumer(void (*register_plugins)(), const std::string& src, bool initiator_is_src = true)
      : registered((register_plugins(), true)), initiator_is_src(initiator_is_src) {
    amon::dsl::Diagnostics diags;
    policy = amon::dsl::compile_string(src, "test.amon", diags);
    INFO(diags.render_text());
    REQUIRE(policy);
    REQUIRE(diags.errors() == 0);
    prog = std::make_unique<amon::Program>(policy, 0, &svc);
    inst = prog->instantiate();
  }

  amon::Verdict run(Bytes& f) {
    uint32_t cap = uint32_t(f.size());
    amon::Decoded d;
    amon::decode(f.data(), cap, cap, d);
    const Bytes orig = f;
    amon::PacketMeta m;
    m.initiator_is_src = initiator_is_src;
    m.ts_ns = 1700000000000000000ULL;
    m.flow = &flow;
    m.orig = orig.data();
    parse.reset(++packets);
    amon::analyze_l7(f.data(), d, m, parse);
    const amon::Verdict v = inst->process(f.data(), cap, cap, d, m, c);
    f.resize(cap);
    return v;
  }

  bool registered;
  bool initiator_is_src;  // whether the frames' source started the flow
  std::shared_ptr<const amon::dsl::Policy> policy;
  amon::SharedServices svc;
  std::unique_ptr<amon::Program> prog;
  std::unique_ptr<amon::ProgramInstance> inst;
  amon::ConsumerCounters c;
  amon::L7Parse parse;
  amon::FlowState flow;
  uint64_t packets = 0;
};

}  // namespace amon_test
