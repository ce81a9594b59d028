// The engine's resources as its parts share them: the engine itself, its
// workers, inputs, outputs and file writers, and the functions each part
// offers the others. Internal to engine/core (run_engine is the entry point,
// engine.h). One part per file, as DPDK's ip_pipeline keeps one resource per
// file: ports.cpp (mbuf pool, ethdev ports, the main lcore's dispatch and
// port outputs), workers.cpp (the worker lcores), writers.cpp (a thread per
// output file), reload.cpp (signals; reloads staged and published with
// rte_rcu_qsbr), telemetry.cpp (DPDK telemetry commands), status.cpp (log
// lines, the counters report, statistics lines), engine.cpp (run_engine).
#pragma once

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <rte_rcu_qsbr.h>
#include <rte_ring.h>

#include <sched.h>

#include <atomic>
#include <climits>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine.h"
#include "mbuf_meta.h"
#include "pcap_port.h"
#include "policy.h"
#include "sizing.h"
#include "stats.h"
#include "worker_path.h"
#include "zanon.h"
#include "zshare.h"

namespace amon::engine {

constexpr uint16_t kBurst = 32;
// Records per writev of an output file (IOV_MAX / 2: a header and the bytes).
constexpr unsigned kWriteBatch = IOV_MAX / 2;

// Set by the signal handlers (reload.cpp) and the reload telemetry command.
extern std::atomic<int> g_signal;  // a stop (SIGINT, SIGTERM)
extern std::atomic<int> g_hup;     // a reload asked for (SIGHUP, /amon/reload); one is queued at most
extern std::atomic<int> g_usr1;    // a statistics line asked for

constexpr int kErr = 3, kWarn = 4, kInfo = 6;

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
  // The pressure log line (note_pressure): when it was last written and the
  // counters then.
  uint64_t pressure_ns = 0;
  uint64_t pressure_prev[4] = {};

  uint64_t now_from_tsc() const { return wall0 + (rte_rdtsc() - tsc0) * 1000000000ULL / tsc_hz; }
};

// Packets from an ethdev port: the arrival time (NICs here give none) and a
// wire length equal to what was received.
inline void stamp_rx(const Engine& E, rte_mbuf** pkts, unsigned n) {
  if (!n) return;
  uint64_t now = E.now_from_tsc();
  for (unsigned i = 0; i < n; ++i) {
    mbuf_set_ts(pkts[i], now);
    mbuf_set_wire_len(pkts[i], pkts[i]->pkt_len);
  }
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

// status.cpp
__attribute__((format(printf, 2, 3))) void log_line(int prio, const char* fmt, ...);
uint64_t wall_ns();
Report build_report(Engine& E);
void refresh_snapshot(Engine& E);
void write_stats_line(Engine& E);
void note_pressure(Engine& E, const Report& r);

// ports.cpp
rte_mempool* create_pool(const Engine& E);
uint16_t attach_port(const std::string& spec);
void setup_port(Engine& E, uint16_t port, uint16_t nrxq, uint16_t ntxq, bool rss);
int output_link_type(const Engine& E);
void dispatch(Engine& E, rte_mbuf** pkts, unsigned n);
unsigned drain_outputs(Engine& E);
bool outputs_empty(Engine& E);
uint64_t pcap_bytes_read(const Engine& E);
void start_ports(Engine& E);

// workers.cpp
void enqueue_out_burst(void* ctx, unsigned ci, rte_mbuf** ms, unsigned n);
int worker_main(void* arg);
bool all_workers_caught_up(Engine& E);
void start_workers(Engine& E);

// writers.cpp
void file_writer_main(FileWriter* fw);
bool output_failed(const Engine& E);
bool finish_writers(Engine& E);

// reload.cpp
void install_signals();
std::unique_ptr<StagedReload> stage_reload(EngineConfig old_cfg, SharedServices* services, uint32_t zmax,
                                           uint64_t zmax_dt, bool have_store, unsigned nworkers);
void apply_reload(Engine& E, StagedReload& st);

// telemetry.cpp
void register_telemetry(Engine& E);
void unregister_telemetry();

}  // namespace amon::engine
