// Runtime of the built-in actions: one small object per (rule, worker).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "cryptopan.h"
#include "registry.h"
#include "runtime.h"

namespace amon {

enum class ActResult : uint8_t { Done, Drop, Cut };

// Per-packet context the actions see.
struct ApplyCtx {
  uint64_t ts_ns = 0;
  const Decoded* d = nullptr;
  const PacketMeta* m = nullptr;
  const uint8_t* client_addr = nullptr;  // original (clear) client address of the flow, addr_len bytes
  uint8_t family = 0;                    // 4 or 6
  FieldId field = kNoField;              // the field being rewritten
  bool is_server = false;                // the address being rewritten is the flow's server
  ConsumerCounters* counters = nullptr;
};

// The actions a header-only policy uses most, which its fast path calls
// directly (no virtual call, inlined): ProgramInstance::process_hdr.
enum class RtKind : uint8_t { Other, Timestamp, Prefix, CryptoPan };

class RtAction {
 public:
  virtual ~RtAction() = default;
  bool modifies = true;
  bool cuts = false;  // removes the bytes (their old checksum sum is not needed)
  // Zero-fills the bytes, then the record ends where they start: every
  // length field and the record's original length are kept (snap()).
  bool snaps = false;
  RtKind kind = RtKind::Other;
  // An action that does not implement a value type drops the packet
  // (counted as policy_drop): never forwarded unchanged. check_completeness
  // refuses such an action at start-up, so these are unreachable.
  virtual ActResult mac(uint8_t* m, ApplyCtx& c) { return ActResult::Drop; }
  virtual ActResult addr(uint8_t* a, ApplyCtx& c) { return ActResult::Drop; }
  virtual ActResult bytes(uint8_t* p, uint32_t len, ApplyCtx& c) { return ActResult::Drop; }
  // What this action does to a value no per-flow decision covers (a tunnel
  // endpoint): itself, or a zanon's fallback.
  virtual RtAction* undecided() { return this; }
};

// Value types (bits 1 << ValueType) whose method class A overrides: what it
// implements, read from the class itself.
template <class A>
constexpr uint32_t rt_types() {
  uint32_t m = 0;
  if (!std::is_same_v<decltype(&A::mac), decltype(&RtAction::mac)>) m |= 1u << unsigned(ValueType::Mac);
  if (!std::is_same_v<decltype(&A::addr), decltype(&RtAction::addr)>) m |= 1u << unsigned(ValueType::Addr);
  if (!std::is_same_v<decltype(&A::bytes), decltype(&RtAction::bytes)>)
    m |= 1u << unsigned(ValueType::Bytes) | 1u << unsigned(ValueType::Text);
  return m;
}

// The value types each action's runtime implements (bits 1 << ValueType),
// by the action's kind; Name is the names path's (ProgramInstance's
// NamePlan). ActionKind::Unknown: 0.
uint32_t rt_action_types(const ActionDesc& action);

// Problems of the registry as this runtime sees it (empty: complete): a
// field no plugin locates, an action without an applier for a field type
// the checker accepts it on, a condition operator without an evaluator.
// `types` overrides rt_action_types (the mutation test's hook).
std::vector<std::string> check_completeness(const Registry& r,
                                            uint32_t (*types)(const ActionDesc&) = rt_action_types);

namespace rt {

// Layout (doc/language.md): eth.dst gets the seconds since the Unix epoch and
// eth.src the nanoseconds within that second, each as a 48-bit big-endian
// number. Both are below 2^47, so the I/G bit stays 0 (unicast).
inline void put_mac48(uint8_t* m, uint64_t v) {
  // 48 bits big-endian in one byte swap and two stores, not six byte stores.
  uint64_t be = v << 16;
  if constexpr (std::endian::native == std::endian::little) be = __builtin_bswap64(be);
  std::memcpy(m, &be, 6);
}

class Timestamp final : public RtAction {
 public:
  explicit Timestamp(FieldId dst_field) : dst_(dst_field) { kind = RtKind::Timestamp; }
  ActResult mac(uint8_t* m, ApplyCtx& c) override {
    put_mac48(m, c.field == dst_ ? c.ts_ns / 1000000000ULL : c.ts_ns % 1000000000ULL);
    return ActResult::Done;
  }

