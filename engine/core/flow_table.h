// Per-worker bidirectional flow table. Both directions of a flow map to one
// entry (the key orders the endpoints), so the dispatcher's symmetric hash
// and this table agree on what "one flow" is. Single-threaded by design: each
// worker owns its table and no lock is taken on the packet path.
//
// Layout (why not rte_hash): a lookup touches one 64-byte bucket and the
// first line or two of one entry, and nothing else. rte_hash went bucket ->
// key store slot -> our entry array: three scattered lines per packet, each a
// likely cache and TLB miss. Buckets hold 8 (16-bit tag, entry index) pairs;
// the entry holds the full key next to the flow's state, so the key compare
// and the state update hit the same lines. A full bucket spills into the
// next ones; the home bucket counts its spilled entries and how far they
// went, so lookups probe further only where something spilled, and removal
// needs neither tombstones nor moving entries (FlowState pointers stay valid).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rte_hash_crc.h>

#include "l2l4.h"
#include "packet.h"

namespace amon {

// A packet carried in a tunnel keys on its own 5-tuple and the tunnel
// (Decoded::tun_ctx), so that tenants or subscribers with overlapping
// address spaces never share a flow: both address words are XORed with a
// 128-bit spread of the context and pad[0] is 1. Equal inner addresses in
// two tunnels always give different keys; two different address pairs could
// only meet if their XOR equalled the contexts' on both endpoints at once
// (2^-128 for unrelated traffic). The key is compared, never read back as
// addresses.
struct FlowKey {
  uint8_t lo[16];
  uint8_t hi[16];
  uint16_t lo_port, hi_port;
  uint8_t proto, family;
  uint8_t pad[2];
};
static_assert(sizeof(FlowKey) == 40);

// What a lookup reads (key, times, flags) comes first: 56 bytes, so one or
// two cache lines; FlowState follows and is only touched by policies that
// use it.
struct FlowEntry {
  FlowKey key{};
  uint64_t last_ns = 0;
  uint32_t hash = 0;   // of the key: home bucket, tag (unused entry: the next unused one)
  bool initiator_is_lo : 1 = true;  // the client end, by evidence (see FlowTable::insert)
  bool used : 1 = false;
  // The policy generation its FlowState's decisions were taken under
  // (WorkerPath::refresh_flow); 0: none yet.
  uint8_t gen = 0;
  uint8_t proto = 0;
  uint8_t fin : 3 = 0;     // bit 0: FIN from lo, bit 1: FIN from hi, bit 2: RST
  // No evidence said which end is the client: initiator_is_lo is only the
  // first packet's source.
  uint8_t roles_uncertain : 1 = 0;
  // The first packet came from lo; a packet from the other end has been seen
  // (an answered flow: kept ahead of one-way ones when the table is full).
  uint8_t first_from_lo : 1 = 0;
  uint8_t two_way : 1 = 0;
  FlowState state;
};
// Entries start on a cache line (after the 64-byte buckets) and are a whole
// number of lines, so what a lookup reads is always one line.
static_assert(offsetof(FlowEntry, state) <= 64 && sizeof(FlowEntry) % 64 == 0);

// Idle timeouts by kind of flow; a TCP flow that saw FIN both ways or a RST
// is kept only `closed` longer (late retransmissions, the last ACK).
struct FlowTimeouts {
  uint64_t tcp = 300ULL * 1000000000ULL;
  uint64_t udp = 60ULL * 1000000000ULL;
  uint64_t other = 30ULL * 1000000000ULL;
  uint64_t closed = 5ULL * 1000000000ULL;
};

struct FlowTableStats {
  uint64_t lookups = 0, created = 0, expired = 0, evicted = 0, full = 0, closed = 0;
  uint64_t roles_uncertain = 0;  // flows created with no evidence of which end is the client
  // Of the evicted: answered (two-way) flows, which go only when a whole
  // sample of the table is answered flows; and flows created again after
  // their eviction that took their roles from the eviction memory.
  uint64_t evicted_two_way = 0, roles_recalled = 0;
};

// Ports a server listens on: the system range and registered services that
// keep a fixed port (as Zeek's likely_server_ports), against the ephemeral
// ports clients take.
bool likely_server_port(uint16_t port);

class FlowTable {
 public:
  // commit: write the whole table now, so no page faults while packets wait
  // (a live link). Otherwise the table grows by use: entries are handed out
  // lowest index first and only the pages of flows seen are touched (an
  // offline run of a file with few flows needs no more).
  FlowTable(const std::string& name, uint32_t capacity, const FlowTimeouts& timeouts, int socket,
            bool commit = true);
  ~FlowTable();
  FlowTable(const FlowTable&) = delete;
  FlowTable& operator=(const FlowTable&) = delete;

