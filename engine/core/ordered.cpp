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

OutQueue::OutQueue(const std::string& name, unsigned per_ring, unsigned nworkers, const ReorderLimits& lim)
    : lim_(lim) {
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
  held_.assign(n, nullptr);
  heads_.resize(n);
  for (auto& h : heads_) h.buf.resize(kLookAhead), h.key.resize(kLookAhead);
  pend_.reserve(lim_.records);
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

unsigned OutQueue::smallest_head() {
  const unsigned nw = unsigned(rings_.size());
  unsigned best = nw;
  uint64_t best_seq = 0;
  for (unsigned w = 0; w < nw; ++w) {
    if (!refill(w)) continue;
    const uint64_t s = heads_[w].key[heads_[w].pos];
    if (best == nw || s < best_seq) best = w, best_seq = s;
  }
  return best;
}

bool OutQueue::next(uint64_t bound, rte_mbuf*& m, uint64_t& key) {
  const unsigned best = smallest_head();
  if (best == rings_.size() || heads_[best].key[heads_[best].pos] > bound) return false;
  key = heads_[best].key[heads_[best].pos];
  m = heads_[best].buf[heads_[best].pos++];
  return true;
}

void OutQueue::push(rte_mbuf* m, uint64_t key, uint64_t bound) {
  const uint64_t ts = mbuf_ts(m);
  // The window counts from records up to the floors only: a worker ahead
  // of the others (past a jump in the capture's clock, say) says nothing
  // of how long the held records have been waiting in input order.
  if (pend_.empty()) pend_newest_ts_ = 0;
  if (key <= bound && ts > pend_newest_ts_) pend_newest_ts_ = ts;
  pend_.push_back({key, pushed_++, ts, m});
  std::push_heap(pend_.begin(), pend_.end());
  if (pend_.size() > peak_.load(std::memory_order_relaxed)) peak_.store(pend_.size(), std::memory_order_relaxed);
}

rte_mbuf* OutQueue::pop() {
  std::pop_heap(pend_.begin(), pend_.end());
  rte_mbuf* m = pend_.back().m;
  pend_.pop_back();
  return m;
}

unsigned OutQueue::dequeue(rte_mbuf** out, unsigned max) {
  // The floors first: whatever a worker enqueued below its floor was in its
  // ring before the floor was published, so the rings read next hold it.
  // Then the held marks: a worker sets its mark before it raises a floor
  // past the packet, and raises the mark only after the held packet's
  // records were enqueued.
  uint64_t bound = UINT64_MAX, hold = UINT64_MAX, gen = 0;
  for (auto* f : floors_) bound = std::min(bound, f ? f->v.load(std::memory_order_acquire) : 0);
  for (auto* h : held_)
    if (h) {
      hold = std::min(hold, h->v.load(std::memory_order_acquire));
      gen += h->gen.load(std::memory_order_relaxed);
    }
  if (has_buffer() && (hold != UINT64_MAX || gen != gen_)) sorting_ = true, gen_ = gen;
  unsigned k = 0;
  rte_mbuf* m;
  uint64_t key;
  if (!sorting_) {
    // Nothing held nor released since the rings were last empty: each
    // ring is in input order, and records leave as merged.
    while (k < max && next(bound, m, key)) out[k++] = m;
  } else {
    // A released record may sit in a worker's ring behind fresher ones:
    // every record the rings hold goes through the buffer (it must leave
    // them anyway, or a worker waiting on a full ring could never release
    // what it holds). One leaves once no worker can produce an earlier one:
    // up to the floors and below every held mark, or past a bound (the
    // buffer full, room kept for a burst's worth coming next turn; a record
    // `window` later in capture time taken), never past the floors. Records
    // up to the floors are taken past the bound (to twice it), as they may
    // leave at once.
    // The rings are merged as they are read (the smallest head first): a
    // full buffer that took one ring's records while another's earlier ones
    // waited would let those leave behind later ones, every flow's, not
    // only the held packet's.
    for (unsigned w; (w = smallest_head()) < rings_.size();) {
      Head& h = heads_[w];
      if (pend_.size() >= lim_.records && (h.key[h.pos] > bound || pend_.size() >= 2 * lim_.records)) break;
      push(h.buf[h.pos], h.key[h.pos], bound);
      ++h.pos;
    }
    while (k < max && !pend_.empty()) {
      const Pending& t = pend_.front();
      if (t.key > bound) break;
      if (t.key >= hold && pend_.size() + kLookAhead <= lim_.records && t.ts + lim_.window_ns >= pend_newest_ts_)
        break;
      out[k++] = pop();
    }
    // What a release put in the rings has all left, in order.
    if (hold == UINT64_MAX && drained()) sorting_ = false;
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
  if (!pend_.empty()) return false;
  for (const auto& h : heads_)
    if (h.pos < h.n) return false;
  return rings_empty();
}

void OutQueue::discard() {
  for (auto& p : pend_) rte_pktmbuf_free(p.m);
  pend_.clear();
  for (auto& h : heads_) {
    for (unsigned i = h.pos; i < h.n; ++i) rte_pktmbuf_free(h.buf[i]);
    h.pos = h.n = 0;
  }
  rte_mbuf* m = nullptr;
  for (auto* r : rings_)
    while (rte_ring_dequeue(r, reinterpret_cast<void**>(&m)) == 0) rte_pktmbuf_free(m);
}

}  // namespace amon::engine
