// The per-consumer packet program: what a compiled policy does to one packet.
//
// A Program is built once per policy (start-up or reload) and shared
// read-only by all workers; each worker instantiates a ProgramInstance that
// owns the per-worker state of its actions (Crypto-PAn caches, hash
// contexts), so the packet path takes no lock and allocates nothing.
//
// The engine decodes a packet once (Decoded), looks up its flow, and calls
// ProgramInstance::process() once per consumer on that consumer's writable
// copy. Rewrites work by offset; length changes (cut) come last and every
// length and checksum is fixed before the packet leaves.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "amon_names.hpp"
#include "keyed_hash.h"
#include "l2l4.h"
#include "packet.h"
#include "users.h"
#include "zanon.h"
#include "policy.h"

struct hs_scratch;

namespace amon {

// Services shared by all workers (built by the engine).
struct SharedServices {
  zanon::Store* zstore = nullptr;
  std::array<uint8_t, 16> user_hash_key{};  // keys the hash of identifiers stored by the z-anon store
};

class Program;
class ProgramInstance;
struct EchoPreload;

// The plugin registry checked against this runtime (check_completeness in
// actions_rt.h), as one message naming each field or action and what it
// lacks; empty when complete. Program's constructor (every policy load and
// reload), `amon lint` and `amon check` refuse to go on when it is not.
std::string registry_problems();

// Everything about one action call that does not change per packet.
struct ActionPlan;

class Program {
 public:
  // Throws std::runtime_error with a message on an impossible combination the
  // checker could not see (it should have).
  Program(std::shared_ptr<const dsl::Policy> policy, int consumer_index, SharedServices* services);
  ~Program();

  const dsl::Policy& policy() const { return *policy_; }
  bool identity() const { return identity_; }
  bool protects_addresses() const { return protects_addresses_; }
  size_t rule_count() const { return policy_->rules.size(); }
  int consumer_index() const { return consumer_; }
  // The packet's application protocol and fields are needed (L7 rules, or
  // conditions that may test them).
  bool wants_l7() const { return wants_l7_; }
  bool wants_flows() const { return wants_flows_; }
  // Whether its packets must say which of their ends were seen initiating
  // flows (PacketMeta::initiating): guard_users_.
  bool learns_initiators() const { return guard_users_; }
  // Whether addresses outside `clients` that take ip.client's rule become
  // users of this consumer everywhere (learns_users_, users.h).
  bool learns_users() const { return learns_users_; }
  // Of a packet's two ends (1: source, 2: destination), those outside
  // `clients` that take ip.client's rule in it: the client of a flow with
  // neither end inside, both ends when its roles are uncertain. 0 unless
  // learns_users(). The offline pre-pass and the packet path both ask it.
  uint8_t outside_clients(const uint8_t* buf, uint32_t cap, const Decoded& d, const PacketMeta& m) const;
  uint8_t outside_clients(const uint8_t* src, const uint8_t* dst, uint8_t family, bool client_is_src,
                          bool uncertain) const;
  // Whether a PPTP client's address on its GRE (PacketMeta::pptp_client)
  // becomes a user of this consumer: it takes ip.client's rule there
  // (ProgramInstance::endpoint_action) and lies outside `clients`. The
  // offline pre-pass and the packet path both ask it.
  bool pptp_user(const uint8_t* a, uint8_t family) const;
  // Users learnt before the first packet (the offline pre-pass), shared
  // read-only by this program's instances; set before any is made.
  void set_known_users(std::shared_ptr<const UserTable> t) { known_users_ = std::move(t); }
  const UserTable* known_users() const { return known_users_.get(); }
  // Whether kept payload is searched for what this consumer rewrote (echo.h).
  bool echoes() const { return echoes_; }
  // Offline, the pre-pass's question (EchoPreload, echo.h): the rule that
  // rewrites a bytes value of field `f` wherever and whenever it comes,
  // so that what it makes of the value is known before the field is seen:
  // f is an identifier (FieldRole::Identifier), the first rule naming it
  // has no `when`, and its action decides by the value alone (zero,
  // redact, hash, cut, snap; not zanon, whose decision changes with the
  // users seen). -1: none.
  int echo_preload_rule(FieldId f) const;
  // The same for a name field: the decision that rule makes on every name
  // (hash: the keyed mask; redact, zero), as the instances decide it.
  bool echo_preload_name(FieldId f, names::Decision& d) const;
  // The same for addresses: ip.client's unconditional rule protects
  // (user_rule_) and decides by the value and the time alone (Crypto-PAn,
  // with its key's rotation; prefix, zero, hash...; not zanon), so every
  // user's address is rewritten by it wherever it travels. Then the
  // pre-pass preloads the users' addresses, and the echo search maps a
  // copy with that rule at the copy's time.
  bool echo_preload_addrs() const;
  bool in_clients(const uint8_t* a, uint8_t family) const;
  // Some rule names field f.
  bool has_rules(FieldId f) const { return f < field_rules_.size() && !field_rules_[f].empty(); }
  // The values the pre-pass found, every instance's echo table holds them
  // from the start; set before any instance is made.
  void set_echo_preload(std::shared_ptr<const EchoPreload> p) { echo_preload_ = std::move(p); }
  const EchoPreload* echo_preload() const { return echo_preload_.get(); }
  // This policy rewrites (or must fail closed on) fields of application `app` (App, l7.h).
  bool protects_app(uint8_t app) const { return app < 32 && (l7_protect_ & (1u << app)); }
  uint32_t protected_apps() const { return l7_protect_; }  // bit per App (l7.h)
  // Of those, the applications whose headers split over TCP segments the
  // engine may hold until whole (HTTP, plugins that hold: DNS over TCP, TLS).
  uint32_t held_apps() const;

