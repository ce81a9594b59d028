// The store's table, locks and exchange queues (struct Store::Impl): private
// to engine/zanon, shared by the files that implement Store. Layout,
// invariants and the proof that losing state only hides more are in
// doc/zanon.md.
#pragma once

#include "zanon.h"
#include "amon_siphash.h"
#include <immintrin.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <algorithm>
#include <cmath>
#include <bit>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>

namespace amon::zanon {

namespace detail {

constexpr unsigned kSlots = 8;  // entries per bucket: one 32-byte tag row
constexpr size_t kMinShardBuckets = 16;  // see the shard count in Store::Store
constexpr uint8_t kFingerprint = 0xFF;

// Fixed part of an entry, written only when the value enters: the lanes'
// user lists follow it. Read by every lookup, so no lane shares its lines
// when there are several lanes.
struct EntryHead {
  uint64_t h_hi;  // upper half of the value hash: recomputes both bucket choices for relocation
  uint16_t cls;
  uint16_t kind;
  uint8_t len;  // 0..kInlineBytes, or kFingerprint
  uint8_t pad[3];
  uint8_t key[Store::kInlineBytes];  // the value, or h.lo of its fingerprint
};
static_assert(sizeof(EntryHead) == 80);

// One lane's user list: users[zmax] and times[zmax] follow it, two arrays so
// the "is this user here" and "how many are recent" scans each read
// contiguous words.
struct LaneHead {
  // Newest user time of the lane: expiry and LRU order (an entry's is the
  // largest of its lanes'). Next to the users rather than in a side array so
  // an observation touches one line less.
  uint64_t newest;
  uint8_t n;  // users stored (<= zmax)
  uint8_t pad[7];
};
static_assert(sizeof(LaneHead) == 16);

// Test-and-test-and-set lock on std::atomic: a shard is held for a few dozen
// nanoseconds, so spinning beats sleeping, and std::atomic (unlike the inline
// asm in rte_spinlock) is visible to ThreadSanitizer.
struct SpinGuard {
  std::atomic<uint32_t>& l;
  explicit SpinGuard(std::atomic<uint32_t>& lock) : l(lock) {
    for (;;) {
      if (!l.exchange(1, std::memory_order_acquire)) return;
      while (l.load(std::memory_order_relaxed)) _mm_pause();
    }
  }
  ~SpinGuard() { l.store(0, std::memory_order_release); }
};

// Counters are written only under the shard lock, so a plain load+store (no
// locked RMW) suffices; atomics only so stats() can read them concurrently.
inline void bump(std::atomic<uint64_t>& c, uint64_t by = 1) {
  c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// One lock per (shard, lane), each on its own line with the counters its
// holder writes: a thread observing a value already present takes only its
// lane's lock. Changes of the table itself (insert, evict, relocate, reclaim)
// hold every lane's lock of the shard; their counters live in lane 0's.
// Stored lane-major (all of lane 0's locks, then lane 1's, ...), for the
// reason the user lists are (Store's constructor).
struct alignas(64) LaneLock {
  std::atomic<uint32_t> lock{0};
  std::atomic<uint64_t> tracked{0}, observations{0}, released{0}, hidden{0}, inserts{0}, fingerprinted{0},
      evictions{0}, expirations{0}, relocations{0}, refused{0};
  // Lane 0's only (the shard's doorkeeper, every lane lock held): values
  // added to the current generation, and which generation is current.
  uint32_t door_n = 0;
  uint8_t door_gen = 0;
};

// Every lane's lock of a shard, in lane order (the only order anyone takes
// more than one in). Lane i's lock is first[i * step].
struct AllGuard {
  LaneLock* l;
  unsigned n;
  size_t step;
  AllGuard(LaneLock* first, unsigned lanes, size_t stp) : l(first), n(lanes), step(stp) {
    for (unsigned i = 0; i < n; ++i) {
      std::atomic<uint32_t>& a = l[i * step].lock;
      for (;;) {
        if (!a.exchange(1, std::memory_order_acquire)) break;
        while (a.load(std::memory_order_relaxed)) _mm_pause();
      }
    }
  }
  ~AllGuard() {
    for (unsigned i = n; i-- > 0;) l[i * step].lock.store(0, std::memory_order_release);
  }
};

inline std::atomic<uint64_t> g_store_ids{1};

// Which lane this thread observes into, for the store with this id.
struct LaneBinding {
  uint64_t store = 0;
  unsigned lane = 0;
};
inline thread_local LaneBinding t_lane;
// Which outbox ring this thread queues into, for the store with this id.
inline thread_local LaneBinding t_outbox;

constexpr unsigned kOutRings = 16;

// One producer ring of the outbox: a thread queues into its own ring (a
// thread per ring up to kOutRings threads), so the lock is uncontended but
// for the sharing client's drain.
struct alignas(64) OutRing {
  std::atomic<uint32_t> lock{0};
  std::atomic<uint64_t> queued{0}, dropped{0};
  std::vector<Obs> buf;
  size_t head = 0, n = 0;
};

inline uint32_t fastrange(uint32_t x, uint32_t n) { return uint32_t((uint64_t(x) * n) >> 32); }

using sip::load_le32;
using sip::load_le64;

// a[0..n) == b[0..n) for n <= kInlineBytes, inline: the values are short
// (names), where a call to memcmp and the spills around it cost more than the
// compare. Reads nothing outside [0, n) of either side (the value may end a
// packet): tails are compared with loads that end at n and overlap the rest.
inline bool same_bytes(const uint8_t* a, const uint8_t* b, size_t n) {
  if (n >= 16) {
    __m128i d = _mm_setzero_si128();
    for (size_t i = 0; i + 16 < n; i += 16)
      d = _mm_or_si128(d, _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i))));
    d = _mm_or_si128(d, _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + n - 16)),
                                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + n - 16))));
    return _mm_testz_si128(d, d);
  }
  if (n >= 8) return ((load_le64(a) ^ load_le64(b)) | (load_le64(a + n - 8) ^ load_le64(b + n - 8))) == 0;
  if (n >= 4) return ((load_le32(a) ^ load_le32(b)) | (load_le32(a + n - 4) ^ load_le32(b + n - 4))) == 0;
  if (n == 0) return true;
  return ((a[0] ^ b[0]) | (a[n / 2] ^ b[n / 2]) | (a[n - 1] ^ b[n - 1])) == 0;
}

