// Definitions the runtime's translation units share (not part of its
// interface): the per-packet evaluation context, action plans, the
// condition regex and BPF compilations, the exchange recall structures, and the
// small helpers of the packet path, inline so that each path keeps them
// inlined as when they were one file.
#pragma once

#include "runtime.h"

#include <bit>
#include <cstring>
#include <functional>
#include <stdexcept>

#include <hs/hs.h>
#include <pcap/pcap.h>
#include <openssl/rand.h>

#include "actions_rt.h"
#include "addr_text.h"
#include "echo.h"
#include "l7.h"
#include "checksum.h"
#include "keyed_hash.h"
#include "zanon.h"
#include "bytes.h"

namespace amon {

// What rules and conditions of one consumer see of the packet being processed.
struct ProgramInstance::Eval {
  const Decoded* d;
  const PacketMeta* m;
  ConsumerCounters* c;
  ApplyCtx* ctx;
  bool client_is_src;
  const uint8_t* client;  // clear client address
  uint32_t alen;
  uint8_t* buf;           // this consumer's copy
  // The packet's clear source and destination addresses (alen bytes each;
  // null: none), once its header addresses have been rewritten in buf.
  const uint8_t* old_src = nullptr;
  const uint8_t* old_dst = nullptr;
  bool drop = false;
  uint32_t protos = 0;  // packet_protos(), computed on first use (top bit: computed)
  bool have_user = false;
  uint64_t user = 0;
  // Set for a datagram of the plugin with the shortcut (ProtocolPlugin::
  // shortcut; the whole payload): its rewrite adds the sums of the bytes it
  // rewrites, before ([0]) and after ([1]), as 16-bit words at
  // their offsets in the payload; process() updates the checksum by their
  // difference instead of summing the payload before and after.
  uint64_t* l7_sums = nullptr;
  // A payload field's bytes removed from here on (payload offset;
  // UINT32_MAX: none):
  // the record ends there, its lengths stay (snap).
  uint32_t body_snap = UINT32_MAX;
};

// Where a packet on the general path will be cut, and how a part that
// cannot be kept protected ends (the policy's on_error).
struct CutState {
  uint32_t at = UINT32_MAX;  // UINT32_MAX: no cut
  bool snap = false;         // on_error = snap: the record ends at the cut, its lengths stay
  bool drop = false;         // on_error = drop
  bool none() const { return at == UINT32_MAX; }
  // What follows `from` cannot be kept protected: true when the packet is
  // dropped for it, else it is cut there (counted in `counter`).
  [[gnu::always_inline]] bool error(uint32_t from, uint64_t& counter, const Decoded& d, ConsumerCounters& c) {
    if (drop) return ++c.err_drop, true;
    // An IP fragment without its data is no valid fragment: drop it instead.
    // A snapped one keeps its lengths and stays one.
    if (!snap && (d.flags & kFlagFragment) && from <= d.payload_off) return ++c.err_drop, true;
    ++counter;
    at = std::min(at, from);
    return false;
  }
  // The record ends at the cut before any rewrite (a packet not decoded
  // through its addresses); snapped, once the outer layers are fixed.
  Verdict end_early(uint32_t& cap, uint32_t& wire, uint32_t& snap_at) const {
    if (snap) snap_at = std::min(snap_at, at);
    else cap = wire = at;
    return Verdict::Forward;
  }
};

// One packet on the general path: what its steps share.
struct ProgramInstance::GenPacket {
  uint8_t* buf;
  uint32_t& cap;
  uint32_t& wire;
  const Decoded& d;
  const PacketMeta& m;
  ConsumerCounters& c;
  bool protects_addr;
  uint8_t old_addrs[32] = {};  // the clear source then destination addresses, alen bytes each
  uint32_t alen = 0;           // 0: the addresses were not captured
  uint32_t so = 0, dof = 0;    // their offsets in buf
  const uint8_t* old_src = nullptr;
  const uint8_t* old_dst = nullptr;
  bool client_is_src = false, both = false;
  int pos_rule[2] = {-1, -1};  // the rule each address position took (quotes, ND and RIP map with it)
  bool addr_changed = false;
  // The transport checksum was right over Mobile IPv6's home addresses
  // (ProgramInstance::mobile_addrs), not the header's: computed again
  // over their rewrite at the end.
  bool home_sum = false;
  CutState cut;
  // The payload (to the transport's end, within what was captured) and
  // its checksum's bookkeeping: its sum before any rewrite, once taken.
  // The sums run over its first slen bytes, those the L4 checksum covers
  // (payload_sum_len).
  uint8_t* pl = nullptr;
  uint32_t plen = 0, slen = 0;
  uint16_t old_sum = 0;
  bool sum_taken = false, changed = false;
  uint64_t l7_sums[2] = {0, 0};  // see Eval::l7_sums
  void take_sum() {
    if (!sum_taken && plen) old_sum = csum_sum({pl, slen}), sum_taken = true;
  }
  // An address body is about to be rewritten: the sum of the payload as it
  // arrived, whatever its length.
  void body_sum() { old_sum = csum_sum({pl, slen}), sum_taken = changed = true; }
  bool error(uint32_t from, uint64_t& counter) { return cut.error(from, counter, d, c); }
};

// What a cut of the payload keeps of an ICMP error's quote or a neighbour
// discovery message (addr_bodies.cpp).
uint32_t kept_header(const Decoded& d, const uint8_t* pl, uint32_t plen);

struct ActionPlan {
  const ActionCall* call = nullptr;
  int zslot = -1;
  ZanonSlotInfo zinfo;
};

namespace {

inline bool is_addr_field(FieldId f) {
  const auto& F = l2l4::g_fields;
  return f == F.ip_src || f == F.ip_dst || f == F.ip_client || f == F.ip_server;
}

// Protocols a condition can name, as bits (1 << Registry::proto_id), so a
// test per packet is a mask. Resolved once from the registry.
struct ProtoBits {
  uint32_t eth, vlan, ip, ipv4, ipv6, tcp, udp, icmp, icmpv6, sctp, tunnel, gtp, addr_carrier;
  uint32_t link = 0;  // the link layer's own name (l2l4.h, LinkLayer), when one is registered under it
  uint32_t plugin[Registry::kMaxProtocolPlugins];  // by plugin index: the protocol its packets go by (its own, or the one it carries)
  static const ProtoBits& get() {
    static const ProtoBits b = [] {
      const Registry& r = Registry::instance();
      auto bit = [&](const char* n) {
        const int id = r.proto_id(n);
        if (id < 0) throw std::logic_error(std::string("protocol not registered: ") + n);
        return 1u << id;
      };
      ProtoBits x{bit("eth"),  bit("vlan"), bit("ip"),   bit("ipv4"),   bit("ipv6"),   bit("tcp"), bit("udp"),
                  bit("icmp"), bit("icmpv6"), bit("sctp"), bit("tunnel"), bit("gtp"),
                  bit("addr_carrier"), 0, {}};
      const auto& v = r.protocols();
      for (unsigned i = 0; i < v.size() && i < Registry::kMaxProtocolPlugins; ++i) x.plugin[i] = bit(v[plugin_proto(i)]->name);
      if (const LinkLayer* l = link_layer(); l && r.proto_id(l->name) >= 0) x.link = bit(l->name);
      return x;
    }();
    return b;
  }
};

// The bit of protocol `p` in a packet's set (0: not a protocol).
inline uint32_t proto_bit(const std::string& p) {
  const int id = Registry::instance().proto_id(p);
  return id < 0 ? 0 : 1u << id;
}

// The applications whose packets carry a protocol's fields: the inverse of
// packet_protos' application bits (0: none, a field no runtime finds).
inline uint32_t apps_of(uint32_t proto_bits) {
  const ProtoBits& B = ProtoBits::get();
  uint32_t a = 0;
  // Protocol plugin i is application kFirstPluginApp + i.
  const size_t n = Registry::instance().protocols().size();
  for (unsigned i = 0; i < n && i < Registry::kMaxProtocolPlugins; ++i)
    if (proto_bits & B.plugin[i]) a |= 1u << (kFirstPluginApp + i);
  return a;
}

inline uint32_t packet_protos(const Decoded& d, uint8_t app) {
  const ProtoBits& B = ProtoBits::get();
  uint32_t m = B.eth;
  if (d.n_vlan) m |= B.vlan;
  if (d.flags & kFlagLink) [[unlikely]] m |= B.link;
  if (d.n_encap || (d.flags & kFlagTunnel)) [[unlikely]] {
    m |= B.tunnel;
    for (int i = 0; i < d.n_encap; ++i)
      if (d.encap[i].kind == Encap::GtpU) m |= B.gtp;
  }
  if (!d.has_ip()) return m;
  m |= B.ip | (d.ip_version == 4 ? B.ipv4 : B.ipv6);
  switch (d.l4_proto) {
    case kProtoTcp: m |= B.tcp; break;
    case kProtoUdp: m |= B.udp; break;
    case kProtoIcmp: m |= B.icmp; break;
    case kProtoIcmpv6: m |= B.icmpv6; break;
    case kProtoSctp: m |= B.sctp; break;
    default: break;
  }
  if ((m & (B.tcp | B.udp)) && d.l4_hdr_len && (addr_carrier_port(d.sport) || addr_carrier_port(d.dport)))
    m |= B.addr_carrier;
  if (app >= kFirstPluginApp && app < kFirstPluginApp + Registry::kMaxProtocolPlugins) m |= B.plugin[app - kFirstPluginApp];
  return m;
}

// Roles: the end inside the policy's `clients` when exactly one end is,
// else the flow's initiator.
inline bool client_is_source(const dsl::Policy& pol, uint8_t family, const uint8_t* src, const uint8_t* dst,
                             bool initiator_is_src) {
  if (pol.clients.empty()) return initiator_is_src;
  bool s_in = false, d_in = false;
  for (const auto& cidr : pol.clients) {
    s_in = s_in || cidr.contains(family, src);
    d_in = d_in || cidr.contains(family, dst);
  }
  return s_in != d_in ? s_in : initiator_is_src;
}

// Both ends are users and take the client's rules: both inside `clients`,
// or neither (or no `clients`) and the flow's roles are uncertain. Keeping a
// "server" whose role is a guess could keep a user's address.
inline bool both_clients(const dsl::Policy& pol, uint8_t family, const uint8_t* src, const uint8_t* dst,
                         bool roles_uncertain) {
  if (pol.clients.empty()) return roles_uncertain;
  bool s_in = false, d_in = false;
  for (const auto& cidr : pol.clients) {
    s_in = s_in || cidr.contains(family, src);
    d_in = d_in || cidr.contains(family, dst);
  }
  return s_in == d_in && (s_in || roles_uncertain);
}


inline ApplyCtx packet_ctx(const Decoded& d, const PacketMeta& m, ConsumerCounters& c) {
  ApplyCtx ctx;
  ctx.ts_ns = m.ts_ns;
  ctx.d = &d;
  ctx.m = &m;
  ctx.counters = &c;
  return ctx;
}

// How many of the payload's first plen bytes (from d.payload_off) its L4
// checksum covers, so that a rewrite's sums take those alone. A UDP
// checksum covers the datagram by its own length, which may stop short of
// the IP payload's end (mDNS responders send such datagrams, fragmented
// too); the bytes after it are still the payload's to rewrite, but a sum
// that took their change would leave the checksum wrong. A first fragment
// alone: its UDP length is the datagram's, past the fragment's end.
[[gnu::always_inline]] inline uint32_t payload_sum_len(const uint8_t* buf, const Decoded& d, uint32_t plen) {
  if (d.l4_proto != kProtoUdp || !plen || d.payload_off < d.l4_off + 8) return plen;
  const uint32_t end = d.l4_off + rd16(buf + d.l4_off + 4);
  return end < d.payload_off + plen ? (end > d.payload_off ? end - d.payload_off : 0) : plen;
}

// HC' = ~(~HC + ~m + m') (RFC 1624 eqn. 3) for bytes whose sums before and
// after an application rewrite are sums[0] and sums[1] (Eval::l7_sums).
[[gnu::always_inline]] inline uint16_t csum_update_spans(uint16_t ck, const uint64_t sums[2]) {
  return csum_finish(csum_add(csum_add(uint16_t(~ck), uint16_t(~csum_fold(sums[0]))), csum_fold(sums[1])));
}

inline uint64_t splitmix_of(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The last n - i (0..7) bytes of s as a little-endian word, zero-extended:
// the tail of the word-at-a-time hashes below. A string of eight bytes or
// more gives it with one load of its last eight bytes, shifted (the same
// value as copying the tail into a zeroed word, without a variable-length
// memcpy call); shorter ones go byte by byte.
inline uint64_t tail_word(std::string_view s, size_t i) {
  static_assert(std::endian::native == std::endian::little);
  const size_t n = s.size(), rem = n - i;
  if (rem == 0) return 0;
  uint64_t w = 0;
  if (n >= 8) {
    std::memcpy(&w, s.data() + n - 8, 8);
    return w >> (8 * (8 - rem));
  }
  for (size_t j = i; j < n; ++j) w |= uint64_t(uint8_t(s[j])) << (8 * (j - i));
  return w;
}

inline uint64_t splitmix(uint64_t& s) {
  const uint64_t z = s;
  s += 0x9e3779b97f4a7c15ULL;
  return splitmix_of(z);
}

}  // namespace

// The Hyperscan databases of a policy's `~` conditions, one per regex,
// compiled once per policy; workers keep their own scratch.
struct Program::Regexes {
  std::vector<const dsl::Cond::Regex*> list;
  std::vector<hs_database_t*> dbs;
  void collect(const dsl::Cond& c) {
    for (auto& ch : c.children) collect(*ch);
    for (auto& r : c.regexes) list.push_back(&r);
  }
  void compile() {
    for (auto* r : list) {
      hs_database_t* db = nullptr;
      hs_compile_error_t* err = nullptr;
      if (hs_compile(r->source.c_str(), r->hs_flags | HS_FLAG_SINGLEMATCH, HS_MODE_BLOCK, nullptr, &db, &err) !=
          HS_SUCCESS) {
        std::string m = err ? err->message : "unknown error";
        hs_free_compile_error(err);
        throw std::runtime_error("regex /" + r->source + "/: " + m);
      }
      dbs.push_back(db);
    }
  }
  hs_database_t* db_of(const dsl::Cond::Regex* r) const {
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i] == r) return dbs[i];
    return nullptr;
  }
  ~Regexes() {
    for (auto* d : dbs) hs_free_database(d);
  }
};

