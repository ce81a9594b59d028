#include "worker_path.h"

#include <algorithm>
#include <cstring>

#include "mbuf_meta.h"
#include "pcap_port.h"
#include "stream.h"
#include "bytes.h"
#include "control.h"
#include "echo.h"
#include "actions_rt.h"

namespace amon {

WorkerPath::WorkerPath(const std::vector<std::unique_ptr<Program>>& programs, rte_mempool* pool,
                       std::unique_ptr<FlowTable> flows, const HoldLimits& hold)
    : hl_(hold), pool_(pool), flows_(std::move(flows)) {
  for (auto& p : programs) {
    progs_.push_back(p->instantiate());
    counters_.emplace_back();
    counters_.back().rule_hits.resize(p->rule_count() + 1);
  }
  configure();
}

// What the consumers' programs decide about the path: who shares and who
// copies, whether flows, the application parse and stream holding are
// needed. Runs at construction and at each reload (adopt).
void WorkerPath::configure() {
  identity_.clear();
  sharers_ = modifiers_ = 0;
  hold_apps_ = 0;
  use_l7_ = wants_flows_ = learn_init_ = false;
  uint32_t probe_apps = 0;
  follow_.assign(progs_.size(), -1);
  followers_.assign(progs_.size(), {});
  std::vector<std::string> digests;
  for (auto& inst : progs_) {
    const Program& p = inst->program();
    identity_.push_back(p.identity());
    const size_t i = identity_.size() - 1;
    // A consumer with z-anonymity rules follows too: the store counts
    // distinct users, so the same policy observing the same fields of the
    // same packet again changes no count and no decision (doc/zanon.md,
    // "Consumers count together"); the leader's observations are the ones
    // its followers would make, and its output what each writes alone.
    if (!p.identity()) {
      digests.push_back(policy_digest(p.policy()));
      for (size_t j = 0; j < i; ++j)
        if (!identity_[j] && follow_[j] < 0 && digests[j] == digests[i]) {
          follow_[i] = int(j);
          followers_[j].push_back(unsigned(i));
          break;
        }
    } else {
      digests.emplace_back();
    }
    if (follow_[i] >= 0) continue;
    if (!p.identity()) last_lead_ = unsigned(i);
    (p.identity() ? sharers_ : modifiers_)++;
    use_l7_ = use_l7_ || p.wants_l7();
    wants_flows_ = wants_flows_ || p.wants_flows();
    learn_init_ = learn_init_ || p.learns_initiators();
    // Protocol plugins' content probes run for the applications protected.
    probe_apps |= p.protected_apps() & ~((1u << kFirstPluginApp) - 1);
    hold_apps_ |= p.held_apps();
  }
  // The consumers' tables of values found again share one database per
  // worker (a reload's instances are new: a new group).
  std::vector<EchoScan*> echo;
  for (auto& inst : progs_) echo.push_back(inst->echo_scan());
  EchoScan::share(echo);
  std::vector<rt::CryptoPan*> cpan;
  for (auto& inst : progs_) inst->cryptopan_actions(cpan);
  rt::CryptoPan::share(cpan);
  // Kept once made: a reload between bursts may go back to one consumer.
  if (modifiers_ > 1 && !text_memos_) text_memos_.reset(new AddrTextMemo[FlowTable::kBurstMax]);
  // Once made, the parse state stays (it numbers the worker's flows for plugins,
  // and held streams are parsed with it), even when a reload stops using it.
  if (use_l7_ && !l7_) l7_ = std::make_unique<L7Parse>();
  if (l7_) l7_->probe_apps = probe_apps;
  single_modifier_ = progs_.size() == 1 && modifiers_ == 1;
  // A consumer that forwards every packet as it came needs no datagram whole.
  ofr_on_ = modifiers_ > 0;
  burst_route_ = single_modifier_ && !use_l7_;
  burst_multi_ = progs_.size() > 1 && !use_l7_;
  for (auto& inst : progs_) burst_multi_ = burst_multi_ && inst->header_fast_path();
  hold_ = hl_.enabled && hold_apps_ && use_l7_ && wants_flows_ && hl_.streams && hl_.segments;
  if (hold_ && holds_.empty()) {
    hl_.streams = std::min<uint32_t>(hl_.streams, 65535);
    holds_.resize(hl_.streams);
    // The packet path allocates nothing for a hold but, once per slot, its
    // byte buffer (lazily: 16 KiB per stream slot adds up).
    for (Hold& h : holds_) h.segs.reserve(hl_.stream_segments), h.hdr.reserve(512);
    for (uint32_t i = hl_.streams; i-- > 0;) free_holds_.push_back(uint16_t(i));
    active_.reserve(hl_.streams);
    sbuf_.resize(progs_.size());
    sorig_.reserve(512 + hl_.bytes + 64);  // headers + the largest stream + slack
    for (auto& b : sbuf_) b.reserve(512 + hl_.bytes + 64);
  }
}

void WorkerPath::adopt(ProgramSet& next) {
  // Swapped, not moved: the previous generation's instances and hit
  // counts go back in `next`, for the control plane to read and free once
  // every worker has moved on; the worker frees nothing here.
  // Crypto-PAn caches whose key did not change carry over; both
  // generations are this worker's at this point, so nothing races.
  for (size_t i = 0; i < progs_.size() && i < next.progs.size(); ++i) next.progs[i]->inherit_caches(*progs_[i]);
  progs_.swap(next.progs);
  for (size_t i = 0; i < counters_.size() && i < next.rule_hits.size(); ++i) counters_[i].rule_hits.swap(next.rule_hits[i]);
  configure();
  // A datagram made whole under the previous policies is not reused.
  for (Recent& rc : recent_) rc.orig.clear();
  // Per-flow decisions taken under the previous generation are forgotten
  // at each flow's next packet (refresh_flow). The tag is a byte: when it
  // wraps, every flow is forgotten here at once, so no flow last seen 255
  // generations ago can pass for a current one.
  if (++gen_ == 0) {
    gen_ = 1;
    flows_->each([](FlowEntry& e) {
      forget_decisions(e.state);
      e.gen = 1;
    });
  }
}

WorkerPath::~WorkerPath() {
  // Held mbufs go back to the pool (the engine flushes before it stops;
  // this covers an early exit).
  for (uint16_t idx : active_)
    for (auto& sg : holds_[idx].segs) rte_pktmbuf_free(sg.m);
}

void WorkerPath::process(rte_mbuf* m, Sink sink, void* ctx, bool collect) {
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
  if (collect) ++st_.decode_status[int(d.status) & 3];  // counted when it first came
  PacketMeta meta;
  meta.ts_ns = mbuf_ts(m);
  if (learn_init_) meta.initiating = initiating(m, data, cap0, d);
  if (collect && (d.flags & kFlagFragment) && (ofr_on_ || !ofr_.empty()) && linear) [[unlikely]]
    if (outer_fragment(m, data, d, meta.ts_ns, sink, ctx)) return;
  flow_of(data, d, cap0, meta);
  consumers(m, data, d, meta, sink, ctx);
}

void WorkerPath::process_burst(rte_mbuf** pkts, unsigned n, Sink sink, void* ctx) {
  if (!n) return;
  // Read now: once delivered, a packet may be gone before the burst ends.
  const uint64_t newest_ts = mbuf_ts(pkts[n - 1]);
  constexpr unsigned B = FlowTable::kBurstMax;
  Decoded* ds = ds_;
  PacketMeta* metas = metas_;
  const uint8_t** datas = datas_;
  bool* want = want_;
  for (unsigned base = 0; base < n;) {
    unsigned k = 0;
    bool single = false;
    // Chained frames take the single-packet path (they need the scratch
    // buffer), and so do IP fragments an outer datagram may collect; the
    // burst stops before one so order is kept.
    while (base + k < n && k < B && pkts[base + k]->nb_segs == 1) {
      rte_mbuf* m = pkts[base + k];
      datas[k] = rte_pktmbuf_mtod(m, const uint8_t*);
      decode(datas[k], m->pkt_len, mbuf_wire_len(m), ds[k]);
      // ... and the first packet past a collected datagram's deadline, so
      // the given-up fragments leave before it whatever the batching.
      if (((ds[k].flags & kFlagFragment) && (ofr_on_ || !ofr_.empty())) ||
          (!ofr_.empty() && mbuf_ts(m) > ofr_.next_deadline())) [[unlikely]] {
        single = true;
        break;
      }
      ++st_.decode_status[int(ds[k].status) & 3];
      metas[k] = PacketMeta{};
      metas[k].ts_ns = mbuf_ts(m);
      // Its initiator-log slots now, observed once the burst is decoded.
      if (learn_init_ && !mbuf_initiating(m, metas[k].initiating))
        initiator_log()->prefetch(datas[k], m->pkt_len, ds[k]);
      if (text_memos_) metas[k].text = &text_memos_[k], text_memos_[k].scanned = UINT32_MAX;
      const Decoded& d = ds[k];
      // Both addresses captured: the destination ends the fixed header's
      // addresses (IPv4 at 20 bytes, IPv6 at 40), the source lies before it.
      want[k] = wants_flows_ && d.has_ip() && d.l3_off + (d.ip_version == 4 ? 20u : 40u) <= m->pkt_len;
      // The flow key now, and the fetch of its bucket: the line then has
      // the rest of the burst's decoding to arrive in (lookup_staged).
      if (want[k]) flows_->stage(k, datas[k], d);
      ++k;
    }
    if (k) {
      if (learn_init_)
        for (unsigned i = 0; i < k; ++i)
          metas[i].initiating = initiating(pkts[base + i], datas[i], pkts[base + i]->pkt_len, ds[i]);
      flows_->lookup_staged(datas, ds, want, k, metas);
      for (unsigned i = 0; i < k; ++i) flow_found(ds[i], metas[i]);
      // The burst routes check no deadline per packet: they wait while a
      // held stream or an outer datagram could expire before one of the
      // burst's packets, so that the output does not depend on batching.
      const bool pending = !active_.empty() || !ofr_.empty();
      if (burst_route_ && !pending) deliver_burst(pkts + base, k, sink, ctx);
      else if (burst_multi_ && !pending) deliver_burst_multi(pkts + base, k, sink, ctx);
      else
        for (unsigned i = 0; i < k; ++i) consumers(pkts[base + i], datas[i], ds[i], metas[i], sink, ctx);
      base += k;
    }
    if (base < n && (single || pkts[base]->nb_segs != 1)) process(pkts[base++], sink, ctx);
  }
  if (!active_.empty() || !ofr_.empty()) expire_held(newest_ts, sink, ctx);
}

uint8_t WorkerPath::initiating(rte_mbuf* m, const uint8_t* data, uint32_t cap, const Decoded& d) {
  uint8_t bits;
  if (mbuf_initiating(m, bits)) return bits;
  bits = initiator_log()->observe(data, cap, d);
  mbuf_set_seq(m, mbuf_seq(m), bits);
  return bits;
}

InitiatorLog* WorkerPath::initiator_log() {
  if (shared_init_log_) return shared_init_log_;
  if (!init_log_) init_log_ = std::make_unique<InitiatorLog>();
  return init_log_.get();
}

uint64_t WorkerPath::oldest_held() const {
  uint64_t lo = UINT64_MAX;
  if (!held_segments()) return lo;
  // Segments and fragments are kept in arrival order: the first is the oldest.
  for (uint16_t idx : active_)
    if (!holds_[idx].segs.empty()) lo = std::min(lo, mbuf_seq(holds_[idx].segs.front().m));
  ofr_.each_first([&](const rte_mbuf* m) { lo = std::min(lo, mbuf_seq(m)); });
  return lo;
}

bool WorkerPath::holdable(const rte_mbuf* m, const Decoded& d, const PacketMeta& meta) const {
  return meta.flow && m->nb_segs == 1 && d.status == DecodeStatus::Ok && d.l4_proto == kProtoTcp && d.l4_hdr_len &&
         !(d.flags & (kFlagFragment | kFlagTunnel)) && d.payload_off + d.payload_len <= d.cap_len &&
         d.payload_off <= 512;
}

bool WorkerPath::start_hold(rte_mbuf* m, const uint8_t* data, const Decoded& d, const PacketMeta& meta) {
  if (free_holds_.empty() || held_segs_ >= hl_.segments || d.payload_len > hl_.bytes) {
    ++st_.hold_refused;
    return false;
  }
  uint16_t idx = free_holds_.back();
  free_holds_.pop_back();
  active_.push_back(idx);
  Hold& h = holds_[idx];
  h.fs = meta.flow;
  h.dir = meta.initiator_is_src ? 0 : 1;
  h.roles_uncertain = meta.roles_uncertain;
  h.app = meta.app;
  h.base = tcp_seq(data, d);
  h.contiguous = d.payload_len;
  h.deadline = meta.ts_ns + hl_.timeout_ns;
  hold_deadline_ = std::min(hold_deadline_, h.deadline);
  if (h.bytes.size() < hl_.bytes + 64) h.bytes.resize(hl_.bytes + 64);  // once per slot; slack for Hyperscan
  std::memcpy(h.bytes.data(), data + d.payload_off, d.payload_len);
  h.hdr.assign(data, data + d.payload_off);
  h.segs.clear();
  h.segs.push_back({m, 0, d.payload_len, meta.ts_ns, meta.flow_first, d});
  ++held_segs_;
  ++st_.streams_held;
  ++st_.segments_held;
  StreamTracker(*h.fs, h.dir).hold_started(idx);
  return true;
}

bool WorkerPath::hold_add(Hold& h, rte_mbuf* m, const uint8_t* data, const Decoded& d, const PacketMeta& meta,
                          Sink sink, void* ctx) {
  const uint16_t idx = uint16_t(&h - holds_.data());
  const bool fin = d.tcp_flags & (kTcpFin | kTcpRst);
  if (d.payload_len == 0) {
    // A bare ACK passes; the end of the direction ends the wait.
    if (fin) release(idx, L7State::Incomplete, sink, ctx);
    return false;
  }
  const int64_t off = int32_t(tcp_seq(data, d) - h.base);
  if (StreamTracker::resumes_past_hold(plugin_of(h.app), off, h.contiguous, data + d.payload_off,
                                       d.cap_len > d.payload_off ? std::min(d.payload_len, d.cap_len - d.payload_off) : 0,
                                       h.dir == 0,
                                       l7_->gaps)) {
    // Bytes were lost after the held header and a new message starts here:
    // the header leaves failed (fail closed), this segment is parsed afresh.
    release(idx, L7State::Incomplete, sink, ctx, &l7_->gaps);
    return false;
  }
  if (off < 0 || off + d.payload_len > hl_.bytes || h.segs.size() >= hl_.stream_segments ||
      held_segs_ >= hl_.segments || !holdable(m, d, meta)) {
    // Bytes before the stream (already forwarded), or past a bound: the
    // header cannot be completed; this packet goes on as the rest of a
    // failed header.
    release(idx, L7State::Incomplete, sink, ctx);
    return false;
  }
  // A retransmission that disagrees with what was held overwrites it: the
  // output carries the stream's version of every byte, rewritten.
  std::memcpy(h.bytes.data() + off, data + d.payload_off, d.payload_len);
  h.segs.push_back({m, uint32_t(off), d.payload_len, meta.ts_ns, meta.flow_first, d});
  ++held_segs_;
  ++st_.segments_held;
  uint32_t cov = h.contiguous;
  for (bool grew = true; grew;) {
    grew = false;
    for (const HeldSeg& sg : h.segs)
      if (sg.off <= cov && sg.off + sg.len > cov) cov = sg.off + sg.len, grew = true;
  }
  if (cov > h.contiguous) {
    h.contiguous = cov;
    L7State st = analyze_stream(h.bytes.data(), cov, h.app, h.dir == 0, h.fs, *l7_);
    if (st != L7State::Incomplete || !l7_->hold_hint) {
      release(idx, st, sink, ctx);
      return true;
    }
  }
  if (fin) release(idx, L7State::Incomplete, sink, ctx);
  return true;
}

void WorkerPath::release(uint16_t idx, L7State st, Sink sink, void* ctx, StreamGapStats* gap) {
  Hold& h = holds_[idx];
  FlowState* fs = h.fs;
  StreamTracker stream(*fs, h.dir);
  stream.hold_ended();
  for (size_t i = 0; i < active_.size(); ++i)
    if (active_[i] == idx) {
      active_[i] = active_.back();
      active_.pop_back();
      break;
    }
  const uint32_t cov = h.contiguous;
  StreamView& sv = sview_;
  // A header that will never complete (its stream ended, a gap, a timeout,
  // a bound): where its plugin tells its complete parts from the one the
  // stream cut (ProtoPacket::ends), the first are rewritten as any header's
  // and the cut part leaves masked (rewrite_stream), never in clear.
  uint32_t mask_from = UINT32_MAX;
  if (st == L7State::Incomplete && cov &&
      analyze_stream(h.bytes.data(), cov, h.app, h.dir == 0, fs, *l7_, true) == L7State::Parsed &&
      l7_->occs->mask_from <= cov)
    mask_from = l7_->occs->mask_from, st = L7State::Parsed;
  const bool ok = st == L7State::Parsed;
  if (ok) {
    // The header and the stream as one packet: the programs rewrite it with
    // the code a single packet takes, once per consumer.
    const uint32_t hlen = uint32_t(h.hdr.size()), total = hlen + cov;
    sorig_.resize(total + 64);
    std::memcpy(sorig_.data(), h.hdr.data(), hlen);
    std::memcpy(sorig_.data() + hlen, h.bytes.data(), cov);
    Decoded sd = h.segs.front().d;
    sd.payload_len = cov;
    sd.cap_len = sd.wire_len = total;
    PacketMeta sm;
    sm.ts_ns = h.segs.back().ts;
    sm.initiator_is_src = h.dir == 0;
    sm.roles_uncertain = h.roles_uncertain;
    sm.initiating = stamped_initiating(h.segs.back().m);
    sm.flow = fs;
    sm.orig = sorig_.data();
    sm.app = h.app;
    sm.l7 = L7State::Parsed;
    sm.parse = l7_.get();
    sv.orig = sorig_.data() + hlen;
    sv.len = cov;
    for (size_t i = 0; i < progs_.size(); ++i) {
      sv.result[i] = StreamView::Unchanged;
      if (identity_[i] || follow_[i] >= 0) continue;  // a follower delivers its leader's packets
      auto& b = sbuf_[i];
      b.resize(total + 64);
      std::memcpy(b.data(), sorig_.data(), total);
      mark_counts(unsigned(i));
      sv.result[i] = progs_[i]->rewrite_stream(b.data(), sd, sm, counters_[i]);
      mirror_counts(unsigned(i));
      sv.bytes[i] = b.data() + hlen;
    }
    stream.completed(h.base + cov);
    if (mask_from == UINT32_MAX) {
      ++st_.streams_completed;
    } else {
      // What follows may be the cut header's rest: closed until a message
      // starts, as after any header that failed.
      stream.failed();
      ++st_.streams_failed;
      ++st_.partial_heads;
      st_.partial_masked += cov - mask_from;
    }
  } else if (st != L7State::None) {
    stream.failed();
    ++st_.streams_failed;
  }
  for (const HeldSeg& sg : h.segs) {
    rte_mbuf* m = sg.m;
    const uint8_t* data = rte_pktmbuf_mtod(m, const uint8_t*);
    PacketMeta pm;
    pm.ts_ns = sg.ts;
    pm.initiator_is_src = h.dir == 0;
    pm.roles_uncertain = h.roles_uncertain;
    pm.initiating = stamped_initiating(m);
    pm.flow_first = sg.flow_first;
    pm.flow = fs;
    pm.orig = data;
    pm.app = h.app;
    pm.parse = l7_.get();
    if (ok && sg.off < cov) {
      sv.seg_off = sg.off;
      pm.l7 = L7State::Stream;
      pm.stream = &sv;
      pm.l7_base = sv.orig;
    } else {
      // Past a gap of a completed header, or a header never completed.
      pm.l7 = st == L7State::None ? L7State::None : st == L7State::Malformed ? L7State::Malformed : L7State::Incomplete;
      if (gap) gap->closed(sg.len);
    }
    deliver(m, data, sg.d, pm, sink, ctx);
  }
  held_segs_ -= uint32_t(h.segs.size());
  h.segs.clear();
  h.fs = nullptr;
  free_holds_.push_back(idx);
}

void WorkerPath::expire_held(uint64_t now_ns, Sink sink, void* ctx) {
  if (!ofr_.empty() && now_ns > ofr_.next_deadline()) expire_outer(now_ns, sink, ctx);
  uint64_t next = UINT64_MAX;
  for (size_t i = 0; i < active_.size();) {
    uint16_t idx = active_[i];
    if (holds_[idx].deadline < now_ns) {
      release(idx, L7State::Incomplete, sink, ctx);  // swaps the last active slot into i
      continue;
    }
    next = std::min(next, holds_[idx].deadline);
    ++i;
  }
  hold_deadline_ = next;
}

void WorkerPath::flush_held(Sink sink, void* ctx) {
  if (!ofr_.empty()) expire_outer(UINT64_MAX, sink, ctx);
  while (!active_.empty()) release(active_.back(), L7State::Incomplete, sink, ctx);
}

// consumers() on each packet of a linear burst when burst_route_ holds: no
// application layer means no held stream to expire or add to, and the one
// consumer rewrites every packet in place, as deliver() would one by one.
void WorkerPath::note_tunnel(const uint8_t* data, const Decoded& d, PacketMeta& meta) {
  if (meta.flow && (d.flags & kFlagFragment) && (d.flags & kFlagTunnel)) meta.flow->frag_tunnel = 1;
  flows_->pptp_clients(data, d, [&](const uint8_t*, unsigned, bool src) { meta.pptp_client = src ? 1 : 2; });
}

void WorkerPath::prepare_burst(unsigned k) {
  for (unsigned i = 0; i < k; ++i) {
    note_packet(datas_[i], ds_[i], metas_[i]);
    caps_[i] = ds_[i].cap_len;
    wires_[i] = ds_[i].wire_len;
  }
}

void WorkerPath::deliver_burst(rte_mbuf** pkts, unsigned k, Sink sink, void* ctx) {
  prepare_burst(k);
  // From what decode saw, not from the mbufs (see finish_burst). datas_
  // holds each mbuf's rte_pktmbuf_mtod, which is writable.
  for (unsigned i = 0; i < k; ++i) bufs_[i] = const_cast<uint8_t*>(datas_[i]);
  ConsumerCounters& c = counters_[0];
  c.in += k;
  progs_[0]->process_burst(bufs_, caps_, wires_, ds_, metas_, verdicts_, k, c);
  finish_burst(0, pkts, k, sink, ctx);
}

void WorkerPath::finish_burst(unsigned consumer, rte_mbuf** ms, unsigned k, Sink sink, void* ctx) {
  ConsumerCounters& c = counters_[consumer];
  unsigned nout = 0;
  for (unsigned i = 0; i < k; ++i) {
    rte_mbuf* m = ms[i];
    if (verdicts_[i] != Verdict::Forward) [[unlikely]] {
      rte_pktmbuf_free(m);
      count_verdict(c, verdicts_[i]);
      continue;
    }
    // The packet's lengths as decode saw them (ds_) rather than from the
    // mbuf, whose header a burst's work has usually pushed out of L1 by
    // now: only a packet the program shortened touches it. The burst holds
    // single-segment mbufs only, so a cut is two stores, not
    // rte_pktmbuf_trim's walk to the last segment.
    if (caps_[i] != ds_[i].cap_len) {
      m->data_len = uint16_t(caps_[i]);
      m->pkt_len = caps_[i];
      mbuf_set_wire_len(m, wires_[i]);
    } else if (wires_[i] != ds_[i].wire_len) {
      mbuf_set_wire_len(m, wires_[i]);
    }
    out_[nout++] = m;
  }
  c.copied += nout;
  c.out += nout;
  const auto& fs = followers_[consumer];
  if (!fs.empty()) [[unlikely]] {
    // References for the followers before the outputs may leave.
    for (unsigned i = 0; i < nout; ++i) rte_pktmbuf_refcnt_update(out_[i], int16_t(fs.size()));
    std::memcpy(fout_, out_, nout * sizeof *out_);
  }
  if (sink_burst_) {
    if (nout) sink_burst_(ctx, consumer, out_, nout);
  } else {
    for (unsigned i = 0; i < nout; ++i) sink(ctx, consumer, out_[i]);
  }
  for (unsigned f : fs) follow_burst(f, k, nout, sink, ctx);
}

// The copies' bytes: the whole frame, or the headers only where the
// consumer's header kernel takes the packet and cuts its payload
// (kernel_payload). Referencing a kept payload from the original (an
// indirect mbuf) instead of copying it measured slower than the copy on
// `mix.pcap` (906-byte mean): the second allocation, the attach and the
// atomic reference counts cost more than the bytes. Returns false when the
// pool is dry.
bool WorkerPath::copy_burst(unsigned ci, rte_mbuf** pkts, unsigned k) {
  if (rte_pktmbuf_alloc_bulk(pool_, copies_, k) != 0) [[unlikely]]
    return false;
  const ProgramInstance& prog = *progs_[ci];
  const uint8_t pay = prog.kernel_payload();
  for (unsigned i = 0; i < k; ++i) {
    rte_mbuf* o = copies_[i];
    rte_mbuf* m = pkts[i];
    const Decoded& d = ds_[i];
    uint32_t len = d.cap_len, ncopy = len;
    if (pay == ProgramInstance::kCutsPayload && ProgramInstance::hdr_packet(d, len) &&
        prog.kernel_roles(datas_[i], d, metas_[i]))
      len = ncopy = d.payload_off;
    std::memcpy(rte_pktmbuf_mtod(o, uint8_t*), datas_[i], ncopy);
    o->data_len = uint16_t(ncopy);
    o->pkt_len = len;
    // What rte_pktmbuf_copy carries over besides the bytes.
    o->port = m->port;
    o->vlan_tci = m->vlan_tci;
    o->vlan_tci_outer = m->vlan_tci_outer;
    o->tx_offload = m->tx_offload;
    o->hash = m->hash;
    o->packet_type = m->packet_type;
    o->ol_flags = m->ol_flags & ~(RTE_MBUF_F_INDIRECT | RTE_MBUF_F_EXTERNAL);
    // Time, wire length and the original link header (mbuf_meta.h).
    rte_mbuf_dynfield_copy(o, m);
    bufs_[i] = rte_pktmbuf_mtod(o, uint8_t*);
  }
  return true;
}

void WorkerPath::deliver_burst_multi(rte_mbuf** pkts, unsigned k, Sink sink, void* ctx) {
  prepare_burst(k);
  const unsigned nc = unsigned(progs_.size());
  bool own_ref = true;  // our reference to each original is still held
  for (unsigned ci = 0; ci < nc; ++ci) {
    if (follow_[ci] >= 0) continue;  // with its leader (finish_burst)
    ConsumerCounters& c = counters_[ci];
    c.in += k;
    if (identity_[ci]) {
      for (unsigned i = 0; i < k; ++i) rte_mbuf_refcnt_update(pkts[i], 1);
      c.shared += k;
      c.out += k;
      if (sink_burst_) sink_burst_(ctx, ci, pkts, k);
      else
        for (unsigned i = 0; i < k; ++i) sink(ctx, ci, pkts[i]);
      continue;
    }
    // Each program sees the frame as decoded, whatever the previous one cut.
    for (unsigned i = 0; i < k; ++i) caps_[i] = ds_[i].cap_len, wires_[i] = ds_[i].wire_len;
    // As deliver(): with no consumer sharing the original, the last
    // consumer (then a rewriting one) rewrites it in place, after every
    // copy is taken.
    const bool in_place = ci == last_lead_ && sharers_ == 0;
    rte_mbuf** ms = pkts;
    if (in_place) {
      for (unsigned i = 0; i < k; ++i) bufs_[i] = const_cast<uint8_t*>(datas_[i]);
      own_ref = false;
    } else if (copy_burst(ci, pkts, k)) {
      ms = copies_;
    } else {
      st_.copy_failures += k;
      c.dropped += k;
      for (unsigned f : followers_[ci]) counters_[f].in += k, counters_[f].dropped += k;
      continue;
    }
    mark_counts(ci);
    progs_[ci]->process_burst(bufs_, caps_, wires_, ds_, metas_, verdicts_, k, c);
    mirror_counts(ci);
    finish_burst(ci, ms, k, sink, ctx);
  }
  if (own_ref) rte_pktmbuf_free_bulk(pkts, k);
}

__attribute__((always_inline)) inline void WorkerPath::consumers(rte_mbuf* m, const uint8_t* data, const Decoded& d,
                                                                PacketMeta& meta, Sink sink, void* ctx) {
  note_packet(data, d, meta);
  if (!ofr_.empty() && meta.ts_ns > ofr_.next_deadline()) [[unlikely]] expire_outer(meta.ts_ns, sink, ctx);
  // Held streams past their deadline leave before the first packet newer
  // than it, whatever the bursts: an offline run gives the same output
  // however its packets were batched.
  if (meta.ts_ns > hold_deadline_ && !active_.empty()) [[unlikely]] expire_held(meta.ts_ns, sink, ctx);
  // Held segments of an earlier generation that parsed L7 still leave in
  // order with their stream's next packet.
  if (use_l7_ || !active_.empty()) return consumers_l7(m, data, d, meta, sink, ctx);
  deliver(m, data, d, meta, sink, ctx);
}

void WorkerPath::consumers_l7(rte_mbuf* m, const uint8_t* data, const Decoded& d, PacketMeta& meta, Sink sink,
                              void* ctx) {
  {
    const bool can_hold = hold_ && holdable(m, d, meta);
    if (!active_.empty() && meta.flow && d.l4_proto == kProtoTcp && d.l4_hdr_len) {
      const int dir = meta.initiator_is_src ? 0 : 1;
      const StreamTracker mine(*meta.flow, dir), other(*meta.flow, dir ^ 1);
      const bool bare_ack = d.payload_len == 0 && !(d.tcp_flags & (kTcpFin | kTcpRst));
      if (mine.held() && !bare_ack) {
        if (can_hold && hold_add(holds_[mine.held() - 1], m, data, d, meta, sink, ctx)) return;
        // Not holdable (a fragment, a chained frame, cut short): the header
        // cannot be completed, and this packet continues it.
        if (mine.held()) release(uint16_t(mine.held() - 1), L7State::Incomplete, sink, ctx);
      }
      // A reset ends the other direction's wait too.
      if ((d.tcp_flags & kTcpRst) && other.held())
        release(uint16_t(other.held() - 1), L7State::Incomplete, sink, ctx);
    }
    l7_->reset(++packet_id_);
    analyze_l7(data, d, meta, *l7_);
    if (can_hold && meta.l7 == L7State::Incomplete && l7_->hold_hint && (hold_apps_ & (1u << meta.app)) &&
        !(d.tcp_flags & (kTcpFin | kTcpRst)) && start_hold(m, data, d, meta))
      return;
  }
  deliver(m, data, d, meta, sink, ctx);
}

__attribute__((always_inline)) inline void WorkerPath::deliver(rte_mbuf* m, const uint8_t* data, const Decoded& d,
                                                              PacketMeta& meta, Sink sink, void* ctx) {
  const uint32_t cap0 = m->pkt_len;
  const uint32_t wire0 = mbuf_wire_len(m);
  const bool linear = m->nb_segs == 1;

  if (single_modifier_ && linear) {
    // One consumer, which rewrites: in place, as the loop below would.
    ConsumerCounters& c = counters_[0];
    ++c.in;
    uint32_t cap = cap0, wire = wire0;
    const Verdict v = progs_[0]->process(rte_pktmbuf_mtod(m, uint8_t*), cap, wire, d, meta, c);
    if (v != Verdict::Forward) [[unlikely]] {
      rte_pktmbuf_free(m);
      count_verdict(c, v);
      return;
    }
    if (cap < cap0) rte_pktmbuf_trim(m, uint16_t(cap0 - cap));
    mbuf_set_wire_len(m, wire);
    ++c.copied;
    ++c.out;
    sink(ctx, 0, m);
    return;
  }
  const unsigned nc = unsigned(progs_.size());
  bool own_ref = true;  // our own reference to m is still held
  unsigned mod_seen = 0;
  for (unsigned i = 0; i < nc; ++i) {
    if (identity_[i] && m == replay_) [[unlikely]] continue;  // a given-up fragment it had on arrival
    if (follow_[i] >= 0) continue;  // with its leader, below
    ConsumerCounters& c = counters_[i];
    ++c.in;
    if (identity_[i]) {
      // The last consumer takes our own reference when we still hold it:
      // no count up now and down (atomically, the mbuf being shared) below.
      if (i + 1 == nc && own_ref) own_ref = false;
      else rte_pktmbuf_refcnt_update(m, 1);  // every segment of a chain, not only the head
      ++c.shared;
      ++c.out;
      sink(ctx, i, m);
      continue;
    }
    ++mod_seen;
    uint32_t cap = cap0, wire = wire0;
    rte_mbuf* out = nullptr;
    Verdict v;
    mark_counts(i);
    if (linear) {
      // The last rewriting consumer may rewrite the original in place when no
      // consumer shares it: one copy fewer on the common single-consumer path.
      if (sharers_ == 0 && mod_seen == modifiers_) {
        out = m;
        own_ref = false;
      } else if (!(out = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX))) {
        ++st_.copy_failures;
        ++c.dropped;
        follow_packet(i, nullptr, Verdict::Forward, sink, ctx);
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
          mirror_counts(i);
          ++st_.copy_failures;
          ++c.dropped;
          follow_packet(i, nullptr, Verdict::Forward, sink, ctx);
          continue;
        }
        // Every per-packet field the writer needs (time, the original link header).
        mbuf_copy_meta(out, m);
        mbuf_set_ts(out, meta.ts_ns);
      }
    }
    if (!followers_[i].empty()) [[unlikely]] mirror_counts(i);
    if (v != Verdict::Forward) {
      if (out) rte_pktmbuf_free(out);
      count_verdict(c, v);
      follow_packet(i, nullptr, v, sink, ctx);
      continue;
    }
    mbuf_set_wire_len(out, wire);
    ++c.copied;
    ++c.out;
    // The followers' references are taken before the leader's output may
    // leave (and be freed by its writer).
    if (!followers_[i].empty()) [[unlikely]] rte_pktmbuf_refcnt_update(out, int16_t(followers_[i].size()));
    sink(ctx, i, out);
    follow_packet(i, out, v, sink, ctx);
  }
  if (own_ref) rte_pktmbuf_free(m);
}

}  // namespace amon
