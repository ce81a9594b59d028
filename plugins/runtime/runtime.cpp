#include "runtime.h"

#include <bit>
#include <cstring>
#include <functional>
#include <stdexcept>

#include <hs/hs.h>
#include <pcap/pcap.h>
#include <openssl/rand.h>

#include "actions_rt.h"
#include "l7.h"
#include "checksum.h"
#include "keyed_hash.h"
#include "zanon.h"

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
  bool drop = false;
  uint32_t protos = 0;  // packet_protos(), computed on first use (top bit: computed)
  bool have_user = false;
  uint64_t user = 0;
  // Set for a UDP DNS message (the whole payload): l7_dns adds the sums of
  // the bytes it rewrites, before ([0]) and after ([1]), as 16-bit words at
  // their offsets in the payload; process() updates the checksum by their
  // difference instead of summing the payload before and after.
  uint64_t* l7_sums = nullptr;
};

struct ActionPlan {
  const ActionCall* call = nullptr;
  int zslot = -1;
  ZanonSlotInfo zinfo;
};

namespace {

bool is_addr_field(FieldId f) {
  const auto& F = l2l4::g_fields;
  return f == F.ip_src || f == F.ip_dst || f == F.ip_client || f == F.ip_server;
}

// Protocols a condition can name, as bits, so a test per packet is a mask.
enum ProtoBit : uint32_t {
  kPEth = 1, kPVlan = 2, kPIp = 4, kPIpv4 = 8, kPIpv6 = 16, kPTcp = 32, kPUdp = 64, kPIcmp = 128,
  kPIcmpv6 = 256, kPSctp = 512, kPDns = 1024, kPTls = 2048, kPHttp = 4096,
};

uint32_t proto_bit(const std::string& p) {
  static const std::pair<const char*, uint32_t> names[] = {
      {"eth", kPEth},   {"vlan", kPVlan},     {"ip", kPIp},     {"ipv4", kPIpv4}, {"ipv6", kPIpv6},
      {"tcp", kPTcp},   {"udp", kPUdp},       {"icmp", kPIcmp}, {"icmpv6", kPIcmpv6},
      {"sctp", kPSctp}, {"dns", kPDns},       {"tls", kPTls},   {"http", kPHttp}};
  for (auto& [n, b] : names)
    if (p == n) return b;
  return 0;  // a name the checker allowed but no packet has
}

uint32_t packet_protos(const Decoded& d, uint8_t app) {
  uint32_t m = kPEth;
  if (d.n_vlan) m |= kPVlan;
  if (!d.has_ip()) return m;
  m |= kPIp | (d.ip_version == 4 ? kPIpv4 : kPIpv6);
  switch (d.l4_proto) {
    case kProtoTcp: m |= kPTcp; break;
    case kProtoUdp: m |= kPUdp; break;
    case kProtoIcmp: m |= kPIcmp; break;
    case kProtoIcmpv6: m |= kPIcmpv6; break;
    case kProtoSctp: m |= kPSctp; break;
    default: break;
  }
  if (app == uint8_t(App::Dns) || app == uint8_t(App::DnsTcp)) m |= kPDns;
  if (app == uint8_t(App::Tls) || app == uint8_t(App::Quic)) m |= kPTls;
  if (app == uint8_t(App::Http)) m |= kPHttp;
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

inline uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
// One 2-byte store: the checksums read these fields back as part of wider
// words, and two byte stores under one load stall store forwarding.
inline void wr16(uint8_t* p, uint16_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap16(v);
  std::memcpy(p, &v, 2);
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

Program::Program(std::shared_ptr<const dsl::Policy> policy, int consumer_index, SharedServices* services)
    : policy_(std::move(policy)), consumer_(consumer_index), services_(services) {
  if (consumer_ < 0 || consumer_ >= kMaxConsumers)
    throw std::runtime_error("at most " + std::to_string(kMaxConsumers) + " consumers");
  const auto& F = l2l4::g_fields;
  const auto& rules = policy_->rules;
  plans_.resize(rules.size() + 1);
  int zslots = 0;
  const L7Fields& L = L7Fields::get();
  field_rules_.resize(Registry::instance().fields().size());
  regexes_ = std::make_unique<Regexes>();
  for (const auto& r : rules) {
    if (r.when) regexes_->collect(*r.when);
    auto plan = std::make_unique<ActionPlan>();
    plan->call = &r.action;
    bool modifies = r.action.desc->name != "keep";
    bool flow_addr = false;  // zanon on ip.* is decided once per flow and needs a slot
    for (const FieldDesc* f : r.fields) flow_addr = flow_addr || is_addr_field(f->id);
    if (r.action.desc->name == "zanon" && flow_addr) {
      if (zslots == kZSlotsPerConsumer)
        throw std::runtime_error(r.loc.file + ":" + std::to_string(r.loc.line) + ": at most " +
                                 std::to_string(kZSlotsPerConsumer) + " zanon rules on ip.* fields per policy");
      plan->zslot = zslots;
      plan->zinfo.bit = consumer_ * kZSlotsPerConsumer + zslots;
      plan->zinfo.z = r.action.int_or("z", 10);
      plan->zinfo.dt_ns = r.action.int_or("dt", 0);
      zslot_rule_.push_back(r.index);
      ++zslots;
    }
    for (const FieldDesc* f : r.fields) {
      field_rules_[f->id].push_back(r.index);
      if (L.is_l7(f->id)) {
        has_l7_ = true;
        if (modifies) {
          uint32_t apps = f->protocol == "dns" ? (1u << int(App::Dns) | 1u << int(App::DnsTcp))
                          : f->protocol == "tls" ? (1u << int(App::Tls) | 1u << int(App::Quic))
                                                 : 1u << int(App::Http);
          l7_protect_ |= apps;
          protects_anything_ = true;
        }
        if (modifies) identity_ = false;
        continue;
      }
      // field_rules_ (above) is what process() reads; a field outside L2-L4
      // and L7 has no place in it yet.
      if (f->id != F.eth_src && f->id != F.eth_dst && !is_addr_field(f->id) && f->id != F.payload)
        throw std::runtime_error(r.loc.file + ":" + std::to_string(r.loc.line) + ": field '" + f->name +
                                 "' is not handled by this engine yet");
      if (modifies) {
        protects_anything_ = true;
        if (is_addr_field(f->id)) protects_addresses_ = true;
      }
    }
    if (modifies) identity_ = false;
    plans_[r.index] = std::move(plan);
  }
  if (policy_->payload_default && policy_->payload_default->desc->name != "keep") {
    auto plan = std::make_unique<ActionPlan>();
    plan->call = &*policy_->payload_default;
    payload_default_plan_ = int(rules.size());
    plans_[rules.size()] = std::move(plan);
    identity_ = false;
    protects_anything_ = true;
  }
  using OU = dsl::Policy::OnUnknown;
  if (policy_->on_unknown == OU::Drop || policy_->on_unknown == OU::Cut) identity_ = false;
  if (!policy_->select_bpf.empty()) {
    bpf_ = std::make_unique<Bpf>(policy_->select_bpf);
    identity_ = false;
  }
  if (policy_->select_cond) {
    regexes_->collect(*policy_->select_cond);
    identity_ = false;
  }
  regexes_->compile();
  // `proto in { ... }` sets, as bit masks, once.
  std::function<void(const dsl::Cond&)> masks = [&](const dsl::Cond& c) {
    for (auto& ch : c.children) masks(*ch);
    if (c.kind == dsl::Cond::Kind::ProtoIn) {
      uint32_t m = 0;
      for (auto& p : c.protocols) m |= proto_bit(p);
      proto_masks_.emplace_back(&c, m);
    }
  };
  for (const auto& r : rules)
    if (r.when) masks(*r.when);
  if (policy_->select_cond) masks(*policy_->select_cond);
  // Flows give roles (ip.client/ip.server, clients), per-flow z-anonymity
  // decisions and application stream state; a policy using none skips them.
  wants_flows_ = !identity_ && (!zslot_rule_.empty() || !field_rules_[F.ip_client].empty() ||
                                !field_rules_[F.ip_server].empty() || has_l7_);
  wants_l7_ = has_l7_ || policy_->select_cond != nullptr;
  for (const auto& r : rules) wants_l7_ = wants_l7_ || r.when != nullptr;
  unconditional_ = true;
  for (const auto& r : rules) unconditional_ = unconditional_ && r.when == nullptr;
  fixed_rule_.assign(field_rules_.size(), -1);
  for (size_t f = 0; f < field_rules_.size(); ++f)
    if (!field_rules_[f].empty()) fixed_rule_[f] = int(field_rules_[f][0]);
  // An address position takes the first rule in source order naming it by
  // position or by role (the same choice process() makes with conditions).
  for (int is_src = 0; is_src < 2; ++is_src)
    for (int is_client = 0; is_client < 2; ++is_client) {
      int a = fixed_rule_[is_src ? F.ip_src : F.ip_dst], b = fixed_rule_[is_client ? F.ip_client : F.ip_server];
      addr_rule_[is_src][is_client] = a < 0 ? b : b < 0 ? a : std::min(a, b);
    }
  wants_flows_ = wants_flows_ || wants_l7_;
  hdr_only_ = unconditional_ && !has_l7_ && !wants_l7_ && !policy_->select_cond && !bpf_ && zslot_rule_.empty();
  l7_only_ = unconditional_ && has_l7_ && !policy_->select_cond && !bpf_ && zslot_rule_.empty() &&
             !protects_addresses_ && payload_default_plan_ < 0;
  for (FieldId f : {F.eth_dst, F.eth_src, F.ip_src, F.ip_dst, F.ip_client, F.ip_server, F.payload})
    l7_only_ = l7_only_ && fixed_rule_[f] < 0;
  mac_rule_[0] = fixed_rule_[F.eth_dst];
  mac_rule_[1] = fixed_rule_[F.eth_src];
  pay_rule_ = fixed_rule_[F.payload];
  pay_counts_ = pay_rule_ >= 0;
  if (pay_rule_ < 0) pay_rule_ = payload_default_plan_;
}

Program::~Program() = default;

std::unique_ptr<ProgramInstance> Program::instantiate() const { return std::make_unique<ProgramInstance>(*this); }

ProgramInstance::ProgramInstance(const Program& p) : prog_(p), uhash_(p.services_->user_hash_key) {
  hdr_fast_ = p.hdr_only_;
  actions_.resize(p.plans_.size());
  zfallback_.resize(p.plans_.size());
  name_key_.resize(p.plans_.size());
  bool name_zanon = false;
  for (size_t i = 0; i < p.plans_.size(); ++i) {
    const auto& plan = p.plans_[i];
    if (!plan) continue;
    const ActionCall& call = *plan->call;
    // zanon on application fields is decided per occurrence, not per flow,
    // so only address-field zanon rules hold a flow slot.
    bool addr_rule = i < p.policy_->rules.size() && [&] {
      for (auto* f : p.policy_->rules[i].fields)
        if (f->type == ValueType::Addr && !L7Fields::get().is_l7(f->id)) return true;
      return false;
    }();
    if (call.desc->name == "zanon" && !addr_rule) {
      name_zanon = true;
      const ArgValue* fb = call.arg("fallback");
      if (fb && fb->action) zfallback_[i] = make_rt_action(*fb->action, *p.policy_, p.services_, nullptr);
      else if (fb && fb->s == "redact") zfallback_[i] = make_rt_action(ActionCall{Registry::instance().action("redact")}, *p.policy_, p.services_, nullptr);
      // zero otherwise, also for a word the compiler let through that has no
      // meaning for this field (never a null fallback to call).
      else zfallback_[i] = make_rt_action(ActionCall{Registry::instance().action("zero")}, *p.policy_, p.services_, nullptr);
      actions_[i] = make_rt_action(ActionCall{Registry::instance().action("keep")}, *p.policy_, p.services_, nullptr);
    } else {
      actions_[i] = make_rt_action(call, *p.policy_, p.services_, plan->zslot >= 0 ? &plan->zinfo : nullptr);
    }
    if (call.desc->name == "hash") {
      const ArgValue* k = call.arg("key");
      if (k && k->key && k->key->bytes.size() == 32) {
        auto hk = KeyedHash::derive_key(std::span<const uint8_t, 32>(k->key->bytes.data(), 32), "amon name mask");
        std::memcpy(&name_key_[i], hk.data(), 8);
      }
    }
    if (call.desc->name == "zanon") {
      const ArgValue* fb = call.arg("fallback");
      if (fb && fb->action && fb->action->desc->name == "hash") {
        const ArgValue* k = fb->action->arg("key");
        if (k && k->key && k->key->bytes.size() == 32) {
          auto hk = KeyedHash::derive_key(std::span<const uint8_t, 32>(k->key->bytes.data(), 32), "amon name mask");
          std::memcpy(&name_key_[i], hk.data(), 8);
        }
      }
    }
  }
  name_plan_.resize(p.plans_.size());
  for (size_t i = 0; i < p.plans_.size(); ++i) {
    if (!p.plans_[i]) continue;
    const ActionCall& a = *p.plans_[i]->call;
    const std::string& n = a.desc->name;
    NamePlan& np = name_plan_[i];
    np.kind = n == "keep" ? NamePlan::Keep : n == "drop" ? NamePlan::Drop : n == "hash" ? NamePlan::Hash
            : n == "zanon" ? NamePlan::Zanon : NamePlan::Redact;  // redact, zero: a name keeps only its shape
    if (np.kind != NamePlan::Zanon) continue;
    np.zp = zanon::ZParams{uint32_t(a.int_or("z", 10)), uint64_t(a.int_or("dt", 0))};
    const ArgValue* fb = a.arg("fallback");
    if (fb && fb->action && fb->action->desc->name == "hash") np.fb = NamePlan::FbHash;
    else if (fb && !fb->action && fb->s == "sld") np.fb = NamePlan::FbSld;
    // `redact` and `redact()` alike (the call form used to fall through to
    // random masks: as hidden, but not what the policy says).
    else if (fb && ((!fb->action && (fb->s == "redact" || fb->s == "zero")) ||
                    (fb->action && (fb->action->desc->name == "redact" || fb->action->desc->name == "zero"))))
      np.fb = NamePlan::FbRedact;
  }
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&rng_), sizeof rng_) != 1) throw std::runtime_error("RAND_bytes failed");
  {
    const L7Fields& L = L7Fields::get();
    bool dns_zanon = false;
    for (FieldId f : {L.dns_qname, L.dns_answer_name})
      for (uint32_t ri : p.field_rules_[f]) dns_zanon = dns_zanon || p.policy_->rules[ri].action.desc->name == "zanon";
    // Only the roles this policy has rules for are decided: a name of a
    // field without rules is kept (pick() finds nothing, and counts nothing).
    constexpr uint32_t kOwners = 1u << unsigned(dns::NameRole::AnswerOwner) |
                                 1u << unsigned(dns::NameRole::AuthorityOwner) |
                                 1u << unsigned(dns::NameRole::AdditionalOwner);
    constexpr uint32_t kQname = 1u << unsigned(dns::NameRole::Qname);
    static_assert(unsigned(dns::NameRole::RdataOther) < 32);
    if (!p.field_rules_[L.dns_qname].empty()) dns_roles_ |= kQname;
    if (!p.field_rules_[L.dns_answer_name].empty()) dns_roles_ |= kOwners;
    if (!p.field_rules_[L.dns_rdata_name].empty()) dns_roles_ |= ~(kQname | kOwners);
    dns_addr_rules_ = !p.field_rules_[L.dns_answer_addr].empty();
    if (dns_zanon) {
      dns_memo_.resize(kDnsMemoSets * kDnsMemoWays);
      first_masks_ = std::make_unique<dns::FirstNameMasks>();
      if (RAND_bytes(reinterpret_cast<unsigned char*>(&dns_memo_secret_), sizeof dns_memo_secret_) != 1)
        throw std::runtime_error("RAND_bytes failed");
    }
  }
  for (auto* db : p.regexes_->dbs)
    if (hs_alloc_scratch(db, &hs_) != HS_SUCCESS) throw std::runtime_error("hs_alloc_scratch failed");
  if (name_zanon && !p.services_->zstore) throw std::runtime_error("zanon rules need the z-anonymity store");
  if (name_zanon) {
    name_keys_.resize(kNameKeySets * 2);
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&name_keys_secret_), sizeof name_keys_secret_) != 1)
      throw std::runtime_error("RAND_bytes failed");
  }
  if (!p.zslot_rule_.empty() || name_zanon) {
    if (!p.services_->zstore) throw std::runtime_error("zanon rules need the z-anonymity store");
    users_.resize(2 * kUserSets);
    auto* st = p.services_->zstore;
    zscope_.cls = st->class_id("server-addr");
    std::string kind = p.policy_->identifier ? p.policy_->identifier->name : "ip.client";
    if (p.policy_->identifier_prefix >= 0) kind += "/" + std::to_string(p.policy_->identifier_prefix);
    zscope_.kind = st->kind_id(kind);
    field_class_.assign(Registry::instance().fields().size(), 0);
    for (const auto& f : Registry::instance().fields())
      if (!f.value_class.empty()) field_class_[f.id] = st->class_id(f.value_class);
  }
  choose_hdr_kernel();
}

