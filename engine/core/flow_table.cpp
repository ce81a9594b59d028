#include "flow_table.h"

#include <algorithm>

#include <rte_hash_crc.h>
#include <rte_prefetch.h>
#include <immintrin.h>
#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace amon {

namespace {

// Registered services above the system range that keep a fixed port.
constexpr uint16_t kHighServerPorts[] = {
    1080, 1194, 1433, 1521, 1701, 1723, 1812, 1813, 1900, 2049, 3128, 3306, 3389, 3478, 3479, 4433,
    4500, 5060, 5061, 5222, 5223, 5228, 5349, 5353, 5355, 5432, 5900, 6379, 6443, 6667, 6697, 8000,
    8008, 8080, 8081, 8443, 8883, 8888, 9000, 9090, 9092, 9200, 9418, 11211, 27017};

// The ports above by a collision-free multiplicative hash into 256 slots
// (0: none; every port here is above 1023), found at compile time: one
// multiply, one load from a table of 512 bytes and one compare, where a
// switch over the list was a tree of branches that a flood's random ports
// mispredict (every new flow asks, for both of its ports).
struct PortSet {
  uint32_t mul = 0;
  uint16_t slot[256] = {};
  static constexpr unsigned index(uint32_t mul, uint16_t p) { return (uint32_t(p) * mul) >> 24; }
};
constexpr PortSet make_port_set() {
  for (uint32_t mul = 0x9E3779B1u;; mul += 0x632BE5ABu) {
    PortSet s{};
    s.mul = mul;
    bool ok = true;
    for (uint16_t p : kHighServerPorts) {
      uint16_t& e = s.slot[PortSet::index(mul, p)];
      if (e) {
        ok = false;
        break;
      }
      e = p;
    }
    if (ok) return s;
  }
}
constexpr PortSet kServerPortSet = make_port_set();

}  // namespace

bool likely_server_port(uint16_t p) {
  if (p < 1024) return p != 0;
  return kServerPortSet.slot[PortSet::index(kServerPortSet.mul, p)] == p;
}

uint64_t FlowTable::endpoint_fp(const uint8_t* addr, unsigned alen, uint16_t port, uint8_t proto) {
  uint64_t h = (uint64_t(port) << 8 | proto) * 0x9E3779B97F4A7C15ULL;
  for (unsigned i = 0; i < alen; i += 4) {
    uint32_t w;
    std::memcpy(&w, addr + i, 4);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 31;
  }
  return h | 1;  // 0 marks an empty slot
}

namespace {

constexpr size_t kHuge = 2u << 20;

inline bool key_eq(const FlowKey& a, const FlowKey& b) {
  // Two 16-byte and one 8-byte compare, no call and no copy through the
  // stack (memcmp's dispatch, and then word arrays, cost more than this).
  const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&a));
  const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&a) + 1);
  const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&b));
  const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&b) + 1);
  const __m128i x = _mm_or_si128(_mm_xor_si128(a0, b0), _mm_xor_si128(a1, b1));
  uint64_t c, d;
  std::memcpy(&c, reinterpret_cast<const uint8_t*>(&a) + 32, 8);
  std::memcpy(&d, reinterpret_cast<const uint8_t*>(&b) + 32, 8);
  return _mm_testz_si128(x, x) & (c == d);
}
static_assert(sizeof(FlowKey) == 40);

// The slots of a bucket whose tag is `tag`, as bits 0, 2, .., 14 (slot s at
// bit 2s): the eight 16-bit tags are one 128-bit compare instead of eight
// compares and branches.
inline uint32_t tag_hits(const uint16_t* tags, uint16_t tag) {
  const __m128i t = _mm_load_si128(reinterpret_cast<const __m128i*>(tags));
  return uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi16(t, _mm_set1_epi16(short(tag))))) & 0x5555u;
}

inline uint64_t load64be(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}

}  // namespace

