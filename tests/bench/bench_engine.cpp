// Replays a capture from memory through the real worker path (decode, flow
// table, every consumer's program, copy-or-share) into a null sink and prints
// Mpps and ns per packet. Each policy is measured next to an empty policy
// (I/O only: mbuf allocation, copy-in, decode, flow lookup, refcount, free),
// so the cost of anonymization reads off the difference.
//
// --workers N: N threads on N EAL lcores (lcore i pinned to CPU i mod the
// CPUs this process may use; the main lcore is worker 0, so N workers need
// only N CPUs). Each has its own WorkerPath and flow table and replays its
// share of the capture, split by the engine's symmetric flow hash modulo N as
// the dispatcher does; all share one z-anonymity store. Prints aggregate and
// per-worker Mpps, by wall clock and per CPU second of the worker thread
// (the latter is what a core gives when the machine is shared).
//
// --consumers 1,2,4: each policy is also measured as that many consumers
// with the same policy (each gets its own copy of every packet it rewrites,
// as in the engine), printing the input packet rate and its ratio to one
// consumer's: what N monitors behind one amon cost.
//
// --mixed: after the policies one by one, one run per consumer count N
// whose consumers are the policies given, in order, cycled to N (four
// policies, --consumers 4,8: each once, then each twice): one box in front
// of different monitors. Its rate is printed against the slowest policy's
// alone and against running each consumer's policy alone in turn.
//
//   bench_engine --pcap FILE [--seconds S] [--rounds R] [--workers N] [--flows N] [--zmax Z] [--lanes L]
//                [--share-config FILE]   (the store shared through NATS, as with zanon.share)
//                [--consumers N[,N...]] [--mixed] [--no-baseline] POLICY.amon [POLICY.amon ...]
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <sched.h>
#include <time.h>
#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <pcap/pcap.h>

#include "config.h"
#include "flow_table.h"
#include "mbuf_meta.h"
#include "policy.h"
#include "registry.h"
#include "share.h"
#include "worker_path.h"
#include "zanon.h"

using namespace amon;

namespace {

struct Rec {
  std::vector<uint8_t> data;
  uint64_t ts;
  uint32_t wire;
};

// The null output: what the workers hand over is freed a burst at a time,
// as the engine's TX buffers hand bursts to a port and a NIC's TX
// completion returns them to the pool in bulk.
struct NullSink {
  static constexpr unsigned kMax = 256;  // a burst's packets for every consumer, and then some
  rte_mbuf* out[kMax];
  unsigned n = 0;
  void flush() {
    if (n) rte_pktmbuf_free_bulk(out, n);
    n = 0;
  }
};
void null_sink(void* ctx, unsigned, rte_mbuf* m) {
  NullSink& s = *static_cast<NullSink*>(ctx);
  if (s.n == NullSink::kMax) s.flush();
  s.out[s.n++] = m;
}
// The engine hands a burst route's output over a burst at a time
// (enqueue_out_burst); so does the benchmark.
void null_sink_burst(void* ctx, unsigned, rte_mbuf** ms, unsigned n) {
  NullSink& s = *static_cast<NullSink*>(ctx);
  if (s.n + n > NullSink::kMax) s.flush();
  std::memcpy(s.out + s.n, ms, n * sizeof *ms);
  s.n += n;
}

uint32_t g_flows = 1u << 18;  // the engine's default flows per worker
uint64_t g_rounds = 0;        // > 0: exactly this many timed rounds (profilers: equal work per run)
uint32_t g_zmax = 0;          // > 0: store zmax instead of the policies' largest z
uint32_t g_lanes = 1;         // store lanes (doc/zanon.md, "Concurrency")
// --share-config FILE: the store shared through NATS JetStream as the
// engine's (a client thread publishing and reading while the workers run).
share::Settings g_share;

double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct WorkerRun {
  const std::vector<const Rec*>* recs = nullptr;  // this worker's share, in capture order
  WorkerPath* path = nullptr;
  rte_mempool* pool = nullptr;
  double seconds = 0;
  std::atomic<unsigned>* ready = nullptr;  // start barrier
  unsigned nworkers = 1;
  // results
  uint64_t packets = 0, rounds = 0;
  double wall = 0, cpu = 0;
};

int worker_main(void* arg) {
  WorkerRun& w = *static_cast<WorkerRun*>(arg);
  constexpr unsigned kBurst = 32;
  rte_mbuf* burst[kBurst];
  NullSink sink;
  // The share as one flat array in capture order: the copy-in reads a
  // record's bytes without first going through its Rec (a NIC's RX
  // descriptor ring is flat too).
  struct Src {
    const uint8_t* data;
    uint32_t len, wire;
    uint64_t ts;
  };
  std::vector<Src> recs;
  recs.reserve(w.recs->size());
  for (const Rec* r : *w.recs) recs.push_back({r->data.data(), uint32_t(r->data.size()), r->wire, r->ts});
  // One pass over this worker's share: mbufs filled as a NIC's DMA would,
  // then the worker path on each burst.
  //
  // The records are read ahead with a non-temporal hint. A NIC writes each
  // packet into one of a bounded set of recycled RX buffers and leaves no
  // trace of past packets in the CPU's caches; a plain copy from the
  // replayed capture would instead stream all of it (19 MB for the 200k
  // small packets) through the worker's caches every round and evict the
  // flow table and Crypto-PAn cache that a real worker keeps warm.
  auto round = [&]() -> uint64_t {
    for (size_t i = 0; i < recs.size(); i += kBurst) {
      unsigned n = unsigned(std::min<size_t>(kBurst, recs.size() - i));
      if (rte_pktmbuf_alloc_bulk(w.pool, burst, n) != 0) {
        std::fprintf(stderr, "mbuf pool exhausted\n");
        std::exit(1);
      }
      for (unsigned k = 0; k < n; ++k) {
        const Src& r = recs[i + k];
        if (i + kBurst + k < recs.size()) {  // the same packet of the next burst
          const char* next = reinterpret_cast<const char*>(recs[i + kBurst + k].data);
          _mm_prefetch(next, _MM_HINT_NTA);
          _mm_prefetch(next + 64, _MM_HINT_NTA);
        }
        rte_mbuf* m = burst[k];
        std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), r.data, r.len);
        m->data_len = uint16_t(r.len);
        m->pkt_len = r.len;
        mbuf_set_ts(m, r.ts);
        mbuf_set_wire_len(m, r.wire);
        mbuf_set_seq(m, 0);  // a recycled mbuf's number (and what it says of initiators) is gone, as in the engine
      }
      w.path->process_burst(burst, n, null_sink, &sink);
      sink.flush();
    }
    return recs.size();
  };
  // Untimed first: the flow table and the z-anonymity store touch their
  // memory for the first time (page faults are start-up, not steady state).
  round();
  w.ready->fetch_add(1);
  while (w.ready->load() < w.nworkers) _mm_pause();
  uint64_t done = 0, rounds = 0;
  const double c0 = thread_cpu_s();
  auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (g_rounds ? rounds < g_rounds : elapsed < w.seconds) {
    done += round();
    ++rounds;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  w.cpu = thread_cpu_s() - c0;
  w.wall = elapsed;
  w.packets = done;
  w.rounds = rounds;
  return 0;
}

