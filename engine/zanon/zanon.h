// The shared z-anonymity store (see doc/zanon.md for the reasoning).
//
// A value of a quasi-identifier observed at time t is z-private if fewer than z
// distinct users were seen with it in (t - dt, t]; z-private values are hidden,
// the others released. One Store serves every worker thread and every consumer:
// it keeps, per value, the zmax most recent distinct users with their last-seen
// times, which answers "is the z-th most recent user newer than t - dt?" exactly
// for every z <= zmax and dt <= max_dt.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "siphash.h"

namespace amon::zanon {

// A value class (domain, server-addr, user-agent, ...): values of one class are
// counted together wherever they appear (a name in DNS, SNI or Host is one
// quasi-identifier).
using ClassId = uint16_t;
// The kind of identifier that counts as "one user" (ip.client, ...). Counts
// made with different identifiers are different facts, so the kind is part of
// the key.
using KindId = uint16_t;

struct Scope {
  ClassId cls = 0;
  KindId kind = 0;
};

// One consumer's test: released iff at least z distinct users in (t - dt, t].
struct ZParams {
  uint32_t z = 10;
  uint64_t dt_ns = 3600ULL * 1000000000ULL;
};

struct Config {
  // Values the table must be able to track at once; the table is allocated
  // for this up front (plus placement slack) and never grows.
  size_t max_values = size_t{1} << 20;
  // Largest z of any policy that will use the store (1..Store::kMaxZ). A
  // consumer asking with a larger z is always hidden (the store cannot know).
  uint32_t zmax = 10;
  // Largest dt of any policy. State older than max_dt (+ max_reorder) is
  // reclaimed; a consumer with a larger dt may see values hidden that an
  // unbounded memory would release, never the reverse.
  uint64_t max_dt_ns = 3600ULL * 1000000000ULL;
  // How far a timestamp may lag behind the newest one already observed and
  // still get the exact answer (workers interleave, batches are not sorted).
  // Older observations are still safe: they can only be hidden more.
  uint64_t max_reorder_ns = 1000000000ULL;
  // Lock shards, a power of two; 0 picks 64 x hardware threads (min 64).
  uint32_t shards = 0;
  // Lanes (1..kMaxLanes): each entry keeps one user list per lane, each on
  // its own cache lines under its own lock, and a thread observes into its
  // lane. With a lane per observing thread a popular, released value's
  // lines are not written by two cores; a decision its own lane cannot
  // release takes every lane's lock and reads every list, so lanes pay only
  // when most observations are released (doc/zanon.md, "Concurrency").
  // Decisions are the same for any number of lanes; an entry costs one user
  // list more per lane.
  uint32_t lanes = 1;
  // Back the table with transparent huge pages: fewer TLB misses on random
  // probes once it is full, but the first value in each 2 MiB region
  // faults (and zeroes) all of it. Off for a table sized as an upper bound
  // that will stay sparse (offline, sized from the input): then a value
  // costs the 4 KiB pages it touches.
  bool huge_pages = true;
  // Secret for value fingerprints and placement; all zero draws a random key
  // (the store lives in memory only, so fingerprints need not be stable).
  std::array<uint8_t, 16> key{};
  // Shared with other stores (doc/zanon.md, "Several boxes"): every value is
  // identified by its 128-bit keyed hash alone, computed from the names of
  // its class and kind (not their ids, which depend on registration order),
  // so two stores with the same key agree on it and can exchange
  // observations (Obs). Needs a key (all zero is refused).
  bool shared = false;
  // Shared: received observations ahead of this store's time wait (at most
  // this many; more are dropped and counted, which only hides more).
  size_t max_pending = size_t{1} << 20;
  // Shared: observations that changed this store, waiting for the sharing
  // client (at most this many; a full outbox drops and counts).
  size_t outbox = size_t{1} << 16;
};

// One observation as stores exchange it: the value's keyed hash (scope
// included), the user's keyed hash, the time. Nothing in clear.
struct Obs {
  uint64_t h_lo = 0, h_hi = 0;
  uint64_t user = 0;
  uint64_t t_ns = 0;
};

// A value ready for the store: hashed once, reusable for several calls (the
// fallback path queries and observes the same value). `bytes` is not copied;
// it must stay valid while the Key is used.
struct Key {
  Scope scope;
  std::span<const uint8_t> bytes;
  Hash128 h;  // SipHash-2-4-128(store key, scope || bytes)
};

struct Stats {
  uint64_t values_tracked = 0;   // occupied entries now
  uint64_t capacity = 0;         // entries the table has room for
  uint64_t table_bytes = 0;      // all memory the table allocated
  uint64_t bytes_per_entry = 0;  // table_bytes / capacity
  uint64_t observations = 0;
  uint64_t released = 0;         // per (observation, consumer) decision
  uint64_t hidden = 0;
  uint64_t inserts = 0;          // new values entered
  uint64_t fingerprinted = 0;    // of which stored as a 128-bit fingerprint
  uint64_t evictions = 0;        // live values dropped to make room
  // New values not admitted: their bucket pair was full and the doorkeeper
  // had not seen them before (doc/zanon.md, "Admission under churn"). Each
  // such occurrence is decided as a value's first: one user.
  uint64_t refused = 0;
  uint64_t expirations = 0;      // entries reclaimed for age (on access or sweep)
  uint64_t relocations = 0;      // entries moved to their other bucket to make room
  uint64_t sweeps = 0;           // sweep() calls
  // Shared stores only.
  uint64_t outbox_queued = 0;    // local observations that changed the store, queued for others
  uint64_t outbox_dropped = 0;   // of which dropped on a full outbox
  uint64_t received = 0;         // observations handed to receive()
  uint64_t received_applied = 0; // of which counted (once their time had come)
  uint64_t received_dropped = 0; // of which dropped: too many waiting
  uint64_t pending = 0;          // waiting now for their time
};

class Store {
 public:
  static constexpr uint32_t kMaxZ = 64;
  static constexpr uint32_t kMaxLanes = 16;
  // Values up to this many bytes are stored and compared verbatim; longer ones
  // by their 128-bit fingerprint.
  static constexpr size_t kInlineBytes = 64;

