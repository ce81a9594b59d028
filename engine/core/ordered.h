// An output's queue from the workers to whoever writes it (a file writer
// thread, or the main lcore for a port), in input order whatever the number
// of workers.
//
// With one worker it is one ring, as it always was. With several, each
// worker has a ring of its own, and the reader merges them by the input
// sequence number the dispatcher stamps on each packet (mbuf_meta.h),
// emitting a record only once no worker can still produce an earlier one:
// each worker publishes, per output, a floor below which it will enqueue
// nothing fresh (the first packet of its current burst, the packet it is
// waiting to enqueue, the last one of a finished burst; an idle worker the
// last packet dispatched, so a quiet worker never stalls the others). The
// rings bound the memory, as before. A record a worker releases late (held
// TCP segments, a datagram made whole) carries its old number, is below
// every floor and leaves at once, where one worker would also have written
// it; the reader counts such records (out_of_order), one worker or several.
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

class OutQueue {
 public:
  // Rings named from `name`; `per_ring` slots each (one ring of it for one
  // worker, a ring per worker of it divided among them otherwise).
  OutQueue(const std::string& name, unsigned per_ring, unsigned nworkers);
  // Frees what is left and the rings: before rte_eal_cleanup.
  ~OutQueue();
  OutQueue(const OutQueue&) = delete;
  OutQueue& operator=(const OutQueue&) = delete;

  bool ordered() const { return rings_.size() > 1; }
  // The ring worker `w` enqueues to (single producer when ordered, several
  // otherwise).
  rte_ring* ring(unsigned w) const { return rings_[ordered() ? w : 0]; }
  unsigned capacity() const { return rte_ring_get_capacity(rings_[0]); }
  // Where each worker's floor for this output lives (set once the workers
  // exist; until then nothing is enqueued).
  void set_floor(unsigned w, const OrderFloor* f) { floors_[w] = f; }
  // The newest number given out: a record carrying a larger one was made
  // by a path that did not copy it and leaves at once rather than wait.
  void set_newest(const std::atomic<uint64_t>* n) { newest_ = n; }

  // Up to `max` records in input order (the reader's side; one reader).
  unsigned dequeue(rte_mbuf** out, unsigned max);
  // Records this reader handed out after one of a later input packet (a
  // record released late by a worker that held its packet); any thread.
  uint64_t out_of_order() const { return back_.load(std::memory_order_relaxed); }
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
  std::vector<rte_ring*> rings_;
  std::vector<const OrderFloor*> floors_;
  std::vector<Head> heads_;
  const std::atomic<uint64_t>* newest_ = nullptr;
  uint64_t high_ = 0;  // the largest number handed out so far
  std::atomic<uint64_t> back_{0};
};

}  // namespace amon::engine