FlowTable::FlowTable(const std::string& name, uint32_t capacity, const FlowTimeouts& timeouts, int socket,
                     bool commit)
    : cap_(capacity ? capacity : 1), to_(timeouts) {
  // 4 entries per 8-slot bucket on average when full: about 2 % of the
  // buckets then spill into the next one.
  const uint32_t nb = nb_ = (cap_ + 3) / 4;
  evict_step_ = uint32_t(uint64_t(cap_) * 618 / 1000) | 1;
  while (std::gcd(evict_step_, cap_) != 1) evict_step_ += 2;
  size_t bbytes = size_t(nb) * sizeof(Bucket);
  size_t ebytes = (size_t(cap_) * sizeof(FlowEntry) + 63) & ~size_t(63);
  map_bytes_ = bbytes + ebytes + kHuge;  // slack to start on a 2 MiB boundary
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::runtime_error("flow table " + name + ": cannot map " + std::to_string(map_bytes_) + " bytes: " +
                             std::strerror(errno));
  }
  uintptr_t base = (reinterpret_cast<uintptr_t>(map_) + kHuge - 1) & ~(kHuge - 1);
  // Advice only: without THP the table works the same on 4 KiB pages.
  madvise(reinterpret_cast<void*>(base), bbytes + ebytes, MADV_HUGEPAGE);
  // The pages are placed on the NUMA node the caller names (as rte_hash's
  // socket_id did), not wherever the constructing thread runs. Advice too:
  // it fails harmlessly without NUMA support or with SOCKET_ID_ANY.
  if (socket >= 0 && socket < int(8 * sizeof(unsigned long))) {
    unsigned long nodes = 1UL << socket;
    syscall(SYS_mbind, base, bbytes + ebytes, MPOL_PREFERRED, &nodes, 8 * sizeof nodes, 0);
  }
  uint32_t rs = 1;
  while (rs < cap_) rs <<= 1;
  // Uninitialised: positions are written before they are read, and pages
  // are touched only as flows are made.
  made_.reset(new uint64_t[rs]);
  made_mask_ = rs - 1;
  buckets_ = reinterpret_cast<Bucket*>(base);
  entries_ = reinterpret_cast<FlowEntry*>(base + bbytes);
  // Fresh anonymous memory reads as zero: an all-zero bucket is empty and an
  // all-zero entry unused, so the table is valid before anything is written.
  if (commit) {
    // Touched now, not on the packet path: the table's memory is committed
    // up front (bounded, and no page faults while packets wait).
    for (uint32_t i = 0; i < nb; ++i) new (&buckets_[i]) Bucket{};
    for (uint32_t i = 0; i < cap_; ++i) new (&entries_[i]) FlowEntry{};
  }
}

FlowTable::~FlowTable() {
  if (map_) munmap(map_, map_bytes_);
}

size_t FlowTable::memory_bytes() const {
  return size_t(nb_) * sizeof(Bucket) + size_t(cap_) * sizeof(FlowEntry) + (size_t(made_mask_) + 1) * 8;
}

