#include "initiators.h"

#include <algorithm>
#include <cstring>

#include "flow_table.h"

namespace amon {

namespace {

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 33);
}

// Never 0 (an empty slot). One mix for IPv4, two for IPv6.
uint64_t host_fp(const uint8_t* a, unsigned alen) {
  uint64_t x = 0;
  if (alen == 4) {
    uint32_t v;
    std::memcpy(&v, a, 4);
    x = v;
  } else {
    uint64_t y;
    std::memcpy(&x, a, 8);
    std::memcpy(&y, a + 8, 8);
    x = mix(x) ^ y;
  }
  return mix(x + alen) | 1;
}

}  // namespace

bool InitiatorLog::seen_flow(uint64_t fp) {
  std::atomic<uint64_t>& s = flows_[fp % kFlows];
  if (s.load(std::memory_order_relaxed) == fp) return true;
  s.store(fp, std::memory_order_relaxed);
  return false;
}

bool InitiatorLog::known(uint64_t host) const {
  const HostSet& s = set_of(host);
  const uint64_t t = tag(host);
  for (const auto& w : s.way)
    if ((w.load(std::memory_order_relaxed) & ~kCount) == t) return true;
  return false;
}

bool InitiatorLog::learn(uint64_t host, bool fresh) {
  HostSet& s = set_of(host);
  const uint64_t t = tag(host);
  uint64_t e[kWays];
  for (unsigned i = 0; i < kWays; ++i) e[i] = s.way[i].load(std::memory_order_relaxed);
  // The lowest count, ties to the first from a way the fingerprint picks
  // (so a flood's newcomers spread over a set's one-off entries), without
  // a branch on the counts: count * kWays + distance from that way.
  const unsigned start = unsigned(host >> 8);
  unsigned best = ~0u;
  for (unsigned i = 0; i < kWays; ++i) {
    if ((e[i] & ~kCount) == t) {
      if (fresh && (e[i] & kCount) < kCount) s.way[i].store(e[i] + 1, std::memory_order_relaxed);
      return true;
    }
    best = std::min(best, unsigned(e[i] & kCount) * unsigned(kWays) + unsigned((i - start) % kWays));
  }
  const unsigned victim = (best + start) % kWays;
  if (best / kWays <= 1) {
    s.way[victim].store(t | 1, std::memory_order_relaxed);
    return true;
  }
  s.way[victim].store(e[victim] - 1, std::memory_order_relaxed);
  return false;
}

bool InitiatorLog::prints(const uint8_t* pkt, uint32_t cap, const Decoded& d, Prints& p) {
  if (!d.has_ip()) return false;
  const unsigned alen = d.addr_len();
  if (d.src_off() + alen > cap || d.dst_off() + alen > cap) return false;
  p.src = host_fp(pkt + d.src_off(), alen);
  p.dst = host_fp(pkt + d.dst_off(), alen);
  p.flow = 0;
  const bool l4 = d.l4_hdr_len && !(d.flags & kFlagLaterFragment);
  const bool ports = l4 && (d.l4_proto == kProtoTcp || d.l4_proto == kProtoUdp || d.l4_proto == kProtoSctp);
  if (d.l4_proto != kProtoIcmp && d.l4_proto != kProtoIcmpv6 && (ports || !(d.flags & kFlagLaterFragment))) {
    // The flow, the same both ways (its ends ordered).
    const uint64_t a = p.src + (ports ? d.sport : 0) * 0x9e3779b97f4a7c15ULL;
    const uint64_t b = p.dst + (ports ? d.dport : 0) * 0x9e3779b97f4a7c15ULL;
    p.flow = mix((std::min(a, b) * 0xbf58476d1ce4e5b9ULL ^ std::max(a, b)) + d.l4_proto) | 1;
  }
  return true;
}

void InitiatorLog::prefetch(const uint8_t* pkt, uint32_t cap, const Decoded& d) const {
  Prints p;
  if (!prints(pkt, cap, d, p)) return;
  __builtin_prefetch(&set_of(p.src));
  __builtin_prefetch(&set_of(p.dst));
  if (p.flow) __builtin_prefetch(&flows_[p.flow % kFlows]);
}

uint8_t InitiatorLog::observe(const uint8_t* pkt, uint32_t cap, const Decoded& d) {
  Prints p;
  if (!prints(pkt, cap, d, p)) return 0;
  const uint64_t src = p.src, dst = p.dst;
  // 0: nothing learnt; else the initiator's fingerprint.
  uint64_t init = 0;
  bool fresh = true;  // an echo request is an exchange of its own
  const bool l4 = d.l4_hdr_len && !(d.flags & kFlagLaterFragment);
  const bool ports = l4 && (d.l4_proto == kProtoTcp || d.l4_proto == kProtoUdp || d.l4_proto == kProtoSctp);
  if (d.l4_proto == kProtoIcmp || d.l4_proto == kProtoIcmpv6) {
    const uint8_t type = uint8_t(d.sport >> 8);
    if (l4 && (type == 8 || type == 128)) init = src;       // echo request
    else if (l4 && (type == 0 || type == 129)) init = dst;  // echo reply
  } else if (p.flow) {
    const bool syn = d.l4_proto == kProtoTcp && l4 && (d.tcp_flags & 0x02);
    const bool first = !seen_flow(p.flow);
    fresh = first;
    if (syn) {
      init = d.tcp_flags & 0x10 ? dst : src;
    } else if (first) {
      const bool s_srv = ports && likely_server_port(d.sport), d_srv = ports && likely_server_port(d.dport);
      if (s_srv != d_srv) init = d_srv ? src : dst;
      else if (d.l4_proto != kProtoTcp) init = src;  // a datagram flow starts with its initiator's packet
    }
  }
  // The initiator's answer is learn()'s: one pass over its set.
  bool s_known, d_known;
  if (init == src) s_known = learn(src, fresh), d_known = dst == src ? s_known : known(dst);
  else if (init == dst) d_known = learn(dst, fresh), s_known = known(src);
  else s_known = known(src), d_known = known(dst);
  return uint8_t((s_known ? kSrc : 0) | (d_known ? kDst : 0));
}

}  // namespace amon
