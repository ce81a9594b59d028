// The UDP DNS shortcut of the general path (ProgramInstance::general_path,
// kL7Only) against the general path's every step: each packet of every
// shared capture, and mutations of each, through application-only policies
// with the shortcut on and off. Both must forward the same bytes with the
// same lengths, verdicts and counters. The policies are deterministic
// (hash, redact, keep, drop, zanon that always hides), so two instances can
// be compared byte for byte. A packet the shortcut does not take runs the
// same code twice, so the test counts those that could take it.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "equiv_support.h"
#include "flow_table.h"
#include "l2l4.h"
#include "l7.h"
#include "policy.h"
#include "registry.h"
#include "runtime.h"
#include "zanon.h"

using namespace amon;

namespace {

using amon::testing::key_file;
using amon::testing::Side;
using amon::testing::store;

struct Case {
  const char* body;
  bool rewrites;  // changes bytes of many packets (not keep/drop only)
};
const Case kPolicies[] = {
    {"dns.qname : hash(key=k)\n", true},
    {"dns.qname, dns.answer.name, dns.rdata.name : redact()\ndns.answer.addr : cryptopan(key=k)\ndns.ecs : zero()\n", true},
    // z = 64, above the store's zmax of 8 (equiv_support.h): always hidden, so both sides mask alike.
    {"dns.qname, dns.answer.name : zanon(z=64, dt=1h, fallback=hash(key=k))\n"
     "dns.rdata.name : zanon(z=64, dt=1h, fallback=redact())\n", true},
    {"dns.qname : keep()\ndns.rdata.name : drop()\n", false},
    {"dns.answer.addr : prefix(16)\non_error = drop\n", true},
};

struct Pair {
  std::shared_ptr<const dsl::Policy> policy;
  SharedServices svc{&store(), {}};
  Side fast, general;
  FlowTable flows{"test", 1u << 16, FlowTimeouts{}, -1};
  L7Parse l7;
  uint64_t packet = 0, eligible = 0, compared = 0, rewritten = 0;

  explicit Pair(const std::string& body) {
    static bool once = (register_builtin_plugins(), true);
    (void)once;
    dsl::Diagnostics diags;
    policy = dsl::compile_string("key k = file(\"" + key_file() + "\")\n" + body, "dns.amon", diags);
    INFO(diags.render_text());
    REQUIRE(policy);
    REQUIRE(diags.errors() == 0);
    for (Side* s : {&fast, &general}) {
      s->prog = std::make_unique<Program>(policy, 0, &svc);
      s->inst = s->prog->instantiate();
      s->c.rule_hits.resize(policy->rules.size() + 1);
    }
    general.inst->set_shortcut_path(false);
    l7.probe_apps = plugin_apps("dns");
  }

  void run(const uint8_t* pkt, uint32_t cap, uint32_t wire, uint64_t ts) {
    Decoded d;
    decode(pkt, cap, wire, d);
    PacketMeta m;
    m.ts_ns = ts;
    if (d.has_ip() && d.dst_off() + d.addr_len() <= cap && d.src_off() + d.addr_len() <= cap)
      flows.lookup(pkt, d, ts, m);
    m.orig = pkt;
    l7.reset(++packet);
    analyze_l7(pkt, d, m, l7);
    eligible += m.l7 == L7State::Parsed && m.app == plugin_app("dns") && d.l4_proto == kProtoUdp &&
                d.status == DecodeStatus::Ok && !(d.flags & (kFlagTunnel | kFlagIcmpError | kFlagLaterFragment));
    std::vector<uint8_t> a(pkt, pkt + cap), b(pkt, pkt + cap);
    uint32_t ca = cap, wa = wire, cb = cap, wb = wire;
    const Verdict vb = general.inst->process(b.data(), cb, wb, d, m, general.c);
    const Verdict va = fast.inst->process(a.data(), ca, wa, d, m, fast.c);
    ++compared;
    REQUIRE(va == vb);
    REQUIRE(ca == cb);
    REQUIRE(wa == wb);
    if (va == Verdict::Forward && ca) {
      REQUIRE(std::memcmp(a.data(), b.data(), ca) == 0);
      rewritten += std::memcmp(a.data(), pkt, std::min(ca, cap)) != 0;
    }
  }

  void same_counters() const {
    const ConsumerCounters &x = fast.c, &y = general.c;
    CHECK(x.rule_hits == y.rule_hits);
    CHECK(x.policy_drop == y.policy_drop);
    CHECK(x.err_cut == y.err_cut);
    CHECK(x.err_drop == y.err_drop);
    CHECK(x.l7_cut == y.l7_cut);
    CHECK(x.zanon_released == y.zanon_released);
    CHECK(x.zanon_hidden == y.zanon_hidden);
  }
};

}  // namespace

TEST_CASE("UDP DNS shortcut: the same output as the general path on every shared capture") {
  const auto caps = amon::testing::shared_captures();
  if (caps.empty()) WARN("no captures in " AMON_PCAPS_DIR ": nothing to compare");
  for (const Case& pc_ : kPolicies) {
    const char* body = pc_.body;
    Pair p(body);
    std::mt19937 rng(4242);
    for (const auto& path : caps) {
      amon::testing::for_each_record(path, [&](const uint8_t* data, uint32_t caplen, uint32_t len, uint64_t ts) {
        INFO(path << " policy:\n" << body);
        p.run(data, caplen, len, ts);
        // Mutations anywhere in the frame (headers and message alike), and
        // sometimes a shorter capture: the shortcut's entry test and the
        // general path must agree on what they make of them.
        std::vector<uint8_t> m(data, data + caplen);
        for (int k = 0; k < 2 && !m.empty(); ++k) {
          std::vector<uint8_t> x = m;
          for (int f = 0; f < 2; ++f) x[rng() % x.size()] ^= uint8_t(1u << (rng() % 8));
          uint32_t cap = uint32_t(x.size());
          if (rng() % 4 == 0) cap = uint32_t(rng() % (cap + 1));
          p.run(x.data(), cap, len, ts + 1);
        }
      });
    }
    INFO("policy:\n" << body);
    p.same_counters();
    if (!caps.empty()) {
      // The shortcut was there to take, and rewrote something.
      CHECK(p.eligible > 2000);
      if (pc_.rewrites) CHECK(p.rewritten > 500);
    }
  }
}