  // Finds or creates the flow of a decoded IP packet. Fills meta's flow,
  // initiator_is_src and flow_first. Never fails: a full table evicts.
  void lookup(const uint8_t* pkt, const Decoded& d, uint64_t ts_ns, PacketMeta& meta);

  // The same for up to kBurstMax packets at once: buckets and then entries
  // are prefetched for the whole burst before the first is used, so the
  // cache misses overlap. want[i] false skips packet i.
  static constexpr unsigned kBurstMax = 64;
  void lookup_burst(const uint8_t* const* pkts, const Decoded* ds, const bool* want, unsigned n,
                    PacketMeta* metas);
  // lookup_burst with its first pass (key, hash, prefetch of the home
  // bucket) done by the caller per packet as it decodes them, so the
  // bucket lines have the rest of the burst's decoding to arrive: stage(i)
  // for each wanted packet i of the burst, then lookup_staged.
  void stage(unsigned i, const uint8_t* pkt, const Decoded& d);
  void lookup_staged(const uint8_t* const* pkts, const Decoded* ds, const bool* want, unsigned n,
                     PacketMeta* metas);

  // Calls f(FlowEntry&) on every flow in use.
  template <typename F>
  void each(F&& f) {
    for (uint32_t i = 0; i < cap_; ++i)
      if (entries_[i].used) f(entries_[i]);
  }

  // Reclaims idle flows, visiting at most `budget` entries.
  void expire(uint64_t now_ns, uint32_t budget);

  // The canonical key: endpoints ordered so both directions give one key.
  // with_ports=false keys on addresses and protocol only (what fragments share).
  static void make_key(const uint8_t* pkt, const Decoded& d, FlowKey& k, bool& src_is_lo, bool with_ports = true);

  const FlowTableStats& stats() const { return st_; }
  uint32_t size() const { return size_; }
  uint32_t capacity() const { return cap_; }
  size_t memory_bytes() const;

 private:
  struct alignas(64) Bucket {
    static constexpr unsigned kSlots = 8;
    uint16_t tag[kSlots];  // 0: free slot
    uint32_t idx[kSlots];  // entry index
    uint8_t spilled;       // entries whose home is this bucket stored in a later one
    uint8_t reach;         // buckets after this one that hold them (0: none)
    uint8_t pad[14];
  };
  static_assert(sizeof(Bucket) == 64);
  // How far an entry may spill from its home bucket. With at most 4 entries
  // per bucket on average at full capacity, a bucket overflows rarely and by
  // little; beyond this the insert evicts instead.
  static constexpr unsigned kMaxReach = 16;

