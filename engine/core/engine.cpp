#include "engine.h"

#include <openssl/rand.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_malloc.h>
#include <rte_rcu_qsbr.h>
#include <rte_ring.h>
#include <rte_telemetry.h>
#include <systemd/sd-daemon.h>

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <cstdarg>
#include <ctime>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "config.h"
#include "control.h"
#include "policy.h"
#include "flow_table.h"
#include "mbuf_meta.h"
#include "pcap_port.h"
#include "progress.h"
#include "sizing.h"
#include "stats.h"
#include "worker_path.h"
#include "zanon.h"
#include "zshare.h"

namespace amon {

namespace {

constexpr uint16_t kBurst = 32;
// Records per writev of an output file (IOV_MAX / 2: a header and the bytes).
constexpr unsigned kWriteBatch = IOV_MAX / 2;

std::atomic<int> g_signal{0};  // a stop (SIGINT, SIGTERM)
std::atomic<int> g_hup{0};     // a reload asked for (SIGHUP, /amon/reload); one is queued at most
std::atomic<int> g_usr1{0};    // a statistics line asked for
extern "C" void on_signal(int sig) {
  if (sig == SIGHUP) g_hup.store(1, std::memory_order_relaxed);
  else if (sig == SIGUSR1) g_usr1.store(1, std::memory_order_relaxed);
  else g_signal.store(sig, std::memory_order_relaxed);
}

void install_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaction(s, &sa, nullptr);
}

// Under systemd (stderr goes to the journal), lines carry the syslog
// priority prefix the journal understands; elsewhere, plain text.
bool under_systemd() {
  static const bool yes = std::getenv("JOURNAL_STREAM") != nullptr || std::getenv("NOTIFY_SOCKET") != nullptr;
  return yes;
}

__attribute__((format(printf, 2, 3))) void log_line(int prio, const char* fmt, ...) {
  char buf[16384];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  for (size_t n = std::strlen(buf); n && buf[n - 1] == '\n';) buf[--n] = 0;
  if (!under_systemd()) {
    std::fprintf(stderr, "amon: %s\n", buf);
  } else {
    // The journal takes each line on its own: each gets the priority.
    const char* p = buf;
    for (bool first = true; *p || first; first = false) {
      const char* nl = std::strchr(p, '\n');
      int n = nl ? int(nl - p) : int(std::strlen(p));
      std::fprintf(stderr, first ? "<%d>amon: %.*s\n" : "<%d>%.*s\n", prio, n, p);
      p += n + (nl ? 1 : 0);
    }
  }
  std::fflush(stderr);
}
constexpr int kErr = 3, kWarn = 4, kInfo = 6;

uint64_t wall_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

// How a thread waits for the other side of a ring. Live, it polls: a NIC's
// queue fills in microseconds and the core is the thread's own. Offline the
// reader, the workers and the writer may share fewer cores than there are
// threads, and a spinning wait takes the core from the thread it waits for;
// so after a short spin it yields, then sleeps in short steps (a ring holds
// far more packets than arrive in one step).
class Idle {
 public:
  explicit Idle(bool offline) : offline_(offline) {}
  void reset() { n_ = 0; }
  void wait() {
    if (!offline_ || n_ < 64) {
      ++n_;
      rte_pause();
    } else if (n_ < 96) {
      ++n_;
      sched_yield();
    } else {
      const timespec ts{0, 50000};
      nanosleep(&ts, nullptr);
    }
  }

