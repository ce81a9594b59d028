#include "worker_path.h"

#include <cstring>

#include "mbuf_meta.h"
#include "pcap_port.h"

namespace amon {

WorkerPath::WorkerPath(const std::vector<std::unique_ptr<Program>>& programs, rte_mempool* pool,
                       std::unique_ptr<FlowTable> flows)
    : pool_(pool), flows_(std::move(flows)) {
  for (auto& p : programs) {
    progs_.push_back(p->instantiate());
    identity_.push_back(p->identity());
    (p->identity() ? sharers_ : modifiers_)++;
    counters_.emplace_back();
    counters_.back().rule_hits.resize(p->rule_count() + 1);
    if (p->wants_l7() && !l7_) l7_ = std::make_unique<L7Parse>();
    wants_flows_ = wants_flows_ || p->wants_flows();
    if (p->protects_dns()) l7_->probe_dns = true;
  }
}

void WorkerPath::process(rte_mbuf* m, Sink sink, void* ctx) {
  const uint32_t cap0 = m->pkt_len;
  const uint32_t wire0 = mbuf_wire_len(m);
  const bool linear = m->nb_segs == 1;
  const uint8_t* data;
  if (linear) {
    data = rte_pktmbuf_mtod(m, const uint8_t*);
  } else {
    // 64 bytes of slack: Hyperscan's AVX-512 matcher may read past the end
    // of what it scans (vectorscan#322); mbufs have it, this buffer too.
    if (scratch_.size() < cap0 + 64) scratch_.resize(cap0 + 64);
    data = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, cap0, scratch_.data()));
  }
  Decoded d;
  decode(data, cap0, wire0, d);
  ++st_.decode_status[int(d.status) & 3];
  PacketMeta meta;
  meta.ts_ns = mbuf_ts(m);
  if (wants_flows_ && d.has_ip() && d.dst_off() + d.addr_len() <= cap0 && d.src_off() + d.addr_len() <= cap0)
    flows_->lookup(data, d, meta.ts_ns, meta);
  consumers(m, data, d, meta, sink, ctx);
}

void WorkerPath::process_burst(rte_mbuf** pkts, unsigned n, Sink sink, void* ctx) {
  constexpr unsigned B = FlowTable::kBurstMax;
  Decoded* ds = ds_;
  PacketMeta* metas = metas_;
  const uint8_t** datas = datas_;
  bool* want = want_;
  for (unsigned base = 0; base < n;) {
    unsigned k = 0;
    // Chained frames take the single-packet path (they need the scratch
    // buffer); the burst stops before one so order is kept.
    while (base + k < n && k < B && pkts[base + k]->nb_segs == 1) {
      rte_mbuf* m = pkts[base + k];
      datas[k] = rte_pktmbuf_mtod(m, const uint8_t*);
      decode(datas[k], m->pkt_len, mbuf_wire_len(m), ds[k]);
      ++st_.decode_status[int(ds[k].status) & 3];
      metas[k] = PacketMeta{};
      metas[k].ts_ns = mbuf_ts(m);
      const Decoded& d = ds[k];
      want[k] = wants_flows_ && d.has_ip() && d.dst_off() + d.addr_len() <= m->pkt_len &&
                d.src_off() + d.addr_len() <= m->pkt_len;
      ++k;
    }
    if (k) {
      flows_->lookup_burst(datas, ds, want, k, metas);
      for (unsigned i = 0; i < k; ++i) consumers(pkts[base + i], datas[i], ds[i], metas[i], sink, ctx);
      base += k;
    }
    if (base < n && pkts[base]->nb_segs != 1) process(pkts[base++], sink, ctx);
  }
}

void WorkerPath::consumers(rte_mbuf* m, const uint8_t* data, const Decoded& d, PacketMeta& meta, Sink sink,
                           void* ctx) {
  const uint32_t cap0 = m->pkt_len;
  const uint32_t wire0 = mbuf_wire_len(m);
  const bool linear = m->nb_segs == 1;
  // The first fragment says whether the datagram is a tunnel; later
  // fragments (same flow entry: fragments key on addresses) inherit it.
  if (meta.flow && (d.flags & kFlagFragment) && (d.flags & kFlagTunnel)) meta.flow->frag_tunnel = 1;
  meta.orig = data;
  if (l7_) {
    l7_->reset(++packet_id_);
    analyze_l7(data, d, meta, *l7_);
  }

  const unsigned nc = unsigned(progs_.size());
  bool own_ref = true;  // our own reference to m is still held
  unsigned mod_seen = 0;
  for (unsigned i = 0; i < nc; ++i) {
    ConsumerCounters& c = counters_[i];
    ++c.in;
    if (identity_[i]) {
      // Every segment of a chain is shared, not only the head.
      rte_pktmbuf_refcnt_update(m, 1);
      ++c.shared;
      ++c.out;
      sink(ctx, i, m);
      continue;
    }
    ++mod_seen;
    uint32_t cap = cap0, wire = wire0;
    rte_mbuf* out = nullptr;
    Verdict v;
    if (linear) {
      // The last rewriting consumer may rewrite the original in place when no
      // consumer shares it: one copy fewer on the common single-consumer path.
      if (sharers_ == 0 && mod_seen == modifiers_) {
        out = m;
        own_ref = false;
      } else if (!(out = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX))) {
        ++st_.copy_failures;
        ++c.dropped;
        continue;
      }
      v = progs_[i]->process(rte_pktmbuf_mtod(out, uint8_t*), cap, wire, d, meta, c);
      if (v == Verdict::Forward && cap < cap0) rte_pktmbuf_trim(out, uint16_t(cap0 - cap));
    } else {
      // Chained (jumbo) frames are rewritten in a flat buffer, then re-chained.
      if (scratch2_.size() < cap0 + 64) scratch2_.resize(cap0 + 64);
      std::memcpy(scratch2_.data(), data, cap0);
      v = progs_[i]->process(scratch2_.data(), cap, wire, d, meta, c);
      if (v == Verdict::Forward) {
        if (!(out = mbuf_from_bytes(pool_, scratch2_.data(), cap))) {
          ++st_.copy_failures;
          ++c.dropped;
          continue;
        }
        mbuf_set_ts(out, meta.ts_ns);
      }
    }
    if (v != Verdict::Forward) {
      if (out) rte_pktmbuf_free(out);
      if (v == Verdict::Filtered) ++c.filtered;
      else ++c.dropped;
      continue;
    }
    mbuf_set_wire_len(out, wire);
    ++c.copied;
    ++c.out;
    sink(ctx, i, out);
  }
  if (own_ref) rte_pktmbuf_free(m);
}

}  // namespace amon