  // make_key, also returning the key's hash (CRC32-C of its five words).
  static uint32_t key_and_hash(const uint8_t* pkt, const Decoded& d, FlowKey& k, bool& src_is_lo, bool with_ports);
  // The home bucket takes the hash's high bits (multiply-shift: any bucket
  // count, no power of two needed), the tag its low bits.
  uint32_t home(uint32_t h) const { return uint32_t((uint64_t(h) * nb_) >> 32); }
  uint32_t next(uint32_t b) const { return b + 1 == nb_ ? 0 : b + 1; }
  static uint16_t tag_of(uint32_t h) { return uint16_t(h | 1); }
  FlowEntry* find(const FlowKey& k, uint32_t h);
  // find, given the tag matches `hits` (tag_hits) already taken in home bucket bi.
  FlowEntry* find_from(const FlowKey& k, uint32_t h, uint32_t bi, uint32_t hits);
  void remove(uint32_t idx);
  void insert(const uint8_t* pkt, const Decoded& d, const FlowKey& k, uint32_t h, bool src_is_lo,
              uint64_t ts_ns, PacketMeta& meta);
  bool place(uint32_t h, uint32_t idx);
  // Fetches what insert() reads of the staged packet i (lookup_staged).
  void prefetch_evidence(const uint8_t* pkt, const Decoded& d, unsigned i);
  uint32_t oldest_in_home(uint32_t h, uint64_t now_ns) const;
  void evict_one(uint64_t now_ns);
  // Removes a flow for room (cls: evict_class), counting it and keeping its
  // roles in the eviction memory.
  void release(uint32_t idx, unsigned cls);
  // What a full table gives up first (lower goes first): idle past its
  // timeout or closed, then one-way (a spoofed SYN, an unanswered
  // datagram), then answered flows; the older first within a class.
  unsigned evict_class(const FlowEntry& e, uint64_t now_ns) const {
    if (now_ns > e.last_ns + timeout_of(e)) return 0;
    return e.two_way ? 2 : 1;
  }
  // Roles of evicted answered flows whose roles came from evidence, by key
  // fingerprint, direct-mapped: the flow created again when the evicted
  // one's next packet comes keeps its client (a wrong guess would give the
  // client's address the server's treatment). A lost slot only falls back
  // to the usual evidence, then to roles unknown (both ends protected).
  static constexpr unsigned kRecallSlots = 1u << 14;
  std::vector<uint64_t> recall_ = std::vector<uint64_t>(kRecallSlots);
  // Some slot of recall_ was written: until then a new flow does not read
  // its (empty) slot, a cache miss per packet under a flood of one-way flows.
  bool recall_any_ = false;
  static uint64_t key_fp(const FlowKey& k, uint32_t h) {
    return (uint64_t(rte_hash_crc(&k, sizeof k, 0x5bd1e995)) << 32 | h) | 2;
  }
  void hit(FlowEntry& e, const Decoded& d, bool src_is_lo, uint64_t ts_ns, PacketMeta& meta) {
    if (ts_ns > e.last_ns) e.last_ns = ts_ns;
    e.two_way |= e.first_from_lo != src_is_lo;
    note_tcp(e, d, src_is_lo);
    meta.flow = &e.state;
    meta.flow_first = false;
    meta.initiator_is_src = e.initiator_is_lo == src_is_lo;
    meta.roles_uncertain = e.roles_uncertain;
  }

