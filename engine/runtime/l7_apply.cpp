// The application-field rewrite: each located occurrence gets its rule's
// action (l7_rewrite, l7_plugin, l7_by_plugin), also for headers reassembled from held
// segments (rewrite_stream).
#include "addr_forms.h"
#include "runtime_impl.h"

namespace amon {

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
  // The part of a header its stream cut (ProtoOccs::mask_from): no rule can
  // be trusted with a name or value cut anywhere, so it is masked as redact()
  // masks, its length kept.
  const uint32_t mask_from = m.parse->occs->mask_from;
  if (mask_from < d.payload_len) std::memset(buf + d.payload_off + mask_from, 'x', d.payload_len - mask_from);
  return StreamView::Rewritten;
}

bool ProgramInstance::apply_text(FieldId f, uint8_t* p, uint32_t len, Eval& e) {
  int ri = pick(f, e);
  if (ri < 0) {
    // Left in clear: what only z-anonymity hid elsewhere is released.
    if (echo_ && echo_->has_z()) echo_->bytes(p, p, len);
    return true;
  }
  const ActionCall& a = prog_.policy_->rules[ri].action;
  if (a.desc->uses_zstore) {
    zanon::Store* st = prog_.services_->zstore;
    if (!e.have_user) e.user = user_of(e.client, e.alen), e.have_user = true;
    zanon::ZParams zp{uint32_t(a.int_or("z", 10)), uint64_t(a.int_or("dt", 0))};
    zanon::Scope sc{field_class_[f], zscope_.kind};
    if (st->observe(st->key(sc, std::span<const uint8_t>(p, len)), e.user, e.m->ts_ns, zp)) {
      if (echo_) echo_->bytes(p, p, len);
      return ++e.c->zanon_released, true;
    }
    ++e.c->zanon_hidden;
    const uint32_t keep = echo_ ? std::min<uint32_t>(len, EchoScanMax) : 0;
    if (keep) std::memcpy(echo_old_, p, keep);
    const bool ok = zfallback_[ri]->bytes(p, len, *e.ctx) != ActResult::Drop;
    if (keep) echo_->bytes(echo_old_, p, keep, true);
    return ok;
  }
  const uint32_t keep = echo_ ? std::min<uint32_t>(len, EchoScanMax) : 0;
  if (keep) std::memcpy(echo_old_, p, keep);
  const ActResult r = actions_[ri]->bytes(p, len, *e.ctx);
  // A value inside a message cannot be removed without breaking the
  // message: cut() clears it instead, length kept.
  if (r == ActResult::Cut) std::memset(p, 0, len);
  if (keep) echo_->bytes(echo_old_, p, keep);
  return r != ActResult::Drop;
}

bool ProgramInstance::apply_mac_occ(FieldId f, uint8_t* a, Eval& e) {
  int ri = pick(f, e);
  if (ri < 0) return true;
  const FieldId saved = e.ctx->field;
  e.ctx->field = f;
  uint8_t old[6];
  std::memcpy(old, a, 6);
  const bool ok = actions_[ri]->mac(a, *e.ctx) != ActResult::Drop;
  e.ctx->field = saved;
  if (echo_) echo_->mac(old, a);
  return ok;
}