 private:
  bool offline_;
  unsigned n_ = 0;
};

// A pcap output file's own thread. The main lcore reading the input and
// writing every output made it the bottleneck with several consumers (the
// kernel's page-cache copy of each file is most of a write); a thread per
// file spreads those copies over the cores. Its ring is the back-pressure:
// offline, a worker waits while it is full. Records leave in ring order, so
// a file's order is the order the workers enqueued, as before.
struct FileWriter {
  std::unique_ptr<PcapWriter> pcap;
  rte_ring* ring = nullptr;
  std::thread th;
  std::atomic<bool> stop{false};  // no more enqueues: drain the ring and close
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> written{0};
  std::string error;  // the thread's, read after join()
};

void file_writer_main(FileWriter* fw) {
  // The thread inherits the main lcore's single-core affinity; it may run
  // on any core the process may (the kernel places it next to whoever is
  // idle). Registered as a non-EAL lcore so mbufs go back through a
  // mempool cache rather than one ring operation each.
  cpu_set_t all;
  CPU_ZERO(&all);
  for (long c = 0, n = sysconf(_SC_NPROCESSORS_ONLN); c < n && c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  pthread_setaffinity_np(pthread_self(), sizeof(all), &all);
  const bool registered = rte_thread_register() == 0;
  // Named for top -H and perf, beside DPDK's rte-worker-N.
  pthread_setname_np(pthread_self(), "amon-write");
  // Records leave in batches of up to kWriteBatch (one writev each) but
  // never more than the ring holds: the pool is sized for a ring's worth in
  // each writer's hands.
  const unsigned batch = std::min<unsigned>(kWriteBatch, rte_ring_get_capacity(fw->ring));
  std::vector<rte_mbuf*> pkts(batch);
  unsigned have = 0;
  bool waited = false;
  // A file never needs the latency a NIC does: yield and sleep when idle,
  // live or offline, so a writer never takes a core from a worker.
  Idle idle(true);
  for (;;) {
    const unsigned n = rte_ring_sc_dequeue_burst(fw->ring, reinterpret_cast<void**>(pkts.data() + have),
                                                 batch - have, nullptr);
    have += n;
    // stop is set after the last enqueue; the ring is read again after it.
    const bool last = n == 0 && fw->stop.load(std::memory_order_acquire) && rte_ring_empty(fw->ring);
    // Write a full batch, or what there is once the ring stayed empty over
    // a wait (the workers are slower than the file: no reason to hold it).
    if (have == batch || (have && n == 0 && (waited || last))) {
      // After a failed write the rest is freed unwritten (workers must not
      // block on a dead file); the run stops reading and exits non-zero.
      if (!fw->failed.load(std::memory_order_relaxed)) {
        fw->pcap->write_burst(pkts.data(), have);
        if (fw->pcap->failed()) {
          fw->error = fw->pcap->failure();
          fw->failed.store(true, std::memory_order_release);
        } else {
          fw->written.store(fw->written.load(std::memory_order_relaxed) + have, std::memory_order_relaxed);
        }
      }
      rte_pktmbuf_free_bulk(pkts.data(), have);
      have = 0;
      waited = false;
      idle.reset();
      continue;
    }
    if (last) break;
    if (n == 0) {
      idle.wait();
      waited = true;
    } else {
      waited = false;
    }
  }
  std::string e = fw->pcap->close();
  if (fw->error.empty() && !e.empty()) {
    fw->error = e;
    fw->failed.store(true, std::memory_order_release);
  }
  if (registered) rte_thread_unregister();
}

struct Output {
  std::string name;
  PortSpec spec;
  rte_ring* ring = nullptr;
  bool direct_tx = false;  // each worker transmits on its own queue (no ring, no main lcore)
  std::unique_ptr<FileWriter> file;  // pcap file outputs
  uint16_t port = UINT16_MAX;
  uint64_t written = 0, tx_dropped = 0;
  // DPDK's pcap PMD writes at most RTE_ETHER_MAX_JUMBO_FRAME_LEN bytes of a
  // frame (a truncated record); counted so it is never silent.
  uint32_t tx_cap = UINT32_MAX;
  uint64_t tx_truncated = 0;
};

struct Input {
  PortSpec spec;
  std::unique_ptr<PcapReader> pcap;
  uint16_t port = UINT16_MAX;
  bool direct = false;  // workers poll one RSS queue each
  bool done = false;
  uint64_t packets = 0;
};

struct Engine;

struct Worker {
  Engine* eng = nullptr;
  unsigned id = 0;
  unsigned lcore = 0;
  rte_ring* in = nullptr;
  std::unique_ptr<WorkerPath> path;
  std::atomic<uint64_t> processed{0};  // packets taken from `in` (what the main lcore dispatched)
  std::atomic<uint64_t> last_ts{0};    // newest packet time this worker processed
  std::atomic<uint64_t> last_rx_tsc{0};  // last receive from its own RSS queues
  std::atomic<uint64_t> rx_direct{0};    // packets taken from its own RSS queues
  std::atomic<uint32_t> held{0};         // TCP segments held for reassembly
  // Per output with direct_tx: DPDK's Tx buffer (batches, counts unsent).
  std::vector<rte_eth_dev_tx_buffer*> txb;
  std::vector<uint64_t> tx_unsent;
  uint64_t dispatched = 0;  // written by the main lcore only
  uint64_t out_full_drops = 0;
  std::vector<std::pair<uint16_t, uint16_t>> rx_queues;  // (port, queue) polled directly
  // A new generation of programs for this worker (reload); the worker
  // takes it between bursts and sets it back to null.
  std::atomic<ProgramSet*> next{nullptr};
};

// What the control plane knows of each consumer's loaded policy.
struct PolicyInfo {
  std::string path, sha256, keys_sha256;
  size_t rules = 0;
  uint64_t loaded_at_ns = 0;  // wall clock
};

struct Engine {
  EngineConfig cfg;
  std::vector<std::shared_ptr<const dsl::Policy>> policies;
  Sizes sizes;
  std::vector<std::unique_ptr<Program>> programs;
  std::vector<Output> outputs;
  std::vector<Input> inputs;
  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<zanon::Store> zstore;
  std::unique_ptr<share::Client> share;  // zanon.share: the other boxes' observations
  SharedServices services;
  rte_mempool* pool = nullptr;
  std::atomic<bool> stop_workers{false};
  // Input is over (or a signal came): workers release held segments.
  std::atomic<bool> flush_holds{false};
  uint64_t rx_total = 0, rx_nonip = 0, rx_dispatch_drops = 0;
  uint64_t start_ns = 0, tsc_hz = 0, tsc0 = 0, wall0 = 0;
  std::string input_error;
  // Reloads. Workers report a quiescent state (rte_rcu_qsbr) once per loop
  // turn, between bursts.
  rte_rcu_qsbr* qs = nullptr;
  uint64_t generation = 1, reloads = 0, reloads_failed = 0;
  uint32_t zmax = 0;
  uint64_t zmax_dt = 0;
  std::vector<PolicyInfo> pinfo;
  std::string last_result = "loaded at start-up", last_error;
  // Telemetry reads a snapshot the main lcore refreshes (it never reads
  // worker state itself, which a reload may be swapping).
  std::mutex snap_mu;
  Report snap;
  uint64_t stats_line_tsc = 0;
  Report stats_line_prev;

  uint64_t now_from_tsc() const { return wall0 + (rte_rdtsc() - tsc0) * 1000000000ULL / tsc_hz; }
};

// Packets from an ethdev port: the arrival time (NICs here give none) and a
// wire length equal to what was received.
void stamp_rx(const Engine& E, rte_mbuf** pkts, unsigned n) {
  if (!n) return;
  uint64_t now = E.now_from_tsc();
  for (unsigned i = 0; i < n; ++i) {
    mbuf_set_ts(pkts[i], now);
    mbuf_set_wire_len(pkts[i], pkts[i]->pkt_len);
  }
}

void enqueue_out(void* ctx, unsigned ci, rte_mbuf* m) {
  Worker& w = *static_cast<Worker*>(ctx);
  Output& o = w.eng->outputs[ci];
  if (o.direct_tx) {
    rte_eth_tx_buffer(o.port, uint16_t(w.id), w.txb[ci], m);
    return;
  }
  if (w.eng->cfg.offline) {
    // Offline never loses a packet: wait for the writer.
    Idle idle(true);
    while (rte_ring_mp_enqueue(o.ring, m) != 0) idle.wait();
    return;
  }
  if (rte_ring_mp_enqueue(o.ring, m) != 0) {
    rte_pktmbuf_free(m);
    ++w.out_full_drops;
    auto& c = w.path->counters()[ci];
    ++c.dropped;
    --c.out;
  }
}

// enqueue_out for a burst of one consumer (WorkerPath::SinkBurst): one ring
// enqueue for all of them where enqueue_out makes one per packet.
void enqueue_out_burst(void* ctx, unsigned ci, rte_mbuf** ms, unsigned n) {
  Worker& w = *static_cast<Worker*>(ctx);
  Output& o = w.eng->outputs[ci];
  if (o.direct_tx) {
    for (unsigned i = 0; i < n; ++i) rte_eth_tx_buffer(o.port, uint16_t(w.id), w.txb[ci], ms[i]);
    return;
  }
  unsigned done = rte_ring_mp_enqueue_burst(o.ring, reinterpret_cast<void**>(ms), n, nullptr);
  if (w.eng->cfg.offline) {
    // Offline never loses a packet: wait for the writer.
    Idle idle(true);
    while (done < n) {
      idle.wait();
      done += rte_ring_mp_enqueue_burst(o.ring, reinterpret_cast<void**>(ms + done), n - done, nullptr);
    }
    return;
  }
  if (done < n) {
    const unsigned left = n - done;
    rte_pktmbuf_free_bulk(ms + done, left);
    w.out_full_drops += left;
    auto& c = w.path->counters()[ci];
    c.dropped += left;
    c.out -= left;
  }
}

int worker_main(void* arg) {
  Worker& w = *static_cast<Worker*>(arg);
  Engine& E = *w.eng;
  rte_mbuf* pkts[kBurst];
  uint64_t last_expire = 0;
  uint64_t idle_since = 0;
  const uint64_t hold_tsc = E.cfg.hold.timeout_ns / 1000000ULL * (E.tsc_hz / 1000ULL) + 1;
  // A live port's quiet link has no packet time to expire holds by, so an
  // idle worker uses the wall clock. Offline (every input a capture file)
  // packet time and the end of input are the only clocks: a worker waiting
  // on the reader must not release holds, or the output would depend on
  // scheduling.
  bool wall_clock_holds = false;
  for (const auto& in : E.inputs) wall_clock_holds = wall_clock_holds || !in.pcap;
  auto flush_tx = [&] {
    for (size_t ci = 0; ci < w.txb.size(); ++ci)
      if (w.txb[ci]) rte_eth_tx_buffer_flush(E.outputs[ci].port, uint16_t(w.id), w.txb[ci]);
  };
  Idle idle(E.cfg.offline);
  if (E.qs) {
    rte_rcu_qsbr_thread_register(E.qs, w.id);
    rte_rcu_qsbr_thread_online(E.qs, w.id);
  }
  for (;;) {
    // Between bursts: no packet is half-way through a generation. One
    // store for the report and one load for a new generation per turn,
    // nothing per packet.
    if (E.qs) rte_rcu_qsbr_quiescent(E.qs, w.id);
    if (ProgramSet* next = w.next.load(std::memory_order_acquire)) {
      w.path->adopt(*next);
      w.next.store(nullptr, std::memory_order_release);
    }
    unsigned n = rte_ring_sc_dequeue_burst(w.in, reinterpret_cast<void**>(pkts), kBurst, nullptr);
    const bool from_ring = n != 0;
    for (auto [port, q] : w.rx_queues) {
      if (n || E.stop_workers.load(std::memory_order_relaxed) || g_signal.load(std::memory_order_relaxed)) break;
      n = rte_eth_rx_burst(port, q, pkts, kBurst);
      if (!n) continue;
      stamp_rx(E, pkts, n);
      w.last_rx_tsc.store(rte_rdtsc(), std::memory_order_relaxed);
      w.rx_direct.fetch_add(n, std::memory_order_relaxed);
    }
    if (n == 0) {
      // Held segments leave at the end of input, or when nothing came for a
      // hold timeout (a quiet link has no packet time to expire them by).
      if (w.path->held_segments()) {
        uint64_t now = rte_rdtsc();
        if (!idle_since) idle_since = now;
        if (E.flush_holds.load(std::memory_order_acquire) || g_signal.load(std::memory_order_relaxed) ||
            (wall_clock_holds && now - idle_since > hold_tsc)) {
          w.path->flush_held(enqueue_out, &w);
          w.held.store(0, std::memory_order_release);
        }
      }
      flush_tx();
      if (E.stop_workers.load(std::memory_order_acquire) && rte_ring_empty(w.in)) {
        w.path->flush_held(enqueue_out, &w);
        flush_tx();
        break;
      }
      idle.wait();
      continue;
    }
    idle.reset();
    for (unsigned i = 0; i < n; ++i) rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void*));
    idle_since = 0;
    uint64_t burst_ts = mbuf_ts(pkts[n - 1]);  // before the burst: held mbufs stay, the others may be gone
    w.path->process_burst(pkts, n, enqueue_out, &w);
    w.held.store(w.path->held_segments(), std::memory_order_release);
    w.last_ts.store(burst_ts, std::memory_order_relaxed);
    for (size_t ci = 0; ci < w.txb.size(); ++ci)
      if (w.txb[ci]) rte_eth_tx_buffer_flush(E.outputs[ci].port, uint16_t(w.id), w.txb[ci]);
    // Only ring packets count toward "caught up": the main lcore never saw
    // what a worker took from its own queue.
    if (from_ring) w.processed.fetch_add(n, std::memory_order_release);
    // Idle flows are reclaimed a little at a time, off no particular packet.
    if (++last_expire % 64 == 0) w.path->flows().expire(burst_ts, 64);
  }
  if (E.qs) {
    rte_rcu_qsbr_thread_offline(E.qs, w.id);
    rte_rcu_qsbr_thread_unregister(E.qs, w.id);
  }
  return 0;
}