  // Both arrays live in anonymous memory advised for transparent huge pages
  // (CPU-only data: it needs no DMA-able EAL memory, and EAL's --no-huge
  // memory is a shared memfd that THP does not cover).
  Bucket* buckets_ = nullptr;
  FlowEntry* entries_ = nullptr;
  size_t map_bytes_ = 0;
  void* map_ = nullptr;
  uint32_t nb_ = 0;
  // Freed entries form a stack linked through their `hash` field; entries
  // at and above fresh_ were never used (zero pages until touched).
  static constexpr uint32_t kNone = UINT32_MAX;
  uint32_t free_head_ = kNone;
  uint32_t fresh_ = 0;
  uint32_t cap_, size_ = 0, sweep_pos_ = 0, evict_pos_ = 0, evict_step_ = 1;
  // Flows in the order they were made (entry index << 32 | key hash), so a
  // full table gives up its oldest one-way flow by reading one entry, not a
  // sample of 8 to 64 (each line a cache miss under a flood of one-packet
  // flows). Positions whose entry has been answered, freed or reused (its
  // hash differs) are skipped; the ring overwrites its oldest position.
  std::unique_ptr<uint64_t[]> made_;
  uint32_t made_mask_ = 0, made_head_ = 0, made_tail_ = 0;
  void note_made(uint32_t idx, uint32_t h) {
    if (made_tail_ - made_head_ > made_mask_) ++made_head_;
    made_[made_tail_++ & made_mask_] = uint64_t(idx) << 32 | h;
  }
  // Releases the oldest one-way flow of the ring; false when a few
  // positions gave none.
  bool evict_oldest_one_way(uint64_t now_ns);
  // An entry to use: a freed one, else the next never used; kNone when full.
  uint32_t spare() const { return free_head_ != kNone ? free_head_ : fresh_ < cap_ ? fresh_ : kNone; }
  // Flows of UDP keyed without ports (IP fragments'): an unfragmented UDP
  // packet of a new flow looks for its fragments' entry only while there
  // is one, so a datagram flood does not pay a bucket miss per packet for
  // a lookup that cannot succeed.
  uint32_t portless_udp_ = 0;
  static bool portless_udp(const FlowKey& k) { return k.proto == kProtoUdp && !k.lo_port && !k.hi_port; }
  FlowTimeouts to_;
  uint64_t timeout_of(const FlowEntry& e) const {
    if ((e.fin & 3) == 3 || (e.fin & 4)) return to_.closed;
    return e.proto == 6 ? to_.tcp : e.proto == 17 ? to_.udp : to_.other;
  }
  static bool held(const FlowEntry& e) { return e.state.hold[0] | e.state.hold[1]; }
  static void note_tcp(FlowEntry& e, const Decoded& d, bool src_is_lo) {
    if (d.l4_proto != 6 || !d.l4_hdr_len) return;
    if (d.tcp_flags & 0x01) e.fin |= src_is_lo ? 1 : 2;
    if (d.tcp_flags & 0x04) e.fin |= 4;
  }
  FlowTableStats st_;
  // Endpoints (address, port, protocol) seen accepting a connection (the
  // SYN's destination, the SYN-ACK's source), by fingerprint, direct-mapped:
  // a later flow of theirs seen mid-way still knows its server. A lost slot
  // only falls back to the port rule.
  static constexpr unsigned kServerSlots = 1u << 14;
  std::vector<uint64_t> servers_ = std::vector<uint64_t>(kServerSlots);
  void note_server(uint64_t fp) { servers_[fp % kServerSlots] = fp; }

 public:
  static uint64_t endpoint_fp(const uint8_t* addr, unsigned alen, uint16_t port, uint8_t proto);
  // An endpoint (endpoint_fp) seen accepting a connection.
  bool seen_server(uint64_t fp) const { return servers_[fp % kServerSlots] == fp; }
  // PPTP's GRE between two ends takes the roles of their control
  // connection: the end that accepted it on TCP 1723 is the server, the
  // other its client. f(client address, its length, client is the outer
  // source) for each decoded PPTP GRE layer whose roles that tells.
  template <class F>
  void pptp_clients(const uint8_t* data, const Decoded& d, F&& f) const {
    for (int i = 0; i < d.n_encap; ++i) {
      const EncapLayer& L = d.encap[i];
      if (L.kind != Encap::Gre || !L.gre_v1) continue;
      const unsigned al = L.ip_version == 4 ? 4u : 16u;
      const uint32_t at = L.l3_off + (L.ip_version == 4 ? 12u : 8u);
      if (at + 2 * al > d.cap_len) continue;
      const uint8_t* a = data + at;
      const bool src_srv = seen_server(endpoint_fp(a, al, 1723, kProtoTcp));
      const bool dst_srv = seen_server(endpoint_fp(a + al, al, 1723, kProtoTcp));
      if (src_srv != dst_srv) f(dst_srv ? a : a + al, al, dst_srv);
    }
  }

 private:
  struct Staged {
    FlowKey keys[kBurstMax];
    uint32_t hs[kBurstMax], homes[kBurstMax], hits[kBurstMax];
    bool lo[kBurstMax];
  } st_b_;
};

// Symmetric flow hash used to pick a worker (same value both directions).
uint32_t symmetric_flow_hash(const uint8_t* pkt, const Decoded& d);

}  // namespace amon
