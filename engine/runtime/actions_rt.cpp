#include "actions_rt.h"

#include <bit>
#include <cstring>
#include <stdexcept>

#include "cryptopan.h"
#include "keyed_hash.h"
#include "l2l4.h"
#include "zanon.h"

namespace amon {

namespace {

std::array<uint8_t, 32> key32(const ActionCall& call, const char* param) {
  const ArgValue* a = call.arg(param);
  if (!a || !a->key || a->key->bytes.size() != 32)
    throw std::runtime_error(call.desc->name + ": key '" + (a && a->key ? a->key->name : "?") +
                             "' must be 32 bytes");
  std::array<uint8_t, 32> k;
  std::memcpy(k.data(), a->key->bytes.data(), 32);
  return k;
}

// hash(key=K) must not reuse K's bytes as they are (K may also key
// Crypto-PAn): the hash key is derived from K for this purpose only.
std::array<uint8_t, 16> hash_key(const ActionCall& call) { return KeyedHash::derive_key(key32(call, "key"), "amon hash()"); }

class Keep final : public RtAction {
 public:
  Keep() { modifies = false; }
  ActResult mac(uint8_t*, ApplyCtx&) override { return ActResult::Done; }
  ActResult addr(uint8_t*, ApplyCtx&) override { return ActResult::Done; }
  ActResult bytes(uint8_t*, uint32_t, ApplyCtx&) override { return ActResult::Done; }
};

class Zero final : public RtAction {
 public:
  ActResult mac(uint8_t* m, ApplyCtx&) override { std::memset(m, 0, 6); return ActResult::Done; }
  ActResult addr(uint8_t* a, ApplyCtx& c) override { std::memset(a, 0, c.family == 4 ? 4 : 16); return ActResult::Done; }
  ActResult bytes(uint8_t* p, uint32_t n, ApplyCtx&) override { std::memset(p, 0, n); return ActResult::Done; }
};

class Redact final : public RtAction {
 public:
  ActResult bytes(uint8_t* p, uint32_t n, ApplyCtx&) override { std::memset(p, 'x', n); return ActResult::Done; }
};

class Drop final : public RtAction {
 public:
  ActResult mac(uint8_t*, ApplyCtx&) override { return ActResult::Drop; }
  ActResult addr(uint8_t*, ApplyCtx&) override { return ActResult::Drop; }
  ActResult bytes(uint8_t*, uint32_t, ApplyCtx&) override { return ActResult::Drop; }
};

class Cut final : public RtAction {
 public:
  Cut() { cuts = true; }
  ActResult bytes(uint8_t*, uint32_t, ApplyCtx&) override { return ActResult::Cut; }
};

// The caller ends the record at the first zeroed byte; the zeros make the
// checksums it fixes independent of the bytes removed.
class Snap final : public RtAction {
 public:
  Snap() { snaps = true; }
  ActResult bytes(uint8_t* p, uint32_t n, ApplyCtx&) override { std::memset(p, 0, n); return ActResult::Done; }
};

class Hash final : public RtAction {
 public:
  explicit Hash(const ActionCall& call) : h_(hash_key(call)) {}
  ActResult mac(uint8_t* m, ApplyCtx& c) override {
    uint8_t out[6];
    h_.anon_mac(m, out);
    // Only a destination may be a group: every other MAC field names one
    // station (a source, a client's chaddr, the MAC of a DUID), and a
    // pseudonym there must read as one.
    if (c.field != l2l4::g_fields.eth_dst) out[0] &= 0xfe;
    std::memcpy(m, out, 6);
    return ActResult::Done;
  }
  ActResult addr(uint8_t* a, ApplyCtx& c) override {
    size_t n = c.family == 4 ? 4 : 16;
    uint64_t x = h_.hash64({a, n});
    if (n == 4) {
      std::memcpy(a, &x, 4);
    } else {
      uint8_t tweak[17];
      std::memcpy(tweak, a, 16);
      tweak[16] = 1;
      uint64_t y = h_.hash64({tweak, 17});
      std::memcpy(a, &x, 8);
      std::memcpy(a + 8, &y, 8);
    }
    return ActResult::Done;
  }
  ActResult bytes(uint8_t* p, uint32_t n, ApplyCtx&) override {
    // Length kept; filler drawn from the keyed hash of the whole value so
    // equal values stay equal (joins still work for the consumer).
    uint64_t x = h_.hash64({p, n});
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    for (uint32_t i = 0; i < n; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      p[i] = uint8_t(alnum[(x >> 33) % 36]);
    }
    return ActResult::Done;
  }

