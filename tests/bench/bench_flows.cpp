// Flow table figures: inserts/s and lookups/s with N flows resident (1M and
// 10M by default), and bytes per flow (entry plus bucket share). One
// worker's table, one core.
//
//   bench_flows [N ...]
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "flow_table.h"
#include "l2l4.h"

using namespace amon;

namespace {

// One synthetic IPv4/TCP packet per flow: the table keys on the decoded
// 5-tuple, so the bench goes through the same make_key as the engine.
struct Pkt {
  uint8_t b[54];
  Decoded d;
};

void make_pkt(Pkt& p, uint32_t flow) {
  std::memset(p.b, 0, sizeof p.b);
  p.b[12] = 0x08;
  uint8_t* ip = p.b + 14;
  ip[0] = 0x45;
  ip[2] = 0, ip[3] = 40;
  ip[8] = 64, ip[9] = 6;
  uint32_t src = 0x0a000000 | (flow & 0xffffff), dst = 0xc6336400 | ((flow >> 24) & 0xff);
  for (int i = 0; i < 4; ++i) ip[12 + i] = uint8_t(src >> (24 - 8 * i)), ip[16 + i] = uint8_t(dst >> (24 - 8 * i));
  uint8_t* tcp = ip + 20;
  uint16_t sport = uint16_t(1024 + (flow % 50000)), dport = 443;
  tcp[0] = uint8_t(sport >> 8), tcp[1] = uint8_t(sport), tcp[2] = uint8_t(dport >> 8), tcp[3] = uint8_t(dport);
  tcp[12] = 0x50, tcp[13] = 0x02;
  decode(p.b, sizeof p.b, sizeof p.b, p.d);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint32_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(uint32_t(std::strtoul(argv[i], nullptr, 10)));
  if (sizes.empty()) sizes = {1000000, 10000000};
  // The table is not in EAL memory (FlowTable maps its own); EAL only needs
  // its defaults.
  std::string mem = "256";
  const char* eal[] = {"bench_flows", "--no-huge", "--no-pci", "--no-shconf", "-m", mem.c_str(), "--lcores=0@0",
                       "--log-level=*:error", "--no-telemetry"};
  if (rte_eal_init(int(sizeof eal / sizeof *eal), const_cast<char**>(eal)) < 0) {
    std::fprintf(stderr, "EAL: %s\n", rte_strerror(rte_errno));
    return 1;
  }
  // Single lookups (lookups/s) are the worst case; the engine looks a burst
  // up at once (burst lookups/s: lookup_burst, 32 at a time, prefetching), so
  // that column is what its worker path gets from the table.
  std::printf("%12s %14s %14s %14s %16s %12s\n", "flows", "inserts/s", "lookups/s", "ns/lookup", "burst lookups/s",
              "bytes/flow");
  int t = 0;
  for (uint32_t n : sizes) {
    FlowTable ft("bench" + std::to_string(t++), n, FlowTimeouts{}, int(rte_socket_id()));
    Pkt p;
    PacketMeta m;
    auto t0 = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < n; ++i) {
      make_pkt(p, i);
      ft.lookup(p.b, p.d, 1, m);
    }
    double ins = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Lookups of resident flows in random order: the cache-missing case a
    // busy link produces. Packets are prepared first so only lookups are timed.
    const uint32_t nl = 2000000;
    std::vector<Pkt> pk(4096);
    std::mt19937 rng(1);
    uint64_t sink = 0;
    double look = 0;
    for (uint32_t done = 0; done < nl; done += uint32_t(pk.size())) {
      for (auto& q : pk) make_pkt(q, rng() % n);
      auto t1 = std::chrono::steady_clock::now();
      for (auto& q : pk) {
        ft.lookup(q.b, q.d, 2, m);
        sink += m.flow_first;
      }
      look += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    }
    // The same random lookups in bursts of 32, as WorkerPath::process_burst
    // makes them.
    constexpr unsigned kB = 32;
    std::vector<const uint8_t*> ptrs(pk.size());
    std::vector<Decoded> ds(pk.size());
    PacketMeta metas[kB];
    bool want[kB];
    std::fill(want, want + kB, true);
    double blook = 0;
    for (uint32_t done = 0; done < nl; done += uint32_t(pk.size())) {
      for (size_t i = 0; i < pk.size(); ++i) {
        make_pkt(pk[i], rng() % n);
        ptrs[i] = pk[i].b;
        ds[i] = pk[i].d;
      }
      auto t1 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < pk.size(); i += kB) {
        for (auto& mm : metas) mm = PacketMeta{}, mm.ts_ns = 3;
        ft.lookup_burst(ptrs.data() + i, ds.data() + i, want, kB, metas);
        for (auto& mm : metas) sink += mm.flow_first;
      }
      blook += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    }
    if (sink) std::fprintf(stderr, "unexpected new flows: %llu\n", static_cast<unsigned long long>(sink));
    std::printf("%12u %14.0f %14.0f %14.1f %16.0f %12.1f\n", n, n / ins, nl / look, look * 1e9 / nl, nl / blook,
                double(ft.memory_bytes()) / n);
  }
  rte_eal_cleanup();
  return 0;
}