  explicit Store(const Config& cfg);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Setup-time registries (mutex-protected, not for the packet path). The same
  // name always yields the same id; throws std::length_error past 65535.
  ClassId class_id(std::string_view name);
  KindId kind_id(std::string_view name);
  std::string class_name(ClassId id) const;
  std::string kind_name(KindId id) const;

  Key key(Scope scope, std::span<const uint8_t> value) const noexcept;
  Key key(Scope scope, std::string_view value) const noexcept;

  // Starts loading the table rows `k` will probe. A worker that holds a burst
  // of packets calls this a few packets ahead of observe() so the misses of
  // several values overlap. Optional; no effect on results.
  void prefetch(const Key& k) const noexcept;

  // Counts one occurrence of `k` by `user` (an already keyed 64-bit hash of
  // the user identifier; the store never sees clear addresses) at t_ns, then
  // decides for every consumer: released_out[i] is true iff consumers[i]
  // releases the value. released_out.size() must be >= consumers.size().
  // Returns how many consumers release.
  size_t observe(const Key& k, uint64_t user, uint64_t t_ns, std::span<const ZParams> consumers,
                 std::span<bool> released_out) noexcept;
  // Single-consumer form; true = released.
  bool observe(const Key& k, uint64_t user, uint64_t t_ns, ZParams consumer) noexcept;

  // The calling thread observes into `lane` (modulo the configured lanes)
  // from now on. Without it a thread gets the next lane on its first
  // observation. Which lane a thread uses never changes a decision, only
  // which cache lines it writes.
  void bind_lane(unsigned lane) noexcept;

  // Distinct users seen with `k` after t_ns - dt_ns (capped at zmax), without
  // counting anything. 0 for an unknown value.
  uint32_t count_recent(const Key& k, uint64_t t_ns, uint64_t dt_ns) const noexcept;

  // Reclaims entries whose newest user is older than now_ns - max_dt -
  // max_reorder, visiting at most `budget` buckets (8 entries each) from where
  // the previous call stopped. For the control thread, off the packet path.
  // Returns the number of entries reclaimed.
  size_t sweep(uint64_t now_ns, size_t budget) noexcept;

  // Shared stores: observations from other stores, counted with their own
  // times. One whose time is not before the newest time this store has
  // decided at waits until a local observation (or apply_due) passes it, so
  // a decision at t counts exactly the received observations before t, as
  // one store fed everything in time order would (doc/zanon.md, "Several
  // boxes"). Any thread; takes a mutex, not the packet path's locks.
  void receive(std::span<const Obs> obs);
  // Counts every waiting observation before now_ns (the control thread, with
  // the oldest time any worker is at).
  void apply_due(uint64_t now_ns);
  // Moves up to `max` queued local observations that changed the store into
  // `out` (appended); returns how many. For the sharing client only.
  size_t take_outbox(std::vector<Obs>& out, size_t max);
  // The value's identity on the wire (shared stores).
  static Obs obs_of(const Key& k, uint64_t user, uint64_t t_ns) noexcept {
    return Obs{k.h.lo, k.h.hi, user, t_ns};
  }

  Stats stats() const noexcept;
  const Config& config() const noexcept { return cfg_; }

 private:
  struct Impl;
  Config cfg_;
  std::unique_ptr<Impl> impl_;
  mutable std::mutex names_mu_;
  std::vector<std::string> classes_;
  std::vector<std::string> kinds_;
  // Shared: per class and kind id, a code from its name (key()'s prefix).
  std::unique_ptr<uint64_t[]> class_code_, kind_code_;
};

}  // namespace amon::zanon
