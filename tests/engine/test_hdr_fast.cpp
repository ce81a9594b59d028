// The header fast path (ProgramInstance::process_hdr) against the general
// path it specialises: every packet of every shared capture, and mutations
// of each, through header-only policies with the fast path on and off. The
// two must forward the same bytes, with the same lengths, verdicts and
// counters. A packet the fast path does not take runs the same code twice,
// so the test also counts how many took it: a test that compared nothing
// would pass.
#include <pcap/pcap.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
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
#include "policy.h"
#include "registry.h"
#include "runtime.h"
#include "zanon.h"

using namespace amon;

namespace {

// Header-only policies: every action the fast path calls directly, the ones
// it leaves to the virtual call, roles by initiator and by `clients`, and
// each payload action.
const char* kPolicies[] = {
    // The L2-L4 policy.
    "eth.src, eth.dst : timestamp()\nip.client : cryptopan(key=k)\nip.server : prefix(24)\npayload : cut()\n",
    "ip.src, ip.dst : cryptopan(key=k)\n",
    "clients = { 10.0.0.0/8, 192.168.0.0/16, 2001:db8::/32, fe80::/10 }\n"
    "ip.client : hash(key=k)\nip.server : zero()\npayload : zero()\n",
    "eth.src : hash(key=k)\neth.dst : zero()\nip.client : prefix(16)\nip.dst : cryptopan(key=k)\n",
    "ip.server : cryptopan(key=k, rotate=1h)\nip.client : prefix(8)\non_error = drop\npayload : cut()\n",
    "eth.dst : timestamp()\npayload : zero()\n",
    "ip.src : keep()\nip.client : cryptopan(key=k)\n",
    "ip.src : prefix(24)\nip.client : cryptopan(key=k)\npayload : redact()\n",
    "eth.src, eth.dst : zero()\nip.dst : prefix(20)\npayload : keep()\n",
    "ip.client : cryptopan(key=k)\nip.server : drop()\n",
};

using amon::testing::key_file;
using amon::testing::Side;
using amon::testing::store;

struct Pair {
  std::shared_ptr<const dsl::Policy> policy;
  SharedServices svc{&store(), {}};
  Side fast, generic, general;  // the policy's kernel, process_hdr, the general path
  Side burst;                   // the kernel's burst entry (process_burst), on bursts of 1 to 32 packets
  FlowTable flows{"test", 1u << 16, FlowTimeouts{}, -1};
  uint64_t fast_taken = 0, compared = 0, burst_compared = 0;
  // Packets waiting for the burst side, with what the general path made of them.
  struct Pending {
    std::vector<uint8_t> in, out;
    uint32_t cap, wire, out_cap, out_wire;
    Decoded d;
    PacketMeta m;
    Verdict v;
  };
  std::vector<Pending> pending;
  std::mt19937 burst_rng{7};
  unsigned burst_size = 1;

  FlowTable* ft = &flows;  // another Pair's table: consumers sharing flows

  explicit Pair(const std::string& body, int consumer = 0, int key = 0) {
    static bool once = (register_builtin_plugins(), true);
    (void)once;
    dsl::Diagnostics diags;
    policy = dsl::compile_string("key k = file(\"" + key_file(key) + "\")\n" + body, "hdr.amon", diags);
    INFO(diags.render_text());
    REQUIRE(policy);
    REQUIRE(diags.errors() == 0);
    for (Side* s : {&fast, &generic, &general, &burst}) {
      s->prog = std::make_unique<Program>(policy, consumer, &svc);
      s->inst = s->prog->instantiate();
      s->c.rule_hits.resize(policy->rules.size() + 1);
    }
    fast.inst->set_header_fast_path(true);
    burst.inst->set_header_fast_path(true);
    generic.inst->set_header_fast_path(true, false);
    general.inst->set_header_fast_path(false);
  }

