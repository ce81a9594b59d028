// The per-consumer packet program: what a compiled policy does to one packet.
//
// A Program is built once per policy (start-up or reload) and shared
// read-only by all workers; each worker instantiates a ProgramInstance that
// owns the per-worker state of its actions (Crypto-PAn caches, hash
// contexts), so the packet path takes no lock and allocates nothing.
//
// The engine decodes a packet once (Decoded), looks up its flow, and calls
// ProgramInstance::process() once per consumer on that consumer's writable
// copy. Rewrites work by offset; length changes (cut) come last and every
// length and checksum is fixed before the packet leaves.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "keyed_hash.h"
#include "l2l4.h"
#include "zanon.h"
#include "policy.h"

namespace amon {

inline constexpr int kMaxConsumers = 16;
// z-anonymity decisions are cached per flow in one 64-bit mask: consumer
// index * kZSlotsPerConsumer + slot.
inline constexpr int kZSlotsPerConsumer = 4;

// Per-flow state the engine's flow table keeps for the runtime.
struct FlowState {
  uint64_t zdecided = 0;  // bit set once the slot's decision was taken for this flow
  uint64_t zreleased = 0; // bit set when the value was released (not z-private)
};

// What the engine knows about a packet besides its bytes.
struct PacketMeta {
  uint64_t ts_ns = 0;
  bool initiator_is_src = true;  // flow initiator (SYN sender / first seen) is this packet's source
  bool flow_first = false;       // first packet of the flow in this worker
  FlowState* flow = nullptr;     // null for non-IP frames
};

// Counters of one consumer in one worker; the engine sums them.
struct ConsumerCounters {
  uint64_t in = 0, out = 0, dropped = 0, filtered = 0;
  uint64_t shared = 0, copied = 0;       // zero-copy deliveries vs rewritten copies
  uint64_t err_cut = 0, err_drop = 0;    // fail-closed: decode errors cut/dropped
  uint64_t unknown_drop = 0, unknown_cut = 0, unknown_keep = 0;
  uint64_t tunnel_cut = 0, icmp_quote_cut = 0;
  uint64_t policy_drop = 0;              // drop() rules
  uint64_t zanon_hidden = 0, zanon_released = 0;
  std::vector<uint64_t> rule_hits;       // by Rule::index
};

enum class Verdict : uint8_t { Forward, Drop, Filtered };

// Services shared by all workers (built by the engine).
struct SharedServices {
  zanon::Store* zstore = nullptr;
  std::array<uint8_t, 16> user_hash_key{};  // keys the hash of identifiers stored by the z-anon store
};

class Program;
class ProgramInstance;

// Everything about one action call that does not change per packet.
struct ActionPlan;

class Program {
 public:
  // Throws std::runtime_error with a message on an impossible combination the
  // checker could not see (it should have).
  Program(std::shared_ptr<const dsl::Policy> policy, int consumer_index, SharedServices* services);
  ~Program();

  const dsl::Policy& policy() const { return *policy_; }
  bool identity() const { return identity_; }
  bool protects_addresses() const { return protects_addresses_; }
  size_t rule_count() const { return policy_->rules.size(); }
  int consumer_index() const { return consumer_; }

  std::unique_ptr<ProgramInstance> instantiate() const;

 private:
  friend class ProgramInstance;
  std::shared_ptr<const dsl::Policy> policy_;
  int consumer_;
  SharedServices* services_;
  bool identity_ = true;
  bool protects_addresses_ = false;
  bool protects_anything_ = false;
  std::vector<std::unique_ptr<ActionPlan>> plans_;  // one per rule (index = Rule::index), plus payload_default
  // Rules per position, in source order (indexes into policy_->rules).
  std::vector<uint32_t> mac_src_, mac_dst_, addr_rules_, payload_rules_;
  int payload_default_plan_ = -1;
  std::vector<uint32_t> zslot_rule_;  // rule index of each z-anonymity slot
};

class RtAction;

class ProgramInstance {
 public:
  explicit ProgramInstance(const Program& p);
  ~ProgramInstance();

  // Applies the policy to `buf` (a writable copy of the packet, `cap`
  // captured bytes of a `wire`-byte frame). May shorten cap/wire (cut).
  Verdict process(uint8_t* buf, uint32_t& cap, uint32_t& wire, const Decoded& d, const PacketMeta& m,
                  ConsumerCounters& c);

  // Decides the flow's z-anonymity slots for this consumer at the flow's
  // first packet (called by the engine once per flow, before process()).
  const Program& program() const { return prog_; }

 private:
  uint64_t user_of(const uint8_t* client, uint32_t alen);
  void decide_flow(const uint8_t* server, const uint8_t* client, uint32_t alen, const PacketMeta& m,
                   ConsumerCounters& c);

  const Program& prog_;
  std::vector<std::unique_ptr<RtAction>> actions_;  // parallel to prog_.plans_
  KeyedHash uhash_;
  zanon::Scope zscope_;
};

}  // namespace amon