// A protocol plugin's occurrences (protocol.h): each gets its field's rule
// by the kind of value it holds, then the plugin's fix-ups: one per changed
// occurrence, one for the whole message. False when the message could not
// be rewritten.
bool ProgramInstance::l7_plugin(const ProtocolPlugin& pp, void* state, uint8_t* pl, uint32_t avail, Eval& e) {
  const ProtoOccs& O = *e.m->parse->occs;
  unsigned names = 0, hidden = 0, n_pay = 0;
  ByteSpan pay[16];
  FieldId pay_field = kNoField;
  // A role address of fewer bytes than its family's is a prefix stored in
  // its first bytes (OSPFv3): mapped as the address with the rest zero, as
  // a prefix-preserving rule maps the hosts inside it; the plugin's
  // after_action clears what the mapping set past the prefix's length.
  auto role_addr = [&](uint8_t* v, uint32_t len, uint8_t family) {
    if (len >= (family == 4 ? 4u : 16u)) return apply_role_addr(v, family, e);
    uint8_t a[16] = {};
    std::memcpy(a, v, len);
    const bool ok = apply_role_addr(a, family, e);
    std::memcpy(v, a, len);
    return ok;
  };
  // An address written as text (ProtoOcc::form) takes the rule of the
  // address it reads as; a changed one is written back in its form at its
  // length, counted as the addresses in text the header's rewrite maps
  // (addr_text, addr_text_zeroed where it could not be that short).
  auto text_addr = [&](const ProtoOcc& o, uint8_t* v, uint8_t family) {
    const unsigned n = family == 4 ? 4 : 16;
    uint8_t a[16], old[16];
    if (o.len > 45 || !read_addr_form(v, o.len, o.form, family, a)) {
      // The parse said these bytes read as an address: if they do not,
      // they leave as zeros, never as they came.
      std::memset(v, '0', o.len);
      return true;
    }
    std::memcpy(old, a, n);
    const bool ok = o.role ? apply_role_addr(a, family, e) : apply_addr_occ(o.field, a, family, e);
    if (std::memcmp(old, a, n) == 0) return ok;
    char text[48];
    if (fit_addr_form(a, n, o.form, o.len, text)) ++e.c->addr_text;
    else ++e.c->addr_text_zeroed;
    std::memcpy(v, text, o.len);
    return ok;
  };
  for (uint32_t i = 0; i < O.n; ++i) {
    const ProtoOcc& o = O.occ[i];
    uint8_t* v = pl + o.off;
    if (o.kind == OccKind::Payload) {
      // Taken together after the values: one rule for the packet's payload.
      if (n_pay < 16) pay[n_pay++] = {o.off, o.len};
      else pay[15].len = o.off + o.len - pay[15].off;  // more payload, never less
      pay_field = o.field;
      continue;
    }
    // A fix-up runs only where the action changed the value (a kept value
    // stays as it came); longer values than this buffer are taken as changed.
    uint8_t before[16];
    const bool whole = o.len <= sizeof before;
    if (o.fixup && whole) std::memcpy(before, v, o.len);
    if (o.coded) xor_with(v, pl + o.key, o.len);
    bool ok = true;
    switch (o.kind) {
      case OccKind::Name: {
        names::Decision dec = decide_name(o.field, o.text, e);
        if (echo_ && !o.shown.empty()) {
          const int ri = pick(o.field, e);
          echo_->name(o.shown, dec, ri >= 0 && prog_.policy_->rules[ri].action.desc->uses_zstore);
        }
        ++names;
        if (dec.action != names::Action::Keep) ++hidden, pp.rewrite_name(state, pl, o, dec);
        break;
      }
      case OccKind::Addr4:
      case OccKind::Addr6: {
        const uint8_t family = o.kind == OccKind::Addr4 ? 4 : 6;
        if (o.form != AddrForm::Binary) ok = text_addr(o, v, family);
        else ok = o.role ? role_addr(v, o.len, family) : apply_addr_occ(o.field, v, family, e);
        break;
      }
      case OccKind::Mac:
        // A MAC inside another field's value: that field's rule when the
        // MAC's own field has none (the value is protected as before).
        ok = o.carrier != kNoField && prog_.field_rules_[o.field].empty() ? apply_text(o.carrier, v, o.len, e)
                                                                          : apply_mac_occ(o.field, v, e);
        break;
      case OccKind::Bytes: ok = apply_text(o.field, v, o.len, e); break;
      case OccKind::Payload: break;
    }
    if (o.coded) xor_with(v, pl + o.key, o.len);
    if (!ok) e.drop = true;
    if (o.fixup && pp.after_action && (!whole || std::memcmp(before, v, o.len) != 0))
      pp.after_action(state, pl, o);
  }
  // The flow remembers whether this consumer left every name in clear: a
  // later packet may name them again where nothing locates them
  // (ProtoOccs::echo, PacketMeta::names_echo).
  if (FlowState* fs = e.m->flow) {
    const uint16_t bit = uint16_t(1u << prog_.consumer_);
    fs->sni_clear = names && !hidden ? uint16_t(fs->sni_clear | bit) : uint16_t(fs->sni_clear & ~bit);
  }
  if (n_pay && !prog_.field_rules_[pay_field].empty()) apply_payload(pay_field, pl, avail, pay, n_pay, e);
  if (pp.finish && !pp.finish(state, pl, avail)) return false;
  // A checksum over the IPv6 pseudo-header follows the header's addresses.
  if (const uint32_t at = pp.pseudo_csum_v6; at && e.d->ip_version == 6 && e.old_src && e.alen == 16 && avail >= at + 2) {
    uint16_t ck = rd16(pl + at);
    ck = csum_replace(ck, {e.old_src, 16}, {e.buf + e.d->src_off(), 16});
    ck = csum_replace(ck, {e.old_dst, 16}, {e.buf + e.d->dst_off(), 16});
    wr16(pl + at, ck);
  }
  return true;
}

