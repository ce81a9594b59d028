// What a worker does to one packet: decode once, look up the flow, run each
// consumer's program (sharing the mbuf with consumers that change nothing,
// copying for the others) and hand each result to a sink. The engine's
// workers and the benchmark run this same code.
#pragma once

#include <rte_mbuf.h>

#include <memory>
#include <vector>

#include "flow_table.h"
#include "l7.h"
#include "runtime.h"

namespace amon {

struct WorkerPathStats {
  uint64_t copy_failures = 0;
  uint64_t decode_status[4] = {};
};

class WorkerPath {
 public:
  // sink(ctx, consumer index, mbuf): takes ownership of the mbuf reference.
  using Sink = void (*)(void* ctx, unsigned consumer, rte_mbuf* m);

  WorkerPath(const std::vector<std::unique_ptr<Program>>& programs, rte_mempool* pool,
             std::unique_ptr<FlowTable> flows);

  void process(rte_mbuf* m, Sink sink, void* ctx);
  // A burst in order: decodes all, looks their flows up in bulk (the cache
  // misses overlap), then runs the consumers packet by packet.
  void process_burst(rte_mbuf** pkts, unsigned n, Sink sink, void* ctx);

  FlowTable& flows() { return *flows_; }
  std::vector<ConsumerCounters>& counters() { return counters_; }
  const WorkerPathStats& stats() const { return st_; }

 private:
  // Everything after the flow lookup.
  void consumers(rte_mbuf* m, const uint8_t* data, const Decoded& d, PacketMeta& meta, Sink sink, void* ctx);

  std::vector<std::unique_ptr<ProgramInstance>> progs_;
  std::vector<bool> identity_;
  unsigned sharers_ = 0, modifiers_ = 0;
  std::vector<ConsumerCounters> counters_;
  rte_mempool* pool_;
  std::unique_ptr<FlowTable> flows_;
  std::vector<uint8_t> scratch_, scratch2_;
  WorkerPathStats st_;
  std::unique_ptr<L7Parse> l7_;  // null when no consumer looks past L4
  uint64_t packet_id_ = 0;
  // Burst scratch, kept here so a burst does not construct them anew.
  Decoded ds_[FlowTable::kBurstMax];
  PacketMeta metas_[FlowTable::kBurstMax];
  const uint8_t* datas_[FlowTable::kBurstMax];
  bool want_[FlowTable::kBurstMax];
  bool wants_flows_ = false;
};

}  // namespace amon
