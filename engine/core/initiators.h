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
// Bounded: two direct-mapped arrays of 64-bit fingerprints, kFlows recent
// flows and kHosts initiating hosts (1 MiB in all). A flow forgotten by a
// collision and seen again mid-way counts as new (a datagram's sender is
// then taken for its initiator: only more protection); a host forgotten
// is a server again until it initiates another flow.
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
  static constexpr size_t kFlows = 1u << 16, kHosts = 1u << 16;

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

  size_t memory_bytes() const { return (flows_.size() + hosts_.size()) * sizeof(uint64_t); }

 private:
  std::vector<std::atomic<uint64_t>> flows_ = std::vector<std::atomic<uint64_t>>(kFlows);
  std::vector<std::atomic<uint64_t>> hosts_ = std::vector<std::atomic<uint64_t>>(kHosts);
  bool known(uint64_t host) const { return hosts_[host % kHosts].load(std::memory_order_relaxed) == host; }
  void learn(uint64_t host) { hosts_[host % kHosts].store(host, std::memory_order_relaxed); }
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
