// The last step of every rewrite of a packet's own headers: a cut's
// lengths, the IPv4 header checksum (updated for the addresses and the
// length, RFC 1624, never recomputed: a header checksum that was wrong in
// the input stays wrong by as much, evidence an IDS looks for and the mark
// of an offloaded capture), the L4 checksum (recomputed over what a cut
// left, else updated for the addresses, the payload and the spans an L7
// rewrite changed). One function for the general path and the header path;
// kHdr compiles it for the packets the header path takes.
#pragma once

#include "runtime_impl.h"  // checksum.h, bytes.h, csum_update_spans

namespace amon {

// What a consumer's rewrite did to the packet, for fix_lengths_checksums.
struct Rewritten {
  const uint8_t* old = nullptr;  // the clear source then destination addresses, adjacent
  bool addr_changed = false;
  uint32_t cut_at = UINT32_MAX;  // the record ends here (UINT32_MAX: no cut)
  bool full_sum = false;         // the L4 checksum over what is left, zeros included (a snapped cut)
  // The payload's sums before and after its rewrite (old_sum is the
  // original payload's whenever payload_changed is set).
  bool payload_changed = false;
  uint16_t old_sum = 0, new_sum = 0;
  const uint64_t* spans = nullptr;  // an L7 rewrite's span sums (Eval::l7_sums), null: none
  // A snap zeroed the bytes from zeroed_at on: their sum before (l4_seg_end
  // bounds it), so the input's checksum error can still be told.
  uint32_t zeroed_at = UINT32_MAX;
  uint16_t zeroed_sum = 0;
  // The header path: the packet's original bytes (PacketMeta::orig). A
  // consumer whose header kernel cuts the payload may rewrite a copy of the
  // headers alone; the input's checksum is then told from these.
  const uint8_t* orig = nullptr;
  bool whole_datagram = false;  // PacketMeta::whole_datagram: the input's error is not told
};

// Where the L4 segment ends by the IP header's length (0: not known).
[[gnu::always_inline]] inline uint32_t l4_seg_end(const uint8_t* buf, const Decoded& d) {
  const uint8_t* ip = buf + d.l3_off;
  return d.ip_version == 4 ? d.l3_off + rd16(ip + 2) : d.ip_version == 6 ? d.l3_off + 40 + rd16(ip + 4) : 0;
}

// Where the bytes the L4 checksum covers end within `cap` (0: not known):
// the IP payload's end, or a UDP datagram's own where its length stops short.
inline uint32_t l4_cover_end(const uint8_t* buf, uint32_t cap, const Decoded& d) {
  uint32_t end = std::min(cap, l4_seg_end(buf, d));
  if (d.l4_proto == kProtoUdp && d.l4_hdr_len && d.l4_off + 8 <= cap) {
    const uint32_t ue = d.l4_off + rd16(buf + d.l4_off + 4);
    if (ue >= d.l4_off + 8 && ue < end) end = ue;
  }
  return end;
}

// The input's L4 checksum, told before a cut or a snap recomputes it
// (evidence stays evidence: a wrong one must stay wrong by as much, an
// offloaded one stay recognisable). Known only where the whole segment was
// captured and no L7 rewrite changed spans of it (their old bytes are
// gone): one pass over the segment, which the recompute then repeats over
// what is left.
struct InputL4Sum {
  bool known = false;
  bool partial = false;  // the pseudo-header's sum alone (transmit offload left it to the NIC)
  uint16_t err = 0xffff; // the ones' complement sum of pseudo-header and segment: 0xffff when right
};

inline InputL4Sum input_l4_sum(const uint8_t* buf, uint32_t cap, const Decoded& d, const Rewritten& r,
                               uint32_t csum_off) {
  InputL4Sum s;
  uint32_t end = l4_seg_end(buf, d);
  if (!end || end > cap || end < d.l4_off + csum_off + 2 || (r.spans && r.spans[0] != r.spans[1])) return s;
  // A UDP checksum covers the datagram by its own length, which may stop
  // short of the IP payload's end (the bytes after it are no part of it);
  // the rewrite's sums (payload_sum_len, the snap's zeroed_sum) stop there too.
  if (d.l4_proto == kProtoUdp) {
    const uint32_t ulen = rd16(buf + d.l4_off + 4);
    if (ulen < 8 || d.l4_off + ulen > end) return s;
    end = d.l4_off + ulen;
  }
  const bool v4 = d.ip_version == 4;
  const uint8_t* ip = buf + d.l3_off;
  const uint8_t* src = r.addr_changed ? r.old : buf + d.src_off();
  const uint8_t* dst = r.addr_changed ? r.old + (v4 ? 4 : 16) : buf + d.dst_off();
  const uint32_t len = end - d.l4_off;
  uint16_t pseudo = 0;
  if (d.l4_proto != kProtoIcmp)
    pseudo = v4 ? pseudo_sum_v4(src, dst, d.l4_proto, uint16_t(len)) : pseudo_sum_v6(src, dst, d.l4_proto, len);
  (void)ip;
  const uint8_t* l4 = buf + d.l4_off;
  uint16_t sum = csum_sum({l4, len});
  // Back to the input's bytes: the payload before its rewrite, the zeros
  // before the snap.
  if (r.payload_changed) {
    sum = csum_add_at(sum, uint16_t(~r.new_sum), d.payload_off - d.l4_off);
    sum = csum_add_at(sum, r.old_sum, d.payload_off - d.l4_off);
  }
  if (r.zeroed_at < end) sum = csum_add_at(sum, r.zeroed_sum, r.zeroed_at - d.l4_off);
  const uint16_t ck = rd16(l4 + csum_off);
  s.known = true;
  s.err = csum_add(sum, pseudo);
  // A right checksum may equal the pseudo-header's sum too: right wins.
  s.partial = d.l4_proto != kProtoIcmp && ck == pseudo && ck != 0 && s.err != 0xffff;
  return s;
}

// Whether the L4 checksum `ck` (not 0) is a transmit offload's partial, for
// the updates that do not recompute it: a partial is the input's
// pseudo-header sum, moved as a sum when the addresses change and by no
// payload rewrite (the NIC sums the segment). One compare with that sum
// (`addrs`: the input's two addresses' sum, which the address updates take
// too); only where it matches (every packet of an offloaded capture, one in
// 65536 of the others) input_l4_sum's pass tells it from a right checksum
// of the same value (right wins). A match whose segment cannot be summed
// (cut short by the snap length, spans rewritten) is taken as partial.
[[gnu::cold, gnu::noinline]] inline bool l4_partial_confirmed(const uint8_t* buf, uint32_t cap, const Decoded& d,
                                                              const Rewritten& r, uint32_t csum_off) {
  const InputL4Sum s = input_l4_sum(buf, cap, d, r, csum_off);
  return !s.known || s.partial;
}
[[gnu::always_inline]] inline bool l4_partial(const uint8_t* buf, uint32_t cap, const Decoded& d, const Rewritten& r,
                                              uint16_t ck, uint32_t csum_off, uint16_t addrs) {
  // A UDP checksum covers the datagram by its own length.
  const uint32_t len = d.l4_proto == kProtoUdp ? rd16(buf + d.l4_off + 4) : l4_seg_end(buf, d) - d.l4_off;
  const uint16_t pseudo = csum_add(csum_add(addrs, d.l4_proto), csum_add(uint16_t(len), uint16_t(len >> 16)));
  if (ck != pseudo) [[likely]] return false;
  return l4_partial_confirmed(buf, cap, d, r, csum_off);
}

// The recomputed checksum at `at` made as wrong as the input's was, or the
// new pseudo-header's sum where the input's was a transmit offload's.
inline void keep_l4_error(uint8_t* buf, const Decoded& d, const InputL4Sum& s, uint8_t* at, uint32_t new_len, bool udp) {
  if (!s.known) return;
  if (s.partial) {
    const uint8_t* ip = buf + d.l3_off;
    wr16(at, d.ip_version == 4 ? pseudo_sum_v4(ip + 12, ip + 16, d.l4_proto, uint16_t(new_len))
                               : pseudo_sum_v6(ip + 8, ip + 24, d.l4_proto, new_len));
    return;
  }
  if (s.err == 0xffff) return;
  uint16_t ck = csum_add(rd16(at), s.err);
  if (udp && ck == 0) ck = 0xffff;
  wr16(at, ck);
}

// kHdr: the packet is one ProgramInstance::hdr_packet() holds for, and a
// cut is at its payload. The decoder has then checked that the IPv4 header
// is at least 20 bytes and the TCP header at least 20 (UDP and ICMP 8),
// and both are captured, so the general path's bounds tests fall away; and
// the new lengths of a cut are stored after the checksums that cover them
// have been computed with the new values: a 2-byte store read back by a
// wider load cannot be forwarded and stalls.
template <bool kHdr>
[[gnu::always_inline]] inline Verdict fix_lengths_checksums(uint8_t* buf, uint32_t& cap, uint32_t& wire,
                                                            const Decoded& d, const Rewritten& r) {
  const bool v4 = d.ip_version == 4;
  const uint32_t alen = v4 ? 4 : 16, so = d.src_off(), dof = d.dst_off();
  uint8_t* const ip = buf + d.l3_off;
  const bool udp = d.l4_proto == kProtoUdp;
  const uint32_t cut_at = r.cut_at;
  // Told before the lengths change (the input's pseudo-header).
  InputL4Sum in_sum;
  if ((cut_at != UINT32_MAX || r.full_sum) && !r.whole_datagram && d.l4_hdr_len && !(d.flags & (kFlagLaterFragment | kFlagFragment)) &&
      (d.l4_proto == kProtoTcp || udp || d.l4_proto == kProtoIcmp || d.l4_proto == kProtoIcmpv6)) {
    const uint32_t co = udp ? 6 : d.l4_proto == kProtoTcp ? 16 : 2;
    if (!(udp && d.l4_off + 8 <= cap && rd16(buf + d.l4_off + 6) == 0)) {
      // No orig: the caller's buffer is the whole frame (header-only copies
      // are the worker path's, which always says orig).
      if (!kHdr || !r.orig || r.orig == buf) in_sum = input_l4_sum(buf, cap, d, r, co);
      else in_sum = input_l4_sum(r.orig, cap, d, Rewritten{}, co);  // untouched: no change to undo
    }
  }
  bool cut = false;
  bool v4_len = false, udp_len = false;  // kHdr: a length still to store
  bool l3_len_changed = false;           // IPv4: total length old_l3 -> new_l3
  uint16_t new_l3 = 0, new_udp = 0, old_l3 = 0;
  // A cut at the end of the captured bytes still shortens a record the
  // capture had cut short (wire > cap): its lengths must shrink too.
  if (cut_at != UINT32_MAX && (cut_at < cap || (cut_at == cap && wire > cap))) {
    cut = true;
    cap = wire = cut_at;
    if (kHdr || cut_at >= d.l3_off + (v4 ? 20u : 40u)) {
      const uint32_t l3len = cut_at - d.l3_off;
      if (!v4) {
        wr16(ip + 4, uint16_t(l3len - 40));
      } else {
        old_l3 = rd16(ip + 2), new_l3 = uint16_t(l3len), l3_len_changed = true;
        if (kHdr) v4_len = true;
        else wr16(ip + 2, new_l3);
      }
      if (!kHdr && d.pppoe_off) wr16(buf + d.pppoe_off + 4, uint16_t(cut_at - (d.pppoe_off + 6)));
      if (udp && (kHdr || (d.l4_hdr_len && cut_at >= d.l4_off + 8))) {
        if (kHdr) udp_len = true, new_udp = uint16_t(cut_at - d.l4_off);
        else wr16(buf + d.l4_off + 4, uint16_t(cut_at - d.l4_off));
      }
    }
  }

  // The header path's address sums, old and new, for every update below.
  uint16_t os[2] = {0, 0}, ns[2] = {0, 0};
  if (kHdr && r.addr_changed && (v4 || !cut)) {  // a cut IPv6 packet's L4 checksum is recomputed
    os[0] = csum_addr_sum(r.old, v4), os[1] = csum_addr_sum(r.old + alen, v4);
    ns[0] = csum_addr_sum(buf + so, v4), ns[1] = csum_addr_sum(buf + dof, v4);
  }
  if (v4 && (r.addr_changed || l3_len_changed) && (kHdr || (cap >= d.l3_off + d.l3_hdr_len && d.l3_hdr_len >= 20))) {
    // Only the addresses and the total length change in an IPv4 header (its
    // options carry no address a rule rewrites).
    uint16_t ck = rd16(ip + 10);
    if (r.addr_changed) {
      if constexpr (kHdr) {
        ck = csum_replace_sums(ck, os[0], ns[0]);
        ck = csum_replace_sums(ck, os[1], ns[1]);
      } else {
        ck = csum_replace_addr(ck, r.old, buf + so, true);
        ck = csum_replace_addr(ck, r.old + alen, buf + dof, true);
      }
    }
    if (l3_len_changed) {
      const uint8_t o[2] = {uint8_t(old_l3 >> 8), uint8_t(old_l3)}, n[2] = {uint8_t(new_l3 >> 8), uint8_t(new_l3)};
      ck = csum_replace(ck, {o, 2}, {n, 2});
    }
    wr16(ip + 10, ck);
  }
  if (v4_len) wr16(ip + 2, new_l3);

  // L4 checksum: present only in a packet that carries the L4 header.
  if constexpr (!kHdr) {
    if (d.l4_hdr_len == 0 || (d.flags & kFlagLaterFragment)) return Verdict::Forward;
    if (d.l4_proto != kProtoTcp && !udp && d.l4_proto != kProtoIcmp && d.l4_proto != kProtoIcmpv6)
      return Verdict::Forward;
  }
  const bool icmp4 = d.l4_proto == kProtoIcmp;
  const uint32_t csum_off = udp ? 6 : d.l4_proto == kProtoTcp ? 16 : 2;
  uint8_t* const l4 = buf + d.l4_off;
  if (!kHdr && d.l4_off + csum_off + 2 > cap) return Verdict::Forward;
  if (cut || r.full_sum) {
    // Everything left is captured: recompute in full.
    if (udp && rd16(l4 + 6) == 0) {  // no checksum in use
      if (udp_len) wr16(l4 + 4, new_udp);
      return Verdict::Forward;
    }
    // A snapped UDP datagram keeps its length, which may stop short of the
    // record's end: the checksum covers that length, not the zeros after it.
    uint32_t seg_end = cap;
    if (!kHdr && udp && !cut) {
      const uint32_t ue = d.l4_off + rd16(l4 + 4);
      if (ue >= d.l4_off + 8 && ue < cap) seg_end = ue;
    }
    const std::span<const uint8_t> seg{l4, seg_end - d.l4_off};
    if (icmp4) {
      wr16(l4 + 2, 0);
      wr16(l4 + 2, csum_finish(csum_sum(seg)));
    } else if constexpr (kHdr) {
      const int32_t ulen = udp_len ? int32_t(new_udp) : -1;
      wr16(l4 + csum_off, v4 ? l4_checksum_short(ip + 12, ip + 16, true, d.l4_proto, l4, seg.size(), csum_off, ulen)
                             : l4_checksum_short(ip + 8, ip + 24, false, d.l4_proto, l4, seg.size(), csum_off, ulen));
      if (udp_len) wr16(l4 + 4, new_udp);
    } else {
      wr16(l4 + csum_off, v4 ? l4_checksum_v4(ip + 12, ip + 16, d.l4_proto, seg, csum_off)
                             : l4_checksum_v6(ip + 8, ip + 24, d.l4_proto, seg, csum_off));
    }
    keep_l4_error(buf, d, in_sum, l4 + csum_off, uint32_t(seg.size()), udp);
    return Verdict::Forward;
  }
  const bool spans_changed = !kHdr && r.spans && r.spans[0] != r.spans[1];
  if (!r.addr_changed && !r.payload_changed && !spans_changed) return Verdict::Forward;
  uint16_t ck = rd16(l4 + csum_off);
  if (udp && ck == 0) return Verdict::Forward;  // the sender computed none
  // A partial is a sum, not a checksum: updated in the complement's terms,
  // ~(~(~P) + ~m + m') = P - m + m'. It covers no payload.
  bool partial = false;
  if (!icmp4) {
    uint16_t addrs;
    if constexpr (kHdr) addrs = r.addr_changed ? csum_add(os[0], os[1]) : csum_add(csum_addr_sum(buf + so, v4), csum_addr_sum(buf + dof, v4));
    else addrs = csum_add(csum_addr_sum(r.addr_changed ? r.old : buf + so, v4),
                          csum_addr_sum(r.addr_changed ? r.old + alen : buf + dof, v4));
    partial = l4_partial(buf, cap, d, r, ck, csum_off, addrs);
  }
  if (partial) [[unlikely]] ck = uint16_t(~ck);
  if (r.addr_changed && !icmp4) {
    // One update per address, not one for both: the same sum, but the
    // result could differ in the representation of zero (0x0000/0xffff).
    if constexpr (kHdr) {
      ck = csum_replace_sums(ck, os[0], ns[0]);
      ck = csum_replace_sums(ck, os[1], ns[1]);
    } else {
      ck = csum_replace(ck, {r.old, alen}, {buf + so, alen});
      ck = csum_replace(ck, {r.old + alen, alen}, {buf + dof, alen});
    }
  }
  if (partial) [[unlikely]] {
    wr16(l4 + csum_off, uint16_t(~ck));
    return Verdict::Forward;
  }
  // HC' = ~(~HC + ~m + m') over the payload's sums (RFC 1624 eqn. 3).
  if (r.payload_changed) ck = csum_finish(csum_add(csum_add(uint16_t(~ck), uint16_t(~r.old_sum)), r.new_sum));
  // The same over the spans an L7 rewrite changed (bytes after it are old_sum's).
  if (spans_changed) ck = csum_update_spans(ck, r.spans);
  if (udp && ck == 0) ck = 0xffff;
  wr16(l4 + csum_off, ck);
  return Verdict::Forward;
}

}  // namespace amon
