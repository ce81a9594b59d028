// K boxes sharing one z-anonymity view through a running NATS JetStream
// server, in one process: each box is a shared zanon::Store with its own
// share::Client, as the engine builds them. Feeds a synthetic population
// (Zipf values, users split over the boxes by a hash of the user) in time
// order and prints the figures doc/zanon.md's scaling model predicts:
// observations that changed a store (what is published), wire and log bytes
// per observation, sync lag while running and the catch-up after the last
// observation, a restarted box's replay rate, memory per box, and whether
// every box, once in sync, decides as one store fed everything.
//
//   nats-server -js -a 127.0.0.1 -p 4334 -sd /tmp/js &
//   openssl rand -hex 32 > share.key && chmod 600 share.key
//   bench_share --url nats://127.0.0.1:4334 --key share.key [--boxes 3]
//               [--obs 300000] [--values 50000] [--users 5000] [--z 10]
//               [--dt 3600] [--duration 7200] [--rate OBS_PER_S]
//               [--restart-heap N]
//
// --rate paces the feed in wall time (0: as fast as the boxes take it); the
// trace's own time always spans --duration seconds. --restart-heap: the
// restarted box's wait heap, smaller than what it replays, to show that a
// live replay counts at once rather than waiting there. Exit 1 when a box
// disagrees with the single store once in sync, 2 on a usage or set-up error.
#include <nats/nats.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "share.h"
#include "zanon.h"

using namespace amon;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string url, key, stream;
  unsigned boxes = 3;
  uint64_t obs = 300000, values = 50000, users = 5000;
  uint32_t z = 10;
  double dt_s = 3600, duration_s = 7200, rate = 0;
  size_t restart_heap = size_t{1} << 20;  // the restarted box's wait heap (zanon::Config::max_pending)
};

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

uint64_t mix(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33, x *= 0xc4ceb93fe2a1e85bULL;
  return x ^ (x >> 33);
}

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string k;
  long v = 0;
  while (f >> k)
    if (k == "VmRSS:" && f >> v) return v;
  return 0;
}

// The stream's messages and bytes as the server stores them.
bool stream_state(const std::string& url, const std::string& name, uint64_t& msgs, uint64_t& bytes, bool drop) {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  jsStreamInfo* si = nullptr;
  jsErrCode je = jsErrCode(0);
  natsStatus st = natsConnection_ConnectTo(&nc, url.c_str());
  if (st == NATS_OK) st = natsConnection_JetStream(&js, nc, nullptr);
  if (st == NATS_OK) st = js_GetStreamInfo(&si, js, name.c_str(), nullptr, &je);
  if (st == NATS_OK) msgs = si->State.Msgs, bytes = si->State.Bytes;
  if (si) jsStreamInfo_Destroy(si);
  if (st == NATS_OK && drop) js_DeleteStream(js, name.c_str(), nullptr, &je);
  if (js) jsCtx_Destroy(js);
  if (nc) natsConnection_Destroy(nc);
  return st == NATS_OK;
}

struct Box {
  std::unique_ptr<zanon::Store> store;
  std::unique_ptr<share::Client> client;
};

zanon::Config store_config(const Args& a, const share::Keys& k, size_t max_pending = size_t{1} << 20) {
  zanon::Config c;
  c.max_pending = max_pending;
  c.max_values = size_t(a.values) * 2;
  c.zmax = a.z;
  c.max_dt_ns = uint64_t(a.dt_s * 1e9);
  c.shared = true;
  c.key = k.store;
  return c;
}

