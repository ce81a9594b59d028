// A reload as a worker sees it (WorkerPath::adopt, the step `amon run`'s
// workers take between bursts on SIGHUP), on DPDK mbufs: what z-anonymity
// knows survives, what a flow decided under the old policy does not.
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "flow_table.h"
#include "eal_env.h"
#include "frames.h"
#include "mbuf_meta.h"
#include "policy.h"
#include "registry.h"
#include "worker_path.h"
#include "zanon.h"

using namespace amon;
using namespace amon_test;

namespace {

struct Env {
  rte_mempool* pool = nullptr;
  std::unique_ptr<zanon::Store> store;
  SharedServices svc;
  Env() {
    pool = start_eal("test_reload", 1023);
    zanon::Config zc;
    zc.max_values = 4096;
    zc.zmax = 10;  // sized for the largest z of any generation, as the engine does at start-up
    zc.max_dt_ns = 3600ULL * 1000000000ULL;
    store = std::make_unique<zanon::Store>(zc);
    svc.zstore = store.get();
  }
};

Env& env() {
  static Env e;
  return e;
}

std::unique_ptr<Program> program(const std::string& text) {
  dsl::Diagnostics d;
  auto pol = dsl::compile_string(text, "reload.amon", d);
  INFO(d.render_text());
  REQUIRE(pol);
  return std::make_unique<Program>(pol, 0, &env().svc);
}

// One packet in, the consumer's copy out.
struct Run {
  std::vector<Bytes> out;
  static void sink(void* ctx, unsigned, rte_mbuf* m) {
    const uint8_t* p = rte_pktmbuf_mtod(m, const uint8_t*);
    static_cast<Run*>(ctx)->out.emplace_back(p, p + rte_pktmbuf_data_len(m));
    rte_pktmbuf_free(m);
  }
  Bytes send(WorkerPath& path, const Bytes& frame, uint64_t ts) {
    rte_mbuf* m = rte_pktmbuf_alloc(env().pool);
    REQUIRE(m);
    std::memcpy(rte_pktmbuf_append(m, uint16_t(frame.size())), frame.data(), frame.size());
    mbuf_set_ts(m, ts);
    mbuf_set_wire_len(m, uint32_t(frame.size()));
    mbuf_set_seq(m, 0);  // a recycled mbuf's number (and what it says of initiators) is gone, as in the engine
    out.clear();
    path.process_burst(&m, 1, sink, this);
    REQUIRE(out.size() == 1);
    return out[0];
  }
};

Bytes tcp_to_server(const char* client, uint16_t sport, const char* server = "198.51.100.7") {
  V4 h;
  h.src = v4(client);
  h.dst = v4(server);
  Bytes f = eth(0x0800);
  put(f, ipv4(h, tcp_hdr(sport, 80, 0x18)));
  return f;
}

Bytes dns_query(const char* client, uint16_t sport, const char* name) {
  Bytes q;
  put16(q, 0x1234), put16(q, 0x0100), put16(q, 1), put16(q, 0), put16(q, 0), put16(q, 0);
  for (const char* p = name; *p;) {
    const char* dot = std::strchr(p, '.');
    size_t n = dot ? size_t(dot - p) : std::strlen(p);
    put8(q, unsigned(n));
    q.insert(q.end(), p, p + n);
    p += n + (dot ? 1 : 0);
  }
  put8(q, 0), put16(q, 1), put16(q, 1);
  V4 h;
  h.src = v4(client);
  h.dst = v4("192.0.2.53");
  h.proto = 17;
  Bytes l4 = udp_hdr(sport, 53, uint16_t(8 + q.size()));
  put(l4, q);
  Bytes f = eth(0x0800);
  put(f, ipv4(h, l4));
  return f;
}

std::string dst_of(const Bytes& f) { return str4(f.data() + 14 + 16); }
bool has_name(const Bytes& f, const char* label) {
  return std::search(f.begin(), f.end(), label, label + std::strlen(label)) != f.end();
}

}  // namespace

