// The application-field rewrite: each located occurrence gets its rule's
// action (l7_rewrite, l7_dns), also for headers reassembled from held
// segments (rewrite_stream).
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
  return StreamView::Rewritten;
}

bool ProgramInstance::apply_text(FieldId f, uint8_t* p, uint32_t len, Eval& e) {
  int ri = pick(f, e);
  if (ri < 0) return true;
  const ActionCall& a = prog_.policy_->rules[ri].action;
  if (a.desc->uses_zstore) {
    zanon::Store* st = prog_.services_->zstore;
    if (!e.have_user) e.user = user_of(e.client, e.alen), e.have_user = true;
    zanon::ZParams zp{uint32_t(a.int_or("z", 10)), uint64_t(a.int_or("dt", 0))};
    zanon::Scope sc{field_class_[f], zscope_.kind};
    if (st->observe(st->key(sc, std::span<const uint8_t>(p, len)), e.user, e.m->ts_ns, zp))
      return ++e.c->zanon_released, true;
    ++e.c->zanon_hidden;
    return zfallback_[ri]->bytes(p, len, *e.ctx) != ActResult::Drop;
  }
  const ActResult r = actions_[ri]->bytes(p, len, *e.ctx);
  // A value inside a message cannot be removed without breaking the
  // message: cut() clears it instead, length kept.
  if (r == ActResult::Cut) std::memset(p, 0, len);
  return r != ActResult::Drop;
}

bool ProgramInstance::apply_mac_occ(FieldId f, uint8_t* a, Eval& e) {
  int ri = pick(f, e);
  if (ri < 0) return true;
  const FieldId saved = e.ctx->field;
  e.ctx->field = f;
  const bool ok = actions_[ri]->mac(a, *e.ctx) != ActResult::Drop;
  e.ctx->field = saved;
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
    bool ok = true;
    switch (o.kind) {
      case OccKind::Name: {
        names::Decision dec = decide_name(o.field, o.text, e);
        ++names;
        if (dec.action != names::Action::Keep) ++hidden, pp.rewrite_name(state, pl, o, dec);
        break;
      }
      case OccKind::Addr4: ok = o.role ? apply_role_addr(v, 4, e) : apply_addr_occ(o.field, v, 4, e); break;
      case OccKind::Addr6: ok = o.role ? apply_role_addr(v, 6, e) : apply_addr_occ(o.field, v, 6, e); break;
      case OccKind::Mac: ok = apply_mac_occ(o.field, v, e); break;
      case OccKind::Bytes: ok = apply_text(o.field, v, o.len, e); break;
      case OccKind::Payload: break;
    }
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
  return !pp.finish || pp.finish(state, pl, avail);
}

bool ProgramInstance::apply_role_addr(uint8_t* a, uint8_t family, Eval& e) {
  const auto& F = l2l4::g_fields;
  const Decoded& d = *e.d;
  const uint32_t n = family == 4 ? 4 : 16;
  // One of this packet's own addresses: whatever its header got (roles,
  // both-clients, positional rules alike), so the two never disagree.
  if (e.old_src && e.alen == n && family == d.ip_version) {
    if (std::memcmp(a, e.old_src, n) == 0) return std::memcpy(a, e.buf + d.src_off(), n), true;
    if (std::memcmp(a, e.old_dst, n) == 0) return std::memcpy(a, e.buf + d.dst_off(), n), true;
  }
  bool client = false;
  for (const auto& cidr : prog_.policy_->clients) client = client || cidr.contains(family, a);
  const FieldId f = client ? F.ip_client : F.ip_server;
  if (prog_.field_rules_[f].empty()) {
    // Only positional rules (ip.src/ip.dst) map addresses here, and this one
    // has no position: with addresses protected it cannot be shown.
    if (prog_.protects_addresses_) std::memset(a, 0, n);
    return true;
  }
  const int ri = pick(f, e);
  if (ri < 0) return true;
  RtAction* act = prog_.policy_->rules[ri].action.desc->uses_zstore ? zfallback_[ri].get() : actions_[ri].get();
  if (!act) return std::memset(a, 0, n), true;
  const bool was_server = e.ctx->is_server;
  const uint8_t was_family = e.ctx->family;
  e.ctx->is_server = !client;
  e.ctx->family = family;
  const bool ok = act->addr(a, *e.ctx) != ActResult::Drop;
  e.ctx->is_server = was_server;
  e.ctx->family = was_family;
  return ok;
}