// live: packet times are the wall clock (amon run); the trace's times are
// all in the past then, so what a restarted box replays counts at once.
Box make_box(const Args& a, const share::Keys& k, const share::Settings& s, bool live = false) {
  Box b;
  b.store = std::make_unique<zanon::Store>(store_config(a, k, live ? a.restart_heap : size_t{1} << 20));
  b.client = std::make_unique<share::Client>(s, *b.store, uint64_t(a.dt_s * 1e9), live,
                                             [](bool e, const std::string& m) {
                                               if (e) std::fprintf(stderr, "share: %s\n", m.c_str());
                                             });
  return b;
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_share --url nats://HOST:PORT --key FILE [--boxes K] [--obs N] [--values V]\n"
               "                   [--users U] [--z Z] [--dt S] [--duration S] [--rate OBS_PER_S] [--stream NAME]\n"
               "                   [--restart-heap N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (o == "--url") a.url = v;
    else if (o == "--key") a.key = v;
    else if (o == "--stream") a.stream = v;
    else if (o == "--boxes") a.boxes = unsigned(std::stoul(v));
    else if (o == "--obs") a.obs = std::stoull(v);
    else if (o == "--values") a.values = std::stoull(v);
    else if (o == "--users") a.users = std::stoull(v);
    else if (o == "--z") a.z = uint32_t(std::stoul(v));
    else if (o == "--dt") a.dt_s = std::stod(v);
    else if (o == "--duration") a.duration_s = std::stod(v);
    else if (o == "--rate") a.rate = std::stod(v);
    else if (o == "--restart-heap") a.restart_heap = std::stoull(v);
    else return usage();
  }
  if (a.url.empty() || a.key.empty() || a.boxes < 1 || a.values < 1 || a.users < 1 || a.z < 1 ||
      a.z > zanon::Store::kMaxZ)
    return usage();
  if (a.stream.empty()) a.stream = "BENCH_SHARE_" + std::to_string(getpid());

  share::Keys keys;
  std::string err;
  if (!share::load_keys(a.key, keys, err)) return std::fprintf(stderr, "%s\n", err.c_str()), 2;
  share::Settings s;
  s.url = a.url, s.stream = a.stream, s.key_file = a.key;
  s.replay_timeout_ns = 60ULL * 1000000000ULL;
  if (!share::reachable(s, 2000, err)) return std::fprintf(stderr, "%s\n", err.c_str()), 2;

  const long rss0 = rss_kib();
  zanon::Store ref(store_config(a, keys));  // one store fed every box's traffic
  const long rss_store = rss_kib() - rss0;
  std::vector<Box> boxes;
  for (unsigned b = 0; b < a.boxes; ++b) boxes.push_back(make_box(a, keys, s));
  for (auto& b : boxes) b.client->start();

  // Zipf(1) popularity over the values, by inverse CDF.
  std::vector<double> cdf(a.values);
  double sum = 0;
  for (uint64_t v = 0; v < a.values; ++v) cdf[v] = sum += 1.0 / double(v + 1);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> U01(0, sum);
  const zanon::ZParams zp{a.z, uint64_t(a.dt_s * 1e9)};
  const uint64_t t0 = 1'700'000'000ULL * 1000000000ULL;
  const uint64_t step = uint64_t(a.duration_s * 1e9 / double(std::max<uint64_t>(a.obs, 1)));
  auto name_of = [](uint64_t v) { return "v" + std::to_string(v) + ".example.net"; };

  uint64_t released_ref = 0, released_box = 0, early = 0, max_lag_msgs = 0, max_lag_ns = 0;
  const auto w0 = Clock::now();
  for (uint64_t i = 0; i < a.obs; ++i) {
    const uint64_t v = uint64_t(std::lower_bound(cdf.begin(), cdf.end(), U01(rng)) - cdf.begin());
    const uint64_t user = rng() % a.users, uh = mix(user + 1);
    const uint64_t t = t0 + i * step;
    const std::string n = name_of(std::min(v, a.values - 1));
    zanon::Store& st = *boxes[mix(user) % a.boxes].store;
    const bool rb = st.observe(st.key(zanon::Scope{0, 0}, n), uh, t, zp);
    const bool rr = ref.observe(ref.key(zanon::Scope{0, 0}, n), uh, t, zp);
    released_box += rb, released_ref += rr, early += rb && !rr;
    if (a.rate > 0)
      while (secs(w0, Clock::now()) < double(i) / a.rate) std::this_thread::yield();
    if (i % 4096 == 0)
      for (auto& b : boxes) {
        const share::Status q = b.client->status();
        max_lag_msgs = std::max(max_lag_msgs, q.lag_msgs), max_lag_ns = std::max(max_lag_ns, q.lag_ns);
      }
  }
  const auto w1 = Clock::now();

  // Caught up: every box has everything the others queued for it.
  uint64_t queued = 0, dropped = 0;
  for (auto& b : boxes) {
    const auto z = b.store->stats();
    queued += z.outbox_queued, dropped += z.outbox_dropped;
  }
  const uint64_t to_send = queued - dropped;
  bool synced = false;
  Clock::time_point w2;
  for (;;) {
    uint64_t pub = 0;
    bool all = true;
    for (auto& b : boxes) pub += b.client->status().published;
    for (auto& b : boxes) {
      const share::Status q = b.client->status();
      all = all && q.received == pub - q.published;
    }
    w2 = Clock::now();
    if ((synced = all && pub == to_send)) break;
    if (secs(w1, w2) > 60) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }

  // Once in sync every box decides as the single store at the trace's end.
  const uint64_t t_end = t0 + a.obs * step;
  for (auto& b : boxes) b.store->apply_due(t_end);
  uint64_t same = 0, rel_ref = 0;
  for (uint64_t v = 0; v < a.values; ++v) {
    const std::string n = name_of(v);
    const uint32_t want = ref.count_recent(ref.key(zanon::Scope{0, 0}, n), t_end, zp.dt_ns);
    rel_ref += want >= a.z;
    bool ok = true;
    for (auto& b : boxes)
      ok = ok && std::min(b.store->count_recent(b.store->key(zanon::Scope{0, 0}, n), t_end, zp.dt_ns), a.z) ==
                     std::min(want, a.z);
    same += ok;
  }

  share::Status tot{};
  for (auto& b : boxes) {
    const share::Status q = b.client->status();
    tot.published += q.published, tot.received += q.received, tot.dropped += q.dropped;
    tot.publish_errors += q.publish_errors;
  }
  for (auto& b : boxes) b.client->stop();
  uint64_t msgs = 0, bytes = 0;
  stream_state(a.url, a.stream, msgs, bytes, false);

  // A box (re)started now replays the stream's last dt before it decides.
  const auto r0 = Clock::now();
  Box late = make_box(a, keys, s, true);
  late.client->start();
  const auto r1 = Clock::now();
  const share::Status lq = late.client->status();
  const zanon::Stats lz = late.store->stats();
  uint64_t late_same = 0;
  late.store->apply_due(t_end);
  for (uint64_t v = 0; v < a.values; ++v) {
    const std::string n = name_of(v);
    late_same += std::min(late.store->count_recent(late.store->key(zanon::Scope{0, 0}, n), t_end, zp.dt_ns), a.z) ==
                 std::min(ref.count_recent(ref.key(zanon::Scope{0, 0}, n), t_end, zp.dt_ns), a.z);
  }
  late.client->stop();
  stream_state(a.url, a.stream, msgs, bytes, true);

  const double feed = secs(w0, w1);
  const zanon::Stats zs = ref.stats();
  std::printf("boxes %u, observations %llu over %.0f s of trace (dt %.0f s, z %u), %llu values, %llu users\n",
              a.boxes, (unsigned long long)a.obs, a.duration_s, a.dt_s, a.z, (unsigned long long)a.values,
              (unsigned long long)a.users);
  std::printf("feed: %.2f s wall, %.2f M observations/s over all boxes (each also into the single store)\n", feed,
              double(a.obs) / feed / 1e6);
  std::printf("changed a store (queued to publish): %llu = %.1f %% of observations, dropped %llu\n",
              (unsigned long long)queued, 100.0 * double(queued) / double(a.obs), (unsigned long long)dropped);
  std::printf("published %llu, received %llu (model: (K-1) x published = %llu), publish errors %llu\n",
              (unsigned long long)tot.published, (unsigned long long)tot.received,
              (unsigned long long)(tot.published * (a.boxes - 1)), (unsigned long long)tot.publish_errors);
  std::printf("log: %llu messages, %llu bytes = %.1f bytes per observation (model: 32 + 16/512 + NATS framing)\n",
              (unsigned long long)msgs, (unsigned long long)bytes,
              tot.published ? double(bytes) / double(tot.published) : 0.0);
  std::printf("sync lag while feeding: max %llu messages, %.1f ms; caught up %.1f ms after the last observation%s\n",
              (unsigned long long)max_lag_msgs, double(max_lag_ns) / 1e6, secs(w1, w2) * 1e3,
              synced ? "" : " (NOT in sync after 60 s)");
  std::printf("decisions once in sync: %llu of %llu values equal to one store on every box (%llu released)\n",
              (unsigned long long)same, (unsigned long long)a.values, (unsigned long long)rel_ref);
  std::printf("released while feeding: boxes %llu, single store %llu; released by a box where one store hides: %llu\n",
              (unsigned long long)released_box, (unsigned long long)released_ref, (unsigned long long)early);
  std::printf("restart (live): replayed %llu observations in %.3f s = %.2f M/s, %llu dropped; %llu of %llu values "
              "equal to one store\n",
              (unsigned long long)lq.received, secs(r0, r1), double(lq.received) / secs(r0, r1) / 1e6,
              (unsigned long long)lz.received_dropped, (unsigned long long)late_same, (unsigned long long)a.values);
  std::printf("memory per box: store table %.1f MiB (%llu bytes per entry), process RSS for one store %.1f MiB\n",
              double(zs.table_bytes) / 1048576.0, (unsigned long long)zs.bytes_per_entry, double(rss_store) / 1024.0);
  return synced && same == a.values && late_same == a.values && early == 0 ? 0 : 1;
}
