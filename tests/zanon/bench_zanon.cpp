// bench_zanon: throughput and memory of the shared z-anonymity store.
//
//   bench_zanon [--values 1000000] [--users 100000] [--ops 20000000] [--z 10]
//               [--zipf 1.0] [--threads 1,2] [--hot 1024]
//               [--memory 0|1] [--lanes L] [--parts zipf,prefetch,hot,memory]
//
// Each run's store has as many lanes as the run has threads (as the engine
// gives it one per worker) unless --lanes fixes the number; --lanes 1 is the
// store without lanes.
//
// Zipf workload: value ranks drawn from Zipf(s) over --values names, users
// uniform over --users, one consumer (z, dt = 1 h), timestamps 100 ns apart.
// Each thread replays its own slice of a pre-drawn sample so the generator
// costs nothing inside the timed loop. "with hashing" includes Store::key()
// (SipHash of the name) as the engine pays it; "prepared" reuses Keys.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "zanon.h"

using namespace amon::zanon;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  size_t values = 1000000, users = 100000, ops = 20000000, hot = 1024;
  uint32_t z = 10;
  double zipf = 1.0;
  bool memory = true;
  uint32_t lanes = 0;  // 0: one per thread of the run
  std::string parts = "zipf,prefetch,hot,memory";
  std::vector<unsigned> threads{1, 2};
  bool part(const char* p) const { return ("," + parts + ",").find("," + std::string(p) + ",") != std::string::npos; }
};

uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * 4096;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--values") a.values = std::strtoull(v, nullptr, 10);
    else if (k == "--users") a.users = std::strtoull(v, nullptr, 10);
    else if (k == "--ops") a.ops = std::strtoull(v, nullptr, 10);
    else if (k == "--hot") a.hot = std::strtoull(v, nullptr, 10);
    else if (k == "--z") a.z = uint32_t(std::strtoul(v, nullptr, 10));
    else if (k == "--zipf") a.zipf = std::strtod(v, nullptr);
    else if (k == "--memory") a.memory = std::strtoul(v, nullptr, 10) != 0;
    else if (k == "--lanes") a.lanes = uint32_t(std::strtoul(v, nullptr, 10));
    else if (k == "--parts") a.parts = v;
    else if (k == "--threads") {
      a.threads.clear();
      for (const char* p = v; *p;) {
        a.threads.push_back(unsigned(std::strtoul(p, const_cast<char**>(&p), 10)));
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "usage: bench_zanon [--values N] [--users N] [--ops N] [--z N] [--zipf S] [--threads 1,2] [--hot N]\n");
    std::exit(2);
  }
  return a;
}

constexpr uint64_t kDt = 3600ULL * 1000000000ULL;

