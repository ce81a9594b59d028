// Program (a policy compiled for one consumer) and ProgramInstance (its
// per-worker state): construction, and the per-flow z-anonymity decision
// of address rules.
#include "runtime_impl.h"

namespace amon {

uint32_t Program::held_apps() const {
  uint32_t h = 0;
  const auto& v = Registry::instance().protocols();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i]->holds) h |= 1u << (kFirstPluginApp + i);
  return l7_protect_ & h;
}

Program::Program(std::shared_ptr<const dsl::Policy> policy, int consumer_index, SharedServices* services)
    : policy_(std::move(policy)), consumer_(consumer_index), services_(services) {
  if (consumer_ < 0 || consumer_ >= kMaxConsumers)
    throw std::runtime_error("at most " + std::to_string(kMaxConsumers) + " consumers");
  // At every load, not once per process: a registry extended since (a
  // plugin registered late) is checked before any policy runs on it.
  if (std::string m = registry_problems(); !m.empty()) throw std::runtime_error(m);
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
    bool modifies = r.action.desc->protects;
    bool flow_addr = false;  // zanon on ip.* is decided once per flow and needs a slot
    for (const FieldDesc* f : r.fields) flow_addr = flow_addr || is_addr_field(f->id);
    if (r.action.desc->uses_zstore && flow_addr) {
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
          const uint32_t apps = apps_of(proto_bit(f->protocol));
          // A protocol without an application runtime cannot fail closed
          // (nothing would know its packets): refuse the policy.
          if (!apps)
            throw std::runtime_error(r.loc.file + ":" + std::to_string(r.loc.line) + ": field '" + f->name +
                                     "': protocol '" + f->protocol + "' has no application runtime");
          l7_protect_ |= apps;
          protects_anything_ = true;
        }
        if (modifies) identity_ = false;
        continue;
      }
      // field_rules_ (above) is what process() reads; a field outside L2-L4
      // and L7 has no place in it yet.
      if (f->id == F.tunnel_addr || f->id == F.tunnel_vni || f->id == F.gre_key || f->id == F.gtp_teid) {
        tunnel_rules_ = true;
        if (modifies) protects_anything_ = true;
        continue;
      }
      // A link layer's fields: its step (link.cpp) reads field_rules_.
      if (const LinkLayer* link = link_layer(); link && f->protocol == link->name) {
        if (modifies) protects_anything_ = true;
        continue;
      }
      if (f->id != F.eth_src && f->id != F.eth_dst && !is_addr_field(f->id) && f->id != F.payload)
        throw std::runtime_error(r.loc.file + ":" + std::to_string(r.loc.line) + ": field '" + f->name +
                                 "' is not handled by this engine yet");
      if (modifies) {
        protects_anything_ = true;
        if (is_addr_field(f->id)) protects_addresses_ = true;
        // By role: what an address named elsewhere (a reverse-DNS name)
        // takes when it is a user's and when it is not.
        if (f->id != F.ip_server && is_addr_field(f->id)) protects_client_addr_ = true;
        if (f->id != F.ip_client && is_addr_field(f->id)) protects_server_addr_ = true;
      }
    }
    if (modifies) identity_ = false;
    plans_[r.index] = std::move(plan);
  }
  // A field split from a catch-all takes the catch-all's rules while no
  // rule names it (FieldDesc::split_from): a policy written before the
  // split still protects its values.
  // The field's protocol then fails closed as if the rules named it (its
  // parent may be another protocol's field: a device's host name).
  for (const FieldDesc& f : Registry::instance().fields())
    if (!f.split_from.empty() && field_rules_[f.id].empty()) {
      for (const auto& from : f.split_from)
        if (const auto& lent = field_rules_[Registry::instance().field(from)->id]; !lent.empty()) {
          field_rules_[f.id] = lent;
          break;
        }
      for (uint32_t ri : field_rules_[f.id])
        if (rules[ri].action.desc->protects && L.is_l7(f.id)) has_l7_ = true, l7_protect_ |= apps_of(proto_bit(f.protocol));
    }
  // ip.client's unconditional rule, when it protects, is what a user's
  // address gets in every address field, ruled or not (users_apps).
  for (uint32_t ri : field_rules_[F.ip_client])
    if (!rules[ri].when) {
      if (rules[ri].action.desc->protects) user_rule_ = int(ri);
      break;
    }
  if (policy_->payload_default && policy_->payload_default->desc->protects) {
    auto plan = std::make_unique<ActionPlan>();
    plan->call = &*policy_->payload_default;
    payload_default_plan_ = int(rules.size());
    plans_[rules.size()] = std::move(plan);
    identity_ = false;
    protects_anything_ = true;
  }
  using OU = dsl::Policy::OnUnknown;
  if (policy_->on_unknown == OU::Drop || policy_->on_unknown == OU::Cut) identity_ = false;
  addr_text_ = policy_->addr_text == dsl::Policy::AddrText::Map;
  {
    // Kept payload is searched for what the policy rewrote (echo.h) where
    // it protects something and some payload may leave as it came: a
    // payload rule that keeps, or no unconditional one and no protecting
    // default.
    bool keeps = false, fixed = false;
    for (uint32_t ri : field_rules_[F.payload]) {
      keeps = keeps || !rules[ri].action.desc->protects;
      fixed = fixed || !rules[ri].when;
    }
    if (!fixed) keeps = keeps || !(policy_->payload_default && policy_->payload_default->desc->protects);
    echoes_ = policy_->echoes == dsl::Policy::Echoes::Map && protects_anything_ && keeps;
  }
  if (!policy_->select_bpf.empty()) {
    bpf_ = std::make_unique<Bpf>(policy_->select_bpf);
    identity_ = false;
  }
  if (policy_->select_cond) {
    regexes_->collect(*policy_->select_cond);
    identity_ = false;
  }
  for (unsigned app = kFirstPluginApp; app < 32; ++app)
    if (const FieldId f = L.payload_of(uint8_t(app)); f != kNoField && !field_rules_[f].empty()) payload_apps_ |= 1u << app;
  regexes_->compile();
  // `proto in { ... }` sets, as bit masks, once.
  std::function<void(const dsl::Cond&)> masks = [&](const dsl::Cond& c) {
    for (auto& ch : c.children) masks(*ch);
    if (c.kind == dsl::Cond::Kind::ProtoIn) {
      uint32_t m = 0;
      for (auto& p : c.protocols) {
        const uint32_t b = proto_bit(p);
        // A name the checker allowed but no packet is recognised as would
        // make the condition silently false.
        if (!b)
          throw std::runtime_error(c.loc.file + ":" + std::to_string(c.loc.line) + ":" + std::to_string(c.loc.col) +
                                   ": protocol '" + p + "' is not recognised in packets");
        m |= b;
      }
      proto_masks_.emplace_back(&c, m);
    }
  };
  for (const auto& r : rules)
    if (r.when) masks(*r.when);
  if (policy_->select_cond) masks(*policy_->select_cond);
  users_apps();
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
  // snap() ends the record after the outer layers are fixed: the general
  // path's business, not a header kernel's.
  bool snaps = policy_->payload_default && policy_->payload_default->desc->kind == ActionKind::Snap;
  for (const auto& r : rules) snaps = snaps || r.action.desc->kind == ActionKind::Snap;
  hdr_only_ = !snaps && unconditional_ && !has_l7_ && !wants_l7_ && !policy_->select_cond && !bpf_ && zslot_rule_.empty();
  // A header-only policy's packets take the header kernels, which search
  // kept payload for the packet's own addresses alone (addr_text): the
  // few the general path takes would otherwise be treated apart.
  echoes_ = echoes_ && !hdr_only_;
  l7_only_ = unconditional_ && has_l7_ && !policy_->select_cond && !bpf_ && zslot_rule_.empty() &&
             !protects_addresses_ && payload_default_plan_ < 0;
  for (FieldId f : {F.eth_dst, F.eth_src, F.ip_src, F.ip_dst, F.ip_client, F.ip_server, F.payload})
    l7_only_ = l7_only_ && fixed_rule_[f] < 0;
  l7_only_ = l7_only_ && !tunnel_rules_;
  // Outer addresses without a rule of their own (doc/architecture.md, "Tunnels").
  if (field_rules_[F.tunnel_addr].empty() && protects_addresses_) {
    for (uint32_t ri : field_rules_[F.ip_server])
      if (!rules[ri].when) {
        tunnel_addr_default_ = int(ri);
        break;
      }
    tunnel_addr_zero_ = tunnel_addr_default_ < 0;
    for (uint32_t ri : field_rules_[F.ip_client])
      if (!rules[ri].when) {
        tunnel_client_rule_ = int(ri);
        break;
      }
  }
  // The server side may be weaker than the client side only where `clients`
  // says who the users are; else a host that also initiates flows is a user.
  guard_users_ = policy_->clients.empty() && !field_rules_[F.ip_client].empty() &&
                 field_rules_[F.ip_server] != field_rules_[F.ip_client];
  // With `clients`, a flow with neither end inside still has a client (its
  // initiator), pseudonymized as a user: kept as a server elsewhere, the
  // same host would leave in clear beside its pseudonym.
  learns_users_ = !policy_->clients.empty() && !field_rules_[F.ip_client].empty() &&
                  field_rules_[F.ip_server] != field_rules_[F.ip_client];
  mac_rule_[0] = fixed_rule_[F.eth_dst];
  mac_rule_[1] = fixed_rule_[F.eth_src];
  pay_rule_ = fixed_rule_[F.payload];
  pay_counts_ = pay_rule_ >= 0;
  if (pay_rule_ < 0) pay_rule_ = payload_default_plan_;
}

