// The general path: every packet a header kernel does not take, with its
// fail-closed branches (decode errors, tunnels, ICMP quotes, fragments,
// application fields that cannot be located).
#include "runtime_impl.h"

namespace amon {

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

Verdict ProgramInstance::process_general(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                         const PacketMeta& m, ConsumerCounters& c) {
  if (d.n_encap) [[unlikely]]
    return process_encap(buf, cap, wire, d, m, c);
  const Verdict v =
      prog_.l7_only_ ? general_path<true>(buf, cap, wire, d, m, c) : general_path<false>(buf, cap, wire, d, m, c);
  if (snap_at_ < cap) cap = snap_at_;  // wire (the record's original length) stays
  return v;
}

Verdict ProgramInstance::process_encap(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                       const PacketMeta& m, ConsumerCounters& c) {
  // Most tunnelled traffic (encap_fast_packet): one UDP layer over IPv4,
  // its UDP checksum 0 (as GTP-U and VXLAN senders mostly leave it). No
  // checksum covers the inner packet then: no sums to take, and unless a
  // cut changed lengths (encap_fix), only the outer header checksum
  // follows rewritten addresses, where encap_fix's loop over layers and
  // checksum kinds cost ~4x the instructions.
  if (encap_fast_ && encap_fast_packet(buf, cap, d)) {
    const uint32_t cap0 = cap, wire0 = wire;
    uint8_t* ip = buf + d.encap[0].l3_off;
    std::memcpy(encap_old_[0], ip + 12, 8);
    encap_changed_ = 0;
    const Verdict v =
        prog_.l7_only_ ? general_path<true>(buf, cap, wire, d, m, c) : general_path<false>(buf, cap, wire, d, m, c);
    if (v == Verdict::Forward) {
      if (cap != cap0 || wire != wire0) {
        EncapSums none;
        none.valid = 0;
        encap_fix(buf, cap, true, d, none, encap_old_, encap_changed_);
      } else if (encap_changed_) {
        const uint16_t ck = ipv4_header_checksum20(ip);
        ip[10] = uint8_t(ck >> 8), ip[11] = uint8_t(ck);
      }
    }
    if (snap_at_ < cap) cap = snap_at_;
    return v;
  }
  // The outer checksums follow the rewrite from sums of the original bytes.
  EncapSums sums;
  encap_sums(buf, cap, d, sums);
  const uint32_t cap0 = cap, wire0 = wire;
  encap_changed_ = 0;
  for (int i = 0; i < d.n_encap; ++i) {
    const EncapLayer& L = d.encap[i];
    const uint32_t so = L.l3_off + (L.ip_version == 4 ? 12u : 8u), al = L.ip_version == 4 ? 4u : 16u;
    std::memcpy(encap_old_[i], buf + so, 2 * al);
  }
  const Verdict v =
      prog_.l7_only_ ? general_path<true>(buf, cap, wire, d, m, c) : general_path<false>(buf, cap, wire, d, m, c);
  if (v == Verdict::Forward) encap_fix(buf, cap, cap != cap0 || wire != wire0, d, sums, encap_old_, encap_changed_);
  // After the outer layers: their lengths count the bytes snap() removes.
  if (snap_at_ < cap) cap = snap_at_;
  return v;
}

// An address in a neighbour discovery body: one of the packet's own
// (before its rewrite) takes what that address became; another is a host
// of the link the users are on, with no flow to give it a role, so it takes
// the client's rule (fail closed, as a flow without evidence does), as a
// client position of this packet took it, else the policy's unconditional
// one; mapped when that rule maps any address alone (Crypto-PAn, prefix,
// keyed hash), kept when it keeps, else zeroed. `bits`: a prefix's length,
// past which the mapped bits are zeroed again.
bool ProgramInstance::nd_addr(uint8_t* a, unsigned bits, const NdMap& nm, Eval& e, ApplyCtx& ctx, unsigned alen) {
  const auto& F = l2l4::g_fields;
  if (bits >= alen * 8 && std::memcmp(a, nm.old_src, alen) == 0) return std::memcpy(a, nm.new_src, alen), true;
  if (bits >= alen * 8 && std::memcmp(a, nm.old_dst, alen) == 0) return std::memcpy(a, nm.new_dst, alen), true;
  if (!nm.protects_addr) return true;
  const dsl::Policy& pol = *prog_.policy_;
  const bool user = true;
  int r = -1;
  for (int pos = 0; pos < 2 && r < 0; ++pos)
    if (nm.pos_rule[pos] >= 0 && (nm.both || (pos == 0) == nm.client_is_src) == user) r = nm.pos_rule[pos];
  if (r < 0 && prog_.unconditional_) r = prog_.addr_rule_[1][user ? 1 : 0];
  const ActionKind k = r >= 0 ? pol.rules[r].action.desc->kind : ActionKind::Unknown;
  if (r >= 0 && !actions_[r]->modifies) return true;
  bool mapped = false;
  if (k == ActionKind::CryptoPan || k == ActionKind::Prefix || k == ActionKind::Hash) {
    const uint8_t fam = ctx.family;
    const FieldId fld = ctx.field;
    const bool srv = ctx.is_server;
    ctx.family = alen == 4 ? 4 : 6, ctx.field = user ? F.ip_client : F.ip_server, ctx.is_server = !user;
    mapped = actions_[r]->addr(a, ctx) != ActResult::Drop;
    ctx.family = fam, ctx.field = fld, ctx.is_server = srv;
  }
  if (!mapped) {
    std::memset(a, 0, alen);
    ++e.c->nd_zeroed;
  }
  for (unsigned i = 0; i < alen; ++i) {
    const int keep = std::clamp(int(bits) - int(i * 8), 0, 8);
    a[i] &= uint8_t(0xff00 >> keep);
  }
  return mapped;
}

// The body of an NS/NA/RS/RA/Redirect (RFC 4861, RFC 8106 for RDNSS, RFC
// 4191 for route information). Returns UINT32_MAX when it parsed to its
// end, else the payload offset where it stopped parsing (the caller cuts
// there: what follows cannot be told apart from an address).
uint32_t ProgramInstance::nd_body(uint8_t* buf, const Decoded& d, uint32_t plen, const NdMap& nm, Eval& e,
                                  ApplyCtx& ctx) {
  const auto& F = l2l4::g_fields;
  uint8_t* const pl = buf + d.payload_off;  // after type, code, checksum and the 4 bytes that follow
  const uint8_t type = uint8_t(d.sport >> 8);
  // Fixed part after the first 8 bytes: RA 8 (limits, timers), NS/NA the
  // target, Redirect target and destination.
  const uint32_t fixed = type == 133 ? 0 : type == 134 ? 8 : type == 137 ? 32 : 16;
  if (plen < fixed) return 0;
  if (type >= 135) nd_addr(pl, 128, nm, e, ctx);
  if (type == 137) nd_addr(pl + 16, 128, nm, e, ctx);
  const int mac_rule = !prog_.field_rules_[F.eth_src].empty() ? pick(F.eth_src, e) : pick(F.eth_dst, e);
  for (uint32_t o = fixed; o < plen;) {
    if (o + 2 > plen) return o;
    const uint8_t ot = pl[o];
    const uint32_t olen = uint32_t(pl[o + 1]) * 8;
    if (olen == 0 || o + olen > plen) return o;
    uint8_t* const op = pl + o;
    switch (ot) {
      case 1:    // source link-layer address
      case 2: {  // target link-layer address
        if (mac_rule < 0 || !actions_[mac_rule]->modifies) break;
        if (olen == 8) {
          const FieldId fld = ctx.field;
          ctx.field = F.eth_src;
          if (actions_[mac_rule]->mac(op + 2, ctx) == ActResult::Drop) std::memset(op + 2, 0, 6), ++e.c->nd_zeroed;
          ctx.field = fld;
        } else {
          std::memset(op + 2, 0, olen - 2);  // not an Ethernet address: nothing maps it
          ++e.c->nd_zeroed;
        }
        break;
      }
      case 3:  // prefix information: a prefix of the link's addresses
        if (olen != 32) return o;
        nd_addr(op + 16, std::min<unsigned>(op[2], 128), nm, e, ctx);
        break;
      case 24: {  // route information: up to 16 prefix bytes
        uint8_t a[16] = {};
        const uint32_t n = std::min<uint32_t>(olen - 8, 16);
        std::memcpy(a, op + 8, n);
        nd_addr(a, std::min<unsigned>(op[2], 128), nm, e, ctx);
        std::memcpy(op + 8, a, n);
        break;
      }
      case 25:  // recursive DNS servers
        for (uint32_t k = 8; k + 16 <= olen; k += 16) nd_addr(op + k, 128, nm, e, ctx);
        break;
      case 5: case 7: case 8: case 14: case 31:
        break;  // MTU, advertisement interval, home agent, nonce, DNS search list: no address
      default:
        // The redirected header (4) quotes a whole packet; others are not
        // known to hold no address.
        if (nm.protects_addr || mac_rule >= 0) std::memset(op + 2, 0, olen - 2), ++e.c->nd_zeroed;
        break;
    }
    o += olen;
  }
  return UINT32_MAX;
}

bool ProgramInstance::encap_rules(uint8_t* buf, uint32_t cap, const Decoded& d, Eval& e, ApplyCtx& ctx) {
  const Program& P = prog_;
  const auto& F = l2l4::g_fields;
  // An inner Ethernet header's MACs: the eth rules, as for the outer one.
  if (d.inner_eth_off && d.inner_eth_off + 14u <= cap &&
      (!P.field_rules_[F.eth_dst].empty() || !P.field_rules_[F.eth_src].empty())) {
    for (FieldId f : {F.eth_dst, F.eth_src}) {
      ctx.field = f;
      const int r = pick(f, e);
      if (r >= 0 && actions_[r]->mac(buf + d.inner_eth_off + (f == F.eth_src ? 6 : 0), ctx) == ActResult::Drop)
        return false;
    }
  }
  // The outer addresses: every layer's source and destination.
  RtAction* act = nullptr;
  if (!P.field_rules_[F.tunnel_addr].empty()) {
    const int r = pick(F.tunnel_addr, e);
    if (r >= 0) act = actions_[r].get();
  } else if (P.tunnel_addr_default_ >= 0) {
    act = actions_[P.tunnel_addr_default_]->undecided();
  }
  const bool zero = !act && P.tunnel_addr_zero_;
  if (act || zero) {
    ctx.field = F.tunnel_addr;
    ctx.is_server = true;
    for (int i = 0; i < d.n_encap; ++i) {
      const EncapLayer& L = d.encap[i];
      const uint32_t al = L.ip_version == 4 ? 4u : 16u;
      uint8_t* a = buf + L.l3_off + (L.ip_version == 4 ? 12u : 8u);
      ctx.family = L.ip_version;
      if (zero) {
        std::memset(a, 0, 2 * al);
      } else {
        RtAction* sa = endpoint_action(act, a, L.ip_version);
        RtAction* da = endpoint_action(act, a + al, L.ip_version);
        if (sa->addr(a, ctx) == ActResult::Drop || da->addr(a + al, ctx) == ActResult::Drop) return false;
        if (!sa->modifies && !da->modifies) continue;
      }
      encap_changed_ |= uint8_t(1u << i);
    }
  }
  // Identifiers, rewritten in place (their length kept).
  if (P.tunnel_rules_) {
    for (int i = 0; i < d.n_encap; ++i) {
      const EncapLayer& L = d.encap[i];
      if (!L.has_id) continue;
      FieldId f;
      uint32_t at, n = 4;
      switch (L.kind) {
        case Encap::Vxlan: case Encap::VxlanGpe: case Encap::Geneve: f = F.tunnel_vni, at = L.hdr_off + 4u, n = 3; break;
        case Encap::GtpU: f = F.gtp_teid, at = L.hdr_off + 4u; break;
        case Encap::Gre: case Encap::Erspan: f = F.gre_key, at = L.hdr_off + (L.gre_csum ? 8u : 4u); break;
        default: continue;
      }
      if (P.field_rules_[f].empty() || at + n > cap) continue;
      const int r = pick(f, e);
      ctx.field = f;
      // Anything but Done (drop(), or a cut() the checker refuses on these
      // header fields) fails closed: the identifier never leaves unchanged.
      if (r >= 0 && actions_[r]->bytes(buf + at, n, ctx) != ActResult::Done) return false;
    }
  }
  return true;
}

// kL7Only (Program::l7_only_): no select, BPF, MAC, address, per-flow or
// payload rule, and no condition, so those questions are answered here at
// compile time; every packet still takes the same steps as with kL7Only
// false, and gets the same bytes.
template <bool kL7Only>
Verdict ProgramInstance::general_path(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                      const PacketMeta& m, ConsumerCounters& c) {
  const Program& P = prog_;
  snap_at_ = UINT32_MAX;
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
  const bool both = !kL7Only && ip_ok && both_users(old_src, old_dst, alen, client_is_src, m);
  Eval e{&d, &m, &c, &ctx, client_is_src, client_is_src ? old_src : old_dst, alen, buf};
  if (ip_ok) e.old_src = old_src, e.old_dst = old_dst;

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
  if (!kL7Only && d.n_encap && !encap_rules(buf, cap, d, e, ctx)) [[unlikely]]
    return drop();

  uint32_t cut_at = UINT32_MAX;
  // on_error = snap: the record ends at the cut, its lengths stay.
  const bool err_snap = pol.on_error == dsl::Policy::OnError::Snap;
  auto early_cut = [&] {
    if (err_snap) snap_at_ = std::min(snap_at_, cut_at);  // applied once the outer layers are fixed
    else cap = wire = cut_at;
    return Verdict::Forward;
  };
  auto error_exit = [&](uint32_t at, uint64_t& cut_counter) -> bool {  // true: drop
    if (pol.on_error == dsl::Policy::OnError::Drop) return ++c.err_drop, true;
    // An IP fragment without its data is no valid fragment: drop it instead.
    // A snapped one keeps its lengths and stays one.
    if (!err_snap && (d.flags & kFlagFragment) && at <= d.payload_off) return ++c.err_drop, true;
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
    return early_cut();
  }
  if (!ip_ok) {
    // Addresses not captured in full: cannot be anonymized, remove the IP layer.
    if (!P.protects_anything_) return Verdict::Forward;
    if (error_exit(d.l3_off, c.err_cut)) return Verdict::Drop;
    return early_cut();
  }
  if ((d.flags & kFlagV6Routing) && protects_addr) {
    // Addresses in the routing header would need the same rewrite; no
    // consumer has asked for it, so such packets are not forwarded, or
    // (on_error = snap) end after the fixed header.
    if (!err_snap) return ++c.err_drop, Verdict::Drop;
    error_exit(d.l3_off + 40, c.err_cut);
  }

  const uint8_t* client_clear = client_is_src ? old_src : old_dst;
  const uint8_t* server_clear = client_is_src ? old_dst : old_src;
  // With both ends users there is no server to count users of: observing
  // the guessed one would let a user's address reach z by its peers.
  if (!kL7Only && !both && !P.zslot_rule_.empty() && m.flow) decide_flow(server_clear, client_clear, alen, m, c);

  ctx.family = d.ip_version;
  ctx.client_addr = client_clear;
  if constexpr (kL7Only) {
    // A whole, parsed datagram of the plugin with the shortcut (UDP DNS: a
    // resolver link's every packet): the steps below reduce to the
    // message's rewrite and the checksum update by its spans, without the
    // questions whose answers are known here (no tunnel, ICMP quote, later
    // fragment, stream slice, payload rule or cut). test_dns_fast compares
    // this with those steps.
    if (m.app == shortcut_app_ && shortcut_app_ && m.l7 == L7State::Parsed && d.l4_proto == kProtoUdp &&
        d.status == DecodeStatus::Ok && !(d.flags & (kFlagTunnel | kFlagIcmpError | kFlagLaterFragment))) {
      const uint32_t avail = std::min<uint32_t>(d.cap_len, d.payload_off + d.payload_len) - d.payload_off;
      uint64_t* const sums = shortcut_sums_;
      sums[0] = sums[1] = 0;
      e.l7_sums = sums;
      const bool ok =
          l7_by_plugin(*shortcut_pp_, m.parse->shortcut_state, shortcut_consumer_, buf + d.payload_off, avail, e,
                       shortcut_at_);
      e.l7_sums = nullptr;
      // Not parsed after all (the rewrite then changed nothing): the
      // general steps apply on_error.
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
  int pos_rule[2] = {-1, -1};  // the rule each address position took (ICMP quotes map with it)
  for (int pos = 0; addr_rules && pos < 2; ++pos) {
    bool is_src = pos == 0;
    bool is_client = both || is_src == client_is_src;
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
    pos_rule[pos] = best;
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
        if (iv == d.ip_version && std::memcmp(a, old_src, ial) == 0) {
          std::memcpy(a, buf + so, ial);
        } else if (iv == d.ip_version && std::memcmp(a, old_dst, ial) == 0) {
          std::memcpy(a, buf + dof, ial);
        } else if (protects_addr) {
          // Another address (the quoted datagram's far end): the quoted
          // source travelled to where this error goes, the quoted
          // destination away from where it comes from, so each takes the
          // rule of the outer position it pairs with, when that rule maps
          // any address alone (a key or a prefix); else it is zeroed.
          const int r = pos_rule[off == isrc ? 1 : 0];
          RtAction* act = r >= 0 ? actions_[r].get() : nullptr;
          if (act && !act->modifies) {
          } else if (act && (act->kind == RtKind::CryptoPan || act->kind == RtKind::Prefix)) {
            ctx.family = iv;
            if (act->addr(a, ctx) == ActResult::Drop) std::memset(a, 0, ial);
            ctx.family = d.ip_version;
          } else {
            std::memset(a, 0, ial);
          }
        }
      }
      // The quoted UDP or TCP header's checksum covers the quoted
      // addresses (its pseudo-header): follow them, as the original
      // sender's would have (a quote of the whole segment is verifiable).
      uint8_t inner_proto = iv == 4 ? qp[9] : qp[6];
      const uint32_t qco = inner_proto == kProtoUdp ? 6 : inner_proto == kProtoTcp ? 16 : 0;
      if (qco && qlen >= ihl + qco + 2) {
        uint8_t* uc = qp + ihl + qco;
        uint16_t ck = rd16(uc);
        if (ck != 0 || qco == 16) {
          ck = csum_replace(ck, {before[0], ial}, {qp + isrc, ial});
          ck = csum_replace(ck, {before[1], ial}, {qp + idst, ial});
          wr16(uc, ck == 0 && qco == 6 ? 0xffff : ck);
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

  // Neighbour discovery names addresses and MACs in its body: the target
  // (NS, NA, Redirect), a Redirect's destination, link-layer address
  // options, prefixes and DNS server addresses in options. Each takes the
  // mapping the packet's own would (nd_body); what cannot be mapped is
  // zeroed; a body that does not parse is cut where it stops parsing.
  if (!kL7Only && (d.flags & kFlagAddrBody) && d.l4_proto == kProtoIcmpv6 && d.status == DecodeStatus::Ok &&
      (protects_addr || !P.field_rules_[F.eth_src].empty() || !P.field_rules_[F.eth_dst].empty())) {
    const uint32_t pend = std::min<uint64_t>(uint64_t(d.payload_off) + d.payload_len, cap);
    const uint32_t plen = pend > d.payload_off ? pend - d.payload_off : 0;
    quote_old_sum = csum_sum({buf + d.payload_off, plen});
    quote_changed = true;
    NdMap nm{old_src, old_dst, buf + so, buf + dof, pos_rule, both, client_is_src, protects_addr};
    const uint32_t bad = nd_body(buf, d, plen, nm, e, ctx);
    if (bad != UINT32_MAX && error_exit(d.payload_off + bad, c.err_cut)) return Verdict::Drop;
  }

  // RIPng (RFC 2080) lists routes: each entry's prefix (and a next hop's
  // address) maps as an address of the link's hosts does in neighbour
  // discovery. RIP (RFC 2453, and version 1) over IPv4 the same: each
  // entry's address (a prefix of its mask's length; version 1 has none: the
  // whole address) and next hop; an authentication entry (address family
  // 0xffff) carries a password or digest, zeroed. A message that is not
  // whole entries is cut after its last.
  const bool ripng = d.ip_version == 6 && d.sport == 521, rip = d.ip_version == 4 && d.sport == 520;
  if (!kL7Only && protects_addr && (d.flags & kFlagAddrBody) && d.l4_proto == kProtoUdp &&
      d.status == DecodeStatus::Ok && !(d.flags & kFlagLaterFragment) && (ripng || rip)) {
    const uint32_t pend = std::min<uint64_t>(uint64_t(d.payload_off) + d.payload_len, cap);
    const uint32_t plen = pend > d.payload_off ? pend - d.payload_off : 0;
    uint8_t* const rp = buf + d.payload_off;
    quote_old_sum = csum_sum({rp, plen});
    quote_changed = true;
    NdMap nm{old_src, old_dst, buf + so, buf + dof, pos_rule, both, client_is_src, protects_addr};
    uint32_t o = 4;
    for (; o + 20 <= plen; o += 20) {
      uint8_t* const en = rp + o;
      if (ripng) {
        const bool next_hop = en[19] == 0xff;
        nd_addr(en, next_hop ? 128u : std::min<unsigned>(en[18], 128), nm, e, ctx);
      } else if (rd16(en) == 0xffff) {
        std::memset(en + 4, 0, 16);
        ++c.nd_zeroed;
      } else {
        const uint32_t mask = uint32_t(rd16(en + 8)) << 16 | rd16(en + 10);
        nd_addr(en + 4, mask ? unsigned(std::popcount(mask)) : 32u, nm, e, ctx, 4);
        if (rd16(en + 12) | rd16(en + 14)) nd_addr(en + 12, 32, nm, e, ctx, 4);
      }
    }
    if (o < plen && error_exit(d.payload_off + o, c.err_cut)) return Verdict::Drop;
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
  // A payload whose messages were not located is the protocol's payload
  // field as a whole (ProtocolPlugin::payload_field, as http.body): a
  // policy with a rule for it hides it that way, keeping its lengths,
  // rather than cutting it.
  const bool body_rule = m.app < 32 && (P.payload_apps_ >> m.app & 1) && d.status == DecodeStatus::Ok && plen;
  const FieldId body_f = body_rule ? L7Fields::get().payload_of(m.app) : kNoField;
  auto all_body = [&] {
    take_sum();
    apply_payload(body_f, pl, plen, nullptr, 0, e);
    payload_changed = true;
  };
  if (P.has_l7_ && d.status == DecodeStatus::Ok && cut_at == UINT32_MAX && m.l7 == L7State::Stream) {
    // A segment of a reassembled header: its bytes are the slice of this
    // consumer's rewrite of the whole header (decided once, at release).
    const StreamView& sv = *m.stream;
    switch (sv.result[P.consumer_]) {
      case StreamView::Drop: return drop();
      case StreamView::Failed:
        if (body_rule) {
          ++c.l7_cut;
          all_body();
        } else if (error_exit(d.payload_off, c.l7_cut)) {
          return Verdict::Drop;
        }
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
    // A datagram of the plugin with the shortcut (UDP DNS: label spans,
    // addresses, ECS) is rewritten in spans: the checksum follows the sums
    // of those spans only. UDP only: its checksum is the same whichever
    // representation of zero a sum takes (0 is sent as 0xffff), so the
    // result is the full update's bytes.
    const bool by_spans = !sum_taken && d.l4_proto == kProtoUdp && m.app == span_app_ && m.app;
    if (by_spans) e.l7_sums = l7_sums;
    else take_sum();
    if (!l7_rewrite(buf, d, e)) {
      if (body_rule) {
        ++c.l7_cut;
        all_body();
      } else if (error_exit(d.payload_off, c.l7_cut)) {
        return Verdict::Drop;
      }
    } else if (!by_spans) {
      payload_changed = true;
    }
    e.l7_sums = nullptr;
    if (e.drop) return drop();
  } else if (body_rule && cut_at == UINT32_MAX && m.l7 == L7State::None) {
    // The rest of a body (its length known, or until a new message).
    all_body();
    if (e.drop) return drop();
  }
  if (e.body_snap != UINT32_MAX) snap_at_ = d.payload_off + e.body_snap;
  // A packet repeating what the flow's names hid (a server's TLS 1.2
  // certificates name the server the client's SNI decision hid, or that
  // no SNI named).
  if (m.names_echo && cut_at == UINT32_MAX && (P.l7_protect_ & (1u << m.app)) &&
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
    if (r == ActResult::Cut) {
      cut_at = d.payload_off;
      // Neighbour discovery's fixed part (an NS/NA target, a Redirect's
      // target and destination, an RA's limits and timers) is its header:
      // without it the message is malformed. nd_body has mapped its
      // addresses as the policy maps the packet's; the options go.
      if ((d.flags & kFlagAddrBody) && d.l4_proto == kProtoIcmpv6) {
        const uint8_t type = uint8_t(d.sport >> 8);
        const uint32_t fixed = type == 134 ? 8 : type == 135 || type == 136 ? 16 : type == 137 ? 32 : 0;
        if (fixed <= plen) cut_at += fixed;
      }
      // An ICMP error's quote is the header of the datagram it is about:
      // its IP header and 8 bytes of its transport header (RFC 792), mapped
      // above as the packet's own. Without them the error says nothing and
      // is malformed; what follows them is the datagram's payload.
      if ((d.flags & kFlagIcmpError) && plen) {
        const uint8_t iv = pl[0] >> 4;
        const uint32_t ihl = iv == 4 ? (pl[0] & 0xf) * 4u : iv == 6 ? 40u : 0;
        if (ihl >= 20 && plen >= ihl) cut_at += std::min(plen, ihl + 8);
      }
    }
    else if (actions_[prule]->modifies && plen) payload_changed = true;
    if (actions_[prule]->snaps) snap_at_ = std::min(snap_at_, d.payload_off);
  }
  // The packet's addresses the policy mapped, written as text in the
  // payload it keeps (addr_text.h).
  // To the end of what was captured: bytes past the transport's length
  // (a short UDP length, a trailer) are delivered too, and so is what
  // follows the last header a malformed packet decoded to, when no rule
  // needed it cut.
  const uint32_t text_from = d.status == DecodeStatus::Ok ? d.payload_off : std::min(d.good_until, cap);
  if (addr_changed && P.addr_text_ && cut_at == UINT32_MAX && ip_ok && cap > text_from + 1) {
    void (*before)(void*) = [](void* t) { (*static_cast<decltype(take_sum)*>(t))(); };
    const uint8_t* olds[2];
    const uint8_t* news[2];
    unsigned k = 0;
    for (int i = 0; i < 2; ++i) {
      const uint8_t* old_a = i ? old_dst : old_src;
      const uint8_t* new_a = buf + (i ? dof : so);
      if (std::memcmp(old_a, new_a, alen) != 0) olds[k] = old_a, news[k++] = new_a;
    }
    const bool ok = d.status == DecodeStatus::Ok;  // else no checksum covers these bytes in a way kept
    const AddrTextCount n =
        map_addrs_text(buf + text_from, cap - text_from, olds, news, k, alen, ok ? before : nullptr, &take_sum);
    if (n.mapped | n.zeroed) payload_changed = payload_changed || ok, c.addr_text += n.mapped, c.addr_text_zeroed += n.zeroed;
  }
  uint16_t pay_new_sum = payload_changed && sum_taken ? csum_sum({pl, plen}) : pay_old_sum;
  payload_changed = payload_changed && sum_taken && pay_new_sum != pay_old_sum;

  // Fix lengths and checksums.
  uint8_t* ip = buf + d.l3_off;
  const bool v4 = d.ip_version == 4;
  bool full_sum = false;  // the L4 checksum over what is left, zeros included
  if (err_snap && cut_at != UINT32_MAX) {
    // The zeros make the checksums independent of the bytes removed.
    if (cut_at < cap) std::memset(buf + cut_at, 0, cap - cut_at);
    snap_at_ = std::min(snap_at_, cut_at);
    cut_at = UINT32_MAX;
    full_sum = true;
  }
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
  if (cut_at != UINT32_MAX || full_sum) {
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