  std::unique_ptr<ProgramInstance> instantiate() const;

 private:
  friend class ProgramInstance;
  std::shared_ptr<const dsl::Policy> policy_;
  int consumer_;
  SharedServices* services_;
  bool identity_ = true;
  bool protects_addresses_ = false;
  bool echoes_ = false;     // `echoes = map` where the policy protects something and keeps payload (echo.h)
  bool addr_text_ = true;  // `addr_text = map`: the packet's mapped addresses are mapped where kept payload writes them
  bool protects_client_addr_ = false, protects_server_addr_ = false;  // a protecting rule on ip.client/src/dst, ip.server/src/dst
  bool protects_anything_ = false;
  std::vector<std::unique_ptr<ActionPlan>> plans_;  // one per rule (index = Rule::index), plus payload_default
  int payload_default_plan_ = -1;
  std::vector<uint32_t> zslot_rule_;  // rule index of each z-anonymity slot
  std::vector<std::vector<uint32_t>> field_rules_;  // by FieldId: rule indexes in source order
  // No rule has a `when`: the rule that applies to a field never depends on
  // the packet, so it is chosen here once instead of searched per packet.
  bool unconditional_ = false;
  std::vector<int> fixed_rule_;  // by FieldId: the first rule naming it, -1 none
  int addr_rule_[2][2] = {{-1, -1}, {-1, -1}};  // [address is the source][address is the client]
  // A policy of header rules only (no conditions, select, application
  // fields or per-flow decisions) takes a header kernel (or process_hdr) on
  // plain TCP/UDP/ICMP-echo packets: the same rewrite, without the general
  // path's per-packet questions whose answers were fixed here.
  bool hdr_only_ = false;
  // The converse: a policy whose rules are all on application fields (no
  // conditions, select, MAC, address, payload or per-flow rules) runs the
  // general path compiled without those questions (process_general<true>).
  bool l7_only_ = false;
  // tunnel.addr without a rule naming it: the rule whose action the outer
  // addresses get (ip.server's, see doc/architecture.md "Tunnels"), -1 none;
  // tunnel_addr_zero_: zeroed instead (addresses protected, every ip.server
  // rule conditional).
  int tunnel_addr_default_ = -1;
  bool tunnel_addr_zero_ = false;
  // ip.client's unconditional rule, which a tunnel endpoint without a
  // tunnel.addr rule takes when it is a user (inside `clients`, or seen
  // initiating flows): a user's address never inherits the server's
  // weaker action. -1 none.
  int tunnel_client_rule_ = -1;
  // ip.client's unconditional rule when it protects: what an address inside
  // `clients` gets in every other address field (DNS answers, NBNS
  // records, ...), so a user's address is never written in clear beside its
  // pseudonym. -1 none, or ip.client is kept.
  int user_rule_ = -1;
  // Adds to the applications parsed those with an address field no rule
  // names, where users' addresses would otherwise go unvisited.
  void users_apps();
  bool payload_cut_whole() const;
  // No `clients`, and ip.server is not ruled as ip.client is: a host seen
  // initiating flows counts as a user also where it accepts connections
  // (ProgramInstance::both_users).
  bool guard_users_ = false;
  // `clients` set, and ip.server is not ruled as ip.client is: an address
  // outside `clients` that takes ip.client's rule somewhere is a user
  // everywhere afterwards (ProgramInstance::outside_users_).
  bool learns_users_ = false;
  std::shared_ptr<const UserTable> known_users_;
  std::shared_ptr<const EchoPreload> echo_preload_;
  bool tunnel_rules_ = false;   // a rule names tunnel.*, gre.key or gtp.teid
  int mac_rule_[2] = {-1, -1};  // eth.dst, eth.src
  int pay_rule_ = -1;           // payload: the rule naming it, else payload_default_plan_
  bool pay_counts_ = false;     // pay_rule_ is a rule (counted), not the default
  uint32_t l7_protect_ = 0;  // bit per App whose fields this policy rewrites
  uint32_t payload_apps_ = 0;  // bit per App whose plugin's payload field has a rule here
  bool has_l7_ = false;
  bool wants_l7_ = false;
  bool wants_flows_ = false;
  struct Regexes;
  std::unique_ptr<Regexes> regexes_;
  std::vector<std::pair<const dsl::Cond*, uint32_t>> proto_masks_;  // ProtoIn nodes and their masks
  struct Bpf;
  std::unique_ptr<Bpf> bpf_;  // `select` as a BPF expression (libpcap)
};

class RtAction;
namespace rt {
class CryptoPan;
}
class EchoScan;
struct EchoSpan;
inline constexpr unsigned EchoScanMax = 512;  // EchoScan::kMaxValue
struct ApplyCtx;
struct ProtocolPlugin;
struct ProtoRewrite;

class ProgramInstance {
 public:
  explicit ProgramInstance(const Program& p);
  ~ProgramInstance();

