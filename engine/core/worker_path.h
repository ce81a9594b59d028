// What a worker does to one packet: decode once, look up the flow, run each
// consumer's program (sharing the mbuf with consumers that change nothing,
// copying for the others) and hand each result to a sink. The engine's
// workers and the benchmark run this same code.
#pragma once

#include <rte_mbuf.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "addr_text.h"
#include "flow_table.h"
#include "initiators.h"
#include "l7.h"
#include "mbuf_meta.h"
#include "outer_frag.h"
#include "runtime.h"

namespace amon {

// TCP flags the worker path reads (a held stream ends on FIN or RST).
inline constexpr uint8_t kTcpFin = 0x01, kTcpRst = 0x04;

struct WorkerPathStats {
  uint64_t copy_failures = 0;
  uint64_t decode_status[4] = {};
  // TCP stream holding: headers completed from held segments, headers that
  // could not be completed (fail closed), holds refused for lack of room.
  uint64_t streams_held = 0, streams_completed = 0, streams_failed = 0, hold_refused = 0, segments_held = 0;
  // Of the failed: headers released with their complete parts rewritten
  // and the part the stream cut masked, and the bytes masked.
  uint64_t partial_heads = 0, partial_masked = 0;
};

// Bounds of TCP stream holding. A header (TLS ClientHello, HTTP request or
// response head, DNS-over-TCP message) split over segments is held, segment
// by segment, until it is complete; then it is rewritten as one and its
// segments leave in their arrival order. Held packets pin mbufs, so both the
// bytes and the packets are bounded per worker; past a bound, or when the
// rest does not come within `timeout_ns` of packet time, the held segments
// leave fail-closed (fields that cannot be located are cut).
struct HoldLimits {
  uint32_t streams = 1024;           // streams held at once, per worker (<= 65535)
  uint32_t bytes = 16384 + 5 + 64;   // per stream: a full TLS record and some
  uint32_t segments = 4096;          // packets held at once, per worker
  uint32_t stream_segments = 64;     // packets per stream
  uint64_t timeout_ns = 1000000000ULL;
  bool enabled = true;
};

// What a flow remembers of decisions its consumers' policies took, which a
// new policy generation must take again: z-anonymity decisions on per-flow
// fields (zdecided/zreleased), the SNI decisions that let the server's
// certificate through (sni_clear), and the header kernels' Crypto-PAn memo
// (its key may have changed). Cleared, each is taken again at the flow's
// next packet, under the new policy: a flow released under the old policy
// is hidden under a new one that protects it. Stream state (what was
// parsed, held, released) is about the traffic and stays.
inline void forget_decisions(FlowState& s) {
  s.zdecided = 0;
  s.zreleased = 0;
  s.sni_clear = 0;
  s.memo = 0;
  s.memo_owner = 0;
}

// One generation of the consumers' programs for one worker, built by the
// control plane off the packet path (WorkerPath::adopt).
struct ProgramSet {
  std::vector<std::unique_ptr<ProgramInstance>> progs;  // one per consumer, in order
  std::vector<std::vector<uint64_t>> rule_hits;         // zeroed, sized per program
};

class WorkerPath {
 public:
  // sink(ctx, consumer index, mbuf): takes ownership of the mbuf reference.
  using Sink = void (*)(void* ctx, unsigned consumer, rte_mbuf* m);
  // The same for n packets of one consumer, in order. Optional: where set
  // (set_burst_sink), the burst route hands each burst's output over in one
  // call (one ring enqueue or TX buffer pass instead of one per packet);
  // every other path keeps calling the Sink of process_burst.
  using SinkBurst = void (*)(void* ctx, unsigned consumer, rte_mbuf** ms, unsigned n);
  void set_burst_sink(SinkBurst s) { sink_burst_ = s; }
  // Learn who initiates into `log`, shared with the other workers and the
  // dispatcher (live, when workers poll their own RSS queues), instead of a
  // log of this worker's own.
  void share_initiators(InitiatorLog* log) { shared_init_log_ = log; }

  WorkerPath(const std::vector<std::unique_ptr<Program>>& programs, rte_mempool* pool,
             std::unique_ptr<FlowTable> flows, const HoldLimits& hold = HoldLimits{});
  ~WorkerPath();

  // collect: false for a fragment an outer datagram gave up on (it takes
  // the per-fragment path).
  void process(rte_mbuf* m, Sink sink, void* ctx, bool collect = true);
  // A burst in order: decodes all, looks their flows up in bulk (the cache
  // misses overlap), then runs the consumers packet by packet.
  void process_burst(rte_mbuf** pkts, unsigned n, Sink sink, void* ctx);