// Returns how many packets left the output rings.
unsigned drain_outputs(Engine& E) {
  rte_mbuf* pkts[kBurst];
  unsigned total = 0;
  for (auto& o : E.outputs) {
    if (o.file) continue;  // its own thread writes it
    unsigned n;
    while ((n = rte_ring_sc_dequeue_burst(o.ring, reinterpret_cast<void**>(pkts), kBurst, nullptr)) > 0) {
      total += n;
      for (unsigned i = 0; i < n; ++i) o.tx_truncated += pkts[i]->pkt_len > o.tx_cap;
      uint16_t sent = 0;
      // Retry a little: a vdev like net_ring may be momentarily full.
      for (int tries = 0; sent < n && tries < 1000; ++tries) sent += rte_eth_tx_burst(o.port, 0, pkts + sent, uint16_t(n - sent));
      o.written += sent;
      for (unsigned i = sent; i < n; ++i) rte_pktmbuf_free(pkts[i]);
      o.tx_dropped += n - sent;
    }
  }
  return total;
}

uint16_t attach_port(const std::string& spec) {
  std::string name = spec.substr(0, spec.find(','));
  uint16_t port;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) == 0) return port;
  throw std::runtime_error("port '" + name + "' not found (is it a valid vdev or PCI device?)");
}

void setup_port(Engine& E, uint16_t port, uint16_t nrxq, uint16_t ntxq, bool rss) {
  rte_eth_conf conf{};
  static uint8_t sym_key[40];
  // The repeated 0x6D5A key makes Toeplitz RSS symmetric: both directions of
  // a flow reach the same queue, hence the same worker.
  for (int i = 0; i < 40; i += 2) sym_key[i] = 0x6d, sym_key[i + 1] = 0x5a;
  rte_eth_dev_info info;
  if (rte_eth_dev_info_get(port, &info) != 0) throw std::runtime_error("cannot query port " + std::to_string(port));
  if (rss) {
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_key = sym_key;
    conf.rx_adv_conf.rss_conf.rss_key_len = 40;
    conf.rx_adv_conf.rss_conf.rss_hf = (RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP) & info.flow_type_rss_offloads;
  }
  // Frames larger than one mbuf arrive and leave as chains, never cut:
  // scattered Rx, multi-segment Tx, and the largest frame the port allows.
  if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_SCATTER;
  if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  if (info.max_rx_pktlen > RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN)
    conf.rxmode.mtu = std::min<uint32_t>(info.max_mtu, info.max_rx_pktlen - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN);
  // Never MBUF_FAST_FREE: outputs receive shared (refcounted) mbufs.
  int rc = rte_eth_dev_configure(port, nrxq, ntxq, &conf);
  if (rc != 0) throw std::runtime_error("port " + std::to_string(port) + ": configure failed: " + rte_strerror(-rc));
  int sock = rte_eth_dev_socket_id(port);
  for (uint16_t q = 0; q < nrxq; ++q)
    if ((rc = rte_eth_rx_queue_setup(port, q, 1024, sock, nullptr, E.pool)) != 0)
      throw std::runtime_error("port " + std::to_string(port) + ": rx queue setup failed: " + rte_strerror(-rc));
  for (uint16_t q = 0; q < ntxq; ++q)
    if ((rc = rte_eth_tx_queue_setup(port, q, 1024, sock, nullptr)) != 0)
      throw std::runtime_error("port " + std::to_string(port) + ": tx queue setup failed: " + rte_strerror(-rc));
  if ((rc = rte_eth_dev_start(port)) != 0)
    throw std::runtime_error("port " + std::to_string(port) + ": start failed: " + rte_strerror(-rc));
  rte_eth_promiscuous_enable(port);
}

// Hands packets read on the main lcore to workers by symmetric flow hash.
// Returns false when a live input had to drop (worker ring full).
void dispatch(Engine& E, rte_mbuf** pkts, unsigned n) {
  const unsigned nw = unsigned(E.workers.size());
  for (unsigned i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    unsigned wi = 0;
    if (nw > 1) {
      Decoded d;
      const uint8_t* data = rte_pktmbuf_mtod(m, const uint8_t*);
      // The first segment holds every header we hash on.
      decode(data, m->data_len, mbuf_wire_len(m), d);
      wi = symmetric_flow_hash(data, d) % nw;
    }
    Worker& w = *E.workers[wi];
    if (E.cfg.offline) {
      Idle idle(true);
      while (rte_ring_sp_enqueue(w.in, m) != 0)
        if (!drain_outputs(E)) idle.wait();
    } else if (rte_ring_sp_enqueue(w.in, m) != 0) {
      rte_pktmbuf_free(m);
      ++E.rx_dispatch_drops;
      continue;
    }
    ++w.dispatched;
  }
}

uint64_t pcap_bytes_read(const Engine& E) {
  uint64_t b = 0;
  for (const auto& i : E.inputs)
    if (i.pcap) b += i.pcap->bytes_read();
  return b;
}

// rte_pktmbuf_pool_create, but offline (no device that DMAs) with mbufs
// packed back to back: on 4 KiB pages an IOVA-contiguous pool fits one
// 2.3 KiB mbuf per page, 1.7 times the memory to commit and fault in.
rte_mempool* create_pool(const Engine& E) {
  const int socket = int(rte_socket_id());
  if (!E.cfg.offline)
    return rte_pktmbuf_pool_create("amon_pool", E.sizes.mbufs, E.sizes.mbuf_cache, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                   socket);
  rte_mempool* mp = rte_mempool_create_empty("amon_pool", E.sizes.mbufs, sizeof(rte_mbuf) + RTE_MBUF_DEFAULT_BUF_SIZE,
                                             E.sizes.mbuf_cache, sizeof(rte_pktmbuf_pool_private), socket,
                                             RTE_MEMPOOL_F_NO_IOVA_CONTIG);
  if (!mp) return nullptr;
  rte_pktmbuf_pool_private priv{};
  priv.mbuf_data_room_size = RTE_MBUF_DEFAULT_BUF_SIZE;
  // An offline pool is a stack (kOfflinePoolOps), last freed first out.
  // The ring every other pool uses hands out the least recently freed
  // mbuf, so a run cycles its whole pool (30 MiB for four output files)
  // through the caches and each copy lands in memory the CPU has long
  // evicted; from a stack the reader and the worker mostly get back mbufs
  // a writer has just emptied. Lock-free because offline threads outnumber
  // a small machine's cores, and a thread preempted inside the spinlocked
  // stack's lock would stall the others. Without the handler linked, the
  // ring.
  if (rte_mempool_set_ops_byname(mp, kOfflinePoolOps, nullptr) != 0 &&
      rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr) != 0) {
    rte_mempool_free(mp);
    return nullptr;
  }
  rte_pktmbuf_pool_init(mp, &priv);
  if (rte_mempool_populate_default(mp) < 0) {
    rte_mempool_free(mp);
    rte_errno = ENOMEM;
    return nullptr;
  }
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  return mp;
}

// Pcap outputs have the link type of the inputs (ethdev ports are
// Ethernet); inputs of different link types cannot share one output file.
int output_link_type(const Engine& E) {
  int lt = -1;
  std::string first;
  for (const auto& i : E.inputs) {
    int t = i.pcap ? i.pcap->linktype() : DLT_EN10MB;
    if (lt >= 0 && t != lt)
      throw std::runtime_error(i.spec.describe() + " has link type " + link_type_name(t) + ", " + first +
                               " has " + link_type_name(lt) + ": one run writes one link type");
    if (lt < 0) lt = t, first = i.spec.describe();
  }
  return lt < 0 ? DLT_EN10MB : lt;
}

bool all_workers_caught_up(Engine& E) {
  for (auto& w : E.workers)
    if (w->processed.load(std::memory_order_acquire) != w->dispatched) return false;
  return true;
}

bool outputs_empty(Engine& E) {
  for (auto& o : E.outputs)
    if (!rte_ring_empty(o.ring)) return false;
  return true;
}

bool output_failed(const Engine& E) {
  for (auto& o : E.outputs)
    if (o.file && o.file->failed.load(std::memory_order_acquire)) return true;
  return false;
}

// Lets every file writer drain its ring and close its file; returns false
// if any write failed (each reported). Only once no worker enqueues.
bool finish_writers(Engine& E) {
  bool ok = true;
  for (auto& o : E.outputs) {
    if (!o.file || !o.file->th.joinable()) continue;
    o.file->stop.store(true, std::memory_order_release);
    o.file->th.join();
    o.written = o.file->written.load(std::memory_order_relaxed);
    if (o.file->failed.load(std::memory_order_acquire)) {
      log_line(kErr, "consumer '%s': output %s", o.name.c_str(), o.file->error.c_str());
      ok = false;
    }
  }
  return ok;
}