// A user's address in an application's address field that no rule names
// (a DNS A record under a policy with no dns.answer.addr rule) would leave
// in clear beside its pseudonym: the applications with such fields are
// parsed and rewritten for it (fail closed, as for any protected field),
// unless every payload is rewritten whole, where nothing of them leaves.
// Only where `clients` names the users: without it, users are known by
// the flows they initiate, and a header-only policy keeps its header
// kernel (answers are visited where the policy parses DNS anyway).
void Program::users_apps() {
  if (payload_cut_whole()) return;
  // Addresses of the network (STUN's mapped addresses) take their role's
  // rule: parsed wherever addresses are protected and the policy parses
  // applications or names its users. A header-only policy without
  // `clients` keeps its header kernel (the linter's addr_carrier warning
  // covers what it leaves).
  // The plugin's own application only: NBNS carries DNS's fields, and
  // its addresses ask nothing of DNS's other plugins.
  const auto& pv = Registry::instance().protocols();
  if (protects_addresses_ && (has_l7_ || !policy_->clients.empty()))
    for (unsigned i = 0; i < pv.size() && i < Registry::kMaxProtocolPlugins; ++i)
      if (pv[i]->role_addresses) {
        l7_protect_ |= 1u << (kFirstPluginApp + i);
        has_l7_ = protects_anything_ = true;
        identity_ = false;
      }
  if (user_rule_ < 0 || policy_->clients.empty()) return;
  const L7Fields& L = L7Fields::get();
  for (const FieldDesc& f : Registry::instance().fields())
    if (f.type == ValueType::Addr && L.is_l7(f.id) && field_rules_[f.id].empty())
      if (const uint32_t apps = apps_of(proto_bit(f.protocol))) {
        l7_protect_ |= apps;
        has_l7_ = protects_anything_ = true;
        identity_ = false;
      }
}