  // Held segments whose header has not completed within the timeout, by
  // packet time, leave fail-closed. process_burst calls it; an idle worker
  // calls it with its clock.
  void expire_held(uint64_t now_ns, Sink sink, void* ctx);
  // Releases every held segment (fail-closed where incomplete): end of
  // input, shutdown, a long idle spell.
  void flush_held(Sink sink, void* ctx);
  // Packets held: TCP segments and fragments of outer datagrams.
  uint32_t held_segments() const { return held_segs_ + ofr_.held(); }
  // The input number of the oldest packet held (UINT64_MAX: none), for the
  // outputs' reorder buffers (ordered.h). Between bursts only.
  uint64_t oldest_held() const;
  // Packets held so far (segments and fragments): a change says some may
  // have left out of input order.
  uint64_t packets_held() const { return st_.segments_held + ofr_.stats().fragments; }
  const OuterFragStats& outer_frag_stats() const { return ofr_.stats(); }

  // A reload: the worker takes `next`'s programs between two bursts (every
  // packet is processed wholly by one generation) and hands its previous
  // ones back in `next`. Flows, held segments, counters and the Crypto-PAn
  // caches of unchanged keys stay; per-flow decisions are taken again
  // (forget_decisions). Rule hits restart at 0 with the new rules; the old
  // counts come back in next.rule_hits.
  void adopt(ProgramSet& next);
  const ProgramInstance& instance(size_t consumer) const { return *progs_[consumer]; }
  uint8_t generation() const { return gen_; }

  FlowTable& flows() { return *flows_; }
  std::vector<ConsumerCounters>& counters() { return counters_; }
  const WorkerPathStats& stats() const { return st_; }
  // Capture gaps in its TCP streams (none while no consumer looks past L4).
  StreamGapStats gap_stats() const { return l7_ ? l7_->gaps : StreamGapStats{}; }

 private:
  // Everything after the flow lookup: stream holding, the application
  // parse, then deliver().
  void consumers(rte_mbuf* m, const uint8_t* data, const Decoded& d, PacketMeta& meta, Sink sink, void* ctx);
  // ... when some consumer looks past L4.
  void consumers_l7(rte_mbuf* m, const uint8_t* data, const Decoded& d, PacketMeta& meta, Sink sink, void* ctx);
  // Each consumer's program on one packet, and the sink.
  void deliver(rte_mbuf* m, const uint8_t* data, const Decoded& d, PacketMeta& meta, Sink sink, void* ctx);

  struct HeldSeg {
    rte_mbuf* m;
    uint32_t off, len;  // payload bytes at stream offset `off`
    uint64_t ts;
    bool flow_first;
    Decoded d;  // as it came: delivered with it at release
  };
  struct Hold {
    FlowState* fs = nullptr;
    uint8_t dir = 0, app = 0;
    bool roles_uncertain = false;
    uint32_t base = 0;        // sequence number of stream offset 0
    uint32_t contiguous = 0;  // bytes known from offset 0 without a gap
    uint64_t deadline = 0;
    std::vector<HeldSeg> segs;
    std::vector<uint8_t> bytes;  // the stream, at its offsets
    std::vector<uint8_t> hdr;    // the first segment's headers (segs.front().d their decode)
  };
  bool holdable(const rte_mbuf* m, const Decoded& d, const PacketMeta& meta) const;
  bool start_hold(rte_mbuf* m, const uint8_t* data, const Decoded& d, const PacketMeta& meta);
  // A packet of a direction with a held stream. True: it was taken (held,
  // or released with the stream).
  bool hold_add(Hold& h, rte_mbuf* m, const uint8_t* data, const Decoded& d, const PacketMeta& meta, Sink sink,
                void* ctx);
  // gap: the segments left unparsed count there (a gap ended the wait).
  void release(uint16_t idx, L7State st, Sink sink, void* ctx, StreamGapStats* gap = nullptr);

  void configure();

