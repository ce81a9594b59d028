// The mbuf pool and the ethdev ports: set-up, the main lcore's dispatch of
// what it reads to the workers, and its transmission on port outputs.
#include "engine_parts.h"

#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_memzone.h>
#include <rte_mempool.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

namespace amon::engine {

// Returns how many packets left the output rings.
unsigned drain_outputs(Engine& E) {
  rte_mbuf* pkts[kBurst];
  unsigned total = 0;
  for (auto& o : E.outputs) {
    if (o.file) continue;  // its own thread writes it
    unsigned n;
    while ((n = o.q->dequeue(pkts, kBurst)) > 0) {
      total += n;
      for (unsigned i = 0; i < n; ++i) o.tx_truncated += pkts[i]->pkt_len > o.tx_cap;
      uint16_t sent = 0;
      // Retry a little: a vdev like net_ring may be momentarily full.
      for (int tries = 0; sent < n && tries < 1000; ++tries) sent += rte_eth_tx_burst(o.port, 0, pkts + sent, uint16_t(n - sent));
      o.written += sent;
      for (unsigned i = sent; i < n; ++i) rte_pktmbuf_free(pkts[i]);
      o.tx_dropped += n - sent;
    }
  }
  return total;
}

uint16_t attach_port(const std::string& spec) {
  std::string name = spec.substr(0, spec.find(','));
  uint16_t port;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) == 0) return port;
  throw std::runtime_error("port '" + name + "' not found (is it a valid vdev or PCI device?)");
}

void setup_port(Engine& E, uint16_t port, uint16_t nrxq, uint16_t ntxq, bool rss) {
  rte_eth_conf conf{};
  static uint8_t sym_key[40];
  // The repeated 0x6D5A key makes Toeplitz RSS symmetric: both directions of
  // a flow reach the same queue, hence the same worker.
  for (int i = 0; i < 40; i += 2) sym_key[i] = 0x6d, sym_key[i + 1] = 0x5a;
  rte_eth_dev_info info;
  if (rte_eth_dev_info_get(port, &info) != 0) throw std::runtime_error("cannot query port " + std::to_string(port));
  // An AF_XDP socket is one Rx and one Tx ring: net_af_xdp refuses a port
  // configured with unpaired queues.
  const bool xdp = info.driver_name && std::strcmp(info.driver_name, "net_af_xdp") == 0;
  if (xdp) nrxq = ntxq = std::max(nrxq, ntxq);
  // An AF_XDP socket's receive ring as deep as the buffers its driver puts
  // on the fill ring (2,048): a burst the lcore is late for fills those
  // before the ring overflows.
  const uint16_t rx_desc = xdp ? std::max<uint16_t>(1024, info.default_rxportconf.ring_size) : 1024;
  if (rss) {
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_key = sym_key;
    conf.rx_adv_conf.rss_conf.rss_key_len = 40;
    conf.rx_adv_conf.rss_conf.rss_hf = (RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP) & info.flow_type_rss_offloads;
  }
  // Frames larger than one mbuf arrive and leave as chains, never cut:
  // scattered Rx, multi-segment Tx, and the largest frame the port allows.
  if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_SCATTER;
  if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  if (info.max_rx_pktlen > RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN)
    conf.rxmode.mtu = std::min<uint32_t>(info.max_mtu, info.max_rx_pktlen - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN);
  // Never MBUF_FAST_FREE: outputs receive shared (refcounted) mbufs.
  int rc = rte_eth_dev_configure(port, nrxq, ntxq, &conf);
  if (rc != 0) throw std::runtime_error("port " + std::to_string(port) + ": configure failed: " + rte_strerror(-rc));
  int sock = rte_eth_dev_socket_id(port);
  for (uint16_t q = 0; q < nrxq; ++q)
    if ((rc = rte_eth_rx_queue_setup(port, q, rx_desc, sock, nullptr, E.pool)) != 0)
      throw std::runtime_error("port " + std::to_string(port) + ": rx queue setup failed: " + rte_strerror(-rc));
  for (uint16_t q = 0; q < ntxq; ++q)
    if ((rc = rte_eth_tx_queue_setup(port, q, 1024, sock, nullptr)) != 0)
      throw std::runtime_error("port " + std::to_string(port) + ": tx queue setup failed: " + rte_strerror(-rc));
  if ((rc = rte_eth_dev_start(port)) != 0)
    throw std::runtime_error("port " + std::to_string(port) + ": start failed: " + rte_strerror(-rc));
  rte_eth_promiscuous_enable(port);
}

