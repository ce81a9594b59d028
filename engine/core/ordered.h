// An output's queue from the workers to whoever writes it (a file writer
// thread, or the main lcore for a port), in input order whatever the number
// of workers, held packets included.
//
// Each worker has a ring of its own (one worker: one ring), and the reader
// merges them by the input sequence number the dispatcher stamps on each
// packet (mbuf_meta.h), emitting a record only once no worker can still
// produce an earlier one: each worker publishes, per output, a floor below
// which it will enqueue nothing fresh (the first packet of its current
// burst, the packet it is waiting to enqueue, the last one of a finished
// burst; an idle worker the last packet dispatched, so a quiet worker never
// stalls the others). The rings bound the memory, as before.
//
// A packet a worker holds (TCP segments until a split message head is
// whole, IP fragments until their datagram is) leaves late with its old
// number. Each worker also publishes the number of the oldest packet it
// holds (its held mark, before it raises a floor past it), and the reader
// keeps every record from that number on in a reorder buffer until the held
// packet's records came: a min-heap by number, bounded in records (the
// buffer's mbufs are in the pool's plan) and in capture time (`window`: a
// record waits while the newest record the reader took is at most that
// much later). Past either bound the oldest records leave anyway; the held
// record then leaves after later ones, and the reader counts such records
// (out_of_order).
#pragma once

#include <rte_mbuf.h>
#include <rte_ring.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace amon::engine {

// One worker's floor for one output, on a cache line of its own.
struct alignas(64) OrderFloor {
  std::atomic<uint64_t> v{0};
  void raise(uint64_t s) {
    if (s > v.load(std::memory_order_relaxed)) v.store(s, std::memory_order_release);
  }
};

// One worker's held mark: the number of the oldest packet it holds
// (UINT64_MAX: none), and how many packets it has held so far (gen, stored
// first): a reader that sees the count change knows released records may be
// in the rings out of order, even for a packet held and released within one
// burst, whose mark it never saw. Each stored only when it changes, before
// the floors rise past what it says.
struct alignas(64) HeldMark {
  std::atomic<uint64_t> v{UINT64_MAX};
  std::atomic<uint64_t> gen{0};
  void set(uint64_t s, uint64_t g) {
    if (g != gen.load(std::memory_order_relaxed)) gen.store(g, std::memory_order_relaxed);
    if (s != v.load(std::memory_order_relaxed)) v.store(s, std::memory_order_release);
  }
  void lower(uint64_t s) {
    if (s < v.load(std::memory_order_relaxed)) v.store(s, std::memory_order_release);
  }
};

// The reorder buffer's bounds, per output.
struct ReorderLimits {
  uint32_t records = 4096;  // 0: no reorder buffer (held records leave when released)
  uint64_t window_ns = 10000000000ULL;
};

class OutQueue {
 public:
  // Rings named from `name`; `per_ring` slots each (one ring of it for one
  // worker, a ring per worker of it divided among them otherwise).
  OutQueue(const std::string& name, unsigned per_ring, unsigned nworkers, const ReorderLimits& lim = {});
  // Frees what is left and the rings: before rte_eal_cleanup.
  ~OutQueue();
  OutQueue(const OutQueue&) = delete;
  OutQueue& operator=(const OutQueue&) = delete;

  bool ordered() const { return rings_.size() > 1; }
  bool has_buffer() const { return lim_.records != 0; }
  // The ring worker `w` enqueues to (single producer when ordered, several
  // otherwise).
  rte_ring* ring(unsigned w) const { return rings_[ordered() ? w : 0]; }
  unsigned capacity() const { return rte_ring_get_capacity(rings_[0]); }
  // Where each worker's floor for this output lives (set once the workers
  // exist; until then nothing is enqueued).
  void set_floor(unsigned w, const OrderFloor* f) { floors_[w] = f; }
  void set_held(unsigned w, const HeldMark* h) { held_[w] = h; }
  // The newest number given out: a record carrying a larger one was made
  // by a path that did not copy it and leaves at once rather than wait.
  void set_newest(const std::atomic<uint64_t>* n) { newest_ = n; }

  // Up to `max` records in input order (the reader's side; one reader).
  unsigned dequeue(rte_mbuf** out, unsigned max);
  // Records this reader handed out after one of a later input packet (a
  // record released late by a worker that held its packet, past the reorder
  // buffer's bounds); any thread.
  uint64_t out_of_order() const { return back_.load(std::memory_order_relaxed); }
  // The most records the reorder buffer held at once; any thread.
  uint64_t reorder_peak() const { return peak_.load(std::memory_order_relaxed); }
  // Nothing in the rings (the reader's own look-ahead is not counted; it
  // leaves once the workers are idle or gone).
  bool rings_empty() const;
  // Nothing in the rings nor in the reader's look-ahead (the reader's side).
  bool drained() const;

 private:
  void discard();
  void note_order(rte_mbuf* const* out, unsigned n);
  struct Head {
    std::vector<rte_mbuf*> buf;
    std::vector<uint64_t> key;
    unsigned pos = 0, n = 0;
  };
  bool refill(unsigned w);
  // The worker whose next record is the earliest (rings_.size(): none).
  unsigned smallest_head();
  // The next record in input order up to `bound` from the workers' heads.
  bool next(uint64_t bound, rte_mbuf*& m, uint64_t& key);
  struct Pending {
    uint64_t key, order, ts;
    rte_mbuf* m;
    // The heap's top is the smallest key, equal keys in arrival order.
    bool operator<(const Pending& o) const { return key != o.key ? key > o.key : order > o.order; }
  };
  void push(rte_mbuf* m, uint64_t key, uint64_t bound);
  rte_mbuf* pop();
  std::vector<rte_ring*> rings_;
  std::vector<const OrderFloor*> floors_;
  std::vector<const HeldMark*> held_;
  ReorderLimits lim_;
  std::vector<Pending> pend_;  // the reorder buffer (a heap)
  uint64_t pushed_ = 0, pend_newest_ts_ = 0;
  // Records go through the buffer from a held mark or a mark change seen
  // until nothing is held, waiting or in the rings.
  bool sorting_ = false;
  uint64_t gen_ = 0;
  std::atomic<uint64_t> peak_{0};
  std::vector<Head> heads_;
  const std::atomic<uint64_t>* newest_ = nullptr;
  uint64_t high_ = 0;  // the largest number handed out so far
  std::atomic<uint64_t> back_{0};
};

}  // namespace amon::engine