// `select` given as a BPF expression, compiled by libpcap for Ethernet and
// run by its filter interpreter on the original bytes.
struct Program::Bpf {
  bpf_program prog{};
  explicit Bpf(const std::string& expr) {
    pcap_t* dead = pcap_open_dead(DLT_EN10MB, 262144);
    if (!dead) throw std::runtime_error("select: cannot create a pcap handle");
    if (pcap_compile(dead, &prog, expr.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0) {
      std::string e = pcap_geterr(dead);
      pcap_close(dead);
      throw std::runtime_error("select: " + e);
    }
    pcap_close(dead);
  }
  ~Bpf() { pcap_freecode(&prog); }
  bool match(const uint8_t* p, uint32_t cap, uint32_t wire) const {
    return bpf_filter(prog.bf_insns, p, wire, cap) != 0;
  }
};

struct ProgramInstance::ExchangeRecall {
  uint64_t key = 0;
  uint32_t t = 0;             // the query's time (memory units)
  bool record = false;        // a query: remember the decision
  const ExchangeMemo* hit = nullptr;  // a response: its query's decision
};

// Names of one message (RewriteHost) already decided by a zanon rule: the same name
// again (an owner repeating the question, a CNAME target and the owner
// after it) gets that decision, not a second observation and other masks:
// one decision per name per message.
struct ProgramInstance::MsgNames {
  struct Seen {
    std::string_view text;
    int rule;
    uint16_t cls;
    names::Decision d;
  };
  static constexpr unsigned kMax = 16;
  // Left uninitialised (a union with an empty constructor): entries are
  // written before they are read, and a message rarely has more than a few.
  union Slots {
    Slots() {}
    Seen s[kMax];
  } slots;
  Seen* seen = slots.s;
  unsigned n = 0;
};

inline void ProgramInstance::echo_parsed(const Eval& e, const uint8_t* a, uint32_t len) {
  if (echo_ && a >= e.buf && a + len <= e.buf + e.d->cap_len)
    echo_parsed_.emplace_back(uint32_t(a - e.buf), uint32_t(a - e.buf + len));
}

// The consumer's rules as a plugin that rewrites its messages itself sees
// them (protocol.h): each value gets its field's rule, as an occurrence
// would; names are decided once per message, and an exchange's names as its
// query had them. One per instance, made with it and pointed at each
// packet's Eval: setting a host up per packet cost as much as the rest of
// the call.
class ProgramInstance::PluginHost final : public RewriteHost {
 public:
  explicit PluginHost(ProgramInstance& self) : self_(self) {}
  // What a host fresh for this packet would hold: no exchange, no names.
  void begin(Eval& e) {
    e_ = &e;
    seen_.n = 0;
    open_ = false;
  }
  // Defined with ProgramInstance::decide_name (decisions.cpp), which they
  // inline: a second call level per name and per message cost as much as
  // the exchange's own look-up.
  names::Decision decide_name(FieldId f, std::string_view text, bool exchange, std::string_view shown = {}) override;
  bool open_exchange(uint32_t flow, unsigned query_dir, uint16_t id, std::string_view name, bool response,
                     bool& recalled) override;
  bool addr(FieldId f, uint8_t* a, uint8_t family) override {
    self_.echo_parsed(*e_, a, family == 4 ? 4 : 16);
    return self_.apply_addr_occ(f, a, family, *e_);
  }
  bool role_addr(uint8_t* a, uint8_t family) override {
    self_.echo_parsed(*e_, a, family == 4 ? 4 : 16);
    return self_.apply_role_addr(a, family, *e_);
  }
  bool mac(FieldId f, uint8_t* a) override {
    self_.echo_parsed(*e_, a, 6);
    return self_.apply_mac_occ(f, a, *e_);
  }
  bool modifies(FieldId f) override {
    const int ri = self_.pick(f, *e_);
    return ri >= 0 && self_.actions_[ri]->modifies;
  }
  bool protects_addr(uint8_t family, const uint8_t* a) const override {
    const dsl::Policy& pol = *self_.prog_.policy_;
    bool user = pol.clients.empty();
    for (const auto& cidr : pol.clients) user = user || cidr.contains(family, a);
    if (user ? self_.prog_.protects_client_addr_ : self_.prog_.protects_server_addr_) return true;
    // One of this packet's own addresses its header rewrote (roles by
    // evidence, outside `clients`): the same address in clear beside it
    // would undo the header's mapping.
    const uint32_t off = self_.own_addr_off(a, family, *e_);
    return off && std::memcmp(a, e_->buf + off, family == 4 ? 4 : 16) != 0;
  }
  void count_reverse_hidden() override { ++e_->c->reverse_hidden; }
  void next_message() override {
    seen_.n = 0;
    open_ = false;
  }
  void drop() override { e_->drop = true; }