  // Applies the policy to `buf` (a writable copy of the packet, `cap`
  // captured bytes of a `wire`-byte frame). May shorten cap/wire (cut).
  Verdict process(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                  ConsumerCounters& c) {
    if (hdr_fast_ && hdr_packet(d, cap))
      return kernel_roles(buf, d, m) ? (this->*hdr_fn_)(buf, cap, wire, d, m, c) : process_hdr_users(buf, cap, wire, d, m, c);
    return process_general(buf, cap, wire, d, m, c);
  }

  // process() on n packets in order: bufs[i], caps[i], wires[i], ds[i],
  // ms[i] as its arguments, verdicts[i] its result. A header kernel takes
  // the burst in one call (one dispatch, and its rule hits counted once
  // per burst instead of once per packet).
  void process_burst(uint8_t* const* bufs, uint32_t* caps, uint32_t* wires, const Decoded* ds, const PacketMeta* ms,
                     Verdict* verdicts, unsigned n, ConsumerCounters& c) {
    if (hdr_fast_) return (this->*hdr_burst_fn_)(bufs, caps, wires, ds, ms, verdicts, n, c);
    for (unsigned i = 0; i < n; ++i) verdicts[i] = process_general(bufs[i], caps[i], wires[i], ds[i], ms[i], c);
  }

  // Rewrites the application fields of a header reassembled from held TCP
  // segments: `buf` is the first segment's headers followed by the stream
  // bytes (d describes it, m.l7 == Parsed). Counts decisions and rule hits
  // once for the whole header. Returns a StreamView::Result.
  uint8_t rewrite_stream(uint8_t* buf, const Decoded& d, const PacketMeta& m, ConsumerCounters& c);

  const Program& program() const { return prog_; }

  // A reload, on the worker that runs both: each Crypto-PAn action takes
  // the cache of a previous-generation action with the same key (the first
  // one not yet taken), so an unchanged key costs no new encryptions.
  void inherit_caches(ProgramInstance& old);
  // Crypto-PAn cache misses of this instance's actions (tests, statistics);
  // a cache shared with other consumers (rt::CryptoPan::share) counts with
  // the instance that owns it.
  uint64_t cryptopan_misses() const;
  // Appends this instance's Crypto-PAn actions (rules and z-anonymity
  // fallbacks), for the worker to share their caches.
  void cryptopan_actions(std::vector<rt::CryptoPan*>& out);
  // Users outside `clients` this instance learnt (users.h; statistics).
  const UserTable& outside_users() const { return outside_users_; }
  // The consumer's table of values found again (echo.h); null without.
  EchoScan* echo_scan() { return echo_.get(); }