void ProgramInstance::set_dns_fast_path(bool on) { dns_fast_ = on; }

void ProgramInstance::set_header_fast_path(bool on, bool kernel) {
  hdr_fast_ = on && prog_.hdr_only_;
  if (kernel) choose_hdr_kernel();
  else hdr_fn_ = &ProgramInstance::process_hdr, hdr_burst_fn_ = &ProgramInstance::process_hdr_burst;
}

ProgramInstance::~ProgramInstance() {
  if (hs_) hs_free_scratch(hs_);
}

uint64_t ProgramInstance::user_of(const uint8_t* client, uint32_t alen) {
  if (users_.empty() || (alen != 4 && alen != 16)) return user_hash(client, alen);
  uint64_t a, b = 0;
  if (alen == 4) {
    uint32_t v;
    std::memcpy(&v, client, 4);
    a = v;
  } else {
    std::memcpy(&a, client, 8);
    std::memcpy(&b, client + 8, 8);
  }
  // Only the slot depends on this mix: a collision is a miss, never another
  // client's hash.
  const uint64_t h = (a * 0x9e3779b97f4a7c15ULL ^ b * 0xbf58476d1ce4e5b9ULL) + alen;
  UserSlot* set = &users_[(h >> 40) % kUserSets * 2];
  for (unsigned i = 0; i < 2; ++i)
    if (set[i].a == a && set[i].b == b && set[i].alen == alen) return set[i].user;
  set[1] = set[0];
  set[0] = UserSlot{a, b, user_hash(client, alen), alen};
  return set[0].user;
}

uint64_t ProgramInstance::user_hash(const uint8_t* client, uint32_t alen) {
  // The store only ever sees a keyed hash of the clear identifier (never
  // the anonymized address, which would change with key rotation).
  uint8_t buf[17];
  std::memcpy(buf, client, alen);
  int pfx = prog_.policy_->identifier_prefix;
  if (pfx >= 0 && pfx < int(alen * 8)) {
    for (uint32_t i = 0; i < alen; ++i) {
      int keep = pfx - int(i) * 8;
      if (keep >= 8) continue;
      buf[i] = keep <= 0 ? 0 : uint8_t(buf[i] & (0xff00 >> keep));
    }
  }
  buf[alen] = uint8_t(alen);
  return uhash_.hash64({buf, alen + 1});
}

void ProgramInstance::decide_flow(const uint8_t* server, const uint8_t* client, uint32_t alen, const PacketMeta& m,
                                  ConsumerCounters& c) {
  FlowState* f = m.flow;
  zanon::Store* st = prog_.services_->zstore;
  uint64_t user = 0;
  bool have_user = false;
  for (size_t s = 0; s < prog_.zslot_rule_.size(); ++s) {
    const ActionPlan& plan = *prog_.plans_[prog_.zslot_rule_[s]];
    uint64_t bit = 1ULL << plan.zinfo.bit;
    if (f->zdecided & bit) continue;
    if (!have_user) user = user_of(client, alen), have_user = true;
    zanon::Key k = st->key(zscope_, std::span<const uint8_t>(server, alen));
    bool rel = st->observe(k, user, m.ts_ns, zanon::ZParams{uint32_t(plan.zinfo.z), uint64_t(plan.zinfo.dt_ns)});
    f->zdecided |= bit;
    if (rel) f->zreleased |= bit, ++c.zanon_released;
    else f->zreleased &= ~bit, ++c.zanon_hidden;
  }
}

// Roles: the policy's clients set decides when exactly one end is inside,
// else the flow's initiator is the client. alen = 0 when the addresses were
// not captured.
bool ProgramInstance::roles(const uint8_t* buf, uint32_t cap, const Decoded& d, const PacketMeta& m, uint8_t* old_addrs,
                            uint32_t& alen) {
  const dsl::Policy& pol = *prog_.policy_;
  const bool ip_ok = d.has_ip() && d.ip_version != 0 && d.dst_off() + d.addr_len() <= cap &&
                     d.src_off() + d.addr_len() <= cap;
  alen = ip_ok ? d.addr_len() : 0;
  bool client_is_src = m.initiator_is_src;
  if (!ip_ok) return client_is_src;
  const uint32_t so = d.src_off(), dof = d.dst_off();
  client_is_src = client_is_source(pol, d.ip_version, buf + so, buf + dof, client_is_src);
  // Source then destination, adjacent as in the header (IPv4 12..19, IPv6
  // 8..39): one copy.
  std::memcpy(old_addrs, buf + so, 2 * alen);
  return client_is_src;
}

namespace {
inline ApplyCtx packet_ctx(const Decoded& d, const PacketMeta& m, ConsumerCounters& c) {
  ApplyCtx ctx;
  ctx.ts_ns = m.ts_ns;
  ctx.d = &d;
  ctx.m = &m;
  ctx.counters = &c;
  return ctx;
}
}  // namespace