// Hands packets read on the main lcore to workers by symmetric flow hash.
// With more than one worker each packet is decoded here just to hash it
// (the worker decodes it again). A live input drops the packet when its
// worker's ring is full (counted); a capture file or a file-backed vdev
// (`wait`) waits instead, sending on port outputs meanwhile.
// Where a program needs to know who initiates flows, the dispatcher learns
// it here, where a host's flows meet in input order whichever workers they
// go to, and writes it on the packet (initiators.h); one worker learns it
// itself over the same order.
void dispatch(Engine& E, rte_mbuf** pkts, unsigned n, bool wait) {
  const unsigned nw = unsigned(E.workers.size());
  const bool learn = nw > 1 && E.learn_initiators;
  for (unsigned i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    unsigned wi = 0;
    uint8_t initiating = 0;
    if (nw > 1) {
      Decoded d;
      const uint8_t* data = rte_pktmbuf_mtod(m, const uint8_t*);
      // The first segment holds every header we hash on.
      decode(data, m->data_len, mbuf_wire_len(m), d);
      wi = symmetric_flow_hash(data, d) % nw;
      if (learn) initiating = E.initiators->observe(data, m->data_len, d);
    }
    // Published before the enqueue: a worker that finds its ring empty
    // after reading it has had every earlier packet meant for it, and a
    // reader never sees a record with a number not yet given (ordered.h).
    // One worker needs no merge, but the number still tells its writers
    // which records its held packets made leave late.
    if (learn) mbuf_set_seq(m, E.next_seq, initiating);
    else mbuf_set_seq(m, E.next_seq);
    E.dispatched_seq.store(E.next_seq++, std::memory_order_release);
    Worker& w = *E.workers[wi];
    if (wait) {
      Idle idle(true);
      while (rte_ring_sp_enqueue(w.in, m) != 0)
        if (!drain_outputs(E)) idle.wait();
    } else if (rte_ring_sp_enqueue(w.in, m) != 0) {
      rte_pktmbuf_free(m);
      ++E.rx_dispatch_drops;
      continue;
    }
    ++w.dispatched;
  }
}

void note_initiators(Engine& E) {
  E.learn_initiators = false;
  for (const auto& p : E.programs) E.learn_initiators = E.learn_initiators || p->learns_initiators();
  if (E.learn_initiators && !E.initiators) E.initiators = std::make_unique<InitiatorLog>();
}

uint64_t pcap_bytes_read(const Engine& E) {
  uint64_t b = 0;
  for (const auto& i : E.inputs)
    if (i.pcap) b += i.pcap->bytes_read();
  return b;
}