// Users stored with a time after t - dt. A window that starts before time 0
// holds every stored user.
inline uint32_t count_after(const uint64_t* times, uint32_t n, uint64_t t, uint64_t dt) {
  if (t < dt) return n;
  const uint64_t lo = t - dt;
  uint32_t c = 0;
  for (uint32_t i = 0; i < n; ++i) c += times[i] > lo;
  return c;
}

}  // namespace detail

using namespace detail;

struct Store::Impl {
  uint32_t zmax = 0;
  uint32_t lanes = 1;
  size_t stride = 0;       // bytes per entry body (with one lane: head and list; else the head)
  size_t lane_off = 0;     // one lane: offset of the list in an entry
  size_t lane_stride = 0;  // bytes per user list
  // lane(slot, l) = lane_base + l * lane_plane + slot * lane_slot
  uint8_t* lane_base = nullptr;
  size_t lane_plane = 0, lane_slot = 0;
  uint32_t nshards = 0, shard_mask = 0, bps = 0;
  size_t nb = 0;  // buckets
  uint64_t span = 0;  // max_dt + max_reorder, saturated
  uint64_t id = 0;    // tells thread-local lane bindings of different stores apart
  std::array<uint8_t, 16> key{};
  // Shared: values are matched by their 128-bit hash alone (Config::shared).
  bool hash_only = false;

