// Lengths and checksums of the layers around an encapsulated packet, after
// the inner packet (and the outer addresses) were rewritten or cut.
#include <algorithm>
#include <cstring>

#include "checksum.h"
#include "l2l4.h"
#include "bytes.h"

namespace amon {

namespace {


// Where the span a layer's UDP or GRE checksum covers starts and ends, and
// where the checksum field is; false when the layer has none in use or the
// span was not captured in full (then it cannot be verified or followed).
bool checked_span(const uint8_t* p, uint32_t cap, const EncapLayer& L, uint32_t& from, uint32_t& to, uint32_t& ck) {
  if (L.udp_off) {
    from = L.udp_off;
    if (from + 8 > cap || rd16(p + from + 6) == 0) return false;  // 0: the sender computed none
    to = from + rd16(p + from + 4);
    ck = from + 6;
  } else if (L.kind == Encap::Gre || L.kind == Encap::Erspan) {
    if (!L.gre_csum) return false;
    from = L.hdr_off;
    const uint8_t* ip = p + L.l3_off;
    to = L.l3_off + (L.ip_version == 4 ? rd16(ip + 2) : 40u + rd16(ip + 4));
    ck = from + 4;
  } else if (L.kind == Encap::PimRegister) {
    // A Register's checksum covers its 8-byte header only (RFC 7761 4.9),
    // over IPv6 with a pseudo-header of that length.
    from = L.hdr_off;
    to = from + 8;
    ck = from + 2;
  } else {
    return false;
  }
  return to >= ck + 2 && to <= cap;
}

// The span's sum with the checksum field read as zero.
uint16_t span_sum(const uint8_t* p, uint32_t from, uint32_t to, uint32_t ck) {
  return csum_add(csum_sum({p + from, to - from}), uint16_t(~rd16(p + ck)));
}

}  // namespace

void encap_sums(const uint8_t* p, uint32_t cap, const Decoded& d, EncapSums& s) {
  s.valid = 0;
  for (int i = 0; i < d.n_encap; ++i) {
    uint32_t from, to, ck;
    if (!checked_span(p, cap, d.encap[i], from, to, ck)) continue;
    s.sum[i] = span_sum(p, from, to, ck);
    const EncapLayer& L = d.encap[i];
    const uint8_t* ip = p + L.l3_off;
    uint16_t pseudo = 0;
    if (L.udp_off)
      pseudo = L.ip_version == 4 ? pseudo_sum_v4(ip + 12, ip + 16, kProtoUdp, uint16_t(to - from))
                                 : pseudo_sum_v6(ip + 8, ip + 24, kProtoUdp, to - from);
    else if (L.kind == Encap::PimRegister && L.ip_version == 6)
      pseudo = pseudo_sum_v6(ip + 8, ip + 24, kProtoPim, to - from);
    s.err[i] = csum_add(csum_add(s.sum[i], pseudo), rd16(p + ck));
    s.valid |= uint8_t(1u << i);
  }
}

void encap_fix(uint8_t* p, uint32_t cap, bool cut, const Decoded& d, const EncapSums& s,
               const uint8_t (*old_addrs)[32], uint8_t addr_changed) {
  // Innermost first: an outer checksum covers the inner layers' fixed bytes.
  for (int i = d.n_encap - 1; i >= 0; --i) {
    const EncapLayer& L = d.encap[i];
    uint8_t* ip = p + L.l3_off;
    const bool v4 = L.ip_version == 4;
    const uint32_t al = v4 ? 4 : 16, so = v4 ? 12 : 8;
    if (L.l3_off + L.l3_hdr_len > cap) continue;  // cannot happen: a cut never reaches the outer headers
    const uint16_t old_len = v4 ? rd16(ip + 2) : 0;
    if (cut) {
      // Everything after `cap` is gone, from each layer that held it.
      auto shrink = [&](uint32_t len_at, uint32_t start, uint32_t old_len) {
        if (start + old_len > cap) wr16(p + len_at, cap - start);
      };
      if (L.pppoe_off) shrink(L.pppoe_off + 4, L.pppoe_off + 6, rd16(p + L.pppoe_off + 4));
      if (v4) shrink(L.l3_off + 2, L.l3_off, rd16(ip + 2));
      else shrink(L.l3_off + 4, L.l3_off + 40, rd16(ip + 4));
      if (L.udp_off) shrink(L.udp_off + 4, L.udp_off, rd16(p + L.udp_off + 4));
      if (L.kind == Encap::GtpU) shrink(L.hdr_off + 2, L.hdr_off + 8u, rd16(p + L.hdr_off + 2));
      if (L.gre_v1) {  // the PPP frame after the header (sequence number, acknowledgement if present)
        const uint32_t hl = 12u + ((rd16(p + L.hdr_off) & 0x0080) ? 4u : 0u);
        shrink(L.hdr_off + 4, L.hdr_off + hl, rd16(p + L.hdr_off + 4));
      }
    }
    const bool addr = (addr_changed >> i) & 1;
    if (v4 && (cut || addr)) {
      // Updated for what changed (RFC 1624), never recomputed: a header
      // checksum wrong in the input stays wrong by as much.
      uint16_t hc = rd16(ip + 10);
      if (addr) hc = csum_replace(hc, {old_addrs[i], 8}, {ip + 12, 8});
      const uint8_t o[2] = {uint8_t(old_len >> 8), uint8_t(old_len)}, n[2] = {ip[2], ip[3]};
      hc = csum_replace(hc, {o, 2}, {n, 2});
      wr16(ip + 10, hc);
    }
    uint32_t from, to, ck;
    if (!checked_span(p, cap, L, from, to, ck)) continue;
    uint16_t c;
    // A Register's summed header lies before any cut; only its IPv6
    // pseudo-header's addresses may change (below).
    const bool pim = L.kind == Encap::PimRegister;
    if (cut && !pim) {  // lengths changed: recompute in full, as for the inner packet after a cut
      if (L.udp_off) {
        std::span<const uint8_t> seg{p + from, to - from};
        c = v4 ? l4_checksum_v4(ip + 12, ip + 16, kProtoUdp, seg, 6) : l4_checksum_v6(ip + 8, ip + 24, kProtoUdp, seg, 6);
      } else {
        wr16(p + ck, 0);
        c = csum_finish(csum_sum({p + from, to - from}));
      }
      if (((s.valid >> i) & 1) && s.err[i] != 0xffff) {  // wrong in the input: as wrong after
        c = csum_add(c, s.err[i]);
        if (L.udp_off && c == 0) c = 0xffff;
      }
      wr16(p + ck, c);
      continue;
    }
    // Incrementally (RFC 1624), so that a checksum that was wrong stays
    // wrong and a right one stays right.
    if (!((s.valid >> i) & 1)) continue;
    c = rd16(p + ck);
    const uint16_t now = span_sum(p, from, to, ck);
    const bool pseudo = (L.udp_off || (pim && !v4)) && addr;
    if (now == s.sum[i] && !pseudo) continue;
    if (pseudo) {
      c = csum_replace(c, {old_addrs[i], al}, {ip + so, al});
      c = csum_replace(c, {old_addrs[i] + al, al}, {ip + so + al, al});
    }
    c = csum_finish(csum_add(csum_add(uint16_t(~c), uint16_t(~s.sum[i])), now));
    if (L.udp_off && c == 0) c = 0xffff;
    wr16(p + ck, c);
  }
}

}  // namespace amon