bool ProgramInstance::apply_addr_occ(FieldId f, uint8_t* a, uint8_t family, Eval& e) {
  int ri = pick(f, e);
  if (ri < 0) return true;
  const ActionCall& call = prog_.policy_->rules[ri].action;
  uint8_t saved = e.ctx->family;
  e.ctx->family = family;
  bool ok = true;
  if (call.desc->uses_zstore) {
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
  RevLabel rev[64];
  const unsigned n_rev = prog_.protects_addresses_ ? reverse_collect(msg, pr, rev, 64) : 0;
  if (roles) dns::rewrite_names(msg, len, pr, fn, &cx, sums, roles, cx.rc ? first_masks_.get() : nullptr);
  if (n_rev) reverse_apply(msg, rev, n_rev, e, sums);
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
  if (pr.ecs.present && pr.ecs.addr_len && !prog_.field_rules_[L.dns_ecs].empty()) {
    // The subnet (the client's own network) carries only the bytes its
    // source prefix needs: the rule's action runs on it as on a whole
    // address, the rest zero, and its bytes go back. Each action keeps its
    // meaning: zero() zeroes it, prefix(n) keeps n bits, cryptopan() maps it
    // prefix-preservingly (the leading bytes of the mapped address depend on
    // the leading bytes of the subnet only), hash() hashes it. The bits past
    // the source prefix are zeroed again, as RFC 7871 requires of them; the
    // prefix lengths stay, so the option still parses.
    const unsigned off = pr.ecs.addr_off, n = pr.ecs.addr_len;
    const uint8_t family = pr.ecs.family == 1 ? 4 : 6;
    uint8_t a[16] = {}, before[16];
    std::memcpy(a, msg + off, n);
    std::memcpy(before, a, sizeof a);
    if (!apply_addr_occ(L.dns_ecs, a, family, e)) {
      e.drop = true;
    } else if (std::memcmp(a, before, sizeof a) != 0) {
      const unsigned src = pr.ecs.source_prefix;
      if (src % 8) a[n - 1] &= uint8_t(0xff00 >> (src % 8));
      if (sums) sums[0] += span_sum(off, n);
      std::memcpy(msg + off, a, n);
      if (sums) sums[1] += span_sum(off, n);
    }
  }
  const auto& F = l2l4::g_fields;
  if (pr.owner.present && pr.owner.data_len && !prog_.field_rules_[F.eth_src].empty()) {
    // The Owner option names the sending device by its MAC (and the MAC to
    // wake it with): the MACs take the rule of the packet's source MAC, so
    // they leave as the Ethernet header's does. The wake-up password goes
    // with them; an option of unknown layout is zeroed whole, as nothing in
    // it can be told apart from a MAC.
    const int ri = pick(F.eth_src, e);
    const dns::Owner& o = pr.owner;
    if (ri >= 0 && actions_[ri]->modifies) {
      if (sums) sums[0] += span_sum(o.data_off, o.data_len);
      if (!o.n_macs) std::memset(msg + o.data_off, 0, o.data_len);
      for (unsigned i = 0; i < o.n_macs; ++i)
        if (!apply_mac_occ(F.eth_src, msg + o.mac_off[i], e)) e.drop = true;
      if (o.pw_len) std::memset(msg + o.pw_off, 0, o.pw_len);
      if (sums) sums[1] += span_sum(o.data_off, o.data_len);
    }
  }
  return true;
}

// A reverse-DNS name (in-addr.arpa, ip6.arpa) is an address written as
// labels. Its address labels are masked with 'x' when the policy protects
// that address: a user's (inside `clients`, or any address when there is no
// `clients` set, as the name's role in its flow is unknown) when a rule
// protects ip.client, another's when a rule protects ip.server. Masked, not
// mapped: a mapped IPv4 address rarely has the digit counts of the original,
// and the labels cannot change length without moving every compression
// pointer after them; mapping only where the lengths happen to fit would
// tell which names those are. Taken before the name rules rewrite (the
// labels as they came: at most 3 bytes each), applied after them, so a
// label they already changed stays as they left it.
unsigned ProgramInstance::reverse_collect(const uint8_t* msg, const dns::ParseResult& pr, RevLabel* out,
                                          unsigned cap) {
  const dsl::Policy& pol = *prog_.policy_;
  unsigned n_out = 0;
  for (unsigned i = 0; i < pr.n_names && n_out < cap; ++i) {
    const dns::NameRef& nr = pr.names[i];
    if (nr.n_labels < 3) continue;
    uint8_t family, a[16];
    const unsigned n = dns::reverse_address(pr.name_text(i), family, a);
    if (!n) continue;
    bool user = pol.clients.empty();
    for (const auto& cidr : pol.clients) user = user || cidr.contains(family, a);
    if (!(user ? prog_.protects_client_addr_ : prog_.protects_server_addr_)) continue;
    // The address labels are the n right before the two suffix labels.
    for (unsigned k = nr.n_labels - 2 - n; k < nr.n_labels - 2u && n_out < cap; ++k) {
      const dns::LabelSpan& l = pr.name_label(i, k);
      RevLabel& r = out[n_out++];
      r.name = uint16_t(i), r.off = l.off, r.len = uint8_t(std::min<unsigned>(l.len, sizeof r.b));
      std::memcpy(r.b, msg + l.off, r.len);
    }
  }
  return n_out;
}

void ProgramInstance::reverse_apply(uint8_t* msg, const RevLabel* rl, unsigned n, Eval& e, uint64_t* sums) {
  int counted = -1;
  for (unsigned i = 0; i < n; ++i) {
    uint8_t* p = msg + rl[i].off;
    if (std::memcmp(p, rl[i].b, rl[i].len) != 0) continue;  // changed already (a name rule, or a shared label)
    auto span_sum = [&]() -> uint64_t {
      const uint16_t s = csum_sum({p, rl[i].len});
      return (rl[i].off & 1) ? uint16_t(s << 8 | s >> 8) : s;
    };
    if (sums) sums[0] += span_sum();
    std::memset(p, 'x', rl[i].len);
    if (sums) sums[1] += span_sum();
    if (counted != rl[i].name) ++e.c->reverse_hidden, counted = rl[i].name;
  }
}

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
  switch (App(m.app)) {
    case App::Dns:
      return l7_dns(pl, avail, e, 0) || !protects;
    case App::DnsTcp: {
      const dns::TcpSplit& sp = *P.split;
      for (unsigned i = 0; i < sp.n; ++i)
        if (!l7_dns(pl + sp.msgs[i].off, sp.msgs[i].len, e, int(i)) && protects) return false;
      return true;
    }
    default:
      if (const ProtocolPlugin* pp = plugin_of(m.app)) return l7_plugin(*pp, P.state_of(m.app), pl, avail, e) || !protects;
      // An application the rewrite does not know: its fields cannot be
      // located, so a policy protecting it fails closed (on_error).
      return !protects;
  }
}

}  // namespace amon
