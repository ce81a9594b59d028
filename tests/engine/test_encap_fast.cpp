// The tunnel shortcuts against the full way: decode()'s fast path for one
// GTP-U or VXLAN layer (decode_fast_tunnel) against decode_full, and
// process_encap's shortcut for one UDP layer without checksum against its
// every step, through the application analysis and whole policies (the
// meter's, an IDS-like one, header-only ones, the tunnel fields' rules).
// Inputs: the generator's mix wrapped in every encapsulation it makes,
// with outer UDP checksums 0 and computed, the shared tunnel captures, and
// mutations and cuts of each. Both sides must decode alike and forward the
// same bytes with the same lengths, verdicts and counters. Packets neither
// shortcut takes run the same code twice, so the test counts those that
// took them.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "equiv_support.h"
#include "flow_table.h"
#include "generator.hpp"
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

// z = 10 is above the test store's zmax of 8 (equiv_support.h): z-anonymity
// always hides, so both sides decide alike whatever the other counted.
// Names fall back to a keyed hash: sld's pseudonymous labels are drawn
// from each instance's own random generator.
const char* kPolicies[] = {
    // The shipped meter policy's rules.
    "identifier = ip.client\non_error = snap\n"
    "eth.src, eth.dst : timestamp()\nip.client : cryptopan(key=k, rotate=24h)\n"
    "ip.server : zanon(z=10, dt=1h, fallback=prefix(24))\n"
    "dns.qname, dns.answer.name, dns.rdata.name : zanon(z=10, dt=1h, fallback=hash(key=k))\n"
    "dns.answer.addr : zanon(z=10, dt=1h, fallback=prefix(24))\ndns.ecs : zero()\n"
    "tls.sni, http.host : zanon(z=10, dt=1h, fallback=hash(key=k))\n"
    "http.user_agent : zanon(z=50, dt=1h, fallback=redact)\n"
    "http.uri, http.referer, http.cookie, http.set_cookie, http.authorization : redact()\n"
    "http.body : snap()\npayload : snap() when not proto in { dns, tls, http }\npayload : keep()\n",
    // Names hidden, payload kept for an IDS.
    "ip.client : cryptopan(key=k)\nip.server : prefix(24)\n"
    "dns.qname, dns.answer.name, tls.sni, http.host : hash(key=k)\npayload : keep()\n",
    // Header-only, with a cut: lengths of every layer change.
    "eth.src, eth.dst : timestamp()\nip.client : cryptopan(key=k)\nip.server : prefix(24)\npayload : cut()\n",
    // The tunnel's own fields.
    "tunnel.addr : cryptopan(key=k)\ngtp.teid : hash(key=k)\ntunnel.vni : zero()\ngre.key : hash(key=k)\n"
    "ip.src, ip.dst : prefix(16)\n",
    // Outer addresses kept: nothing outer changes.
    "tunnel.addr : keep()\nip.client : hash(key=k)\npayload : zero()\n",
    "ip.src, ip.dst : cryptopan(key=k)\non_error = drop\npayload : cut() when not proto in { dns }\n",
};

struct Way {
  Side side;
  FlowTable flows{"test", 1u << 16, FlowTimeouts{}, -1};
  L7Parse l7;
  uint64_t packet = 0;
};

struct Pair {
  std::shared_ptr<const dsl::Policy> policy;
  SharedServices svc{&store(), {}};
  Way fast, full;
  uint64_t compared = 0, decode_fast = 0, encap_fast = 0, changed = 0;

  explicit Pair(const std::string& body) {
    static bool once = (register_builtin_plugins(), true);
    (void)once;
    dsl::Diagnostics diags;
    policy = dsl::compile_string("key k = file(\"" + key_file() + "\")\n" + body, "tun.amon", diags);
    INFO(diags.render_text());
    REQUIRE(policy);
    REQUIRE(diags.errors() == 0);
    // One program, two instances: the program's secrets (the pseudonyms of
    // hidden names) are the same for both.
    fast.side.prog = std::make_unique<Program>(policy, 0, &svc);
    for (Way* w : {&fast, &full}) {
      w->side.inst = fast.side.prog->instantiate();
      w->side.c.rule_hits.resize(policy->rules.size() + 1);
      w->l7.probe_apps = plugin_apps("dns");
    }
    full.side.inst->set_encap_fast_path(false);
  }

  // As the worker does for one consumer: decode, flow, application parse, program.
  Verdict one(Way& w, bool fast_way, const uint8_t* pkt, uint32_t cap, uint32_t wire, uint64_t ts, Decoded& d,
              std::vector<uint8_t>& b, uint32_t& cb, uint32_t& wb) {
    std::memset(static_cast<void*>(&d), fast_way ? 0x5a : 0xa5, sizeof d);
    if (fast_way) decode(pkt, cap, wire, d);
    else decode_full(pkt, cap, wire, d);
    PacketMeta m;
    m.ts_ns = ts;
    if (d.has_ip() && d.dst_off() + d.addr_len() <= cap && d.src_off() + d.addr_len() <= cap)
      w.flows.lookup(pkt, d, ts, m);
    if (d.status != DecodeStatus::Ok) m.roles_uncertain = true;
    m.orig = pkt;
    m.parse = &w.l7;
    w.l7.reset(++w.packet);
    analyze_l7(pkt, d, m, w.l7);
    b.assign(pkt, pkt + cap);
    b.resize(cap + 64);
    cb = cap, wb = wire;
    return w.side.inst->process(b.data(), cb, wb, d, m, w.side.c);
  }

