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
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <ctime>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine.h"
#include "mbuf_meta.h"
#include "ordered.h"
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

// How a thread waits for the other side of a ring or a quiet port.
// Offline the reader, the workers and the writer may share fewer cores than
// there are threads, and a spinning wait takes the core from the thread it
// waits for; so after a short spin it yields, then sleeps in short steps (a
// ring holds far more packets than arrive in one step). Live, it polls while
// packets come and for `idle.busy` after the last one (a burst's next packet
// is microseconds away), then sleeps between polls, 1 us doubling up to
// `idle.max_sleep`: a quiet port no longer takes a core, and the first packet
// after the quiet waits at most one sleep in the port's ring
// (doc/performance.md, Idle ports). max_sleep 0: always poll.
class Idle {
 public:
  explicit Idle(bool offline) : offline_(offline) {}
  Idle(bool offline, const IdleSettings& s, uint64_t tsc_hz) : offline_(offline) {
    if (offline) return;
    busy_tsc_ = s.busy_ns * tsc_hz / 1000000000ULL;
    max_sleep_ns_ = s.max_sleep_ns;
    // A sleep of a few microseconds otherwise lasts the default timer slack
    // of 50 us more; the slack is the calling thread's own.
    if (max_sleep_ns_) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  }
  void reset() { n_ = 0, since_ = 0, step_ns_ = 0; }
  void wait() {
    if (!offline_) {
      if (!max_sleep_ns_) return rte_pause();
      const uint64_t now = rte_rdtsc();
      if (!since_) since_ = now;
      if (now - since_ < busy_tsc_) return rte_pause();
      step_ns_ = std::min<uint64_t>(step_ns_ ? step_ns_ * 2 : 1000, max_sleep_ns_);
      const timespec ts{0, long(step_ns_)};
      nanosleep(&ts, nullptr);
    } else if (n_ < 64) {
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
  uint64_t busy_tsc_ = 0, max_sleep_ns_ = 0, since_ = 0, step_ns_ = 0;
};

// A pcap output file's own thread. The main lcore reading the input and
// writing every output made it the bottleneck with several consumers (the
// kernel's page-cache copy of each file is most of a write); a thread per
// file spreads those copies over the cores. Its ring is the back-pressure:
// offline, a worker waits while it is full. Records leave in input order
// (ordered.h).
struct FileWriter {
  std::unique_ptr<PcapWriter> pcap;
  OutQueue* q = nullptr;
  std::thread th;
  std::atomic<bool> stop{false};  // no more enqueues: drain the ring and close
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> written{0};
  std::string error;  // the thread's, read after join()
};

struct Output {
  std::string name;
  PortSpec spec;
  std::unique_ptr<OutQueue> q;
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
  // A vdev reading a capture file (net_pcap rx_pcap=): it has no line rate
  // to keep up with, so its packets wait for room instead of being dropped.
  bool file_backed = false;
  uint64_t packets = 0;
  // Loss before amon reads a packet (loss.cpp): the sockets of a
  // net_af_packet or net_af_xdp port, whose kernel
  // ring drops their drivers do not report, and what has been counted so far.
  std::vector<int> packet_sockets;
  std::vector<int> xdp_sockets;  // net_af_xdp: its sockets (their ring-full drops)
  InputLoss loss;
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
  std::vector<uint64_t> out_full;  // per output: packets dropped because its ring was full (live)
  std::vector<std::pair<uint16_t, uint16_t>> rx_queues;  // (port, queue) polled directly
  // Per output: no fresh record below this input number will come from this
  // worker (ordered.h).
  std::unique_ptr<OrderFloor[]> floors;
  unsigned nfloors = 0;
  // The oldest packet it holds, for every output's reorder buffer (ordered.h).
  HeldMark held_mark;
  bool marks = false;
  void raise_floors(uint64_t s) {
    for (unsigned i = 0; i < nfloors; ++i) floors[i].raise(s);
  }
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
  // Input sequence numbers (ordered.h): the next to give, and the last one
  // given (published before the packet is enqueued).
  uint64_t next_seq = 1;
  std::atomic<uint64_t> dispatched_seq{0};
  // Hosts seen initiating flows, learnt by the dispatcher in input order
  // for several workers while some program needs it (learn_initiators);
  // kept once made, so a reload that needs it again remembers.
  std::unique_ptr<InitiatorLog> initiators;
  bool learn_initiators = false;
  // Every input a capture file or a file-backed vdev: outputs wait for room
  // as offline runs do (nothing has a line rate to keep up with).
  bool lossless_out = false;
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
void dispatch(Engine& E, rte_mbuf** pkts, unsigned n, bool wait);
// Whether the dispatcher learns initiators for E.programs (Engine::initiators).
void note_initiators(Engine& E);

// users_prepass.cpp: offline, the users outside `clients` each program
// learns (Program::set_known_users) from a first read of the inputs.
void learn_users_offline(Engine& E);
unsigned drain_outputs(Engine& E);
bool outputs_empty(Engine& E);
uint64_t pcap_bytes_read(const Engine& E);
void start_ports(Engine& E);

// instance.cpp: the DPDK runtime folder of this process's file prefix,
// held (flock) from before the EAL starts until after it ends.
struct RuntimeDir {
  std::string prefix, path;
  int fd = -1;
};
bool claim_runtime_dir(const std::vector<std::string>& eal, RuntimeDir& rd, std::string& err);
bool check_lcores(RuntimeDir& rd, unsigned workers, std::string& err);
void release_runtime_dir(RuntimeDir& rd);

// loss.cpp
bool file_backed_vdev(const std::string& spec);
void open_loss_counters(Engine& E);
std::set<int> xdp_sockets();
void claim_xdp_sockets(Engine& E, uint16_t port, const std::set<int>& before);
void poll_loss(Engine& E);

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