// The counters as the exit report shows them. Main lcore only, never
// while a reload is being adopted (the workers swap their rule counts).
Report build_report(Engine& E) {
  const EngineConfig& cfg = E.cfg;
  Report rep;
  rep.elapsed_ns = wall_ns() - E.start_ns;
  rep.rx = E.rx_total;
  for (auto& w : E.workers) rep.rx += w->rx_direct.load();
  rep.rx_dispatch_drops = E.rx_dispatch_drops;
  rep.input_error = E.input_error;
  for (auto& in : E.inputs) rep.inputs.push_back({in.spec.describe(), in.packets});
  for (size_t ci = 0; ci < E.programs.size(); ++ci) {
    ConsumerReport cr;
    cr.name = cfg.consumers[ci].name;
    cr.policy = cfg.consumers[ci].policy_path;
    cr.output = cfg.consumers[ci].output.describe();
    cr.counters.rule_hits.assign(E.programs[ci]->rule_count() + 1, 0);
    for (auto& w : E.workers) accumulate(cr.counters, w->path->counters()[ci]);
    const Output& out = E.outputs[ci];
    cr.written = out.file ? out.file->written.load(std::memory_order_relaxed) : out.written;
    cr.tx_dropped = E.outputs[ci].tx_dropped;
    if (E.outputs[ci].direct_tx) {
      // Sent directly by the workers: written is what left, less what the port refused.
      uint64_t unsent = 0;
      for (auto& w : E.workers) unsent += w->tx_unsent[ci];
      cr.tx_dropped = unsent;
      cr.written = cr.counters.out - unsent;
    }
    cr.tx_truncated = E.outputs[ci].tx_truncated;
    cr.policy_ptr = E.policies[ci];
    rep.consumers.push_back(std::move(cr));
  }
  for (auto& w : E.workers) {
    const auto& fs = w->path->flows().stats();
    rep.flows_created += fs.created;
    rep.flows_evicted += fs.evicted;
    rep.flows_expired += fs.expired;
    rep.flows_closed += fs.closed;
    rep.roles_uncertain += fs.roles_uncertain;
    for (int s = 0; s < 4; ++s) rep.decode_status[s] += w->path->stats().decode_status[s];
    const WorkerPathStats& ws = w->path->stats();
    rep.copy_failures += ws.copy_failures;
    rep.streams_held += ws.streams_held;
    rep.streams_completed += ws.streams_completed;
    rep.streams_failed += ws.streams_failed;
    rep.hold_refused += ws.hold_refused;
    rep.segments_held += ws.segments_held;
    const OuterFragStats& os = w->path->outer_frag_stats();
    rep.outer_fragments += os.fragments;
    rep.outer_datagrams += os.datagrams;
    rep.outer_failed += os.failed;
    rep.outer_cut += os.cut;
  }
  if (E.zstore) rep.zstats = E.zstore->stats(), rep.has_zstats = true;
  if (E.share) rep.share = E.share->status(), rep.has_share = true;
  rep.live = !cfg.config_path.empty();
  rep.generation = E.generation;
  rep.reloads = E.reloads;
  rep.reloads_failed = E.reloads_failed;
  return rep;
}

std::string fmt_dt(uint64_t ns) { return dsl::format_duration(int64_t(ns)); }

// What a YAML change may not do without a restart: ports, workers, the
// consumer list and their outputs, table sizes, EAL. "" when none changed.
std::string needs_restart(const EngineConfig& a, const EngineConfig& b) {
  std::vector<std::string> what;
  auto ports_eq = [](const PortSpec& x, const PortSpec& y) { return x.kind == y.kind && x.spec == y.spec; };
  bool inputs = a.inputs.size() == b.inputs.size();
  for (size_t i = 0; inputs && i < a.inputs.size(); ++i) inputs = ports_eq(a.inputs[i], b.inputs[i]);
  if (!inputs) what.push_back("inputs");
  if (a.workers != b.workers) what.push_back("workers");
  bool cons = a.consumers.size() == b.consumers.size();
  for (size_t i = 0; cons && i < a.consumers.size(); ++i)
    cons = a.consumers[i].name == b.consumers[i].name && ports_eq(a.consumers[i].output, b.consumers[i].output);
  if (!cons) what.push_back("consumers (names, order or outputs)");
  if (a.flows_per_worker != b.flows_per_worker || a.flow_timeouts.tcp != b.flow_timeouts.tcp ||
      a.flow_timeouts.udp != b.flow_timeouts.udp || a.flow_timeouts.other != b.flow_timeouts.other ||
      a.flow_timeouts.closed != b.flow_timeouts.closed)
    what.push_back("flows");
  if (a.hold.enabled != b.hold.enabled || a.hold.streams != b.hold.streams || a.hold.bytes != b.hold.bytes ||
      a.hold.segments != b.hold.segments || a.hold.stream_segments != b.hold.stream_segments ||
      a.hold.timeout_ns != b.hold.timeout_ns)
    what.push_back("reassembly");
  if (a.zanon_max_values != b.zanon_max_values) what.push_back("zanon");
  if (!share::same_settings(a.share, b.share)) what.push_back("zanon.share");
  if (a.mbufs != b.mbufs) what.push_back("mbufs");
  if (a.eal_config != b.eal_config) what.push_back("eal");
  std::string r;
  for (auto& w : what) r += (r.empty() ? "" : ", ") + w;
  return r;
}

// A reload compiled off the packet path, ready to publish (or why not).
struct StagedReload {
  bool ok = false;
  std::string error;  // diagnostics (file:line:col) or the refusal
  EngineConfig cfg;
  std::vector<std::shared_ptr<const dsl::Policy>> policies;
  std::vector<std::unique_ptr<Program>> programs;
  std::vector<std::unique_ptr<ProgramSet>> sets;  // one per worker
  std::vector<PolicyInfo> pinfo;
  uint64_t t0 = 0, t1 = 0;  // wall ns: started, compiled
};

// Re-reads the YAML and every policy with its includes and keys, builds
// the programs and one set of instances per worker. Runs on a thread of its
// own, so the main lcore keeps reading inputs and writing outputs; touches
// nothing the engine is using (its inputs are copies, and the shared
// services are only referenced).
std::unique_ptr<StagedReload> stage_reload(EngineConfig old_cfg, SharedServices* services, uint32_t zmax,
                                           uint64_t zmax_dt, bool have_store, unsigned nworkers) {
  auto st = std::make_unique<StagedReload>();
  st->t0 = wall_ns();
  std::string err;
  EngineConfig& ncfg = st->cfg;
  if (!load_config(old_cfg.config_path, ncfg, err)) {
    st->error = err;
    return st;
  }
  ncfg.config_path = old_cfg.config_path;
  ncfg.eal_config = ncfg.eal_args;
  std::string restart = needs_restart(old_cfg, ncfg);
  if (!restart.empty()) {
    st->error = old_cfg.config_path + ": changes to " + restart +
                " need a restart; nothing was reloaded (the running policies stay)";
    return st;
  }
  if (!compile_all(ncfg, st->policies, st->error)) return st;
  // The z-anonymity store was sized at start-up for the largest z and dt.
  for (size_t i = 0; i < st->policies.size(); ++i)
    for (auto& r : st->policies[i]->rules)
      if (r.action.desc->uses_zstore) {
        uint64_t z = uint64_t(r.action.int_or("z", 10)), dt = uint64_t(r.action.int_or("dt", 0));
        std::string where = r.loc.file + ":" + std::to_string(r.loc.line) + ":" + std::to_string(r.loc.col);
        if (!have_store) {
          st->error = where + ": error: zanon needs the z-anonymity store, which is made at start-up only when a "
                              "policy uses zanon; restart to add the first zanon rule";
          return st;
        }
        if (z > zmax || dt > zmax_dt) {
          st->error = where + ": error: z=" + std::to_string(z) + ", dt=" + fmt_dt(dt) +
                      " exceed the store's sizing at start-up (z " + std::to_string(zmax) + ", dt " + fmt_dt(zmax_dt) +
                      "); restart to raise them";
          return st;
        }
      }
  try {
    for (size_t i = 0; i < st->policies.size(); ++i)
      st->programs.push_back(std::make_unique<Program>(st->policies[i], int(i), services));
    for (unsigned w = 0; w < nworkers; ++w) {
      auto set = std::make_unique<ProgramSet>();
      for (auto& p : st->programs) {
        set->progs.push_back(p->instantiate());
        set->rule_hits.emplace_back(p->rule_count() + 1, 0);
      }
      st->sets.push_back(std::move(set));
    }
  } catch (const std::exception& ex) {
    st->error = std::string("policy cannot run: ") + ex.what();
    return st;
  }
  for (size_t i = 0; i < st->policies.size(); ++i)
    st->pinfo.push_back({ncfg.consumers[i].policy_path, policy_digest(*st->policies[i]),
                         keys_digest(*st->policies[i]), st->policies[i]->rules.size(), wall_ns()});
  st->t1 = wall_ns();
  st->ok = true;
  return st;
}