  void run(const uint8_t* pkt, uint32_t cap, uint32_t wire, uint64_t ts) {
    Decoded da, db;
    std::vector<uint8_t> a, b;
    uint32_t ca, wa, cb, wb;
    const Verdict va = one(fast, true, pkt, cap, wire, ts, da, a, ca, wa);
    const Verdict vb = one(full, false, pkt, cap, wire, ts, db, b, cb, wb);
    ++compared;
    REQUIRE(da == db);
    decode_fast += da.n_encap == 1 && da.status == DecodeStatus::Ok &&
                   (da.encap[0].kind == Encap::GtpU || da.encap[0].kind == Encap::Vxlan);
    encap_fast += ProgramInstance::encap_fast_packet(pkt, cap, da);
    REQUIRE(va == vb);
    REQUIRE(ca == cb);
    REQUIRE(wa == wb);
    if (va == Verdict::Forward && ca) {
      uint32_t at = 0;
      while (at < ca && a[at] == b[at]) ++at;
      std::string hx;  // fast/full from the first byte that differs
      for (uint32_t i = at; i < ca && i < at + 64; ++i) {
        char t[8];
        std::snprintf(t, sizeof t, "%02x/%02x ", a[i], b[i]);
        hx += t;
      }
      INFO("packet " << compared << ": first byte that differs " << at << " of " << ca << ", inner IP at "
                     << da.l3_off << ", layers " << int(da.n_encap) << ": " << hx);
      REQUIRE(at == ca);
      changed += ca != cap || std::memcmp(a.data(), pkt, ca) != 0;
    }
  }

  void same_counters() const {
    const ConsumerCounters &x = fast.side.c, &y = full.side.c;
    CHECK(x.rule_hits == y.rule_hits);
    CHECK(x.policy_drop == y.policy_drop);
    CHECK(x.err_cut == y.err_cut);
    CHECK(x.err_drop == y.err_drop);
    CHECK(x.tunnel_cut == y.tunnel_cut);
    CHECK(x.l7_cut == y.l7_cut);
    CHECK(x.zanon_released == y.zanon_released);
    CHECK(x.zanon_hidden == y.zanon_hidden);
  }
};

// The generator's mix in each of its encapsulations, outer UDP checksums
// off and on, written once per test program.
std::vector<std::string> generated() {
  static std::vector<std::string> files = [] {
    std::vector<std::string> out;
    const std::string& dir = amon_test::scratch_dir();
    for (const char* t : {"gtpu", "vxlan", "geneve", "gre", "ipip"})
      for (bool csum : {false, true}) {
        gen::Options o;
        o.out = dir + "/" + t + (csum ? "-csum" : "") + ".pcap";
        o.seed = 7;
        o.packets = 1500;
        o.tunnel = t;
        o.tunnel_csum = csum;
        gen::generate(o);
        out.push_back(o.out);
      }
    return out;
  }();
  return files;
}

std::vector<std::string> inputs() {
  std::vector<std::string> in = generated();
  for (const auto& p : amon::testing::shared_captures()) {
    const std::string name = p.substr(p.find_last_of('/') + 1);
    if (name.rfind("tunnel-", 0) == 0 || name == "vlan-qinq-pppoe.pcap" || name == "mpls-vlan.pcap" ||
        name == "tls13-quic-sites.pcap")
      in.push_back(p);
  }
  return in;
}

}  // namespace

TEST_CASE("tunnel shortcuts: the same output as the full decoder and process_encap") {
  const auto files = inputs();
  for (const char* body : kPolicies) {
    Pair p(body);
    std::mt19937 rng(2152);
    for (const auto& path : files) {
      REQUIRE(amon::testing::for_each_record(path, [&](const uint8_t* data, uint32_t caplen, uint32_t len, uint64_t ts) {
        INFO(path << " policy:\n" << body);
        p.run(data, caplen, len, ts);
        // Mutations in the outer and inner headers (the first 120 bytes),
        // and sometimes a shorter capture.
        std::vector<uint8_t> x(data, data + caplen);
        if (x.empty()) return;
        const uint32_t span = uint32_t(std::min<size_t>(x.size(), 120));
        for (int f = 0; f < 2; ++f) x[rng() % span] ^= uint8_t(1u << (rng() % 8));
        uint32_t cap = caplen;
        if (rng() % 4 == 0) cap = uint32_t(rng() % (cap + 1));
        p.run(x.data(), cap, len, ts + 1);
      }));
    }
    INFO("policy:\n" << body);
    p.same_counters();
    // Both shortcuts were taken, and policies changed bytes: something was compared.
    CHECK(p.decode_fast > 5000);
    CHECK(p.encap_fast > 3000);
    CHECK(p.changed > 3000);
  }
}