// Inline: it runs once per packet in the burst loop, where a call's saved
// registers and spilled arguments are a real share of the work.
__attribute__((always_inline)) inline uint32_t FlowTable::key_and_hash(const uint8_t* pkt, const Decoded& d,
                                                                       FlowKey& k, bool& src_is_lo, bool with_ports) {
  // Fragments after the first carry no ports; keying every fragment of a
  // datagram on addresses alone keeps them with their first fragment's peers.
  const bool ports = with_ports && d.l4_hdr_len && !(d.flags & kFlagFragment) &&
                     (d.l4_proto == kProtoTcp || d.l4_proto == kProtoUdp || d.l4_proto == kProtoSctp);
  const uint32_t sp = ports ? d.sport : 0, dp = ports ? d.dport : 0;
  // The key is assembled in registers and hashed from them, then stored
  // whole: building it in memory with 8-byte stores and reading it back as
  // 16-byte words (the key compare, the copy into the entry) cannot be
  // store-forwarded and stalled every lookup (perf: a sixth of its time).
  // Endpoints are ordered by (address, port) compared as big-endian numbers
  // in one go, so the order costs a compare and conditional moves, no branch.
  __m128i lo_addr, hi_addr;
  uint64_t h;
  const uint8_t* s = pkt + d.l3_off;
  if (d.ip_version == 4) {
    // IPv4, the common case. memcpy: addresses are not 4-byte aligned
    // after the 14-byte Ethernet header.
    uint32_t a, b;
    std::memcpy(&a, s + 12, 4);
    std::memcpy(&b, s + 16, 4);
    src_is_lo = (uint64_t(__builtin_bswap32(a)) << 16 | sp) <= (uint64_t(__builtin_bswap32(b)) << 16 | dp);
    const uint32_t lo = src_is_lo ? a : b, hi = src_is_lo ? b : a;
    // The address's bytes in memory order, zero padded to 16.
    lo_addr = _mm_cvtsi32_si128(int(lo));
    hi_addr = _mm_cvtsi32_si128(int(hi));
    // The padding is zero for every IPv4 key and the family sits in the
    // last word: hashing the two addresses as one word loses nothing and
    // saves three dependent CRC steps.
    h = __builtin_ia32_crc32di(0, uint64_t(lo) | uint64_t(hi) << 32);
  } else {
    const uint8_t* t = s + 24;
    s += 8;
    const uint64_t s0 = load64be(s), s1 = load64be(s + 8), t0 = load64be(t), t1 = load64be(t + 8);
    src_is_lo = s0 < t0 || (s0 == t0 && (s1 < t1 || (s1 == t1 && sp <= dp)));
    const __m128i sa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i ta = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t));
    lo_addr = src_is_lo ? sa : ta;
    hi_addr = src_is_lo ? ta : sa;
    h = __builtin_ia32_crc32di(0, uint64_t(_mm_cvtsi128_si64(lo_addr)));
    h = __builtin_ia32_crc32di(h, uint64_t(_mm_extract_epi64(lo_addr, 1)));
    h = __builtin_ia32_crc32di(h, uint64_t(_mm_cvtsi128_si64(hi_addr)));
    h = __builtin_ia32_crc32di(h, uint64_t(_mm_extract_epi64(hi_addr, 1)));
  }
  const uint32_t lp = src_is_lo ? sp : dp, hp = src_is_lo ? dp : sp;
  // lo_port, hi_port, proto, family, pad: FlowKey's last word (little-endian
  // host, as the CRC32 instruction already assumes).
  uint64_t w4 = uint64_t(lp) | uint64_t(hp) << 16 | uint64_t(d.l4_proto) << 32 | uint64_t(d.ip_version) << 40;
  if (d.tun_ctx) [[unlikely]] {  // see FlowKey
    const __m128i t = _mm_set_epi64x(int64_t(d.tun_ctx * 0x9e3779b97f4a7c15ULL), int64_t(d.tun_ctx));
    lo_addr = _mm_xor_si128(lo_addr, t);
    hi_addr = _mm_xor_si128(hi_addr, t);
    w4 |= uint64_t(1) << 48;
    h = __builtin_ia32_crc32di(h, d.tun_ctx);
  }
  auto* kp = reinterpret_cast<uint8_t*>(&k);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(kp), lo_addr);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(kp + 16), hi_addr);
  std::memcpy(kp + 32, &w4, 8);
  return uint32_t(__builtin_ia32_crc32di(h, w4));
}

void FlowTable::make_key(const uint8_t* pkt, const Decoded& d, FlowKey& k, bool& src_is_lo, bool with_ports) {
  key_and_hash(pkt, d, k, src_is_lo, with_ports);
}

namespace {

uint32_t addr_pair_hash(const uint8_t* a, const uint8_t* b, unsigned al) {
  if (std::memcmp(a, b, al) > 0) std::swap(a, b);
  // rte_hash_crc reads whole words: addresses inside a frame are not aligned.
  alignas(8) uint8_t lo[16], hi[16];
  std::memcpy(lo, a, al);
  std::memcpy(hi, b, al);
  return rte_hash_crc(hi, al, rte_hash_crc(lo, al, 0x6d5a6d5a));
}

}  // namespace

