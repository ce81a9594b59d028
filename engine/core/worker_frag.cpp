// The worker's side of IP fragments: the outermost IP layer's fragments
// are collected into whole datagrams (OuterFrags) so every consumer decides
// on ports, roles and fields once, then each consumer's rewrite is written
// back as the original fragments; a datagram that cannot be made whole
// leaves fragment by fragment, fail closed.
#include <cstring>

#include "bytes.h"
#include "mbuf_meta.h"
#include "pcap_port.h"
#include "worker_path.h"

namespace amon {
bool WorkerPath::outer_fragment(rte_mbuf* m, const uint8_t* data, const Decoded& d, uint64_t ts, Sink sink,
                                void* ctx) {
  // Datagrams past their deadline go before a newer fragment is added, as
  // held streams do: the output does not depend on how input was batched.
  if (!ofr_.empty() && ts > ofr_.next_deadline()) expire_outer(ts, sink, ctx);
  FragInfo fi;
  if (!outer_frag_info(data, d, fi)) return false;
  // Collected while some consumer rewrites: its ports, its flow's roles
  // and its fields are decided on the whole datagram.
  uint32_t idx = 0;
  const bool again = ofr_on_ && outer_again(m, data, fi, ts, sink, ctx);
  const OuterFrags::Add r = again ? OuterFrags::Add::Held : ofr_.add(m, fi, ofr_on_, ts, idx);
  if (r == OuterFrags::Add::NotOurs) return false;
  // A consumer that changes nothing gets the fragment now, in arrival
  // order, as it gets every other packet; the others get the datagram's
  // fragments once it is whole (or given up).
  if (sharers_)
    for (size_t i = 0; i < progs_.size(); ++i)
      if (identity_[i]) {
        ConsumerCounters& c = counters_[i];
        ++c.in;
        rte_pktmbuf_refcnt_update(m, 1);
        ++c.shared;
        ++c.out;
        sink(ctx, unsigned(i), m);
      }
  if (again) rte_pktmbuf_free(m);
  else if (r == OuterFrags::Add::Whole) outer_whole(idx, sink, ctx);
  else if (r == OuterFrags::Add::Failed) outer_failed(idx, sink, ctx);
  return true;
}

void WorkerPath::outer_whole(uint32_t idx, Sink sink, void* ctx) {
  OuterFrags::Datagram& g = ofr_.datagram(idx);
  const uint32_t hlen = OuterFrags::build(g, rb_);
  const uint32_t len = hlen + g.total;
  const uint8_t* data = rb_.data();
  Decoded d;
  decode(data, len, len, d);
  PacketMeta meta;
  meta.ts_ns = g.frags.back().ts;
  meta.whole_datagram = true;
  meta.initiating = stamped_initiating(g.frags.back().m);
  flow_of(data, d, len, meta);
  note_packet(data, d, meta);
  if (use_l7_ || !active_.empty()) {
    // As consumers_l7, but the datagram is never held: a header split
    // across it and other segments is not completed (fail closed), and a
    // stream held in its direction ends here.
    if (!active_.empty() && meta.flow && d.l4_proto == kProtoTcp && d.l4_hdr_len) {
      const int dir = meta.initiator_is_src ? 0 : 1;
      const StreamTracker mine(*meta.flow, dir), other(*meta.flow, dir ^ 1);
      if (mine.held()) release(uint16_t(mine.held() - 1), L7State::Incomplete, sink, ctx);
      if ((d.tcp_flags & kTcpRst) && other.held())
        release(uint16_t(other.held() - 1), L7State::Incomplete, sink, ctx);
    }
    if (l7_) {
      l7_->reset(++packet_id_);
      analyze_l7(data, d, meta, *l7_);
    }
  }
  const unsigned n = unsigned(g.frags.size());
  // Remembered until the datagram's deadline: a fragment sent again after
  // the whole was made (a retransmitted last fragment) leaves as its twin did.
  Recent& rc = recent_[recent_next_++ % kRecent];
  rc.g.key = g.key;
  rc.g.total = g.total;
  rc.until = g.deadline;
  rc.hlen = hlen;
  rc.orig.assign(rb_.begin(), rb_.begin() + len);
  rc.outs.resize(progs_.size());
  for (size_t i = 0; i < progs_.size(); ++i) {
    if (identity_[i]) continue;  // had each fragment as it came
    ConsumerCounters& c = counters_[i];
    Recent::Out& ro = rc.outs[i];
    c.in += n;
    if (follow_[i] >= 0) {
      // Its leader's rewrite (the same policy): its verdict and bytes, sent
      // as the same fragments.
      ro = rc.outs[unsigned(follow_[i])];
      if (ro.v != Verdict::Forward) {
        if (ro.dlen > g.total) c.dropped += n, ++c.err_drop;
        else count_verdict(c, ro.v, n);
        continue;
      }
      for (const auto& f : g.frags) refrag_out(unsigned(i), rc, f, sink, ctx);
      continue;
    }
    wb_.assign(rb_.begin(), rb_.begin() + len + 64);
    uint32_t cap = len, wire = len;
    mark_counts(unsigned(i));
    ro.v = progs_[i]->process(wb_.data(), cap, wire, d, meta, c);
    mirror_counts(unsigned(i));
    if (ro.v != Verdict::Forward) {
      ro.dlen = 0;  // what a follower tells a verdict from a datagram grown by its rewrite by
      count_verdict(c, ro.v, n);
      continue;
    }
    // The rewritten datagram's data: what its IP header says, within what is left.
    const uint8_t* ip = wb_.data() + g.key.l3_off;
    const uint32_t iph = hlen - g.key.l3_off;
    uint32_t said = g.key.version == 4 ? rd16(ip + 2) : rd16(ip + 4) + 40u;
    said = said > iph ? said - iph : 0;
    ro.dlen = std::min(wire > hlen ? wire - hlen : 0, said);
    // snap() keeps the lengths (wire) but ends the record early (cap): each
    // fragment keeps its lengths and loses the data past that point.
    ro.kept = cap > hlen ? cap - hlen : 0;
    if (ro.dlen > g.total) {  // a rewrite never lengthens a datagram; if one did, nothing of it leaves
      c.dropped += n;
      ++c.err_drop;
      ro.v = Verdict::Drop;
      continue;
    }
    ro.w.swap(wb_);  // kept for a fragment sent again; wb_ is refilled for the next consumer
    for (const auto& f : g.frags) refrag_out(unsigned(i), rc, f, sink, ctx);
  }
  for (const auto& f : g.frags) rte_pktmbuf_free(f.m);
  ofr_.release(idx);
}

void WorkerPath::refrag_out(unsigned i, const Recent& rc, const OuterFrags::Frag& f, Sink sink, void* ctx) {
  ConsumerCounters& c = counters_[i];
  const Recent::Out& ro = rc.outs[i];
  if (!OuterFrags::refragment(rc.g, f, ro.w.data(), rc.hlen, ro.dlen, fb_)) {
    ++c.dropped;
    ++ofr_.stats().cut;
    return;
  }
  const uint32_t full = uint32_t(fb_.size());
  uint32_t rec = full;
  if (ro.kept < ro.dlen) {
    const uint32_t ds = f.fi.data_start;
    rec = std::min(full, ds + (ro.kept > f.fi.off ? ro.kept - f.fi.off : 0));
  }
  rte_mbuf* out = mbuf_from_bytes(pool_, fb_.data(), rec);
  if (!out) {
    ++st_.copy_failures;
    ++c.dropped;
    return;
  }
  mbuf_copy_meta(out, f.m);  // the writer's per-packet fields (the original link header)
  mbuf_set_ts(out, f.ts);
  mbuf_set_wire_len(out, full);
  ++c.copied;
  ++c.out;
  sink(ctx, i, out);
}

bool WorkerPath::outer_again(rte_mbuf* m, const uint8_t* data, const FragInfo& fi, uint64_t ts, Sink sink,
                             void* ctx) {
  for (const Recent& rc : recent_) {
    if (rc.until < ts || rc.orig.empty() || !same_datagram(rc.g.key, fi)) continue;
    // Its bytes are the whole's at its place, and it ends where a fragment
    // of that datagram may end; anything else is another datagram's.
    if (fi.l3_off != rc.g.key.l3_off || fi.off + fi.len > rc.g.total || (!fi.more && fi.off + fi.len != rc.g.total) ||
        std::memcmp(data + fi.data_start, rc.orig.data() + rc.hlen + fi.off, fi.len))
      return false;
    ++ofr_.stats().fragments;
    const OuterFrags::Frag f{m, fi, ts};
    for (size_t i = 0; i < progs_.size(); ++i) {
      if (identity_[i]) continue;
      ConsumerCounters& c = counters_[i];
      ++c.in;
      if (rc.outs[i].v != Verdict::Forward) count_verdict(c, rc.outs[i].v, 1);
      else refrag_out(unsigned(i), rc, f, sink, ctx);
    }
    return true;
  }
  return false;
}

void WorkerPath::outer_failed(uint32_t idx, Sink sink, void* ctx) {
  // The slot is freed first: the fragments' own path may expire others.
  std::vector<rte_mbuf*> ms;
  for (const auto& f : ofr_.datagram(idx).frags) ms.push_back(f.m);
  ofr_.release(idx);
  for (rte_mbuf* m : ms) {
    replay_ = m;  // the consumers that change nothing had it already
    process(m, sink, ctx, false);
  }
  replay_ = nullptr;
}

void WorkerPath::expire_outer(uint64_t now_ns, Sink sink, void* ctx) {
  if (ofr_expiring_) return;
  ofr_expiring_ = true;
  std::vector<uint32_t> due;
  ofr_.expired(now_ns, due);
  for (uint32_t idx : due) {
    ofr_.timed_out();
    outer_failed(idx, sink, ctx);
  }
  ofr_expiring_ = false;
}

}  // namespace amon