struct Result {
  double mpps_wall = 0, mpps_cpu = 0;  // aggregate
  std::vector<WorkerRun> per;
};

Result run_one(const std::vector<std::vector<const Rec*>>& shares,
               const std::vector<std::shared_ptr<const dsl::Policy>>& pols, rte_mempool* pool, double seconds) {
  SharedServices svc;
  // The store the engine builds: sized for the largest z and dt the
  // policies use (engine.cpp, start_zstore), so an entry spans the lines it would there
  // (z = 10: 4 lines; z = 50: 14). max_values stays below the engine's
  // default (1M) to keep the benchmark's memory small; the replays touch a
  // few thousand values either way.
  zanon::Config zc;
  zc.zmax = 0;
  zc.max_dt_ns = 0;
  for (auto& p : pols)
    for (auto& r : p->rules)
      if (r.action.desc->name == "zanon") {
        zc.zmax = std::max<uint32_t>(zc.zmax, uint32_t(r.action.int_or("z", 10)));
        zc.max_dt_ns = std::max<uint64_t>(zc.max_dt_ns, uint64_t(r.action.int_or("dt", 0)));
      }
  if (g_zmax) zc.zmax = g_zmax;
  if (!zc.zmax) zc.zmax = 10;  // no zanon rule: the store is never asked
  zc.max_values = 1u << 18;
  zc.lanes = std::min<uint32_t>(std::max<uint32_t>(g_lanes, 1), zanon::Store::kMaxLanes);
  if (g_share.enabled()) {
    share::Keys k;
    std::string err;
    if (!share::load_keys(g_share.key_file, k, err)) throw std::runtime_error(err);
    zc.shared = true, zc.key = k.store, svc.user_hash_key = k.user;
  }
  zanon::Store store(zc);
  svc.zstore = &store;
  std::unique_ptr<share::Client> client;
  if (g_share.enabled()) {
    client = std::make_unique<share::Client>(g_share, store, std::max<uint64_t>(zc.max_dt_ns, 1), false,
                                             [](bool, const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); });
    client->start();
  }
  std::vector<std::unique_ptr<Program>> progs;
  for (size_t i = 0; i < pols.size(); ++i) progs.push_back(std::make_unique<Program>(pols[i], int(i), &svc));
  static int n = 0;
  const unsigned nw = unsigned(shares.size());
  std::vector<std::unique_ptr<WorkerPath>> paths;
  std::atomic<unsigned> ready{0};
  Result res;
  res.per.resize(nw);
  for (unsigned i = 0; i < nw; ++i) {
    paths.push_back(std::make_unique<WorkerPath>(
        progs, pool,
        std::make_unique<FlowTable>("bench_flows" + std::to_string(n++), g_flows, FlowTimeouts{},
                                    int(rte_socket_id()))));
    paths.back()->set_burst_sink(null_sink_burst);
    WorkerRun& w = res.per[i];
    w.recs = &shares[i];
    w.path = paths.back().get();
    w.pool = pool;
    w.seconds = seconds;
    w.ready = &ready;
    w.nworkers = nw;
  }
  // Worker i > 0 on the i-th worker lcore; worker 0 on the main lcore.
  unsigned lc = RTE_MAX_LCORE, i = 1;
  RTE_LCORE_FOREACH_WORKER(lc) {
    if (i >= nw) break;
    if (rte_eal_remote_launch(worker_main, &res.per[i], lc) != 0) {
      std::fprintf(stderr, "cannot launch worker %u on lcore %u\n", i, lc);
      std::exit(1);
    }
    ++i;
  }
  worker_main(&res.per[0]);
  rte_eal_mp_wait_lcore();
  if (client) {
    client->stop();
    const share::Status st = client->status();
    std::fprintf(stderr, "share: %s\n", share::to_text(st).c_str());
  }
  for (const WorkerRun& w : res.per) {
    res.mpps_wall += double(w.packets) / w.wall / 1e6;
    res.mpps_cpu += double(w.packets) / w.cpu / 1e6;
  }
  return res;
}