  // Tests compare the header fast path (the policy's compiled kernel, or
  // the generic process_hdr) with the general path on the same packets;
  // nothing else turns it off.
  void set_header_fast_path(bool on, bool kernel = true);
  bool header_fast_path() const { return hdr_fast_; }
  // Off: a datagram of the plugin with the shortcut (ProtocolPlugin::
  // shortcut: DNS over UDP) takes every step of the general path (the
  // shortcut's equivalence test, test_dns_fast).
  void set_shortcut_path(bool on);
  // The packets process_encap takes a shortcut for: one UDP tunnel layer
  // (GTP-U, VXLAN...) over IPv4 without options or PPPoE, its UDP checksum
  // 0. Off: they take every step of process_encap (its equivalence test).
  static bool encap_fast_packet(const uint8_t* buf, uint32_t cap, const Decoded& d) {
    const EncapLayer& L = d.encap[0];
    return d.n_encap == 1 && L.udp_off && L.ip_version == 4 && L.l3_hdr_len == 20 && !L.pppoe_off &&
           L.udp_off + 8u <= cap && buf[L.udp_off + 6] == 0 && buf[L.udp_off + 7] == 0;
  }
  void set_encap_fast_path(bool on) { encap_fast_ = on; }
  bool header_kernel() const { return hdr_fast_ && hdr_fn_ != &ProgramInstance::process_hdr; }
  // What the header kernel does past a packet's headers (d.payload_off) on
  // a packet it takes (hdr_packet and kernel_roles): kKeepsPayload, it
  // neither reads nor writes a byte there; kCutsPayload, it cuts them off
  // and reads none; 0, neither can be said (no kernel, or an action that
  // rewrites the payload or may look at the packet beyond its field). The
  // engine copies only the headers for a consumer whose kernel cuts.
  static constexpr uint8_t kKeepsPayload = 1, kCutsPayload = 2;
  uint8_t kernel_payload() const { return header_kernel() ? hk_.payload : 0; }
  // An unfragmented, untunnelled TCP, UDP or ICMP (not error) packet whose
  // headers were captured, decoded without error and outside PPPoE.
  // The kernels give each address its role's rule; a packet whose two ends
  // are both users (roles uncertain, or both inside `clients`) takes the
  // general path, which gives both the client's.
  bool kernel_roles(const uint8_t* buf, const Decoded& d, const PacketMeta& m) const {
    return !m.roles_uncertain && (!clients_set_ || !both_inside(buf, d)) &&
           (!guard_users_ || !server_initiates(buf, d, m)) && (!learns_users_ || !server_user(buf, d, m));
  }
  // Program::guard_users_: whether the packet's server end was seen
  // initiating flows (PacketMeta::initiating).
  bool server_initiates(const uint8_t* buf, const Decoded& d, const PacketMeta& m) const;
  // Program::learns_users_: learns the packet's ends that take ip.client's
  // rule outside `clients` (Program::outside_clients), then says whether its
  // server end is such a user.
  bool server_user(const uint8_t* buf, const Decoded& d, const PacketMeta& m) const;
  bool both_inside(const uint8_t* buf, const Decoded& d) const;
  // Both ends of the packet take ip.client's rules: both_clients, or (no
  // `clients`, Program::guard_users_) the server end was seen initiating
  // flows of its own, so it is a user.
  bool both_users(const uint8_t* src, const uint8_t* dst, uint32_t alen, bool client_is_src, const PacketMeta& m);
  // What a tunnel endpoint without a tunnel.addr rule gets: `dflt`
  // (ip.server's), or ip.client's rule for a user's address or a flow's
  // client (`client`: PacketMeta::pptp_client).
  RtAction* endpoint_action(RtAction* dflt, const uint8_t* a, uint8_t family, bool client = false);
  bool teredo_origin_rule(uint8_t* buf, uint32_t cap, const EncapLayer& L, RtAction* act, ApplyCtx& ctx);
  bool teredo_trailer_rule(uint8_t* buf, uint32_t cap, const EncapLayer& L, RtAction* act, bool zero, ApplyCtx& ctx);
  // Whether an address is a user's: inside `clients`, or (Program::guard_users_)
  // seen initiating flows.
  bool is_user(const uint8_t* a, uint8_t family);
  static bool hdr_packet(const Decoded& d, uint32_t cap) {
    return d.status == DecodeStatus::Ok && d.flags == 0 && d.pppoe_off == 0 && d.ip_version != 0 && d.l4_hdr_len &&
           (d.l4_proto == kProtoTcp || d.l4_proto == kProtoUdp || d.l4_proto == kProtoIcmp ||
            d.l4_proto == kProtoIcmpv6) &&
           d.payload_off <= cap;
  }