// Where one of this packet's own addresses lies in its header now (0: `a`
// is not one of them): the header's treatment of it, roles, both-clients
// and positional rules alike.
uint32_t ProgramInstance::own_addr_off(const uint8_t* a, uint8_t family, const Eval& e) const {
  const Decoded& d = *e.d;
  const uint32_t n = family == 4 ? 4 : 16;
  if (!e.old_src || e.alen != n || family != d.ip_version) return 0;
  if (std::memcmp(a, e.old_src, n) == 0) return d.src_off();
  if (std::memcmp(a, e.old_dst, n) == 0) return d.dst_off();
  return 0;
}

// One of this packet's own addresses takes whatever its header got, so the
// two never disagree.
bool ProgramInstance::own_addr(uint8_t* a, uint8_t family, const Eval& e) const {
  const uint32_t off = own_addr_off(a, family, e);
  if (off) std::memcpy(a, e.buf + off, family == 4 ? 4 : 16);
  return off != 0;
}

// `client`: the address is known to be a client's (another address of
// the flow's client), whether or not `clients` holds it.
bool ProgramInstance::apply_role_addr(uint8_t* a, uint8_t family, Eval& e, bool client) {
  const auto& F = l2l4::g_fields;
  const uint32_t n = family == 4 ? 4 : 16;
  if (own_addr(a, family, e)) return true;
  bool inside = false;
  for (const auto& cidr : prog_.policy_->clients) inside = inside || cidr.contains(family, a);
  // Outside `clients`: a client's address here is a user everywhere after,
  // and a user learnt elsewhere is one here.
  if (learns_users_ && !inside) {
    if (client) outside_users_.add(a, n);
    else client = known_user(a, n);
  }
  client = client || inside;
  const FieldId f = client ? F.ip_client : F.ip_server;
  if (prog_.field_rules_[f].empty()) {
    // Only positional rules (ip.src/ip.dst) map addresses here, and this one
    // has no position: with addresses protected it cannot be shown.
    if (prog_.protects_addresses_) std::memset(a, 0, n);
    return true;
  }
  const int ri = pick(f, e);
  if (ri < 0) return true;
  const bool z = prog_.policy_->rules[ri].action.desc->uses_zstore;
  RtAction* act = z ? zfallback_[ri].get() : actions_[ri].get();
  if (!act) return std::memset(a, 0, n), true;
  const bool was_server = e.ctx->is_server;
  const uint8_t was_family = e.ctx->family;
  e.ctx->is_server = !client;
  e.ctx->family = family;
  uint8_t old[16];
  std::memcpy(old, a, n);
  const bool ok = act->addr(a, *e.ctx) != ActResult::Drop;
  if (echo_) echo_->addr(old, a, n, z);
  e.ctx->is_server = was_server;
  e.ctx->family = was_family;
  return ok;
}

