// The general path: every packet a header kernel does not take, with its
// fail-closed branches (decode errors, tunnels, ICMP quotes, fragments,
// application fields that cannot be located), as a sequence of named steps
// (general_path at the end of this file).
#include "fixup.h"

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

namespace {
// Geneve options are the fabric's metadata, kept; some name the endpoint
// they carry traffic for by its address (Google Cloud's endpoint ID holds
// the VM's): where an option's data holds, at a 4-byte boundary, the
// carried packet's own source or destination, that copy takes the mapping
// the packet's header gets (GeneveCopies::follow after the rules), so the
// address does not leave in clear beside its pseudonym.
struct GeneveCopies {
  static constexpr unsigned kMax = 8;
  uint32_t at[kMax];
  bool dst[kMax];
  unsigned n = 0;
  void note(const uint8_t* buf, uint32_t cap, const Decoded& d) {
    n = 0;
    if (!d.has_ip() || d.ip_version == 0) return;
    const uint32_t al = d.addr_len();
    if (d.dst_off() + al > cap) return;
    for (int i = 0; i < d.n_encap; ++i) {
      const EncapLayer& L = d.encap[i];
      if (L.kind != Encap::Geneve || L.hdr_off + 8u > cap) continue;
      const uint32_t end = std::min<uint32_t>(cap, L.hdr_off + 8u + (buf[L.hdr_off] & 0x3fu) * 4u);
      for (uint32_t o = L.hdr_off + 8u; o + al <= end && n < kMax; o += 4) {
        if (std::memcmp(buf + o, buf + d.src_off(), al) == 0) at[n] = o, dst[n++] = false, o += al - 4;
        else if (std::memcmp(buf + o, buf + d.dst_off(), al) == 0) at[n] = o, dst[n++] = true, o += al - 4;
      }
    }
  }
  void follow(uint8_t* buf, uint32_t cap, const Decoded& d) const {
    const uint32_t al = d.addr_len();
    for (unsigned k = 0; k < n; ++k) {
      // A cut may have taken the packet's header: the copy goes with it.
      if (d.dst_off() + al > cap) std::memset(buf + at[k], 0, std::min(al, cap - std::min(cap, at[k])));
      else std::memcpy(buf + at[k], buf + (dst[k] ? d.dst_off() : d.src_off()), al);
    }
  }
};
}  // namespace

