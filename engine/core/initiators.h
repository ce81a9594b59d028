// Hosts seen initiating flows, learnt in input order by the one stage that
// sees every packet in that order: the dispatcher with several workers, the
// worker itself with one (the same learner over the same order, so the same
// answers). Each packet then carries, as of its place in the input, whether
// its source and its destination were seen initiating a flow
// (PacketMeta::initiating), which a policy without `clients` needs to tell a
// user that also accepts connections from a server (doc/architecture.md,
// "Roles without clients"). Learnt only while some consumer's program asks
// for it (Program::learns_initiators).
//
// Live, workers polling their own RSS queues see only their share of the
// input, in no common order: they share one log (and the dispatcher's, for
// what it dispatches), its slots read and written with relaxed atomics, so a
// host's flows on one queue teach every worker. Runs are not reproduced live,
// so the order between them does not matter there.
//
// Bounded (1 MiB in all): kFlows recent flows, direct-mapped 64-bit
// fingerprints, and kHosts initiating hosts in sets of kWays (one cache line
// each), each entry a host's fingerprint and how many flows it was seen
// initiating (saturating at 15). A host new to its set takes an empty entry,
// else one of the lowest count, looked for from a way its fingerprint picks:
// a one-off's (count 1) outright; when every entry of the set is a repeat
// initiator's, the chosen one's count drops by one instead and the newcomer
// is not kept. So a flood of one-off sources (spoofed SYNs or datagrams)
// churns the one-off entries alone: a host seen initiating several flows
// stays known through it, bar at most one per set that was full of repeat
// initiators. A flow forgotten by a collision and seen again mid-way counts
// as new (a datagram's sender is then taken for its initiator: only more
// protection); a host forgotten is a server again until it initiates another
// flow.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "l2l4.h"

namespace amon {

class InitiatorLog {
 public:
  static constexpr uint8_t kSrc = 1, kDst = 2;  // PacketMeta::initiating
  static constexpr size_t kFlows = 1u << 16, kHosts = 1u << 16, kWays = 8;

  // Notes what the packet says of who initiates (a TCP SYN's sender, a
  // SYN-ACK's receiver, an echo request's sender; the first packet seen of
  // another flow: its end on an ephemeral port against a likely server
  // port, else its sender; nothing for a TCP segment mid-way without such
  // ports, an ICMP error or a later fragment), then says which of the
  // packet's two ends were seen initiating so far (kSrc | kDst).
  // `cap`: the bytes captured of `pkt`.
  uint8_t observe(const uint8_t* pkt, uint32_t cap, const Decoded& d);
  // Fetches the slots observe() will read for this packet (its flow's and
  // its two hosts'), so that a burst's observations, made after the whole
  // burst is decoded, find them in cache: under a flood of new flows each
  // is a miss.
  void prefetch(const uint8_t* pkt, uint32_t cap, const Decoded& d) const;

  size_t memory_bytes() const { return flows_.size() * sizeof(uint64_t) + hosts_.size() * sizeof(HostSet); }

 private:
  // An entry: the fingerprint's upper 60 bits (bit 4 set, so never 0) and
  // the count in the low 4 (0: empty).
  static constexpr uint64_t kCount = 0xf;
  struct alignas(64) HostSet {
    std::atomic<uint64_t> way[kWays];
  };
  static uint64_t tag(uint64_t host) { return (host & ~kCount) | 0x10; }
  const HostSet& set_of(uint64_t host) const { return hosts_[(host >> 32) % (kHosts / kWays)]; }
  HostSet& set_of(uint64_t host) { return hosts_[(host >> 32) % (kHosts / kWays)]; }

  std::vector<std::atomic<uint64_t>> flows_ = std::vector<std::atomic<uint64_t>>(kFlows);
  std::vector<HostSet> hosts_ = std::vector<HostSet>(kHosts / kWays);
  bool known(uint64_t host) const;
  // Notes that the host initiated a flow; `fresh`: a flow not seen before
  // (a SYN-ACK or a retransmitted SYN of a flow already noted counts once).
  // Whether the host is known now.
  bool learn(uint64_t host, bool fresh);
  // Whether the flow was seen before; notes it.
  bool seen_flow(uint64_t fp);
  // The packet's host fingerprints and its flow's (0: none); false when the
  // packet says nothing (no IP, addresses not captured).
  struct Prints {
    uint64_t src, dst, flow;
  };
  static bool prints(const uint8_t* pkt, uint32_t cap, const Decoded& d, Prints& p);
};

}  // namespace amon
