#include "flow_table.h"

#include <rte_errno.h>
#include <rte_hash_crc.h>
#include <rte_jhash.h>

#include <cstring>
#include <stdexcept>

namespace amon {

FlowTable::FlowTable(const std::string& name, uint32_t capacity, const FlowTimeouts& timeouts, int socket)
    : cap_(capacity), to_(timeouts) {
  rte_hash_parameters p{};
  p.name = name.c_str();
  // rte_hash needs headroom above the entries it holds; we bound occupancy
  // ourselves at cap_.
  p.entries = capacity + capacity / 8 + 64;
  p.key_len = sizeof(FlowKey);
  p.hash_func = rte_hash_crc;
  p.hash_func_init_val = 0;
  p.socket_id = socket;
  p.extra_flag = RTE_HASH_EXTRA_FLAGS_EXT_TABLE;
  h_ = rte_hash_create(&p);
  if (!h_) throw std::runtime_error("flow table " + name + ": rte_hash_create failed: " + rte_strerror(rte_errno));
  entries_.resize(p.entries + 1);
}

FlowTable::~FlowTable() {
  if (h_) rte_hash_free(h_);
}

size_t FlowTable::memory_bytes() const {
  // rte_hash: key store (key + pointer per slot) plus buckets (8 slots, 64 B).
  size_t slots = entries_.size();
  return slots * (sizeof(FlowKey) + sizeof(void*)) + (slots / 8 + 1) * 64 + entries_.size() * sizeof(FlowEntry);
}

void FlowTable::make_key(const uint8_t* pkt, const Decoded& d, FlowKey& k, bool& src_is_lo, bool with_ports) {
  uint32_t al = d.addr_len();
  const uint8_t* s = pkt + d.src_off();
  const uint8_t* t = pkt + d.dst_off();
  // Fragments after the first carry no ports; keying every fragment of a
  // datagram on addresses alone keeps them with their first fragment's peers.
  bool ports = with_ports && d.l4_hdr_len && !(d.flags & kFlagFragment) &&
               (d.l4_proto == kProtoTcp || d.l4_proto == kProtoUdp || d.l4_proto == kProtoSctp);
  uint16_t sp = ports ? d.sport : 0, dp = ports ? d.dport : 0;
  if (al == 4) {
    // IPv4, the common case: fixed-size loads instead of library calls.
    uint32_t a, b;  // memcpy: addresses are not 4-byte aligned after the 14-byte Ethernet header
    std::memcpy(&a, s, 4);
    std::memcpy(&b, t, 4);
    a = __builtin_bswap32(a);
    b = __builtin_bswap32(b);
    src_is_lo = a < b || (a == b && sp <= dp);
    std::memset(&k, 0, sizeof k);
    std::memcpy(k.lo, src_is_lo ? s : t, 4);
    std::memcpy(k.hi, src_is_lo ? t : s, 4);
  } else {
    int c = std::memcmp(s, t, 16);
    src_is_lo = c < 0 || (c == 0 && sp <= dp);
    std::memcpy(k.lo, src_is_lo ? s : t, 16);
    std::memcpy(k.hi, src_is_lo ? t : s, 16);
    k.pad[0] = k.pad[1] = 0;
  }
  k.lo_port = src_is_lo ? sp : dp;
  k.hi_port = src_is_lo ? dp : sp;
  k.proto = d.l4_proto;
  k.family = d.ip_version;
}

uint32_t symmetric_flow_hash(const uint8_t* pkt, const Decoded& d) {
  if (!d.has_ip() || d.dst_off() + d.addr_len() > d.cap_len) return 0;
  FlowKey k;
  bool lo;
  FlowTable::make_key(pkt, d, k, lo);
  return rte_hash_crc(&k, sizeof k, 0x6d5a6d5a);
}

void FlowTable::remove(uint32_t idx) {
  void* key = nullptr;
  // rte_hash keeps the key; asking it back saves a copy per flow.
  if (rte_hash_get_key_with_position(h_, int32_t(idx), &key) == 0) rte_hash_del_key(h_, key);
  entries_[idx].used = false;
  --size_;
}

void FlowTable::evict_one(uint64_t now_ns) {
  // Oldest of a small sample: cheap, and close enough to LRU for a table
  // that is only full under attack or misconfiguration.
  uint32_t best = UINT32_MAX;
  uint64_t best_t = UINT64_MAX;
  uint32_t n = uint32_t(entries_.size());
  for (uint32_t probes = 0, i = sweep_pos_; probes < 64; ++probes, i = (i + 1) % n) {
    // A flow with held segments is in use by the worker: never taken.
    if (entries_[i].used && entries_[i].last_ns < best_t && !held(entries_[i])) best_t = entries_[i].last_ns, best = i;
  }
  sweep_pos_ = (sweep_pos_ + 64) % n;
  if (best != UINT32_MAX) {
    remove(best);
    ++st_.evicted;
  }
}

void FlowTable::expire(uint64_t now_ns, uint32_t budget) {
  uint32_t n = uint32_t(entries_.size());
  for (uint32_t k = 0; k < budget && k < n; ++k) {
    uint32_t i = sweep_pos_;
    sweep_pos_ = (sweep_pos_ + 1) % n;
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
  make_key(pkt, d, k, src_is_lo);
  ++st_.lookups;
  hash_sig_t sig = rte_hash_crc(&k, sizeof k, 0);
  // rte_hash returns the key's slot position; it indexes our entry arrays.
  int32_t found = rte_hash_lookup_with_hash(h_, &k, sig);
  if (found >= 0) {
    FlowEntry& e = entries_[uint32_t(found)];
    e.last_ns = ts_ns > e.last_ns ? ts_ns : e.last_ns;
    note_tcp(e, d, src_is_lo);
    meta.flow = &e.state;
    meta.flow_first = false;
    meta.initiator_is_src = e.initiator_is_lo == src_is_lo;
    return;
  }
  insert(pkt, d, k, sig, src_is_lo, ts_ns, meta);
}

void FlowTable::insert(const uint8_t* pkt, const Decoded& d, const FlowKey& k, hash_sig_t sig, bool src_is_lo,
                       uint64_t ts_ns, PacketMeta& meta) {
  if (size_ >= cap_) {
    ++st_.full;
    expire(ts_ns, 256);
    if (size_ >= cap_) evict_one(ts_ns);
  }
  int32_t pos = rte_hash_add_key_with_hash(h_, &k, sig);
  if (pos < 0) {  // bucket overflow even with the extension table: evict and retry once
    evict_one(ts_ns);
    pos = rte_hash_add_key_with_hash(h_, &k, sig);
    if (pos < 0) {
      meta.flow = nullptr;  // no state: every decision is taken as for a new flow (fail closed)
      meta.flow_first = true;
      meta.initiator_is_src = true;
      return;
    }
  }
  uint32_t idx = uint32_t(pos);
  FlowEntry& e = entries_[idx];
  e = FlowEntry{};
  e.used = true;
  e.last_ns = ts_ns;
  e.proto = d.l4_proto;
  note_tcp(e, d, src_is_lo);
  ++size_;
  ++st_.created;
  // The initiator is the SYN sender; a SYN-ACK first means we missed the SYN.
  bool src_init = true;
  if (d.l4_proto == kProtoTcp && d.l4_hdr_len) {
    bool syn = d.tcp_flags & 0x02, ack = d.tcp_flags & 0x10;
    if (syn && ack) src_init = false;
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
    make_key(pkt, nd, pk, p_src_is_lo);
    int32_t ppos = rte_hash_lookup_with_hash(h_, &pk, rte_hash_crc(&pk, sizeof pk, 0));
    if (ppos >= 0) src_init = entries_[uint32_t(ppos)].initiator_is_lo == p_src_is_lo;
  } else if (!(d.flags & kFlagFragment) && d.l4_proto == kProtoUdp) {
    // And the other way: an unfragmented UDP packet after fragmented ones
    // (NFS, DNS) takes the roles the fragments' entry already has.
    FlowKey ak;
    bool a_src_is_lo;
    make_key(pkt, d, ak, a_src_is_lo, false);
    int32_t apos = rte_hash_lookup_with_hash(h_, &ak, rte_hash_crc(&ak, sizeof ak, 0));
    if (apos >= 0) src_init = entries_[uint32_t(apos)].initiator_is_lo == a_src_is_lo;
  }
  e.initiator_is_lo = src_init ? src_is_lo : !src_is_lo;
  meta.flow = &e.state;
  meta.flow_first = true;
  meta.initiator_is_src = src_init;
}

}  // namespace amon

namespace amon {

void FlowTable::lookup_burst(const uint8_t* const* pkts, const Decoded* ds, const bool* want, unsigned n,
                             PacketMeta* metas) {
  FlowKey keys[kBurstMax];
  const void* kp[kBurstMax];
  hash_sig_t sigs[kBurstMax];
  bool lo[kBurstMax];
  unsigned idx[kBurstMax];
  int32_t pos[kBurstMax];
  unsigned m = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (!want[i]) continue;
    make_key(pkts[i], ds[i], keys[m], lo[m]);
    sigs[m] = rte_hash_crc(&keys[m], sizeof(FlowKey), 0);
    kp[m] = &keys[m];
    idx[m++] = i;
  }
  if (m == 0) return;
  st_.lookups += m;
  rte_hash_lookup_with_hash_bulk(h_, kp, sigs, m, pos);
  for (unsigned j = 0; j < m; ++j) {
    PacketMeta& meta = metas[idx[j]];
    if (pos[j] >= 0) {
      FlowEntry& e = entries_[uint32_t(pos[j])];
      if (meta.ts_ns > e.last_ns) e.last_ns = meta.ts_ns;
      note_tcp(e, ds[idx[j]], lo[j]);
      meta.flow = &e.state;
      meta.flow_first = false;
      meta.initiator_is_src = e.initiator_is_lo == lo[j];
      continue;
    }
    // A miss may be a flow an earlier packet of this burst just created.
    int32_t again = rte_hash_lookup_with_hash(h_, &keys[j], sigs[j]);
    if (again >= 0) {
      FlowEntry& e = entries_[uint32_t(again)];
      note_tcp(e, ds[idx[j]], lo[j]);
      meta.flow = &e.state;
      meta.flow_first = false;
      meta.initiator_is_src = e.initiator_is_lo == lo[j];
      continue;
    }
    insert(pkts[idx[j]], ds[idx[j]], keys[j], sigs[j], lo[j], meta.ts_ns, meta);
  }
}

}  // namespace amon