TEST_CASE("reload: z-anonymity counts survive, per-flow decisions are taken again") {
  Env& E = env();
  const std::string head = "clients = { 10.0.0.0/8 }\ndns.qname : zanon(z=2, dt=1h, fallback=redact)\n";
  std::vector<std::unique_ptr<Program>> gen_a;
  gen_a.push_back(program(head + "ip.server : zanon(z=2, dt=1h, fallback=prefix(24))\n"));
  // B protects the same server more: 5 users, where 3 were seen.
  auto prog_b = program(head + "ip.server : zanon(z=5, dt=1h, fallback=prefix(24))\n");
  WorkerPath path(gen_a, E.pool, std::make_unique<FlowTable>("reload_flows", 1024, FlowTimeouts{}, 0));
  Run r;
  uint64_t t = 1000000000ULL;

  // Under A: the server is released once two users were seen; each flow
  // keeps its decision.
  CHECK(dst_of(r.send(path, tcp_to_server("10.0.0.1", 40001), t += 1000)) == "198.51.100.0");
  CHECK(dst_of(r.send(path, tcp_to_server("10.0.0.2", 40002), t += 1000)) == "198.51.100.7");
  CHECK(dst_of(r.send(path, tcp_to_server("10.0.0.3", 40003), t += 1000)) == "198.51.100.7");
  CHECK(dst_of(r.send(path, tcp_to_server("10.0.0.2", 40002), t += 1000)) == "198.51.100.7");
  // A name two users asked for is released.
  CHECK(!has_name(r.send(path, dns_query("10.0.0.1", 50001, "www.example.org"), t += 1000), "example"));
  CHECK(has_name(r.send(path, dns_query("10.0.0.2", 50002, "www.example.org"), t += 1000), "example"));

  ProgramSet next;
  next.progs.push_back(prog_b->instantiate());
  next.rule_hits.emplace_back(prog_b->rule_count() + 1, 0);
  const uint8_t gen0 = path.generation();
  path.adopt(next);
  CHECK(path.generation() != gen0);
  // The previous generation's instance came back for the control plane to free.
  REQUIRE(next.progs.size() == 1);
  CHECK(&next.progs[0]->program() == gen_a[0].get());

  // The flow released under A is hidden at its next packet under B.
  CHECK(dst_of(r.send(path, tcp_to_server("10.0.0.2", 40002), t += 1000)) == "198.51.100.0");
  CHECK(dst_of(r.send(path, tcp_to_server("10.0.0.3", 40003), t += 1000)) == "198.51.100.0");
  // The name stays released with no new user: the store's counts survived.
  CHECK(has_name(r.send(path, dns_query("10.0.0.1", 50003, "www.example.org"), t += 1000), "example"));
  // And B's rule counts start at this generation.
  CHECK(path.counters()[0].rule_hits.size() == prog_b->rule_count() + 1);
}

TEST_CASE("reload: a generation tag that wraps forgets every flow's decisions") {
  Env& E = env();
  std::vector<std::unique_ptr<Program>> gen_a;
  const std::string a = "clients = { 10.0.0.0/8 }\nip.server : zanon(z=2, dt=1h, fallback=prefix(24))\n";
  gen_a.push_back(program(a));
  WorkerPath path(gen_a, E.pool, std::make_unique<FlowTable>("reload_wrap", 1024, FlowTimeouts{}, 0));
  Run r;
  uint64_t t = 5000000000ULL;
  const char* srv = "198.51.100.77";
  CHECK(dst_of(r.send(path, tcp_to_server("10.0.1.1", 41001, srv), t += 1000)) == "198.51.100.0");
  CHECK(dst_of(r.send(path, tcp_to_server("10.0.1.2", 41002, srv), t += 1000)) == srv);
  // 255 reloads of the same policy, the flow idle throughout: its tag
  // comes round to the current value, and only the sweep at the wrap keeps
  // an old decision from passing as current. The last generation protects
  // the server more than the 2 users seen.
  auto b = program("clients = { 10.0.0.0/8 }\nip.server : zanon(z=5, dt=1h, fallback=prefix(24))\n");
  for (int i = 0; i < 255; ++i) {
    const Program& p = i == 254 ? *b : *gen_a[0];
    ProgramSet next;
    next.progs.push_back(p.instantiate());
    next.rule_hits.emplace_back(p.rule_count() + 1, 0);
    path.adopt(next);
  }
  CHECK(dst_of(r.send(path, tcp_to_server("10.0.1.2", 41002, srv), t += 1000)) == "198.51.100.0");
}