Config config_for(size_t values, uint32_t z, uint32_t lanes = 1) {
  Config c;
  c.max_values = values;
  c.zmax = z;
  c.max_dt_ns = kDt;
  c.lanes = std::min(lanes, Store::kMaxLanes);
  return c;
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Observations per second of CPU time the threads got, summed over them: on
// a machine shared with other work it is what dedicated cores would give,
// which the wall clock is not (set by the last run()).
double g_cpu_rate = 0;

// Runs `threads` workers over disjoint slices of `sample`; returns obs/s.
template <typename Op>
double run(unsigned threads, size_t ops_per_thread, Op op) {
  std::atomic<unsigned> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> secs(threads), cpu(threads);
  std::vector<std::thread> ts;
  for (unsigned id = 0; id < threads; ++id)
    ts.emplace_back([&, id] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      const auto t0 = Clock::now();
      const double c0 = thread_cpu_seconds();
      op(id, ops_per_thread);
      secs[id] = std::chrono::duration<double>(Clock::now() - t0).count();
      cpu[id] = thread_cpu_seconds() - c0;
    });
  while (ready.load() != threads) std::this_thread::yield();
  go.store(true, std::memory_order_release);
  for (auto& t : ts) t.join();
  g_cpu_rate = 0;
  for (double c : cpu) g_cpu_rate += double(ops_per_thread) / c;
  return double(ops_per_thread) * threads / *std::max_element(secs.begin(), secs.end());
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::printf("bench_zanon: %zu values, %zu users, z=%u, Zipf s=%.2f, %zu ops per thread, %u hardware threads\n",
              a.values, a.users, a.z, a.zipf, a.ops, std::thread::hardware_concurrency());

  std::vector<std::string> names(a.values);
  for (size_t i = 0; i < a.values; ++i)
    names[i] = "host" + std::to_string(i) + ".d" + std::to_string(mix(i) % 9973) + ".example.com";

  // Zipf ranks by inverse CDF, drawn once.
  std::vector<double> cdf(a.values);
  double acc = 0;
  for (size_t i = 0; i < a.values; ++i) cdf[i] = acc += 1.0 / std::pow(double(i + 1), a.zipf);
  const size_t nsample = size_t(1) << 22;
  std::vector<uint32_t> sample(nsample);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> ud(0, acc);
  for (auto& s : sample) s = uint32_t(std::lower_bound(cdf.begin(), cdf.end(), ud(rng)) - cdf.begin());
  // Ranks spread over the name list so popular names are not neighbours.
  for (auto& s : sample) s = uint32_t(mix(s) % a.values);

  const ZParams consumer{a.z, kDt};
  const unsigned maxthreads = *std::max_element(a.threads.begin(), a.threads.end());

  // --- Zipf workload, with hashing (the engine's cost per field) ---
  auto lanes_for = [&](unsigned th) { return a.lanes ? a.lanes : th; };
  if (a.part("zipf")) std::printf("\n[zipf] observe with Store::key() hashing, fresh store per run, warm-up pass first\n");
  for (unsigned th : a.threads) {
    if (!a.part("zipf")) break;
    Store store(config_for(a.values, a.z, lanes_for(th)));
    const Scope sc{store.class_id("domain"), store.kind_id("ip.client")};
    std::atomic<uint64_t> released{0};
    auto op = [&](unsigned id, size_t n) {
      uint64_t rel = 0;
      const size_t off = size_t(id) * (nsample / maxthreads);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t v = sample[(off + i) & (nsample - 1)];
        const uint64_t user = mix(i * 31 + id) % a.users;
        const uint64_t t = (i * maxthreads + id) * 100;
        rel += store.observe(store.key(sc, names[v]), mix(user ^ 0xabc), t, consumer);
      }
      released.fetch_add(rel);
    };
    run(th, std::min(a.ops, nsample), op);  // warm-up: populate the table
    released = 0;
    const double rate = run(th, a.ops, op);
    const Stats st = store.stats();
    std::printf("  threads=%u  %.2f M obs/s total, %.2f M obs/s per thread  (tracked %lu, released %.1f%%, evictions %lu)\n",
                th, rate / 1e6, rate / th / 1e6, (unsigned long)st.values_tracked,
                100.0 * double(released.load()) / double(a.ops * th), (unsigned long)st.evictions);
  }

  // --- Zipf with a burst-style lookahead: keys made and prefetched 8 ahead ---
  if (a.part("prefetch"))
    std::printf("\n[zipf+prefetch] as above, Store::prefetch() 8 observations ahead (how a worker with a burst can call it)\n");
  for (unsigned th : a.threads) {
    if (!a.part("prefetch")) break;
    Store store(config_for(a.values, a.z, lanes_for(th)));
    const Scope sc{store.class_id("domain"), store.kind_id("ip.client")};
    auto op = [&](unsigned id, size_t n) {
      constexpr size_t kAhead = 8;
      Key ring[kAhead];
      const size_t off = size_t(id) * (nsample / maxthreads);
      auto key_at = [&](size_t i) { return store.key(sc, names[sample[(off + i) & (nsample - 1)]]); };
      for (size_t i = 0; i < kAhead; ++i) store.prefetch(ring[i] = key_at(i));
      uint64_t rel = 0;
      for (size_t i = 0; i < n; ++i) {
        const Key k = ring[i % kAhead];
        store.prefetch(ring[i % kAhead] = key_at(i + kAhead));
        const uint64_t user = mix(i * 31 + id) % a.users;
        rel += store.observe(k, mix(user ^ 0xabc), (i * maxthreads + id) * 100, consumer);
      }
      if (rel == ~uint64_t(0)) std::printf("-");
    };
    run(th, std::min(a.ops, nsample), op);
    const double rate = run(th, a.ops, op);
    std::printf("  threads=%u  %.2f M obs/s total, %.2f M obs/s per thread\n", th, rate / 1e6, rate / th / 1e6);
  }

  // --- Hot table: few values, prepared keys (the store's own cost) ---
  // "shared": every thread draws from all hot values, so the same entries are
  // written from both cores (true sharing, as for the most popular names).
  // "per-thread": each thread has its own hot values; shows that the shards
  // themselves add nothing as threads are added.
  // "private": each thread its own store (one lane) with all the hot values,
  // i.e. the one-thread run done by every thread at once with no line in
  // common: the most this machine gives for this work with that many
  // threads, and the yardstick for the shared set's ratio (a VM's vCPUs may
  // be hyperthreads of one core, or busy with other guests).
  for (const char* mode : {"shared", "per-thread", "private"}) {
    if (!a.part("hot")) break;
    const bool shared = mode[0] != 'p', priv = mode[1] == 'r';
    std::printf("\n[hot %s] %zu values, prepared keys, users uniform\n", mode, a.hot);
    for (unsigned th : a.threads) {
      std::vector<std::unique_ptr<Store>> stores;
      for (unsigned i = 0; i < (priv ? th : 1u); ++i)
        stores.push_back(std::make_unique<Store>(config_for(std::max<size_t>(a.hot, 1024), a.z, priv ? 1 : lanes_for(th))));
      Store& store = *stores[0];
      const Scope sc{store.class_id("domain"), store.kind_id("ip.client")};
      for (auto& st : stores) (void)st->class_id("domain"), (void)st->kind_id("ip.client");
      // Keys hash with a store's secret: one set per store.
      std::vector<std::vector<Key>> keyset(stores.size());
      for (size_t j = 0; j < stores.size(); ++j)
        for (size_t i = 0; i < a.hot; ++i) keyset[j].push_back(stores[j]->key(sc, names[i % a.values]));
      const size_t slice = (shared || priv) ? a.hot : std::max<size_t>(1, a.hot / th);
      auto op = [&](unsigned id, size_t n) {
        uint64_t rel = 0;
        const size_t base = (shared || priv) ? 0 : size_t(id) * slice;
        Store& st = *stores[priv ? id : 0];
        const std::vector<Key>& keys = keyset[priv ? id : 0];
        for (size_t i = 0; i < n; ++i) {
          const Key& k = keys[base + sample[(i * 7 + id) & (nsample - 1)] % slice];
          rel += st.observe(k, mix(i % a.users), (i * maxthreads + id) * 100, consumer);
        }
        if (rel == ~uint64_t(0)) std::printf("-");  // keep the loop's result alive
      };
      run(th, std::min(a.ops, nsample), op);
      const double rate = run(th, a.ops, op);
      std::printf("  threads=%u lanes=%u  %.2f M obs/s total, %.2f M obs/s per thread, %.2f M obs per CPU-s total\n",
                  th, priv ? 1u : lanes_for(th), rate / 1e6, rate / th / 1e6, g_cpu_rate / 1e6);
      const Stats st = store.stats();
      std::printf("    store: %lu inserts, %lu evictions, %lu relocations, %.1f%% released\n",
                  (unsigned long)st.inserts, (unsigned long)st.evictions, (unsigned long)st.relocations,
                  100.0 * double(st.released) / double(std::max<uint64_t>(1, st.observations)));
    }
  }

  // --- Memory ---
  if (!a.memory || !a.part("memory")) return 0;
  std::printf("\n[memory] %zu distinct values each seen once, then the table's size\n", a.values);
  for (uint32_t z : {a.z, Store::kMaxZ}) {
    const size_t rss0 = rss_bytes();
    Store store(config_for(a.values, z));
    const Scope sc{0, 0};
    for (size_t i = 0; i < a.values; ++i) store.observe(store.key(sc, names[i]), mix(i), i, ZParams{z, kDt});
    const Stats st = store.stats();
    const size_t rss = rss_bytes() - rss0;
    std::printf("  zmax=%-2u table %.1f MiB for capacity %lu; %lu tracked (%lu evictions, %lu relocations)\n", z,
                double(st.table_bytes) / (1 << 20), (unsigned long)st.capacity, (unsigned long)st.values_tracked,
                (unsigned long)st.evictions, (unsigned long)st.relocations);
    std::printf("          %.0f B per tracked value (table bytes / tracked), %lu B per entry slot, RSS +%.1f MiB\n",
                double(st.table_bytes) / double(st.values_tracked), (unsigned long)st.bytes_per_entry,
                double(rss) / (1 << 20));
  }
  return 0;
}