uint32_t symmetric_flow_hash(const uint8_t* pkt, const Decoded& d) {
  // PPTP's GRE takes its roles from its TCP 1723 control connection (one
  // address, one treatment), which the flow table of one worker knows: the
  // two go to the worker of their outer address pair.
  for (int i = 0; i < d.n_encap; ++i) {
    const EncapLayer& L = d.encap[i];
    if (L.kind != Encap::Gre || !L.gre_v1) continue;
    const unsigned al = L.ip_version == 4 ? 4u : 16u;
    if (L.l3_off + (L.ip_version == 4 ? 20u : 40u) > d.cap_len) return 0;
    const uint8_t* a = pkt + L.l3_off + (L.ip_version == 4 ? 12u : 8u);
    return addr_pair_hash(a, a + al, al);
  }
  if (!d.has_ip() || d.dst_off() + d.addr_len() > d.cap_len) return 0;
  if (d.l4_proto == kProtoGre || (d.l4_proto == kProtoTcp && (d.sport == 1723 || d.dport == 1723)))
    return addr_pair_hash(pkt + d.src_off(), pkt + d.dst_off(), d.addr_len());
  FlowKey k;
  bool lo;
  FlowTable::make_key(pkt, d, k, lo);
  return rte_hash_crc(&k, sizeof k, 0x6d5a6d5a);
}

__attribute__((always_inline)) inline FlowEntry* FlowTable::find_from(const FlowKey& k, uint32_t h, uint32_t bi,
                                                                       uint32_t hits) {
  const Bucket* b = &buckets_[bi];
  for (uint32_t j = 0, reach = b->reach;;) {
    for (; hits; hits &= hits - 1) {
      FlowEntry& e = entries_[b->idx[__builtin_ctz(hits) >> 1]];
      if (key_eq(e.key, k)) return &e;
    }
    if (++j > reach) return nullptr;
    bi = next(bi);
    b = &buckets_[bi];
    hits = tag_hits(b->tag, tag_of(h));
  }
}

FlowEntry* FlowTable::find(const FlowKey& k, uint32_t h) {
  const uint32_t bi = home(h);
  return find_from(k, h, bi, tag_hits(buckets_[bi].tag, tag_of(h)));
}

bool FlowTable::place(uint32_t h, uint32_t idx) {
  const uint16_t tag = tag_of(h);
  const uint32_t hb = home(h);
  uint32_t bi = hb;
  for (uint32_t j = 0; j <= kMaxReach && j < nb_; ++j, bi = next(bi)) {
    Bucket& b = buckets_[bi];
    for (unsigned s = 0; s < Bucket::kSlots; ++s) {
      if (b.tag[s]) continue;
      b.tag[s] = tag;
      b.idx[s] = idx;
      if (j) {
        ++buckets_[hb].spilled;
        if (j > buckets_[hb].reach) buckets_[hb].reach = uint8_t(j);
      }
      return true;
    }
  }
  return false;
}

uint32_t FlowTable::oldest_in_home(uint32_t h, uint64_t now_ns) const {
  const Bucket& b = buckets_[home(h)];
  uint32_t best = kNone;
  unsigned best_c = 3;
  for (unsigned s = 0; s < Bucket::kSlots; ++s) {
    if (!b.tag[s]) continue;
    const FlowEntry& e = entries_[b.idx[s]];
    if (held(e)) continue;  // a flow with held segments is in use by the worker: never taken
    const unsigned c = evict_class(e, now_ns);
    if (best == kNone || c < best_c || (c == best_c && e.last_ns < entries_[best].last_ns)) best = b.idx[s], best_c = c;
  }
  return best;
}