uint8_t ProgramInstance::rewrite_stream(uint8_t* buf, const Decoded& d, const PacketMeta& m, ConsumerCounters& c) {
  const Program& P = prog_;
  if (!P.has_l7_) return StreamView::Unchanged;
  ApplyCtx ctx = packet_ctx(d, m, c);
  uint8_t old_addrs[32] = {};
  uint32_t alen = 0;
  const bool client_is_src = roles(buf, d.cap_len, d, m, old_addrs, alen);
  const uint8_t* old_src = old_addrs;
  const uint8_t* old_dst = old_addrs + (alen ? alen : 16);
  Eval e{&d, &m, &c, &ctx, client_is_src, client_is_src ? old_src : old_dst, alen, buf};
  // A consumer that does not select the packet never sees its bytes.
  if (P.policy_->select_cond && !eval(*P.policy_->select_cond, e)) return StreamView::Unchanged;
  ctx.family = d.ip_version;
  ctx.client_addr = client_is_src ? old_src : old_dst;
  if (!l7_rewrite(buf, d, e)) return StreamView::Failed;
  if (e.drop) return StreamView::Drop;
  return StreamView::Rewritten;
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

namespace {
// HC' = ~(~HC + ~m + m') (RFC 1624 eqn. 3) for bytes whose sums before and
// after an application rewrite are sums[0] and sums[1] (Eval::l7_sums).
[[gnu::always_inline]] inline uint16_t csum_update_spans(uint16_t ck, const uint64_t sums[2]) {
  return csum_finish(csum_add(csum_add(uint16_t(~ck), uint16_t(~csum_fold(sums[0]))), csum_fold(sums[1])));
}

// The end of a header rewrite (process_hdr and the kernels): a cut's
// lengths, the IPv4 header checksum, the L4 checksum (recomputed after a
// cut, else updated for the addresses and the payload), as the general path
// does them. The new lengths of a cut are stored after the checksums that
// cover them have been computed with the new values: a 2-byte store read
// back by a wider load cannot be forwarded and stalls.
//
// Its callers run only on packets for which hdr_packet() held, so bounds
// the general path must test are known here: the decoder (status Ok) has
// checked that the IPv4 header is at least 20 bytes and the TCP header at
// least 20 (UDP and ICMP 8), and both are captured, since the payload
// starts within what was captured.
[[gnu::always_inline]] inline Verdict finish_hdr(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                                 const uint8_t* old, bool addr_changed, bool cut_wanted,
                                                 bool payload_changed, uint16_t old_sum, uint16_t new_sum) {
  const bool v4 = d.ip_version == 4;
  const uint32_t alen = v4 ? 4 : 16, so = d.src_off(), dof = d.dst_off();
  bool cut = false;
  uint8_t* const ip = buf + d.l3_off;
  const bool udp = d.l4_proto == kProtoUdp;
  bool v4_len = false, udp_len = false;
  uint16_t new_l3 = 0, new_udp = 0;
  if (cut_wanted) {
    const uint32_t cut_at = d.payload_off;
    if (cut_at < cap || (cut_at == cap && wire > cap)) {
      cut = true;
      cap = wire = cut_at;
      const uint32_t l3len = cut_at - d.l3_off;
      if (v4) v4_len = true, new_l3 = uint16_t(l3len);
      else wr16(ip + 4, uint16_t(l3len - 40));
      if (udp) udp_len = true, new_udp = uint16_t(cut_at - d.l4_off);
    }
  }
  if (v4 && (addr_changed || cut)) {
    if (d.l3_hdr_len == 20) {
      wr16(ip + 10, ipv4_header_checksum20(ip, v4_len ? int32_t(new_l3) : -1));
    } else {
      if (v4_len) wr16(ip + 2, new_l3), v4_len = false;
      wr16(ip + 10, ipv4_header_checksum({ip, d.l3_hdr_len}));
    }
  }
  if (v4_len) wr16(ip + 2, new_l3);

  const bool icmp4 = d.l4_proto == kProtoIcmp;
  const uint32_t csum_off = udp ? 6 : d.l4_proto == kProtoTcp ? 16 : 2;
  uint8_t* const l4 = buf + d.l4_off;
  if (cut) {
    if (udp && rd16(l4 + 6) == 0) {  // no checksum in use
      if (udp_len) wr16(l4 + 4, new_udp);
      return Verdict::Forward;
    }
    const std::span<const uint8_t> seg{l4, cap - d.l4_off};
    if (icmp4) {
      wr16(l4 + 2, 0);
      wr16(l4 + 2, csum_finish(csum_sum(seg)));
    } else {
      const int32_t ulen = udp_len ? int32_t(new_udp) : -1;
      wr16(l4 + csum_off, v4 ? l4_checksum_short(ip + 12, ip + 16, true, d.l4_proto, l4, seg.size(), csum_off, ulen)
                             : l4_checksum_short(ip + 8, ip + 24, false, d.l4_proto, l4, seg.size(), csum_off, ulen));
      if (udp_len) wr16(l4 + 4, new_udp);
    }
    return Verdict::Forward;
  }
  if (!addr_changed && !payload_changed) return Verdict::Forward;
  uint16_t ck = rd16(l4 + csum_off);
  if (udp && ck == 0) return Verdict::Forward;  // the sender computed none
  if (addr_changed && !icmp4) {
    // One update per address, as the general path does (the representation
    // of zero could differ otherwise).
    ck = csum_replace_addr(ck, old, buf + so, v4);
    ck = csum_replace_addr(ck, old + alen, buf + dof, v4);
  }
  if (payload_changed) ck = csum_finish(csum_add(csum_add(uint16_t(~ck), uint16_t(~old_sum)), new_sum));
  if (udp && ck == 0) ck = 0xffff;
  wr16(l4 + csum_off, ck);
  return Verdict::Forward;
}
}  // namespace

// The general path below, specialised: every choice that depends only on
// the policy was made by Program, and the packet is known to be a plain
// TCP/UDP/ICMP packet with its headers captured, so none of the fail-closed
// branches (fragments, tunnels, ICMP quotes, decode errors, application
// fields) can apply. Its output must stay byte-identical to the general
// path's: test_hdr_fast compares the two on every shared capture.
Verdict ProgramInstance::process_hdr(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                     const PacketMeta& m, ConsumerCounters& c) {
  const Program& P = prog_;
  const auto& F = l2l4::g_fields;
  if (c.rule_hits.size() < P.plans_.size()) [[unlikely]] c.rule_hits.resize(P.plans_.size());
  uint64_t* const hits = c.rule_hits.data();
  ApplyCtx ctx = packet_ctx(d, m, c);

  if (cap >= 14) {
    for (int i = 0; i < 2; ++i) {  // eth.dst, then eth.src
      const int r = P.mac_rule_[i];
      if (r < 0) continue;
      ++hits[r];
      RtAction& a = *actions_[r];
      if (a.kind == RtKind::Timestamp) {
        rt::put_mac48(buf + 6 * i, i ? m.ts_ns % 1000000000ULL : m.ts_ns / 1000000000ULL);
        continue;
      }
      ctx.field = i ? F.eth_src : F.eth_dst;
      if (a.mac(buf + 6 * i, ctx) == ActResult::Drop) return ++c.policy_drop, Verdict::Drop;
    }
  }

  const bool v4 = d.ip_version == 4;
  const uint32_t alen = v4 ? 4 : 16, so = d.src_off(), dof = d.dst_off();
  uint8_t old[32];  // clear source, then destination (adjacent in both headers)
  if (v4) std::memcpy(old, buf + so, 8);
  else std::memcpy(old, buf + so, 32);
  const bool client_is_src = client_is_source(*P.policy_, d.ip_version, old, old + alen, m.initiator_is_src);
  ctx.family = d.ip_version;
  ctx.client_addr = client_is_src ? old : old + alen;
  bool addr_changed = false;
  for (int pos = 0; pos < 2; ++pos) {
    const bool is_src = pos == 0, is_client = is_src == client_is_src;
    const int r = P.addr_rule_[is_src][is_client];
    if (r < 0) continue;
    ++hits[r];
    RtAction& a = *actions_[r];
    uint8_t* const at = buf + (is_src ? so : dof);
    switch (a.kind) {
      case RtKind::CryptoPan: static_cast<rt::CryptoPan&>(a).apply(at, d.ip_version, m.ts_ns); break;
      case RtKind::Prefix: static_cast<rt::Prefix&>(a).apply(at, d.ip_version); break;
      default:
        ctx.field = is_client ? F.ip_client : F.ip_server;
        ctx.is_server = !is_client;
        if (a.addr(at, ctx) == ActResult::Drop) return ++c.policy_drop, Verdict::Drop;
    }
    addr_changed = addr_changed || a.modifies;
  }

  const uint32_t pend = uint32_t(std::min<uint64_t>(uint64_t(d.payload_off) + d.payload_len, cap));
  const uint32_t plen = pend > d.payload_off ? pend - d.payload_off : 0;
  uint8_t* const pl = buf + d.payload_off;
  bool cut = false, payload_changed = false;
  uint16_t old_sum = 0, new_sum = 0;
  if (P.pay_rule_ >= 0) {
    if (P.pay_counts_) ++hits[P.pay_rule_];
    RtAction& a = *actions_[P.pay_rule_];
    ctx.field = F.payload;
    const bool summed = a.modifies && !a.cuts && plen;
    if (summed) old_sum = csum_sum({pl, plen});
    const ActResult r = a.bytes(pl, plen, ctx);
    if (r == ActResult::Drop) return ++c.policy_drop, Verdict::Drop;
    if (r == ActResult::Cut) {
      cut = true;
    } else if (summed) {
      new_sum = csum_sum({pl, plen});
      payload_changed = new_sum != old_sum;
    }
  }

  return finish_hdr(buf, cap, wire, d, old, addr_changed, cut, payload_changed, old_sum, new_sum);
}

namespace {
// Header kernel operations (template arguments of hdr_kernel).
enum : uint8_t { kANone, kACryptoPan, kAPrefix, kAVirtual };  // an address slot
enum : uint8_t { kPNone, kPCut, kPVirtual };                   // the payload
}  // namespace

void ProgramInstance::choose_hdr_kernel() {
  const Program& P = prog_;
  hdr_fn_ = &ProgramInstance::process_hdr;
  hdr_burst_fn_ = &ProgramInstance::process_hdr_burst;
  if (!P.hdr_only_) return;
  auto named = [&](int r, const char* n) { return r >= 0 && P.plans_[r]->call->desc->name == n; };
  // The kernel counts every rule's hit up front: no rule may stop the
  // packet half-way (drop()).
  for (int r : {P.mac_rule_[0], P.mac_rule_[1], P.addr_rule_[0][0], P.addr_rule_[0][1], P.addr_rule_[1][0],
                P.addr_rule_[1][1], P.pay_rule_})
    if (named(r, "drop")) return;
  HdrKernel k;
  const auto& A = P.addr_rule_;  // [is_src][is_client]
  int slot[2];
  if (A[0][1] == A[1][1] && A[0][0] == A[1][0]) {
    k.by_role = true, slot[0] = A[0][1], slot[1] = A[0][0];  // client, server
  } else if (A[1][0] == A[1][1] && A[0][0] == A[0][1]) {
    k.by_role = false, slot[0] = A[1][0], slot[1] = A[0][0];  // source, destination
  } else {
    return;  // rules on positions and on roles: process_hdr chooses per packet
  }
  k.mac_ts = true;
  for (int r : P.mac_rule_)
    if (r >= 0) {
      k.hits[k.nhits++] = uint16_t(r);
      k.mac_ts = k.mac_ts && actions_[r]->kind == RtKind::Timestamp;
    }
  uint8_t op[2];
  for (int i = 0; i < 2; ++i) {
    const int r = slot[i];
    op[i] = kANone;
    if (r < 0) continue;
    k.hits[k.nhits++] = uint16_t(r);
    RtAction* a = actions_[r].get();
    if (!a->modifies) continue;  // keep()
    k.act[i] = a;
    k.addr_mod = true;
    op[i] = a->kind == RtKind::CryptoPan ? kACryptoPan : a->kind == RtKind::Prefix ? kAPrefix : kAVirtual;
  }
  uint8_t pop = kPNone;
  if (P.pay_rule_ >= 0) {
    if (P.pay_counts_) k.hits[k.nhits++] = uint16_t(P.pay_rule_);
    RtAction* a = actions_[P.pay_rule_].get();
    if (named(P.pay_rule_, "cut")) pop = kPCut;
    else if (a->modifies && !a->cuts) pop = kPVirtual, k.pay = a;
    else if (a->modifies) return;  // an action that cuts in its own way
  }
  // The client's Crypto-PAn result is the same for every packet of a flow
  // when the client is the same address in both directions (roles by the
  // initiator: no `clients` set, under which a flow with both ends inside
  // would make each packet's source the client) and the key does not
  // rotate. The flow entry then keeps it for one consumer, in the line the
  // flow lookup has just read (FlowState::memo).
  if (k.by_role && op[0] == kACryptoPan && P.policy_->clients.empty() &&
      !static_cast<const rt::CryptoPan*>(k.act[0])->rotates() && P.consumer_index() >= 0 &&
      P.consumer_index() < 255)
    k.memo_id = uint8_t(P.consumer_index() + 1);
  hk_ = k;
  static const auto table = []<size_t... I>(std::index_sequence<I...>) {
    return std::array<HdrFn, sizeof...(I)>{
        &ProgramInstance::hdr_kernel<uint8_t(I / 12), uint8_t(I / 3 % 4), uint8_t(I % 3)>...};
  }(std::make_index_sequence<48>{});
  static const auto burst_table = []<size_t... I>(std::index_sequence<I...>) {
    return std::array<HdrBurstFn, sizeof...(I)>{
        &ProgramInstance::hdr_kernel_burst<uint8_t(I / 12), uint8_t(I / 3 % 4), uint8_t(I % 3)>...};
  }(std::make_index_sequence<48>{});
  hdr_fn_ = table[op[0] * 12 + op[1] * 3 + pop];
  hdr_burst_fn_ = burst_table[op[0] * 12 + op[1] * 3 + pop];
}

void ProgramInstance::process_hdr_burst(uint8_t* const* bufs, uint32_t* caps, uint32_t* wires, const Decoded* ds,
                                        const PacketMeta* ms, Verdict* verdicts, unsigned n, ConsumerCounters& c) {
  for (unsigned i = 0; i < n; ++i) verdicts[i] = process(bufs[i], caps[i], wires[i], ds[i], ms[i], c);
}

// process_hdr for one policy shape. Every step is process_hdr's (and so the
// general path's), in the same order; test_hdr_fast holds all three to the
// same bytes.
namespace {
// The rules every kernel packet applies, counted `n` times.
[[gnu::always_inline]] inline void count_hdr_hits(std::vector<uint64_t>& rule_hits, size_t nplans, const uint16_t* rules,
                                                  unsigned nrules, uint64_t n) {
  if (rule_hits.size() < nplans) [[unlikely]] rule_hits.resize(nplans);
  uint64_t* const hits = rule_hits.data();
  switch (nrules) {  // unrolled: the loop's compare and branch cost as much as the counts
    case 6: hits[rules[5]] += n; [[fallthrough]];
    case 5: hits[rules[4]] += n; [[fallthrough]];
    case 4: hits[rules[3]] += n; [[fallthrough]];
    case 3: hits[rules[2]] += n; [[fallthrough]];
    case 2: hits[rules[1]] += n; [[fallthrough]];
    case 1: hits[rules[0]] += n; [[fallthrough]];
    default: break;
  }
}
}  // namespace

template <uint8_t X, uint8_t Y, uint8_t PO>
Verdict ProgramInstance::hdr_kernel(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                    const PacketMeta& m, ConsumerCounters& c) {
  count_hdr_hits(c.rule_hits, prog_.plans_.size(), hk_.hits, hk_.nhits, 1);
  return hdr_apply<X, Y, PO>(buf, cap, wire, d, m, c);
}

template <uint8_t X, uint8_t Y, uint8_t PO>
void ProgramInstance::hdr_kernel_burst(uint8_t* const* bufs, uint32_t* caps, uint32_t* wires, const Decoded* ds,
                                       const PacketMeta* ms, Verdict* verdicts, unsigned n, ConsumerCounters& c) {
  unsigned nk = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (hdr_packet(ds[i], caps[i])) [[likely]] {
      verdicts[i] = hdr_apply<X, Y, PO>(bufs[i], caps[i], wires[i], ds[i], ms[i], c);
      ++nk;
    } else {
      verdicts[i] = process_general(bufs[i], caps[i], wires[i], ds[i], ms[i], c);
    }
  }
  count_hdr_hits(c.rule_hits, prog_.plans_.size(), hk_.hits, hk_.nhits, nk);
}