// --mixed: consumers with different policies (`sets[1..]`, cycled to each
// count). `alone[i]`: policy i's rate as the only consumer (Mpps/CPU-s).
void run_mixed(const std::vector<std::vector<const Rec*>>& shares,
               const std::vector<std::shared_ptr<const dsl::Policy>>& pols, const std::vector<double>& alone,
               const std::vector<unsigned>& counts, rte_mempool* pool, double seconds) {
  for (unsigned nc : counts) {
    std::vector<std::shared_ptr<const dsl::Policy>> set;
    double turns = 0, slowest = 0;  // seconds per Mpkt: every consumer's policy alone, one after another
    for (unsigned c = 0; c < nc; ++c) {
      set.push_back(pols[c % pols.size()]);
      const double a = alone[c % pols.size()];
      if (a > 0) turns += 1 / a;
      if (a > 0 && (slowest == 0 || a < slowest)) slowest = a;
    }
    Result r = run_one(shares, set, pool, seconds);
    std::string label = "mixed x" + std::to_string(nc);
    std::printf("%-40s %10.2f %10.1f %12s %12.2f", label.c_str(), r.mpps_wall, 1e3 / r.mpps_wall, "", r.mpps_cpu);
    if (slowest > 0) std::printf("   %.2fx the slowest alone, %.2fx each alone in turn", r.mpps_cpu / slowest,
                                 r.mpps_cpu * turns);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string pcap_path;
  double seconds = 3;
  std::vector<std::string> policies;
  unsigned workers = 1;
  bool baseline = true;  // false: skip the empty policy (profilers then see only the policies asked for)
  std::vector<unsigned> consumer_counts{1};
  bool mixed = false;
  std::vector<double> alone;  // each policy's rate as the only consumer (--mixed)
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--pcap" && i + 1 < argc) pcap_path = argv[++i];
    else if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--flows" && i + 1 < argc) g_flows = uint32_t(std::strtoul(argv[++i], nullptr, 10));
    else if (a == "--no-baseline") baseline = false;
    else if (a == "--mixed") mixed = true;
    else if (a == "--rounds" && i + 1 < argc) g_rounds = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--zmax" && i + 1 < argc) g_zmax = uint32_t(std::strtoul(argv[++i], nullptr, 10));
    else if (a == "--share-config" && i + 1 < argc) {
      std::string err;
      if (!load_share_config(argv[++i], g_share, err)) {
        std::fprintf(stderr, "%s\n", err.c_str());
        return 2;
      }
    } else if (a == "--lanes" && i + 1 < argc) g_lanes = uint32_t(std::strtoul(argv[++i], nullptr, 10));
    else if (a == "--workers" && i + 1 < argc) workers = unsigned(std::strtoul(argv[++i], nullptr, 10));
    else if (a == "--consumers" && i + 1 < argc) {
      consumer_counts.clear();
      for (char* c = argv[++i]; *c;) {
        char* end;
        unsigned long v = std::strtoul(c, &end, 10);
        if (end == c || v < 1 || v > unsigned(kMaxConsumers)) {
          std::fprintf(stderr, "--consumers: counts 1..%d separated by commas\n", kMaxConsumers);
          return 2;
        }
        consumer_counts.push_back(unsigned(v));
        c = *end == ',' ? end + 1 : end;
      }
    }
    else policies.push_back(a);
  }
  if (pcap_path.empty()) {
    std::fprintf(stderr,
                 "usage: bench_engine --pcap FILE [--seconds S] [--rounds R] [--workers N] [--flows N] [--zmax Z] "
                 "[--consumers N[,N...]] [--mixed] [--no-baseline] POLICY.amon...\n");
    return 2;
  }
  if (workers < 1 || workers > 64) {
    std::fprintf(stderr, "--workers: 1..64\n");
    return 2;
  }
  // lcore i pinned to the i-th CPU this process may run on (wrapping), so
  // `taskset -c 0,1 bench_engine --workers 2` gives each worker its own CPU.
  std::vector<int> cpus;
  {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof set, &set);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  std::string lcores = "--lcores=";
  for (unsigned i = 0; i < workers; ++i)
    lcores += (i ? "," : "") + std::to_string(i) + "@" + std::to_string(cpus[i % cpus.size()]);
  const char* eal[] = {"bench", "--no-huge", "--no-pci", "--no-shconf", "-m", "1024", lcores.c_str(),
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
  // Each worker's share: the packets the dispatcher would hand it.
  std::vector<std::vector<const Rec*>> shares(workers);
  for (const Rec& r : recs) {
    unsigned wi = 0;
    if (workers > 1) {
      Decoded d;
      decode(r.data.data(), uint32_t(r.data.size()), r.wire, d);
      wi = symmetric_flow_hash(r.data.data(), d) % workers;
    }
    shares[wi].push_back(&r);
  }
  std::printf("capture: %s, %zu packets, mean %.0f bytes, %u worker(s) on CPUs", pcap_path.c_str(), recs.size(),
              double(bytes) / recs.size(), workers);
  for (unsigned i = 0; i < workers; ++i) std::printf(" %d", cpus[i % cpus.size()]);
  std::printf("\n");
  if (workers > 1) {
    std::printf("packets per worker:");
    for (auto& sh : shares) std::printf(" %zu", sh.size());
    std::printf("\n");
  }
  std::printf("%-40s %10s %10s %12s %12s\n", "policy", "Mpps", "ns/pkt", "Gbit/s", "Mpps/CPU-s");
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
  // Mpps: packets over wall-clock time (summed over workers); ns/pkt: wall
  // time per packet of one worker; Mpps/CPU-s: packets per second of CPU
  // time the worker threads got (equal to Mpps on an idle machine).
  for (size_t i = baseline ? 0 : 1; i < sets.size(); ++i) {
    double one = 0;
    for (unsigned nc : consumer_counts) {
      std::vector<std::shared_ptr<const dsl::Policy>> set;
      for (unsigned c = 0; c < nc; ++c) set.push_back(sets[i][0]);
      Result r = run_one(shares, set, pool, seconds);
      std::string label = names[i];
      if (consumer_counts.size() > 1 || nc > 1) label += " x" + std::to_string(nc);
      std::printf("%-40s %10.2f %10.1f %12.2f %12.2f", label.c_str(), r.mpps_wall, 1e3 * workers / r.mpps_wall,
                  r.mpps_wall * 1e6 * (double(bytes) / recs.size()) * 8 / 1e9, r.mpps_cpu);
      // Packet rate relative to one consumer (by CPU time, which a shared machine's load distorts less).
      if (nc == 1) one = r.mpps_cpu;
      if (nc == 1 && i > 0) alone.resize(i), alone[i - 1] = r.mpps_cpu;
      if (nc > 1 && one > 0) std::printf("   %.2fx one consumer's rate", r.mpps_cpu / one);
      std::printf("\n");
      if (workers > 1)
        for (unsigned w = 0; w < workers; ++w) {
          const WorkerRun& p = r.per[w];
          std::printf("  worker %u: %llu packets, %.2f Mpps, %.2f Mpps/CPU-s (%.2f s wall, %.2f s CPU)\n", w,
                      (unsigned long long)p.packets, double(p.packets) / p.wall / 1e6, double(p.packets) / p.cpu / 1e6,
                      p.wall, p.cpu);
        }
    }
  }
  if (mixed && sets.size() > 1) {
    std::vector<std::shared_ptr<const dsl::Policy>> pols;
    for (size_t i = 1; i < sets.size(); ++i) pols.push_back(sets[i][0]);
    alone.resize(pols.size());
    run_mixed(shares, pols, alone, consumer_counts, pool, seconds);
  }
  rte_eal_cleanup();
  return 0;
}