TEST_CASE("reload: Crypto-PAn caches of an unchanged key carry over, a new key starts afresh") {
  Env& E = env();
  setenv("AMON_RELOAD_KEY_A", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", 1);
  setenv("AMON_RELOAD_KEY_B", "f0e0d0c0b0a090807060504030201000f0e0d0c0b0a0908070605040302010ff", 1);
  const std::string pa = "clients = { 10.0.0.0/8 }\nkey k = env(\"AMON_RELOAD_KEY_A\")\nip.client : cryptopan(key=k)\n";
  const std::string pb = "clients = { 10.0.0.0/8 }\nkey k = env(\"AMON_RELOAD_KEY_B\")\nip.client : cryptopan(key=k)\n";
  std::vector<std::unique_ptr<Program>> gen_a;
  gen_a.push_back(program(pa));
  WorkerPath path(gen_a, E.pool, std::make_unique<FlowTable>("reload_cpan", 1024, FlowTimeouts{}, 0));
  Run r;
  uint64_t t = 9000000000ULL;
  auto src_of = [](const Bytes& f) { return str4(f.data() + 14 + 12); };
  const std::string a1 = src_of(r.send(path, tcp_to_server("10.0.2.1", 42001), t += 1000));
  const std::string a2 = src_of(r.send(path, tcp_to_server("10.0.2.2", 42002), t += 1000));
  CHECK(a1 != "10.0.2.1");

  auto reload = [&](const Program& p) {
    ProgramSet next;
    next.progs.push_back(p.instantiate());
    next.rule_hits.emplace_back(p.rule_count() + 1, 0);
    path.adopt(next);
  };
  // The same key in a new generation (the policy file re-read): the
  // addresses seen before are answered from the carried-over cache, new
  // ones are computed, and every mapping is the one the key gives.
  auto same = program(pa);
  reload(*same);
  CHECK(src_of(r.send(path, tcp_to_server("10.0.2.1", 42003), t += 1000)) == a1);
  CHECK(src_of(r.send(path, tcp_to_server("10.0.2.2", 42004), t += 1000)) == a2);
  CHECK(path.instance(0).cryptopan_misses() == 0);
  r.send(path, tcp_to_server("10.0.2.3", 42005), t += 1000);
  CHECK(path.instance(0).cryptopan_misses() == 1);

  // A new key: nothing of the old cache may answer.
  auto other = program(pb);
  reload(*other);
  const std::string b1 = src_of(r.send(path, tcp_to_server("10.0.2.1", 42006), t += 1000));
  CHECK(b1 != a1);
  CHECK(path.instance(0).cryptopan_misses() == 1);
}

TEST_CASE("several consumers: one Crypto-PAn cache per key on a worker, kept across a reload") {
  Env& E = env();
  setenv("AMON_RELOAD_KEY_A", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", 1);
  setenv("AMON_RELOAD_KEY_B", "f0e0d0c0b0a090807060504030201000f0e0d0c0b0a0908070605040302010ff", 1);
  // Two different policies with one key, a third with another.
  const std::string p1 = "clients = { 10.0.0.0/8 }\nkey k = env(\"AMON_RELOAD_KEY_A\")\nip.client : cryptopan(key=k)\n";
  const std::string p2 = "clients = { 10.0.0.0/8 }\nkey k = env(\"AMON_RELOAD_KEY_A\")\nip.client : cryptopan(key=k)\n"
                         "ip.server : prefix(24)\n";
  const std::string p3 = "clients = { 10.0.0.0/8 }\nkey k = env(\"AMON_RELOAD_KEY_B\")\nip.client : cryptopan(key=k)\n";
  auto flows = [](const char* name) { return std::make_unique<FlowTable>(name, 4096, FlowTimeouts{}, 0); };
  // Every consumer's copy of one packet, in consumer order.
  struct Outs {
    std::vector<std::pair<unsigned, Bytes>> got;
    static void sink(void* ctx, unsigned c, rte_mbuf* m) {
      const uint8_t* p = rte_pktmbuf_mtod(m, const uint8_t*);
      static_cast<Outs*>(ctx)->got.emplace_back(c, Bytes(p, p + rte_pktmbuf_data_len(m)));
      rte_pktmbuf_free(m);
    }
  };
  auto send = [&](WorkerPath& path, const Bytes& frame, uint64_t ts) {
    rte_mbuf* m = rte_pktmbuf_alloc(E.pool);
    REQUIRE(m);
    std::memcpy(rte_pktmbuf_append(m, uint16_t(frame.size())), frame.data(), frame.size());
    mbuf_set_ts(m, ts);
    mbuf_set_wire_len(m, uint32_t(frame.size()));
    mbuf_set_seq(m, 0);
    Outs o;
    path.process_burst(&m, 1, Outs::sink, &o);
    std::vector<std::string> src(path.counters().size());
    for (auto& [c, b] : o.got) src.at(c) = str4(b.data() + 14 + 12);
    return src;
  };
  auto frame = [](unsigned i) {
    const std::string c = "10.0." + std::to_string(i / 200) + "." + std::to_string(i % 200 + 1);
    return tcp_to_server(c.c_str(), uint16_t(40000 + i));
  };
  constexpr unsigned kClients = 300;

  std::vector<std::unique_ptr<Program>> set, alone1, alone3;
  for (const auto* p : {&p3, &p1, &p2}) set.push_back(program(*p));
  alone1.push_back(program(p1));
  alone3.push_back(program(p3));
  WorkerPath path(set, E.pool, flows("cpan_share"));
  WorkerPath only1(alone1, E.pool, flows("cpan_only1"));
  WorkerPath only3(alone3, E.pool, flows("cpan_only3"));
  uint64_t t = 9000000000ULL;
  for (unsigned i = 0; i < kClients; ++i) {
    const auto s = send(path, frame(i), t += 1000);
    REQUIRE(s.size() == 3);
    // Each consumer writes what its policy writes alone.
    CHECK(s[1] == send(only1, frame(i), t).at(0));
    CHECK(s[2] == s[1]);
    CHECK(s[0] == send(only3, frame(i), t).at(0));
    CHECK(s[0] != s[1]);
  }
  // Each key's addresses were encrypted once on the worker, not once per consumer.
  CHECK(only1.instance(0).cryptopan_misses() == kClients);
  CHECK(path.instance(1).cryptopan_misses() + path.instance(2).cryptopan_misses() == kClients);
  CHECK(path.instance(0).cryptopan_misses() == kClients);

  // A reload that reorders the consumers: the first consumer of the first
  // key had no predecessor of that key in its place, the second had; the
  // entries the second took are the ones the key's consumers share.
  ProgramSet next;
  std::vector<std::unique_ptr<Program>> gen2;
  for (const auto* p : {&p1, &p2, &p3}) {
    gen2.push_back(program(*p));
    next.progs.push_back(gen2.back()->instantiate());
    next.rule_hits.emplace_back(gen2.back()->rule_count() + 1, 0);
  }
  path.adopt(next);
  for (unsigned i = 0; i < kClients; ++i) {
    const auto s = send(path, frame(i), t += 1000);
    CHECK(s[0] == send(only1, frame(i), t).at(0));
    CHECK(s[1] == s[0]);
    CHECK(s[2] == send(only3, frame(i), t).at(0));
  }
  CHECK(path.instance(0).cryptopan_misses() + path.instance(1).cryptopan_misses() == 0);
  CHECK(path.instance(2).cryptopan_misses() == kClients);
}