template <uint8_t X, uint8_t Y, uint8_t PO>
[[gnu::always_inline]] inline Verdict ProgramInstance::hdr_apply(uint8_t* buf, uint32_t& cap, uint32_t& wire,
                                                                 const Decoded& d, const PacketMeta& m,
                                                                 ConsumerCounters& c) {
  const Program& P = prog_;
  const HdrKernel& k = hk_;
  const auto& F = l2l4::g_fields;
  // Only kernels with a virtual action build the actions' context: the
  // usual ones never read it (and would pay its stores on every packet).
  constexpr bool virt = X == kAVirtual || Y == kAVirtual || PO == kPVirtual;
  ApplyCtx ctx;
  if constexpr (virt) ctx = packet_ctx(d, m, c);

  if (k.mac_ts) {
    if (P.mac_rule_[0] >= 0 || P.mac_rule_[1] >= 0) {
      const uint64_t sec = m.ts_ns / 1000000000ULL;
      if (P.mac_rule_[0] >= 0) rt::put_mac48(buf, sec);
      if (P.mac_rule_[1] >= 0) rt::put_mac48(buf + 6, m.ts_ns - sec * 1000000000ULL);
    }
  } else {
    ApplyCtx mctx = packet_ctx(d, m, c);
    for (int i = 0; i < 2; ++i) {
      const int r = P.mac_rule_[i];
      if (r < 0) continue;
      mctx.field = i ? F.eth_src : F.eth_dst;
      actions_[r]->mac(buf + 6 * i, mctx);  // never drop(): choose_hdr_kernel
    }
  }

  const bool v4 = d.ip_version == 4;
  const uint32_t alen = v4 ? 4 : 16, so = d.src_off(), dof = d.dst_off();
  uint8_t old[32];  // clear source, then destination (adjacent in both headers)
  if (v4) std::memcpy(old, buf + so, 8);
  else std::memcpy(old, buf + so, 32);
  const bool client_is_src = client_is_source(*P.policy_, d.ip_version, old, old + alen, m.initiator_is_src);
  if constexpr (virt) {
    ctx.family = d.ip_version;
    ctx.client_addr = client_is_src ? old : old + alen;
  }
  // Slot 0 is the client (by role) or the source (by position).
  const bool x_src = !k.by_role || client_is_src;
  auto apply = [&]<uint8_t Op>(RtAction* a, uint8_t* at, bool is_src) {
    if constexpr (Op == kACryptoPan) {
      static_cast<rt::CryptoPan*>(a)->apply(at, d.ip_version, m.ts_ns);
    } else if constexpr (Op == kAPrefix) {
      static_cast<rt::Prefix*>(a)->apply(at, d.ip_version);
    } else if constexpr (Op == kAVirtual) {
      const bool is_client = is_src == client_is_src;
      ctx.field = is_client ? F.ip_client : F.ip_server;
      ctx.is_server = !is_client;
      a->addr(at, ctx);
    }
  };
  // Slot 0 through the flow's memo when it has one (choose_hdr_kernel).
  auto apply_x = [&](uint8_t* at, bool is_src) {
    if constexpr (X == kACryptoPan) {
      FlowState* const fs = m.flow;
      if (k.memo_id && fs && v4) {
        if (fs->memo_owner == k.memo_id) {
          std::memcpy(at, &fs->memo, 4);
          return;
        }
        static_cast<rt::CryptoPan*>(k.act[0])->apply(at, 4, m.ts_ns);
        if (fs->memo_owner == 0) {
          std::memcpy(&fs->memo, at, 4);
          fs->memo_owner = k.memo_id;
        }
        return;
      }
    }
    apply.template operator()<X>(k.act[0], at, is_src);
  };
  // Source first, as the general path rewrites them.
  if (x_src) {
    apply_x(buf + so, true);
    apply.template operator()<Y>(k.act[1], buf + dof, false);
  } else {
    apply.template operator()<Y>(k.act[1], buf + so, true);
    apply_x(buf + dof, false);
  }
  const bool addr_changed = k.addr_mod;

  bool payload_changed = false;
  uint16_t old_sum = 0, new_sum = 0;
  if constexpr (PO == kPVirtual) {
    const uint32_t pend = uint32_t(std::min<uint64_t>(uint64_t(d.payload_off) + d.payload_len, cap));
    const uint32_t plen = pend > d.payload_off ? pend - d.payload_off : 0;
    uint8_t* const pl = buf + d.payload_off;
    if (plen) old_sum = csum_sum({pl, plen});
    ctx.field = F.payload;
    k.pay->bytes(pl, plen, ctx);  // never drop(), never cuts: choose_hdr_kernel
    if (plen) {
      new_sum = csum_sum({pl, plen});
      payload_changed = new_sum != old_sum;
    }
  }

  return finish_hdr(buf, cap, wire, d, old, addr_changed, PO == kPCut, payload_changed, old_sum, new_sum);
}

Verdict ProgramInstance::process_general(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                         const PacketMeta& m, ConsumerCounters& c) {
  return prog_.l7_only_ ? general_path<true>(buf, cap, wire, d, m, c) : general_path<false>(buf, cap, wire, d, m, c);
}

