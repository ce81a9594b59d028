// The shared z-anonymity store. Layout, invariants and the proof that losing
// state only hides more are in doc/zanon.md; the comments here point at them.
#include "zanon.h"
#include "zanon_impl.h"

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

Store::Store(const Config& cfg) : cfg_(cfg), impl_(std::make_unique<Impl>()) {
  if (cfg.zmax < 1 || cfg.zmax > kMaxZ) throw std::invalid_argument("zanon: zmax must be in 1..64");
  if (cfg.max_values < 1) throw std::invalid_argument("zanon: max_values must be >= 1");
  if (cfg.lanes < 1 || cfg.lanes > kMaxLanes) throw std::invalid_argument("zanon: lanes must be in 1..16");
  if (cfg.shards && !std::has_single_bit(cfg.shards))
    throw std::invalid_argument("zanon: shards must be a power of two");
  Impl& m = *impl_;
  m.zmax = cfg.zmax;
  m.lanes = cfg.lanes;
  m.id = g_store_ids.fetch_add(1, std::memory_order_relaxed);
  // Whole cache lines: an entry then spans the fewest lines it can (4 at
  // z=10 with one lane). With several lanes the user lists are not in the
  // entry but in one plane per lane (lane l's lists of every slot, each on
  // whole lines), after the heads. In one entry the lanes' lists would be
  // neighbours, and a core's hardware prefetchers, seeing it read the head
  // and its own list in ascending order, fetch the next lines too: the next
  // lane's, which another core writes on every observation. That cost two
  // threads on a hot shared set most of their second core (doc/zanon.md,
  // "Concurrency"). In a plane the next lines are the same lane's lists of
  // other values, written by the same thread.
  const size_t list = sizeof(LaneHead) + 16 * size_t(cfg.zmax);
  if (cfg.lanes == 1) {
    m.lane_off = sizeof(EntryHead);
    m.lane_stride = list;
    m.stride = (sizeof(EntryHead) + list + 63) & ~size_t{63};
  } else {
    m.lane_off = 0;
    m.lane_stride = (list + 63) & ~size_t{63};
    m.stride = (sizeof(EntryHead) + 63) & ~size_t{63};
  }
  m.span = cfg.max_dt_ns + cfg.max_reorder_ns;
  if (m.span < cfg.max_dt_ns) m.span = UINT64_MAX;

  m.key = cfg.key;
  m.hash_only = cfg.shared;
  if (cfg.shared) {
    if (std::all_of(m.key.begin(), m.key.end(), [](uint8_t b) { return b == 0; }))
      throw std::invalid_argument("zanon: a shared store needs the deployment's key");
    class_code_ = std::make_unique<uint64_t[]>(0x10000);
    kind_code_ = std::make_unique<uint64_t[]>(0x10000);
    m.out = std::make_unique<OutRing[]>(kOutRings);
    for (unsigned i = 0; i < kOutRings; ++i)
      m.out[i].buf.resize(std::max<size_t>(1, cfg.outbox / kOutRings));
    m.max_pending = cfg.max_pending;
  }
  if (std::all_of(m.key.begin(), m.key.end(), [](uint8_t b) { return b == 0; })) {
    if (getrandom(m.key.data(), m.key.size(), 0) != ssize_t(m.key.size()))
      throw std::runtime_error("zanon: getrandom failed");
  }

  // 1/8 slack over max_values: with relocation the pair-of-buckets table fills
  // to well above 90% before it has to evict.
  const size_t slots = cfg.max_values + cfg.max_values / 8;
  const size_t nb0 = std::max<size_t>(2, (slots + kSlots - 1) / kSlots);
  uint32_t ns = cfg.shards;
  if (!ns) {
    unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    ns = std::bit_ceil(std::max(64u, 64u * hw));
  }
  // A value can only go to its own shard's buckets, and the shards' shares
  // of max_values vary (binomially) around the mean. A small table split 64
  // ways (2-3 buckets a shard) evicted at two-thirds full: its fullest
  // shards overflowed. So small tables get fewer shards (at least 16
  // buckets each, where two-choice placement and relocation work), and each
  // shard room for its mean share plus four standard deviations. From about
  // 1,024 values a shard, the 1/8 slack covers that already and nothing
  // changes.
  while (ns > 1 && size_t(ns) * kMinShardBuckets > nb0) ns /= 2;
  const double share = double(cfg.max_values) / ns;
  const size_t room = std::max<size_t>((nb0 + ns - 1) / ns * kSlots, size_t(std::ceil(share + 4 * std::sqrt(share))));
  m.nshards = ns;
  m.shard_mask = ns - 1;
  m.bps = uint32_t(std::max<size_t>(2, (room + kSlots - 1) / kSlots));
  m.nb = size_t(m.bps) * ns;

  const size_t nslots = m.nb * kSlots;
  const size_t tag_bytes = (nslots * 4 + 63) & ~size_t{63};
  const size_t planes = cfg.lanes > 1 ? nslots * m.lane_stride * cfg.lanes : 0;
  // The admission doorkeeper: per shard two generations of 16 bits per slot.
  m.door_lines = std::max<size_t>(1, size_t(m.bps) * kSlots / 32);
  m.door_limit = uint32_t(size_t(m.bps) * kSlots);
  const size_t door_bytes = size_t(ns) * 2 * m.door_lines * 64;
  m.mem_bytes = tag_bytes + nslots * m.stride + planes + door_bytes;
  void* p = mmap(nullptr, m.mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // A hint either way. NOHUGEPAGE also keeps the kernel's "always" THP
  // mode from faulting 2 MiB for each scattered value of a sparse table.
  madvise(p, m.mem_bytes, cfg.huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  m.mem = static_cast<uint8_t*>(p);
  m.tags = reinterpret_cast<uint32_t*>(m.mem);
  m.bodies = m.mem + tag_bytes;
  if (cfg.lanes == 1) {
    m.lane_base = m.bodies + m.lane_off;
    m.lane_slot = m.stride;
    m.lane_plane = 0;
  } else {
    m.lane_base = m.bodies + nslots * m.stride;
    m.lane_slot = m.lane_stride;
    m.lane_plane = nslots * m.lane_stride;
  }
  m.door = reinterpret_cast<uint64_t*>(m.mem + tag_bytes + nslots * m.stride + planes);
  m.locks = std::make_unique<LaneLock[]>(size_t(ns) * m.lanes);
}

Store::~Store() {
  if (impl_ && impl_->mem) munmap(impl_->mem, impl_->mem_bytes);
}

namespace {
// A scope's name as key()'s prefix in a shared store: the same on every box
// whatever order the names were registered in. Keyed like the values, so the
// wire shows no class name either.
uint64_t name_code(const std::array<uint8_t, 16>& key, char what, std::string_view name) {
  std::string s(1, what);
  s += name;
  return siphash128(key.data(), 0, reinterpret_cast<const uint8_t*>(s.data()), s.size()).lo;
}

template <typename Id>
Id register_name(std::mutex& mu, std::vector<std::string>& names, std::string_view name, uint64_t* codes,
                 const std::array<uint8_t, 16>& key, char what) {
  std::lock_guard g(mu);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return Id(i);
  if (names.size() > 0xFFFF) throw std::length_error("zanon: too many names");
  if (codes) codes[names.size()] = name_code(key, what, name);
  names.emplace_back(name);
  return Id(names.size() - 1);
}
std::string name_of(std::mutex& mu, const std::vector<std::string>& names, size_t id) {
  std::lock_guard g(mu);
  return id < names.size() ? names[id] : std::string();
}
}  // namespace

ClassId Store::class_id(std::string_view name) {
  return register_name<ClassId>(names_mu_, classes_, name, class_code_.get(), impl_->key, 'c');
}
KindId Store::kind_id(std::string_view name) {
  return register_name<KindId>(names_mu_, kinds_, name, kind_code_.get(), impl_->key, 'k');
}
std::string Store::class_name(ClassId id) const { return name_of(names_mu_, classes_, id); }
std::string Store::kind_name(KindId id) const { return name_of(names_mu_, kinds_, id); }

Key Store::key(Scope scope, std::span<const uint8_t> value) const noexcept {
  const uint64_t prefix = class_code_ ? class_code_[scope.cls] ^ std::rotl(kind_code_[scope.kind], 1)
                                     : uint64_t(scope.cls) | uint64_t(scope.kind) << 16;
  return Key{scope, value, siphash128(impl_->key.data(), prefix, value.data(), value.size())};
}

Key Store::key(Scope scope, std::string_view value) const noexcept {
  return key(scope, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
}

void Store::prefetch(const Key& k) const noexcept {
  const Impl& m = *impl_;
  size_t b1, b2;
  const uint32_t sh = m.shard_of(k.h);
  m.buckets(sh, k.h.hi, b1, b2);
  _mm_prefetch(reinterpret_cast<const char*>(m.tags + b1 * kSlots), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(m.tags + b2 * kSlots), _MM_HINT_T0);
  // A full store asks its doorkeeper about a new value (admit): its lines too.
  if (m.door && m.nearly_full(m.lock_of(sh)[0])) {
    const uint64_t x = m.door_hash(k.h);
    _mm_prefetch(reinterpret_cast<const char*>(m.door_at(sh, 0, x)), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(m.door_at(sh, 1, x)), _MM_HINT_T0);
  }
}

void Store::bind_lane(unsigned lane) noexcept { t_lane = {impl_->id, lane % impl_->lanes}; }

size_t Store::observe(const Key& k, uint64_t user, uint64_t t_ns, std::span<const ZParams> consumers,
                      std::span<bool> released_out) noexcept {
  return impl_->observe(k, user, t_ns, consumers.data(), consumers.size(),
                        [&](size_t i, bool rel) { released_out[i] = rel; });
}

// The single-consumer form: the engine's (one test per rule). With one lane
// it is the whole observation under one lock, without the spans and the
// loop, which were a tenth of an observation.
bool Store::observe(const Key& k, uint64_t user, uint64_t t_ns, ZParams consumer) noexcept {
  Impl& m = *impl_;
  if (m.lanes > 1) return m.observe(k, user, t_ns, &consumer, 1, [](size_t, bool) {}) != 0;
  m.due(t_ns);
  const uint32_t sh = m.shard_of(k.h);
  LaneLock& s = m.lock_of(sh)[0];
  SpinGuard g(s.lock);
  const ptrdiff_t slot = m.count_locked(sh, k, 0, user, t_ns);
  const bool rel = slot >= 0 ? m.releases(size_t(slot), t_ns, consumer) : consumer.z <= 1 && consumer.z <= m.zmax;
  bump(s.observations);
  bump(rel ? s.released : s.hidden);
  return rel;
}

uint32_t Store::count_recent(const Key& k, uint64_t t_ns, uint64_t dt_ns) const noexcept {
  Impl& m = *impl_;
  const uint32_t sh = m.shard_of(k.h);
  AllGuard g(m.lock_of(sh), m.lanes, m.nshards);
  const ptrdiff_t slot = m.find(k, sh, 0);
  if (slot < 0) return 0;
  return m.count_all(size_t(slot), t_ns, dt_ns);
}

size_t Store::sweep(uint64_t now_ns, size_t budget) noexcept {
  Impl& m = *impl_;
  // A shared store: received observations before now count now (the
  // packet path then finds none waiting).
  if (m.hash_only) apply_due(now_ns);
  m.sweeps.fetch_add(1, std::memory_order_relaxed);
  budget = std::min(budget, m.nb);
  const size_t start = m.sweep_cursor.fetch_add(budget, std::memory_order_relaxed);
  size_t reclaimed = 0;
  for (size_t i = 0; i < budget; ++i) {
    const size_t b = (start + i) % m.nb;
    LaneLock* ll = m.lock_of(uint32_t(b / m.bps));
    AllGuard g(ll, m.lanes, m.nshards);
    for (unsigned j = 0; j < kSlots; ++j) {
      const size_t slot = b * kSlots + j;
      if (m.tags[slot] && m.expired(m.newest(slot), now_ns)) {
        m.tags[slot] = 0;
        bump(ll[0].tracked, uint64_t(-1));
        bump(ll[0].expirations);
        ++reclaimed;
      }
    }
  }
  return reclaimed;
}

void Store::receive(std::span<const Obs> obs) {
  Impl& m = *impl_;
  if (!m.hash_only) return;
  m.received.fetch_add(obs.size(), std::memory_order_relaxed);
  std::lock_guard g(m.pend_mu);
  const uint64_t w = m.watermark.load(std::memory_order_relaxed);
  size_t dropped = 0, now = 0;
  for (const Obs& o : obs) {
    // Before the oldest time any worker is at: no decision to come is at or
    // before it, so it counts at once.
    if (o.t_ns < w) {
      m.apply_received(o);
      ++now;
    } else if (m.pend.size() < m.max_pending) {
      m.pend.push_back(o);
      std::push_heap(m.pend.begin(), m.pend.end(), Impl::later);
    } else {
      ++dropped;
    }
  }
  m.received_applied.fetch_add(now, std::memory_order_relaxed);
  m.received_dropped.fetch_add(dropped, std::memory_order_relaxed);
  m.pending_min.store(m.pend.empty() ? UINT64_MAX : m.pend.front().t_ns, std::memory_order_release);
}

void Store::apply_due(uint64_t now_ns) {
  Impl& m = *impl_;
  if (!m.hash_only) return;
  std::lock_guard g(m.pend_mu);
  if (now_ns > m.watermark.load(std::memory_order_relaxed)) m.watermark.store(now_ns, std::memory_order_relaxed);
  m.drain_locked(now_ns);
}

size_t Store::take_outbox(std::vector<Obs>& out, size_t max) {
  Impl& m = *impl_;
  if (!m.out) return 0;
  size_t taken = 0;
  for (unsigned i = 0; i < kOutRings && taken < max; ++i) {
    OutRing& r = m.out[i];
    SpinGuard g(r.lock);
    while (r.n && taken < max) {
      out.push_back(r.buf[r.head]);
      r.head = (r.head + 1) % r.buf.size();
      --r.n;
      ++taken;
    }
  }
  return taken;
}

Stats Store::stats() const noexcept {
  const Impl& m = *impl_;
  Stats st;
  for (size_t i = 0; i < size_t(m.nshards) * m.lanes; ++i) {
    const LaneLock& s = m.locks[i];
    auto rd = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    st.values_tracked += rd(s.tracked);
    st.observations += rd(s.observations);
    st.released += rd(s.released);
    st.hidden += rd(s.hidden);
    st.inserts += rd(s.inserts);
    st.fingerprinted += rd(s.fingerprinted);
    st.evictions += rd(s.evictions);
    st.refused += rd(s.refused);
    st.expirations += rd(s.expirations);
    st.relocations += rd(s.relocations);
  }
  st.capacity = m.nb * kSlots;
  st.table_bytes = m.mem_bytes + sizeof(LaneLock) * m.nshards * m.lanes;
  st.bytes_per_entry = st.table_bytes / st.capacity;
  st.sweeps = m.sweeps.load(std::memory_order_relaxed);
  if (m.out)
    for (unsigned i = 0; i < kOutRings; ++i) {
      st.outbox_queued += m.out[i].queued.load(std::memory_order_relaxed);
      st.outbox_dropped += m.out[i].dropped.load(std::memory_order_relaxed);
    }
  st.received = m.received.load(std::memory_order_relaxed);
  st.received_applied = m.received_applied.load(std::memory_order_relaxed);
  st.received_dropped = m.received_dropped.load(std::memory_order_relaxed);
  {
    std::lock_guard g(const_cast<std::mutex&>(m.pend_mu));
    st.pending = m.pend.size();
  }
  return st;
}

}  // namespace amon::zanon