// Every payload rewritten whole by an unconditional protecting rule: nothing
// an application carries leaves.
bool Program::payload_cut_whole() const {
  const auto& F = l2l4::g_fields;
  if (!field_rules_[F.payload].empty()) {
    const dsl::Rule& r = policy_->rules[field_rules_[F.payload][0]];
    return !r.when && r.action.desc->protects;
  }
  return policy_->payload_default && policy_->payload_default->desc->protects;
}

Program::~Program() = default;

bool Program::pptp_user(const uint8_t* a, uint8_t family) const {
  const auto& F = l2l4::g_fields;
  if (!learns_users_ || tunnel_client_rule_ < 0 || tunnel_addr_default_ < 0 || !field_rules_[F.tunnel_addr].empty())
    return false;
  for (const auto& cidr : policy_->clients)
    if (cidr.contains(family, a)) return false;
  return true;
}

int Program::echo_preload_rule(FieldId f) const {
  if (!echoes_ || f >= field_rules_.size() || field_rules_[f].empty()) return -1;
  // A field that points at one user (a cookie, credentials, a client
  // identifier). A catch-all's or a quasi-identifier's values are common
  // words too (a Vary header's "Accept-Encoding"): held for the whole run
  // from its first record, they would be rewritten in header names and
  // other messages that never carried them as such.
  if (Registry::instance().fields()[f].role != FieldRole::Identifier) return -1;
  const dsl::Rule& r = policy_->rules[field_rules_[f][0]];
  if (r.when) return -1;
  switch (r.action.desc->kind) {
    case ActionKind::Zero:
    case ActionKind::Redact:
    case ActionKind::Hash:
    case ActionKind::Cut:
    case ActionKind::Snap: return int(field_rules_[f][0]);
    default: return -1;
  }
}

