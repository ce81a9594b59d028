// libFuzzer target for 802.11 records (radiotap, PPI, plain): the capture
// header's reduction, the decoder through the frame, and two consumers:
// one with a rule on every wlan field, one that protects addresses only
// (the defaults). Checks what the product promises on any input: no crash,
// no read out of bounds (ASan), the fast and full decoders agree, lengths
// never grow, and in the first consumer's output every value the walk
// locates again is hidden (a station address zero, an SSID and an
// element's contents all zero or redacted, dots kept): nothing located leaks.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "amon_wlan.hpp"
#include "l2l4.h"
#include "l7.h"
#include "policy.h"
#include "registry.h"
#include "runtime.h"

using namespace amon;

namespace {

struct World {
  SharedServices svc;
  std::vector<std::shared_ptr<const dsl::Policy>> pols;
  std::vector<std::unique_ptr<Program>> progs;
  std::vector<std::unique_ptr<ProgramInstance>> inst;
  L7Parse parse;
  FlowState flow;
  World() {
    register_builtin_plugins();
    dsl::CompileOptions o;
    o.getenv = [](const char*) -> const char* {
      return "1522178d33a4cf80130a5b1649907d10d8988f837979652762574c2d2a842202";
    };
    const char* texts[] = {
        "wlan.src, wlan.dst, wlan.bssid, wlan.ra, wlan.ta : zero()\n"
        "wlan.ssid : redact()\n"
        "wlan.ie : zero()\n"
        "payload : cut()\n",
        "key k = env(\"K\")\n"
        "ip.client : cryptopan(key=k)\n",
    };
    for (const char* t : texts) {
      dsl::Diagnostics d;
      auto p = dsl::compile_string(t, "fuzz.amon", d, o);
      if (!p) __builtin_trap();
      pols.push_back(p);
      progs.push_back(std::make_unique<Program>(p, int(pols.size() - 1), &svc));
      inst.push_back(progs.back()->instantiate());
    }
  }
};

bool hidden(const ProtoOcc& o, const uint8_t* p) {
  for (uint32_t i = 0; i < o.len; ++i)
    // redact() keeps a name's dots in place (its labels' lengths).
    if (p[o.off + i] != 0 && !(o.kind == OccKind::Name && (p[o.off + i] == 'x' || p[o.off + i] == '.'))) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World w;
  static uint64_t packet = 0;
  if (size < 2) return 0;
  static constexpr int kDlts[3] = {wlan::kDltIeee80211, wlan::kDltRadiotap, wlan::kDltPpi};
  const int dlt = kDlts[data[0] % 3];
  const uint32_t in_cap = uint32_t(size - 1), in_wire = in_cap + (data[0] >> 2);
  std::vector<uint8_t> orig(14 + in_cap + 64 + 64);
  link_stand_in(dlt, orig.data());
  uint32_t nw = 0;
  const uint32_t n = wlan::normalize(dlt, data + 1, in_cap, in_wire, orig.data() + 14, nw);
  if (n > in_cap + 64 || nw < n) __builtin_trap();
  const uint32_t cap = 14 + n, wire = 14 + nw;
  Decoded d, full;
  decode(orig.data(), cap, wire, d);
  decode_full(orig.data(), cap, wire, full);
  if (!(d == full) || !(d.flags & kFlagLink)) __builtin_trap();
  PacketMeta m;
  m.ts_ns = 1700000000ULL * 1000000000ULL + packet * 1000;
  m.flow = &w.flow;
  m.orig = orig.data();
  w.parse.reset(++packet);
  analyze_l7(orig.data(), d, m, w.parse);
  for (size_t k = 0; k < w.inst.size(); ++k) {
    std::vector<uint8_t> buf(orig);
    uint32_t c = cap, wl = wire;
    ConsumerCounters cc;
    const Verdict v = w.inst[k]->process(buf.data(), c, wl, d, m, cc);
    if (v != Verdict::Forward) continue;
    if (c > cap || wl > wire || c > wl) __builtin_trap();
    if (k != 0) continue;
    LinkOccs occs;
    link_layer()->locate(dlt, buf.data(), c, 14, occs);
    for (uint32_t i = 0; i < occs.n; ++i) {
      const ProtoOcc& o = occs.occ[i];
      if (o.kind == OccKind::Mac && (buf[o.off] & 1)) continue;  // group addresses stay
      if (!hidden(o, buf.data())) __builtin_trap();
    }
  }
  if (packet % 64 == 0) w.flow = FlowState{};
  return 0;
}