  // Outer datagrams fragmented by the link (outer_frag.h): collected while
  // some consumer rewrites, anonymized whole, sent as the same fragments.
  OuterFrags ofr_;
  bool ofr_on_ = false;
  bool ofr_expiring_ = false;
  const rte_mbuf* replay_ = nullptr;  // a fragment of a given-up datagram, on its per-fragment path
  std::vector<uint8_t> rb_, wb_, fb_;
  // Datagrams made whole lately, until their deadline: what each consumer
  // made of them, so that a fragment sent again after the whole was made
  // (a retransmitted last fragment) leaves as its twin did.
  struct Recent {
    OuterFrags::Datagram g;  // key and total only
    uint64_t until = 0;
    uint32_t hlen = 0;
    std::vector<uint8_t> orig;  // the whole frame as it came
    struct Out {
      Verdict v = Verdict::Drop;
      uint32_t dlen = 0, kept = 0;
      std::vector<uint8_t> w;  // the consumer's rewrite of the whole frame
    };
    std::vector<Out> outs;  // per consumer
  };
  static constexpr unsigned kRecent = 4;
  Recent recent_[kRecent];
  unsigned recent_next_ = 0;
  // Fragment f of a datagram made whole, as consumer i rewrote it, to the sink.
  void refrag_out(unsigned i, const Recent& rc, const OuterFrags::Frag& f, Sink sink, void* ctx);
  // True: a fragment of a datagram made whole lately, with its bytes; sent.
  bool outer_again(rte_mbuf* m, const uint8_t* data, const FragInfo& fi, uint64_t ts, Sink sink, void* ctx);
  // True: the fragment was taken.
  bool outer_fragment(rte_mbuf* m, const uint8_t* data, const Decoded& d, uint64_t ts, Sink sink, void* ctx);
  void outer_whole(uint32_t idx, Sink sink, void* ctx);
  void outer_failed(uint32_t idx, Sink sink, void* ctx);
  void expire_outer(uint64_t now_ns, Sink sink, void* ctx);
  // The flow's per-flow decisions belong to this generation (forget_decisions).
  // The packet's flow, looked up when both its addresses were captured,
  // then flow_found.
  void flow_of(const uint8_t* data, const Decoded& d, uint32_t cap, PacketMeta& meta) {
    if (wants_flows_ && d.has_ip() && d.dst_off() + d.addr_len() <= cap && d.src_off() + d.addr_len() <= cap)
      flows_->lookup(data, d, meta.ts_ns, meta);
    flow_found(d, meta);
  }
  // Every route, once the flow is known: the flow takes the current
  // policies' decisions; a packet that does not decode says nothing
  // reliable about its roles (ports and flags may be missing), so both
  // ends are treated as users.
  void flow_found(const Decoded& d, PacketMeta& meta) {
    if (meta.flow) refresh_flow(meta.flow);
    if (d.status != DecodeStatus::Ok) meta.roles_uncertain = true;
  }
  // Every route, before the consumers: the first fragment says whether the
  // datagram is a tunnel, and later fragments (same flow entry: fragments
  // key on addresses) inherit it; the original bytes.
  [[gnu::always_inline]] void note_packet(const uint8_t* data, const Decoded& d, PacketMeta& meta) {
    if (d.flags & (kFlagTunnel | kFlagEncap)) [[unlikely]] note_tunnel(data, d, meta);
    meta.orig = data;
  }
  // ... of a tunnel or a tunnelled packet: the tunnel bit of fragments, PPTP's roles.
  void note_tunnel(const uint8_t* data, const Decoded& d, PacketMeta& meta);
  void refresh_flow(FlowState* fs) {
    FlowEntry* e = reinterpret_cast<FlowEntry*>(reinterpret_cast<char*>(fs) - offsetof(FlowEntry, state));
    if (e->gen != gen_) {
      forget_decisions(*fs);
      e->gen = gen_;
    }
  }
  uint8_t gen_ = 1;  // 1..255; a new FlowEntry has 0, which no generation is
  bool use_l7_ = false;  // some consumer looks past L4 (l7_ may outlive it)

  HoldLimits hl_;
  bool hold_ = false;        // some consumer protects a TCP application's fields
  uint32_t hold_apps_ = 0;   // bit per App some consumer protects
  std::vector<Hold> holds_;
  std::vector<uint16_t> free_holds_, active_;
  uint32_t held_segs_ = 0;
  uint64_t hold_deadline_ = UINT64_MAX;  // no active stream's deadline is earlier (may be stale-early)
  std::vector<std::vector<uint8_t>> sbuf_;  // per consumer: the rewritten stream
  std::vector<uint8_t> sorig_;
  StreamView sview_;

