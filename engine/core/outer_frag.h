// Fragments of an IP datagram (a plain TCP/UDP/ICMP datagram, or the outer
// datagram of a tunnel: GTP-U, VXLAN, Geneve, GRE, IP in IP...), collected
// until the datagram is whole so that its ports, its flow's roles and its
// application fields (or the packet a tunnel carries) are decided on the
// whole, as for any unfragmented packet, then cut back into the same
// fragments (doc/architecture.md, "IP fragments").
//
// Fragments of the outermost IP layer (no encapsulation decoded above them,
// no PPPoE, every byte captured) are collected, in whatever order they
// come; every other fragment keeps the per-fragment path. Collected
// fragments pin their mbufs, so datagrams, fragments per datagram and
// fragments in all are bounded, and a datagram not whole within the timeout
// (by packet time) is given up: its fragments then take the per-fragment
// path, which cuts or drops what it cannot see into (fail closed). Bytes
// given twice must agree (a duplicate, or an overlap that repeats the same
// bytes, is kept and written back as it came); bytes given twice that
// differ give the datagram up at once: which copy a host keeps is its own
// choice, so no one datagram is the one to anonymize.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "l2l4.h"

namespace amon {

struct OuterFragLimits {
  uint32_t datagrams = 256;         // datagrams collected at once, per worker
  uint32_t fragments = 64;          // fragments per datagram
  uint32_t held = 4096;             // fragments collected at once, per worker
  uint64_t timeout_ns = 1000000000ULL;
};

struct OuterFragStats {
  uint64_t fragments = 0;    // fragments collected
  uint64_t datagrams = 0;    // datagrams made whole and anonymized
  uint64_t failed = 0;       // datagrams given up, for any of the reasons below
  uint64_t timeout = 0;      // ... a fragment still missing at the timeout or the end of input
  uint64_t overlap = 0;      // ... bytes given twice that differ, or past the datagram's end
  uint64_t limit = 0;        // ... too many fragments, datagrams or held fragments; past 64 KiB
  uint64_t cut = 0;          // output fragments left out because the rewrite shortened the datagram
};

class OuterFrags {
 public:
  struct Frag {
    rte_mbuf* m;
    FragInfo fi;
    uint64_t ts;
  };
  struct Datagram {
    FragInfo key;            // the first fragment seen's (addresses, id, protocol)
    uint32_t total = 0;      // data bytes, known once the last fragment came
    uint32_t have = 0;       // data bytes collected; UINT32_MAX: some given twice (covered() counts)
    bool last = false;
    uint64_t deadline = 0;
    std::vector<Frag> frags;  // arrival order
  };
  enum class Add : uint8_t { NotOurs, Held, Whole, Failed };

  explicit OuterFrags(const OuterFragLimits& l = OuterFragLimits{}) : lim_(l) {}

  // A fragment: `start` says it may start a datagram (else only one being
  // collected takes it). Held/Whole/Failed: the collector took m; `idx`
  // names the datagram, which release() ends.
  Add add(rte_mbuf* m, const FragInfo& fi, bool start, uint64_t ts, uint32_t& idx);
  Datagram& datagram(uint32_t idx) { return dg_[idx]; }
  // Frees the slot; the caller has taken the fragments' mbufs.
  void release(uint32_t idx);
  // Datagrams past their deadline at `now_ns` (all with UINT64_MAX).
  void expired(uint64_t now_ns, std::vector<uint32_t>& out) const;
  uint64_t next_deadline() const { return next_deadline_; }
  uint32_t held() const { return held_; }
  bool empty() const { return active_.empty(); }
  // f(m) for the first fragment that came of each datagram being collected.
  template <class F>
  void each_first(F f) const {
    for (uint32_t i : active_)
      if (!dg_[i].frags.empty()) f(dg_[i].frags.front().m);
  }
  OuterFragStats& stats() { return st_; }
  const OuterFragStats& stats() const { return st_; }

  // A datagram given up at its deadline (or at the end of input).
  void timed_out() { ++st_.failed, ++st_.timeout; }

  // The whole datagram as one frame: the first fragment's link and IP
  // headers (lengths and fragment fields of an unfragmented datagram, the
  // IPv6 fragment header removed), then the data in order, and 64 bytes of
  // slack after it. Returns the header length (where the data starts).
  static uint32_t build(const Datagram& g, std::vector<uint8_t>& out);
  // Fragment `f` of `g` again, from the rewritten whole frame `w` (header
  // length `hlen`, `wlen` bytes): the rewritten link header and addresses,
  // the fragment's own IP header, fragment fields and data range, lengths
  // and checksum fixed. A rewrite that shortened the datagram to `dlen`
  // data bytes shortens the fragment holding its end (more fragments
  // cleared) and leaves out the ones after it (false).
  static bool refragment(const Datagram& g, const Frag& f, const uint8_t* w, uint32_t hlen, uint32_t dlen,
                         std::vector<uint8_t>& out);

 private:
  OuterFragLimits lim_;
  std::vector<Datagram> dg_;
  std::vector<uint32_t> free_, active_;
  uint32_t held_ = 0;
  // The data bytes the datagram's fragments cover (each once).
  uint32_t covered(const Datagram& g);
  std::vector<std::pair<uint32_t, uint32_t>> spans_;  // covered()'s scratch
  // The bytes `a` and `b` both give are the same.
  static bool agree(const Frag& a, const FragInfo& b, const rte_mbuf* bm);
  uint64_t next_deadline_ = UINT64_MAX;
  OuterFragStats st_;
};

}  // namespace amon
