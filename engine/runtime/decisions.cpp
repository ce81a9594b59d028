// Decisions on names: the rule's plan, z-anonymity with its fallbacks, the
// DNS query memory and the per-worker caches of name keys and registrable
// domains.
#include "runtime_impl.h"

namespace amon {

// Not a PRF, but keyed by a per-instance secret and never published: an
// accidental collision needs the same flow, direction and transaction id
// too, and a deliberate one needs the secret. Inlined into open_exchange,
// its one caller.
[[gnu::always_inline]] inline uint64_t ProgramInstance::exch_key(uint32_t flow, unsigned qdir, uint16_t id, std::string_view qname) const {
  uint64_t h = exch_secret_ ^ (uint64_t(flow) << 32 | uint64_t(id) << 8 | qdir << 1 | 1) ^ (qname.size() * 0x9e3779b97f4a7c15ULL);
  size_t i = 0;
  for (; i + 8 <= qname.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, qname.data() + i, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  h = splitmix_of(h ^ tail_word(qname, i));
  return h | 1;  // 0 marks a free entry
}

[[gnu::always_inline]] inline names::Decision ProgramInstance::decide_name_in(FieldId f, std::string_view text,
                                                                           Eval& e, ExchangeRecall* recall,
                                                                           MsgNames* seen, bool& z) {
  int ri = pick(f, e);
  if (ri < 0) return names::Decision::keep();
  const NamePlan& np = name_plan_[ri];
  z = np.kind == NamePlan::Zanon;
  switch (np.kind) {
    case NamePlan::Keep: return names::Decision::keep();
    case NamePlan::Drop: return e.drop = true, names::Decision::redact();
    case NamePlan::Hash: return names::Decision::mask(name_key_[ri] ? name_key_[ri] : 1);
    case NamePlan::Redact: return names::Decision::redact(np.flat);
    case NamePlan::Zanon: break;
  }
  // Names are counted case-insensitively, without a trailing dot (the
  // parsers give the lowercased presentation form).
  while (!text.empty() && text.back() == '.') text.remove_suffix(1);
  if (seen)
    for (unsigned i = 0; i < seen->n; ++i)
      if (seen->seen[i].rule == ri && seen->seen[i].cls == field_class_[f] && seen->seen[i].text == text)
        return seen->seen[i].d;
  const names::Decision d = decide_zanon(f, ri, np, text, e, recall);
  if (seen && seen->n < MsgNames::kMax) seen->seen[seen->n++] = {text, ri, field_class_[f], d};
  return d;
}

names::Decision ProgramInstance::decide_name(FieldId f, std::string_view text, Eval& e, ExchangeRecall* recall,
                                             MsgNames* seen) {
  bool z = false;
  const names::Decision d = decide_name_in(f, text, e, recall, seen, z);
  if (echo_) echo_->name(text, d, z);
  return d;
}

names::Decision ProgramInstance::PluginHost::decide_name(FieldId f, std::string_view text, bool exchange,
                                                         std::string_view shown) {
  bool z = false;
  const names::Decision d = self_.decide_name_in(f, text, *e_, exchange && open_ ? &rc_ : nullptr, &seen_, z);
  if (self_.echo_) {
    self_.echo_->name(text, d, z);
    if (!shown.empty()) self_.echo_->name(shown, d, z);
  }
  return d;
}

bool ProgramInstance::PluginHost::open_exchange(uint32_t flow, unsigned query_dir, uint16_t id, std::string_view name,
                                                bool response, bool& recalled) {
  recalled = open_ = false;
  if (self_.exch_.empty()) return false;
  const uint64_t key = self_.exch_key(flow, query_dir, id, name);
  uint32_t t = uint32_t(e_->m->ts_ns >> 20);
  const ExchangeMemo* hit = nullptr;
  if (response) {
    if (!(hit = self_.exch_find(key, t))) return false;
    t = hit->t;
  }
  rc_.key = key, rc_.t = t, rc_.record = !response, rc_.hit = hit;
  recalled = hit != nullptr;
  return open_ = true;
}

names::Decision ProgramInstance::decide_zanon(FieldId f, int ri, const NamePlan& np, std::string_view text, Eval& e,
                                              ExchangeRecall* recall) {
  ZOutcome out;
  uint8_t keep = 0;
  if (recall && recall->hit && recall->hit->rule == uint16_t(ri)) {
    // The query's decision, not a new observation: the exchange is one
    // occurrence, and the response must not release what the query hid
    // (nor hide what it released).
    out = ZOutcome(recall->hit->outcome);
    keep = recall->hit->sld_keep;
  } else {
    zanon::Store* st = prog_.services_->zstore;
    const zanon::ZParams zp = np.zp;
    zanon::Scope sc{field_class_[f], zscope_.kind};
    out = ZOutcome::Hidden;
    NameKeys* nk = name_keys_.empty() ? nullptr : name_keys(sc, text, *st);
    const zanon::Key key = nk ? zanon::Key{sc, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}, nk->h}
                              : st->key(sc, text);
    // The store's rows for a name seen for the first time are cache misses:
    // they load while the user's key is worked out.
    st->prefetch(key);
    if (!e.have_user) e.user = user_of(e.client, e.alen), e.have_user = true;
    if (st->observe(key, e.user, e.m->ts_ns, zp)) {
      out = ZOutcome::Released;
    } else if (np.fb == NamePlan::FbSld) {
      SldInfo si;
      if (!nk) {
        si = sld_info(text, key.h);
      } else {
        if (!nk->have_si) nk->si = sld_info(text, key.h), nk->have_si = true;
        si = nk->si;
      }
      if (si.keep != 0 && si.keep < si.total) {
        // The registrable domain is a value of the same class with its own test.
        std::string_view sld = text.substr(text.size() - si.sld_len);
        zanon::Key sk;
        if (!nk) {
          sk = st->key(sc, sld);
        } else {
          if (!nk->have_sld_h) nk->sld_h = sld_key(sc, sld, *st), nk->have_sld_h = true;
          sk = zanon::Key{sc, {reinterpret_cast<const uint8_t*>(sld.data()), sld.size()}, nk->sld_h};
        }
        if (st->observe(sk, e.user, e.m->ts_ns, zp)) out = ZOutcome::Sld, keep = si.keep;
      }
    }
    if (recall && recall->record) {
      ExchangeMemo& slot = exch_slot(recall->key);
      slot = ExchangeMemo{recall->key, recall->t, uint16_t(ri), uint8_t(out), keep};
    }
  }
  if (out == ZOutcome::Released) return ++e.c->zanon_released, names::Decision::keep();
  ++e.c->zanon_hidden;
  // A hidden name is never a pseudonym: whoever knows one visit of a rare
  // name would find every other visitor by it, which is what z-anonymity
  // prevents. Its hidden labels take a fixed filler (names::hidden), so it
  // is recognizable, the same for every name of that layout, and free of
  // randomness (a run is reproducible). A hash fallback is the policy's own
  // choice of a consistent pseudonym.
  if (out == ZOutcome::Sld) return names::Decision::hidden(keep);
  if (np.fb == NamePlan::FbHash) return names::Decision::mask(name_key_[ri] ? name_key_[ri] : 1);
  if (np.fb == NamePlan::FbRedact) return names::Decision::redact(np.flat);
  return names::Decision::hidden();
}

ProgramInstance::ExchangeMemo& ProgramInstance::exch_slot(uint64_t key) {
  ExchangeMemo* set = &exch_[(key >> 20) % kExchSets * kExchWays];
  ExchangeMemo* victim = set;
  for (unsigned i = 0; i < kExchWays; ++i) {
    if (set[i].key == key || set[i].key == 0) return set[i];
    // Oldest by wrap-around age relative to the newest entry's time.
    if (int32_t(set[i].t - victim->t) < 0) victim = &set[i];
  }
  return *victim;
}

const ProgramInstance::ExchangeMemo* ProgramInstance::exch_find(uint64_t key, uint32_t now) const {
  const ExchangeMemo* set = &exch_[(key >> 20) % kExchSets * kExchWays];
  for (unsigned i = 0; i < kExchWays; ++i)
    if (set[i].key == key) return uint32_t(now - set[i].t) <= kExchMaxAge ? &set[i] : nullptr;
  return nullptr;
}

uint64_t ProgramInstance::name_tag(zanon::Scope sc, std::string_view text) const {
  const size_t n = text.size();
  uint64_t h = name_keys_secret_ ^ (n * 0x9e3779b97f4a7c15ULL) ^ (uint64_t(sc.cls) << 32 | sc.kind);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, text.data() + i, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  return splitmix_of(h ^ tail_word(text, i)) | 1;
}

zanon::Hash128 ProgramInstance::sld_key(zanon::Scope sc, std::string_view sld, const zanon::Store& st) {
  const size_t n = sld.size();
  if (n > SldKey::kText) return st.key(sc, sld).h;
  const uint64_t tag = name_tag(sc, sld);
  SldKey& k = sld_keys_[(tag >> 32) % kSldKeys];
  if (k.tag == tag && k.len == n && k.cls == sc.cls && k.kind == sc.kind && std::memcmp(k.text, sld.data(), n) == 0)
    return k.h;
  k.tag = tag;
  k.h = st.key(sc, sld).h;
  k.cls = sc.cls, k.kind = sc.kind, k.len = uint8_t(n);
  std::memcpy(k.text, sld.data(), n);
  return k.h;
}

// A hit must equal the name byte for byte (the tag only finds the slot), so
// a collision of this cheap hash costs a miss, never a wrong key.
ProgramInstance::NameKeys* ProgramInstance::name_keys(zanon::Scope sc, std::string_view text, const zanon::Store& st) {
  const size_t n = text.size();
  if (n > NameKeys::kText) return nullptr;
  const uint64_t tag = name_tag(sc, text);
  NameKeys* set = &name_keys_[(tag >> 32) % kNameKeySets * 2];
  auto same = [&](const NameKeys& k) {
    return k.tag == tag && k.len == n && k.cls == sc.cls && k.kind == sc.kind && std::memcmp(k.text, text.data(), n) == 0;
  };
  if (same(set[0])) return &set[0];
  if (same(set[1])) return &set[1];
  // Newest first, the older one moves to the other way (an entry is two
  // lines: no swap on a hit).
  set[1] = set[0];
  NameKeys& k = set[0];
  k.tag = tag;
  k.h = st.key(sc, text).h;
  k.cls = sc.cls;
  k.kind = sc.kind;
  k.len = uint8_t(n);
  k.have_si = k.have_sld_h = false;
  std::memcpy(k.text, text.data(), n);
  return &k;
}

ProgramInstance::SldInfo ProgramInstance::sld_info(std::string_view name, const zanon::Hash128& h) {
  const uint64_t tag = h.hi | 1;
  SldSlot* set = &sld_cache_[(h.lo >> 32) % kSldSets * 2];
  if (set[0].tag == tag) return set[0].info;
  if (set[1].tag == tag) {
    std::swap(set[0], set[1]);  // most recent first: the other way is the victim
    return set[0].info;
  }
  SldInfo si;
  const unsigned total = names::count_labels(name), keep = names::registrable_label_count(name);
  si.total = uint8_t(std::min(total, 255u));
  si.keep = uint8_t(std::min(keep, 255u));
  if (keep != 0 && keep < total) {
    size_t pos = name.size();
    for (unsigned j = 0; j < keep; ++j) pos = name.rfind('.', pos - 1);
    si.sld_len = uint16_t(name.size() - pos - 1);
  }
  set[1] = set[0];
  set[0] = SldSlot{tag, si};
  return si;
}

}  // namespace amon