bool ProgramInstance::apply_addr_occ(FieldId f, uint8_t* a, uint8_t family, Eval& e) {
  const int ri = pick(f, e);
  // A user's address takes ip.client's rule wherever it travels, in a
  // field a rule names or not.
  const bool user = prog_.user_rule_ >= 0 && is_user(a, family);
  // No rule and no user, but one of this packet's own addresses (an mDNS
  // host answering with its own A record): its header's treatment, so the
  // frame does not hold the address both in clear and as its pseudonym.
  if (ri < 0 && !user && own_addr(a, family, e)) return true;
  if (ri < 0 && !user) {
    if (echo_ && echo_->has_z()) echo_->addr(a, a, family == 4 ? 4 : 16);
    return true;
  }
  uint8_t saved = e.ctx->family;
  e.ctx->family = family;
  bool ok = true, z = false;
  uint8_t old[16];
  std::memcpy(old, a, family == 4 ? 4 : 16);
  if (user) {
    ok = actions_[prog_.user_rule_]->undecided()->addr(a, *e.ctx) != ActResult::Drop;
  } else if (const ActionCall& call = prog_.policy_->rules[ri].action; call.desc->uses_zstore) {
    zanon::Store* st = prog_.services_->zstore;
    if (!e.have_user) e.user = user_of(e.client, e.alen), e.have_user = true;
    zanon::ZParams zp{uint32_t(call.int_or("z", 10)), uint64_t(call.int_or("dt", 0))};
    zanon::Scope sc{field_class_[f], zscope_.kind};
    if (st->observe(st->key(sc, std::span<const uint8_t>(a, family == 4 ? 4 : 16)), e.user, e.m->ts_ns, zp)) {
      ++e.c->zanon_released;
    } else {
      ++e.c->zanon_hidden;
      ok = zfallback_[ri]->addr(a, *e.ctx) != ActResult::Drop;
      z = true;
    }
  } else {
    ok = actions_[ri]->addr(a, *e.ctx) != ActResult::Drop;
  }
  e.ctx->family = saved;
  if (echo_) echo_->addr(old, a, family == 4 ? 4 : 16, z);
  return ok;
}

void ProgramInstance::HostDelete::operator()(PluginHost* h) const { delete h; }

void ProgramInstance::apply_payload(FieldId f, uint8_t* pl, uint32_t avail, const ByteSpan* sp, unsigned n, Eval& e) {
  const int ri = pick(f, e);
  if (ri < 0 || !actions_[ri]->modifies || !avail) return;
  RtAction& a = *actions_[ri];
  const ByteSpan all{0, avail};
  if (!sp) sp = &all, n = 1;
  e.ctx->field = f;
  for (unsigned i = 0; i < n; ++i) {
    const ByteSpan s = sp[i];
    uint8_t* p = pl + s.off;
    const ActResult r = a.bytes(p, s.len, *e.ctx);
    if (r == ActResult::Drop) {
      e.drop = true;
      return;
    }
    // Bytes cannot leave the middle of a TCP stream (sequence numbers,
    // chunk sizes, a message's length fields count them): cut() zero-fills them and,
    // for a body that runs to the end of the payload, ends the record
    // there as snap() does; every length stays.
    if (r == ActResult::Cut) std::memset(p, 0, s.len);
    if ((r == ActResult::Cut || a.snaps) && s.off + s.len == avail) e.body_snap = std::min(e.body_snap, s.off);
  }
}

// Rewrites the application fields of this consumer's copy. Returns false when
// they cannot be located although this policy protects them (the caller
// applies on_error), and sets e.drop for drop() rules.
bool ProgramInstance::l7_rewrite(uint8_t* buf, const Decoded& d, Eval& e) {
  const PacketMeta& m = *e.m;
  if (m.l7 == L7State::None) return true;
  bool protects = prog_.l7_protect_ & (1u << m.app);
  if (m.l7 != L7State::Parsed) return !protects;
  L7Parse& P = *m.parse;
  uint8_t* pl = buf + d.payload_off;
  const uint32_t avail = std::min<uint32_t>(d.cap_len, d.payload_off + d.payload_len) - d.payload_off;
  if (const ProtocolPlugin* pp = plugin_of(m.app)) {
    ProtoRewrite at{0, false, protects, e.l7_sums};
    return (pp->rewrite ? l7_by_plugin(*pp, P.state_of(m.app), consumer_of(m.app), pl, avail, e, at)
                        : l7_plugin(*pp, P.state_of(m.app), pl, avail, e)) ||
           !protects;
  }
  // An application the rewrite does not know: its fields cannot be
  // located, so a policy protecting it fails closed (on_error).
  return !protects;
}

}  // namespace amon