  // Shared: local observations that changed the store, for the sharing client.
  std::unique_ptr<OutRing[]> out;
  std::atomic<uint32_t> next_ring{0};
  // Shared: received observations waiting for their time (a min-heap by
  // time); pending_min is the smallest waiting time (UINT64_MAX: none), read
  // by every observation without the mutex.
  std::mutex pend_mu;
  std::vector<Obs> pend;
  size_t max_pending = 0;
  std::atomic<uint64_t> pending_min{UINT64_MAX};
  std::atomic<uint64_t> watermark{0};
  std::atomic<uint64_t> received{0}, received_applied{0}, received_dropped{0};

  uint8_t* mem = nullptr;
  size_t mem_bytes = 0;
  // The admission doorkeeper (doc/zanon.md, "Admission under churn"): per
  // shard two generations of a blocked Bloom filter, door_lines 64-byte
  // lines each; a generation that has taken door_limit values becomes the
  // old one and the old one is cleared to be the new current.
  uint64_t* door = nullptr;
  size_t door_lines = 0;
  uint32_t door_limit = 0;
  uint32_t* tags = nullptr;  // nb * kSlots; 0 = free
  uint8_t* bodies = nullptr;
  std::unique_ptr<LaneLock[]> locks;  // nshards * lanes
  std::atomic<size_t> sweep_cursor{0};
  std::atomic<uint64_t> sweeps{0};
  std::atomic<uint32_t> next_lane{0};

  EntryHead* head(size_t slot) const { return reinterpret_cast<EntryHead*>(bodies + slot * stride); }
  LaneHead* lane(size_t slot, unsigned l) const {
    return reinterpret_cast<LaneHead*>(lane_base + l * lane_plane + slot * lane_slot);
  }
  uint64_t* users(size_t slot, unsigned l) const { return reinterpret_cast<uint64_t*>(lane(slot, l) + 1); }
  uint64_t* times(size_t slot, unsigned l) const { return users(slot, l) + zmax; }
  // Lane 0's lock of the shard; lane l's is lock_of(shard)[l * nshards].
  LaneLock* lock_of(uint32_t shard) const { return &locks[shard]; }
  LaneLock& lock_of(uint32_t shard, unsigned l) const { return locks[size_t(l) * nshards + shard]; }

  // The entry's newest user time: its lanes' largest.
  uint64_t newest(size_t slot) const {
    uint64_t n = lane(slot, 0)->newest;
    for (unsigned l = 1; l < lanes; ++l) n = std::max(n, lane(slot, l)->newest);
    return n;
  }

  bool expired(uint64_t newest, uint64_t now) const { return now > span && newest <= now - span; }

  // The calling thread's lane: bound by bind_lane(), else the next one on
  // its first observation of this store.
  unsigned my_lane() {
    if (lanes == 1) return 0;
    if (t_lane.store != id) t_lane = {id, next_lane.fetch_add(1, std::memory_order_relaxed) % lanes};
    return t_lane.lane;
  }

  uint32_t shard_of(const Hash128& h) const { return uint32_t(h.lo) & shard_mask; }
  static uint32_t tag_of(const Hash128& h) { return uint32_t(h.lo >> 32) | 1u; }
  // The two candidate buckets, both inside the value's shard so one lock covers
  // lookup, insertion and relocation.
  void buckets(uint32_t shard, uint64_t h_hi, size_t& b1, size_t& b2) const {
    uint32_t l1 = fastrange(uint32_t(h_hi), bps);
    uint32_t l2 = fastrange(uint32_t(h_hi >> 32), bps);
    if (l2 == l1) l2 = (l1 + 1 == bps) ? 0 : l1 + 1;
    b1 = size_t(shard) * bps + l1;
    b2 = size_t(shard) * bps + l2;
  }

