// Replays a capture from memory through the real worker path (decode, flow
// table, every consumer's program, copy-or-share) into a null sink, on one
// core, and prints Mpps and ns per packet. Each policy is measured next to
// an empty policy (I/O only: mbuf allocation, copy-in, decode, flow lookup,
// refcount, free), so the cost of anonymization reads off the difference.
//
//   bench_engine --pcap FILE [--seconds S] [--flows N] POLICY.amon [POLICY.amon ...]
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include <pcap/pcap.h>

#include "flow_table.h"
#include "mbuf_meta.h"
#include "policy.h"
#include "registry.h"
#include "worker_path.h"
#include "zanon.h"

using namespace amon;

namespace {

struct Rec {
  std::vector<uint8_t> data;
  uint64_t ts;
  uint32_t wire;
};

void null_sink(void*, unsigned, rte_mbuf* m) { rte_pktmbuf_free(m); }

uint32_t g_flows = 1u << 18;  // the engine's default flows per worker

// CPU time of this thread: on a shared machine the wall clock also counts
// the time other processes held the core, this does not.
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double run_one(const std::vector<Rec>& recs, const std::vector<std::shared_ptr<const dsl::Policy>>& pols,
               rte_mempool* pool, double seconds, uint64_t& packets_out, uint64_t& rounds, double& cpu) {
  SharedServices svc;
  // The same store the engine builds (sized for the largest z and dt).
  zanon::Config zc;
  zc.zmax = 50;  // the largest z the shipped policies use
  zc.max_dt_ns = 7ULL * 86400 * 1000000000ULL;
  zc.max_values = 1u << 18;
  zanon::Store store(zc);
  svc.zstore = &store;
  std::vector<std::unique_ptr<Program>> progs;
  for (size_t i = 0; i < pols.size(); ++i) progs.push_back(std::make_unique<Program>(pols[i], int(i), &svc));
  static int n = 0;
  WorkerPath path(progs, pool,
                  std::make_unique<FlowTable>("bench_flows" + std::to_string(n++), g_flows, FlowTimeouts{},
                                              int(rte_socket_id())));
  constexpr unsigned kBurst = 32;
  rte_mbuf* burst[kBurst];
  // One pass over the capture: mbufs filled as a NIC's DMA would, then the
  // worker path on each burst.
  auto round = [&]() -> uint64_t {
    for (size_t i = 0; i < recs.size(); i += kBurst) {
      unsigned n = unsigned(std::min<size_t>(kBurst, recs.size() - i));
      if (rte_pktmbuf_alloc_bulk(pool, burst, n) != 0) {
        std::fprintf(stderr, "mbuf pool exhausted\n");
        std::exit(1);
      }
      for (unsigned k = 0; k < n; ++k) {
        const Rec& r = recs[i + k];
        rte_mbuf* m = burst[k];
        std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), r.data.data(), r.data.size());
        m->data_len = uint16_t(r.data.size());
        m->pkt_len = uint32_t(r.data.size());
        mbuf_set_ts(m, r.ts);
        mbuf_set_wire_len(m, r.wire);
      }
      path.process_burst(burst, n, null_sink, nullptr);
    }
    return recs.size();
  };
  // Untimed first: the flow table and the z-anonymity store touch their
  // memory for the first time (page faults are start-up, not steady state).
  round();
  uint64_t done = 0;
  rounds = 0;
  auto t0 = std::chrono::steady_clock::now();
  const double c0 = thread_cpu_seconds();
  double elapsed = 0;
  while (elapsed < seconds) {
    done += round();
    ++rounds;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  packets_out = done;
  cpu = thread_cpu_seconds() - c0;
  return elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pcap_path;
  double seconds = 3;
  std::vector<std::string> policies;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--pcap" && i + 1 < argc) pcap_path = argv[++i];
    else if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--flows" && i + 1 < argc) g_flows = uint32_t(std::strtoul(argv[++i], nullptr, 10));
    else policies.push_back(a);
  }
  if (pcap_path.empty()) {
    std::fprintf(stderr, "usage: bench_engine --pcap FILE [--seconds S] POLICY.amon...\n");
    return 2;
  }
  const char* eal[] = {"bench", "--no-huge", "--no-pci", "--no-shconf", "-m", "1024", "--lcores=0@0",
                       "--log-level=*:error", "--no-telemetry"};
  if (rte_eal_init(int(sizeof eal / sizeof *eal), const_cast<char**>(eal)) < 0) {
    std::fprintf(stderr, "EAL: %s\n", rte_strerror(rte_errno));
    return 1;
  }
  mbuf_meta_register();
  register_builtin_plugins();

  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline_with_tstamp_precision(pcap_path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  if (!p) {
    std::fprintf(stderr, "%s\n", err);
    return 1;
  }
  std::vector<Rec> recs;
  pcap_pkthdr* h;
  const u_char* d;
  uint64_t bytes = 0;
  while (pcap_next_ex(p, &h, &d) == 1) {
    if (h->caplen > RTE_MBUF_DEFAULT_DATAROOM) continue;  // the replay keeps to single-segment frames
    recs.push_back({std::vector<uint8_t>(d, d + h->caplen), uint64_t(h->ts.tv_sec) * 1000000000ULL + h->ts.tv_usec,
                    h->len});
    bytes += h->caplen;
  }
  pcap_close(p);
  if (recs.empty()) {
    std::fprintf(stderr, "no packets\n");
    return 1;
  }
  rte_mempool* pool = rte_pktmbuf_pool_create("bench", 65535, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, int(rte_socket_id()));
  if (!pool) {
    std::fprintf(stderr, "pool: %s\n", rte_strerror(rte_errno));
    return 1;
  }
  std::printf("capture: %s, %zu packets, mean %.0f bytes\n", pcap_path.c_str(), recs.size(), double(bytes) / recs.size());
  std::printf("%-40s %10s %10s %12s %12s\n", "policy", "Mpps", "ns/pkt", "Gbit/s", "cpu ns/pkt");
  std::vector<std::string> names{"(empty policy: I/O only)"};
  std::vector<std::vector<std::shared_ptr<const dsl::Policy>>> sets;
  dsl::Diagnostics diags;
  auto empty = dsl::compile_string("", "empty.amon", diags);
  if (!empty) {
    std::fputs(diags.render_text().c_str(), stderr);
    return 1;
  }
  sets.push_back({empty});
  for (auto& pol : policies) {
    dsl::Diagnostics dg;
    auto c = dsl::compile_file(pol, dg);
    if (!c) {
      std::fputs(dg.render_text().c_str(), stderr);
      return 2;
    }
    names.push_back(pol);
    sets.push_back({c});
  }
  for (size_t i = 0; i < sets.size(); ++i) {
    uint64_t pk = 0, rounds = 0;
    double cpu = 0;
    double el = run_one(recs, sets[i], pool, seconds, pk, rounds, cpu);
    double mpps = double(pk) / el / 1e6;
    std::printf("%-40s %10.2f %10.1f %12.2f %12.1f\n", names[i].c_str(), mpps, 1e9 * el / double(pk),
                mpps * 1e6 * (double(bytes) / recs.size()) * 8 / 1e9, 1e9 * cpu / double(pk));
  }
  rte_eal_cleanup();
  return 0;
}