void FlowTable::remove(uint32_t idx) {
  FlowEntry& e = entries_[idx];
  Bucket& hb = buckets_[home(e.hash)];
  uint32_t bi = home(e.hash);
  bool done = false;
  for (uint32_t j = 0, reach = hb.reach; j <= reach && !done; ++j, bi = next(bi)) {
    Bucket& b = buckets_[bi];
    for (unsigned s = 0; s < Bucket::kSlots; ++s) {
      if (!b.tag[s] || b.idx[s] != idx) continue;
      b.tag[s] = 0;
      if (j && --hb.spilled == 0) hb.reach = 0;
      done = true;
      break;
    }
  }
  portless_udp_ -= portless_udp(e.key);
  e.used = false;
  e.hash = free_head_;
  free_head_ = idx;
  --size_;
}

bool FlowTable::evict_oldest_one_way(uint64_t now_ns) {
  // A few positions at most: after a burst of answered flows the sample
  // below takes over while the ring's head moves past them.
  for (unsigned k = 0; k < 4 && made_head_ != made_tail_; ++k) {
    const uint64_t v = made_[made_head_++ & made_mask_];
    if (made_head_ != made_tail_) rte_prefetch0(&entries_[made_[made_head_ & made_mask_] >> 32]);
    const uint32_t idx = uint32_t(v >> 32);
    const FlowEntry& e = entries_[idx];
    if (!e.used || e.hash != uint32_t(v) || e.two_way || held(e)) continue;
    release(idx, evict_class(e, now_ns));
    return true;
  }
  return false;
}

void FlowTable::evict_one(uint64_t now_ns) {
  // The oldest one-way flow first (a flood's spoofed SYN or unanswered
  // datagram): one entry read.
  if (evict_oldest_one_way(now_ns)) return;
  // The lowest class (evict_class), oldest first, of a sample of 8
  // entries, widened to 64 while the sample holds only answered flows: a
  // flood of one-way flows then pushes out an answered flow only when 64
  // samples found nothing else (at 30 % answered flows, 0.3^64). The
  // sample strides over the table (a step coprime with its size, near
  // 0.618 of it): entries are handed out lowest index first, so flows
  // created together sit together, and a run of neighbours would often be
  // all answered ones. This runs for every new flow of a full table, so it
  // does not scan for expired flows (expire() does, off the insert path).
  uint32_t best = kNone;
  unsigned best_c = 3;
  uint64_t best_t = UINT64_MAX;
  const uint32_t n = cap_;
  uint32_t i = evict_pos_ % n, probes = 0;
  for (; probes < 64 && (probes < 8 || best_c == 2 || best == kNone); ++probes, i = (i + evict_step_) % n) {
    const FlowEntry& e = entries_[i];
    // A flow with held segments is in use by the worker: never taken.
    if (!e.used || held(e)) continue;
    const unsigned c = evict_class(e, now_ns);
    if (c < best_c || (c == best_c && e.last_ns < best_t)) best = i, best_c = c, best_t = e.last_ns;
  }
  evict_pos_ = i;
  if (best == kNone) return;
  release(best, best_c);
}

void FlowTable::release(uint32_t idx, unsigned cls) {
  const FlowEntry& e = entries_[idx];
  // Answered flows only: a flood's one-way flows would overwrite the slots
  // of the flows worth remembering.
  if (cls == 2 && !e.roles_uncertain) {
    const uint64_t fp = key_fp(e.key, e.hash);
    recall_[(fp >> 32) % kRecallSlots] = (fp & ~uint64_t(1)) | e.initiator_is_lo;
    recall_any_ = true;
  }
  if (cls == 0) {
    st_.closed += (e.fin & 3) == 3 || (e.fin & 4);
    ++st_.expired;
  } else {
    ++st_.evicted;
    st_.evicted_two_way += cls == 2;
  }
  remove(idx);
}