bool Program::echo_preload_addrs() const {
  if (!echoes_ || user_rule_ < 0) return false;
  switch (policy_->rules[user_rule_].action.desc->kind) {
    case ActionKind::Zero:
    case ActionKind::Redact:
    case ActionKind::Hash:
    case ActionKind::CryptoPan:
    case ActionKind::Prefix: return true;
    default: return false;
  }
}

bool Program::in_clients(const uint8_t* a, uint8_t family) const {
  for (const auto& cidr : policy_->clients)
    if (cidr.contains(family, a)) return true;
  return false;
}

namespace {
// A hash() rule's name key (NamePlan::Hash's mask seed), 0 without a key.
uint64_t name_mask_key(const ActionCall& call) {
  const ArgValue* k = call.arg("key");
  uint64_t key = 0;
  if (k && k->key && k->key->bytes.size() == 32) {
    auto hk = KeyedHash::derive_key(std::span<const uint8_t, 32>(k->key->bytes.data(), 32), "amon name mask");
    std::memcpy(&key, hk.data(), 8);
  }
  return key;
}
}  // namespace

bool Program::echo_preload_name(FieldId f, names::Decision& d) const {
  const int ri = echo_preload_rule(f);
  if (ri < 0 || Registry::instance().fields()[f].type != ValueType::Name) return false;
  const ActionCall& a = policy_->rules[ri].action;
  switch (a.desc->kind) {
    case ActionKind::Hash:
      if (const uint64_t k = name_mask_key(a)) return d = names::Decision::mask(k), true;
      return d = names::Decision::mask(1), true;
    case ActionKind::Redact:
    case ActionKind::Zero: {
      const ArgValue* sh = a.arg("shape");
      return d = names::Decision::redact(a.desc->kind == ActionKind::Redact && sh && sh->s == "length"), true;
    }
    default: return false;
  }
}

std::unique_ptr<ProgramInstance> Program::instantiate() const { return std::make_unique<ProgramInstance>(*this); }

