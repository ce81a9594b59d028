// The worker lcores: each takes bursts from its ring (and its own RSS
// queues), runs them through its WorkerPath and enqueues to the outputs.
#include "engine_parts.h"

#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_malloc.h>

#include <stdexcept>

namespace amon::engine {

namespace {

// A worker about to wait on a full ring tells the reader that nothing fresh
// below this record will follow, so the reader can take what lies below it
// from every worker's ring (ordered.h); without it two workers could each
// wait for the other's ring to drain. What this burst held so far is not
// in the held mark yet: the mark goes down to the burst's start first (the
// reader then keeps the burst's records until the burst's end sets it).
void wait_floor(Worker& w, unsigned ci, const rte_mbuf* m) {
  if (!w.nfloors) return;
  if (w.marks) w.held_mark.lower(w.floors[ci].v.load(std::memory_order_relaxed));
  w.floors[ci].raise(mbuf_seq(m));
}

// After the held packets' records were enqueued: the oldest still held.
void publish_held(Worker& w) {
  if (w.marks) w.held_mark.set(w.path->oldest_held(), w.path->packets_held());
}

void enqueue_out(void* ctx, unsigned ci, rte_mbuf* m) {
  Worker& w = *static_cast<Worker*>(ctx);
  Output& o = w.eng->outputs[ci];
  if (o.direct_tx) {
    rte_eth_tx_buffer(o.port, uint16_t(w.id), w.txb[ci], m);
    return;
  }
  rte_ring* r = o.q->ring(w.id);
  if (w.eng->lossless_out) {
    // Offline never loses a packet: wait for the writer.
    if (rte_ring_mp_enqueue(r, m) == 0) return;
    wait_floor(w, ci, m);
    Idle idle(true);
    while (rte_ring_mp_enqueue(r, m) != 0) idle.wait();
    return;
  }
  if (rte_ring_mp_enqueue(r, m) != 0) {
    rte_pktmbuf_free(m);
    ++w.out_full[ci];
    auto& c = w.path->counters()[ci];
    ++c.dropped;
    --c.out;
  }
}

}  // namespace

// enqueue_out for a burst of one consumer (WorkerPath::SinkBurst): one ring
// enqueue for all of them where enqueue_out makes one per packet.
void enqueue_out_burst(void* ctx, unsigned ci, rte_mbuf** ms, unsigned n) {
  Worker& w = *static_cast<Worker*>(ctx);
  Output& o = w.eng->outputs[ci];
  if (o.direct_tx) {
    for (unsigned i = 0; i < n; ++i) rte_eth_tx_buffer(o.port, uint16_t(w.id), w.txb[ci], ms[i]);
    return;
  }
  rte_ring* r = o.q->ring(w.id);
  unsigned done = rte_ring_mp_enqueue_burst(r, reinterpret_cast<void**>(ms), n, nullptr);
  if (w.eng->lossless_out) {
    // Offline never loses a packet: wait for the writer.
    Idle idle(true);
    if (done < n) wait_floor(w, ci, ms[done]);
    while (done < n) {
      idle.wait();
      done += rte_ring_mp_enqueue_burst(r, reinterpret_cast<void**>(ms + done), n - done, nullptr);
    }
    return;
  }
  if (done < n) {
    const unsigned left = n - done;
    rte_pktmbuf_free_bulk(ms + done, left);
    w.out_full[ci] += left;
    auto& c = w.path->counters()[ci];
    c.dropped += left;
    c.out -= left;
  }
}

int worker_main(void* arg) {
  Worker& w = *static_cast<Worker*>(arg);
  Engine& E = *w.eng;
  rte_mbuf* pkts[kBurst];
  uint64_t last_expire = 0;
  uint64_t idle_since = 0;
  const uint64_t hold_tsc = E.cfg.hold.timeout_ns / 1000000ULL * (E.tsc_hz / 1000ULL) + 1;
  // A live port's quiet link has no packet time to expire holds by, so an
  // idle worker uses the wall clock. Offline (every input a capture file)
  // packet time and the end of input are the only clocks: a worker waiting
  // on the reader must not release holds, or the output would depend on
  // scheduling.
  bool wall_clock_holds = false;
  for (const auto& in : E.inputs) wall_clock_holds = wall_clock_holds || !in.pcap;
  auto flush_tx = [&] {
    for (size_t ci = 0; ci < w.txb.size(); ++ci)
      if (w.txb[ci]) rte_eth_tx_buffer_flush(E.outputs[ci].port, uint16_t(w.id), w.txb[ci]);
  };
  Idle idle(E.cfg.offline, E.cfg.idle, E.tsc_hz);
  if (E.qs) {
    rte_rcu_qsbr_thread_register(E.qs, w.id);
    rte_rcu_qsbr_thread_online(E.qs, w.id);
  }
  for (;;) {
    // Between bursts: no packet is half-way through a generation. One
    // store for the report and one load for a new generation per turn,
    // nothing per packet.
    if (E.qs) rte_rcu_qsbr_quiescent(E.qs, w.id);
    if (ProgramSet* next = w.next.load(std::memory_order_acquire)) {
      w.path->adopt(*next);
      w.next.store(nullptr, std::memory_order_release);
    }
    unsigned n = rte_ring_sc_dequeue_burst(w.in, reinterpret_cast<void**>(pkts), kBurst, nullptr);
    const bool from_ring = n != 0;
    for (auto [port, q] : w.rx_queues) {
      if (n || E.stop_workers.load(std::memory_order_relaxed) || g_signal.load(std::memory_order_relaxed)) break;
      n = rte_eth_rx_burst(port, q, pkts, kBurst);
      if (!n) continue;
      stamp_rx(E, pkts, n);
      // What a worker takes from its own queue never passed the dispatcher:
      // it goes after whatever the dispatcher had handed out.
      const uint64_t after = E.dispatched_seq.load(std::memory_order_acquire);
      for (unsigned i = 0; i < n; ++i) mbuf_set_seq(pkts[i], after);
      w.last_rx_tsc.store(rte_rdtsc(), std::memory_order_relaxed);
      w.rx_direct.fetch_add(n, std::memory_order_relaxed);
    }
    if (n == 0) {
      // An empty ring after the last number given was read: every earlier
      // packet that was ours has been processed, and that one, if ours,
      // is yet to come.
      if (w.nfloors) {
        const uint64_t d = E.dispatched_seq.load(std::memory_order_acquire);
        if (rte_ring_empty(w.in)) w.raise_floors(d);
      }
      // Held segments leave at the end of input, or when nothing came for a
      // hold timeout (a quiet link has no packet time to expire them by).
      if (w.path->held_segments()) {
        uint64_t now = rte_rdtsc();
        if (!idle_since) idle_since = now;
        if (E.flush_holds.load(std::memory_order_acquire) || g_signal.load(std::memory_order_relaxed) ||
            (wall_clock_holds && now - idle_since > hold_tsc)) {
          w.path->flush_held(enqueue_out, &w);
          publish_held(w);
          w.held.store(0, std::memory_order_release);
        }
      }
      flush_tx();
      if (E.stop_workers.load(std::memory_order_acquire) && rte_ring_empty(w.in)) {
        w.path->flush_held(enqueue_out, &w);
        publish_held(w);
        flush_tx();
        break;
      }
      idle.wait();
      continue;
    }
    idle.reset();
    for (unsigned i = 0; i < n; ++i) rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void*));
    idle_since = 0;
    uint64_t burst_ts = mbuf_ts(pkts[n - 1]);  // before the burst: held mbufs stay, the others may be gone
    uint64_t burst_last = 0;
    if (w.nfloors) {
      w.raise_floors(mbuf_seq(pkts[0]));
      burst_last = mbuf_seq(pkts[n - 1]);
    }
    w.path->process_burst(pkts, n, enqueue_out, &w);
    // The mark before the floor passes what this burst held.
    publish_held(w);
    if (w.nfloors) w.raise_floors(burst_last);
    w.held.store(w.path->held_segments(), std::memory_order_release);
    w.last_ts.store(burst_ts, std::memory_order_relaxed);
    for (size_t ci = 0; ci < w.txb.size(); ++ci)
      if (w.txb[ci]) rte_eth_tx_buffer_flush(E.outputs[ci].port, uint16_t(w.id), w.txb[ci]);
    // Only ring packets count toward "caught up": the main lcore never saw
    // what a worker took from its own queue.
    if (from_ring) w.processed.fetch_add(n, std::memory_order_release);
    // Idle flows are reclaimed a little at a time, off no particular packet.
    if (++last_expire % 64 == 0) w.path->flows().expire(burst_ts, 64);
  }
  // Nothing more comes from this worker.
  if (w.marks) w.held_mark.set(UINT64_MAX, w.path->packets_held());
  w.raise_floors(UINT64_MAX);
  if (E.qs) {
    rte_rcu_qsbr_thread_offline(E.qs, w.id);
    rte_rcu_qsbr_thread_unregister(E.qs, w.id);
  }
  return 0;
}