Verdict ProgramInstance::process_encap(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                       const PacketMeta& m, ConsumerCounters& c) {
  // Most tunnelled traffic (encap_fast_packet): one UDP layer over IPv4,
  // its UDP checksum 0 (as GTP-U and VXLAN senders mostly leave it). No
  // checksum covers the inner packet then: no sums to take, and unless a
  // cut changed lengths (encap_fix), only the outer header checksum
  // follows rewritten addresses, where encap_fix's loop over layers and
  // checksum kinds cost ~4x the instructions.
  ayiya_note(buf, cap, d);
  GeneveCopies geneve;
  geneve.note(buf, cap, d);
  if (encap_fast_ && encap_fast_packet(buf, cap, d)) {
    const uint32_t cap0 = cap, wire0 = wire;
    uint8_t* ip = buf + d.encap[0].l3_off;
    std::memcpy(encap_old_[0], ip + 12, 8);
    encap_changed_ = 0;
    const Verdict v =
        prog_.l7_only_ ? general_path<true>(buf, cap, wire, d, m, c) : general_path<false>(buf, cap, wire, d, m, c);
    if (v == Verdict::Forward) {
      ayiya_follow(buf, cap, d);
      geneve.follow(buf, cap, d);
      if (cap != cap0 || wire != wire0) {
        EncapSums none;
        none.valid = 0;
        encap_fix(buf, cap, true, d, none, encap_old_, encap_changed_);
      } else if (encap_changed_) {
        // Updated, not recomputed: a wrong header checksum stays wrong (fixup.h).
        uint16_t ck = rd16(ip + 10);
        ck = csum_replace_addr(ck, encap_old_[0], ip + 12, true);
        ck = csum_replace_addr(ck, encap_old_[0] + 4, ip + 16, true);
        wr16(ip + 10, ck);
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
  if (v == Verdict::Forward) {
    ayiya_follow(buf, cap, d);
    geneve.follow(buf, cap, d);
    encap_fix(buf, cap, cap != cap0 || wire != wire0, d, sums, encap_old_, encap_changed_);
  }
  // After the outer layers: their lengths count the bytes snap() removes.
  if (snap_at_ < cap) cap = snap_at_;
  return v;
}

void ProgramInstance::ayiya_note(const uint8_t* buf, uint32_t cap, const Decoded& d) {
  for (int i = 0; i < d.n_encap; ++i) {
    const EncapLayer& L = d.encap[i];
    uint32_t at, n;
    ayiya_id_[i] = kIdNone;
    if (!ayiya_identity(buf, cap, L, at, n)) continue;
    // What the layer carries starts with an IP header (parse_ayiya).
    const uint8_t* ip = buf + L.inner_off;
    const uint32_t al = (ip[0] >> 4) == 4 ? 4u : 16u, so = al == 4 ? 12u : 8u;
    ayiya_id_[i] = kIdOther;
    if (n != al || L.inner_off + so + 2 * al > cap) continue;
    if (std::memcmp(buf + at, ip + so, al) == 0) ayiya_id_[i] = kIdSrc;
    else if (std::memcmp(buf + at, ip + so + al, al) == 0) ayiya_id_[i] = kIdDst;
  }
}

void ProgramInstance::ayiya_follow(uint8_t* buf, uint32_t cap, const Decoded& d) const {
  for (int i = 0; i < d.n_encap; ++i) {
    if (ayiya_id_[i] != kIdSrc && ayiya_id_[i] != kIdDst) continue;
    const EncapLayer& L = d.encap[i];
    uint32_t at, n;
    // A cut may have taken the packet's header: the identity goes with it.
    if (!ayiya_identity(buf, cap, L, at, n)) continue;
    const uint8_t* ip = buf + L.inner_off;
    const uint32_t so = n == 4 ? 12u : 8u;
    if (L.inner_off + so + 2 * n > cap) std::memset(buf + at, 0, n);
    else std::memcpy(buf + at, ip + so + (ayiya_id_[i] == kIdDst ? n : 0u), n);
  }
}

// A Teredo origin indication's address takes the tunnel endpoints' rule
// (a user's address its client rule): undisguised, rewritten, disguised
// again. Its port is kept, as the endpoints' ports are. The outer UDP
// checksum follows (encap_fix sums the whole span again).
bool ProgramInstance::teredo_origin_rule(uint8_t* buf, uint32_t cap, const EncapLayer& L, RtAction* act,
                                         ApplyCtx& ctx) {
  uint32_t at;
  if (!teredo_origin(buf, cap, L, at)) return true;
  uint8_t a[4];
  for (int k = 0; k < 4; ++k) a[k] = uint8_t(~buf[at + 4 + k]);
  ctx.family = 4;
  if (endpoint_action(act, a, 4)->addr(a, ctx) == ActResult::Drop) return false;
  ctx.family = L.ip_version;
  for (int k = 0; k < 4; ++k) buf[at + 4 + k] = uint8_t(~a[k]);
  return true;
}

// A Teredo bubble's alternate address trailers name the client's other
// addresses in clear (its address behind the NAT, the outer source of a
// capture taken there): each takes the endpoints' rule, as the origin
// indication's does, its port kept. Bytes after them that are no trailer
// a reader knows are zeroed (`zero`: every address there too) where
// addresses are protected.
bool ProgramInstance::teredo_trailer_rule(uint8_t* buf, uint32_t cap, const EncapLayer& L, RtAction* act, bool zero,
                                          ApplyCtx& ctx) {
  uint32_t at, end;
  if (!teredo_trailers(buf, cap, L, at, end)) return true;
  bool ok = true;
  const uint32_t known = each_teredo_alt_addr(buf, at, end, [&](uint32_t a) {
    ctx.family = 4;
    if (zero) std::memset(buf + a, 0, 4);
    else if (ok && endpoint_action(act, buf + a, 4)->addr(buf + a, ctx) == ActResult::Drop) ok = false;
  });
  ctx.family = L.ip_version;
  if (known < end) std::memset(buf + known, 0, end - known);
  return ok;
}

bool ProgramInstance::encap_rules(uint8_t* buf, uint32_t cap, const Decoded& d, Eval& e, ApplyCtx& ctx) {
  const Program& P = prog_;
  const auto& F = l2l4::g_fields;
  // An inner Ethernet header's MACs: the eth rules, as for the outer one,
  // and remembered as its are (an HSRPv2 or LLDP payload inside names its
  // sender's MAC).
  if (d.inner_eth_off && d.inner_eth_off + 14u <= cap &&
      (!P.field_rules_[F.eth_dst].empty() || !P.field_rules_[F.eth_src].empty())) {
    uint8_t* const m = buf + d.inner_eth_off;
    uint8_t old[12];
    if (echo_) std::memcpy(old, m, 12);
    for (FieldId f : {F.eth_dst, F.eth_src}) {
      ctx.field = f;
      const int r = pick(f, e);
      if (r >= 0 && actions_[r]->mac(m + (f == F.eth_src ? 6 : 0), ctx) == ActResult::Drop) return false;
    }
    if (echo_) echo_->mac(old, m), echo_->mac(old + 6, m + 6);
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
        if (uint32_t at; teredo_origin(buf, cap, L, at)) std::memset(buf + at + 2, 0xff, 6);  // port and address 0
        teredo_trailer_rule(buf, cap, L, nullptr, true, ctx);
      } else {
        const uint8_t pc = L.kind == Encap::Gre && L.gre_v1 ? e.m->pptp_client : 0;
        RtAction* sa = endpoint_action(act, a, L.ip_version, pc & 1);
        RtAction* da = endpoint_action(act, a + al, L.ip_version, pc & 2);
        if (sa->addr(a, ctx) == ActResult::Drop || da->addr(a + al, ctx) == ActResult::Drop) return false;
        if (!teredo_origin_rule(buf, cap, L, act, ctx) || !teredo_trailer_rule(buf, cap, L, act, false, ctx))
          return false;
        if (!sa->modifies && !da->modifies) continue;
      }
      encap_changed_ |= uint8_t(1u << i);
    }
  }
  // An AYIYA identity that names neither end of what it carries (a
  // heartbeat's, a multicast report's): the sender's tunnel address, which
  // its other packets show as a client's or a server's, or a number or
  // name that identifies it as well. Nothing here tells which: zeroed
  // where addresses are protected (the outer endpoints still name the
  // tunnel).
  if (P.protects_addresses_)
    for (int i = 0; i < d.n_encap; ++i) {
      uint32_t at, n;
      if (ayiya_id_[i] == kIdOther && ayiya_identity(buf, cap, d.encap[i], at, n)) std::memset(buf + at, 0, n);
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

// The general path's steps, in the order a packet meets them (general_path
// below lists them): select and L2, what could not be decoded, the flow's
// decision, the L7 shortcut, the addresses, what the policy cannot see into
// and the bodies that carry addresses (addr_bodies.cpp), the application
// fields and the protocol's payload field, the payload rule, addresses
// written as text, then lengths and checksums (fixup.h).

// L2: MAC addresses exist in every frame of 14 bytes or more; then the
// layers around an encapsulated packet. false: drop (counted).
[[gnu::always_inline]] inline bool ProgramInstance::l2_rules(GenPacket& g, Eval& e, ApplyCtx& ctx) {
  const Program& P = prog_;
  const auto& F = l2l4::g_fields;
  if (g.cap >= 14 && (!P.field_rules_[F.eth_dst].empty() || !P.field_rules_[F.eth_src].empty())) {
    uint8_t old[12];
    if (echo_) std::memcpy(old, g.buf, 12);
    ctx.field = F.eth_dst;
    int r = pick(F.eth_dst, e);
    if (r >= 0 && actions_[r]->mac(g.buf, ctx) == ActResult::Drop) return ++g.c.policy_drop, false;
    ctx.field = F.eth_src;
    r = pick(F.eth_src, e);
    if (r >= 0 && actions_[r]->mac(g.buf + 6, ctx) == ActResult::Drop) return ++g.c.policy_drop, false;
    if (echo_) echo_->mac(old, g.buf), echo_->mac(old + 6, g.buf + 6);
  }
  if (g.d.n_encap && !encap_rules(g.buf, g.cap, g.d, e, ctx)) [[unlikely]]
    return ++g.c.policy_drop, false;
  return true;
}

// A packet not decoded through its IP addresses: nothing past what was
// decoded can be trusted.
Verdict ProgramInstance::undecoded(GenPacket& g) {
  const Program& P = prog_;
  const Decoded& d = g.d;
  ConsumerCounters& c = g.c;
  if (d.status == DecodeStatus::NotIp) {
    using OU = dsl::Policy::OnUnknown;
    OU ou = P.policy_->on_unknown;
    if (ou == OU::Default) ou = g.protects_addr ? OU::Drop : OU::Keep;
    if (ou == OU::Drop) return ++c.unknown_drop, Verdict::Drop;
    if (ou == OU::Keep) return ++c.unknown_keep, Verdict::Forward;
    ++c.unknown_cut;
    g.cap = g.wire = std::min<uint32_t>(g.cap, d.l3_off);
    return Verdict::Forward;
  }
  if (!P.protects_anything_) return Verdict::Forward;
  // Broken before the IP header; or its addresses not captured in full,
  // so they cannot be anonymized: the IP layer goes.
  const uint32_t at = !d.has_ip() || d.ip_version == 0 ? std::min<uint32_t>(d.good_until, g.cap) : d.l3_off;
  if (g.error(at, c.err_cut)) return Verdict::Drop;
  return g.cut.end_early(g.cap, g.wire, snap_at_);
}

// A whole, parsed datagram of the plugin with the shortcut (UDP DNS: a
// resolver link's every packet), for an L7-only policy: the steps below
// reduce to the message's rewrite and the checksum update by its spans,
// without the questions whose answers are known here (no tunnel, ICMP
// quote, later fragment, stream slice, payload rule or cut). test_dns_fast
// compares this with those steps. true: done, with verdict v.
[[gnu::always_inline]] inline bool ProgramInstance::l7_shortcut(GenPacket& g, Eval& e, Verdict& v) {
  const Decoded& d = g.d;
  const PacketMeta& m = g.m;
  if (!shortcut_datagram(d, m, shortcut_app_)) return false;
  const uint32_t avail = std::min<uint32_t>(d.cap_len, d.payload_off + d.payload_len) - d.payload_off;
  // Bytes after the UDP length are the message's but not the checksum's:
  // the general steps sum only what it covers.
  if (payload_sum_len(g.buf, d, avail) != avail) [[unlikely]] return false;
  uint64_t* const sums = shortcut_sums_;
  sums[0] = sums[1] = 0;
  e.l7_sums = sums;
  const bool ok = l7_by_plugin(*shortcut_pp_, m.parse->shortcut_state, shortcut_consumer_, g.buf + d.payload_off,
                               avail, e, shortcut_at_);
  e.l7_sums = nullptr;
  // Not parsed after all (the rewrite then changed nothing): the general
  // steps apply on_error.
  if (!ok) return false;
  if (e.drop) return ++g.c.policy_drop, v = Verdict::Drop, true;
  if (sums[0] != sums[1] && d.l4_off + 8 <= g.cap) {
    uint8_t* const l4 = g.buf + d.l4_off;
    uint16_t ck = rd16(l4 + 6);
    Rewritten r;
    r.spans = sums;
    // 0: the sender computed none; a transmit offload's partial covers no payload.
    const bool v4 = d.ip_version == 4;
    if (ck != 0 && !l4_partial(g.buf, g.cap, d, r, ck, 6,
                               csum_add(csum_addr_sum(g.buf + d.src_off(), v4), csum_addr_sum(g.buf + d.dst_off(), v4)))) {
      ck = csum_update_spans(ck, sums);
      wr16(l4 + 6, ck == 0 ? 0xffff : ck);
    }
  }
  v = Verdict::Forward;
  return true;
}

namespace {
// A routing header the runtime does not rewrite (Decoded::ipv6_rh_off): one
// listing the path (type 0, RPL's 3, segment routing's 4), or a type 2 of
// another length than Mobile IPv6's one address.
bool v6_path_route(const uint8_t* buf, const Decoded& d) {
  return d.ipv6_rh_off && !(buf[d.ipv6_rh_off + 2] == 2 && buf[d.ipv6_rh_off + 1] == 2);
}

// The checksum's offset in an upper layer whose checksum covers the IPv6
// pseudo-header (TCP, UDP, ICMPv6, the Mobility Header), 0 none; and the
// bytes it covers from d.l4_off, 0 when they were not all captured.
uint32_t v6_sum_at(uint8_t proto) {
  return proto == kProtoTcp ? 16 : proto == kProtoUdp ? 6 : proto == kProtoIcmpv6 ? 2 : proto == kProtoMobility ? 4 : 0;
}
uint32_t v6_sum_len(const uint8_t* buf, uint32_t cap, const Decoded& d, uint32_t at) {
  const uint32_t l3 = d.l3_off;
  if (l3 + 40 > cap || d.l4_off + at + 2 > cap) return 0;
  uint32_t end = l3 + 40 + rd16(buf + l3 + 4);
  if (d.l4_proto == kProtoUdp) end = std::min<uint32_t>(end, d.l4_off + rd16(buf + d.l4_off + 4));
  return end <= cap && end >= d.l4_off + at + 2 ? end - d.l4_off : 0;
}
}  // namespace

// Mobile IPv6's addresses in the IPv6 header chain (RFC 6275): the Home
// Address option's, the source's own address while away from home (the
// header holds its care-of address), and a type 2 routing header's, the
// destination's. Each is an address of that end of the flow and takes the
// treatment of that end's role (apply_role_addr: one address, one
// treatment; an address the header holds takes the header's rewrite). A
// mobile node's stack sums the upper layer's checksum over the home
// addresses, not the header's: when the checksum was right so, and not
// over the header's, it is computed again over their rewrite once the
// packet is done (mobile_sum). An all-zero address names no one and stays.
bool ProgramInstance::mobile_addrs(GenPacket& g, Eval& e) {
  const Decoded& d = g.d;
  if (g.alen != 16) return true;
  uint8_t* const hao = d.ipv6_hao_off ? g.buf + d.ipv6_hao_off : nullptr;
  uint8_t* const rh2 = d.ipv6_rh_off && !v6_path_route(g.buf, d) ? g.buf + d.ipv6_rh_off + 8 : nullptr;
  if (!hao && !rh2) return true;
  const uint32_t at = d.status == DecodeStatus::Ok && !(d.flags & kFlagFragment) ? v6_sum_at(d.l4_proto) : 0;
  if (const uint32_t len = at ? v6_sum_len(g.buf, g.cap, d, at) : 0) {
    const std::span<const uint8_t> seg{g.buf + d.l4_off, len};
    const uint16_t ck = rd16(g.buf + d.l4_off + at);
    const bool none = d.l4_proto == kProtoUdp && ck == 0;
    g.home_sum = !none && ck == l4_checksum_v6(hao ? hao : g.old_src, rh2 ? rh2 : g.old_dst, d.l4_proto, seg, at) &&
                 ck != l4_checksum_v6(g.old_src, g.old_dst, d.l4_proto, seg, at);
  }
  for (uint8_t* a : {hao, rh2}) {
    if (!a || std::all_of(a, a + 16, [](uint8_t b) { return b == 0; })) continue;
    const bool of_src = a == hao;
    if (!apply_role_addr(a, 6, e, g.both || g.client_is_src == of_src)) return ++g.c.policy_drop, false;
  }
  return true;
}

void ProgramInstance::mobile_sum(GenPacket& g) {
  const Decoded& d = g.d;
  const uint32_t at = v6_sum_at(d.l4_proto);
  if (!g.cut.none() && g.cut.at < d.l4_off + at + 2) return;
  const uint32_t len = v6_sum_len(g.buf, g.cap, d, at);
  if (!len) return;
  const uint8_t* src = d.ipv6_hao_off ? g.buf + d.ipv6_hao_off : g.buf + g.so;
  const uint8_t* dst = d.ipv6_rh_off && !v6_path_route(g.buf, d) ? g.buf + d.ipv6_rh_off + 8 : g.buf + g.dof;
  wr16(g.buf + d.l4_off + at, l4_checksum_v6(src, dst, d.l4_proto, {g.buf + d.l4_off, len}, at));
}

// Each address position takes the first rule in source order naming it,
// by position or by role, whose condition holds. false: drop (counted).
[[gnu::always_inline]] inline bool ProgramInstance::addr_rules(GenPacket& g, Eval& e, ApplyCtx& ctx) {
  const Program& P = prog_;
  const auto& F = l2l4::g_fields;
  const dsl::Policy& pol = *P.policy_;
  ConsumerCounters& c = g.c;
  // No rule names an address (an L7-only policy): nothing to choose per position.
  if (P.field_rules_[F.ip_src].empty() && P.field_rules_[F.ip_dst].empty() && P.field_rules_[F.ip_client].empty() &&
      P.field_rules_[F.ip_server].empty())
    return true;
  for (int pos = 0; pos < 2; ++pos) {
    bool is_src = pos == 0;
    bool is_client = g.both || is_src == g.client_is_src;
    FieldId pos_field = is_src ? F.ip_src : F.ip_dst;
    FieldId role_field = is_client ? F.ip_client : F.ip_server;
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
    g.pos_rule[pos] = best;
    if (c.rule_hits.size() < P.plans_.size()) c.rule_hits.resize(P.plans_.size());
    ++c.rule_hits[best];
    ctx.field = role_field;
    ctx.is_server = !is_client;
    if (actions_[best]->addr(g.buf + (is_src ? g.so : g.dof), ctx) == ActResult::Drop) return ++c.policy_drop, false;
    g.addr_changed = g.addr_changed || actions_[best]->modifies;
  }
  return true;
}

// Content the policy cannot see into: a tunnel's inner packet when
// addresses or application fields are protected (an inner packet holds
// both); a later fragment's data, which cannot be parsed and may hold names
// (a large DNS response) or, when the datagram is a tunnel, inner
// addresses. Then the bodies that carry addresses (addr_bodies.cpp).
// false: drop (counted).
[[gnu::always_inline]] inline bool ProgramInstance::opaque_and_bodies(GenPacket& g, Eval& e, ApplyCtx& ctx) {
  const Program& P = prog_;
  const Decoded& d = g.d;
  const PacketMeta& m = g.m;
  if ((g.protects_addr || P.l7_protect_) && (d.flags & kFlagTunnel) && d.status == DecodeStatus::Ok)
    if (g.error(d.payload_off, g.c.tunnel_cut)) return false;
  if ((d.flags & (kFlagIcmpError | kFlagAddrBody)) && !addr_bodies(g, e, ctx)) [[unlikely]]
    return false;
  // Only a policy that wants flows vouches for a fragment by its flow: the
  // worker makes flows for another consumer's sake too, and this one's
  // output must be what it is alone.
  if ((d.flags & kFlagLaterFragment) && d.status == DecodeStatus::Ok &&
      (P.l7_protect_ ||
       (g.protects_addr && (!P.wants_flows_ || !m.flow || m.flow->frag_tunnel || m.flow_first))))
    if (g.error(d.payload_off, P.l7_protect_ ? g.c.l7_cut : g.c.tunnel_cut)) return false;
  return true;
}

// Application fields first, then the protocol's payload field. A payload
// whose messages were not located is the protocol's payload field as a
// whole (ProtocolPlugin::payload_field, as http.body): a policy with a rule
// for it hides it that way, keeping its lengths, rather than cutting it.
// false: drop (counted).
[[gnu::always_inline]] inline bool ProgramInstance::l7_and_body(GenPacket& g, Eval& e) {
  const Program& P = prog_;
  const Decoded& d = g.d;
  const PacketMeta& m = g.m;
  ConsumerCounters& c = g.c;
  const bool body_rule = m.app < 32 && (P.payload_apps_ >> m.app & 1) && d.status == DecodeStatus::Ok && g.plen;
  const FieldId body_f = body_rule ? L7Fields::get().payload_of(m.app) : kNoField;
  auto all_body = [&] {
    g.take_sum();
    apply_payload(body_f, g.pl, g.plen, nullptr, 0, e);
    g.changed = true;
  };
  // Not located: the payload field as a whole, else on_error.
  auto failed = [&] {
    if (!body_rule) return !g.error(d.payload_off, c.l7_cut);
    ++c.l7_cut;
    all_body();
    return true;
  };
  if (P.has_l7_ && d.status == DecodeStatus::Ok && g.cut.none() && m.l7 == L7State::Stream) {
    // A segment of a reassembled header: its bytes are the slice of this
    // consumer's rewrite of the whole header (decided once, at release).
    const StreamView& sv = *m.stream;
    switch (sv.result[P.consumer_]) {
      case StreamView::Drop: return ++c.policy_drop, false;
      case StreamView::Failed:
        if (!failed()) return false;
        break;
      case StreamView::Rewritten:
        if (sv.seg_off < sv.len && g.plen) {
          g.take_sum();
          std::memcpy(g.pl, sv.bytes[P.consumer_] + sv.seg_off, std::min(g.plen, sv.len - sv.seg_off));
          g.changed = true;
        }
        break;
      default: break;
    }
  } else if (P.has_l7_ && d.status == DecodeStatus::Ok && g.cut.none() && m.l7 != L7State::None) {
    // A datagram of the plugin with the shortcut (UDP DNS: label spans,
    // addresses, ECS) is rewritten in spans: the checksum follows the sums
    // of those spans only. UDP only: its checksum is the same whichever
    // representation of zero a sum takes (0 is sent as 0xffff), so the
    // result is the full update's bytes. Not where the UDP length ends
    // before the message (the spans may lie past it, outside the checksum).
    const bool by_spans = !g.sum_taken && d.l4_proto == kProtoUdp && m.app == span_app_ && m.app && g.slen == g.plen;
    if (by_spans) e.l7_sums = g.l7_sums;
    else g.take_sum();
    if (!l7_rewrite(g.buf, d, e)) {
      if (!failed()) return false;
    } else if (!by_spans) {
      g.changed = true;
    }
    e.l7_sums = nullptr;
    if (e.drop) return ++c.policy_drop, false;
  } else if (body_rule && g.cut.none() && m.l7 == L7State::None) {
    // The rest of a body (its length known, or until a new message).
    all_body();
    if (e.drop) return ++c.policy_drop, false;
  }
  if (e.body_snap != UINT32_MAX) snap_at_ = d.payload_off + e.body_snap;
  // A packet repeating what the flow's names hid (a server's TLS 1.2
  // certificates name the server the client's SNI decision hid, or that
  // no SNI named).
  if (m.names_echo && g.cut.none() && (P.l7_protect_ & (1u << m.app)) &&
      !(m.flow && ((m.flow->sni_clear >> P.consumer_) & 1)))
    if (g.error(d.payload_off, c.tls_server_cut)) return false;
  return true;
}

// The payload rule (kL7Only: none). false: drop (counted).
template <bool kL7Only>
[[gnu::always_inline]] inline bool ProgramInstance::payload_rule(GenPacket& g, Eval& e, ApplyCtx& ctx) {
  const Program& P = prog_;
  const auto& F = l2l4::g_fields;
  const Decoded& d = g.d;
  int prule = kL7Only ? -1 : pick(F.payload, e);  // pick() counts nothing when no rule names the payload
  if (!kL7Only && prule < 0) prule = P.payload_default_plan_;
  const bool payload_protected = prule >= 0 && actions_[prule]->modifies;
  if (d.status != DecodeStatus::Ok) {
    // The payload's start is unknown: if it or a field inside it is
    // protected, keep only what was decoded.
    if ((payload_protected || P.l7_protect_) && g.error(std::min(d.good_until, g.cap), g.c.err_cut)) return false;
    return true;
  }
  if (prule < 0 || !g.cut.none()) return true;
  ctx.field = F.payload;
  if (actions_[prule]->modifies && !actions_[prule]->cuts && g.plen) g.take_sum();
  const ActResult r = actions_[prule]->bytes(g.pl, g.plen, ctx);
  if (r == ActResult::Drop) return ++g.c.policy_drop, false;
  // A cut keeps what an address body's message cannot be without (kept_header).
  // A fragment that reaches here alone (its datagram could not be made
  // whole) is snapped instead: cut, it would be a fragment without its data
  // or with a length no fragment may have; snapped, it keeps its lengths
  // and the record ends where its payload begins.
  if (r == ActResult::Cut && (d.flags & kFlagFragment)) [[unlikely]]
    snap_at_ = std::min(snap_at_, d.payload_off);
  else if (r == ActResult::Cut)
    g.cut.at = d.payload_off + (d.flags & (kFlagAddrBody | kFlagIcmpError) ? kept_header(d, g.pl, g.plen) : 0);
  else if (actions_[prule]->modifies && g.plen) g.changed = true;
  if (actions_[prule]->snaps) snap_at_ = std::min(snap_at_, d.payload_off);
  return true;
}

// The packet's addresses the policy mapped, written as text in the payload
// it keeps (addr_text.h). To the end of what was captured: bytes past the
// transport's length (a short UDP length, a trailer) are delivered too, and
// so is what follows the last header a malformed packet decoded to, when no
// rule needed it cut.
void ProgramInstance::addr_text(GenPacket& g) {
  const Decoded& d = g.d;
  // Never the header's own addresses (a malformed packet's good part may
  // end inside them): the mapped ones are what the search writes from.
  const uint32_t text_from = std::max(d.status == DecodeStatus::Ok ? d.payload_off : std::min(d.good_until, g.cap),
                                      std::max(g.so, g.dof) + g.alen);
  if (g.cap <= text_from + 1) return;
  void (*before)(void*) = [](void* t) { static_cast<GenPacket*>(t)->take_sum(); };
  const uint8_t* olds[2];
  const uint8_t* news[2];
  unsigned k = 0;
  for (int i = 0; i < 2; ++i) {
    const uint8_t* old_a = i ? g.old_dst : g.old_src;
    const uint8_t* new_a = g.buf + (i ? g.dof : g.so);
    if (std::memcmp(old_a, new_a, g.alen) != 0) olds[k] = old_a, news[k++] = new_a;
  }
  const bool ok = d.status == DecodeStatus::Ok;  // else no checksum covers these bytes in a way kept
  AddrTextCount n =
      map_addrs_text(g.buf + text_from, g.cap - text_from, olds, news, k, g.alen, ok ? before : nullptr, &g);
  n.mapped += map_addrs_binary(g.buf + text_from, g.cap - text_from, olds, news, k, g.alen, ok ? before : nullptr, &g);
  if (n.mapped | n.zeroed) g.changed = g.changed || ok, g.c.addr_text += n.mapped, g.c.addr_text_zeroed += n.zeroed;
}

// What this consumer rewrote anywhere recently, found again in the payload
// it keeps (echo.h), from where addr_text starts to the end of what is kept.
// The fields parsed in this packet that a rule names are not searched:
// their own rules decided them (a name z-anonymity releases in its field
// stays released there, whatever the table holds). A field no rule names
// (a URI under ids, a DNS name a device's host name repeats) is kept
// payload like any other: a cookie value copied into it is found there.
// An occurrence of no field (an address rewritten by its role) was decided
// by the role's rule.
// A preloaded user's address found before any field recorded its rewrite:
// what the user address rule (Program::echo_preload_addrs) makes of it at
// this packet's time, as a field of the user's would become now.
bool ProgramInstance::echo_map_addr(void* self, const uint8_t* old, uint8_t* out, unsigned alen) {
  auto& I = *static_cast<ProgramInstance*>(self);
  if (!I.echo_ctx_ || I.prog_.user_rule_ < 0 || !I.actions_[I.prog_.user_rule_]) return false;
  ApplyCtx ctx = *I.echo_ctx_;
  ctx.family = alen == 4 ? 4 : 6;
  ctx.is_server = false;
  ctx.client_addr = old;
  ctx.field = l2l4::g_fields.ip_client;
  std::memcpy(out, old, alen);
  return I.actions_[I.prog_.user_rule_]->undecided()->addr(out, ctx) != ActResult::Drop;
}

void ProgramInstance::echo_text(GenPacket& g) {
  const Decoded& d = g.d;
  const PacketMeta& m = g.m;
  const uint32_t from = d.status == DecodeStatus::Ok ? d.payload_off : std::min(d.good_until, g.cap);
  const uint32_t to = std::min(g.cap, snap_at_);
  if (to < from + 4) return;
  echo_keep_.clear();
  auto keep = [&](int64_t a, int64_t b) {  // payload offsets
    a = std::max<int64_t>(a + d.payload_off, from), b = std::min<int64_t>(b + d.payload_off, to);
    if (a < b) echo_keep_.push_back({uint32_t(a - from), uint32_t(b - from)});
  };
  if ((m.l7 == L7State::Parsed || m.l7 == L7State::Stream) && m.parse) {
    // A segment of a reassembled header: the parse's offsets are the
    // stream's, this segment starting at seg_off.
    const int64_t base = m.l7 == L7State::Stream ? -int64_t(m.stream->seg_off) : 0;
    const ProtoOccs& O = *m.parse->occs;
    for (uint32_t i = 0; i < O.n; ++i)
      if (O.occ[i].kind != OccKind::Payload &&
          (O.occ[i].field >= prog_.field_rules_.size() || !prog_.field_rules_[O.occ[i].field].empty()))
        keep(base + O.occ[i].off, base + O.occ[i].off + O.occ[i].len);
  }
  for (const auto& [a, b] : echo_parsed_) keep(int64_t(a) - d.payload_off, int64_t(b) - d.payload_off);
  void (*before)(void*) = [](void* t) { static_cast<GenPacket*>(t)->take_sum(); };
  const bool ok = d.status == DecodeStatus::Ok;
  ApplyCtx ctx = packet_ctx(d, m, g.c);
  echo_ctx_ = &ctx;
  const EchoCount n = echo_->scan(g.buf + from, to - from, echo_keep_.data(), unsigned(echo_keep_.size()),
                                  ok ? before : nullptr, &g);
  echo_ctx_ = nullptr;
  if (n.mapped | n.filled) g.changed = g.changed || ok, g.c.echoes += n.mapped, g.c.echoes_filled += n.filled;
}

// A datagram the shortcut takes when `app` is its application.
bool ProgramInstance::shortcut_datagram(const Decoded& d, const PacketMeta& m, uint8_t app) {
  return m.app == app && app && m.l7 == L7State::Parsed && d.l4_proto == kProtoUdp && d.status == DecodeStatus::Ok &&
         !(d.flags & (kFlagTunnel | kFlagIcmpError | kFlagLaterFragment));
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
  if (echo_) echo_parsed_.clear();
  const dsl::Policy& pol = *P.policy_;
  GenPacket g{buf, cap, wire, d, m, c, !kL7Only && P.protects_addresses_};
  ApplyCtx ctx = packet_ctx(d, m, c);

  // Flow and roles.
  g.client_is_src = roles(buf, cap, d, m, g.old_addrs, g.alen);
  const bool ip_ok = g.alen != 0;
  if (ip_ok) g.so = d.src_off(), g.dof = d.dst_off();
  g.old_src = g.old_addrs;
  g.old_dst = g.old_addrs + (ip_ok ? g.alen : 16);
  g.both = !kL7Only && ip_ok && both_users(g.old_src, g.old_dst, g.alen, g.client_is_src, m);
  Eval e{&d, &m, &c, &ctx, g.client_is_src, g.client_is_src ? g.old_src : g.old_dst, g.alen, buf};
  if (ip_ok) e.old_src = g.old_src, e.old_dst = g.old_dst;

  // Select, L2 and the layers around the packet.
  if (!kL7Only && pol.select_cond && !eval(*pol.select_cond, e)) return Verdict::Filtered;
  if (!kL7Only && P.bpf_ && !P.bpf_->match(m.orig ? m.orig : buf, cap, wire)) return Verdict::Filtered;
  // A link layer's values before the MAC rules, which see its stand-in
  // Ethernet header (and may rewrite the bytes that name the layer).
  if ((d.flags & kFlagLink) && !link_rules(g, e)) [[unlikely]]
    return Verdict::Drop;
  if (!kL7Only && !l2_rules(g, e, ctx)) return Verdict::Drop;

  // Decode errors.
  g.cut.snap = pol.on_error == dsl::Policy::OnError::Snap;
  g.cut.drop = pol.on_error == dsl::Policy::OnError::Drop;
  if ((d.flags & kFlagLink) && d.status == DecodeStatus::NotIp) return link_body<kL7Only>(g, e, ctx);
  if (d.status == DecodeStatus::NotIp || !d.has_ip() || d.ip_version == 0 || !ip_ok) return undecoded(g);
  if ((d.flags & kFlagV6Routing) && g.protects_addr && v6_path_route(buf, d)) {
    // A routing header listing a path: its addresses would each need the
    // rewrite of a hop no flow gives a role; no consumer has asked for it,
    // so such packets are not forwarded, or (on_error = snap) end after
    // the fixed header.
    if (!g.cut.snap) return ++c.err_drop, Verdict::Drop;
    g.error(d.l3_off + 40, c.err_cut);
  }

  // The flow's decision. With both ends users there is no server to count
  // users of: observing the guessed one would let a user's address reach z
  // by its peers.
  const uint8_t* client_clear = g.client_is_src ? g.old_src : g.old_dst;
  const uint8_t* server_clear = g.client_is_src ? g.old_dst : g.old_src;
  if (!kL7Only && !g.both && !P.zslot_rule_.empty() && m.flow) decide_flow(server_clear, client_clear, g.alen, m, c);
  ctx.family = d.ip_version;
  ctx.client_addr = client_clear;
  if constexpr (kL7Only) {
    Verdict v;
    if (l7_shortcut(g, e, v)) return v;
  }

  // Addresses, then what carries addresses apart from the header.
  if (!kL7Only && !addr_rules(g, e, ctx)) return Verdict::Drop;
  if ((d.flags & kFlagV6Routing) && g.protects_addr && !mobile_addrs(g, e)) [[unlikely]]
    return Verdict::Drop;
  if (echo_) {
    // An address kept in its header releases what only z-anonymity hid.
    if (g.addr_changed || echo_->has_z())
      for (int pos = 0; pos < 2; ++pos) {
        const int r = g.pos_rule[pos];
        echo_->addr(pos ? g.old_dst : g.old_src, buf + (pos ? g.dof : g.so), g.alen, r >= 0 && P.plans_[r]->zslot >= 0);
      }
  }
  const uint32_t pend = std::min<uint64_t>(uint64_t(d.payload_off) + d.payload_len, cap);
  g.plen = pend > d.payload_off ? pend - d.payload_off : 0;
  g.slen = payload_sum_len(buf, d, g.plen);
  g.pl = buf + d.payload_off;
  if (!opaque_and_bodies(g, e, ctx)) return Verdict::Drop;

  // Payload: application fields, the protocol's payload field, the payload
  // rule, the addresses written as text.
  if (!l7_and_body(g, e)) return Verdict::Drop;
  if (!payload_rule<kL7Only>(g, e, ctx)) return Verdict::Drop;
  if (g.addr_changed && P.addr_text_ && g.cut.none()) addr_text(g);
  // Not in a datagram the shortcut takes (a DNS message: its names are in
  // wire form, its addresses in the fields the plugin rewrites), so that
  // the shortcut and these steps give the same bytes.
  if (echo_ && g.cut.none() && !(kL7Only && shortcut_datagram(d, m, span_app_))) echo_text(g);
  const uint16_t new_sum = g.changed && g.sum_taken ? csum_sum({g.pl, g.slen}) : g.old_sum;

  // Lengths and checksums.
  Rewritten rw;
  rw.old = g.old_addrs;
  rw.addr_changed = g.addr_changed;
  rw.cut_at = g.cut.at;
  rw.whole_datagram = m.whole_datagram;
  if (g.cut.snap && !g.cut.none()) {
    // The zeros make the checksums independent of the bytes removed.
    if (g.cut.at < cap) {
      const uint32_t end = l4_cover_end(buf, cap, d);
      if (g.cut.at < end && g.cut.at >= d.l4_off) {
        rw.zeroed_at = g.cut.at;
        rw.zeroed_sum = csum_sum({buf + g.cut.at, end - g.cut.at});
      }
      std::memset(buf + g.cut.at, 0, cap - g.cut.at);
    }
    snap_at_ = std::min(snap_at_, g.cut.at);
    rw.cut_at = UINT32_MAX;
    rw.full_sum = true;
  }
  rw.payload_changed = g.changed && g.sum_taken && new_sum != g.old_sum;
  rw.old_sum = g.old_sum;
  rw.new_sum = new_sum;
  rw.spans = g.l7_sums;
  const Verdict v = fix_lengths_checksums<false>(buf, cap, wire, d, rw);
  if (g.home_sum) [[unlikely]] mobile_sum(g);
  return v;
}

}  // namespace amon