  std::vector<std::unique_ptr<ProgramInstance>> progs_;
  std::vector<bool> identity_;
  unsigned sharers_ = 0, modifiers_ = 0;  // modifiers_: rewriting consumers that lead (follow_)
  std::vector<ConsumerCounters> counters_;
  // Consumers whose policies are the same (the same rules, settings and key
  // bytes: policy_digest) make the same bytes of every packet: the first of
  // them rewrites it, and the others (its followers) take a reference to its
  // output instead of a copy and a program run of their own. follow_[i]:
  // the consumer i follows, or -1; followers_[l]: the consumers following l.
  std::vector<int> follow_;
  std::vector<std::vector<unsigned>> followers_;
  unsigned last_lead_ = 0;  // the last rewriting consumer that follows none
  ConsumerCounters before_;  // a leader's counters before its program ran
  // What the leader's program counted since before_ (rule hits, z-anonymity,
  // text found again...) is the followers' too: the same program on the same
  // packets counts the same.
  void mirror_counts(unsigned lead);
  void mark_counts(unsigned lead) {
    if (!followers_[lead].empty()) before_ = counters_[lead];
  }
  // The followers of a leader on one packet: its output (null: none, with
  // its verdict; Forward: no copy could be made).
  void follow_packet(unsigned lead, rte_mbuf* out, Verdict v, Sink sink, void* ctx);
  // Follower f's delivery of the leader's burst output (finish_burst's out_).
  void follow_burst(unsigned f, unsigned k, unsigned nout, Sink sink, void* ctx);
  rte_mempool* pool_;
  std::unique_ptr<FlowTable> flows_;
  std::vector<uint8_t> scratch_, scratch2_;
  WorkerPathStats st_;
  std::unique_ptr<L7Parse> l7_;  // null when no consumer looks past L4
  uint64_t packet_id_ = 0;
  // Burst scratch, kept here so a burst does not construct them anew.
  Decoded ds_[FlowTable::kBurstMax];
  PacketMeta metas_[FlowTable::kBurstMax];
  // The burst's shared scans for address text (PacketMeta::text), made the
  // first time more than one consumer rewrites; null until then (one
  // consumer would only pay for the memo).
  std::unique_ptr<AddrTextMemo[]> text_memos_;
  const uint8_t* datas_[FlowTable::kBurstMax];
  bool want_[FlowTable::kBurstMax];
  // The burst route (process_burst): one consumer that rewrites, no
  // application layer, so nothing can hold or reorder a packet; the
  // consumer's program takes the whole burst in one call.
  bool burst_route_ = false;
  SinkBurst sink_burst_ = nullptr;
  rte_mbuf* out_[FlowTable::kBurstMax];
  rte_mbuf* fout_[FlowTable::kBurstMax];  // out_ as the leader had it, for its followers
  void deliver_burst(rte_mbuf** pkts, unsigned k, Sink sink, void* ctx);
  // The burst route for several consumers (burst_multi_): every consumer's
  // program takes the burst in one call, consumer after consumer. Each
  // program is a header-only one (ProgramInstance::header_fast_path: no
  // conditions, application fields or z-anonymity), so nothing one consumer
  // does to a packet depends on the order in which the consumers see it.
  bool burst_multi_ = false;
  void deliver_burst_multi(rte_mbuf** pkts, unsigned k, Sink sink, void* ctx);
  // The burst's meta (orig, the tunnel bit of fragments) as consumers() sets it.
  void prepare_burst(unsigned k);
  // After a consumer's program ran on bufs_: verdicts applied, lengths
  // written back to the mbufs `ms`, the survivors handed to the sink.
  void finish_burst(unsigned consumer, rte_mbuf** ms, unsigned k, Sink sink, void* ctx);
  rte_mbuf* copies_[FlowTable::kBurstMax];
  bool copy_burst(unsigned consumer, rte_mbuf** pkts, unsigned k);
  uint8_t* bufs_[FlowTable::kBurstMax];
  uint32_t caps_[FlowTable::kBurstMax], wires_[FlowTable::kBurstMax];
  Verdict verdicts_[FlowTable::kBurstMax];
  bool wants_flows_ = false;
  bool single_modifier_ = false;  // one consumer, and it rewrites
  // Some consumer's program needs PacketMeta::initiating.
  bool learn_init_ = false;
  // Where the dispatcher did not learn it (one worker, which sees the whole
  // input in order; a worker polling its own queue, which sees its share):
  // made at the first such packet.
  std::unique_ptr<InitiatorLog> init_log_;
  InitiatorLog* shared_init_log_ = nullptr;  // live, workers polling their own queues: one log for all
  // The packet's PacketMeta::initiating: the dispatcher's, else learnt here
  // and written on the mbuf as the dispatcher would, where its held
  // segments and fragments find it again.
  uint8_t initiating(rte_mbuf* m, const uint8_t* data, uint32_t cap, const Decoded& d);
  // The log initiating() learns in (the shared one live, else this worker's).
  InitiatorLog* initiator_log();
  static uint8_t stamped_initiating(const rte_mbuf* m) {
    uint8_t b;
    return mbuf_initiating(m, b) ? b : 0;
  }
};

}  // namespace amon
