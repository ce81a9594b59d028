// The header path: process_hdr and the header kernels compiled per policy
// shape, for header-only policies on plain TCP/UDP/ICMP packets.
#include "fixup.h"

namespace amon {

namespace {
// The general path's step for mapped addresses written as text in the
// kept payload (addr_text.h), for the header paths: `old_sum`/`new_sum`
// and `payload_changed` as finish_hdr takes them (old_sum is already the
// original payload's when payload_changed is set), over the `slen` bytes
// at `pl` the L4 checksum covers (payload_sum_len). `memo`: the packet's
// shared scan, for a payload still as it arrived; the first consumer to get
// here fills it, the others only write.
[[gnu::always_inline]] inline void hdr_addr_text(const uint8_t* buf, uint32_t cap, const Decoded& d, const uint8_t* old,
                                                 uint8_t* pl, uint32_t slen, bool& payload_changed, uint16_t& old_sum,
                                                 uint16_t& new_sum, ConsumerCounters& c, AddrTextMemo* memo) {
  // To the end of what was captured: bytes past the transport's length
  // (a short UDP length, a trailer) are delivered too.
  const uint32_t scan = cap > d.payload_off ? cap - d.payload_off : 0;
  if (scan < 2) return;
  const uint32_t alen = d.ip_version == 4 ? 4 : 16;
  struct Sum { uint8_t* pl; uint32_t slen; bool taken; uint16_t* old_sum; } s{pl, slen, payload_changed, &old_sum};
  auto before = [](void* t) {
    auto& x = *static_cast<Sum*>(t);
    if (!x.taken) *x.old_sum = csum_sum({x.pl, x.slen}), x.taken = true;
  };
  // The consumer's mapping of each address; null where it left it as it was.
  const uint8_t* mapped[2];
  for (int i = 0; i < 2; ++i) {
    const uint8_t* new_a = buf + (i ? d.dst_off() : d.src_off());
    mapped[i] = std::memcmp(old + i * alen, new_a, alen) != 0 ? new_a : nullptr;
  }
  const uint8_t* olds[2];
  const uint8_t* news[2];
  unsigned k = 0;
  for (int i = 0; i < 2; ++i)
    if (mapped[i]) olds[k] = old + i * alen, news[k++] = mapped[i];
  AddrTextCount n;
  if (memo && memo->scanned != scan) find_addrs_text(pl, scan, old, old + alen, alen, *memo);
  if (memo && !memo->overflow) n = apply_addrs_text(pl, *memo, mapped[0], mapped[1], alen, before, &s);
  else n = map_addrs_text(pl, scan, olds, news, k, alen, before, &s);
  // And in binary, as the general path maps them.
  n.mapped += map_addrs_binary(pl, scan, olds, news, k, alen, before, &s);
  if (!(n.mapped | n.zeroed)) return;
  c.addr_text += n.mapped, c.addr_text_zeroed += n.zeroed;
  if (!s.taken) return;  // unreachable: a change takes the sum first
  new_sum = slen ? csum_sum({pl, slen}) : old_sum;
  payload_changed = new_sum != old_sum;
}

// The end of a header rewrite (process_hdr and the kernels): the general
// path's fix-up of lengths and checksums for the packets hdr_packet() holds
// for, a cut being at the payload.
[[gnu::always_inline]] inline Verdict finish_hdr(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                                 const uint8_t* old, bool addr_changed, bool cut_wanted,
                                                 bool payload_changed, uint16_t old_sum, uint16_t new_sum,
                                                 const uint8_t* orig, bool whole) {
  Rewritten r;
  r.orig = orig;
  r.whole_datagram = whole;
  r.old = old;
  r.addr_changed = addr_changed;
  r.cut_at = cut_wanted ? d.payload_off : UINT32_MAX;
  r.payload_changed = payload_changed;
  r.old_sum = old_sum;
  r.new_sum = new_sum;
  return fix_lengths_checksums<true>(buf, cap, wire, d, r);
}
}  // namespace

// The general path below, specialised: every choice that depends only on
// the policy was made by Program, and the packet is known to be a plain
// TCP/UDP/ICMP packet with its headers captured, so none of the fail-closed
// branches (fragments, tunnels, ICMP quotes, decode errors, application
// fields) can apply. Its output must stay byte-identical to the general
// path's: test_hdr_fast compares the two on every shared capture.
Verdict ProgramInstance::hdr_path(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                  const PacketMeta& m, ConsumerCounters& c, bool decide_both) {
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
  const bool both = decide_both && both_users(old, old + alen, alen, client_is_src, m);
  bool addr_changed = false;
  for (int pos = 0; pos < 2; ++pos) {
    const bool is_src = pos == 0, is_client = both || is_src == client_is_src;
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
  const uint32_t slen = payload_sum_len(buf, d, plen);
  uint8_t* const pl = buf + d.payload_off;
  bool cut = false, payload_changed = false;
  uint16_t old_sum = 0, new_sum = 0;
  if (P.pay_rule_ >= 0) {
    if (P.pay_counts_) ++hits[P.pay_rule_];
    RtAction& a = *actions_[P.pay_rule_];
    ctx.field = F.payload;
    const bool summed = a.modifies && !a.cuts && plen;
    if (summed) old_sum = csum_sum({pl, slen});
    const ActResult r = a.bytes(pl, plen, ctx);
    if (r == ActResult::Drop) return ++c.policy_drop, Verdict::Drop;
    if (r == ActResult::Cut) {
      cut = true;
    } else if (summed) {
      new_sum = csum_sum({pl, slen});
      payload_changed = new_sum != old_sum;
    }
  }

  // A payload rule may have changed the bytes: the shared scan only without one.
  if (addr_changed && P.addr_text_ && !cut)
    hdr_addr_text(buf, cap, d, old, pl, slen, payload_changed, old_sum, new_sum, c, P.pay_rule_ < 0 ? m.text : nullptr);
  return finish_hdr(buf, cap, wire, d, old, addr_changed, cut, payload_changed, old_sum, new_sum, m.orig, m.whole_datagram);
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
  hk_ = HdrKernel{};
  if (!P.hdr_only_) return;
  // The kernel counts every rule's hit up front: no rule may stop the
  // packet half-way (drop()).
  for (int r : {P.mac_rule_[0], P.mac_rule_[1], P.addr_rule_[0][0], P.addr_rule_[0][1], P.addr_rule_[1][0],
                P.addr_rule_[1][1], P.pay_rule_})
    if (r >= 0 && P.plans_[r]->call->desc->drops()) return;
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
  k.text = k.addr_mod && P.addr_text_;
  uint8_t pop = kPNone;
  if (P.pay_rule_ >= 0) {
    if (P.pay_counts_) k.hits[k.nhits++] = uint16_t(P.pay_rule_);
    RtAction* a = actions_[P.pay_rule_].get();
    if (P.plans_[P.pay_rule_]->call->desc->kind == ActionKind::Cut) pop = kPCut;
    else if (a->snaps) return;  // the general path ends the record
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
  // Crypto-PAn and prefix() work on the address alone and the checksums
  // are updated, not recomputed, so such a kernel reads and writes headers
  // only; a cut recomputes the L4 checksum over what is left, the headers.
  if (op[0] != kAVirtual && op[1] != kAVirtual)
    k.payload = pop == kPNone && !k.text ? kKeepsPayload : pop == kPCut ? kCutsPayload : 0;
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

bool ProgramInstance::both_inside(const uint8_t* buf, const Decoded& d) const {
  return both_clients(*prog_.policy_, d.ip_version, buf + d.src_off(), buf + d.dst_off(), false);
}

template <uint8_t X, uint8_t Y, uint8_t PO>
Verdict ProgramInstance::hdr_kernel(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d,
                                    const PacketMeta& m, ConsumerCounters& c) {
  count_hdr_hits(c.rule_hits, prog_.plans_.size(), hk_.hits, hk_.nhits, 1);
  return hdr_apply<X, Y, PO>(buf, cap, wire, d, m, c);
}

template <uint8_t X, uint8_t Y, uint8_t PO>
void ProgramInstance::hdr_kernel_burst(uint8_t* const* bufs, uint32_t* caps, uint32_t* wires, const Decoded* ds,
                                       const PacketMeta* ms, Verdict* verdicts, unsigned n, ConsumerCounters& c) {
  // Crypto-PAn cache sets of the burst's IPv4 addresses, fetched before the
  // first packet needs its own: under a flood of spoofed sources each is a
  // miss, which the burst then takes once in parallel rather than in turn.
  // Both ends (roles are decided per packet); a flow whose memo holds the
  // client's result needs no cache.
  if constexpr (X == kACryptoPan || Y == kACryptoPan) {
    for (unsigned i = 0; i < n; ++i) {
      // Only a packet the kernel may take: its addresses were captured.
      if (ds[i].ip_version != 4 || !hdr_packet(ds[i], caps[i])) continue;
      const FlowState* fs = ms[i].flow;
      const bool memo = hk_.memo_id && fs && fs->memo_owner == hk_.memo_id;
      const RtAction* a = X == kACryptoPan && !memo ? hk_.act[0] : Y == kACryptoPan ? hk_.act[1] : nullptr;
      if (!a) continue;
      static_cast<const rt::CryptoPan*>(a)->prefetch_v4(bufs[i] + ds[i].src_off());
      static_cast<const rt::CryptoPan*>(a)->prefetch_v4(bufs[i] + ds[i].dst_off());
    }
  }
  unsigned nk = 0;
  for (unsigned i = 0; i < n; ++i) {
    const bool hdr = hdr_packet(ds[i], caps[i]);
    if (hdr && kernel_roles(bufs[i], ds[i], ms[i])) [[likely]] {
      verdicts[i] = hdr_apply<X, Y, PO>(bufs[i], caps[i], wires[i], ds[i], ms[i], c);
      ++nk;
    } else {
      verdicts[i] = hdr ? process_hdr_users(bufs[i], caps[i], wires[i], ds[i], ms[i], c)
                        : process_general(bufs[i], caps[i], wires[i], ds[i], ms[i], c);
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
  auto apply = [&]<uint8_t Op>(RtAction* a, uint8_t* at, bool is_src) __attribute__((always_inline)) {
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
  // Both lambdas inlined: left to the inliner, a kernel grown by a few
  // instructions elsewhere called them (some 80 instructions a packet more).
  auto apply_x = [&](uint8_t* at, bool is_src) __attribute__((always_inline)) {
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
    const uint32_t slen = payload_sum_len(buf, d, plen);
    uint8_t* const pl = buf + d.payload_off;
    if (plen) old_sum = csum_sum({pl, slen});
    ctx.field = F.payload;
    k.pay->bytes(pl, plen, ctx);  // never drop(), never cuts: choose_hdr_kernel
    if (plen) {
      new_sum = csum_sum({pl, slen});
      payload_changed = new_sum != old_sum;
    }
    // The payload action may have changed the bytes: no shared scan.
    if (k.text) hdr_addr_text(buf, cap, d, old, pl, slen, payload_changed, old_sum, new_sum, c, nullptr);
  } else if constexpr (PO == kPNone) {
    if (k.text) {
      const uint32_t pend = uint32_t(std::min<uint64_t>(uint64_t(d.payload_off) + d.payload_len, cap));
      const uint32_t plen = pend > d.payload_off ? pend - d.payload_off : 0;
      hdr_addr_text(buf, cap, d, old, buf + d.payload_off, payload_sum_len(buf, d, plen), payload_changed, old_sum,
                    new_sum, c, m.text);
    }
  }

  return finish_hdr(buf, cap, wire, d, old, addr_changed, PO == kPCut, payload_changed, old_sum, new_sum, m.orig, m.whole_datagram);
}

}  // namespace amon