namespace {

bool has_af_xdp_port() {
  uint16_t port;
  RTE_ETH_FOREACH_DEV(port) {
    rte_eth_dev_info info;
    if (rte_eth_dev_info_get(port, &info) == 0 && info.driver_name &&
        std::strcmp(info.driver_name, "net_af_xdp") == 0)
      return true;
  }
  return false;
}

// The pool of a run with a net_af_xdp port. DPDK 22.11's driver registers
// the pool's memory as the socket's UMEM, but takes its extent to be the
// first memory chunk's page plus pool size times object size: it assumes
// mbufs packed back to back. The default pool keeps each mbuf inside one
// page (one 2.3 KiB mbuf per 4 KiB page without huge pages), so about 40 %
// of the mbufs lie past the UMEM's end. The kernel drops such a buffer from
// the fill ring without a word: every one the driver hands it is lost, and
// the port stops receiving once the pool has drained that way (15,391
// frames, then every frame missed). Here each object is exactly one page,
// from a page-aligned zone in one piece: every mbuf is inside the UMEM, and
// none crosses a page (a zero-copy driver refuses a buffer that spans two
// pages not contiguous in DMA). The data room grows to what the page
// leaves (3,904 bytes); the memory is what the default pool commits.
rte_mempool* create_xdp_pool(const Engine& E, int socket) {
  const size_t page = size_t(getpagesize());  // what the driver aligns the UMEM to
  const unsigned flags = RTE_MEMPOOL_F_NO_SPREAD;  // the spread would pad the object past the page
  rte_mempool_objsz sz{};
  rte_mempool_calc_obj_size(sizeof(rte_mbuf), flags, &sz);
  const uint32_t elt = uint32_t(page - sz.header_size);
  if (rte_mempool_calc_obj_size(elt, flags, nullptr) != page) {
    rte_errno = EINVAL;
    return nullptr;
  }
  rte_mempool* mp = rte_mempool_create_empty("amon_pool", E.sizes.mbufs, elt, E.sizes.mbuf_cache,
                                             sizeof(rte_pktmbuf_pool_private), socket, flags);
  if (!mp) return nullptr;
  const rte_memzone* mz = nullptr;
  auto fail = [&](int err) -> rte_mempool* {
    const bool zone_held = mp->nb_mem_chunks > 0;  // then the pool frees it
    rte_mempool_free(mp);
    if (mz && !zone_held) rte_memzone_free(mz);
    rte_errno = err;
    return nullptr;
  };
  if (rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr) != 0) return fail(EINVAL);
  rte_pktmbuf_pool_private priv{};
  priv.mbuf_data_room_size = uint16_t(elt - sizeof(rte_mbuf));
  rte_pktmbuf_pool_init(mp, &priv);
  mz = rte_memzone_reserve_aligned("amon_pool_xdp", size_t(E.sizes.mbufs) * page, socket, 0, page);
  if (!mz) {
    fail(ENOMEM);
    throw std::runtime_error("mbuf pool: net_af_xdp needs it in one piece, and EAL has no free " +
                             std::to_string((size_t(E.sizes.mbufs) * page) >> 20) + " MiB zone (" +
                             std::to_string(E.sizes.mbufs) + " mbufs of one page; see `mbufs` and EAL's -m)");
  }
  auto free_zone = [](rte_mempool_memhdr*, void* opaque) { rte_memzone_free(static_cast<const rte_memzone*>(opaque)); };
  if (rte_mempool_populate_virt(mp, static_cast<char*>(mz->addr), mz->len, page, free_zone,
                                const_cast<rte_memzone*>(mz)) < 0 ||
      mp->populated_size != mp->size)
    return fail(ENOMEM);
  // What the driver will take for the UMEM must hold every object.
  const uintptr_t base = uintptr_t(STAILQ_FIRST(&mp->mem_list)->addr) & ~uintptr_t(page - 1);
  struct Span {
    uintptr_t lo, hi;
    bool ok = true;
  } span{base, uintptr_t(STAILQ_FIRST(&mp->mem_list)->addr) + size_t(mp->populated_size) * page};
  rte_mempool_obj_iter(
      mp,
      [](rte_mempool* m, void* arg, void* obj, unsigned) {
        auto& s = *static_cast<Span*>(arg);
        const uintptr_t start = uintptr_t(obj) - m->header_size;
        s.ok = s.ok && start >= s.lo && start + m->header_size + m->elt_size + m->trailer_size <= s.hi;
      },
      &span);
  if (!span.ok) return fail(EFAULT);
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  return mp;
}

}  // namespace