void FlowTable::expire(uint64_t now_ns, uint32_t budget) {
  // Entries never used hold nothing to expire.
  const uint32_t n = fresh_;
  for (uint32_t k = 0; k < budget && k < n; ++k) {
    uint32_t i = sweep_pos_ % n;
    sweep_pos_ = (i + 1) % n;
    FlowEntry& e = entries_[i];
    if (e.used && now_ns > e.last_ns + timeout_of(e) && !held(e)) {
      st_.closed += (e.fin & 3) == 3 || (e.fin & 4);
      remove(i);
      ++st_.expired;
    }
  }
}

void FlowTable::lookup(const uint8_t* pkt, const Decoded& d, uint64_t ts_ns, PacketMeta& meta) {
  FlowKey k;
  bool src_is_lo;
  const uint32_t h = key_and_hash(pkt, d, k, src_is_lo, true);
  ++st_.lookups;
  if (FlowEntry* e = find(k, h)) return hit(*e, d, src_is_lo, ts_ns, meta);
  insert(pkt, d, k, h, src_is_lo, ts_ns, meta);
}

void FlowTable::insert(const uint8_t* pkt, const Decoded& d, const FlowKey& k, uint32_t h, bool src_is_lo,
                       uint64_t ts_ns, PacketMeta& meta) {
  if (size_ >= cap_) {
    ++st_.full;
    evict_one(ts_ns);
  }
  uint32_t idx = spare();
  bool ok = idx != kNone;
  if (ok && !place(h, idx)) {
    // Its buckets are full as far as an entry may spill: the oldest flow of
    // its home bucket makes room.
    uint32_t victim = oldest_in_home(h, ts_ns);
    if (victim != kNone) release(victim, evict_class(entries_[victim], ts_ns));
    idx = spare();
    ok = place(h, idx);
  }
  if (!ok) {
    meta.flow = nullptr;  // no state: every decision is taken as for a new flow (fail closed)
    meta.flow_first = true;
    meta.initiator_is_src = true;
    meta.roles_uncertain = true;
    return;
  }
  FlowEntry& e = entries_[idx];
  if (idx == free_head_) free_head_ = e.hash;
  else ++fresh_;
  e = FlowEntry{};
  e.key = k;
  portless_udp_ += portless_udp(k);
  e.hash = h;
  e.used = true;
  e.last_ns = ts_ns;
  e.proto = d.l4_proto;
  e.first_from_lo = src_is_lo;
  note_tcp(e, d, src_is_lo);
  note_made(idx, h);
  ++size_;
  ++st_.created;
  // Which end is the client, by evidence in this order: the SYN (its sender)
  // or SYN-ACK (its receiver); the roles the flow's fragments already have;
  // an endpoint seen accepting connections; a likely server port against an
  // ephemeral one; ICMP echo direction. Else the first packet's source, and
  // the flow is marked uncertain. A capture or flow picked up mid-way (a
  // restart, an expired or evicted flow) thus keeps its client.
  bool src_init = true, decided = false;
  const bool ports = d.l4_hdr_len && !(d.flags & kFlagLaterFragment) &&
                     (d.l4_proto == kProtoTcp || d.l4_proto == kProtoUdp || d.l4_proto == kProtoSctp);
  const unsigned alen = d.ip_version == 4 ? 4u : 16u;
  const uint64_t src_fp = ports ? endpoint_fp(pkt + d.src_off(), alen, d.sport, d.l4_proto) : 0;
  const uint64_t dst_fp = ports ? endpoint_fp(pkt + d.dst_off(), alen, d.dport, d.l4_proto) : 0;
  if (d.l4_proto == kProtoTcp && d.l4_hdr_len && (d.tcp_flags & 0x02)) {
    src_init = !(d.tcp_flags & 0x10);
    note_server(src_init ? dst_fp : src_fp);
    decided = true;
  }
  // A first fragment carries the ports: when the unfragmented flow of its
  // 5-tuple is known, the fragments' entry takes that flow's roles, so a
  // fragmented reply does not make the server the client.
  if ((d.flags & kFlagFragment) && !(d.flags & kFlagLaterFragment) && d.l4_hdr_len &&
      (d.l4_proto == kProtoTcp || d.l4_proto == kProtoUdp)) {
    FlowKey pk;
    bool p_src_is_lo;
    Decoded nd = d;
    nd.flags &= uint8_t(~kFlagFragment);
    const uint32_t ph = key_and_hash(pkt, nd, pk, p_src_is_lo, true);
    if (const FlowEntry* pe = find(pk, ph)) src_init = pe->initiator_is_lo == p_src_is_lo, decided = true;
  } else if (!decided && ports && !(d.flags & kFlagFragment) && d.l4_proto == kProtoUdp && portless_udp_) {
    // And the other way: an unfragmented UDP packet after fragmented ones
    // (NFS, DNS) takes the roles the fragments' entry already has, when
    // they came from evidence. Without ports the packet's own key is the
    // fragments' key, and the entry found would be its own, not yet decided.
    FlowKey ak;
    bool a_src_is_lo;
    const uint32_t ah = key_and_hash(pkt, d, ak, a_src_is_lo, false);
    if (const FlowEntry* ae = find(ak, ah); ae && ae != &e && !ae->roles_uncertain)
      src_init = ae->initiator_is_lo == a_src_is_lo, decided = true;
  }
  if (!decided && recall_any_) {
    // A flow evicted under pressure comes back with the roles it had.
    const uint64_t fp = key_fp(k, h), r = recall_[(fp >> 32) % kRecallSlots];
    if ((r & ~uint64_t(1)) == (fp & ~uint64_t(1))) {
      src_init = bool(r & 1) == src_is_lo, decided = true;
      ++st_.roles_recalled;
    }
  }
  if (!decided && ports) {
    const bool s_srv = seen_server(src_fp), d_srv = seen_server(dst_fp);
    if (s_srv != d_srv) src_init = d_srv, decided = true;
  }
  if (!decided && ports) {
    const bool s_srv = likely_server_port(d.sport), d_srv = likely_server_port(d.dport);
    if (s_srv != d_srv) src_init = d_srv, decided = true;
  }
  // PPTP's GRE between two ends (when not decoded as a tunnel: its PPP
  // frames are control frames) takes the roles of their control connection.
  if (!decided && d.l4_proto == kProtoGre) {
    const bool s_srv = seen_server(endpoint_fp(pkt + d.src_off(), alen, 1723, kProtoTcp));
    const bool d_srv = seen_server(endpoint_fp(pkt + d.dst_off(), alen, 1723, kProtoTcp));
    if (s_srv != d_srv) src_init = d_srv, decided = true;
  }
  if (!decided && (d.l4_proto == kProtoIcmp || d.l4_proto == kProtoIcmpv6) && d.l4_hdr_len &&
      !(d.flags & kFlagIcmpError)) {
    const uint8_t type = d.sport >> 8;
    if (type == 8 || type == 128) src_init = true, decided = true;           // echo request
    else if (type == 0 || type == 129) src_init = false, decided = true;     // echo reply
  }
  if (!decided) {
    e.roles_uncertain = 1;
    ++st_.roles_uncertain;
  }
  e.initiator_is_lo = src_init ? src_is_lo : !src_is_lo;
  meta.flow = &e.state;
  meta.flow_first = true;
  meta.initiator_is_src = src_init;
  meta.roles_uncertain = e.roles_uncertain;
}

