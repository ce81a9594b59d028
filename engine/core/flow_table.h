// Per-worker bidirectional flow table. Both directions of a flow map to one
// entry (the key orders the endpoints), so the dispatcher's symmetric hash
// and this table agree on what "one flow" is. Single-threaded by design: each
// worker owns its table and no lock is taken on the packet path.
#pragma once

#include <rte_hash.h>

#include <cstdint>
#include <string>
#include <vector>

#include "l2l4.h"
#include "runtime.h"

namespace amon {

struct FlowKey {
  uint8_t lo[16];
  uint8_t hi[16];
  uint16_t lo_port, hi_port;
  uint8_t proto, family;
  uint8_t pad[2];
};
static_assert(sizeof(FlowKey) == 40);

struct FlowEntry {
  FlowState state;
  uint64_t last_ns = 0;
  bool initiator_is_lo = true;
  bool used = false;
  uint8_t proto = 0;
  uint8_t fin = 0;     // bit 0: FIN from lo, bit 1: FIN from hi, bit 2: RST
};

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
};

class FlowTable {
 public:
  FlowTable(const std::string& name, uint32_t capacity, const FlowTimeouts& timeouts, int socket);
  ~FlowTable();
  FlowTable(const FlowTable&) = delete;
  FlowTable& operator=(const FlowTable&) = delete;

  // Finds or creates the flow of a decoded IP packet. Fills meta's flow,
  // initiator_is_src and flow_first. Never fails: a full table evicts.
  void lookup(const uint8_t* pkt, const Decoded& d, uint64_t ts_ns, PacketMeta& meta);

  // The same for up to kBurstMax packets at once: rte_hash's bulk lookup
  // overlaps the cache misses of the whole burst. want[i] false skips packet i.
  static constexpr unsigned kBurstMax = 64;
  void lookup_burst(const uint8_t* const* pkts, const Decoded* ds, const bool* want, unsigned n,
                    PacketMeta* metas);

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
  void remove(uint32_t idx);
  void insert(const uint8_t* pkt, const Decoded& d, const FlowKey& k, hash_sig_t sig, bool src_is_lo,
              uint64_t ts_ns, PacketMeta& meta);
  void evict_one(uint64_t now_ns);

  rte_hash* h_ = nullptr;
  std::vector<FlowEntry> entries_;  // indexed by rte_hash's key position
  uint32_t cap_, size_ = 0, sweep_pos_ = 0;
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
};

// Symmetric flow hash used to pick a worker (same value both directions).
uint32_t symmetric_flow_hash(const uint8_t* pkt, const Decoded& d);

}  // namespace amon
