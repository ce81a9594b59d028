#include "runtime.h"

#include <cstring>
#include <stdexcept>

#include "actions_rt.h"
#include "checksum.h"
#include "keyed_hash.h"
#include "zanon.h"

namespace amon {

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

inline uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
inline void wr16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); }

}  // namespace

Program::Program(std::shared_ptr<const dsl::Policy> policy, int consumer_index, SharedServices* services)
    : policy_(std::move(policy)), consumer_(consumer_index), services_(services) {
  if (consumer_ < 0 || consumer_ >= kMaxConsumers)
    throw std::runtime_error("at most " + std::to_string(kMaxConsumers) + " consumers");
  const auto& F = l2l4::g_fields;
  const auto& rules = policy_->rules;
  plans_.resize(rules.size() + 1);
  int zslots = 0;
  for (const auto& r : rules) {
    if (r.when)
      throw std::runtime_error(r.loc.file + ":" + std::to_string(r.loc.line) +
                               ": conditions (`when`) are not supported by this engine yet");
    auto plan = std::make_unique<ActionPlan>();
    plan->call = &r.action;
    bool modifies = r.action.desc->name != "keep";
    if (r.action.desc->name == "zanon") {
      if (zslots == kZSlotsPerConsumer)
        throw std::runtime_error("at most " + std::to_string(kZSlotsPerConsumer) + " zanon rules per policy");
      plan->zslot = zslots;
      plan->zinfo.bit = consumer_ * kZSlotsPerConsumer + zslots;
      plan->zinfo.z = r.action.int_or("z", 10);
      plan->zinfo.dt_ns = r.action.int_or("dt", 0);
      zslot_rule_.push_back(r.index);
      ++zslots;
    }
    for (const FieldDesc* f : r.fields) {
      if (f->id == F.eth_src) mac_src_.push_back(r.index);
      else if (f->id == F.eth_dst) mac_dst_.push_back(r.index);
      else if (is_addr_field(f->id)) addr_rules_.push_back(r.index);
      else if (f->id == F.payload) payload_rules_.push_back(r.index);
      else
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
  if (!policy_->select_bpf.empty() || policy_->select_cond)
    throw std::runtime_error(policy_->select_loc.file + ": `select` is not supported by this engine yet");
}

Program::~Program() = default;

std::unique_ptr<ProgramInstance> Program::instantiate() const { return std::make_unique<ProgramInstance>(*this); }

ProgramInstance::ProgramInstance(const Program& p) : prog_(p), uhash_(p.services_->user_hash_key) {
  actions_.resize(p.plans_.size());
  for (size_t i = 0; i < p.plans_.size(); ++i) {
    const auto& plan = p.plans_[i];
    if (!plan) continue;
    actions_[i] = make_rt_action(*plan->call, *p.policy_, p.services_, plan->zslot >= 0 ? &plan->zinfo : nullptr);
  }
  if (!p.zslot_rule_.empty()) {
    if (!p.services_->zstore) throw std::runtime_error("zanon rules need the z-anonymity store");
    auto* st = p.services_->zstore;
    zscope_.cls = st->class_id("server-addr");
    std::string kind = p.policy_->identifier ? p.policy_->identifier->name : "ip.client";
    if (p.policy_->identifier_prefix >= 0) kind += "/" + std::to_string(p.policy_->identifier_prefix);
    zscope_.kind = st->kind_id(kind);
  }
}

ProgramInstance::~ProgramInstance() = default;

uint64_t ProgramInstance::user_of(const uint8_t* client, uint32_t alen) {
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

Verdict ProgramInstance::process(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                                 ConsumerCounters& c) {
  const Program& P = prog_;
  const dsl::Policy& pol = *P.policy_;
  const auto& F = l2l4::g_fields;
  ApplyCtx ctx;
  ctx.ts_ns = m.ts_ns;
  ctx.d = &d;
  ctx.m = &m;
  ctx.counters = &c;

  auto run = [&](uint32_t rule, auto&& fn) -> ActResult {
    if (c.rule_hits.size() < P.plans_.size()) c.rule_hits.resize(P.plans_.size());
    ++c.rule_hits[rule];
    return fn(*actions_[rule]);
  };

  // L2: MAC addresses exist in every frame we get (decode guarantees 14 bytes
  // or status Truncated with good_until 0).
  if (cap >= 14) {
    ctx.field = F.eth_dst;
    if (!P.mac_dst_.empty() && run(P.mac_dst_[0], [&](RtAction& a) { return a.mac(buf, ctx); }) == ActResult::Drop)
      return ++c.policy_drop, Verdict::Drop;
    ctx.field = F.eth_src;
    if (!P.mac_src_.empty() && run(P.mac_src_[0], [&](RtAction& a) { return a.mac(buf + 6, ctx); }) == ActResult::Drop)
      return ++c.policy_drop, Verdict::Drop;
  }

  uint32_t cut_at = UINT32_MAX;
  auto error_exit = [&](uint32_t at, uint64_t& cut_counter) -> bool {  // true: drop
    if (pol.on_error == dsl::Policy::OnError::Drop) return ++c.err_drop, true;
    ++cut_counter;
    cut_at = std::min(cut_at, at);
    return false;
  };

  if (d.status == DecodeStatus::NotIp) {
    using OU = dsl::Policy::OnUnknown;
    OU ou = pol.on_unknown;
    if (ou == OU::Default) ou = P.protects_addresses_ ? OU::Drop : OU::Keep;
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

  const uint32_t alen = d.addr_len();
  const uint32_t so = d.src_off(), dof = d.dst_off();
  if (dof + alen > cap || so + alen > cap) {
    // Addresses not captured in full: cannot be anonymized, remove the IP layer.
    if (!P.protects_anything_) return Verdict::Forward;
    if (error_exit(d.l3_off, c.err_cut)) return Verdict::Drop;
    cap = wire = cut_at;
    return Verdict::Forward;
  }

  if ((d.flags & kFlagV6Routing) && P.protects_addresses_) {
    // Addresses in the routing header would need the same rewrite; no
    // consumer has asked for it, so such packets are not forwarded.
    return ++c.err_drop, Verdict::Drop;
  }

  // Roles: the policy's clients set decides when exactly one end is inside.
  bool client_is_src = m.initiator_is_src;
  if (!pol.clients.empty()) {
    bool s_in = false, d_in = false;
    uint8_t fam = d.ip_version;
    for (const auto& cidr : pol.clients) {
      s_in = s_in || cidr.contains(fam, buf + so);
      d_in = d_in || cidr.contains(fam, buf + dof);
    }
    if (s_in != d_in) client_is_src = s_in;
  }

  uint8_t old_src[16], old_dst[16];
  std::memcpy(old_src, buf + so, alen);
  std::memcpy(old_dst, buf + dof, alen);
  const uint8_t* client_clear = client_is_src ? old_src : old_dst;
  const uint8_t* server_clear = client_is_src ? old_dst : old_src;
  if (!P.zslot_rule_.empty() && m.flow) decide_flow(server_clear, client_clear, alen, m, c);

  ctx.family = d.ip_version;
  ctx.client_addr = client_clear;
  bool addr_changed = false;
  for (int pos = 0; pos < 2; ++pos) {
    bool is_src = pos == 0;
    bool is_client = is_src == client_is_src;
    FieldId pos_field = is_src ? F.ip_src : F.ip_dst;
    FieldId role_field = is_client ? F.ip_client : F.ip_server;
    for (uint32_t ri : P.addr_rules_) {
      const dsl::Rule& r = pol.rules[ri];
      bool hit = false;
      for (const FieldDesc* f : r.fields) hit = hit || f->id == pos_field || f->id == role_field;
      if (!hit) continue;
      ctx.field = role_field;
      ctx.is_server = !is_client;
      uint8_t* a = buf + (is_src ? so : dof);
      if (run(ri, [&](RtAction& act) { return act.addr(a, ctx); }) == ActResult::Drop)
        return ++c.policy_drop, Verdict::Drop;
      addr_changed = addr_changed || actions_[ri]->modifies;
      break;  // first matching rule wins
    }
  }

  // Content the policy cannot see into, when addresses are protected: a
  // tunnel's inner packet, or the quoted header of an ICMP error.
  if (P.protects_addresses_ && (d.flags & kFlagTunnel) && d.status == DecodeStatus::Ok)
    if (error_exit(d.payload_off, c.tunnel_cut)) return Verdict::Drop;
  if (P.protects_addresses_ && (d.flags & kFlagIcmpError) && d.status == DecodeStatus::Ok)
    if (error_exit(d.payload_off, c.icmp_quote_cut)) return Verdict::Drop;

  // Payload.
  int prule = P.payload_rules_.empty() ? P.payload_default_plan_ : int(P.payload_rules_[0]);
  bool payload_protected = prule >= 0 && actions_[prule]->modifies;
  uint16_t pay_old_sum = 0, pay_new_sum = 0;
  bool payload_changed = false;
  if (d.status != DecodeStatus::Ok) {
    // The payload's start is unknown: if it is protected, keep only what was decoded.
    if (payload_protected && error_exit(std::min(d.good_until, cap), c.err_cut)) return Verdict::Drop;
  } else if (prule >= 0 && cut_at == UINT32_MAX) {
    uint32_t end = std::min<uint64_t>(uint64_t(d.payload_off) + d.payload_len, cap);
    uint32_t n = end > d.payload_off ? end - d.payload_off : 0;
    uint8_t* p = buf + d.payload_off;
    ctx.field = F.payload;
    bool track = actions_[prule]->modifies && n > 0;
    if (track) pay_old_sum = csum_sum({p, n});
    ActResult r = run(uint32_t(prule), [&](RtAction& a) { return a.bytes(p, n, ctx); });
    if (r == ActResult::Drop) return ++c.policy_drop, Verdict::Drop;
    if (r == ActResult::Cut) {
      cut_at = d.payload_off;
    } else if (track) {
      pay_new_sum = csum_sum({p, n});
      payload_changed = true;
    }
  }

  // Fix lengths and checksums.
  uint8_t* ip = buf + d.l3_off;
  const bool v4 = d.ip_version == 4;
  if (cut_at != UINT32_MAX && cut_at < cap) {
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

  if (v4 && cap >= d.l3_off + d.l3_hdr_len && d.l3_hdr_len >= 20) {
    wr16(ip + 10, ipv4_header_checksum({ip, d.l3_hdr_len}));
  }

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
  if (cut_at != UINT32_MAX) {
    // Everything left is captured: recompute in full.
    uint32_t l4len = cap - d.l4_off;
    if (d.l4_proto == kProtoUdp && rd16(l4 + 6) == 0 && v4) return Verdict::Forward;  // no checksum in use
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
  if (!addr_changed && !payload_changed) return Verdict::Forward;
  uint16_t ck = rd16(l4 + csum_off);
  const bool udp = d.l4_proto == kProtoUdp;
  if (udp && ck == 0 && v4) return Verdict::Forward;
  if (pseudo && addr_changed) {
    ck = udp ? csum_replace_udp(ck, {old_src, alen}, {buf + so, alen}) : csum_replace(ck, {old_src, alen}, {buf + so, alen});
    ck = udp ? csum_replace_udp(ck, {old_dst, alen}, {buf + dof, alen}) : csum_replace(ck, {old_dst, alen}, {buf + dof, alen});
  }
  if (payload_changed) {
    // HC' = ~(~HC + ~m + m') over the payload's sums (RFC 1624 eqn. 3).
    uint16_t s = csum_add(csum_add(uint16_t(~ck), uint16_t(~pay_old_sum)), pay_new_sum);
    ck = csum_finish(s);
    if (udp && ck == 0) ck = 0xffff;
  }
  wr16(l4 + csum_off, ck);
  return Verdict::Forward;
}

}  // namespace amon