 private:
  FieldId dst_;
};

class Prefix final : public RtAction {
 public:
  explicit Prefix(const ActionCall& call);
  ActResult addr(uint8_t* a, ApplyCtx& c) override {
    apply(a, c.family);
    return ActResult::Done;
  }
  void apply(uint8_t* a, uint8_t family) const {
    if (family == 4) {
      uint32_t v;
      std::memcpy(&v, a, 4);
      v &= m4_;
      std::memcpy(a, &v, 4);
    } else {
      // A 6to4 address (2002::/16) carries an IPv4 address in its next 32
      // bits: no more of it is kept than of that IPv4 address itself.
      const uint64_t* m = a[0] == 0x20 && a[1] == 0x02 ? m6to4_ : m6_;
      uint64_t v[2];
      std::memcpy(v, a, 16);
      v[0] &= m[0], v[1] &= m[1];
      std::memcpy(a, v, 16);
    }
  }

 private:
  uint32_t m4_;
  uint64_t m6_[2], m6to4_[2];
};

class CryptoPan final : public RtAction {
 public:
  explicit CryptoPan(const ActionCall& call);
  ActResult addr(uint8_t* a, ApplyCtx& c) override {
    apply(a, c.family, c.ts_ns);
    return ActResult::Done;
  }
  bool rotates() const { return rotate_ns_ > 0; }
  // A reload: the same key (and rotation) as `old`, the previous
  // generation's action, takes over its cache entries (those of the cache
  // `old` used, its own or the one it shared); false otherwise.
  bool inherit(CryptoPan& old);
  // One worker's actions with the same key and rotation, of any consumer
  // and any rule, use one cache: an address two consumers map with one key
  // is encrypted once, and a flood of new sources costs each key one miss
  // per address, not one per consumer. The cache that inherited entries at
  // a reload is the one kept. Called again with a new set (a reload), it
  // regroups; actions not passed keep what they had.
  static void share(const std::vector<CryptoPan*>& actions);
  // The misses of the cache this action owns (zero for one that uses
  // another's: a shared cache's misses are counted once, by its owner).
  uint64_t cache_misses() const { return owner_ == this ? cache_.misses() : 0; }
  // Fetches the cache line apply() will read for this IPv4 address.
  void prefetch_v4(const uint8_t* a) const {
    uint32_t v;
    std::memcpy(&v, a, 4);
    if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
    owner_->cache_.prefetch_v4(v);
  }
  // Inlined into the header kernels (GCC otherwise keeps it a call there).
  [[gnu::always_inline]] void apply(uint8_t* a, uint8_t family, uint64_t ts_ns) {
    CryptoPan& o = *owner_;
    if (rotate_ns_ > 0) [[unlikely]]
      o.rotate(ts_ns);
    if (family == 4) {
      // One 4-byte store: the checksum updates read the address back as a word.
      uint32_t v;
      std::memcpy(&v, a, 4);
      if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
      v = o.cache_.anon_v4_cached(v);
      if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
      std::memcpy(a, &v, 4);
    } else {
      uint8_t out[16];
      o.cache_.anon_v6_cached(a, out);
      std::memcpy(a, out, 16);
    }
  }

 private:
  void rotate(uint64_t ts_ns);
  std::array<uint8_t, 32> base_;
  int64_t rotate_ns_;
  uint64_t epoch_ = UINT64_MAX;
  CryptoPAnCache cache_;
  CryptoPan* owner_ = this;  // whose cache (and key epoch) apply() uses
  bool inherited_ = false;   // cache_ took a previous generation's entries
};

}  // namespace rt

struct ZanonSlotInfo {
  int bit = -1;        // bit in FlowState masks
  int64_t z = 0, dt_ns = 0;
};

// Builds the runtime object of an action call. Throws std::runtime_error on
// a combination the checker should have refused.
std::unique_ptr<RtAction> make_rt_action(const ActionCall& call, const dsl::Policy& pol, SharedServices* svc,
                                         const ZanonSlotInfo* zslot);
// The runtime of an action without parameters (keep, zero, redact, drop, cut).
std::unique_ptr<RtAction> make_rt_action(ActionKind k);

}  // namespace amon
