// Heads split over TCP segments (an HTTP request or response head, a TLS
// ClientHello, a DNS-over-TCP message), followed off the packet path by
// the tools that read a capture's values with the plugins' own parsers:
// `amon audit` on the original capture, the offline pre-pass that preloads
// the echo tables. A head's value in its second segment is no value of
// either segment read alone. The packet path holds the segments themselves
// (engine/core/worker_path.h, HoldLimits); this keeps their bytes only.
//
// Bounded as the packet path is: the bytes of a head, its segments, the
// heads followed at once. A segment past a hole is kept in place (a late
// segment may fill the hole); one before the head, past a bound, or a
// direction that ends or goes quiet ends the head unfinished. What was
// whole from its first byte is then the caller's to read as a cut head
// (ProtoPacket::ends). Each outcome is counted.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace amon {

class SplitHeads {
 public:
  struct Limits {
    uint32_t heads = 4096;            // directions followed at once
    uint32_t bytes = 16384 + 5 + 64;  // per head: the packet path's bound (a full TLS record and some)
    uint32_t segments = 64;           // per head
    uint64_t timeout_ns = 10ULL * 1000000000ULL;  // capture time without a segment before a head is given up
  };
  struct Stats {
    uint64_t held = 0;          // heads followed past their first segment
    uint64_t completed = 0;     // ... read whole
    uint64_t unfinished = 0;    // ... ended first: the direction ended, a bound, a hole never filled, quiet too long
    uint64_t refused = 0;       // heads not followed: no room
    uint64_t out_of_order = 0;  // segments that came past a hole
    uint64_t outside = 0;       // segments before a head's start or past its bound (they end it)
  };

  // Readable bytes kept after a head's: a plugin's parse may hand it to
  // Hyperscan, which can read up to 64 bytes past the end of what it scans
  // (plugins/http/README.md, "Readable slack after the buffer").
  static constexpr uint32_t kSlack = 64;

  struct Head {
    std::vector<uint8_t> bytes;                        // from the head's first byte, kSlack more after its last
    uint32_t base = 0;                                 // the sequence number of that byte
    uint32_t contiguous = 0;                           // bytes whole from the first
    std::vector<std::pair<uint32_t, uint32_t>> segs;   // each segment's offset and length
    uint64_t last_ts = 0;
    uint32_t tag = 0;             // the caller's: who sent it, which protocol
    std::vector<uint64_t> marks;  // the caller's: its segments' records
  };

  SplitHeads() = default;
  explicit SplitHeads(const Limits& l) : lim_(l) {}

  // A direction of a flow: its addresses and ports in the order sent.
  static std::string key(const uint8_t* src, const uint8_t* dst, unsigned addr_len, uint16_t sport, uint16_t dport);

  Head* find(const std::string& k) {
    auto it = heads_.find(k);
    return it == heads_.end() ? nullptr : &it->second;
  }
  // Follows a head from the segment at sequence number `seq`; null when
  // there is no room (counted: the caller reads the segment alone).
  Head* start(const std::string& k, uint32_t seq, const uint8_t* p, uint32_t len, uint64_t ts);
  enum class Add : uint8_t {
    Grew,     // the whole part grew: read the head again
    Waiting,  // kept past a hole, or nothing new
    Outside,  // before the head or past a bound: it cannot be completed
  };
  Add add(Head& h, uint32_t seq, const uint8_t* p, uint32_t len, uint64_t ts);
  // The head leaves: read whole, or not.
  void end(const std::string& k, bool completed);
  // Heads without a segment for the timeout, as of `now`: fn(key, head)
  // for each, then they leave unfinished.
  template <class Fn>
  void expire(uint64_t now, Fn&& fn) {
    for (auto it = heads_.begin(); it != heads_.end();) {
      if (now > it->second.last_ts && now - it->second.last_ts > lim_.timeout_ns) {
        fn(it->first, it->second);
        ++st_.unfinished;
        it = heads_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Every head left (the capture ended): fn(key, head), then they leave unfinished.
  template <class Fn>
  void flush(Fn&& fn) {
    for (auto& [k, h] : heads_) fn(k, h), ++st_.unfinished;
    heads_.clear();
  }
  bool full() const { return heads_.size() >= lim_.heads; }
  size_t size() const { return heads_.size(); }
  const Stats& stats() const { return st_; }
  const Limits& limits() const { return lim_; }

 private:
  Limits lim_;
  Stats st_;
  std::unordered_map<std::string, Head> heads_;
};

}  // namespace amon