 private:
  struct Eval;
  bool eval(const dsl::Cond& c, Eval& e);
  int pick(FieldId f, Eval& e);       // the rule for field f in this packet, -1 none (counts the hit)
  int pick_cond(FieldId f, Eval& e);  // pick() for policies with conditions
  struct ExchangeRecall;
  struct MsgNames;
  names::Decision decide_name(FieldId f, std::string_view text, Eval& e, ExchangeRecall* recall = nullptr,
                              MsgNames* seen = nullptr);
  // z: the rule decides by z-anonymity (echo_ records what its fallback hid as such).
  names::Decision decide_name_in(FieldId f, std::string_view text, Eval& e, ExchangeRecall* recall, MsgNames* seen,
                                 bool& z);
  bool apply_text(FieldId f, uint8_t* p, uint32_t len, Eval& e);  // false: drop
  bool apply_addr_occ(FieldId f, uint8_t* a, uint8_t family, Eval& e);
  bool apply_mac_occ(FieldId f, uint8_t* a, Eval& e);  // false: drop
  bool apply_role_addr(uint8_t* a, uint8_t family, Eval& e, bool client = false);  // ProtoOcc::role; false: drop
  bool own_addr(uint8_t* a, uint8_t family, const Eval& e) const;  // a packet's own address: its header's mapping
  uint32_t own_addr_off(const uint8_t* a, uint8_t family, const Eval& e) const;  // 0: not its own
  bool l7_plugin(const ProtocolPlugin& pp, void* state, uint8_t* payload, uint32_t len, Eval& e);  // false: not rewritten
  // A plugin that rewrites its messages itself (ProtocolPlugin::rewrite),
  // through a PluginHost on this consumer's rules: false, not rewritten.
  class PluginHost;
  struct HostDelete {
    void operator()(PluginHost* h) const;
  };
  std::unique_ptr<PluginHost, HostDelete> host_;
  // `state`: the worker's parse state of the plugin (L7Parse::state_of);
  // `consumer`: its make_consumer state for this instance.
  // `at`: its protects and sums set, the rest set here.
  bool l7_by_plugin(const ProtocolPlugin& pp, void* state, void* consumer, uint8_t* payload, uint32_t len, Eval& e,
                    ProtoRewrite& at);
  void* consumer_of(uint8_t app) const;
  // Each plugin's per-consumer state (ProtocolPlugin::make_consumer), by
  // plugin index; freed with the instance (also when its constructor throws).
  struct PluginConsumers {
    std::vector<void*> state;
    PluginConsumers() = default;
    PluginConsumers(const PluginConsumers&) = delete;
    PluginConsumers& operator=(const PluginConsumers&) = delete;
    ~PluginConsumers();
  } plugin_consumer_;
  struct NdMap {
    const uint8_t *old_src, *old_dst, *new_src, *new_dst;
    const int* pos_rule;  // the rule each address position took, -1 none
    bool both, client_is_src, protects_addr;
  };
  bool nd_addr(uint8_t* a, unsigned bits, const NdMap& nm, Eval& e, ApplyCtx& ctx, unsigned alen = 16);
  uint32_t nd_body(uint8_t* buf, const Decoded& d, uint32_t plen, const NdMap& nm, Eval& e, ApplyCtx& ctx);
  bool l7_rewrite(uint8_t* buf, const Decoded& d, Eval& e);  // false: drop
  // Applies the rule of a plugin's payload field f (ProtocolPlugin::
  // payload_field) to the payload bytes of `avail` payload bytes: the n
  // spans, or all of them when spans is null. Sets e.body_snap, e.drop.
  struct ByteSpan {
    uint32_t off, len;
  };
  void apply_payload(FieldId f, uint8_t* pl, uint32_t avail, const ByteSpan* spans, unsigned n, Eval& e);
  // general_path's snap point: the record ends there once the outer
  // layers are fixed (UINT32_MAX: none).
  uint32_t snap_at_ = UINT32_MAX;
  // client_is_src; copies the clear source and destination addresses to
  // old_addrs (2 x alen bytes; alen = 0 when they were not captured).
  bool roles(const uint8_t* buf, uint32_t cap, const Decoded& d, const PacketMeta& m, uint8_t* old_addrs, uint32_t& alen);
  Verdict process_general(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                          ConsumerCounters& c);
  // A packet carried in encapsulations (d.n_encap): the general path on the
  // inner packet, then the outer layers' lengths and checksums (encap_rt.cpp).
  Verdict process_encap(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                        ConsumerCounters& c);
  // The outer layers' rules (inner MACs, tunnel.addr, identifiers), from the
  // general path once select has passed. false: drop.
  bool encap_rules(uint8_t* buf, uint32_t cap, const Decoded& d, Eval& e, ApplyCtx& ctx);
  uint8_t encap_old_[kMaxEncap][32] = {};  // each layer's addresses before encap_rules
  uint8_t encap_changed_ = 0;             // bit per layer: its addresses were rewritten
  // An AYIYA layer's identity is the sending end's tunnel address, written
  // again in the packet it carries: before the rewrite, which address of
  // that packet it is (kIdSrc, kIdDst; kIdOther: neither, encap_rules zeroes
  // it where addresses are protected); after, it takes that address's new
  // value (one address, one treatment).
  enum : uint8_t { kIdNone, kIdSrc, kIdDst, kIdOther };
  uint8_t ayiya_id_[kMaxEncap] = {};
  void ayiya_note(const uint8_t* buf, uint32_t cap, const Decoded& d);
  void ayiya_follow(uint8_t* buf, uint32_t cap, const Decoded& d) const;
  // The general path; kL7Only drops what Program::l7_only_ rules out.
  template <bool kL7Only>
  Verdict general_path(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                       ConsumerCounters& c);
  // Its steps (general.cpp, addr_bodies.cpp), on what they share of one
  // packet (GenPacket, runtime_impl.h). A bool step returns false for a
  // drop it has counted.
  struct GenPacket;
  bool l2_rules(GenPacket& g, Eval& e, ApplyCtx& ctx);
  // A link layer's values (802.11 addresses, SSIDs, elements; link.cpp),
  // and a frame of it that carries no IP. false: drop (counted).
  bool link_rules(GenPacket& g, Eval& e);
  template <bool kL7Only>
  Verdict link_body(GenPacket& g, Eval& e, ApplyCtx& ctx);
  std::unique_ptr<LinkOccs> link_occs_;
  Verdict undecoded(GenPacket& g);
  bool l7_shortcut(GenPacket& g, Eval& e, Verdict& v);  // true: done, with verdict v
  bool addr_rules(GenPacket& g, Eval& e, ApplyCtx& ctx);
  bool mobile_addrs(GenPacket& g, Eval& e);  // false: drop (counted)
  void mobile_sum(GenPacket& g);
  bool opaque_and_bodies(GenPacket& g, Eval& e, ApplyCtx& ctx);
  bool addr_bodies(GenPacket& g, Eval& e, ApplyCtx& ctx);
  bool icmp_quote(GenPacket& g, Eval& e);
  bool rip_body(GenPacket& g, bool ripng, Eval& e, ApplyCtx& ctx);
  void mptcp_addrs(GenPacket& g, Eval& e);
  bool l7_and_body(GenPacket& g, Eval& e);
  template <bool kL7Only>
  bool payload_rule(GenPacket& g, Eval& e, ApplyCtx& ctx);
  void addr_text(GenPacket& g);
  // process() for a header-only policy on such a packet (see Program::hdr_only_).
  Verdict process_hdr(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                      ConsumerCounters& c) {
    return hdr_path(buf, cap, wire, d, m, c, false);
  }
  // The same on a packet the kernels leave (kernel_roles: its two ends may
  // both be users), which then decides as the general path does whether
  // both take the client's rules. A flood of spoofed datagrams (roles
  // uncertain) stays on the header path.
  Verdict process_hdr_users(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                            ConsumerCounters& c) {
    return hdr_path(buf, cap, wire, d, m, c, true);
  }
  Verdict hdr_path(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                   ConsumerCounters& c, bool decide_both);
  bool hdr_fast_ = false;
  // The plugin with the datagram shortcut (ProtocolPlugin::shortcut) and
  // its application (0: none): span_app_ always, shortcut_app_ while the
  // shortcut is on.
  const ProtocolPlugin* shortcut_pp_ = nullptr;
  void* shortcut_consumer_ = nullptr;  // its consumer_of(), looked up once
  // Its rewrite's ProtoRewrite (protects fixed, sums into shortcut_sums_):
  // filling a fresh one per datagram cost more than its two changing fields.
  ProtoRewrite shortcut_at_{};
  uint64_t shortcut_sums_[2] = {};
  uint8_t shortcut_app_ = 0, span_app_ = 0;
  bool encap_fast_ = true;
  // The header path compiled for this policy's shape: the address actions
  // of the two slots (client/server, or source/destination when the rules
  // name positions) and the payload action are template arguments, so the
  // usual policies run without a branch or call on what the policy is.
  using HdrFn = Verdict (ProgramInstance::*)(uint8_t*, uint32_t&, uint32_t&, const Decoded&, const PacketMeta&,
                                             ConsumerCounters&);
  HdrFn hdr_fn_ = &ProgramInstance::process_hdr;
  using HdrBurstFn = void (ProgramInstance::*)(uint8_t* const*, uint32_t*, uint32_t*, const Decoded*,
                                               const PacketMeta*, Verdict*, unsigned, ConsumerCounters&);
  HdrBurstFn hdr_burst_fn_ = &ProgramInstance::process_hdr_burst;
  void process_hdr_burst(uint8_t* const* bufs, uint32_t* caps, uint32_t* wires, const Decoded* ds,
                         const PacketMeta* ms, Verdict* verdicts, unsigned n, ConsumerCounters& c);
  template <uint8_t X, uint8_t Y, uint8_t PO>
  Verdict hdr_kernel(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                     ConsumerCounters& c);
  template <uint8_t X, uint8_t Y, uint8_t PO>
  void hdr_kernel_burst(uint8_t* const* bufs, uint32_t* caps, uint32_t* wires, const Decoded* ds,
                        const PacketMeta* ms, Verdict* verdicts, unsigned n, ConsumerCounters& c);
  // The kernel's work on one packet, rule hits aside (hdr_kernel and
  // hdr_kernel_burst count them).
  template <uint8_t X, uint8_t Y, uint8_t PO>
  Verdict hdr_apply(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                    ConsumerCounters& c);
  struct HdrKernel {
    bool by_role = true;        // slots: client, server (else source, destination)
    bool mac_ts = false;        // every MAC rule is timestamp()
    bool addr_mod = false;      // some address action changes the address
    bool text = false;          // addr_mod and `addr_text = map`: the payload is scanned for the addresses as text
    RtAction* act[2] = {};      // slot actions
    RtAction* pay = nullptr;
    uint8_t nhits = 0;
    uint16_t hits[6] = {};      // rules applied to every such packet (a rule on two fields counts twice)
    // FlowState::memo_owner of this consumer when the client slot's
    // Crypto-PAn result is kept in the flow (0: it is not; see choose_hdr_kernel).
    uint8_t memo_id = 0;
    uint8_t payload = 0;  // kernel_payload()
  } hk_;
  void choose_hdr_kernel();
  uint64_t user_of(const uint8_t* client, uint32_t alen);
  uint64_t user_hash(const uint8_t* client, uint32_t alen);
  // Each worker keeps the user hashes (SipHash under the engine's user key,
  // a function of the address alone) of recent clients: 2-way sets found by
  // a cheap hash and confirmed by comparing the address.
  struct UserSlot {
    uint64_t a = 0, b = 0;  // the address (IPv4: a's low half)
    uint64_t user = 0;
    uint32_t alen = 0;      // 0: free
  };
  static constexpr size_t kUserSets = 1024;
  std::vector<UserSlot> users_;  // empty unless the policy has zanon rules
  // Addresses the packets said were seen initiating a flow
  // (PacketMeta::initiating, Program::guard_users_), for is_user's answer
  // on addresses other than a packet's own two (a DNS answer's, a tunnel
  // endpoint's). Direct-mapped by a hash of the address; a collision
  // forgets the older one. Per worker: such an address is known once a
  // packet of it has reached this worker.
  struct InitiatorSlot {
    uint64_t a = 0, b = 0;
    uint32_t alen = 0;  // 0: free
  };
  static constexpr size_t kInitiators = 4096;
  // Mutable: learnt while kernel_roles (const) routes packets.
  mutable std::vector<InitiatorSlot> initiators_;
  bool guard_users_ = false;
  // Program::learns_users_: the users this worker learnt (outside_users_, kUserSetsLog2
  // sets, 128 KiB), and those of the offline pre-pass (Program::known_users_).
  // Per worker, as initiators_: live, an address is a user on a worker
  // once it took ip.client's rule there or in the pre-pass.
  static constexpr unsigned kUserSetsLog2 = 12;
  bool learns_users_ = false;
  mutable UserTable outside_users_{1};  // sized in the constructor when learns_users_
  const UserTable* known_users_ = nullptr;
  bool known_user(const uint8_t* a, uint32_t alen) const {
    return outside_users_.has(a, alen) || (known_users_ && known_users_->has(a, alen));
  }
  // Learns the ends Program::outside_clients gives; whether both ends take
  // ip.client's rule (both inside `clients`, or the server end a user).
  bool outside_roles(const uint8_t* src, const uint8_t* dst, uint32_t alen, bool client_is_src, bool uncertain) const;
  InitiatorSlot* initiator_slot(const uint8_t* a, uint32_t alen, uint64_t& x, uint64_t& y) const;
  bool known_initiator(const uint8_t* a, uint32_t alen) const;
  bool initiator_is_server(const uint8_t* src, const uint8_t* dst, uint32_t alen, bool client_is_src,
                           const PacketMeta& m) const;
  void decide_flow(const uint8_t* server, const uint8_t* client, uint32_t alen, const PacketMeta& m,
                   ConsumerCounters& c);