// Publishes a staged generation: one pointer per worker; the previous
// generation is freed once every worker has taken the new one and reported
// a quiescent state since (rte_rcu_qsbr). Outputs keep being drained while
// waiting, so a worker blocked on a full output ring can get there.
uint64_t publish(Engine& E, StagedReload& st) {
  for (size_t i = 0; i < E.workers.size(); ++i) E.workers[i]->next.store(st.sets[i].get(), std::memory_order_release);
  uint64_t token = rte_rcu_qsbr_start(E.qs);
  for (;;) {
    bool taken = true;
    for (auto& w : E.workers) taken = taken && w->next.load(std::memory_order_acquire) == nullptr;
    if (taken && rte_rcu_qsbr_check(E.qs, token, false) == 1) break;
    drain_outputs(E);
    rte_pause();
  }
  const uint64_t taken = wall_ns();
  // The sets now hold the previous generation's instances: free them
  // before the programs they point to.
  st.sets.clear();
  E.programs.swap(st.programs);
  E.policies.swap(st.policies);
  st.programs.clear();
  return taken;
}

void apply_reload(Engine& E, StagedReload& st) {
  // Telemetry reads what is set here (policy information, results).
  std::unique_lock<std::mutex> lock(E.snap_mu);
  if (!st.ok) {
    ++E.reloads_failed;
    E.last_result = "failed";
    // The errors, without the warnings a policy may also carry: a
    // diagnostic runs from its `file:line:col: severity:` line to the next.
    E.last_error.clear();
    bool keep = true;
    size_t pos = 0;
    while (pos < st.error.size()) {
      size_t nl = st.error.find('\n', pos);
      if (nl == std::string::npos) nl = st.error.size();
      std::string ln = st.error.substr(pos, nl - pos);
      pos = nl + 1;
      if (ln.find(": warning: ") != std::string::npos) keep = false;
      else if (ln.find(": error: ") != std::string::npos || ln.find(": note: ") != std::string::npos) keep = true;
      if (keep) E.last_error += ln + "\n";
    }
    while (!E.last_error.empty() && E.last_error.back() == '\n') E.last_error.pop_back();
    log_line(kErr, "reload refused (generation %llu keeps running, %llu refused so far):\n%s",
             (unsigned long long)E.generation, (unsigned long long)E.reloads_failed, st.error.c_str());
    sd_notifyf(0, "READY=1\nSTATUS=generation %llu running; last reload refused", (unsigned long long)E.generation);
    return;
  }
  lock.unlock();  // publishing waits on the workers, not on telemetry
  const uint64_t t_pub = wall_ns();
  const uint64_t t_taken = publish(E, st);
  const uint64_t t2 = wall_ns();
  lock.lock();
  ++E.generation;
  ++E.reloads;
  std::string line;
  for (size_t i = 0; i < st.pinfo.size(); ++i) {
    const PolicyInfo& n = st.pinfo[i];
    const PolicyInfo* o = i < E.pinfo.size() ? &E.pinfo[i] : nullptr;
    std::string changed;
    if (!o || o->path != n.path) changed = "new file";
    else if (o->sha256 == n.sha256) changed = "unchanged";
    else if (o->keys_sha256 != n.keys_sha256) changed = "keys changed";
    else changed = "policy changed";
    line += "; " + E.cfg.consumers[i].name + " " + n.path + " sha256 " + n.sha256 + " " + std::to_string(n.rules) +
            " rules (" + changed + ")";
  }
  E.pinfo = st.pinfo;
  // Settings a reload may change.
  for (size_t i = 0; i < E.cfg.consumers.size(); ++i) E.cfg.consumers[i].policy_path = st.cfg.consumers[i].policy_path;
  E.cfg.stats_interval_ns = st.cfg.stats_interval_ns;
  E.cfg.stats_lines = st.cfg.stats_lines;
  E.last_result = "ok";
  E.last_error.clear();
  // compile: YAML, policies, keys, programs and per-worker instances (on
  // the staging thread); publish: from the staged set's hand-over to every
  // worker running it (taken) and the previous set freed.
  log_line(kInfo, "reload: generation %llu%s; compile %.1f ms, publish %.3f ms (taken by every worker after %.3f ms)",
           (unsigned long long)E.generation, line.c_str(), double(st.t1 - st.t0) / 1e6, double(t2 - st.t1) / 1e6,
           double(t_taken - t_pub) / 1e6);
  sd_notifyf(0, "READY=1\nSTATUS=generation %llu running", (unsigned long long)E.generation);
}

void refresh_snapshot(Engine& E) {
  Report r = build_report(E);
  std::lock_guard<std::mutex> g(E.snap_mu);
  E.snap = std::move(r);
}

// One JSON line: the totals, and the rates since the previous line.
void write_stats_line(Engine& E) {
  if (E.cfg.stats_lines.empty()) return;
  Report r = build_report(E);
  double secs = double(r.elapsed_ns - E.stats_line_prev.elapsed_ns) / 1e9;
  auto rate = [&](uint64_t now, uint64_t before) { return secs > 0 ? double(now - before) / secs : 0.0; };
  std::string line = "{\"time_ns\":" + std::to_string(wall_ns()) + ",\"interval_s\":" + std::to_string(secs) +
                     ",\"rx_pps\":" + std::to_string(rate(r.rx, E.stats_line_prev.rx)) + ",\"consumer_pps\":{";
  for (size_t i = 0; i < r.consumers.size(); ++i) {
    const auto& c = r.consumers[i].counters;
    uint64_t in0 = 0, out0 = 0, dr0 = 0;
    if (i < E.stats_line_prev.consumers.size()) {
      in0 = E.stats_line_prev.consumers[i].counters.in;
      out0 = E.stats_line_prev.consumers[i].counters.out;
      dr0 = E.stats_line_prev.consumers[i].counters.dropped;
    }
    line += (i ? ",\"" : "\"") + r.consumers[i].name + "\":{\"in\":" + std::to_string(rate(c.in, in0)) +
            ",\"out\":" + std::to_string(rate(c.out, out0)) + ",\"dropped\":" + std::to_string(rate(c.dropped, dr0)) + "}";
  }
  std::string totals = render_report_json(r);
  while (!totals.empty() && (totals.back() == '\n' || totals.back() == ' ')) totals.pop_back();
  line += "},\"totals\":" + totals + "}\n";
  if (FILE* f = std::fopen(E.cfg.stats_lines.c_str(), "a")) {
    std::fwrite(line.data(), 1, line.size(), f);
    std::fclose(f);
  } else {
    log_line(kWarn, "stats.json %s: %s", E.cfg.stats_lines.c_str(), std::strerror(errno));
  }
  E.stats_line_prev = std::move(r);
}

// DPDK telemetry commands (read with dpdk-telemetry.py). They run on
// DPDK's telemetry thread and read only the snapshot and the policy
// information, under snap_mu.
Engine* g_tel_engine = nullptr;
std::mutex g_tel_mu;

void tel_counters(rte_tel_data* d, const ConsumerReport& c) {
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "in", c.counters.in);
  rte_tel_data_add_dict_u64(d, "out", c.counters.out);
  rte_tel_data_add_dict_u64(d, "dropped", c.counters.dropped);
  rte_tel_data_add_dict_u64(d, "filtered", c.counters.filtered);
  rte_tel_data_add_dict_u64(d, "written", c.written);
  rte_tel_data_add_dict_u64(d, "tx_dropped", c.tx_dropped);
  rte_tel_data_add_dict_u64(d, "shared", c.counters.shared);
  rte_tel_data_add_dict_u64(d, "copied", c.counters.copied);
  rte_tel_data_add_dict_u64(d, "error_cut", c.counters.err_cut);
  rte_tel_data_add_dict_u64(d, "error_drop", c.counters.err_drop);
  rte_tel_data_add_dict_u64(d, "unknown_drop", c.counters.unknown_drop);
  rte_tel_data_add_dict_u64(d, "unknown_cut", c.counters.unknown_cut);
  rte_tel_data_add_dict_u64(d, "unknown_keep", c.counters.unknown_keep);
  rte_tel_data_add_dict_u64(d, "tunnel_cut", c.counters.tunnel_cut);
  rte_tel_data_add_dict_u64(d, "icmp_quote_cut", c.counters.icmp_quote_cut);
  rte_tel_data_add_dict_u64(d, "l7_cut", c.counters.l7_cut);
  rte_tel_data_add_dict_u64(d, "tls_server_cut", c.counters.tls_server_cut);
  rte_tel_data_add_dict_u64(d, "reverse_hidden", c.counters.reverse_hidden);
  rte_tel_data_add_dict_u64(d, "nd_zeroed", c.counters.nd_zeroed);
  rte_tel_data_add_dict_u64(d, "addr_text", c.counters.addr_text);
  rte_tel_data_add_dict_u64(d, "addr_text_zeroed", c.counters.addr_text_zeroed);
  rte_tel_data_add_dict_u64(d, "policy_drop", c.counters.policy_drop);
  rte_tel_data_add_dict_u64(d, "zanon_hidden", c.counters.zanon_hidden);
  rte_tel_data_add_dict_u64(d, "zanon_released", c.counters.zanon_released);
  // Per rule, keyed by its place in the policy: file:line (hits since the
  // policy generation was loaded).
  if (c.policy_ptr)
    for (auto& rule : c.policy_ptr->rules) {
      std::string f = rule.loc.file;
      if (auto sl = f.rfind('/'); sl != std::string::npos) f = f.substr(sl + 1);
      std::string key = "rule " + f + ":" + std::to_string(rule.loc.line);
      uint64_t hits = rule.index < c.counters.rule_hits.size() ? c.counters.rule_hits[rule.index] : 0;
      rte_tel_data_add_dict_u64(d, key.substr(0, RTE_TEL_MAX_STRING_LEN - 1).c_str(), hits);
    }
}