  void run(const uint8_t* pkt, uint32_t cap, uint32_t wire, uint64_t ts) {
    Decoded d;
    decode(pkt, cap, wire, d);
    PacketMeta m;
    m.ts_ns = ts;
    if (d.has_ip() && d.dst_off() + d.addr_len() <= cap && d.src_off() + d.addr_len() <= cap)
      ft->lookup(pkt, d, ts, m);
    m.orig = pkt;
    std::vector<uint8_t> b(pkt, pkt + cap);
    uint32_t cb = cap, wb = wire;
    fast_taken += ProgramInstance::hdr_packet(d, cap);
    const Verdict vb = general.inst->process(b.data(), cb, wb, d, m, general.c);
    for (Side* s : {&fast, &generic}) {
      std::vector<uint8_t> a(pkt, pkt + cap);
      uint32_t ca = cap, wa = wire;
      const Verdict va = s->inst->process(a.data(), ca, wa, d, m, s->c);
      ++compared;
      REQUIRE(va == vb);
      REQUIRE(ca == cb);
      REQUIRE(wa == wb);
      if (va == Verdict::Forward && ca) REQUIRE(std::memcmp(a.data(), b.data(), ca) == 0);
    }
    Pending& q = pending.emplace_back();
    q.in.assign(pkt, pkt + cap);
    q.out = std::move(b);
    q.cap = cap, q.wire = wire, q.out_cap = cb, q.out_wire = wb;
    q.d = d, q.m = m, q.v = vb;
    if (pending.size() >= burst_size) flush();
  }

  void flush() {
    const unsigned n = unsigned(pending.size());
    std::vector<uint8_t*> bufs(n);
    std::vector<uint32_t> caps(n), wires(n);
    std::vector<Decoded> ds(n);
    std::vector<PacketMeta> ms(n);
    std::vector<Verdict> vs(n);
    for (unsigned i = 0; i < n; ++i) {
      Pending& q = pending[i];
      q.m.orig = q.in.data();
      ms[i] = q.m;
      ds[i] = q.d;
      caps[i] = q.cap, wires[i] = q.wire;
    }
    std::vector<std::vector<uint8_t>> work(n);
    for (unsigned i = 0; i < n; ++i) work[i] = pending[i].in, bufs[i] = work[i].data();
    burst.inst->process_burst(bufs.data(), caps.data(), wires.data(), ds.data(), ms.data(), vs.data(), n, burst.c);
    for (unsigned i = 0; i < n; ++i) {
      const Pending& q = pending[i];
      ++burst_compared;
      REQUIRE(vs[i] == q.v);
      REQUIRE(caps[i] == q.out_cap);
      REQUIRE(wires[i] == q.out_wire);
      if (vs[i] == Verdict::Forward && caps[i]) REQUIRE(std::memcmp(work[i].data(), q.out.data(), caps[i]) == 0);
    }
    pending.clear();
    burst_size = 1 + burst_rng() % 32;
  }

  void same_counters() const {
    same_counters(fast.c);
    same_counters(generic.c);
    same_counters(burst.c);
  }
  void same_counters(const ConsumerCounters& x) const {
    const ConsumerCounters& y = general.c;
    CHECK(x.rule_hits == y.rule_hits);
    CHECK(x.policy_drop == y.policy_drop);
    CHECK(x.err_cut == y.err_cut);
    CHECK(x.err_drop == y.err_drop);
    CHECK(x.unknown_drop == y.unknown_drop);
    CHECK(x.unknown_cut == y.unknown_cut);
    CHECK(x.tunnel_cut == y.tunnel_cut);
    CHECK(x.icmp_quote_cut == y.icmp_quote_cut);
  }
};

using amon::testing::for_each_record;
std::vector<std::string> captures() { return amon::testing::shared_captures(); }

}  // namespace