  const Program& prog_;
  std::vector<std::unique_ptr<RtAction>> actions_;  // parallel to prog_.plans_
  bool clients_set_ = false;  // the policy has a `clients` set
  KeyedHash uhash_;
  zanon::Scope zscope_;
  std::vector<std::unique_ptr<RtAction>> zfallback_;  // per rule: zanon's fallback as an action
  std::vector<uint64_t> name_key_;                    // per rule: hash(key=K) seed for names
  // Per rule: what decide_name does, resolved once (not by action name and
  // argument lookups per name).
  struct NamePlan {
    enum Kind : uint8_t { Keep, Drop, Hash, Redact, Zanon } kind = Keep;
    enum Fallback : uint8_t { FbMask, FbHash, FbRedact, FbSld } fb = FbMask;
    bool flat = false;  // redact(shape=length), as the action or the fallback
    zanon::ZParams zp;
  };
  std::vector<NamePlan> name_plan_;
  std::vector<uint16_t> field_class_;                 // by FieldId: z-anonymity value class
  // Exchange memory (RewriteHost::open_exchange; a DNS query and its
  // response): a response's name takes the z-anonymity decision its query
  // got, so one exchange is one occurrence with one decision, whatever the
  // store says by the time the response passes. Keyed by (flow number,
  // query direction, exchange id, name); 4-way sets, the oldest entry of a
  // set is replaced. A response whose query is not here (capture started
  // later, replaced, older than kExchMaxAge) is decided at its own time.
  // Empty unless a plugin asks for it (ConsumerSetup::exchanges).
  struct ExchangeMemo {
    uint64_t key = 0;     // 0: free
    uint32_t t = 0;       // query time, ns >> 20 (~1 ms units, wraps after ~52 days)
    uint16_t rule = 0;    // the rule that decided (a response picking another rule decides anew)
    uint8_t outcome = 0;  // ZOutcome
    uint8_t sld_keep = 0; // labels kept by fallback=sld
  };
  enum class ZOutcome : uint8_t { Released = 1, Hidden = 2, Sld = 3 };
  names::Decision decide_zanon(FieldId f, int ri, const NamePlan& np, std::string_view text, Eval& e,
                               ExchangeRecall* recall);  // Sld: fallback=sld released the registrable domain
  static constexpr unsigned kExchSets = 1024, kExchWays = 4;
  static constexpr uint32_t kExchMaxAge = uint32_t(60ULL * 1000000000ULL >> 20);  // the UDP flow timeout
  std::vector<ExchangeMemo> exch_;
  uint64_t exch_secret_ = 0;
  ExchangeMemo& exch_slot(uint64_t key);
  const ExchangeMemo* exch_find(uint64_t key, uint32_t now) const;
  uint64_t exch_key(uint32_t flow, unsigned qdir, uint16_t id, std::string_view qname) const;
  // libpsl answers in ~1 us; names repeat, so each worker remembers the
  // registrable-domain label count of recent names: 2-way sets (a
  // direct-mapped table thrashed on a few hundred names), tagged by the
  // store's keyed 128-bit hash of the name, which the caller has anyway.
  struct SldInfo {
    uint8_t keep = 0;      // labels of the registrable domain (0: none)
    uint8_t total = 0;     // labels of the name
    uint16_t sld_len = 0;  // bytes of the registrable domain at the end of the name (when keep < total)
  };
  struct SldSlot {
    uint64_t tag = 0;  // 0: free
    SldInfo info;
  };
  static constexpr size_t kSldSets = 4096;
  std::vector<SldSlot> sld_cache_ = std::vector<SldSlot>(2 * kSldSets);
  SldInfo sld_info(std::string_view name, const zanon::Hash128& h);
  // The store's keyed 128-bit hashes of recent names and of their
  // registrable domains (~300 instructions of SipHash each) are functions of
  // the name's bytes, its scope and the store's fixed key only, so each
  // worker keeps them for names seen recently: 2-way sets, found by a cheap
  // keyed hash and confirmed by comparing the bytes. Only these hashes and the
  // registrable-domain split are kept; every occurrence is still observed.
  struct alignas(64) NameKeys {
    static constexpr unsigned kText = 76;  // longer names are hashed each time
    uint64_t tag = 0;                      // 0: free
    zanon::Hash128 h, sld_h;
    uint16_t cls = 0, kind = 0;
    uint8_t len = 0;
    bool have_si = false, have_sld_h = false;
    SldInfo si;
    char text[kText];
  };
  static_assert(sizeof(NameKeys) == 128);
  static constexpr size_t kNameKeySets = 1024;
  std::vector<NameKeys> name_keys_;  // empty unless a name rule uses zanon
  uint64_t name_keys_secret_ = 0;
  NameKeys* name_keys(zanon::Scope sc, std::string_view text, const zanon::Store& st);
  // The same hash of registrable domains, by their own bytes: the names of
  // a flood of random labels are each new to name_keys_, their registrable
  // domain is one. Direct-mapped, confirmed by the bytes as there.
  struct alignas(64) SldKey {
    static constexpr unsigned kText = 35;  // longer ones are hashed each time
    uint64_t tag = 0;                      // 0: free
    zanon::Hash128 h;
    uint16_t cls = 0, kind = 0;
    uint8_t len = 0;
    char text[kText];
  };
  static_assert(sizeof(SldKey) == 64);
  static constexpr size_t kSldKeys = 512;
  std::vector<SldKey> sld_keys_;  // sized with name_keys_
  uint64_t name_tag(zanon::Scope sc, std::string_view text) const;
  zanon::Hash128 sld_key(zanon::Scope sc, std::string_view sld, const zanon::Store& st);
  ::hs_scratch* hs_ = nullptr;
  // Program::echoes_: the values this consumer rewrote, searched for in the
  // payload it keeps (echo.h); null without.
  std::unique_ptr<EchoScan> echo_;
  void echo_text(GenPacket& g);
  // Where a plugin that rewrites its messages itself (ProtocolPlugin::
  // rewrite, which locates no occurrence) had an address or MAC decided in
  // this packet: offsets in the packet, never rewritten by echo_text.
  std::vector<std::pair<uint32_t, uint32_t>> echo_parsed_;
  void echo_parsed(const Eval& e, const uint8_t* a, uint32_t len);
  std::vector<EchoSpan> echo_keep_;  // echo_text's spans not searched, reused per packet
  // The packet echo_text searches, for the user address rule's mapping of
  // a preloaded address (EchoScan::AddrMap: its time, a key's rotation).
  ApplyCtx* echo_ctx_ = nullptr;
  static bool echo_map_addr(void* self, const uint8_t* old, uint8_t* out, unsigned alen);
  static bool shortcut_datagram(const Decoded& d, const PacketMeta& m, uint8_t app);
  // The value at p (len bytes) before an action rewrites it, for echo_.
  uint8_t echo_old_[EchoScanMax] = {};
};

}  // namespace amon