  // find, find_in and matches are forced inline: observe is their hot caller,
  // and as calls they pushed and popped six registers each.
  [[gnu::always_inline]] bool matches(size_t slot, const Key& k) const {
    const EntryHead* e = head(slot);
    if (e->h_hi != k.h.hi) return false;
    // Shared: the hash covers the scope (by name) and the bytes; a received
    // observation has nothing else.
    if (hash_only) {
      uint64_t lo;
      std::memcpy(&lo, e->key, 8);
      return lo == k.h.lo;
    }
    if (e->cls != k.scope.cls || e->kind != k.scope.kind) return false;
    if (k.bytes.size() > kInlineBytes) {
      uint64_t lo;
      std::memcpy(&lo, e->key, 8);
      return e->len == kFingerprint && lo == k.h.lo;
    }
    return e->len == k.bytes.size() && same_bytes(e->key, k.bytes.data(), k.bytes.size());
  }

  [[gnu::always_inline]] ptrdiff_t find_in(size_t b, uint32_t tag, const Key& k, unsigned l) const {
    const auto* row = reinterpret_cast<const __m128i*>(tags + b * kSlots);  // 32-byte aligned
    const __m128i t = _mm_set1_epi32(int(tag));
    unsigned m = unsigned(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(_mm_load_si128(row), t)))) |
                 unsigned(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(_mm_load_si128(row + 1), t)))) << 4;
    while (m) {
      unsigned i = std::countr_zero(m);
      m &= m - 1;
      // A tag hit is almost surely the value: fetch the user and time lines
      // now, in parallel with the key compare, not one dependent miss later.
      // Only this thread's lane: fetching another lane's lines would pull
      // them from the core that writes them.
      const char* body = reinterpret_cast<const char*>(head(b * kSlots + i));
      _mm_prefetch(body + 64, _MM_HINT_T0);
      const char* ln = reinterpret_cast<const char*>(lane(b * kSlots + i, l));
      const size_t end = (lanes == 1) ? stride - lane_off : lane_stride;
      for (size_t off = (lanes == 1) ? 64 : 0; off < end; off += 64) _mm_prefetch(ln + off, _MM_HINT_T0);
      if (matches(b * kSlots + i, k)) return ptrdiff_t(b * kSlots + i);
    }
    return -1;
  }

  [[gnu::always_inline]] ptrdiff_t find(const Key& k, uint32_t shard, unsigned l) const {
    size_t b1, b2;
    buckets(shard, k.h.hi, b1, b2);
    _mm_prefetch(reinterpret_cast<const char*>(tags + b2 * kSlots), _MM_HINT_T0);  // overlap the second miss
    const uint32_t tag = tag_of(k.h);
    ptrdiff_t s = find_in(b1, tag, k, l);
    return s >= 0 ? s : find_in(b2, tag, k, l);
  }

  unsigned free_in(size_t b) const {
    unsigned c = 0;
    for (unsigned i = 0; i < kSlots; ++i) c += tags[b * kSlots + i] == 0;
    return c;
  }
  ptrdiff_t first_free(size_t b) const {
    for (unsigned i = 0; i < kSlots; ++i)
      if (tags[b * kSlots + i] == 0) return ptrdiff_t(b * kSlots + i);
    return -1;
  }

  // Moves one occupant of b1/b2 to a free slot in its other bucket; returns the
  // slot it vacated, or -1. Keeps the table usable near full load without
  // dropping live state (two-choice placement alone starts overflowing
  // buckets well before the table is full). Every lane lock of the shard held.
  ptrdiff_t relocate(uint32_t shard, size_t b1, size_t b2) {
    for (size_t b : {b1, b2}) {
      for (unsigned i = 0; i < kSlots; ++i) {
        const size_t slot = b * kSlots + i;
        size_t o1, o2;
        buckets(shard, head(slot)->h_hi, o1, o2);
        const size_t alt = (o1 == b) ? o2 : o1;
        const ptrdiff_t dst = first_free(alt);
        if (dst < 0) continue;
        std::memcpy(bodies + size_t(dst) * stride, bodies + slot * stride, stride);
        if (lanes > 1)
          for (unsigned l = 0; l < lanes; ++l) std::memcpy(lane(size_t(dst), l), lane(slot, l), lane_stride);
        tags[dst] = tags[slot];
        tags[slot] = 0;
        return ptrdiff_t(slot);
      }
    }
    return -1;
  }

  // Whether a new value may take a place when its bucket pair has no free
  // slot: only if the doorkeeper saw it before (either generation). A value
  // seen for the first time is remembered and refused, so values seen once
  // (a random-subdomain flood's labels) never push out tracked ones; the
  // check costs one line per generation instead of the pair's 16 entries.
  // Every lane lock of the shard held.
  static uint64_t door_hash(const Hash128& h) { return (h.lo ^ std::rotl(h.hi, 29)) * 0x9E3779B97F4A7C15ULL; }
  uint64_t* door_at(uint32_t shard, unsigned g, uint64_t x) const {
    const size_t line = fastrange(uint32_t(x >> 32), uint32_t(door_lines));
    return door + ((size_t(shard) * 2 + g) * door_lines + line) * 8;
  }
  bool admit(uint32_t shard, const Hash128& h) {
    LaneLock& s = lock_of(shard)[0];
    const uint64_t x = door_hash(h);
    uint64_t bits[8] = {};
    for (unsigned i = 0; i < 4; ++i) {
      const unsigned b = unsigned(x >> (9 * i)) & 511;
      bits[b >> 6] |= uint64_t(1) << (b & 63);
    }
    auto gen = [&](unsigned g) { return door_at(shard, g, x); };
    for (unsigned g = 0; g < 2; ++g) {
      const uint64_t* w = gen(g);
      bool all = true;
      for (unsigned i = 0; i < 8; ++i) all &= (w[i] & bits[i]) == bits[i];
      if (all) return true;
    }
    uint64_t* w = gen(s.door_gen);
    for (unsigned i = 0; i < 8; ++i) w[i] |= bits[i];
    if (++s.door_n >= door_limit) {
      s.door_gen ^= 1;
      s.door_n = 0;
      std::memset(door + (size_t(shard) * 2 + s.door_gen) * door_lines * 8, 0, door_lines * 64);
    }
    bump(s.refused);
    return false;
  }

  // Finds room for a new value in its bucket pair: a free slot (in the emptier
  // bucket), else an expired entry, else a relocation, else the least recently
  // observed entry of the pair is evicted. Eviction can only hide more: see
  // doc/zanon.md, "Why losing state only hides more". Every lane lock held.
  size_t place(uint32_t shard, size_t b1, size_t b2, uint64_t t) {
    LaneLock& s = lock_of(shard)[0];
    const unsigned f1 = free_in(b1), f2 = free_in(b2);
    if (f1 | f2) {
      bump(s.tracked);
      return size_t(first_free(f1 >= f2 ? b1 : b2));
    }
    // The oldest entry (reclaimed if expired); else the victim is the entry
    // with the fewest users stored, oldest first among equals: a value many
    // users share outlives one that few do (doc/zanon.md, "Admission under
    // churn").
    size_t oldest = b1 * kSlots, victim = oldest;
    uint64_t oldest_t = newest(oldest), victim_t = oldest_t;
    uint32_t victim_n = users_stored(oldest);
    for (size_t b : {b1, b2})
      for (unsigned i = 0; i < kSlots; ++i) {
        const size_t e = b * kSlots + i;
        const uint64_t n = newest(e);
        const uint32_t u = users_stored(e);
        if (n < oldest_t) oldest = e, oldest_t = n;
        if (u < victim_n || (u == victim_n && n < victim_t)) victim = e, victim_n = u, victim_t = n;
      }
    if (expired(oldest_t, t)) {
      bump(s.expirations);
      return oldest;
    }
    // Relocation pays 16 entry reads; skip it when the shard is nearly full and
    // the search would mostly fail.
    if (!nearly_full(s)) {
      const ptrdiff_t v = relocate(shard, b1, b2);
      if (v >= 0) {
        bump(s.relocations);
        bump(s.tracked);
        return size_t(v);
      }
    }
    bump(s.evictions);
    return victim;
  }

  uint32_t users_stored(size_t slot) const {
    uint32_t n = 0;
    for (unsigned l = 0; l < lanes; ++l) n += lane(slot, l)->n;
    return n;
  }

  void fill(size_t slot, const Key& k) {
    EntryHead* e = head(slot);
    e->h_hi = k.h.hi;
    e->cls = k.scope.cls;
    e->kind = k.scope.kind;
    if (hash_only || k.bytes.size() > kInlineBytes) {
      e->len = kFingerprint;
      std::memcpy(e->key, &k.h.lo, 8);
    } else {
      e->len = uint8_t(k.bytes.size());
      if (!k.bytes.empty()) std::memcpy(e->key, k.bytes.data(), k.bytes.size());
    }
    for (unsigned l = 0; l < lanes; ++l) {
      lane(slot, l)->n = 0;
      lane(slot, l)->newest = 0;
    }
    tags[slot] = tag_of(k.h);
  }

  // Keeps the zmax users with the newest last-seen times in each lane (the
  // invariant in doc/zanon.md): a known user's time only moves forward; a new
  // user enters while there is room, else replaces the oldest if it is newer
  // than it.
  // Returns whether the lane changed (what a later decision could see).
  bool add_user(size_t slot, unsigned l, uint64_t user, uint64_t t) {
    LaneHead* e = lane(slot, l);
    uint64_t* us = users(slot, l);
    uint64_t* ts = times(slot, l);
    const uint32_t n = e->n;
    int idx = -1;
    // A user is stored at most once per lane: the first match is the only one.
    for (uint32_t i = 0; i < n; ++i)
      if (us[i] == user) {
        idx = int(i);
        break;
      }
    // Unchanged values are not written back: a store to a line another
    // worker holds takes it away from that worker even when nothing changes
    // (a user seen again out of order, or at the same time).
    bool changed = false;
    if (idx >= 0) {
      if (t > ts[idx]) ts[idx] = t, changed = true;
    } else if (n < zmax) {
      us[n] = user;
      ts[n] = t;
      e->n = uint8_t(n + 1);
      changed = true;
    } else {
      uint32_t m = 0;
      for (uint32_t i = 1; i < n; ++i)
        if (ts[i] < ts[m]) m = i;
      if (t > ts[m]) {
        us[m] = user;
        ts[m] = t;
        changed = true;
      }
    }
    if (t > e->newest) e->newest = t;
    return changed;
  }

  // Counts `user` at t in lane l of `slot` (that lane's lock held). A lane
  // whose newest user is past the reclaim horizon holds nobody any window of
  // this or a later in-order observation can count: it starts afresh.
  [[gnu::always_inline]] bool touch(LaneLock& s, size_t slot, unsigned l, uint64_t user, uint64_t t) {
    LaneHead* ln = lane(slot, l);
    if (ln->n && expired(ln->newest, t)) {
      ln->n = 0;
      ln->newest = 0;
      bump(s.expirations);
    }
    return add_user(slot, l, user, t);
  }

  // A new value's entry. Out of line: rare once the table is warm, and
  // inlined it made the lookup path spill registers. Every lane lock held.
  [[gnu::noinline]] size_t insert(uint32_t sh, const Key& k, uint64_t t) {
    size_t b1, b2;
    buckets(sh, k.h.hi, b1, b2);
    const size_t slot = place(sh, b1, b2, t);
    fill(slot, k);
    LaneLock& s = lock_of(sh)[0];
    bump(s.inserts);
    if (k.bytes.size() > kInlineBytes) bump(s.fingerprinted);
    return slot;
  }

  // Whether lane l alone shows z users after t - dt. Its users are real
  // occurrences, so when it does, the whole value does too.
  bool lane_releases(size_t slot, unsigned l, uint64_t t, const ZParams& c) const {
    const uint32_t n = lane(slot, l)->n;
    // Fewer users stored than z: not from this lane, without reading them. At
    // most zmax users are stored per lane, so a consumer with z > zmax is
    // never released by one lane.
    if (n < c.z) return false;
    return count_after(times(slot, l), n, t, c.dt_ns) >= c.z;
  }

  // Distinct users after t - dt over all lanes (every lane lock held), capped
  // at zmax. Each lane keeps the zmax users its threads saw last, so a user
  // among the zmax newest of the value is in the lane that saw its latest
  // occurrence, with that time: counting distinct users of the union gives
  // the exact count up to zmax (doc/zanon.md, "Concurrency").
  uint32_t count_all(size_t slot, uint64_t t, uint64_t dt) const {
    if (lanes == 1) return count_after(times(slot, 0), lane(slot, 0)->n, t, dt);
    uint64_t buf[kMaxLanes * kMaxZ];
    size_t m = 0;
    for (unsigned l = 0; l < lanes; ++l) {
      const uint32_t n = lane(slot, l)->n;
      const uint64_t* us = users(slot, l);
      const uint64_t* ts = times(slot, l);
      for (uint32_t i = 0; i < n; ++i)
        if (t < dt || ts[i] > t - dt) buf[m++] = us[i];
    }
    std::sort(buf, buf + m);
    const size_t distinct = size_t(std::unique(buf, buf + m) - buf);
    return uint32_t(std::min<size_t>(distinct, zmax));
  }

  bool releases(size_t slot, uint64_t t, const ZParams& c) const {
    // The store keeps at most zmax users of a value, so a consumer with
    // z > zmax is always hidden: the store cannot know, and fails closed.
    if (c.z > zmax) return false;
    if (lanes == 1) return lane_releases(slot, 0, t, c);
    return count_all(slot, t, c.dt_ns) >= c.z;
  }

  // The observation with every lane lock of shard sh held: find or insert,
  // count in lane l. Returns the entry's slot.
  // -1: a new value refused admission (admit), nothing counted.
  ptrdiff_t count_locked(uint32_t sh, const Key& k, unsigned l, uint64_t user, uint64_t t) {
    ptrdiff_t slot = find(k, sh, l);
    if (slot < 0) {
      if (!room(sh, k.h) && !admit(sh, k.h)) return -1;
      slot = ptrdiff_t(insert(sh, k, t));
    }
    if (touch(lock_of(sh, l), size_t(slot), l, user, t) && out) [[unlikely]]
      queue_out(Store::obs_of(k, user, t));
    return slot;
  }

  // Room without pressure: a free slot in the value's bucket pair (the tag
  // rows find just read), or a shard not yet nearly full, where relocation
  // finds a slot (what keeps max_values values); the doorkeeper decides only
  // beyond that.
  bool room(uint32_t sh, const Hash128& h) const {
    size_t b1, b2;
    buckets(sh, h.hi, b1, b2);
    if (free_in(b1) + free_in(b2) > 0) return true;
    return nearly_full(lock_of(sh)[0]) == false;
  }
  bool nearly_full(const LaneLock& s) const {
    return s.tracked.load(std::memory_order_relaxed) * 20 >= uint64_t(bps) * kSlots * 19;
  }

  // Shared: a local observation that changed the store goes to the outbox;
  // an observation that changed nothing changes no decision of another
  // store either (its pair is already known with a time at least as new, or
  // zmax newer users hold the list), so it is not sent. A full ring drops:
  // the others then count fewer users, which only hides more.
  [[gnu::noinline]] void queue_out(const Obs& o) {
    if (t_outbox.store != id) t_outbox = {id, next_ring.fetch_add(1, std::memory_order_relaxed) % kOutRings};
    OutRing& r = out[t_outbox.lane];
    SpinGuard g(r.lock);
    if (r.n == r.buf.size()) {
      bump(r.dropped);
      return;
    }
    r.buf[(r.head + r.n) % r.buf.size()] = o;
    ++r.n;
    bump(r.queued);
  }

  // A received observation, counted with its own time into lane 0 (which
  // lane never changes a decision). Not queued out: it is another store's.
  void apply_received(const Obs& o) {
    Key k{};
    k.h = Hash128{o.h_lo, o.h_hi};
    const uint32_t sh = shard_of(k.h);
    AllGuard g(lock_of(sh), lanes, nshards);
    ptrdiff_t slot = find(k, sh, 0);
    if (slot < 0) slot = ptrdiff_t(insert(sh, k, o.t_ns));
    touch(lock_of(sh, 0), size_t(slot), 0, o.user, o.t_ns);
  }

  static bool later(const Obs& a, const Obs& b) { return a.t_ns > b.t_ns; }

  // Counts every waiting observation with a time before t (pend_mu held).
  void drain_locked(uint64_t t) {
    size_t n = 0;
    while (!pend.empty() && pend.front().t_ns < t) {
      std::pop_heap(pend.begin(), pend.end(), later);
      apply_received(pend.back());
      pend.pop_back();
      ++n;
    }
    received_applied.fetch_add(n, std::memory_order_relaxed);
    pending_min.store(pend.empty() ? UINT64_MAX : pend.front().t_ns, std::memory_order_release);
  }

  // Before a decision at t: the received observations before t count.
  [[gnu::always_inline]] void due(uint64_t t) {
    if (pending_min.load(std::memory_order_acquire) < t) [[unlikely]] {
      std::lock_guard g(pend_mu);
      drain_locked(t);
    }
  }

  // The lanes' fast path's lookup and count, with lane l's lock held: the
  // value's slot, or -1 when it is not there. Out of line, as count_locked
  // is: inlined into observe, the user search ran with fewer registers.
  [[gnu::noinline]] ptrdiff_t lane_count(LaneLock& s, uint32_t sh, const Key& k, unsigned l, uint64_t user,
                                         uint64_t t) {
    const ptrdiff_t slot = find(k, sh, l);
    if (slot >= 0 && touch(s, size_t(slot), l, user, t) && out) [[unlikely]]
      queue_out(Store::obs_of(k, user, t));
    return slot;
  }

  // observe() for n consumers. Fast path: the value is there and the
  // thread's own lane releases it for every consumer; only that lane's lock
  // and lines are written. Otherwise every lane's lock is taken and the
  // decision made on all lanes (counting the user again there is a no-op).
  template <typename Out>
  size_t observe(const Key& k, uint64_t user, uint64_t t, const ZParams* cs, size_t nc, Out out) {
    due(t);
    const uint32_t sh = shard_of(k.h);
    LaneLock* ll = lock_of(sh);
    const unsigned l = my_lane();
    if (lanes > 1) {
      LaneLock& s = lock_of(sh, l);
      SpinGuard g(s.lock);
      const ptrdiff_t slot = lane_count(s, sh, k, l, user, t);
      if (slot >= 0) {
        size_t i = 0;
        while (i < nc && lane_releases(size_t(slot), l, t, cs[i])) ++i;
        if (i == nc) {
          for (size_t j = 0; j < nc; ++j) out(j, true);
          bump(s.observations);
          bump(s.released, nc);
          return nc;
        }
      }
    }
    AllGuard g(ll, lanes, nshards);
    const ptrdiff_t slot = count_locked(sh, k, l, user, t);
    size_t nrel = 0;
    for (size_t i = 0; i < nc; ++i) {
      // A refused value is decided as seen by this one user: released only
      // where one user is enough (z <= 1), which is the exact answer for a
      // value seen once and hides more otherwise.
      const bool rel = slot >= 0 ? releases(size_t(slot), t, cs[i]) : cs[i].z <= 1 && cs[i].z <= zmax;
      out(i, rel);
      nrel += rel;
    }
    LaneLock& s = lock_of(sh, l);
    bump(s.observations);
    bump(s.released, nrel);
    bump(s.hidden, nc - nrel);
    return nrel;
  }
};

}  // namespace amon::zanon