ProgramInstance::ProgramInstance(const Program& p) : prog_(p), uhash_(p.services_->user_hash_key) {
  hdr_fast_ = p.hdr_only_;
  static_assert(EchoScan::kMaxValue == EchoScanMax);
  if (p.echoes_) {
    echo_ = std::make_unique<EchoScan>();
    if (p.echo_preload_) echo_->preload(*p.echo_preload_);
    if (p.echo_preload_addrs()) echo_->set_addr_map(&ProgramInstance::echo_map_addr, this);
  }
  clients_set_ = !p.policy_->clients.empty();
  guard_users_ = p.guard_users_;
  if (guard_users_) initiators_.resize(kInitiators), known_users_ = p.known_users_.get();
  learns_users_ = p.learns_users_;
  if (learns_users_) outside_users_ = UserTable(kUserSetsLog2), known_users_ = p.known_users_.get();
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
    if (call.desc->uses_zstore && !addr_rule) {
      name_zanon = true;
      // The compiler resolves a fallback naming an action (fallback=redact
      // or redact()) to that action. Zero otherwise: no fallback, or sld,
      // which names take through their NamePlan (never a null fallback).
      const ArgValue* fb = call.arg("fallback");
      zfallback_[i] = fb && fb->action ? make_rt_action(*fb->action, *p.policy_, p.services_, nullptr)
                                       : make_rt_action(ActionKind::Zero);
      actions_[i] = make_rt_action(ActionKind::Keep);
    } else {
      actions_[i] = make_rt_action(call, *p.policy_, p.services_, plan->zslot >= 0 ? &plan->zinfo : nullptr);
      // An address in a message (apply_role_addr) has no flow whose z-count
      // could release it: it takes the fallback.
      if (call.desc->uses_zstore) {
        const ArgValue* fb = call.arg("fallback");
        zfallback_[i] = fb && fb->action ? make_rt_action(*fb->action, *p.policy_, p.services_, nullptr)
                                         : make_rt_action(ActionKind::Zero);
      }
    }
    if (call.desc->kind == ActionKind::Hash) name_key_[i] = name_mask_key(call);
    if (call.desc->uses_zstore) {
      const ArgValue* fb = call.arg("fallback");
      if (fb && fb->action && fb->action->desc->kind == ActionKind::Hash) name_key_[i] = name_mask_key(*fb->action);
    }
  }
  name_plan_.resize(p.plans_.size());
  for (size_t i = 0; i < p.plans_.size(); ++i) {
    if (!p.plans_[i]) continue;
    const ActionCall& a = *p.plans_[i]->call;
    NamePlan& np = name_plan_[i];
    bool on_names = true;
    switch (a.desc->kind) {
      case ActionKind::Keep: np.kind = NamePlan::Keep; break;
      case ActionKind::Drop: np.kind = NamePlan::Drop; break;
      case ActionKind::Hash: np.kind = NamePlan::Hash; break;
      case ActionKind::Zanon: np.kind = NamePlan::Zanon; break;
      case ActionKind::Redact:
      case ActionKind::Zero: np.kind = NamePlan::Redact; break;  // a name keeps only its shape

      default: np.kind = NamePlan::Redact, on_names = false; break;
    }
    // Any other action on a name would become redact() unannounced: refuse
    // it (check_completeness keeps this unreachable for registered actions).
    if (!on_names && i < p.policy_->rules.size())
      for (const FieldDesc* f : p.policy_->rules[i].fields)
        if (f->type == ValueType::Name)
          throw std::runtime_error(a.loc.file + ":" + std::to_string(a.loc.line) + ": " + a.desc->name +
                                   "() has no runtime for " + f->name);
    const auto flat_of = [](const ActionCall& c) {
      const ArgValue* s = c.arg("shape");
      return c.desc->kind == ActionKind::Redact && s && s->s == "length";
    };
    np.flat = flat_of(a);
    if (np.kind != NamePlan::Zanon) continue;
    np.zp = zanon::ZParams{uint32_t(a.int_or("z", 10)), uint64_t(a.int_or("dt", 0))};
    const ArgValue* fb = a.arg("fallback");
    const ActionKind fk = fb && fb->action ? fb->action->desc->kind : ActionKind::Unknown;
    if (fk == ActionKind::Hash) np.fb = NamePlan::FbHash;
    else if (fb && !fb->action && fb->s == "sld") np.fb = NamePlan::FbSld;
    // `redact` and `redact()` alike: the compiler resolved both to the action.
    else if (fk == ActionKind::Redact || fk == ActionKind::Zero) np.fb = NamePlan::FbRedact;
    if (fb && fb->action) np.flat = flat_of(*fb->action);
  }
  {
    // The plugins' per-consumer states; the exchange memory when one asks.
    struct Setup final : ConsumerSetup {
      const Program& p;
      explicit Setup(const Program& prog) : p(prog) {}
      bool has_rules(FieldId f) const override { return !p.field_rules_[f].empty(); }
      bool zanon(FieldId f) const override {
        for (uint32_t ri : p.field_rules_[f])
          if (p.policy_->rules[ri].action.desc->uses_zstore) return true;
        return false;
      }
      bool protects_addresses() const override { return p.protects_addresses_; }
      bool protects_users() const override { return p.user_rule_ >= 0; }
    } setup(p);
    for (const ProtocolPlugin* pp : Registry::instance().protocols())
      plugin_consumer_.state.push_back(pp->make_consumer ? pp->make_consumer(setup) : nullptr);
    const Shortcut& sc = Shortcut::get();
    shortcut_pp_ = sc.pp, shortcut_app_ = span_app_ = sc.app;
    if (sc.pp) shortcut_consumer_ = consumer_of(sc.app);
    shortcut_at_.protects = sc.pp && (p.l7_protect_ & (1u << sc.app));
    shortcut_at_.sums = shortcut_sums_;
    // Made here, not at the first message: the packet path asks nothing.
    host_.reset(new PluginHost(*this));
    if (setup.exchanges) {
      exch_.resize(kExchSets * kExchWays);
      if (RAND_bytes(reinterpret_cast<unsigned char*>(&exch_secret_), sizeof exch_secret_) != 1)
        throw std::runtime_error("RAND_bytes failed");
    }
  }
  for (auto* db : p.regexes_->dbs)
    if (hs_alloc_scratch(db, &hs_) != HS_SUCCESS) throw std::runtime_error("hs_alloc_scratch failed");
  if (name_zanon && !p.services_->zstore) throw std::runtime_error("zanon rules need the z-anonymity store");
  if (name_zanon) {
    name_keys_.resize(kNameKeySets * 2);
    sld_keys_.resize(kSldKeys);
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

void ProgramInstance::set_shortcut_path(bool on) { shortcut_app_ = on ? span_app_ : 0; }

ProgramInstance::PluginConsumers::~PluginConsumers() {
  const auto& v = Registry::instance().protocols();
  for (size_t i = 0; i < state.size(); ++i)
    if (state[i]) v[i]->free_consumer(state[i]);
}

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

ProgramInstance::InitiatorSlot* ProgramInstance::initiator_slot(const uint8_t* a, uint32_t alen, uint64_t& x,
                                                                 uint64_t& y) const {
  if ((alen != 4 && alen != 16) || initiators_.empty()) return nullptr;
  x = 0, y = 0;
  std::memcpy(&x, a, alen == 4 ? 4 : 8);
  if (alen == 16) std::memcpy(&y, a + 8, 8);
  const uint64_t h = (x * 0x9e3779b97f4a7c15ULL ^ y * 0xbf58476d1ce4e5b9ULL) + alen;
  return &initiators_[(h >> 40) % kInitiators];
}

bool ProgramInstance::known_initiator(const uint8_t* a, uint32_t alen) const {
  uint64_t x, y;
  const InitiatorSlot* s = initiator_slot(a, alen, x, y);
  return s && s->alen == alen && s->a == x && s->b == y;
}

bool ProgramInstance::both_users(const uint8_t* src, const uint8_t* dst, uint32_t alen, bool client_is_src,
                                 const PacketMeta& m) {
  const dsl::Policy& pol = *prog_.policy_;
  const uint8_t fam = alen == 4 ? 4 : 6;
  if (learns_users_) return outside_roles(src, dst, alen, client_is_src, m.roles_uncertain);
  if (both_clients(pol, fam, src, dst, m.roles_uncertain)) return true;
  if (!guard_users_) return false;
  return initiator_is_server(src, dst, alen, client_is_src, m);
}

uint8_t Program::outside_clients(const uint8_t* src, const uint8_t* dst, uint8_t family, bool client_is_src,
                                 bool uncertain) const {
  if (!learns_users_) return 0;
  bool s_in = false, d_in = false;
  for (const auto& cidr : policy_->clients) {
    s_in = s_in || cidr.contains(family, src);
    d_in = d_in || cidr.contains(family, dst);
  }
  if (s_in || d_in) return 0;  // roles by `clients`: the outside end is the server
  return uncertain ? 3 : client_is_src ? 1 : 2;
}

uint8_t Program::outside_clients(const uint8_t* buf, uint32_t cap, const Decoded& d, const PacketMeta& m) const {
  if (!learns_users_ || !d.has_ip() || d.ip_version == 0) return 0;
  const uint32_t alen = d.addr_len();
  if (d.src_off() + alen > cap || d.dst_off() + alen > cap) return 0;
  const uint8_t* src = buf + d.src_off();
  const uint8_t* dst = buf + d.dst_off();
  const bool client_is_src = client_is_source(*policy_, d.ip_version, src, dst, m.initiator_is_src);
  return outside_clients(src, dst, d.ip_version, client_is_src, m.roles_uncertain);
}

// Program::outside_clients and both_clients in one pass over `clients`
// (the packet path's share of the cost).
bool ProgramInstance::outside_roles(const uint8_t* src, const uint8_t* dst, uint32_t alen, bool client_is_src,
                                    bool uncertain) const {
  const uint8_t family = alen == 4 ? 4 : 6;
  bool s_in = false, d_in = false;
  for (const auto& cidr : prog_.policy_->clients) {
    s_in = s_in || cidr.contains(family, src);
    d_in = d_in || cidr.contains(family, dst);
  }
  if (s_in && d_in) return true;
  if (!s_in && !d_in) {
    if (uncertain) {
      outside_users_.add(src, alen);
      outside_users_.add(dst, alen);
      return true;
    }
    outside_users_.add(client_is_src ? src : dst, alen);
  }
  // The server, outside `clients` (an end inside would be the client).
  return known_user(client_is_src ? dst : src, alen);
}

bool ProgramInstance::server_user(const uint8_t* buf, const Decoded& d, const PacketMeta& m) const {
  const uint8_t* src = buf + d.src_off();
  const uint8_t* dst = buf + d.dst_off();
  const bool client_is_src = client_is_source(*prog_.policy_, d.ip_version, src, dst, m.initiator_is_src);
  return outside_roles(src, dst, d.addr_len(), client_is_src, m.roles_uncertain);
}

bool ProgramInstance::initiator_is_server(const uint8_t* src, const uint8_t* dst, uint32_t alen, bool client_is_src,
                                          const PacketMeta& m) const {
  uint64_t x, y;
  for (unsigned end = 0; end < 2; ++end)
    if (m.initiating & (1u << end))
      if (InitiatorSlot* s = initiator_slot(end ? dst : src, alen, x, y)) *s = InitiatorSlot{x, y, alen};
  if (m.initiating & (client_is_src ? 2 : 1)) return true;
  // Offline, the pre-pass knows every host that initiates anywhere in the
  // input: a server that only initiates later is a user from its first record.
  return known_users_ && known_users_->has(client_is_src ? dst : src, alen);
}

bool ProgramInstance::server_initiates(const uint8_t* buf, const Decoded& d, const PacketMeta& m) const {
  const uint8_t* src = buf + d.src_off();
  const uint8_t* dst = buf + d.dst_off();
  const bool client_is_src = client_is_source(*prog_.policy_, d.ip_version, src, dst, m.initiator_is_src);
  return initiator_is_server(src, dst, d.addr_len(), client_is_src, m);
}

RtAction* ProgramInstance::endpoint_action(RtAction* dflt, const uint8_t* a, uint8_t family, bool client) {
  const Program& P = prog_;
  const auto& F = l2l4::g_fields;
  if (P.tunnel_client_rule_ < 0 || !P.field_rules_[F.tunnel_addr].empty()) return dflt;
  if (!client && !is_user(a, family)) return dflt;
  // A flow's client taking ip.client's rule here is a user everywhere after.
  if (client && learns_users_ && P.pptp_user(a, family)) outside_users_.add(a, family == 4 ? 4 : 16);
  return actions_[P.tunnel_client_rule_]->undecided();
}

bool ProgramInstance::is_user(const uint8_t* a, uint8_t family) {
  for (const auto& cidr : prog_.policy_->clients)
    if (cidr.contains(family, a)) return true;
  if (learns_users_) return known_user(a, family == 4 ? 4 : 16);
  const uint32_t n = family == 4 ? 4 : 16;
  return guard_users_ && (known_initiator(a, n) || (known_users_ && known_users_->has(a, n)));
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

void ProgramInstance::inherit_caches(ProgramInstance& old) {
  // The output goes on: its users stay users under the new generation.
  if (learns_users_ && old.learns_users_) outside_users_.merge(old.outside_users_);
  std::vector<bool> taken(old.actions_.size(), false);
  for (auto& a : actions_) {
    if (!a || a->kind != RtKind::CryptoPan) continue;
    for (size_t j = 0; j < old.actions_.size(); ++j) {
      if (taken[j] || !old.actions_[j] || old.actions_[j]->kind != RtKind::CryptoPan) continue;
      if (static_cast<rt::CryptoPan&>(*a).inherit(static_cast<rt::CryptoPan&>(*old.actions_[j]))) {
        taken[j] = true;
        break;
      }
    }
  }
}

uint64_t ProgramInstance::cryptopan_misses() const {
  uint64_t n = 0;
  for (auto* v : {&actions_, &zfallback_})
    for (auto& a : *v)
      if (a && a->kind == RtKind::CryptoPan) n += static_cast<const rt::CryptoPan&>(*a).cache_misses();
  return n;
}

void ProgramInstance::cryptopan_actions(std::vector<rt::CryptoPan*>& out) {
  for (auto* v : {&actions_, &zfallback_})
    for (auto& a : *v)
      if (a && a->kind == RtKind::CryptoPan) out.push_back(static_cast<rt::CryptoPan*>(a.get()));
}

}  // namespace amon
