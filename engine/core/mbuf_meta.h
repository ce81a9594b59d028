// Per-packet metadata carried in mbuf dynamic fields: the capture timestamp
// (ns since the Unix epoch; DPDK's standard Rx timestamp field) and the
// original wire length, which a snaplen-truncated pcap record has and an mbuf
// does not; and, for captures whose link layer is not Ethernet, the bytes of
// the original link header that the Ethernet header standing in for it
// cannot carry (pcap_port.h, "Link types").
#pragma once

#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>

#include <cstdint>
#include <cstring>

#include "linktypes.h"

namespace amon {

struct MbufMeta {
  int ts_off = -1;
  uint64_t ts_flag = 0;
  int wire_off = -1;
  int link_off = -1;
  int origin_off = -1;
};

// Which capture of a set a packet came from, and its link type, so the
// writer can put it in that capture's output and write its link type.
// Packets from a live port carry none: the tag tells a set origin from
// whatever the mbuf's memory held.
struct Origin {
  uint32_t tag;
  uint16_t input, dlt;
};
constexpr uint32_t kOriginTag = 0x6f726967;

// The original link header of a non-Ethernet capture record (linktypes.h).
using LinkHdr = pcapio::LinkHeader;
extern MbufMeta g_meta;

// Registers the dynamic fields; call once after rte_eal_init. Returns false
// and sets rte_errno on failure.
bool mbuf_meta_register();

inline uint64_t mbuf_ts(const rte_mbuf* m) { return *RTE_MBUF_DYNFIELD(m, g_meta.ts_off, const uint64_t*); }
inline void mbuf_set_ts(rte_mbuf* m, uint64_t ns) {
  *RTE_MBUF_DYNFIELD(m, g_meta.ts_off, uint64_t*) = ns;
  m->ol_flags |= g_meta.ts_flag;
}
inline uint32_t mbuf_wire_len(const rte_mbuf* m) {
  uint32_t w = *RTE_MBUF_DYNFIELD(m, g_meta.wire_off, const uint32_t*);
  return w < m->pkt_len ? m->pkt_len : w;
}
inline void mbuf_set_wire_len(rte_mbuf* m, uint32_t w) { *RTE_MBUF_DYNFIELD(m, g_meta.wire_off, uint32_t*) = w; }
inline void mbuf_set_origin(rte_mbuf* m, uint16_t input, uint16_t dlt) {
  *RTE_MBUF_DYNFIELD(m, g_meta.origin_off, Origin*) = {kOriginTag, input, dlt};
}
// False for a packet with no origin (input and dlt are left as they were).
inline bool mbuf_origin(const rte_mbuf* m, uint16_t& input, uint16_t& dlt) {
  const Origin* o = RTE_MBUF_DYNFIELD(m, g_meta.origin_off, const Origin*);
  if (o->tag != kOriginTag) return false;
  input = o->input, dlt = o->dlt;
  return true;
}
// The input sequence number the dispatcher gives each packet, by which the
// outputs are merged when several workers share the input and by which each
// output counts the records a held packet made leave late (ordered.h). It
// lives in the mbuf's 8-byte hash union: the dynamic field area is full, and
// nothing past the receive reads the NIC's RSS hash (the workers hash the
// flow themselves). Copies carry it (rte_pktmbuf_copy, mbuf_copy_meta).
// Its top three bits carry what the dispatcher learnt, in input order, of
// who initiates flows (initiators.h): whether it did, and the packet's
// InitiatorLog bits.
constexpr unsigned kSeqBits = 61;
constexpr uint64_t kSeqMask = (uint64_t(1) << kSeqBits) - 1, kSeqInitiators = uint64_t(4) << kSeqBits;
inline uint64_t mbuf_seq(const rte_mbuf* m) {
  uint64_t s;
  static_assert(sizeof(m->hash) == sizeof(s));
  std::memcpy(&s, &m->hash, sizeof(s));
  return s & kSeqMask;
}
inline void mbuf_set_seq(rte_mbuf* m, uint64_t s) { std::memcpy(&m->hash, &s, sizeof(s)); }
// The number and the initiator bits (InitiatorLog::observe) together.
inline void mbuf_set_seq(rte_mbuf* m, uint64_t s, uint8_t initiating) {
  mbuf_set_seq(m, s | kSeqInitiators | uint64_t(initiating & 3) << kSeqBits);
}
// False when the dispatcher learnt nothing for this packet.
inline bool mbuf_initiating(const rte_mbuf* m, uint8_t& bits) {
  uint64_t s;
  std::memcpy(&s, &m->hash, sizeof(s));
  bits = uint8_t(s >> kSeqBits & 3);
  return s & kSeqInitiators;
}
// Every per-packet field of `src` a record made from it needs (the dynamic
// fields and the sequence number).
inline void mbuf_copy_meta(rte_mbuf* dst, const rte_mbuf* src) {
  rte_mbuf_dynfield_copy(dst, src);
  dst->hash = src->hash;
}
inline LinkHdr* mbuf_link_hdr(rte_mbuf* m) { return RTE_MBUF_DYNFIELD(m, g_meta.link_off, LinkHdr*); }
inline const LinkHdr* mbuf_link_hdr(const rte_mbuf* m) { return RTE_MBUF_DYNFIELD(m, g_meta.link_off, const LinkHdr*); }

}  // namespace amon