 private:
  ProgramInstance& self_;
  Eval* e_ = nullptr;
  ExchangeRecall rc_;
  bool open_ = false;
  MsgNames seen_;  // default-initialised: its slots are not zeroed per message
};

inline void* ProgramInstance::consumer_of(uint8_t app) const {
  const size_t k = app - kFirstPluginApp;  // a plugin registered after this instance was made has no consumer state
  return k < plugin_consumer_.state.size() ? plugin_consumer_.state[k] : nullptr;
}

// Inline: the datagram shortcut takes it for every datagram, and a call
// level there (seven arguments passed on) cost a fifth of the exchange's
// whole set-up.
[[gnu::always_inline]] inline bool ProgramInstance::l7_by_plugin(const ProtocolPlugin& pp, void* state, void* consumer,
                                                                    uint8_t* pl, uint32_t avail, Eval& e,
                                                                    ProtoRewrite& at) {
  PluginHost& host = *host_;
  host.begin(e);
  const PacketMeta& m = *e.m;
  // The original bytes at the same offset (the copy is identical there:
  // nothing before the application layer rewrites payload bytes).
  const uint8_t* orig = m.orig + (pl - e.buf);
  at.flow_no = m.flow ? m.flow->flow_no : 0;
  at.from_initiator = m.initiator_is_src;
  at.sport = e.d->sport, at.dport = e.d->dport;
  return pp.rewrite(state, consumer, host, pl, orig, avail, at);
}


// Defined ahead of process() so that the common, unconditional case inlines
// there; the search through conditions stays out of line.
inline int ProgramInstance::pick(FieldId f, Eval& e) {
  if (!prog_.unconditional_) return pick_cond(f, e);
  int ri = prog_.fixed_rule_[f];
  if (ri >= 0) {
    if (e.c->rule_hits.size() < prog_.plans_.size()) e.c->rule_hits.resize(prog_.plans_.size());
    ++e.c->rule_hits[ri];
  }
  return ri;
}

}  // namespace amon