TEST_CASE("header fast path: the same output as the general path on every shared capture") {
  const auto caps = captures();
  if (caps.empty()) {
    WARN("no captures in " AMON_PCAPS_DIR ": only the crafted mutations below run");
  }
  for (const char* body : kPolicies) {
    Pair p(body);
    REQUIRE(p.fast.prog->policy().rules.size() > 0);
    CHECK(p.fast.inst->header_fast_path());
    CHECK_FALSE(p.generic.inst->header_kernel());
    std::mt19937 rng(12345);
    for (const auto& path : caps) {
      for_each_record(path, [&](const uint8_t* data, uint32_t caplen, uint32_t len, uint64_t ts) {
        INFO(path << " policy:\n" << body);
        p.run(data, caplen, len, ts);
        // Mutations in the headers: lengths, flags, versions, offsets the
        // fast path's entry test and the general path must agree on.
        std::vector<uint8_t> m(data, data + caplen);
        for (int k = 0; k < 2 && !m.empty(); ++k) {
          std::vector<uint8_t> x = m;
          const uint32_t span = uint32_t(std::min<size_t>(x.size(), 80));
          for (int f = 0; f < 2; ++f) x[rng() % span] ^= uint8_t(1u << (rng() % 8));
          // Sometimes shorter, as a snap length would leave it.
          uint32_t cap = uint32_t(x.size());
          if (rng() % 4 == 0) cap = uint32_t(rng() % (cap + 1));
          p.run(x.data(), cap, len, ts + 1);
        }
      });
    }
    INFO("policy:\n" << body);
    p.flush();
    p.same_counters();
    CHECK(p.burst_compared * 2 == p.compared);
    // Something must have taken the fast path, or nothing was compared.
    if (!caps.empty()) CHECK(p.fast_taken > 1000);
  }
}

TEST_CASE("header fast path: only header-only policies take it") {
  const char* general_only[] = {
      "ip.client : cryptopan(key=k)\ndns.qname : redact()\n",                  // an application field
      "ip.client : cryptopan(key=k) when proto == tcp\n",                       // a condition
      "select proto in { tcp }\nip.client : cryptopan(key=k)\n",                             // select
      "ip.server : zanon(z=5, dt=1h)\nip.client : cryptopan(key=k)\n",         // a per-flow decision
  };
  for (const char* body : general_only) {
    INFO(body);
    Pair p(body);
    CHECK_FALSE(p.fast.inst->header_fast_path());
  }
  Pair hdr("ip.client : cryptopan(key=k)\n");
  CHECK(hdr.fast.inst->header_fast_path());
  CHECK(hdr.fast.inst->header_kernel());
  CHECK_FALSE(hdr.general.inst->header_fast_path());
  // Rules on a position and on a role at once: process_hdr, no kernel.
  Pair mixed("ip.src : prefix(24)\nip.client : cryptopan(key=k)\n");
  CHECK(mixed.fast.inst->header_fast_path());
  CHECK_FALSE(mixed.fast.inst->header_kernel());
}

// The flow keeps one consumer's Crypto-PAn result for the client
// (FlowState::memo). Two consumers with different keys on the same flows:
// each must still match its own general path, never the other's memo.
TEST_CASE("header kernels: consumers sharing flows keep their own Crypto-PAn results") {
  const auto caps = captures();
  if (caps.empty()) {
    WARN("no captures in " AMON_PCAPS_DIR);
    return;
  }
  const char* body = kPolicies[0];  // the L2-L4 policy: cryptopan on the client
  Pair a(body, 0, 0), b(body, 1, 1);
  b.ft = &a.flows;
  uint64_t differ = 0;
  for (const auto& path : caps) {
    for_each_record(path, [&](const uint8_t* data, uint32_t caplen, uint32_t len, uint64_t ts) {
      INFO(path);
      a.run(data, caplen, len, ts);
      b.run(data, caplen, len, ts);
      differ += !a.pending.empty() && !b.pending.empty() && a.pending.back().out != b.pending.back().out;
    });
  }
  a.flush();
  b.flush();
  a.same_counters();
  b.same_counters();
  // The two keys must have given different outputs, or the test compared nothing.
  CHECK(differ > 1000);
}