int tel_stats(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> g(g_tel_mu);
  if (!g_tel_engine) return -1;
  Engine& E = *g_tel_engine;
  std::lock_guard<std::mutex> s(E.snap_mu);
  const Report& r = E.snap;
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "elapsed_ms", r.elapsed_ns / 1000000);
  rte_tel_data_add_dict_u64(d, "rx", r.rx);
  rte_tel_data_add_dict_u64(d, "rx_dispatch_drops", r.rx_dispatch_drops);
  uint64_t in = 0, out = 0, dropped = 0;
  for (auto& c : r.consumers) in += c.counters.in, out += c.counters.out, dropped += c.counters.dropped;
  rte_tel_data_add_dict_u64(d, "consumers_in", in);
  rte_tel_data_add_dict_u64(d, "consumers_out", out);
  rte_tel_data_add_dict_u64(d, "consumers_dropped", dropped);
  rte_tel_data_add_dict_u64(d, "generation", r.generation);
  rte_tel_data_add_dict_u64(d, "reloads", r.reloads);
  rte_tel_data_add_dict_u64(d, "reloads_failed", r.reloads_failed);
  rte_tel_data_add_dict_u64(d, "flows_created", r.flows_created);
  return 0;
}

int tel_consumers(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> g(g_tel_mu);
  if (!g_tel_engine) return -1;
  Engine& E = *g_tel_engine;
  std::lock_guard<std::mutex> s(E.snap_mu);
  rte_tel_data_start_dict(d);
  for (auto& c : E.snap.consumers) {
    rte_tel_data* sub = rte_tel_data_alloc();
    if (!sub) return -1;
    tel_counters(sub, c);
    rte_tel_data_add_dict_container(d, c.name.c_str(), sub, 0);
  }
  return 0;
}

int tel_policies(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> g(g_tel_mu);
  if (!g_tel_engine) return -1;
  Engine& E = *g_tel_engine;
  std::lock_guard<std::mutex> s(E.snap_mu);
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "generation", E.snap.generation);
  rte_tel_data_add_dict_u64(d, "reloads", E.snap.reloads);
  rte_tel_data_add_dict_u64(d, "reloads_failed", E.snap.reloads_failed);
  rte_tel_data_add_dict_string(d, "last_result", E.last_result.substr(0, RTE_TEL_MAX_STRING_LEN - 1).c_str());
  // A dict value holds at most RTE_TEL_MAX_STRING_LEN bytes: the first
  // diagnostic line (file:line:col: error: ...) is what fits.
  std::string first = E.last_error.substr(0, E.last_error.find('\n'));
  rte_tel_data_add_dict_string(d, "last_error", first.substr(0, RTE_TEL_MAX_STRING_LEN - 1).c_str());
  for (size_t i = 0; i < E.pinfo.size() && i < E.cfg.consumers.size(); ++i) {
    rte_tel_data* sub = rte_tel_data_alloc();
    if (!sub) return -1;
    rte_tel_data_start_dict(sub);
    const PolicyInfo& p = E.pinfo[i];
    std::string path = p.path.size() < RTE_TEL_MAX_STRING_LEN ? p.path : "..." + p.path.substr(p.path.size() - 120);
    rte_tel_data_add_dict_string(sub, "path", path.c_str());
    rte_tel_data_add_dict_string(sub, "sha256", p.sha256.c_str());
    rte_tel_data_add_dict_u64(sub, "rules", p.rules);
    rte_tel_data_add_dict_u64(sub, "loaded_at_unix_ms", p.loaded_at_ns / 1000000);
    rte_tel_data_add_dict_container(d, E.cfg.consumers[i].name.c_str(), sub, 0);
  }
  return 0;
}

int tel_zanon(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> g(g_tel_mu);
  if (!g_tel_engine) return -1;
  Engine& E = *g_tel_engine;
  std::lock_guard<std::mutex> s(E.snap_mu);
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "enabled", E.snap.has_zstats);
  if (E.snap.has_zstats) {
    const zanon::Stats& z = E.snap.zstats;
    rte_tel_data_add_dict_u64(d, "values_tracked", z.values_tracked);
    rte_tel_data_add_dict_u64(d, "capacity", z.capacity);
    rte_tel_data_add_dict_u64(d, "table_bytes", z.table_bytes);
    rte_tel_data_add_dict_u64(d, "observations", z.observations);
    rte_tel_data_add_dict_u64(d, "released", z.released);
    rte_tel_data_add_dict_u64(d, "hidden", z.hidden);
    rte_tel_data_add_dict_u64(d, "evictions", z.evictions);
    rte_tel_data_add_dict_u64(d, "expirations", z.expirations);
  }
  if (E.snap.has_share) add_share_telemetry(E.snap.share, d);
  return 0;
}

int tel_flows(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> g(g_tel_mu);
  if (!g_tel_engine) return -1;
  Engine& E = *g_tel_engine;
  std::lock_guard<std::mutex> s(E.snap_mu);
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "created", E.snap.flows_created);
  rte_tel_data_add_dict_u64(d, "expired", E.snap.flows_expired);
  rte_tel_data_add_dict_u64(d, "evicted", E.snap.flows_evicted);
  rte_tel_data_add_dict_u64(d, "closed", E.snap.flows_closed);
  rte_tel_data_add_dict_u64(d, "streams_held", E.snap.streams_held);
  rte_tel_data_add_dict_u64(d, "streams_failed", E.snap.streams_failed);
  return 0;
}

int tel_reload(const char*, const char*, rte_tel_data* d) {
  g_hup.store(1, std::memory_order_relaxed);
  rte_tel_data_string(d, "reload queued");
  return 0;
}

void register_telemetry(Engine& E) {
  {
    std::lock_guard<std::mutex> g(g_tel_mu);
    g_tel_engine = &E;
  }
  static bool registered = false;
  if (registered) return;
  registered = true;
  rte_telemetry_register_cmd("/amon/stats", tel_stats, "amon totals: packets in, out, dropped; policy generation");
  rte_telemetry_register_cmd("/amon/consumers", tel_consumers, "Per consumer: the exit report's counters and per-rule hits");
  rte_telemetry_register_cmd("/amon/policies", tel_policies,
                             "Policy generation, per consumer path, SHA-256, loaded-at; last reload result and error");
  rte_telemetry_register_cmd("/amon/zanon", tel_zanon, "z-anonymity store: values, bytes, observations, evictions");
  rte_telemetry_register_cmd("/amon/flows", tel_flows, "Flow table totals over all workers");
  rte_telemetry_register_cmd("/amon/reload", tel_reload, "Reload policies and keys, as SIGHUP does");
}

void unregister_telemetry() {
  std::lock_guard<std::mutex> g(g_tel_mu);
  g_tel_engine = nullptr;
}

}  // namespace

bool compile_policies(const EngineConfig& cfg, std::vector<std::shared_ptr<const dsl::Policy>>& out) {
  register_builtin_plugins();
  bool ok = true;
  for (const auto& c : cfg.consumers) {
    dsl::Diagnostics diags;
    auto p = dsl::compile_file(c.policy_path, diags);
    if (!diags.empty()) std::fputs(diags.render_text().c_str(), stderr);
    if (!p) {
      ok = false;
      continue;
    }
    out.push_back(p);
  }
  return ok;
}

