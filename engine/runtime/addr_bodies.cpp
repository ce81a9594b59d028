// The bodies that carry addresses apart from the packet's header, on the
// general path: an ICMP error's quoted header, neighbour discovery (RFC
// 4861) and RIP/RIPng route entries. Each address in them takes the
// mapping the packet's own would; what cannot be mapped is zeroed; what
// cannot be parsed is cut.
#include <algorithm>
#include "runtime_impl.h"

namespace amon {

namespace {
// Neighbour discovery's fixed part after the first 8 bytes, by type: an
// RA's limits and timers (8), an NS/NA target (16), a Redirect's target and
// destination (32), nothing for an RS.
uint32_t nd_fixed_len(uint8_t type) {
  return type == 134 ? 8 : type == 135 || type == 136 ? 16 : type == 137 ? 32 : 0;
}
}  // namespace

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
  // memmove: in a malformed packet the body may overlap the header it maps from.
  if (bits >= alen * 8 && std::memcmp(a, nm.old_src, alen) == 0) return std::memmove(a, nm.new_src, alen), true;
  if (bits >= alen * 8 && std::memcmp(a, nm.old_dst, alen) == 0) return std::memmove(a, nm.new_dst, alen), true;
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
  const uint32_t fixed = nd_fixed_len(type);
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


// An ICMP error quotes the offending datagram's header: its addresses get
// the same rewrite as the flow's (an address of this packet maps the same
// way, another by its role), and what follows the quoted transport
// header is cut when names could be in it. false: drop (counted).
bool ProgramInstance::icmp_quote(GenPacket& g, Eval& e) {
  const Program& P = prog_;
  const Decoded& d = g.d;
  const uint32_t q = d.payload_off;
  uint8_t* const qp = g.pl;
  const uint32_t qlen = g.plen;
  const uint8_t iv = qlen ? qp[0] >> 4 : 0;
  const uint32_t ihl = iv == 4 ? (qp[0] & 0xf) * 4u : iv == 6 ? 40u : 0;
  const uint32_t ial = iv == 4 ? 4 : 16, isrc = iv == 4 ? 12 : 8, idst = iv == 4 ? 16 : 24;
  // A redirect (ICMPv4 type 5) names the gateway to use instead, a router
  // of the link of the host it tells: mapped by its role as a quoted far
  // end is, the host standing for the other end (outside the quote: the
  // ICMP checksum follows it here).
  if (g.protects_addr && d.ip_version == 4 && (d.sport >> 8) == 5 && d.l4_off + 8 <= g.cap) {
    uint8_t* const icmp = g.buf + d.l4_off;
    uint8_t gw[4];
    std::memcpy(gw, icmp + 4, 4);
    bool to_user = false;  // the host told to use it is inside `clients`: it is that user's router
    for (const auto& cidr : P.policy_->clients) to_user = to_user || cidr.contains(4, g.old_dst);
    if (!apply_role_addr(icmp + 4, 4, e, !to_user)) std::memset(icmp + 4, 0, 4);
    wr16(icmp + 2, csum_replace(rd16(icmp + 2), {gw, 4}, {icmp + 4, 4}));
  }
  if (ihl < 20 || qlen < ihl) return !g.error(d.payload_off, g.c.icmp_quote_cut);
  g.body_sum();
  uint8_t before[2][16];
  std::memcpy(before[0], qp + isrc, ial);
  std::memcpy(before[1], qp + idst, ial);
  const auto& F = l2l4::g_fields;
  const bool by_role = !P.field_rules_[F.ip_client].empty() || !P.field_rules_[F.ip_server].empty();
  for (uint32_t off : {isrc, idst}) {
    uint8_t* a = qp + off;
    if (iv == d.ip_version && std::memcmp(a, g.old_src, ial) == 0) {
      std::memcpy(a, g.buf + g.so, ial);
    } else if (iv == d.ip_version && std::memcmp(a, g.old_dst, ial) == 0) {
      std::memcpy(a, g.buf + g.dof, ial);
    } else if (g.protects_addr) {
      // Another address (the quoted datagram's far end) takes the rule of
      // its role, as in the IP headers of its own flow: ip.client's inside
      // `clients` or for a user; ip.server's when the quoted datagram's
      // other end is inside `clients` (that end is then its flow's client);
      // else nothing here tells its role, and it takes ip.client's (fail
      // closed, as a flow without evidence). Not the rule of the outer
      // position it pairs with: a router inside `clients` redirecting a
      // user's packet to a kept server would give the server a pseudonym
      // in the quote beside its clear address in its flow.
      if (by_role) {
        const uint8_t* other = before[off == isrc ? 1 : 0];
        bool other_inside = false;
        for (const auto& cidr : P.policy_->clients) other_inside = other_inside || cidr.contains(iv, other);
        if (!apply_role_addr(a, iv, e, !other_inside)) std::memset(a, 0, ial);
        continue;
      }
      // Only positional rules (ip.src, ip.dst): the quoted source
      // travelled to where this error goes, the quoted destination away
      // from where it comes from, so each takes the rule of the outer
      // position it pairs with, when that rule maps any address alone (a
      // key or a prefix); else it is zeroed.
      const int r = g.pos_rule[off == isrc ? 1 : 0];
      RtAction* act = r >= 0 ? actions_[r].get() : nullptr;
      if (act && !act->modifies) {
      } else if (act && (act->kind == RtKind::CryptoPan || act->kind == RtKind::Prefix)) {
        e.ctx->family = iv;
        if (act->addr(a, *e.ctx) == ActResult::Drop) std::memset(a, 0, ial);
        e.ctx->family = d.ip_version;
      } else {
        std::memset(a, 0, ial);
      }
    }
  }
  // The quoted UDP or TCP header's checksum covers the quoted addresses
  // (its pseudo-header): follow them, as the original sender's would have
  // (a quote of the whole segment is verifiable).
  const uint8_t inner_proto = iv == 4 ? qp[9] : qp[6];
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
  return !(P.l7_protect_ && qlen > ihl + 8 && g.error(q + ihl + 8, g.c.icmp_quote_cut));
}

// RIPng (RFC 2080) lists routes: each entry's prefix (and a next hop's
// address) maps as an address of the link's hosts does in neighbour
// discovery. RIP (RFC 2453, and version 1) over IPv4 the same: each
// entry's address (a prefix of its mask's length; version 1 has none: the
// whole address) and next hop; an authentication entry (address family
// 0xffff) carries a password or digest, zeroed. A message that is not
// whole entries is cut after its last. false: drop (counted).
bool ProgramInstance::rip_body(GenPacket& g, bool ripng, Eval& e, ApplyCtx& ctx) {
  g.body_sum();
  NdMap nm{g.old_src, g.old_dst, g.buf + g.so, g.buf + g.dof, g.pos_rule, g.both, g.client_is_src, g.protects_addr};
  uint32_t o = 4;
  for (; o + 20 <= g.plen; o += 20) {
    uint8_t* const en = g.pl + o;
    if (ripng) {
      const bool next_hop = en[19] == 0xff;
      nd_addr(en, next_hop ? 128u : std::min<unsigned>(en[18], 128), nm, e, ctx);
    } else if (rd16(en) == 0xffff) {
      std::memset(en + 4, 0, 16);
      ++g.c.nd_zeroed;
    } else {
      const uint32_t mask = uint32_t(rd16(en + 8)) << 16 | rd16(en + 10);
      nd_addr(en + 4, mask ? unsigned(std::popcount(mask)) : 32u, nm, e, ctx, 4);
      if (rd16(en + 12) | rd16(en + 14)) nd_addr(en + 12, 32, nm, e, ctx, 4);
    }
  }
  return !(o < g.plen && g.error(g.d.payload_off + o, g.c.err_cut));
}

// Multipath TCP's ADD_ADDR (each_add_addr, plugins/l2l4): the address another
// subflow may use is another address of the option's sender, taking the
// treatment the same address takes in a header (apply_role_addr: one
// address, one treatment): the sender's role in this flow (the receiver's
// for an echo), or ip.client's rule inside `clients`. Version 1's truncated HMAC is zeroed: it is keyed by the
// keys MP_CAPABLE sent in clear, so left as it came it would confirm a
// guess of the real address; it cannot be computed again without
// following every connection's keys, and the receiver of a capture does
// not check it. An option of no known shape has its bytes after the
// subtype zeroed (fail closed). The TCP checksum follows the options.
namespace {
// Where a TCP header's options (`n` bytes) stop being options: past the
// End of Option List, or at an option whose length cannot be. What lies
// after is padding, zero by RFC 9293, and no field: it may be anything.
uint32_t tcp_options_end(const uint8_t* o, uint32_t n) {
  for (uint32_t i = 0; i < n;) {
    if (o[i] == 0) return i + 1;
    if (o[i] == 1) {
      ++i;
      continue;
    }
    if (i + 1 >= n || o[i + 1] < 2 || o[i + 1] > n - i) return i;
    i += o[i + 1];
  }
  return n;
}
}  // namespace

void ProgramInstance::mptcp_addrs(GenPacket& g, Eval& e) {
  const Decoded& d = g.d;
  if (d.l4_hdr_len <= 20 || d.l4_off + d.l4_hdr_len > g.cap) return;
  uint8_t* const tcp = g.buf + d.l4_off;
  uint8_t* const opts = tcp + 20;
  const uint32_t n = d.l4_hdr_len - 20u;
  uint8_t before[40];
  std::memcpy(before, opts, n);
  // Bytes past the options: zeroed (the decoder flags the header when any
  // is not zero).
  if (const uint32_t end = tcp_options_end(opts, n); end < n) std::memset(opts + end, 0, n - end);
  each_add_addr(opts, n, [&](const AddAddr& a) {
    uint8_t* const o = opts + a.off;
    if (!a.family) {
      if (a.len > 3) std::memset(o + 3, 0, a.len - 3u);
      return;
    }
    if (!apply_role_addr(o + a.addr, a.family, e, g.both || g.client_is_src != a.echo)) std::memset(o + a.addr, 0, a.family == 4 ? 4 : 16);
    if (a.hmac) std::memset(o + a.hmac, 0, 8);
  });
  if (std::memcmp(before, opts, n) != 0) wr16(tcp + 16, csum_replace(rd16(tcp + 16), {before, n}, {opts, n}));
}

bool ProgramInstance::addr_bodies(GenPacket& g, Eval& e, ApplyCtx& ctx) {
  const Program& P = prog_;
  const auto& F = l2l4::g_fields;
  const Decoded& d = g.d;
  if (d.status != DecodeStatus::Ok) return true;
  if ((g.protects_addr || P.l7_protect_) && (d.flags & kFlagIcmpError) && !icmp_quote(g, e)) return false;
  if (!(d.flags & kFlagAddrBody)) return true;
  // IPv4 options (RFC 791, the decoder flags every header that has them):
  // the addresses Record Route and Timestamp (flags 1 and 3) record, a
  // source route's hops and final destination (LSRR, SSRR) and
  // Traceroute's originator (RFC 1393) are addresses of the network, each
  // taking the rule of its role as in an IP header (the packet's own
  // address exactly its header's rewrite; an all-zero slot, not yet
  // filled, stays). Options known to hold numbers only stay; any other
  // option's data, and the bytes past the option list, are zeroed. The
  // header checksum follows. (A source route's final destination is the
  // one the transport checksum covers; that checksum is not taken again
  // over its rewrite: source-routed datagrams are refused by routers for
  // decades.)
  if (g.protects_addr && d.ip_version == 4 && d.l3_hdr_len > 20 && d.l3_off + d.l3_hdr_len <= g.cap) {
    uint8_t* const ip = g.buf + d.l3_off;
    uint8_t* const o = ip + 20;
    const uint32_t n = d.l3_hdr_len - 20u;
    uint8_t before[40];
    std::memcpy(before, o, n);
    auto map = [&](uint8_t* a) {
      return std::all_of(a, a + 4, [](uint8_t b) { return b == 0; }) || apply_role_addr(a, 4, e);
    };
    bool ok = true;
    for (uint32_t i = 0; ok && i < n;) {
      const uint8_t t = o[i];
      if (t == 0) {  // End of Option List: padding after it
        std::memset(o + i + 1, 0, n - i - 1);
        break;
      }
      if (t == 1) {
        ++i;
        continue;
      }
      if (i + 1 >= n || o[i + 1] < 2 || o[i + 1] > n - i) {
        std::memset(o + i, 0, n - i);
        break;
      }
      const uint32_t len = o[i + 1];
      switch (t) {
        case 7: case 131: case 137:  // Record Route, LSRR, SSRR: a pointer, then addresses
          for (uint32_t k = 3; ok && k + 4 <= len; k += 4) ok = map(o + i + k);
          if (len < 3 || (len - 3) % 4) std::memset(o + i + 2, 0, len - 2);
          break;
        case 68: {  // Timestamp: pointer, overflow and flag, then entries
          const uint8_t flag = len >= 4 ? o[i + 3] & 0xf : 0xf;
          if (flag == 1 || flag == 3) {
            for (uint32_t k = 4; ok && k + 8 <= len; k += 8) ok = map(o + i + k);
            if ((len - 4) % 8) std::memset(o + i + 4, 0, len - 4);
          } else if (flag != 0) {
            std::memset(o + i + 2, 0, len - 2);
          }
          break;
        }
        case 82:  // Traceroute: ID, hop counts, the originator's address
          if (len == 12) ok = map(o + i + 8);
          else std::memset(o + i + 2, 0, len - 2);
          break;
        case 130: case 133: case 134: case 136: case 148:  // security labels, stream ID, router alert
        case 11: case 12: case 25:                           // MTU probe and reply, Quick-Start
          break;
        default:
          std::memset(o + i + 2, 0, len - 2);
      }
      i += len;
    }
    if (std::memcmp(before, o, n) != 0) wr16(ip + 10, csum_replace(rd16(ip + 10), {before, n}, {o, n}));
    if (!ok) return ++g.c.policy_drop, false;
  }
  // Neighbour discovery names addresses and MACs in its body: the target
  // (NS, NA, Redirect), a Redirect's destination, link-layer address
  // options, prefixes and DNS server addresses in options (nd_body); a
  // body that does not parse is cut where it stops parsing.
  if (d.l4_proto == kProtoIcmpv6 &&
      (g.protects_addr || !P.field_rules_[F.eth_src].empty() || !P.field_rules_[F.eth_dst].empty())) {
    g.body_sum();
    NdMap nm{g.old_src, g.old_dst, g.buf + g.so, g.buf + g.dof, g.pos_rule, g.both, g.client_is_src, g.protects_addr};
    const uint32_t bad = nd_body(g.buf, d, g.plen, nm, e, ctx);
    if (bad != UINT32_MAX && g.error(d.payload_off + bad, g.c.err_cut)) return false;
  }
  if (g.protects_addr && d.l4_proto == kProtoTcp && !(d.flags & kFlagLaterFragment)) mptcp_addrs(g, e);
  if (g.protects_addr && d.l4_proto == kProtoUdp && !(d.flags & kFlagLaterFragment)) {
    const RouteList rl = route_list(d.ip_version, d.sport);
    if (rl != RouteList::None && !rip_body(g, rl == RouteList::Ripng, e, ctx)) return false;
  }
  return true;
}

// What a cut of the payload keeps of a message the packet's header rules
// have mapped: neighbour discovery's fixed part (an NS/NA target, a
// Redirect's target and destination, an RA's limits and timers) is its
// header, without which the message is malformed (nd_body has mapped its
// addresses; the options go); an ICMP error's quote is the header of the
// datagram it is about, its IP header and 8 bytes of its transport header
// (RFC 792), mapped by icmp_quote: without them the error says nothing and
// is malformed; what follows them is the datagram's payload.
uint32_t kept_header(const Decoded& d, const uint8_t* pl, uint32_t plen) {
  uint32_t keep = 0;
  if ((d.flags & kFlagAddrBody) && d.l4_proto == kProtoIcmpv6) {
    const uint32_t fixed = nd_fixed_len(uint8_t(d.sport >> 8));
    if (fixed <= plen) keep += fixed;
  }
  if ((d.flags & kFlagIcmpError) && plen) {
    const uint8_t iv = pl[0] >> 4;
    const uint32_t ihl = iv == 4 ? (pl[0] & 0xf) * 4u : iv == 6 ? 40u : 0;
    if (ihl >= 20 && plen >= ihl) keep += std::min(plen, ihl + 8);
  }
  return keep;
}

}  // namespace amon