bool all_workers_caught_up(Engine& E) {
  for (auto& w : E.workers)
    if (w->processed.load(std::memory_order_acquire) != w->dispatched) return false;
  return true;
}

// One worker per lcore after the main one: its ring from the main lcore,
// its WorkerPath (flow table, programs), its own RSS queues and Tx
// buffers; and the quiescent-state variable reloads wait on.
void start_workers(Engine& E) {
  const EngineConfig& cfg = E.cfg;
  unsigned lcore = rte_get_next_lcore(-1, 1, 0);
  bool any_direct = false;
  for (auto& i : E.inputs) any_direct = any_direct || i.direct;
  for (unsigned wi = 0; wi < cfg.workers; ++wi) {
    auto w = std::make_unique<Worker>();
    w->eng = &E;
    w->id = wi;
    w->lcore = lcore;
    lcore = rte_get_next_lcore(lcore, 1, 0);
    w->in = rte_ring_create(("in_" + std::to_string(wi)).c_str(), E.sizes.ring, int(rte_socket_id()),
                            RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!w->in) throw std::runtime_error("worker ring: " + std::string(rte_strerror(rte_errno)));
    w->path = std::make_unique<WorkerPath>(
        E.programs, E.pool,
        std::make_unique<FlowTable>("flows_" + std::to_string(wi), E.sizes.flows_per_worker, cfg.flow_timeouts,
                                    int(rte_socket_id()), /*commit=*/!cfg.offline),
        cfg.hold);
    w->path->set_burst_sink(enqueue_out_burst);
    // Workers polling their own queues see their share only: one log of
    // initiators for all of them and the dispatcher (initiators.h). Made
    // here whatever the policies, so a reload that starts needing it finds
    // the workers already sharing it.
    if (any_direct) {
      if (!E.initiators) E.initiators = std::make_unique<InitiatorLog>();
      w->path->share_initiators(E.initiators.get());
    }
    for (auto& i : E.inputs)
      if (i.direct) w->rx_queues.emplace_back(i.port, uint16_t(wi));
    // Floors for every output the workers enqueue to (the merge of several
    // workers, and the reorder buffer of held packets with one); held marks
    // unless some worker polls its own queues (then there is no common
    // order to restore).
    for (auto& o : E.outputs)
      if (o.q) o.q->set_newest(&E.dispatched_seq);
    w->nfloors = unsigned(E.outputs.size());
    w->floors = std::make_unique<OrderFloor[]>(E.outputs.size());
    w->marks = !any_direct;
    for (size_t ci = 0; ci < E.outputs.size(); ++ci) {
      E.outputs[ci].q->set_floor(wi, &w->floors[ci]);
      if (w->marks) E.outputs[ci].q->set_held(wi, &w->held_mark);
    }
    w->txb.assign(E.outputs.size(), nullptr);
    w->tx_unsent.assign(E.outputs.size(), 0);
    w->out_full.assign(E.outputs.size(), 0);
    for (size_t ci = 0; ci < E.outputs.size(); ++ci) {
      if (!E.outputs[ci].direct_tx) continue;
      auto* b = static_cast<rte_eth_dev_tx_buffer*>(
          rte_zmalloc_socket("txb", RTE_ETH_TX_BUFFER_SIZE(kBurst), 0, int(rte_socket_id())));
      if (!b || rte_eth_tx_buffer_init(b, kBurst) != 0) throw std::runtime_error("tx buffer allocation failed");
      // Unsent packets are freed and counted (the default callback frees only).
      rte_eth_tx_buffer_set_err_callback(b, rte_eth_tx_buffer_count_callback, &w->tx_unsent[ci]);
      w->txb[ci] = b;
    }
    E.workers.push_back(std::move(w));
  }
  size_t sz = rte_rcu_qsbr_get_memsize(cfg.workers);
  E.qs = static_cast<rte_rcu_qsbr*>(rte_zmalloc("amon_qsbr", sz, RTE_CACHE_LINE_SIZE));
  if (!E.qs || rte_rcu_qsbr_init(E.qs, cfg.workers) != 0) throw std::runtime_error("rte_rcu_qsbr_init failed");
}

}  // namespace amon::engine
