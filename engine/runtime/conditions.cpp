// Conditions (`when`, `select`): evaluated on the original packet.
#include "runtime_impl.h"

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
  L7Parse* P = e.m->parse;
  if (f == F.payload) {
    // `payload ~ /re/`: the original payload bytes as captured.
    const uint32_t end = std::min<uint32_t>(d.cap_len, d.payload_off + d.payload_len);
    if (d.status == DecodeStatus::Ok && end >= d.payload_off)
      val = std::string_view(reinterpret_cast<const char*>(o + d.payload_off), end - d.payload_off), found = true;
  } else if (P && (e.m->l7 == L7State::Parsed || e.m->l7 == L7State::Stream)) {
    const uint8_t* base = e.m->l7_base ? e.m->l7_base : o + d.payload_off;
    const ProtocolPlugin* pp = plugin_of(e.m->app);
    if (pp && pp->value) {
      // A plugin that rewrites its messages itself says which value it holds.
      found = pp->value(P->state_of(e.m->app), f, val);
    } else if (pp) {
      // A protocol plugin's parse: the first occurrence of the field, a
      // name as its text, any other value as its bytes. A message parsed
      // from its first part only (rest_clear) located all its fields there,
      // so their values are whole: taking them as absent would make a
      // negated condition true and let a rule keep what it should hide.
      const ProtoOccs& O = *P->occs;
      for (uint32_t i = 0; i < O.n && !found; ++i)
        if (O.occ[i].field == f)
          val = O.occ[i].kind == OccKind::Name
                    ? O.occ[i].text
                    : std::string_view(reinterpret_cast<const char*>(base + O.occ[i].off), O.occ[i].len),
          found = true;
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

}  // namespace amon