EngineResult run_engine(const EngineConfig& cfg_in) {
  Engine E;
  E.cfg = cfg_in;
  EngineConfig& cfg = E.cfg;
  // Before anything else: a SIGHUP during start-up queues a reload rather
  // than ending the process.
  install_signals();
  if (!compile_policies(cfg, E.policies)) return {2};
  for (size_t i = 0; i < E.policies.size(); ++i)
    E.pinfo.push_back({cfg.consumers[i].policy_path, policy_digest(*E.policies[i]), keys_digest(*E.policies[i]),
                       E.policies[i]->rules.size(), wall_ns()});
  if (cfg.consumers.empty()) {
    std::fprintf(stderr, "amon: no consumer configured\n");
    return {2};
  }
  if (cfg.consumers.size() > size_t(kMaxConsumers)) {
    std::fprintf(stderr, "amon: at most %d consumers\n", kMaxConsumers);
    return {2};
  }

  // EAL.
  std::vector<std::string> args{"amon"};
  args.insert(args.end(), cfg.eal_args.begin(), cfg.eal_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int rc = rte_eal_init(int(argv.size()), argv.data());
  if (rc < 0) {
    log_line(kErr, "EAL initialisation failed: %s", rte_strerror(rte_errno));
    return {1};
  }
  EngineResult result;
  try {
    if (rte_lcore_count() < cfg.workers + 1)
      throw std::runtime_error("need " + std::to_string(cfg.workers + 1) + " lcores for " +
                               std::to_string(cfg.workers) + " workers, EAL gave " +
                               std::to_string(rte_lcore_count()));
    if (!mbuf_meta_register()) throw std::runtime_error(std::string("mbuf dynfield: ") + rte_strerror(rte_errno));
    E.tsc_hz = rte_get_tsc_hz();
    E.tsc0 = rte_rdtsc();
    E.wall0 = wall_ns();
    E.sizes = plan_sizes(cfg);
    E.pool = create_pool(E);
    if (!E.pool) throw std::runtime_error(std::string("mbuf pool: ") + rte_strerror(rte_errno));

    // z-anonymity store, sized for the largest z and dt any policy uses.
    uint32_t zmax = 0;
    uint64_t max_dt = 0;
    for (auto& p : E.policies)
      for (auto& r : p->rules)
        if (r.action.desc->uses_zstore) {
          zmax = std::max<uint32_t>(zmax, uint32_t(r.action.int_or("z", 10)));
          max_dt = std::max<uint64_t>(max_dt, uint64_t(r.action.int_or("dt", 0)));
        }
    E.zmax = zmax;
    E.zmax_dt = max_dt;
    if (cfg.share.enabled() && !zmax) log_line(kWarn, "zanon.share: no policy uses zanon, so nothing is shared");
    if (zmax) {
      zanon::Config zc;
      zc.max_values = E.sizes.zanon_values;
      zc.zmax = zmax;
      zc.max_dt_ns = max_dt;
      // Offline the table is sized for the most values the input could
      // hold and stays mostly empty: with huge pages each value landing in
      // a new 2 MiB region made the kernel zero all of it mid-run (most of
      // the meter's memory and system time on a large capture).
      bool files_only = cfg.offline && !cfg.zanon_max_values;
      for (const auto& in : cfg.inputs) files_only = files_only && in.kind == PortSpec::Kind::PcapFile;
      zc.huge_pages = !files_only;
      share::Keys sk;
      if (cfg.share.enabled()) zc.shared = load_share_keys(cfg.share, sk), zc.key = sk.store;
      E.zstore = std::make_unique<zanon::Store>(zc);
      E.services.zstore = E.zstore.get();
    }
    if (RAND_bytes(E.services.user_hash_key.data(), 16) != 1) throw std::runtime_error("RAND_bytes failed");
    if (E.zstore && E.zstore->config().shared) E.services.user_hash_key = share_user_key(cfg.share);
    for (size_t i = 0; i < E.policies.size(); ++i) {
      try {
        E.programs.push_back(std::make_unique<Program>(E.policies[i], int(i), &E.services));
      } catch (const std::exception& ex) {
        // A policy the engine cannot run is a policy error (exit 2), not a runtime failure.
        std::fprintf(stderr, "amon: %s: %s\n", cfg.consumers[i].policy_path.c_str(), ex.what());
        result.exit_code = 2;
        throw;
      }
    }

    // Inputs.
    for (auto& in : cfg.inputs) {
      Input i;
      i.spec = in;
      if (in.kind == PortSpec::Kind::PcapFile) {
        i.pcap = std::make_unique<PcapReader>(in.spec, E.pool);
        if (!link_type_supported(i.pcap->linktype()))
          throw std::runtime_error(in.spec + ": link type " + link_type_name(i.pcap->linktype()) +
                                   " is not supported (Ethernet, Linux cooked v1/v2, raw IPv4/IPv6, "
                                   "BSD NULL/loopback, PPP, Cisco HDLC are)");
      } else {
        i.port = attach_port(in.spec);
      }
      E.inputs.push_back(std::move(i));
    }
    // Outputs. Pcap outputs keep the timestamp precision of pcap inputs.
    bool nano_out = false;
    int snaplen = 0;
    for (auto& i : E.inputs) {
      nano_out = nano_out || !i.pcap || i.pcap->nanosecond_file();
      snaplen = std::max(snaplen, i.pcap ? i.pcap->snaplen() : 262144);
    }

    for (auto& c : cfg.consumers) {
      Output o;
      o.name = c.name;
      o.spec = c.output;
      o.ring = rte_ring_create(("out_" + std::to_string(E.outputs.size())).c_str(), E.sizes.ring, int(rte_socket_id()),
                               RING_F_SC_DEQ);
      if (!o.ring) throw std::runtime_error("output ring: " + std::string(rte_strerror(rte_errno)));
      if (c.output.kind == PortSpec::Kind::PcapFile) {
        o.file = std::make_unique<FileWriter>();
        o.file->pcap = std::make_unique<PcapWriter>(c.output.spec, nano_out, snaplen, output_link_type(E));
        o.file->ring = o.ring;
      } else {
        o.port = attach_port(c.output.spec);
        if (c.output.spec.rfind("net_pcap", 0) == 0) o.tx_cap = RTE_ETHER_MAX_JUMBO_FRAME_LEN;
      }
      E.outputs.push_back(std::move(o));
    }
    // Configure ethdev ports once each (a port may be both input and output).
    std::map<uint16_t, std::pair<uint16_t, uint16_t>> qs;  // port -> (rxq, txq)
    std::map<uint16_t, bool> rss;
    for (auto& i : E.inputs) {
      if (i.port == UINT16_MAX) continue;
      rte_eth_dev_info info;
      rte_eth_dev_info_get(i.port, &info);
      i.direct = cfg.workers > 1 && info.flow_type_rss_offloads != 0 && info.max_rx_queues >= cfg.workers;
      qs[i.port].first = i.direct ? uint16_t(cfg.workers) : 1;
      rss[i.port] = i.direct;
    }
    for (auto& o : E.outputs) {
      if (o.port == UINT16_MAX) continue;
      rte_eth_dev_info info;
      rte_eth_dev_info_get(o.port, &info);
      // A queue per worker lets workers transmit themselves; DPDK's pcap PMD
      // keeps one dumper per queue, so it writes through the main lcore.
      o.direct_tx = !cfg.offline && info.max_tx_queues >= cfg.workers && o.spec.spec.rfind("net_pcap", 0) != 0;
      qs[o.port].second = std::max<uint16_t>(qs[o.port].second, o.direct_tx ? uint16_t(cfg.workers) : 1);
    }
    for (auto& [port, q] : qs) setup_port(E, port, q.first, q.second, rss[port]);

    // Workers.
    unsigned lcore = rte_get_next_lcore(-1, 1, 0);
    for (unsigned wi = 0; wi < cfg.workers; ++wi) {
      auto w = std::make_unique<Worker>();
      w->eng = &E;
      w->id = wi;
      w->lcore = lcore;
      lcore = rte_get_next_lcore(lcore, 1, 0);
      w->in = rte_ring_create(("in_" + std::to_string(wi)).c_str(), E.sizes.ring, int(rte_socket_id()),
                              RING_F_SP_ENQ | RING_F_SC_DEQ);
      if (!w->in) throw std::runtime_error("worker ring: " + std::string(rte_strerror(rte_errno)));
      w->path = std::make_unique<WorkerPath>(
          E.programs, E.pool,
          std::make_unique<FlowTable>("flows_" + std::to_string(wi), E.sizes.flows_per_worker, cfg.flow_timeouts,
                                      int(rte_socket_id()), /*commit=*/!cfg.offline),
          cfg.hold);
      w->path->set_burst_sink(enqueue_out_burst);
      for (auto& i : E.inputs)
        if (i.direct) w->rx_queues.emplace_back(i.port, uint16_t(wi));
      w->txb.assign(E.outputs.size(), nullptr);
      w->tx_unsent.assign(E.outputs.size(), 0);
      for (size_t ci = 0; ci < E.outputs.size(); ++ci) {
        if (!E.outputs[ci].direct_tx) continue;
        auto* b = static_cast<rte_eth_dev_tx_buffer*>(
            rte_zmalloc_socket("txb", RTE_ETH_TX_BUFFER_SIZE(kBurst), 0, int(rte_socket_id())));
        if (!b || rte_eth_tx_buffer_init(b, kBurst) != 0) throw std::runtime_error("tx buffer allocation failed");
        // Unsent packets are freed and counted (the default callback frees only).
        rte_eth_tx_buffer_set_err_callback(b, rte_eth_tx_buffer_count_callback, &w->tx_unsent[ci]);
        w->txb[ci] = b;
      }
      E.workers.push_back(std::move(w));
    }
    {
      size_t sz = rte_rcu_qsbr_get_memsize(cfg.workers);
      E.qs = static_cast<rte_rcu_qsbr*>(rte_zmalloc("amon_qsbr", sz, RTE_CACHE_LINE_SIZE));
      if (!E.qs || rte_rcu_qsbr_init(E.qs, cfg.workers) != 0) throw std::runtime_error("rte_rcu_qsbr_init failed");
    }
    if (E.zstore && E.zstore->config().shared) E.share = start_share(cfg, *E.zstore, E.zmax_dt, [](bool warn, const std::string& m) { log_line(warn ? kWarn : kInfo, "%s", m.c_str()); });
    E.start_ns = wall_ns();
    for (auto& o : E.outputs)
      if (o.file) o.file->th = std::thread(file_writer_main, o.file.get());
    for (auto& w : E.workers) rte_eal_remote_launch(worker_main, w.get(), w->lcore);
    const bool live = !cfg.config_path.empty();
    refresh_snapshot(E);
    E.stats_line_prev = E.snap;
    if (live) {
      register_telemetry(E);
      std::string eal, ports, cons;
      for (auto& a : cfg.eal_args) eal += (eal.empty() ? "" : " ") + a;
      for (auto& in : cfg.inputs) ports += (ports.empty() ? "" : ", ") + in.describe();
      for (size_t i = 0; i < cfg.consumers.size(); ++i)
        cons += "; " + cfg.consumers[i].name + " " + E.pinfo[i].path + " sha256 " + E.pinfo[i].sha256 + " " +
                std::to_string(E.pinfo[i].rules) + " rules -> " + cfg.consumers[i].output.describe();
      log_line(kInfo, "started: version %s, %u workers, EAL [%s], inputs [%s]%s", AMON_VERSION, cfg.workers, eal.c_str(),
               ports.c_str(), cons.c_str());
      sd_notify(0, "READY=1\nSTATUS=generation 1 running");
    }
    std::future<std::unique_ptr<StagedReload>> reload_job;
    uint64_t last_snap = rte_rdtsc();
    E.stats_line_tsc = last_snap;

    // Main lcore: inputs, outputs, termination.
    rte_mbuf* pkts[kBurst];
    uint64_t last_rx_tsc = rte_rdtsc();
    const uint64_t idle_tsc = cfg.idle_ns * E.tsc_hz / 1000000000ULL;
    uint64_t last_sweep = 0;
    Idle main_idle(cfg.offline);
    Progress progress(!cfg.quiet && E.sizes.input_bytes && isatty(STDERR_FILENO), E.sizes.input_bytes);
    for (;;) {
      // A failed output stops the reading as a signal does.
      bool stopping = g_signal.load(std::memory_order_relaxed) != 0 || output_failed(E);
      bool got = false;
      if (!stopping) {
        for (auto& in : E.inputs) {
          if (in.done || in.direct) continue;
          unsigned n;
          if (in.pcap) {
            n = in.pcap->read_burst(pkts, kBurst);
            if (n == 0 && in.pcap->eof()) {
              in.done = true;
              if (!in.pcap->error().empty()) E.input_error = in.pcap->error();
            }
          } else {
            n = rte_eth_rx_burst(in.port, 0, pkts, kBurst);
            stamp_rx(E, pkts, n);
          }
          if (n) {
            got = true;
            in.packets += n;
            E.rx_total += n;
            dispatch(E, pkts, n);
          }
        }
      }
      const bool wrote = drain_outputs(E) != 0;
      // ftell is an lseek: asked for only when the line is redrawn.
      if (got && progress.due()) progress.update(E.rx_total, pcap_bytes_read(E));
      uint64_t now_tsc = rte_rdtsc();
      if (got) last_rx_tsc = now_tsc;
      if (E.zstore && now_tsc - last_sweep > E.tsc_hz / 10) {
        last_sweep = now_tsc;
        // Reclaim by packet time (the store's clock), the oldest any worker
        // is at, so no worker can still observe what is reclaimed.
        uint64_t t = UINT64_MAX;
        for (auto& w : E.workers) {
          uint64_t wt = w->last_ts.load(std::memory_order_relaxed);
          if (wt) t = std::min(t, wt);
        }
        if (t != UINT64_MAX) E.zstore->sweep(t, 4096);
      }
      for (auto& w : E.workers) last_rx_tsc = std::max(last_rx_tsc, w->last_rx_tsc.load(std::memory_order_relaxed));
      bool inputs_finished = true;
      for (auto& in : E.inputs) {
        if (in.pcap && !in.done) inputs_finished = false;
        if (!in.pcap && !(cfg.until_idle && now_tsc - last_rx_tsc > idle_tsc)) inputs_finished = false;
      }
      if ((stopping || inputs_finished) && all_workers_caught_up(E)) {
        E.flush_holds.store(true, std::memory_order_release);
        bool held = false;
        for (auto& w : E.workers) held = held || w->held.load(std::memory_order_acquire);
        if (!held && outputs_empty(E)) break;
      }
      if (live) {
        // Reloads: compiled on a thread of their own, published here. A
        // SIGHUP during a reload queues one more, never two at once.
        if (reload_job.valid()) {
          if (reload_job.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
            auto st = reload_job.get();
            apply_reload(E, *st);
            refresh_snapshot(E);
          }
        } else if (!stopping && g_hup.exchange(0, std::memory_order_relaxed)) {
          sd_notifyf(0, "RELOADING=1\nSTATUS=reloading (generation %llu running)", (unsigned long long)E.generation);
          reload_job = std::async(std::launch::async, stage_reload, E.cfg, &E.services, E.zmax, E.zmax_dt,
                                  E.zstore != nullptr, unsigned(E.workers.size()));
        }
        if (now_tsc - last_snap > E.tsc_hz / 10) {
          last_snap = now_tsc;
          refresh_snapshot(E);
        }
        bool line_due = cfg.stats_interval_ns && now_tsc - E.stats_line_tsc > cfg.stats_interval_ns / 1000000 * (E.tsc_hz / 1000);
        if (g_usr1.exchange(0, std::memory_order_relaxed) || line_due) {
          E.stats_line_tsc = now_tsc;
          write_stats_line(E);
        }
      }
      if (got || wrote) main_idle.reset();
      else main_idle.wait();
    }
    progress.finish();
    if (live) sd_notify(0, "STOPPING=1");
    if (reload_job.valid()) reload_job.get();  // a reload still compiling is dropped
    E.stop_workers.store(true, std::memory_order_release);
    rte_eal_mp_wait_lcore();
    if (E.share) E.share->stop();
    drain_outputs(E);
    const bool outputs_ok = finish_writers(E);

    // Stats.
    Report rep = build_report(E);
    if (E.zstore && rep.zstats.evictions && !cfg.zanon_max_values)
      std::fprintf(stderr,
                   "amon: warning: the z-anonymity store (sized %zu values from the input) was full and forgot %llu "
                   "values, which were then hidden more than needed; raise it with --zanon-values or "
                   "zanon.max_values\n",
                   E.sizes.zanon_values, (unsigned long long)rep.zstats.evictions);
    if (!cfg.quiet) std::fputs(render_report_text(rep).c_str(), stdout);
    if (!cfg.stats_json.empty()) {
      FILE* f = std::fopen(cfg.stats_json.c_str(), "w");
      if (!f) throw std::runtime_error(cfg.stats_json + ": " + std::strerror(errno));
      std::string j = render_report_json(rep);
      std::fwrite(j.data(), 1, j.size(), f);
      std::fclose(f);
    }
    if (!E.input_error.empty()) {
      log_line(kErr, "input stopped early: %s", E.input_error.c_str());
      result.exit_code = 1;
    }
    if (!outputs_ok) result.exit_code = 1;
  } catch (const std::exception& e) {
    if (result.exit_code != 2) {
      log_line(kErr, "%s", e.what());
      result.exit_code = 1;
    }
    E.stop_workers.store(true);
    rte_eal_mp_wait_lcore();
    finish_writers(E);
  }
  // Release everything that holds mbufs before the pool goes.
  for (auto& w : E.workers)
    for (size_t ci = 0; ci < w->txb.size(); ++ci)
      if (w->txb[ci]) {
        rte_eth_tx_buffer_flush(E.outputs[ci].port, uint16_t(w->id), w->txb[ci]);
        rte_free(w->txb[ci]);
      }
  E.workers.clear();
  for (auto& o : E.outputs) {
    rte_mbuf* m = nullptr;
    while (o.ring && rte_ring_dequeue(o.ring, reinterpret_cast<void**>(&m)) == 0) rte_pktmbuf_free(m);
    if (o.port != UINT16_MAX) {
      rte_eth_dev_stop(o.port);
    }
    o.file.reset();
  }
  for (auto& i : E.inputs)
    if (i.port != UINT16_MAX) rte_eth_dev_stop(i.port);
  unregister_telemetry();
  if (E.qs) rte_free(E.qs);
  rte_eal_cleanup();
  return result;
}

}  // namespace amon
