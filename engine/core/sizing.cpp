#include "sizing.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstdio>

#include "flow_table.h"
#include "zanon.h"

namespace amon {

namespace {

// A gzip capture is planned as this many times its size: captures compress
// 3 to 5 times; an estimate too small only costs evictions that hide more.
constexpr uint64_t kGzipRatio = 6;

bool gzip_file(const std::string& path) {
  uint8_t m[2] = {};
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  const bool gz = std::fread(m, 1, 2, f) == 2 && m[0] == 0x1f && m[1] == 0x8b;
  std::fclose(f);
  return gz;
}

// Live defaults: a 10 Gbit/s link's flows and values.
constexpr uint32_t kLiveFlows = 1u << 18;
constexpr size_t kLiveValues = size_t{1} << 20;
constexpr uint32_t kMaxRing = 4096;
// Offline a full ring makes its producer wait (nothing is dropped), so a
// ring need only cover a thread's scheduling delay. Deeper rings held
// 4 x 4096 copies in flight with four output files: a 118 MiB pool to
// commit at start for no speed.
constexpr uint32_t kMaxRingOffline = 1024;
// The smallest record that can open a flow: a record header and an IPv4
// header with no link layer (raw IP) and nothing after it.
constexpr uint64_t kMinFlowRecord = 16 + 20;
// Per distinct z-anonymity value, this many bytes of capture. Real mixes
// carry far fewer distinct names, servers and agents than one per KiB (the
// generator's 184 MB mix: a few thousand), and the store's table is cheap
// only while it is small: it is mapped with huge pages, so every value that
// lands in a fresh 2 MiB region faults in all of it. A capture denser than
// this fills the store, which then forgets its least recently seen values
// (hidden more, never released sooner); the run says so at the end and
// --zanon-values raises the bound.
constexpr uint64_t kBytesPerValue = 1024;

uint32_t pow2_clamp(uint64_t want, uint32_t lo, uint32_t hi) {
  uint64_t v = std::bit_ceil(std::clamp<uint64_t>(want, 1, hi));
  return uint32_t(std::clamp<uint64_t>(v, lo, hi));
}

}  // namespace

// An entry and its quarter of an 8-slot, 64-byte bucket (flow_table.cpp).
size_t flow_slot_bytes() { return sizeof(FlowEntry) + 64 / 4; }
size_t mbuf_bytes() { return sizeof(rte_mbuf) + RTE_MBUF_DEFAULT_BUF_SIZE + 64; }
size_t zanon_value_bytes(uint32_t zmax) {
  // Asked of the store itself: its table is mapped here but never touched.
  zanon::Config zc;
  zc.max_values = 1u << 16;
  zc.zmax = zmax;
  zanon::Store st(zc);
  return size_t(st.stats().table_bytes / zc.max_values);
}

Sizes plan_sizes(const EngineConfig& cfg) {
  Sizes s;
  bool live = false;
  uint64_t plan_bytes = 0;  // the inputs' size uncompressed, as far as it can be told
  for (const auto& in : cfg.inputs) {
    if (in.kind != PortSpec::Kind::PcapFile) {
      live = true;
      continue;
    }
    // A pipe's size is unknown: planned as for a live port.
    for (const auto& f : in.files.empty() ? std::vector<std::string>{in.spec} : in.files) {
      struct stat st;
      if (f == "-" || stat(f.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        live = true;
        continue;
      }
      s.input_bytes += uint64_t(st.st_size);
      plan_bytes += uint64_t(st.st_size) * (gzip_file(f) ? kGzipRatio : 1);
    }
  }
  const unsigned workers = std::max(1u, cfg.workers);
  const size_t consumers = std::max<size_t>(1, cfg.consumers.size());
  uint64_t max_packets = live ? UINT64_MAX : plan_bytes / 16 + 1;
  uint64_t max_flows = live ? UINT64_MAX : plan_bytes / kMinFlowRecord + 1;
  uint64_t max_values = live ? UINT64_MAX : plan_bytes / kBytesPerValue + 1;

  s.flows_per_worker = cfg.flows_per_worker ? cfg.flows_per_worker : pow2_clamp(max_flows, 1024, kLiveFlows);
  s.zanon_values = cfg.zanon_max_values ? cfg.zanon_max_values : pow2_clamp(max_values, 4096, kLiveValues);
  // Rings deeper than the file has packets only cost memory.
  s.ring = pow2_clamp(max_packets, 64, live || !cfg.offline ? kMaxRing : kMaxRingOffline);
  s.mbuf_cache = s.ring >= kMaxRingOffline || live || !cfg.offline ? 256 : 32;
  const uint64_t hold = cfg.hold.enabled ? std::min<uint64_t>(cfg.hold.segments, max_packets) : 0;
  // A reorder buffer never holds more records than the file has packets
  // (a record per packet and consumer), and up to twice its bound of
  // records that may leave at once. The window defaults to ten times the
  // longer hold: a worker releases by the packet time of its own packets,
  // and one with several workers may see none of its flows for a while.
  s.reorder_records = uint32_t(std::min<uint64_t>(cfg.reorder_records, std::max<uint64_t>(max_packets, 64)));
  s.reorder_window_ns = cfg.reorder_window_ns ? cfg.reorder_window_ns
                                              : 10 * std::max(cfg.hold.timeout_ns, OuterFragLimits{}.timeout_ns);
  // What can hold an mbuf at once: each worker's input ring, burst and held
  // segments, each consumer's output ring (and a copy in flight per
  // consumer) and reorder buffer, the reader's burst, and the mempool cache
  // of every lcore and of every output file's writer thread.
  uint64_t n = uint64_t(2) * s.ring + workers * (s.ring + std::min<uint32_t>(2048, s.ring / 2) + hold) +
               consumers * (uint64_t(s.ring) * 2 + uint64_t(s.reorder_records) * 2) +
               uint64_t(workers + 1 + consumers) * s.mbuf_cache * 3 / 2;
  // Live ports keep the pool they always had: descriptor rings hold mbufs too.
  if (live || !cfg.offline)
    n = 8192 + workers * (uint64_t(s.ring) + 2048 + (cfg.hold.enabled ? cfg.hold.segments : 0)) +
        consumers * (uint64_t(s.ring) * 2 + uint64_t(s.reorder_records) * 2);
  s.mbufs = cfg.mbufs ? cfg.mbufs : uint32_t(std::min<uint64_t>(n, UINT32_MAX));
  // EAL memory: the pool, the rings, and DPDK's own allocations (device and
  // lcore structures, the heap's bookkeeping), measured under 8 MiB.
  // Offline the pool is packed (ports.cpp, create_pool); a pool a device
  // may DMA into keeps each mbuf inside one page.
  // The offline pool's stack handler keeps a 16-byte node per mbuf
  // (rte_stack_lf_elem) beside the pool.
  const uint64_t per_mbuf = cfg.offline ? mbuf_bytes() + 16 : 4096;
  uint64_t bytes = uint64_t(s.mbufs) * per_mbuf + (workers + consumers) * uint64_t(s.ring) * 8 +
                   (uint64_t(16) << 20);
  s.eal_mb = uint32_t((bytes + (1 << 20) - 1) >> 20);
  // Ports' descriptor rings and drivers allocate from EAL memory too.
  if (live || !cfg.offline) s.eal_mb = std::max<uint32_t>(s.eal_mb, 512);
  return s;
}

}  // namespace amon