void FlowTable::lookup_burst(const uint8_t* const* pkts, const Decoded* ds, const bool* want, unsigned n,
                             PacketMeta* metas) {
  // Three passes so that each packet's misses are in flight while the others
  // are worked on: keys and home buckets (stage), then the entries the tags
  // point to, then the lookups proper, in order: a packet may find the flow
  // an earlier packet of the burst created (lookup_staged).
  for (unsigned i = 0; i < n; ++i)
    if (want[i]) stage(i, pkts[i], ds[i]);
  lookup_staged(pkts, ds, want, n, metas);
}

void FlowTable::stage(unsigned i, const uint8_t* pkt, const Decoded& d) {
  Staged& s = st_b_;
  s.hs[i] = key_and_hash(pkt, d, s.keys[i], s.lo[i], true);
  s.homes[i] = home(s.hs[i]);
  rte_prefetch0(&buckets_[s.homes[i]]);
}

void FlowTable::prefetch_evidence(const uint8_t* pkt, const Decoded& d, unsigned i) {
  // The slots insert() reads for a new flow's roles: its recall slot and
  // its two endpoints' server slots, each a miss when every packet is a
  // new flow.
  if (recall_any_) rte_prefetch0(&recall_[(key_fp(st_b_.keys[i], st_b_.hs[i]) >> 32) % kRecallSlots]);
  if (!d.l4_hdr_len || (d.flags & kFlagLaterFragment) ||
      (d.l4_proto != kProtoTcp && d.l4_proto != kProtoUdp && d.l4_proto != kProtoSctp))
    return;
  const unsigned alen = d.ip_version == 4 ? 4u : 16u;
  rte_prefetch0(&servers_[endpoint_fp(pkt + d.src_off(), alen, d.sport, d.l4_proto) % kServerSlots]);
  rte_prefetch0(&servers_[endpoint_fp(pkt + d.dst_off(), alen, d.dport, d.l4_proto) % kServerSlots]);
}

