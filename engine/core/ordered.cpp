#include "ordered.h"

#include <rte_errno.h>
#include <rte_lcore.h>

#include <algorithm>
#include <bit>
#include <stdexcept>

#include "mbuf_meta.h"

namespace amon::engine {

namespace {
// Records the reader takes from a worker's ring at a time to compare heads.
constexpr unsigned kLookAhead = 32;
}  // namespace

OutQueue::OutQueue(const std::string& name, unsigned per_ring, unsigned nworkers) {
  const unsigned n = std::max(1u, nworkers);
  // A ring per worker shares the one ring's slots, but never fewer than a
  // few bursts, so one burst's output always fits.
  const unsigned size = n == 1 ? per_ring : std::max(128u, std::bit_ceil(per_ring / n));
  for (unsigned w = 0; w < n; ++w) {
    const std::string rn = n == 1 ? name : name + "_" + std::to_string(w);
    rte_ring* r = rte_ring_create(rn.c_str(), size, int(rte_socket_id()),
                                  n == 1 ? RING_F_SC_DEQ : RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!r) {
      for (auto* x : rings_) rte_ring_free(x);
      throw std::runtime_error("output ring: " + std::string(rte_strerror(rte_errno)));
    }
    rings_.push_back(r);
  }
  floors_.assign(n, nullptr);
  heads_.resize(n);
  if (n > 1)
    for (auto& h : heads_) h.buf.resize(kLookAhead), h.key.resize(kLookAhead);
}

OutQueue::~OutQueue() {
  discard();
  for (auto* r : rings_) rte_ring_free(r);
}

bool OutQueue::refill(unsigned w) {
  Head& h = heads_[w];
  if (h.pos < h.n) return true;
  h.pos = 0;
  h.n = rte_ring_sc_dequeue_burst(rings_[w], reinterpret_cast<void**>(h.buf.data()), kLookAhead, nullptr);
  if (!h.n) return false;
  // Read after the records: every number they carry was given out by then.
  const uint64_t newest = newest_ ? newest_->load(std::memory_order_acquire) : UINT64_MAX;
  for (unsigned i = 0; i < h.n; ++i) {
    const uint64_t s = mbuf_seq(h.buf[i]);
    h.key[i] = s > newest ? 0 : s;
  }
  return true;
}

// Counts the records that go back in input order. A number above the
// newest given out (a record made by a path that did not copy it) or 0 (a
// packet that never passed the dispatcher) says nothing and is skipped.
void OutQueue::note_order(rte_mbuf* const* out, unsigned n) {
  // Read after the records: every number they carry was given out by then.
  const uint64_t newest = newest_ ? newest_->load(std::memory_order_acquire) : UINT64_MAX;
  uint64_t back = 0;
  for (unsigned i = 0; i < n; ++i) {
    const uint64_t s = mbuf_seq(out[i]);
    if (s == 0 || s > newest) continue;
    if (s < high_) ++back;
    else high_ = s;
  }
  if (back) back_.store(back_.load(std::memory_order_relaxed) + back, std::memory_order_relaxed);
}

unsigned OutQueue::dequeue(rte_mbuf** out, unsigned max) {
  if (!ordered()) {
    const unsigned n = rte_ring_sc_dequeue_burst(rings_[0], reinterpret_cast<void**>(out), max, nullptr);
    note_order(out, n);
    return n;
  }
  // The floors first: whatever a worker enqueued below its floor was in its
  // ring before the floor was published, so the rings read next hold it.
  uint64_t bound = UINT64_MAX;
  for (auto* f : floors_) bound = std::min(bound, f ? f->v.load(std::memory_order_acquire) : 0);
  const unsigned nw = unsigned(rings_.size());
  unsigned k = 0;
  while (k < max) {
    unsigned best = nw;
    uint64_t best_seq = 0;
    for (unsigned w = 0; w < nw; ++w) {
      if (!refill(w)) continue;
      const uint64_t s = heads_[w].key[heads_[w].pos];
      if (best == nw || s < best_seq) best = w, best_seq = s;
    }
    if (best == nw || best_seq > bound) break;
    out[k++] = heads_[best].buf[heads_[best].pos++];
  }
  note_order(out, k);
  return k;
}

bool OutQueue::rings_empty() const {
  for (auto* r : rings_)
    if (!rte_ring_empty(r)) return false;
  return true;
}

bool OutQueue::drained() const {
  for (const auto& h : heads_)
    if (h.pos < h.n) return false;
  return rings_empty();
}

void OutQueue::discard() {
  for (auto& h : heads_) {
    for (unsigned i = h.pos; i < h.n; ++i) rte_pktmbuf_free(h.buf[i]);
    h.pos = h.n = 0;
  }
  rte_mbuf* m = nullptr;
  for (auto* r : rings_)
    while (rte_ring_dequeue(r, reinterpret_cast<void**>(&m)) == 0) rte_pktmbuf_free(m);
}

}  // namespace amon::engine