// rte_pktmbuf_pool_create, but offline (no device that DMAs) with mbufs
// packed back to back: on 4 KiB pages an IOVA-contiguous pool fits one
// 2.3 KiB mbuf per page, 1.7 times the memory to commit and fault in.
rte_mempool* create_pool(const Engine& E) {
  const int socket = int(rte_socket_id());
  if (!E.cfg.offline && has_af_xdp_port()) return create_xdp_pool(E, socket);
  if (!E.cfg.offline)
    return rte_pktmbuf_pool_create("amon_pool", E.sizes.mbufs, E.sizes.mbuf_cache, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                   socket);
  rte_mempool* mp = rte_mempool_create_empty("amon_pool", E.sizes.mbufs, sizeof(rte_mbuf) + RTE_MBUF_DEFAULT_BUF_SIZE,
                                             E.sizes.mbuf_cache, sizeof(rte_pktmbuf_pool_private), socket,
                                             RTE_MEMPOOL_F_NO_IOVA_CONTIG);
  if (!mp) return nullptr;
  rte_pktmbuf_pool_private priv{};
  priv.mbuf_data_room_size = RTE_MBUF_DEFAULT_BUF_SIZE;
  // An offline pool is a stack (kOfflinePoolOps), last freed first out.
  // The ring every other pool uses hands out the least recently freed
  // mbuf, so a run cycles its whole pool (30 MiB for four output files)
  // through the caches and each copy lands in memory the CPU has long
  // evicted; from a stack the reader and the worker mostly get back mbufs
  // a writer has just emptied. Lock-free because offline threads outnumber
  // a small machine's cores, and a thread preempted inside the spinlocked
  // stack's lock would stall the others. Without the handler linked, the
  // ring.
  if (rte_mempool_set_ops_byname(mp, kOfflinePoolOps, nullptr) != 0 &&
      rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr) != 0) {
    rte_mempool_free(mp);
    return nullptr;
  }
  rte_pktmbuf_pool_init(mp, &priv);
  if (rte_mempool_populate_default(mp) < 0) {
    rte_mempool_free(mp);
    rte_errno = ENOMEM;
    return nullptr;
  }
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  return mp;
}

// Pcap outputs have the link type of the inputs (ethdev ports are
// Ethernet); inputs of different link types cannot share one output file.
int output_link_type(const Engine& E) {
  int lt = -1;
  std::string first;
  for (const auto& i : E.inputs) {
    int t = i.pcap ? i.pcap->linktype() : DLT_EN10MB;
    if (lt >= 0 && t != lt)
      throw std::runtime_error(i.spec.describe() + " has link type " + link_type_name(t) + ", " + first +
                               " has " + link_type_name(lt) + ": one run writes one link type");
    if (lt < 0) lt = t, first = i.spec.describe();
  }
  return lt < 0 ? DLT_EN10MB : lt;
}

bool outputs_empty(Engine& E) {
  // A port's reader is this lcore: its reorder buffer counts too.
  for (auto& o : E.outputs)
    if (o.file ? !o.q->rings_empty() : !o.q->drained()) return false;
  return true;
}

// Configures each ethdev port once (a port may be both input and output):
// an input with symmetric RSS and a queue per worker is polled by the
// workers directly, an output with a Tx queue per worker is sent on by
// them; the others go through the main lcore.
void start_ports(Engine& E) {
  const EngineConfig& cfg = E.cfg;
  std::map<uint16_t, std::pair<uint16_t, uint16_t>> qs;  // port -> (rxq, txq)
  std::map<uint16_t, bool> rss;
  for (auto& i : E.inputs) {
    if (i.port == UINT16_MAX) continue;
    rte_eth_dev_info info;
    rte_eth_dev_info_get(i.port, &info);
    i.direct = cfg.workers > 1 && info.flow_type_rss_offloads != 0 && info.max_rx_queues >= cfg.workers;
    qs[i.port].first = i.direct ? uint16_t(cfg.workers) : 1;
    rss[i.port] = i.direct;
  }
  for (auto& o : E.outputs) {
    if (o.port == UINT16_MAX) continue;
    rte_eth_dev_info info;
    rte_eth_dev_info_get(o.port, &info);
    // A queue per worker lets workers transmit themselves; DPDK's pcap PMD
    // keeps one dumper per queue, so it writes through the main lcore.
    o.direct_tx = !cfg.offline && info.max_tx_queues >= cfg.workers && o.spec.spec.rfind("net_pcap", 0) != 0;
    qs[o.port].second = std::max<uint16_t>(qs[o.port].second, o.direct_tx ? uint16_t(cfg.workers) : 1);
  }
  for (auto& [port, q] : qs) {
    const std::set<int> before = xdp_sockets();
    setup_port(E, port, q.first, q.second, rss[port]);
    claim_xdp_sockets(E, port, before);
  }
}

}  // namespace amon::engine