void FlowTable::lookup_staged(const uint8_t* const* pkts, const Decoded* ds, const bool* want, unsigned n,
                              PacketMeta* metas) {
  // The second and third passes on what stage() left: the entries the tags
  // point to are prefetched for the whole burst, then the lookups run in
  // order. A tag match found here holds until an insert changes the
  // buckets (a new flow, an expiry or eviction it makes room with); from
  // then on the lookups of this burst read the buckets again.
  Staged& s = st_b_;
  unsigned m = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (!want[i]) continue;
    ++m;
    const Bucket& b = buckets_[s.homes[i]];
    s.hits[i] = tag_hits(b.tag, tag_of(s.hs[i]));
    if (s.hits[i]) rte_prefetch0(&entries_[b.idx[__builtin_ctz(s.hits[i]) >> 1]]);
  }
  st_.lookups += m;
  // A full table gives up a flow for each new one, the oldest one-way ones
  // of the ring first (evict_oldest_one_way): their entries and home
  // buckets (the ring keeps the hash) are fetched now for as many packets
  // as found no tag, so removal does not wait on each line in turn.
  if (size_ >= cap_) {
    unsigned misses = 0;
    for (unsigned i = 0; i < n; ++i) misses += want[i] && !s.hits[i];
    for (uint32_t p = made_head_, end = made_head_ + std::min<uint32_t>(misses, made_tail_ - made_head_); p != end;
         ++p) {
      const uint64_t v = made_[p & made_mask_];
      // Both lines of the entry: the new flow reuses it whole (FlowEntry{}).
      rte_prefetch0(&entries_[v >> 32]);
      rte_prefetch0(reinterpret_cast<const uint8_t*>(&entries_[v >> 32]) + 64);
      rte_prefetch0(&buckets_[home(uint32_t(v))]);
    }
  }
  for (unsigned i = 0; i < n; ++i)
    if (want[i] && !s.hits[i]) prefetch_evidence(pkts[i], ds[i], i);
  bool changed = false;
  for (unsigned i = 0; i < n; ++i) {
    if (!want[i]) continue;
    PacketMeta& meta = metas[i];
    FlowEntry* e = changed ? find(s.keys[i], s.hs[i]) : find_from(s.keys[i], s.hs[i], s.homes[i], s.hits[i]);
    if (e) {
      hit(*e, ds[i], s.lo[i], meta.ts_ns, meta);
    } else {
      insert(pkts[i], ds[i], s.keys[i], s.hs[i], s.lo[i], meta.ts_ns, meta);
      changed = true;
    }
  }
}

}  // namespace amon
