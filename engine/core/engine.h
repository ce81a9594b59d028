// The engine: EAL, ports, workers and per-consumer outputs.
//
// Packet path: an input (pcap file, or an ethdev port without enough RSS
// queues) is read on the main lcore, which decodes just enough to compute a
// symmetric flow hash and hands the packet to that worker's ring; an ethdev
// port with symmetric RSS and one queue per worker is polled by the workers
// directly. Workers decode once, look up the flow, run every consumer's
// program (sharing the mbuf with consumers that change nothing, copying for
// the others) and enqueue to each consumer's output ring; each pcap file
// output has a writer thread of its own, the main lcore transmits on ethdev
// outputs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "flow_table.h"
#include "worker_path.h"
#include "runtime.h"
#include "share.h"

namespace amon {

struct PortSpec {
  enum class Kind { PcapFile, Ethdev } kind = Kind::PcapFile;
  std::string spec;  // file path, or an ethdev name/devargs ("net_pcap0,rx_pcap=x.pcap", "0000:01:00.0")
  // A set of captures read as one stream in time order (an input: their
  // paths; spec names the set), or the folder that mirrors them (an output:
  // each input's name below its folder; spec is the folder). Empty: spec alone.
  std::vector<std::string> files;
  // A pcap output's rotation: a new file when this many bytes would be
  // passed, and/or at each multiple of this period of packet time, keeping
  // the newest `keep` (0: all). 0: none.
  uint64_t rotate_size = 0, rotate_every_ns = 0;
  unsigned rotate_keep = 0;
  // Where the configuration names it ("file:line:col"), for messages; empty
  // from the command line.
  std::string at;
  std::string describe() const { return (kind == Kind::PcapFile ? "pcap:" : "port:") + spec; }
};

struct ConsumerSpec {
  std::string name;
  std::string policy_path;
  PortSpec output;
};

// `idle: { busy: 100us, max_sleep: 50us }`: a live thread polls for `busy`
// after its last packet, then sleeps between polls up to `max_sleep`
// (engine_parts.h, Idle). max_sleep 0: it always polls.
struct IdleSettings {
  uint64_t busy_ns = 100000, max_sleep_ns = 50000;
};

struct EngineConfig {
  std::vector<PortSpec> inputs;
  std::vector<ConsumerSpec> consumers;
  unsigned workers = 1;
  // 0 for the three sizes below: planned from the input (sizing.h).
  uint32_t flows_per_worker = 0;
  FlowTimeouts flow_timeouts;
  HoldLimits hold;                 // TCP stream holding (reassembly of split headers)
  // Each output's reorder buffer (ordered.h): records that may wait for a
  // held packet's (0: none), and for how much capture time (0: ten times
  // the longer of the hold and fragment timeouts).
  uint32_t reorder_records = 4096;
  uint64_t reorder_window_ns = 0;
  size_t zanon_max_values = 0;
  uint32_t mbufs = 0;
  bool offline = true;             // pcap-in/pcap-out: never drop, backpressure instead
  bool until_idle = false;         // stop when inputs are exhausted / silent
  uint64_t idle_ns = 1000000000ULL;
  std::string stats_json;
  // `stats: { interval: 10s, json: FILE }`: one JSON line per interval
  // appended to FILE (SIGUSR1: one at once). 0 / empty: off.
  uint64_t stats_interval_ns = 0;
  std::string stats_lines;
  std::string config_path;  // `amon run`: the YAML SIGHUP re-reads ("" offline)
  std::vector<std::string> eal_args;  // complete EAL argv tail (after argv[0])
  std::vector<std::string> eal_config;  // the YAML's `eal` as written (a reload compares it)
  bool quiet = false;
  // `loss: { warn: 0.1%, fail: 5% }`: a live run that lost more than this
  // share of what its ports were offered warns at exit / exits 3. fail < 0: off.
  double loss_warn = 0, loss_fail = -1;
  IdleSettings idle;
  share::Settings share;  // zanon.share: other boxes' observations through NATS JetStream
};

struct EngineResult {
  int exit_code = 0;  // 0 ok, 1 runtime failure, 2 configuration/policy error, 3 live loss above loss.fail
};

EngineResult run_engine(const EngineConfig& cfg);

}  // namespace amon