// kL7Only (Program::l7_only_): no select, BPF, MAC, address, per-flow or
// payload rule, and no condition, so those questions are answered here at
// compile time; every packet still takes the same steps as with kL7Only
// false, and gets the same bytes.
template <bool kL7Only>
Verdict ProgramInstance::general_path(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                      const PacketMeta& m, ConsumerCounters& c) {
  const Program& P = prog_;
  const bool protects_addr = !kL7Only && P.protects_addresses_;
  const dsl::Policy& pol = *P.policy_;
  const auto& F = l2l4::g_fields;
  ApplyCtx ctx = packet_ctx(d, m, c);

  uint8_t old_addrs[32] = {};
  uint32_t alen = 0;
  const bool client_is_src = roles(buf, cap, d, m, old_addrs, alen);
  const bool ip_ok = alen != 0;
  const uint32_t so = ip_ok ? d.src_off() : 0, dof = ip_ok ? d.dst_off() : 0;
  uint8_t* const old_src = old_addrs;
  uint8_t* const old_dst = old_addrs + (ip_ok ? alen : 16);
  Eval e{&d, &m, &c, &ctx, client_is_src, client_is_src ? old_src : old_dst, alen, buf};

  if (!kL7Only && pol.select_cond && !eval(*pol.select_cond, e)) return Verdict::Filtered;
  if (!kL7Only && P.bpf_ && !P.bpf_->match(m.orig ? m.orig : buf, cap, wire)) return Verdict::Filtered;

  auto drop = [&]() { ++c.policy_drop; return Verdict::Drop; };

  // L2: MAC addresses exist in every frame of 14 bytes or more.
  if (!kL7Only && cap >= 14 && (!P.field_rules_[F.eth_dst].empty() || !P.field_rules_[F.eth_src].empty())) {
    ctx.field = F.eth_dst;
    int r = pick(F.eth_dst, e);
    if (r >= 0 && actions_[r]->mac(buf, ctx) == ActResult::Drop) return drop();
    ctx.field = F.eth_src;
    r = pick(F.eth_src, e);
    if (r >= 0 && actions_[r]->mac(buf + 6, ctx) == ActResult::Drop) return drop();
  }

  uint32_t cut_at = UINT32_MAX;
  auto error_exit = [&](uint32_t at, uint64_t& cut_counter) -> bool {  // true: drop
    if (pol.on_error == dsl::Policy::OnError::Drop) return ++c.err_drop, true;
    // An IP fragment without its data is no valid fragment: drop it instead.
    if ((d.flags & kFlagFragment) && at <= d.payload_off) return ++c.err_drop, true;
    ++cut_counter;
    cut_at = std::min(cut_at, at);
    return false;
  };

  if (d.status == DecodeStatus::NotIp) {
    using OU = dsl::Policy::OnUnknown;
    OU ou = pol.on_unknown;
    if (ou == OU::Default) ou = protects_addr ? OU::Drop : OU::Keep;
    if (ou == OU::Drop) return ++c.unknown_drop, Verdict::Drop;
    if (ou == OU::Keep) return ++c.unknown_keep, Verdict::Forward;
    ++c.unknown_cut;
    cap = wire = std::min<uint32_t>(cap, d.l3_off);
    return Verdict::Forward;
  }
  if (!d.has_ip() || d.ip_version == 0) {
    // Broken before the IP header: nothing past L2 can be trusted.
    if (!P.protects_anything_) return Verdict::Forward;
    if (error_exit(std::min<uint32_t>(d.good_until, cap), c.err_cut)) return Verdict::Drop;
    cap = wire = cut_at;
    return Verdict::Forward;
  }
  if (!ip_ok) {
    // Addresses not captured in full: cannot be anonymized, remove the IP layer.
    if (!P.protects_anything_) return Verdict::Forward;
    if (error_exit(d.l3_off, c.err_cut)) return Verdict::Drop;
    cap = wire = cut_at;
    return Verdict::Forward;
  }
  if ((d.flags & kFlagV6Routing) && protects_addr) {
    // Addresses in the routing header would need the same rewrite; no
    // consumer has asked for it, so such packets are not forwarded.
    return ++c.err_drop, Verdict::Drop;
  }

  const uint8_t* client_clear = client_is_src ? old_src : old_dst;
  const uint8_t* server_clear = client_is_src ? old_dst : old_src;
  if (!kL7Only && !P.zslot_rule_.empty() && m.flow) decide_flow(server_clear, client_clear, alen, m, c);

  ctx.family = d.ip_version;
  ctx.client_addr = client_clear;
  if constexpr (kL7Only) {
    // A whole, parsed UDP DNS message (a resolver link's every packet): the
    // steps below reduce to the message's rewrite and the checksum update
    // by its spans, without the questions whose answers are known here (no
    // tunnel, ICMP quote, later fragment, stream slice, payload rule or
    // cut). test_dns_fast compares this with those steps.
    if (dns_fast_ && m.l7 == L7State::Parsed && m.app == uint8_t(App::Dns) && d.l4_proto == kProtoUdp &&
        d.status == DecodeStatus::Ok && !(d.flags & (kFlagTunnel | kFlagIcmpError | kFlagLaterFragment))) {
      const uint32_t avail = std::min<uint32_t>(d.cap_len, d.payload_off + d.payload_len) - d.payload_off;
      uint64_t sums[2] = {0, 0};
      e.l7_sums = sums;
      const bool ok = l7_dns(buf + d.payload_off, avail, e, 0);
      e.l7_sums = nullptr;
      // Not parsed after all (l7_dns then changed nothing): the general
      // steps apply on_error.
      if (ok) {
        if (e.drop) return drop();
        if (sums[0] != sums[1] && d.l4_off + 8 <= cap) {
          uint8_t* const l4 = buf + d.l4_off;
          uint16_t ck = rd16(l4 + 6);
          if (ck != 0) {  // 0: the sender computed none
            ck = csum_update_spans(ck, sums);
            wr16(l4 + 6, ck == 0 ? 0xffff : ck);
          }
        }
        return Verdict::Forward;
      }
    }
  }
  bool addr_changed = false;
  // No rule names an address (an L7-only policy): nothing to choose per position.
  const bool addr_rules = !kL7Only && (!P.field_rules_[F.ip_src].empty() || !P.field_rules_[F.ip_dst].empty() ||
                                       !P.field_rules_[F.ip_client].empty() || !P.field_rules_[F.ip_server].empty());
  for (int pos = 0; addr_rules && pos < 2; ++pos) {
    bool is_src = pos == 0;
    bool is_client = is_src == client_is_src;
    FieldId pos_field = is_src ? F.ip_src : F.ip_dst;
    FieldId role_field = is_client ? F.ip_client : F.ip_server;
    // The first rule in source order naming this address, by position or by
    // role, and whose condition holds, wins.
    int best = -1;
    if (P.unconditional_) {
      best = P.addr_rule_[is_src][is_client];
    } else {
      for (FieldId f : {pos_field, role_field}) {
        for (uint32_t ri : P.field_rules_[f]) {
          if (best >= 0 && int(ri) >= best) break;
          const dsl::Rule& r = pol.rules[ri];
          if (!r.when || eval(*r.when, e)) {
            best = int(ri);
            break;
          }
        }
      }
    }
    if (best < 0) continue;
    if (c.rule_hits.size() < P.plans_.size()) c.rule_hits.resize(P.plans_.size());
    ++c.rule_hits[best];
    ctx.field = role_field;
    ctx.is_server = !is_client;
    if (actions_[best]->addr(buf + (is_src ? so : dof), ctx) == ActResult::Drop) return drop();
    addr_changed = addr_changed || actions_[best]->modifies;
  }

  // Content the policy cannot see into, when addresses are protected: a
  // tunnel's inner packet, or the quoted header of an ICMP error.
  // An inner packet holds addresses and application fields alike.
  if ((protects_addr || P.l7_protect_) && (d.flags & kFlagTunnel) && d.status == DecodeStatus::Ok)
    if (error_exit(d.payload_off, c.tunnel_cut)) return Verdict::Drop;
  // An ICMP error quotes the offending datagram's header: its addresses get
  // the same rewrite as the flow's (an address of this packet maps the same
  // way), any other address is zeroed, and what follows the quoted
  // transport header is cut when names could be in it.
  bool quote_changed = false;
  uint16_t quote_old_sum = 0;
  if ((protects_addr || P.l7_protect_) && (d.flags & kFlagIcmpError) && d.status == DecodeStatus::Ok) {
    uint32_t q = d.payload_off;
    uint32_t qend = std::min<uint64_t>(uint64_t(d.payload_off) + d.payload_len, cap);
    uint8_t* qp = buf + q;
    uint32_t qlen = qend > q ? qend - q : 0;
    uint8_t iv = qlen ? qp[0] >> 4 : 0;
    uint32_t ihl = iv == 4 ? (qp[0] & 0xf) * 4u : iv == 6 ? 40u : 0;
    uint32_t ial = iv == 4 ? 4 : 16, isrc = iv == 4 ? 12 : 8, idst = iv == 4 ? 16 : 24;
    if (ihl >= 20 && qlen >= ihl) {
      quote_old_sum = csum_sum({qp, qlen});
      quote_changed = true;
      uint8_t before[2][16];
      std::memcpy(before[0], qp + isrc, ial);
      std::memcpy(before[1], qp + idst, ial);
      for (uint32_t off : {isrc, idst}) {
        uint8_t* a = qp + off;
        if (iv == d.ip_version && std::memcmp(a, old_src, ial) == 0) std::memcpy(a, buf + so, ial);
        else if (iv == d.ip_version && std::memcmp(a, old_dst, ial) == 0) std::memcpy(a, buf + dof, ial);
        else if (protects_addr) std::memset(a, 0, ial);
      }
      // The quoted UDP header's checksum covers the quoted addresses (its
      // pseudo-header): follow them, as the original sender's would have.
      uint8_t inner_proto = iv == 4 ? qp[9] : qp[6];
      if (inner_proto == kProtoUdp && qlen >= ihl + 8) {
        uint8_t* uc = qp + ihl + 6;
        uint16_t ck = rd16(uc);
        if (ck != 0) {
          ck = csum_replace(ck, {before[0], ial}, {qp + isrc, ial});
          ck = csum_replace(ck, {before[1], ial}, {qp + idst, ial});
          wr16(uc, ck == 0 ? 0xffff : ck);
        }
      }
      if (iv == 4) {
        qp[10] = qp[11] = 0;
        wr16(qp + 10, ipv4_header_checksum({qp, ihl}));
      }
      // The quoted transport header (8 bytes) stays; anything after it may
      // carry application data.
      if (P.l7_protect_ && qlen > ihl + 8 && error_exit(q + ihl + 8, c.icmp_quote_cut)) return Verdict::Drop;
    } else if (error_exit(d.payload_off, c.icmp_quote_cut)) {
      return Verdict::Drop;
    }
  }

  // A later fragment's data cannot be parsed: it may hold names (a large
  // DNS response) or, when the datagram is a tunnel, inner addresses.
  if ((d.flags & kFlagLaterFragment) && d.status == DecodeStatus::Ok &&
      (P.l7_protect_ || (protects_addr && (!m.flow || m.flow->frag_tunnel || m.flow_first))))
    if (error_exit(d.payload_off, P.l7_protect_ ? c.l7_cut : c.tunnel_cut)) return Verdict::Drop;

  // Payload: application fields first, then the payload rule.
  const uint32_t pend = std::min<uint64_t>(uint64_t(d.payload_off) + d.payload_len, cap);
  const uint32_t plen = pend > d.payload_off ? pend - d.payload_off : 0;
  uint8_t* pl = buf + d.payload_off;
  uint16_t pay_old_sum = quote_old_sum;
  uint64_t l7_sums[2] = {0, 0};  // see Eval::l7_sums
  bool sum_taken = quote_changed, payload_changed = quote_changed;
  auto take_sum = [&] {
    if (!sum_taken && plen) pay_old_sum = csum_sum({pl, plen}), sum_taken = true;
  };
  if (P.has_l7_ && d.status == DecodeStatus::Ok && cut_at == UINT32_MAX && m.l7 == L7State::Stream) {
    // A segment of a reassembled header: its bytes are the slice of this
    // consumer's rewrite of the whole header (decided once, at release).
    const StreamView& sv = *m.stream;
    switch (sv.result[P.consumer_]) {
      case StreamView::Drop: return drop();
      case StreamView::Failed:
        if (error_exit(d.payload_off, c.l7_cut)) return Verdict::Drop;
        break;
      case StreamView::Rewritten:
        if (sv.seg_off < sv.len && plen) {
          take_sum();
          std::memcpy(pl, sv.bytes[P.consumer_] + sv.seg_off, std::min(plen, sv.len - sv.seg_off));
          payload_changed = true;
        }
        break;
      default: break;
    }
  } else if (P.has_l7_ && d.status == DecodeStatus::Ok && cut_at == UINT32_MAX && m.l7 != L7State::None) {
    // A UDP DNS message is rewritten in label spans (and addresses, ECS):
    // the checksum follows the sums of those spans only. UDP only: its
    // checksum is the same whichever representation of zero a sum takes
    // (0 is sent as 0xffff), so the result is the full update's bytes.
    const bool by_spans = !sum_taken && d.l4_proto == kProtoUdp && m.app == uint8_t(App::Dns);
    if (by_spans) e.l7_sums = l7_sums;
    else take_sum();
    if (!l7_rewrite(buf, d, e)) {
      if (error_exit(d.payload_off, c.l7_cut)) return Verdict::Drop;
    } else if (!by_spans) {
      payload_changed = true;
    }
    e.l7_sums = nullptr;
    if (e.drop) return drop();
  }
  // A server handshake (TLS 1.2 certificates) would name the server the
  // client's SNI decision hid, or that no SNI named.
  if (m.tls_server_hs && cut_at == UINT32_MAX && (P.l7_protect_ & (1u << unsigned(App::Tls))) &&
      !(m.flow && ((m.flow->sni_clear >> P.consumer_) & 1)))
    if (error_exit(d.payload_off, c.tls_server_cut)) return Verdict::Drop;
  int prule = kL7Only ? -1 : pick(F.payload, e);  // pick() counts nothing when no rule names the payload
  if (!kL7Only && prule < 0) prule = P.payload_default_plan_;
  bool payload_protected = prule >= 0 && actions_[prule]->modifies;
  if (d.status != DecodeStatus::Ok) {
    // The payload's start is unknown: if it or a field inside it is
    // protected, keep only what was decoded.
    if ((payload_protected || P.l7_protect_) && error_exit(std::min(d.good_until, cap), c.err_cut)) return Verdict::Drop;
  } else if (prule >= 0 && cut_at == UINT32_MAX) {
    ctx.field = F.payload;
    if (actions_[prule]->modifies && !actions_[prule]->cuts && plen) take_sum();
    ActResult r = actions_[prule]->bytes(pl, plen, ctx);
    if (r == ActResult::Drop) return drop();
    if (r == ActResult::Cut) cut_at = d.payload_off;
    else if (actions_[prule]->modifies && plen) payload_changed = true;
  }
  uint16_t pay_new_sum = payload_changed && sum_taken ? csum_sum({pl, plen}) : pay_old_sum;
  payload_changed = payload_changed && sum_taken && pay_new_sum != pay_old_sum;

  // Fix lengths and checksums.
  uint8_t* ip = buf + d.l3_off;
  const bool v4 = d.ip_version == 4;
  // A cut at the end of the captured bytes still shortens a record the
  // capture had cut short (wire > cap): its lengths must shrink too.
  if (cut_at != UINT32_MAX && (cut_at < cap || (cut_at == cap && wire > cap))) {
    cap = wire = cut_at;
    if (cut_at >= d.l3_off + (v4 ? 20u : 40u)) {
      uint32_t l3len = cut_at - d.l3_off;
      if (v4) wr16(ip + 2, uint16_t(l3len));
      else wr16(ip + 4, uint16_t(l3len - 40));
      if (d.pppoe_off) wr16(buf + d.pppoe_off + 4, uint16_t(cut_at - (d.pppoe_off + 6)));
      if (d.l4_proto == kProtoUdp && d.l4_hdr_len && cut_at >= d.l4_off + 8) wr16(buf + d.l4_off + 4, uint16_t(cut_at - d.l4_off));
    }
  } else if (cut_at != UINT32_MAX) {
    cut_at = UINT32_MAX;  // the cut point is past the captured bytes: nothing to remove
  }

  if (v4 && cap >= d.l3_off + d.l3_hdr_len && d.l3_hdr_len >= 20 && (addr_changed || cut_at != UINT32_MAX))
    wr16(ip + 10, ipv4_header_checksum({ip, d.l3_hdr_len}));

  // L4 checksum: present only in a packet that carries the L4 header.
  if (d.l4_hdr_len == 0 || (d.flags & kFlagLaterFragment)) return Verdict::Forward;
  uint32_t csum_off;
  switch (d.l4_proto) {
    case kProtoTcp: csum_off = 16; break;
    case kProtoUdp: csum_off = 6; break;
    case kProtoIcmp: case kProtoIcmpv6: csum_off = 2; break;
    default: return Verdict::Forward;
  }
  uint8_t* l4 = buf + d.l4_off;
  if (d.l4_off + csum_off + 2 > cap) return Verdict::Forward;
  const bool pseudo = d.l4_proto != kProtoIcmp;
  const bool udp = d.l4_proto == kProtoUdp;
  if (cut_at != UINT32_MAX) {
    // Everything left is captured: recompute in full.
    uint32_t l4len = cap - d.l4_off;
    if (udp && rd16(l4 + 6) == 0) return Verdict::Forward;  // no checksum in use
    uint16_t ck;
    if (d.l4_proto == kProtoIcmp) {
      wr16(l4 + 2, 0);
      ck = csum_finish(csum_sum({l4, l4len}));
    } else if (v4) {
      ck = l4_checksum_v4(ip + 12, ip + 16, d.l4_proto, {l4, l4len}, csum_off);
    } else {
      ck = l4_checksum_v6(ip + 8, ip + 24, d.l4_proto, {l4, l4len}, csum_off);
    }
    wr16(l4 + csum_off, ck);
    return Verdict::Forward;
  }
  const bool spans_changed = l7_sums[0] != l7_sums[1];
  if (!addr_changed && !payload_changed && !spans_changed) return Verdict::Forward;
  uint16_t ck = rd16(l4 + csum_off);
  if (udp && ck == 0) return Verdict::Forward;  // the sender computed none
  if (pseudo && addr_changed) {
    // One update per address, not one for both: the same sum, but the
    // result could differ in the representation of zero (0x0000/0xffff).
    ck = csum_replace(ck, {old_src, alen}, {buf + so, alen});
    ck = csum_replace(ck, {old_dst, alen}, {buf + dof, alen});
  }
  if (payload_changed) {
    // HC' = ~(~HC + ~m + m') over the payload's sums (RFC 1624 eqn. 3).
    ck = csum_finish(csum_add(csum_add(uint16_t(~ck), uint16_t(~pay_old_sum)), pay_new_sum));
  }
  if (spans_changed)  // the same over the spans the L7 rewrite changed (bytes after it are pay_old_sum's)
    ck = csum_update_spans(ck, l7_sums);
  if (udp && ck == 0) ck = 0xffff;
  wr16(l4 + csum_off, ck);
  return Verdict::Forward;
}

}  // namespace amon

// ---------------------------------------------------------------------------
// Conditions and application-layer fields.

