// libFuzzer target for the packet path without DPDK: decode an arbitrary
// frame, analyze its application layer, and run it through programs that
// protect everything (addresses, names, text fields, payload), with on_error
// cut and drop. Checks what the product promises on any input: no crash, no
// out-of-bounds access (ASan), lengths never grow, and a cut frame stays
// within the original bytes.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "l2l4.h"
#include "l7.h"
#include "policy.h"
#include "registry.h"
#include "runtime.h"
#include "zanon.h"

using namespace amon;

namespace {

struct World {
  zanon::Store store{[] {
    zanon::Config c;
    c.max_values = 4096;
    c.zmax = 4;
    c.max_dt_ns = 3600ULL * 1000000000ULL;
    return c;
  }()};
  SharedServices svc;
  std::vector<std::shared_ptr<const dsl::Policy>> pols;
  std::vector<std::unique_ptr<Program>> progs;
  std::vector<std::unique_ptr<ProgramInstance>> inst;
  L7Parse parse;
  FlowState flow;

  World() {
    register_builtin_plugins();
    svc.zstore = &store;
    dsl::CompileOptions o;
    o.getenv = [](const char*) -> const char* {
      return "1522178d33a4cf80130a5b1649907d10d8988f837979652762574c2d2a842202";
    };
    const char* texts[] = {
        "key k = env(\"K\")\n"
        "eth.src, eth.dst : timestamp()\n"
        "ip.client : cryptopan(key=k)\n"
        "ip.server : zanon(z=2, dt=1h, fallback=prefix(24))\n"
        "dns.qname, dns.answer.name, dns.rdata.name, tls.sni, http.host : zanon(z=3, dt=1h, fallback=sld)\n"
        "dns.answer.addr : cryptopan(key=k)\n"
        "dns.ecs : zero()\n"
        "http.user_agent, http.cookie, http.uri, http.referer : redact()\n"
        "payload : cut() when not proto in { dns, tls, http }\n",
        "key k = env(\"K\")\n"
        "on_error = drop\n"
        "ip.src, ip.dst : hash(key=k)\n"
        "tls.sni, http.host : hash(key=k)\n"
        "dns.ecs : cryptopan(key=k)\n"
        "payload : zero() when proto in { udp }\n",
    };
    // Each policy is one consumer: compiled, and its program built.
    auto consumer = [&](const char* t) -> const Program& {
      dsl::Diagnostics d;
      auto p = dsl::compile_string(t, "fuzz.amon", d, o);
      if (!p) __builtin_trap();
      pols.push_back(p);
      progs.push_back(std::make_unique<Program>(p, int(pols.size() - 1), &svc));
      return *progs.back();
    };
    for (const char* t : texts) inst.push_back(consumer(t).instantiate());
    // Header-only policies: their compiled kernel, twinned with the
    // general path, which must give the same bytes (test_hdr_fast does
    // the same on the shared captures).
    const char* hdr_texts[] = {
        "key k = env(\"K\")\n"
        "eth.src, eth.dst : timestamp()\n"
        "ip.client : cryptopan(key=k)\n"
        "ip.server : prefix(24)\n"
        "payload : cut()\n",
        "key k = env(\"K\")\n"
        "clients = { 10.0.0.0/8, 2001:db8::/32 }\n"
        "ip.src, ip.dst : cryptopan(key=k)\n"
        "payload : zero()\n",
    };
    for (const char* t : hdr_texts) {
      const Program& prog = consumer(t);
      hdr.push_back(prog.instantiate());
      if (!hdr.back()->header_kernel()) __builtin_trap();
      hdr_general.push_back(prog.instantiate());
      hdr_general.back()->set_header_fast_path(false);
    }
  }
  std::vector<std::unique_ptr<ProgramInstance>> hdr, hdr_general;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World w;
  static uint64_t packet = 0;
  if (size < 2) return 0;
  // First byte: wire length extra (a snaplen-cut record) and direction.
  const uint32_t extra = data[0] & 0x7f;
  const bool init_src = data[0] & 0x80;
  // 64 bytes of slack after the frame, as mbufs have: Hyperscan's AVX-512
  // matcher may read past the end of what it scans (vectorscan#322).
  std::vector<uint8_t> orig(data + 1, data + size);
  const uint32_t cap = uint32_t(orig.size()), wire = cap + extra;
  orig.reserve(cap + 64);
  Decoded d;
  decode(orig.data(), cap, wire, d);
  // decode()'s fast path must agree with the full decoder on every input.
  Decoded full;
  decode_full(orig.data(), cap, wire, full);
  if (!(d == full)) __builtin_trap();
  // Multipath TCP ADD_ADDR options, however malformed: every one the
  // runtime reads lies inside the header, and its packet is flagged for it.
  if (d.l4_proto == kProtoTcp && d.l4_hdr_len > 20 && d.l4_off + d.l4_hdr_len <= cap) {
    const uint32_t n = d.l4_hdr_len - 20u;
    bool seen = false;
    each_add_addr(orig.data() + d.l4_off + 20, n, [&](const AddAddr& a) {
      seen = true;
      if (a.off + a.len > n) __builtin_trap();
      if (a.family && (a.addr + (a.family == 4 ? 4u : 16u) > a.len || (a.hmac && a.hmac + 8u > a.len)))
        __builtin_trap();
    });
    if (seen && d.status == DecodeStatus::Ok && !(d.flags & kFlagAddrBody)) __builtin_trap();
  }
  PacketMeta m;
  m.ts_ns = 1700000000ULL * 1000000000ULL + packet * 1000;
  m.initiator_is_src = init_src;
  m.flow = &w.flow;
  m.orig = orig.data();
  w.parse.reset(++packet);
  analyze_l7(orig.data(), d, m, w.parse);
  for (auto& pi : w.inst) {
    std::vector<uint8_t> buf(orig);
    buf.reserve(cap + 64);
    uint32_t c = cap, wl = wire;
    ConsumerCounters cc;
    Verdict v = pi->process(buf.data(), c, wl, d, m, cc);
    if (v == Verdict::Forward && (c > cap || wl > wire || c > wl)) __builtin_trap();
  }
  // The kernels keep a flow's Crypto-PAn result for its client in the
  // FlowState (memo), which in the engine belongs to one flow, one address
  // pair: here a fresh one per input, and each kernel runs twice, the
  // second time from its memo.
  for (size_t i = 0; i < w.hdr.size(); ++i) {
    FlowState fs;
    PacketMeta mh = m;
    mh.flow = &fs;
    std::vector<uint8_t> a(orig), a2(orig), b(orig);
    uint32_t ca = cap, wa = wire, ca2 = cap, wa2 = wire, cb = cap, wb = wire;
    ConsumerCounters x, x2, y;
    const Verdict va = w.hdr[i]->process(a.data(), ca, wa, d, mh, x);
    const Verdict va2 = w.hdr[i]->process(a2.data(), ca2, wa2, d, mh, x2);
    const Verdict vb = w.hdr_general[i]->process(b.data(), cb, wb, d, mh, y);
    if (va != vb || ca != cb || wa != wb || x.rule_hits != y.rule_hits) __builtin_trap();
    if (va2 != vb || ca2 != cb || wa2 != wb || x2.rule_hits != y.rule_hits) __builtin_trap();
    if (va == Verdict::Forward && ca && std::memcmp(a.data(), b.data(), ca) != 0) __builtin_trap();
    if (va2 == Verdict::Forward && ca2 && std::memcmp(a2.data(), b.data(), ca2) != 0) __builtin_trap();
  }
  // The flow state persists across inputs on purpose (stream state), but a
  // long run must not wedge it: reset now and then.
  if (packet % 64 == 0) w.flow = FlowState{};
  return 0;
}