 private:
  KeyedHash h_;
};

inline void keep_prefix(uint8_t* a, int width_bytes, int bits) {
  for (int i = 0; i < width_bytes; ++i) {
    int keep = bits - i * 8;
    if (keep >= 8) continue;
    a[i] = keep <= 0 ? 0 : uint8_t(a[i] & (0xff00 >> keep));
  }
}

// zanon on an address field (ip.server): the decision is taken once per flow
// (by ProgramInstance at the flow's first packet) and read from the flow here.
class ZanonAddr final : public RtAction {
 public:
  ZanonAddr(ZanonSlotInfo slot, std::unique_ptr<RtAction> fallback) : slot_(slot), fb_(std::move(fallback)) {}
  ActResult addr(uint8_t* a, ApplyCtx& c) override {
    const FlowState* f = c.m->flow;
    uint64_t bit = 1ULL << slot_.bit;
    // No decision (no flow state) means nothing proves the value is shared by
    // z users: hide.
    bool released = f && (f->zdecided & bit) && (f->zreleased & bit);
    if (released) return ActResult::Done;
    return fb_->addr(a, c);
  }
  RtAction* undecided() override { return fb_.get(); }

 private:
  ZanonSlotInfo slot_;
  std::unique_ptr<RtAction> fb_;
};

}  // namespace

namespace rt {

Prefix::Prefix(const ActionCall& call) {
  kind = RtKind::Prefix;
  // The kept bits as byte masks, built once: a rewrite is then an AND.
  uint8_t m4[4], m6[16];
  std::memset(m4, 0xff, 4);
  std::memset(m6, 0xff, 16);
  const int bits = int(call.int_or("bits", 24)), v6 = int(call.int_or("v6", 48));
  keep_prefix(m4, 4, bits);
  keep_prefix(m6, 16, v6);
  std::memcpy(&m4_, m4, 4);
  std::memcpy(m6_, m6, 16);
  std::memset(m6, 0xff, 16);
  keep_prefix(m6, 16, std::min(v6, 16 + std::clamp(bits, 0, 32)));
  std::memcpy(m6to4_, m6, 16);
}

CryptoPan::CryptoPan(const ActionCall& call)
    : base_(key32(call, "key")), rotate_ns_(call.int_or("rotate", 0)), cache_(base_, 1 << 14, 1 << 12, /*keep_classes=*/true) {
  kind = RtKind::CryptoPan;
}

bool CryptoPan::inherit(CryptoPan& prev) {
  CryptoPan& old = *prev.owner_;
  if (base_ != old.base_ || rotate_ns_ != old.rotate_ns_) return false;
  // A rotating key's entries belong to the epoch they were made in: key
  // this cache for that epoch before taking them.
  if (rotate_ns_ > 0 && old.epoch_ != UINT64_MAX && old.epoch_ != epoch_) {
    epoch_ = old.epoch_;
    cache_.rekey(CryptoPAn::derive_epoch_key(base_, epoch_));
  }
  if (rotate_ns_ > 0 && epoch_ != old.epoch_) return false;
  if (!cache_.take_entries(old.cache_)) return false;
  inherited_ = true;
  return true;
}

void CryptoPan::share(const std::vector<CryptoPan*>& actions) {
  for (CryptoPan* a : actions) a->owner_ = a;
  std::vector<bool> grouped(actions.size(), false);
  for (size_t i = 0; i < actions.size(); ++i) {
    if (grouped[i]) continue;
    CryptoPan* owner = actions[i];
    std::vector<size_t> group{i};
    for (size_t j = i + 1; j < actions.size(); ++j)
      if (!grouped[j] && actions[j]->base_ == owner->base_ && actions[j]->rotate_ns_ == owner->rotate_ns_)
        group.push_back(j), grouped[j] = true;
    for (size_t j : group)
      if (actions[j]->inherited_) {
        owner = actions[j];
        break;
      }
    for (size_t j : group) actions[j]->owner_ = owner;
  }
}

void CryptoPan::rotate(uint64_t ts_ns) {
  uint64_t epoch = ts_ns / uint64_t(rotate_ns_);
  if (epoch != epoch_) {
    epoch_ = epoch;
    cache_.rekey(CryptoPAn::derive_epoch_key(base_, epoch));
  }
}

}  // namespace rt

std::unique_ptr<RtAction> make_rt_action(ActionKind k) {
  switch (k) {
    case ActionKind::Keep: return std::make_unique<Keep>();
    case ActionKind::Zero: return std::make_unique<Zero>();
    case ActionKind::Redact: return std::make_unique<Redact>();
    case ActionKind::Drop: return std::make_unique<Drop>();
    case ActionKind::Cut: return std::make_unique<Cut>();
    case ActionKind::Snap: return std::make_unique<Snap>();
    default: throw std::runtime_error("an action with parameters needs its call");
  }
}

std::unique_ptr<RtAction> make_rt_action(const ActionCall& call, const dsl::Policy& pol, SharedServices* svc,
                                         const ZanonSlotInfo* zslot) {
  switch (call.desc->kind) {
    case ActionKind::Keep:
    case ActionKind::Zero:
    case ActionKind::Redact:
    case ActionKind::Drop:
    case ActionKind::Cut:
    case ActionKind::Snap: return make_rt_action(call.desc->kind);
    case ActionKind::Timestamp: return std::make_unique<rt::Timestamp>(l2l4::g_fields.eth_dst);
    case ActionKind::Hash: return std::make_unique<Hash>(call);
    case ActionKind::CryptoPan: return std::make_unique<rt::CryptoPan>(call);
    case ActionKind::Prefix: return std::make_unique<rt::Prefix>(call);
    case ActionKind::Zanon: {
      if (!zslot) throw std::runtime_error("zanon: no decision slot (too many zanon rules in one policy?)");
      // The compiler resolves a fallback naming an action (call or word) to
      // that action, checked on the field; no fallback hides by zeroing.
      const ArgValue* fb = call.arg("fallback");
      if (fb && !fb->action)
        throw std::runtime_error(call.desc->name + ": fallback '" + fb->s + "' is not available for addresses");
      return std::make_unique<ZanonAddr>(
          *zslot, fb ? make_rt_action(*fb->action, pol, svc, nullptr) : make_rt_action(ActionKind::Zero));
    }
    case ActionKind::Unknown: break;
  }
  throw std::runtime_error("action '" + call.desc->name + "' has no runtime");
}

uint32_t rt_action_types(const ActionDesc& a) {
  constexpr uint32_t kName = 1u << unsigned(ValueType::Name), kText = 1u << unsigned(ValueType::Text);
  // Name: the actions ProgramInstance's NamePlan implements (anything else
  // on a name is refused when the policy is loaded).
  switch (a.kind) {
    case ActionKind::Keep: return rt_types<Keep>() | kName;
    case ActionKind::Zero: return rt_types<Zero>() | kName;
    case ActionKind::Redact: return rt_types<Redact>() | kName;
    case ActionKind::Drop: return rt_types<Drop>() | kName;
    case ActionKind::Cut: return rt_types<Cut>();
    case ActionKind::Snap: return rt_types<Snap>();
    case ActionKind::Timestamp: return rt_types<rt::Timestamp>();
    case ActionKind::Hash: return rt_types<Hash>() | kName;
    case ActionKind::CryptoPan: return rt_types<rt::CryptoPan>();
    case ActionKind::Prefix: return rt_types<rt::Prefix>();
    // Text: observed per occurrence, then the fallback's bytes().
    case ActionKind::Zanon: return rt_types<ZanonAddr>() | kName | kText;
    case ActionKind::Unknown: break;
  }
  return 0;
}

}  // namespace amon