namespace amon {


namespace {



bool hs_match(hs_database_t* db, hs_scratch_t* s, const char* data, size_t len) {
  if (!db || !s) return false;
  auto cb = [](unsigned, unsigned long long, unsigned long long, unsigned, void*) -> int { return 1; };
  return hs_scan(db, data, unsigned(len), 0, s, cb, nullptr) == HS_SCAN_TERMINATED;
}

}  // namespace

bool ProgramInstance::eval(const dsl::Cond& c, Eval& e) {
  using K = dsl::Cond::Kind;
  switch (c.kind) {
    case K::And:
      for (auto& ch : c.children)
        if (!eval(*ch, e)) return false;
      return true;
    case K::Or:
      for (auto& ch : c.children)
        if (eval(*ch, e)) return true;
      return false;
    case K::Not:
      return !eval(*c.children[0], e);
    case K::ProtoIn: {
      uint32_t want = 0;
      for (size_t i = 0; i < prog_.proto_masks_.size(); ++i)
        if (prog_.proto_masks_[i].first == &c) want = prog_.proto_masks_[i].second;
      if (!e.protos) e.protos = packet_protos(*e.d, e.m->app) | 0x80000000u;
      return (e.protos & want) != 0;
    }
    case K::FieldCmp:
      break;
  }
  // Field comparisons read the ORIGINAL packet: a rule earlier in the policy
  // must not change what a later condition sees.
  const Decoded& d = *e.d;
  const uint8_t* o = e.m->orig;
  const auto& F = l2l4::g_fields;
  const FieldId f = c.field->id;
  using Op = dsl::Cond::Op;
  auto finish = [&](bool any) { return c.op == Op::Ne ? !any : any; };
  if (c.field->type == ValueType::Mac) {
    const uint8_t* mac = f == F.eth_src ? o + 6 : o;
    bool any = false;
    for (auto& m : c.macs) any = any || std::memcmp(m.data(), mac, 6) == 0;
    return finish(any);
  }
  if (c.field->type == ValueType::Addr && !L7Fields::get().is_l7(f)) {
    if (!d.has_ip() || d.dst_off() + d.addr_len() > d.cap_len) return c.op == Op::Ne;
    auto test = [&](const uint8_t* a) {
      for (auto& cidr : c.cidrs)
        if (cidr.contains(d.ip_version, a)) return true;
      return false;
    };
    const uint8_t* src = o + d.src_off();
    const uint8_t* dst = o + d.dst_off();
    bool any;
    if (f == F.ip_src) any = test(src);
    else if (f == F.ip_dst) any = test(dst);
    else if (f == F.ip_client) any = test(e.client_is_src ? src : dst);
    else if (f == F.ip_server) any = test(e.client_is_src ? dst : src);
    else any = test(src) || test(dst);
    return finish(any);
  }
  // Application fields: the first occurrence in the packet, when parsed.
  std::string_view val;
  bool found = false;
  const L7Fields& L = L7Fields::get();
  L7Parse* P = e.m->parse;
  if (P && (e.m->l7 == L7State::Parsed || e.m->l7 == L7State::Stream)) {
    const uint8_t* base = e.m->l7_base ? e.m->l7_base : o + d.payload_off;
    if ((f == L.dns_qname) && P->dns_msg >= 0 && P->dns->n_names) {
      for (unsigned i = 0; i < P->dns->n_names && !found; ++i)
        if (P->dns->names[i].role == dns::NameRole::Qname) val = P->dns->name_text(i), found = true;
    } else if (f == L.tls_sni && P->tls_state == 1 && P->tls->status == tls::Status::Ok && P->tls->n_sni) {
      val = P->tls->sni_text(0), found = true;
    } else if (f == L.tls_sni && P->quic_state == 1 && P->quic->status == quic::Status::Located && P->quic->n_names) {
      val = P->quic->name_text(0), found = true;
    } else if (P->http_state == 1) {
      const http::Result& H = *P->http;
      for (unsigned i = 0; i < H.n_occ && !found; ++i) {
        http::Field k = H.occ[i].kind;
        bool match = (f == L.http_host && k == http::Field::HostDomain) || (f == L.http_user_agent && k == http::Field::UserAgent) ||
                     (f == L.http_uri && k == http::Field::Uri) || (f == L.http_method && k == http::Field::Method) ||
                     (f == L.http_referer && k == http::Field::Referer) || (f == L.http_server && k == http::Field::Server);
        if (match)
          val = std::string_view(reinterpret_cast<const char*>(base + H.occ[i].span.off), H.occ[i].span.len),
          found = true;
      }
    }
  }
  if (!found) return c.op == Op::Ne;
  bool any = false;
  if (c.op == Op::Match) {
    for (auto& r : c.regexes) any = any || hs_match(prog_.regexes_->db_of(&r), hs_, val.data(), val.size());
    return any;
  }
  for (auto& s : c.strings) {
    if (s.size() != val.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < s.size() && eq; ++i) eq = std::tolower(static_cast<unsigned char>(s[i])) == std::tolower(static_cast<unsigned char>(val[i]));
    any = any || eq;
  }
  return finish(any);
}

int ProgramInstance::pick_cond(FieldId f, Eval& e) {
  for (uint32_t ri : prog_.field_rules_[f]) {
    const dsl::Rule& r = prog_.policy_->rules[ri];
    if (!r.when || eval(*r.when, e)) {
      if (e.c->rule_hits.size() < prog_.plans_.size()) e.c->rule_hits.resize(prog_.plans_.size());
      ++e.c->rule_hits[ri];
      return int(ri);
    }
  }
  return -1;
}

static uint64_t splitmix_of(uint64_t z) {
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
static inline uint64_t tail_word(std::string_view s, size_t i) {
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

static uint64_t splitmix(uint64_t& s) {
  const uint64_t z = s;
  s += 0x9e3779b97f4a7c15ULL;
  return splitmix_of(z);
}

struct ProgramInstance::DnsRecall {
  uint64_t key = 0;
  uint32_t t = 0;             // the query's time (memory units)
  bool record = false;        // a query: remember the decision
  const DnsMemo* hit = nullptr;  // a response: its query's decision
  uint64_t seed = 0;          // masks of this exchange (the same in query and response)
};

// Names of one DNS message already decided by a zanon rule: the same name
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

// Not a PRF, but keyed by a per-instance secret and never published: an
// accidental collision needs the same flow, direction and transaction id
// too, and a deliberate one needs the secret.
uint64_t ProgramInstance::dns_memo_key(uint32_t flow, unsigned qdir, uint16_t id, std::string_view qname) const {
  uint64_t h = dns_memo_secret_ ^ (uint64_t(flow) << 32 | uint64_t(id) << 8 | qdir << 1 | 1) ^ (qname.size() * 0x9e3779b97f4a7c15ULL);
  size_t i = 0;
  for (; i + 8 <= qname.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, qname.data() + i, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  h = splitmix_of(h ^ tail_word(qname, i));
  return h | 1;  // 0 marks a free entry
}

names::Decision ProgramInstance::decide_name(FieldId f, std::string_view text, Eval& e, DnsRecall* recall,
                                             MsgNames* seen) {
  int ri = pick(f, e);
  if (ri < 0) return names::Decision::keep();
  const NamePlan& np = name_plan_[ri];
  switch (np.kind) {
    case NamePlan::Keep: return names::Decision::keep();
    case NamePlan::Drop: return e.drop = true, names::Decision::redact();
    case NamePlan::Hash: return names::Decision::mask(name_key_[ri] ? name_key_[ri] : 1);
    case NamePlan::Redact: return names::Decision::redact();
    case NamePlan::Zanon: break;
  }
  // Names are counted case-insensitively, without a trailing dot (the
  // parsers give the lowercased presentation form).
  while (!text.empty() && text.back() == '.') text.remove_suffix(1);
  if (seen)
    for (unsigned i = 0; i < seen->n; ++i)
      if (seen->seen[i].rule == ri && seen->seen[i].cls == field_class_[f] && seen->seen[i].text == text)
        return seen->seen[i].d;
  const names::Decision d = decide_zanon(f, ri, np, text, e, recall);
  if (seen && seen->n < MsgNames::kMax) seen->seen[seen->n++] = {text, ri, field_class_[f], d};
  return d;
}

names::Decision ProgramInstance::decide_zanon(FieldId f, int ri, const NamePlan& np, std::string_view text, Eval& e,
                                              DnsRecall* recall) {
  DnsOutcome out;
  uint8_t keep = 0;
  uint64_t seed;
  if (recall && recall->hit && recall->hit->rule == uint16_t(ri)) {
    // The query's decision, not a new observation: the exchange is one
    // occurrence, and the response must not release what the query hid
    // (nor hide what it released).
    out = DnsOutcome(recall->hit->outcome);
    keep = recall->hit->sld_keep;
    seed = recall->seed;
  } else {
    // A hidden name gets fresh random masks, so hidden values cannot be
    // linked across exchanges (a stable pseudonym of a rare name would single
    // its users out). Within one exchange the query's seed is reused, so the
    // response shows the query's masked name.
    seed = recall ? recall->seed : splitmix(rng_);
    zanon::Store* st = prog_.services_->zstore;
    if (!e.have_user) e.user = user_of(e.client, e.alen), e.have_user = true;
    const zanon::ZParams zp = np.zp;
    zanon::Scope sc{field_class_[f], zscope_.kind};
    out = DnsOutcome::Hidden;
    NameKeys* nk = name_keys_.empty() ? nullptr : name_keys(sc, text, *st);
    const zanon::Key key = nk ? zanon::Key{sc, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}, nk->h}
                              : st->key(sc, text);
    if (st->observe(key, e.user, e.m->ts_ns, zp)) {
      out = DnsOutcome::Released;
    } else if (np.fb == NamePlan::FbSld) {
      SldInfo si;
      if (!nk) {
        si = sld_info(text, key.h);
      } else {
        if (!nk->have_si) nk->si = sld_info(text, key.h), nk->have_si = true;
        si = nk->si;
      }
      if (si.keep != 0 && si.keep < si.total) {
        // The registrable domain is a value of the same class with its own test.
        std::string_view sld = text.substr(text.size() - si.sld_len);
        zanon::Key sk;
        if (!nk) {
          sk = st->key(sc, sld);
        } else {
          if (!nk->have_sld_h) nk->sld_h = st->key(sc, sld).h, nk->have_sld_h = true;
          sk = zanon::Key{sc, {reinterpret_cast<const uint8_t*>(sld.data()), sld.size()}, nk->sld_h};
        }
        if (st->observe(sk, e.user, e.m->ts_ns, zp)) out = DnsOutcome::Sld, keep = si.keep;
      }
    }
    if (recall && recall->record) {
      DnsMemo& slot = dns_memo_slot(recall->key);
      slot = DnsMemo{recall->key, recall->t, uint16_t(ri), uint8_t(out), keep};
    }
  }
  if (out == DnsOutcome::Released) return ++e.c->zanon_released, names::Decision::keep();
  ++e.c->zanon_hidden;
  if (out == DnsOutcome::Sld) return names::Decision::mask_left_of(keep, seed);
  if (np.fb == NamePlan::FbHash) return names::Decision::mask(name_key_[ri] ? name_key_[ri] : 1);
  if (np.fb == NamePlan::FbRedact) return names::Decision::redact();
  return names::Decision::mask(seed);
}

ProgramInstance::DnsMemo& ProgramInstance::dns_memo_slot(uint64_t key) {
  DnsMemo* set = &dns_memo_[(key >> 20) % kDnsMemoSets * kDnsMemoWays];
  DnsMemo* victim = set;
  for (unsigned i = 0; i < kDnsMemoWays; ++i) {
    if (set[i].key == key || set[i].key == 0) return set[i];
    // Oldest by wrap-around age relative to the newest entry's time.
    if (int32_t(set[i].t - victim->t) < 0) victim = &set[i];
  }
  return *victim;
}

const ProgramInstance::DnsMemo* ProgramInstance::dns_memo_find(uint64_t key, uint32_t now) const {
  const DnsMemo* set = &dns_memo_[(key >> 20) % kDnsMemoSets * kDnsMemoWays];
  for (unsigned i = 0; i < kDnsMemoWays; ++i)
    if (set[i].key == key) return uint32_t(now - set[i].t) <= kDnsMemoMaxAge ? &set[i] : nullptr;
  return nullptr;
}

// A hit must equal the name byte for byte (the tag only finds the slot), so
// a collision of this cheap hash costs a miss, never a wrong key.
ProgramInstance::NameKeys* ProgramInstance::name_keys(zanon::Scope sc, std::string_view text, const zanon::Store& st) {
  const size_t n = text.size();
  if (n > NameKeys::kText) return nullptr;
  uint64_t h = name_keys_secret_ ^ (n * 0x9e3779b97f4a7c15ULL) ^ (uint64_t(sc.cls) << 32 | sc.kind);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, text.data() + i, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  const uint64_t tag = splitmix_of(h ^ tail_word(text, i)) | 1;
  NameKeys* set = &name_keys_[(tag >> 32) % kNameKeySets * 2];
  auto same = [&](const NameKeys& k) {
    return k.tag == tag && k.len == n && k.cls == sc.cls && k.kind == sc.kind && std::memcmp(k.text, text.data(), n) == 0;
  };
  if (same(set[0])) return &set[0];
  if (same(set[1])) return &set[1];
  // Newest first, the older one moves to the other way (an entry is two
  // lines: no swap on a hit).
  set[1] = set[0];
  NameKeys& k = set[0];
  k.tag = tag;
  k.h = st.key(sc, text).h;
  k.cls = sc.cls;
  k.kind = sc.kind;
  k.len = uint8_t(n);
  k.have_si = k.have_sld_h = false;
  std::memcpy(k.text, text.data(), n);
  return &k;
}

ProgramInstance::SldInfo ProgramInstance::sld_info(std::string_view name, const zanon::Hash128& h) {
  const uint64_t tag = h.hi | 1;
  SldSlot* set = &sld_cache_[(h.lo >> 32) % kSldSets * 2];
  if (set[0].tag == tag) return set[0].info;
  if (set[1].tag == tag) {
    std::swap(set[0], set[1]);  // most recent first: the other way is the victim
    return set[0].info;
  }
  SldInfo si;
  const unsigned total = names::count_labels(name), keep = names::registrable_label_count(name);
  si.total = uint8_t(std::min(total, 255u));
  si.keep = uint8_t(std::min(keep, 255u));
  if (keep != 0 && keep < total) {
    size_t pos = name.size();
    for (unsigned j = 0; j < keep; ++j) pos = name.rfind('.', pos - 1);
    si.sld_len = uint16_t(name.size() - pos - 1);
  }
  set[1] = set[0];
  set[0] = SldSlot{tag, si};
  return si;
}

bool ProgramInstance::apply_text(FieldId f, uint8_t* p, uint32_t len, Eval& e) {
  int ri = pick(f, e);
  if (ri < 0) return true;
  const ActionCall& a = prog_.policy_->rules[ri].action;
  if (a.desc->name == "zanon") {
    zanon::Store* st = prog_.services_->zstore;
    if (!e.have_user) e.user = user_of(e.client, e.alen), e.have_user = true;
    zanon::ZParams zp{uint32_t(a.int_or("z", 10)), uint64_t(a.int_or("dt", 0))};
    zanon::Scope sc{field_class_[f], zscope_.kind};
    if (st->observe(st->key(sc, std::span<const uint8_t>(p, len)), e.user, e.m->ts_ns, zp))
      return ++e.c->zanon_released, true;
    ++e.c->zanon_hidden;
    return zfallback_[ri]->bytes(p, len, *e.ctx) != ActResult::Drop;
  }
  return actions_[ri]->bytes(p, len, *e.ctx) != ActResult::Drop;
}

bool ProgramInstance::apply_addr_occ(FieldId f, uint8_t* a, uint8_t family, Eval& e) {
  int ri = pick(f, e);
  if (ri < 0) return true;
  const ActionCall& call = prog_.policy_->rules[ri].action;
  uint8_t saved = e.ctx->family;
  e.ctx->family = family;
  bool ok = true;
  if (call.desc->name == "zanon") {
    zanon::Store* st = prog_.services_->zstore;
    if (!e.have_user) e.user = user_of(e.client, e.alen), e.have_user = true;
    zanon::ZParams zp{uint32_t(call.int_or("z", 10)), uint64_t(call.int_or("dt", 0))};
    zanon::Scope sc{field_class_[f], zscope_.kind};
    if (st->observe(st->key(sc, std::span<const uint8_t>(a, family == 4 ? 4 : 16)), e.user, e.m->ts_ns, zp)) {
      ++e.c->zanon_released;
    } else {
      ++e.c->zanon_hidden;
      ok = zfallback_[ri]->addr(a, *e.ctx) != ActResult::Drop;
    }
  } else {
    ok = actions_[ri]->addr(a, *e.ctx) != ActResult::Drop;
  }
  e.ctx->family = saved;
  return ok;
}


bool ProgramInstance::l7_dns(uint8_t* msg, uint32_t len, Eval& e, int msg_index) {
  const L7Fields& L = L7Fields::get();
  L7Parse& P = *e.m->parse;
  if (P.dns_msg != msg_index) {
    // Parse from the original bytes (the copy is identical in this span:
    // nothing before the application layer rewrites payload bytes).
    const uint8_t* orig = e.m->orig + (msg - e.buf);
    dns::parse(orig, len, *P.dns);
    P.dns_msg = msg_index;
  }
  const dns::ParseResult& pr = *P.dns;
  if (pr.status != dns::Status::Ok) return false;
  struct Ctx {
    ProgramInstance* self;
    Eval* e;
    const L7Fields* L;
    DnsRecall* rc = nullptr;
    std::string_view qname;
    MsgNames seen;  // default-initialised: its slots are not zeroed per message
  } cx;
  cx.self = this;
  cx.e = &e;
  cx.L = &L;
  // The exchange this message belongs to: a query records its first
  // question's decision, a response recalls it for that question and for the
  // owner names equal to it. Other names (CNAME targets, rdata) are decided
  // at their own time.
  DnsRecall rc;
  if (!dns_memo_.empty() && e.m->flow && e.m->flow->dns_flow && pr.hdr.qdcount && pr.n_names &&
      pr.names[0].role == dns::NameRole::Qname) {
    cx.qname = pr.name_text(0);
    const bool response = pr.hdr.qr();
    const unsigned qdir = (e.m->initiator_is_src ? 0u : 1u) ^ (response ? 1u : 0u);
    rc.key = dns_memo_key(e.m->flow->dns_flow, qdir, pr.hdr.id, cx.qname);
    const uint32_t now = uint32_t(e.m->ts_ns >> 20);
    if (!response) {
      rc.record = true;
      rc.t = now;
    } else if (const DnsMemo* h = dns_memo_find(rc.key, now)) {
      rc.hit = h;
      rc.t = h->t;
    }
    if (rc.record || rc.hit) {
      rc.seed = splitmix_of(dns_memo_secret_ ^ rc.key ^ (uint64_t(rc.t) << 17));
      cx.rc = &rc;
    }
  }
  auto fn = [](void* vctx, const dns::NameView& nv) -> names::Decision {
    auto* c = static_cast<Ctx*>(vctx);
    const L7Fields& L = *c->L;
    FieldId f;
    bool owner = false;
    switch (nv.role) {
      case dns::NameRole::Qname: f = L.dns_qname; break;
      case dns::NameRole::AnswerOwner:
      case dns::NameRole::AuthorityOwner:
      case dns::NameRole::AdditionalOwner: f = L.dns_answer_name, owner = true; break;
      default: f = L.dns_rdata_name; break;
    }
    DnsRecall* rc = nullptr;
    if (c->rc && (nv.index == 0 || (owner && c->rc->hit && nv.text == c->qname))) rc = c->rc;
    return c->self->decide_name(f, nv.text, *c->e, rc, &c->seen);
  };
  uint64_t* const sums = e.l7_sums;  // msg is the payload's start when set
  const uint32_t roles = dns_roles_;
  // Only an exchange's seed can come back (a fresh random one cannot): a
  // query stores its question's masks, its response takes them.
  if (cx.rc) first_masks_->reuse = cx.rc->hit != nullptr;
  if (roles) dns::rewrite_names(msg, len, pr, fn, &cx, sums, roles, cx.rc ? first_masks_.get() : nullptr);
  auto span_sum = [&](unsigned off, unsigned n) -> uint64_t {
    const uint16_t s = csum_sum({msg + off, n});
    return (off & 1) ? uint16_t(s << 8 | s >> 8) : s;
  };
  if (dns_addr_rules_)
    for (unsigned i = 0; i < pr.n_addrs; ++i) {
      const unsigned off = pr.addrs[i].off, n = pr.addrs[i].family == 4 ? 4 : 16;
      if (sums) sums[0] += span_sum(off, n);
      if (!apply_addr_occ(L.dns_answer_addr, msg + off, pr.addrs[i].family, e)) e.drop = true;
      if (sums) sums[1] += span_sum(off, n);
    }
  if (pr.ecs.present && pr.ecs.addr_len) {
    int ri = pick(L.dns_ecs, e);
    if (ri >= 0) {
      const std::string& n = prog_.policy_->rules[ri].action.desc->name;
      if (n == "drop") e.drop = true;
      // The subnet is the client's own network: any protecting action
      // removes it (the prefix length stays, so the option still parses).
      else if (n != "keep") {
        if (sums) sums[0] += span_sum(pr.ecs.addr_off, pr.ecs.addr_len);
        std::memset(msg + pr.ecs.addr_off, 0, pr.ecs.addr_len);
      }
    }
  }
  return true;
}

// Rewrites the application fields of this consumer's copy. Returns false when
// they cannot be located although this policy protects them (the caller
// applies on_error), and sets e.drop for drop() rules.
bool ProgramInstance::l7_rewrite(uint8_t* buf, const Decoded& d, Eval& e) {
  const PacketMeta& m = *e.m;
  if (m.l7 == L7State::None) return true;
  bool protects = prog_.l7_protect_ & (1u << m.app);
  if (m.l7 != L7State::Parsed) return !protects;
  const L7Fields& L = L7Fields::get();
  L7Parse& P = *m.parse;
  uint8_t* pl = buf + d.payload_off;
  const uint32_t avail = std::min<uint32_t>(d.cap_len, d.payload_off + d.payload_len) - d.payload_off;
  switch (App(m.app)) {
    case App::Dns:
      return l7_dns(pl, avail, e, 0) || !protects;
    case App::DnsTcp: {
      const dns::TcpSplit& sp = *P.split;
      for (unsigned i = 0; i < sp.n; ++i)
        if (!l7_dns(pl + sp.msgs[i].off, sp.msgs[i].len, e, int(i)) && protects) return false;
      return true;
    }
    case App::Tls: {
      // The flow remembers whether this consumer left the name in clear:
      // the server's handshake may name it again (see tls_server_hs).
      bool clear = false;
      auto note = [&](bool all_kept) {
        if (!m.flow) return;
        const uint16_t bit = uint16_t(1u << prog_.consumer_);
        m.flow->sni_clear = all_kept ? uint16_t(m.flow->sni_clear | bit) : uint16_t(m.flow->sni_clear & ~bit);
      };
      if (P.tls_prefix) {
        const tls::PrefixSni& ps = *P.prefix_sni;
        clear = ps.n > 0;
        for (unsigned i = 0; i < ps.n; ++i) {
          names::Decision dec = decide_name(L.tls_sni, std::string_view(ps.text[i], ps.text_len[i]), e);
          if (dec.action != names::Action::Keep) {
            clear = false;
            names::apply_to_text(reinterpret_cast<char*>(pl + P.tls_skip + ps.span[i].off), ps.span[i].len, dec);
          }
        }
        note(clear);
        return true;
      }
      const tls::ClientHello& ch = *P.tls;
      clear = ch.n_sni > 0;
      for (unsigned i = 0; i < ch.n_sni; ++i) {
        names::Decision dec = decide_name(L.tls_sni, ch.sni_text(i), e);
        if (dec.action != names::Action::Keep) {
          clear = false;
          tls::rewrite_sni(pl + P.tls_skip, avail - P.tls_skip, ch, i, dec);
        }
      }
      note(clear);
      return true;
    }
    case App::Quic: {
      quic::Datagram& Q = *P.quic;
      names::Decision dec[quic::Datagram::kMaxNames];
      bool change = false;
      for (unsigned i = 0; i < Q.n_names; ++i) {
        dec[i] = decide_name(L.tls_sni, Q.name_text(i), e);
        change = change || dec[i].action != names::Action::Keep;
      }
      // Re-encrypted only when this consumer's names differ.
      if (!change) return true;
      return quic::rewrite(pl, avail, Q, dec, *P.qcrypto) || !protects;
    }
    case App::Http: {
      const http::Result& H = *P.http;
      for (unsigned i = 0; i < H.n_occ; ++i) {
        const http::Occurrence& oc = H.occ[i];
        uint8_t* p = pl + oc.span.off;
        uint32_t n = oc.span.len;
        bool ok = true;
        switch (oc.kind) {
          case http::Field::HostDomain: {
            names::Decision dec = decide_name(L.http_host, std::string_view(reinterpret_cast<const char*>(m.orig + d.payload_off + oc.span.off), n), e);
            if (dec.action != names::Action::Keep) names::apply_to_text(reinterpret_cast<char*>(p), n, dec);
            break;
          }
          case http::Field::Host: {
            // A Host that is an address literal has no domain span, yet it
            // names the server all the same: decide on the whole value.
            bool has_domain = false;
            for (unsigned k = 0; k < H.n_occ && !has_domain; ++k)
              has_domain = H.occ[k].kind == http::Field::HostDomain && H.occ[k].header == oc.header;
            if (!has_domain) {
              names::Decision dec = decide_name(L.http_host, std::string_view(reinterpret_cast<const char*>(m.orig + d.payload_off + oc.span.off), n), e);
              if (dec.action != names::Action::Keep) names::apply_to_text(reinterpret_cast<char*>(p), n, dec);
            }
            break;
          }
          case http::Field::Method: ok = apply_text(L.http_method, p, n, e); break;
          case http::Field::Uri: ok = apply_text(L.http_uri, p, n, e); break;
          case http::Field::UserAgent: ok = apply_text(L.http_user_agent, p, n, e); break;
          case http::Field::Referer: ok = apply_text(L.http_referer, p, n, e); break;
          case http::Field::Cookie: ok = apply_text(L.http_cookie, p, n, e); break;
          case http::Field::SetCookie: ok = apply_text(L.http_set_cookie, p, n, e); break;
          case http::Field::Authorization: ok = apply_text(L.http_authorization, p, n, e); break;
          case http::Field::Xff:
          case http::Field::Forwarded: ok = apply_text(L.http_xff, p, n, e); break;
          case http::Field::Location: ok = apply_text(L.http_location, p, n, e); break;
          case http::Field::Server: ok = apply_text(L.http_server, p, n, e); break;
          default: break;
        }
        if (!ok) e.drop = true;
      }
      return true;
    }
    default:
      return true;
  }
}

namespace {

// Follows the server's TLS records across segments and tells whether this
// segment carries handshake bytes sent before encryption starts: in TLS 1.2
// and earlier they hold the server's certificate chain, which names the
// server. A TLS 1.3 ServerHello (supported_versions 0x0304) ends the watch:
// everything after it is encrypted. Losing the record boundaries (a record
// header split over segments, a gap, garbage) keeps the watch on: fail closed.
bool tls_server_records(const uint8_t* pl, uint32_t avail, FlowState* fs) {
  if (!fs) return true;  // no flow: nothing says where records start
  if (fs->tls_srv == 1) return false;
  if (fs->tls_srv == 2) return true;
  bool hs = false;
  uint32_t off = 0;
  if (fs->tls_srv_left) {
    uint32_t k = std::min<uint32_t>(fs->tls_srv_left, avail);
    hs = fs->tls_srv_type == 22;
    fs->tls_srv_left = uint16_t(fs->tls_srv_left - k);
    off = k;
  }
  while (off < avail) {
    if (avail - off < 5) {
      fs->tls_srv = 2;
      return true;
    }
    const uint8_t type = pl[off];
    const uint32_t len = uint32_t(pl[off + 3]) << 8 | pl[off + 4];
    if (type < 20 || type > 24 || pl[off + 1] != 3 || len > 18432) {
      fs->tls_srv = 2;
      return true;
    }
    if (type == 23) {  // application data: the handshake is over
      fs->tls_srv = 1;
      fs->tls_srv_left = 0;
      return hs;
    }
    if (type == 22) {
      if (off + 5 + len <= avail && tls::server_hello_version(pl + off + 5, len) == 0x0304) {
        fs->tls_srv = 1;  // TLS 1.3: the certificate travels encrypted
        fs->tls_srv_left = 0;
        return hs;
      }
      hs = true;
    }
    const uint32_t take = std::min<uint32_t>(len, avail - off - 5);
    off += 5 + take;
    if (take < len) {
      fs->tls_srv_left = uint16_t(len - take);
      fs->tls_srv_type = type;
    }
  }
  return hs;
}

// The application parse of `avail` payload bytes, for one packet or for a
// stream reassembled from held segments. Keeps the flow's stream state and
// sets P.hold_hint when the bytes end inside a header that more bytes of
// this direction would complete.
L7State parse_app(const uint8_t* pl, uint32_t avail, bool cut_short, App app, bool from_init, FlowState* fs, int dir,
                  L7Parse& P) {
  switch (app) {
    case App::Dns:
      if (cut_short) return L7State::Incomplete;
      dns::parse(pl, avail, *P.dns);
      P.dns_msg = 0;
      return P.dns->status == dns::Status::Ok ? L7State::Parsed : L7State::Malformed;
    case App::DnsTcp: {
      dns::Status st = dns::split_tcp(pl, avail, *P.split);
      P.dns_msg = -1;
      if (st == dns::Status::Malformed || cut_short) return L7State::Malformed;
      if (st == dns::Status::Truncated) {
        if (fs && P.split->need) fs->pending[dir] = P.split->need - (avail - P.split->partial_off);
        P.hold_hint = true;
        return L7State::Incomplete;
      }
      return L7State::Parsed;
    }
    case App::Tls: {
      // Only the client's ClientHello carries names; later records are opaque.
      // After a HelloRetryRequest the second ClientHello may follow a
      // ChangeCipherSpec record in the same segment.
      if (!from_init) return L7State::None;  // the server's records: tls_server_records()
      uint32_t skip = 0;
      while (skip + 6 <= avail && pl[skip] == 0x14 && pl[skip + 1] == 0x03)
        skip += 5 + (uint32_t(pl[skip + 3]) << 8 | pl[skip + 4]);
      if (skip >= avail || pl[skip] != 0x16) return L7State::None;
      // Other client handshake messages (ClientKeyExchange, Finished, ...)
      // carry no names.
      if (skip + 5 < avail && pl[skip + 5] != 0x01) return L7State::None;
      P.tls_skip = skip;
      tls::Status st = tls::parse_client_hello(pl + skip, avail - skip, *P.tls);
      P.tls_state = 1;
      if (st == tls::Status::Ok) return L7State::Parsed;
      if (st != tls::Status::Truncated) return L7State::Malformed;
      if (fs && P.tls->need > avail - skip) fs->pending[dir] = P.tls->need - (avail - skip);
      // Most split hellos carry the SNI in their first segment: find it
      // there and the segments that follow can pass.
      if (fs && fs->pending[dir] && tls::find_sni_in_prefix(pl + skip, avail - skip, *P.prefix_sni)) {
        P.tls_prefix = true;
        fs->names_done |= uint8_t(1u << dir);
        return L7State::Parsed;
      }
      P.hold_hint = !cut_short;
      return L7State::Incomplete;
    }
    case App::Http: {
      http::Direction hd = P.http_udp ? http::Direction::Auto  // SSDP: either, either way
                           : from_init ? http::Direction::Request : http::Direction::Response;
      http::Status st = http::parse(pl, avail, hd, http_matcher(), *P.hscratch, *P.http);
      P.http_state = 1;
      const http::Result& H = *P.http;
      L7State r;
      if (st == http::Status::Ok) {
        r = L7State::Parsed;
      } else if (st == http::Status::Truncated && H.body_missing && !cut_short) {
        r = L7State::Parsed;  // heads complete; the body goes on in later segments
        if (fs) fs->body[dir] = uint32_t(std::min<uint64_t>(H.body_missing, UINT32_MAX));
      } else if (st == http::Status::Truncated) {
        r = L7State::Incomplete;
        P.hold_hint = !cut_short && !P.http_udp;
      } else {
        r = L7State::Malformed;
      }
      if (fs && H.n_msgs && H.msgs[H.n_msgs - 1].body_unbounded) fs->unbounded[dir] = 1;
      return r;
    }
    default:
      return L7State::None;
  }
}

}  // namespace

void analyze_l7(const uint8_t* p, const Decoded& d, PacketMeta& m, L7Parse& P) {
  m.parse = &P;
  m.l7 = L7State::None;
  if (d.status != DecodeStatus::Ok || !d.l4_hdr_len || (d.flags & kFlagLaterFragment)) return;
  FlowState* fs = m.flow;
  const bool from_init = m.initiator_is_src;
  const int dir = from_init ? 0 : 1;
  const uint32_t end = std::min<uint32_t>(d.cap_len, d.payload_off + d.payload_len);
  const uint32_t avail = end > d.payload_off ? end - d.payload_off : 0;
  // DNS over UDP on its ports (the bulk of a resolver link): what the steps
  // below conclude for it, without their questions. UDP flows never set the
  // stream fields (pending, body, released, stream_failed: TCP only), so only
  // the flow's DNS number and the parse remain.
  if (d.l4_proto == kProtoUdp && (is_dns_port(d.sport) || is_dns_port(d.dport))) {
    m.app = uint8_t(App::Dns);
    if (avail == 0) return;
    if (fs && !fs->dns_flow)
      if (!(fs->dns_flow = ++P.dns_flows)) fs->dns_flow = ++P.dns_flows;  // 0 means "none"
    if (d.payload_off + d.payload_len > d.cap_len) {
      m.l7 = L7State::Incomplete;  // cut short by the capture: cannot be parsed to its end
      return;
    }
    dns::parse(p + d.payload_off, avail, *P.dns);
    P.dns_msg = 0;
    m.l7 = P.dns->status == dns::Status::Ok ? L7State::Parsed : L7State::Malformed;
    return;
  }
  App app = fs && fs->app ? App(fs->app) : detect_app(p, d, from_init, P.probe_scratch);
  if (app == App::Other && P.probe_dns && d.l4_proto == kProtoUdp && avail >= 17) {
    const uint8_t* q = p + d.payload_off;
    uint16_t qd = uint16_t(q[4] << 8 | q[5]);
    // Standard query/response with a question or two, and a full parse.
    if (((q[2] >> 3) & 0xf) == 0 && qd >= 1 && qd <= 2 && dns::parse(q, avail, *P.dns) == dns::Status::Ok)
      app = App::Dns;
  }
  if (fs && !fs->app && avail && d.l4_proto == kProtoTcp && app != App::Other) fs->app = uint8_t(app);
  m.app = uint8_t(app);
  if (avail == 0 || app == App::Other || app == App::Unknown) return;
  const uint8_t* pl = p + d.payload_off;
  // A payload the capture cut short cannot be parsed to its end.
  const bool cut_short = d.payload_off + d.payload_len > d.cap_len;
  if (fs && d.l4_proto == kProtoTcp) {
    // A header of this direction could not be completed: what follows may
    // be its rest, and nothing marks where it ends.
    if (fs->stream_failed & (1u << dir)) {
      m.l7 = L7State::Incomplete;
      return;
    }
    // A retransmission of bytes rewritten from a held stream: its slice of
    // that rewrite is gone, so it cannot be rewritten the same way.
    if (fs->released & (1u << dir)) {
      uint32_t seq = uint32_t(p[d.l4_off + 4]) << 24 | uint32_t(p[d.l4_off + 5]) << 16 |
                     uint32_t(p[d.l4_off + 6]) << 8 | p[d.l4_off + 7];
      int32_t delta = int32_t(seq - fs->released_end[dir]);
      if (delta < 0 && delta > -(1 << 30)) {
        m.l7 = L7State::Incomplete;
        return;
      }
    }
  }
  if (fs && fs->pending[dir]) {
    fs->pending[dir] -= std::min<uint32_t>(fs->pending[dir], d.payload_len);
    // The rest of a ClientHello whose SNI was already found and rewritten
    // holds no name (one server_name extension per hello, RFC 8446 4.2).
    m.l7 = (fs->names_done & (1u << dir)) ? L7State::None : L7State::Incomplete;
    if (!fs->pending[dir]) fs->names_done &= uint8_t(~(1u << dir));
    return;
  }
  if (fs && fs->body[dir]) {  // body bytes of a known length: nothing to parse
    uint64_t used = std::min<uint64_t>(fs->body[dir], d.payload_len);
    fs->body[dir] -= used;
    if (used == d.payload_len) return;
    m.l7 = L7State::Incomplete;  // a new head starts inside this segment: not located
    return;
  }
  if (fs && !fs->dns_flow && (app == App::Dns || app == App::DnsTcp))
    if (!(fs->dns_flow = ++P.dns_flows)) fs->dns_flow = ++P.dns_flows;  // 0 means "none"
  if (app == App::Quic) {
    // Decrypted once here; consumers that protect tls.sni rewrite their
    // copy (l7_rewrite). Datagrams that can hold no client name (1-RTT,
    // Handshake, 0-RTT, Retry, the server's Initials, ACK-only Initials)
    // pass; anything not understood fails closed.
    quic::FlowState qs;
    if (fs) qs = {fs->quic_mode, fs->quic_client, fs->quic_a, fs->quic_b, fs->quic_end};
    // One direction of the flow: keys its remembered DCID per worker.
    uint64_t fk = 0x9e3779b97f4a7c15ULL ^ (uint64_t(d.sport) << 16 | d.dport);
    if (d.has_ip() && d.dst_off() + d.addr_len() <= d.cap_len) {
      for (uint32_t i = 0; i < d.addr_len(); ++i) fk = (fk ^ p[d.src_off() + i]) * 0x100000001b3ULL;
      for (uint32_t i = 0; i < d.addr_len(); ++i) fk = (fk ^ p[d.dst_off() + i]) * 0x100000001b3ULL;
    }
    quic::Status st = quic::analyze(pl, avail, dir, fk | 1, *P.qcrypto, qs, *P.quic);
    if (fs) fs->quic_mode = qs.mode, fs->quic_client = qs.client, fs->quic_a = qs.a, fs->quic_b = qs.b, fs->quic_end = qs.end;
    P.quic_state = 1;
    switch (st) {
      case quic::Status::None: m.l7 = L7State::None; break;
      case quic::Status::Located: m.l7 = L7State::Parsed; break;
      case quic::Status::Incomplete: m.l7 = L7State::Incomplete; break;
      case quic::Status::Malformed: m.l7 = L7State::Malformed; break;
    }
    return;
  }
  if (app == App::Http && fs && fs->unbounded[dir]) {
    // Inside a body of unknown length: only a new message start ends it.
    bool starts = avail >= 8 && (std::memcmp(pl, "HTTP/1.", 7) == 0 || detect_app(p, d, from_init, P.probe_scratch) == App::Http);
    if (!starts || (std::memcmp(pl, "HTTP/1.", 7) != 0 && pl[0] < 'A')) return;
    fs->unbounded[dir] = 0;
  }
  P.http_udp = d.l4_proto == kProtoUdp;
  m.l7 = parse_app(pl, avail, cut_short, app, from_init, fs, dir, P);
  if (app == App::Tls && !from_init && d.l4_proto == kProtoTcp) m.tls_server_hs = tls_server_records(pl, avail, fs);
}

L7State analyze_stream(const uint8_t* b, uint32_t len, uint8_t app, bool from_initiator, FlowState* fs, L7Parse& P) {
  P.packet = ~0ULL;  // the next packet parses anew
  P.dns_msg = -1;
  P.tls_state = P.http_state = 0;
  P.tls_prefix = P.hold_hint = P.http_udp = false;
  const int dir = from_initiator ? 0 : 1;
  if (fs) fs->pending[dir] = 0, fs->names_done &= uint8_t(~(1u << dir));
  return parse_app(b, len, false, App(app), from_initiator, fs, dir, P);
}

}  // namespace amon
