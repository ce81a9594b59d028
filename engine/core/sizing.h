// Table and pool sizes for one run. Offline, every size follows from the
// input (the capture files' total bytes bound how many packets, flows and
// values there can be) and the options, so a small file starts in
// milliseconds and holds megabytes; live ports keep the sizes a busy link
// needs. A size set in the YAML configuration or on the command line wins.
//
// Memory is committed deliberately: the mbuf pool is written once when
// created, and so are the flow tables of a live run (no page faults while
// packets wait). Offline, a flow table grows by use: the bound above is for
// the worst file, and an ordinary one touches a fraction of it. The
// z-anonymity store maps its table and touches a page when a value first
// lands there, so it costs what the capture's values use.
#pragma once

#include <cstdint>
#include <string>

#include "engine.h"

namespace amon {

struct Sizes {
  uint64_t input_bytes = 0;      // capture files' total size (0: live or unknown)
  uint32_t flows_per_worker = 0;
  size_t zanon_values = 0;
  uint32_t ring = 0;             // worker input and consumer output rings (a power of two)
  uint32_t mbufs = 0;
  uint32_t mbuf_cache = 0;       // per-lcore mempool cache
  uint32_t eal_mb = 0;           // EAL memory (-m): the pool, the rings, DPDK's own
  uint32_t reorder_records = 0;  // each output's reorder buffer (ordered.h), 0: none
  uint64_t reorder_window_ns = 0;
};

// The mempool handler of an offline pool: a stack, last freed first out
// (ports.cpp, create_pool, says why). The lock-free one where the CPU has
// the 128-bit compare-and-swap it needs.
#if defined(__x86_64__) || defined(__aarch64__)
inline constexpr const char* kOfflinePoolOps = "lf_stack";
#else
inline constexpr const char* kOfflinePoolOps = "stack";
#endif

// Bytes one unit of each table costs (for --help and the sizing notes).
size_t flow_slot_bytes();
size_t mbuf_bytes();
size_t zanon_value_bytes(uint32_t zmax);

// Sizes for cfg; `cfg.inputs` pcap files are stat()ed. Explicit settings in
// cfg (nonzero flows_per_worker, zanon_max_values, mbufs) are kept.
Sizes plan_sizes(const EngineConfig& cfg);

}  // namespace amon
