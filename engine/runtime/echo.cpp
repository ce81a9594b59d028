// EchoScan (echo.h): the table of values a consumer rewrote, the search of
// kept payload for them and their rewrite. The database is compiled by the
// background thread (echo_build.cpp).
#include "echo.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <cstdio>
#include <tmmintrin.h>
#include <functional>
#include <strings.h>

#include "addr_text.h"
#include "value_parts.h"
#include "echo_build.h"

namespace amon {

namespace {

bool word(int c) { return std::isalnum(c) || c == '-' || c == '_'; }
bool hexc(int c) { return std::isxdigit(c); }
// A percent-escape ends right before `from` ("%3D" in a query string that
// quotes "name=value"): a delimiter, not a word the value continues.
bool escaped_before(const uint8_t* p, uint32_t from) {
  return from >= 3 && p[from - 3] == '%' && hexc(p[from - 2]) && hexc(p[from - 1]);
}

// A MAC's text forms (EchoKind::Mac, form numbers): 0/1 with colons, 2/3
// with dashes, 5/6 without separators (a UPnP UUID's node, a serial), 7/8
// in Cisco's dotted groups of four (an access point's default name), each
// in lower then upper case; 4 is the binary. Returns the length written.
constexpr uint8_t kMacBinary = 4;
unsigned mac_text(const uint8_t* m, uint8_t form, char* o) {
  const char* hex = (form < kMacBinary ? form & 1 : !(form & 1)) ? "0123456789ABCDEF" : "0123456789abcdef";
  const char sep = form < 2 ? ':' : form < kMacBinary ? '-' : '.';
  const unsigned every = form < kMacBinary ? 1 : form < 7 ? 6 : 2;  // bytes between separators
  char* const start = o;
  for (unsigned i = 0; i < 6; ++i) {
    if (i && i % every == 0) *o++ = sep;
    *o++ = hex[m[i] >> 4], *o++ = hex[m[i] & 15];
  }
  return unsigned(o - start);
}

// Whether a MAC's text in form `form` at [from, to) stands alone: not
// part of a longer run of hex digits, nor of a longer address in the
// form's own separators (an EUI-64, an IPv6 address). Two exceptions
// that are no such run. A serial number made of the MAC in dashes and a
// short tail (a Sonos player's "34-7E-5C-FF-A2-6E-7"): a dash, one to four
// letters or digits, then the word ends, where an address's next group is
// followed by another separator. And the other form's separator before it
// (colons and dashes are never mixed in one address) joins only after a
// word of hex digits, an address's group: "serial:34-7E-..." stands alone.
bool mac_alone(const uint8_t* p, uint32_t n, uint32_t from, uint32_t to, uint8_t form) {
  const bool seps = form < kMacBinary;
  const char sep = form < 2 ? ':' : seps ? '-' : form >= 7 ? '.' : 0, other = form < 2 ? '-' : ':';
  if (from) {
    const uint8_t c = p[from - 1];
    if (hexc(c) || (sep && c == sep)) return false;
    if (seps && c == other) {
      uint32_t k = from - 1;
      while (k && from - 1 - k < 5 && hexc(p[k - 1])) --k;
      const uint32_t group = from - 1 - k;
      if (group && group <= 4 && (!k || !std::isalnum(p[k - 1]))) return false;
    }
  }
  if (to == n) return true;
  const uint8_t c = p[to];
  if (!hexc(c) && !(sep && c == sep) && !(seps && c == other)) return true;
  if (form < 2 || form >= kMacBinary || c != '-') return false;
  uint32_t k = to + 1;
  while (k < n && k - to <= 5 && std::isalnum(p[k])) ++k;
  const uint32_t tail = k - to - 1;
  return tail && tail <= 4 && (k == n || !(word(p[k]) || p[k] == ':'));
}

// Values that name no one: the zero and all-ones address, group MACs.
bool anonymous(EchoKind k, std::string_view v) {
  if (k == EchoKind::Mac && (uint8_t(v[0]) & 1)) return true;
  if (k == EchoKind::Addr4 || k == EchoKind::Addr6 || k == EchoKind::Mac)
    return std::all_of(v.begin(), v.end(), [](char c) { return c == 0; }) ||
           std::all_of(v.begin(), v.end(), [](char c) { return uint8_t(c) == 0xff; });
  return false;
}

}  // namespace

uint64_t echo_key(EchoKind k, std::string_view v) {
  return std::hash<std::string_view>{}(v) * 0x9e3779b97f4a7c15ULL ^ (uint64_t(k) + 1);
}

// Into `out`'s elements as they are (their strings keep their capacity):
// a table slot taking a new value allocates nothing.
void echo_forms(const EchoValue& v, std::vector<EchoForm>& out) {
  const auto* b = reinterpret_cast<const uint8_t*>(v.old.data());
  size_t n = 0;
  auto put = [&](std::string_view lit, uint8_t form, bool caseless) {
    if (n == out.size()) out.emplace_back();
    EchoForm& f = out[n++];
    f.lit.assign(lit), f.form = form, f.caseless = caseless;
  };
  char t[48];
  switch (v.kind) {
    case EchoKind::Addr4:
      put({t, addr_text_of(b, 4, t)}, 0, false);
      // Not in binary here: four given bytes turn up by chance in
      // compressed or encrypted payload (once in 2^32 places, for each of a
      // thousand values), and they made the database several times slower
      // to compile and to search. Form 1, the binary, is found by
      // search_bin4 in structured payload only.
      break;
    case EchoKind::Addr6: {
      const unsigned len = addr_text_of(b, 16, t);
      const std::string_view s(t, len);
      char up[48], full[48];
      for (unsigned i = 0; i < len; ++i) up[i] = char(std::toupper(uint8_t(t[i])));
      put(s, 0, false);
      if (s != std::string_view(up, len)) put({up, len}, 1, false);
      unsigned fn = 0;
      for (int i = 0; i < 16; i += 2) fn += unsigned(std::snprintf(full + fn, sizeof full - fn, "%s%02x%02x", i ? ":" : "", b[i], b[i + 1]));
      if (s != std::string_view(full, fn)) put({full, fn}, 2, false);
      put(v.old, 3, false);
      break;
    }
    case EchoKind::Mac:
      for (uint8_t f = 0; f < 9; ++f)
        if (f == kMacBinary) put(v.old, f, false);
        else put({t, mac_text(b, f, t)}, f, false);
      break;
    case EchoKind::Bytes: put(v.old, 0, false); break;
    case EchoKind::Name: put(v.old, 0, true); break;
  }
  out.resize(n);
}

EchoScan::EchoScan()
    : slots_(kEntries), is_dirty_(kEntries), shared_(std::make_shared<EchoShared>(std::vector<size_t>{kEntries})) {}

const std::vector<EchoForm>& EchoScan::forms_of(EchoValue& v) {
  if (v.formed != v.seq) echo_forms(v, v.forms), v.formed = v.seq;
  return v.forms;
}

void EchoScan::touch(uint32_t slot) {
  if (!is_dirty_[slot]) is_dirty_[slot] = 1, dirty_.push_back(slot);
}

void EchoPreload::put(std::string_view old, std::string_view repl, EchoKind kind, const names::Decision* dec) {
  if (kind == EchoKind::Bytes && (old.size() < EchoScan::kMinBytes || old == repl)) return;
  // The pre-pass offers both ends of every packet: the key is built in a
  // buffer that keeps its capacity, copied only for a value new here.
  key_.assign(1, char(kind));
  key_.append(old);
  if (seen_.count(key_)) return;
  if (items.size() >= kMax) return void(++over);
  seen_.insert(key_);
  items.push_back({std::string(old), std::string(repl), kind, dec ? *dec : names::Decision{}});
}

void EchoPreload::add_addr(const uint8_t* a, unsigned alen) {
  const EchoKind k = alen == 4 ? EchoKind::Addr4 : EchoKind::Addr6;
  const std::string_view o(reinterpret_cast<const char*>(a), alen);
  if (anonymous(k, o)) return;
  const size_t had = items.size();
  put(o, {}, k);
  addrs += items.size() - had;
}

void EchoPreload::add_name(std::string_view text, const names::Decision& d) {
  while (!text.empty() && text.back() == '.') text.remove_suffix(1);
  if (d.action == names::Action::Keep || text.size() < EchoScan::kMinName || text.size() > EchoScan::kMaxValue) return;
  std::string low(text);
  for (char& c : low) c = char(c | (uint8_t(c - 'A') < 26 ? 0x20 : 0));
  put(low, {}, EchoKind::Name, &d);
}

// As EchoScan::bytes records a rewritten value: its first kMaxValue bytes,
// and each of its parts.
void EchoPreload::add(std::string_view old, std::string_view repl) {
  if (old.size() < EchoScan::kMinBytes || old.size() != repl.size()) return;
  put(old.substr(0, EchoScan::kMaxValue), repl.substr(0, EchoScan::kMaxValue));
  value_parts(old, [&](uint32_t from, uint32_t n) { put(old.substr(from, n), repl.substr(from, n)); });
}

void EchoScan::preload(const EchoPreload& p) {
  if (p.items.empty() || seq_ || pinned_) return;
  pinned_ = unsigned(p.items.size());
  slots_.resize(kEntries + pinned_);
  is_dirty_.resize(slots_.size());
  index_ = EchoIndex(2 * (kEntries + pinned_));
  for (unsigned i = 0; i < pinned_; ++i) {
    const uint32_t slot = kEntries + i;
    EchoValue& v = slots_[slot];
    v.kind = p.items[i].kind, v.old = p.items[i].old, v.repl = p.items[i].repl, v.seq = ++seq_, v.z = false;
    v.dec = p.items[i].dec;
    v.key = echo_key(v.kind, v.old);
    forms_of(v);
    bin4_count(v, 1);
    index_.put(v.key, slot);
    pending_.emplace_back(slot, v.seq);
    touch(slot);
  }
  relist_pending();
  shared_ = std::make_shared<EchoShared>(std::vector<size_t>{slots_.size()});
}

void EchoIndex::erase(uint64_t key) {
  unsigned i = home(key);
  for (;; i = (i + 1) & mask_) {
    if (t_[i].slot == kNone) return;
    if (t_[i].key == key) break;
  }
  // Backward shift: each later entry of the run moves into the hole unless
  // its home lies cyclically after the hole (then it would be unreachable).
  for (unsigned j = (i + 1) & mask_;; j = (j + 1) & mask_) {
    if (t_[j].slot == kNone) break;
    const unsigned h = home(t_[j].key);
    if (((j - h) & mask_) >= ((j - i) & mask_)) t_[i] = t_[j], i = j;
  }
  t_[i] = E{};
  --n_;
}

void EchoScan::share(const std::vector<EchoScan*>& scans) {
  std::vector<EchoScan*> fresh;
  for (EchoScan* s : scans)
    if (s && s->seq_ == s->pinned_ && !s->handed_) fresh.push_back(s);
  if (fresh.size() < 2) return;
  std::vector<size_t> slots;
  for (EchoScan* s : fresh) slots.push_back(s->slots_.size());
  auto group = std::make_shared<EchoShared>(slots);
  for (unsigned i = 0; i < fresh.size(); ++i) {
    fresh[i]->shared_ = group;
    fresh[i]->member_ = i;
    fresh[i]->taken_ = 0;
    fresh[i]->covered_ = 0;
    fresh[i]->gen_.reset();
  }
}

// Held by the database: another consumer of the worker brought it in.
bool EchoScan::in_db(EchoKind k, std::string_view old, uint64_t key) const {
  return gen_ && gen_->holds(k, old, key);
}
bool EchoScan::in_db(const EchoValue& v) const { return in_db(v.kind, v.old, v.key); }

EchoScan::~EchoScan() = default;

void EchoScan::addr(const uint8_t* old_a, const uint8_t* new_a, unsigned alen, bool z) {
  const EchoKind k = alen == 4 ? EchoKind::Addr4 : EchoKind::Addr6;
  const std::string_view o(reinterpret_cast<const char*>(old_a), alen);
  if (std::memcmp(old_a, new_a, alen) == 0) return release(k, o);
  record(k, o, {reinterpret_cast<const char*>(new_a), alen}, z);
}

void EchoScan::mac(const uint8_t* old_m, const uint8_t* new_m) {
  if (std::memcmp(old_m, new_m, 6) == 0) return;
  record(EchoKind::Mac, {reinterpret_cast<const char*>(old_m), 6}, {reinterpret_cast<const char*>(new_m), 6}, false);
}

void EchoScan::bytes(const uint8_t* old_v, const uint8_t* new_v, uint32_t len, bool z) {
  if (len < kMinBytes) return;
  const bool kept = std::memcmp(old_v, new_v, len) == 0;
  if (kept && !zlive_) return;
  const std::string_view o(reinterpret_cast<const char*>(old_v), len), r(reinterpret_cast<const char*>(new_v), len);
  auto take = [&](uint32_t from, uint32_t n) {
    if (kept) release(EchoKind::Bytes, o.substr(from, n));
    else record(EchoKind::Bytes, o.substr(from, n), r.substr(from, n), z);
  };
  take(0, std::min<uint32_t>(len, kMaxValue));
  // Its parts (value_parts.h); the same bytes of the rewritten value
  // replace them (every bytes action keeps a value's length).
  value_parts(o, take);
}

void EchoScan::name(std::string_view text, const names::Decision& d, bool z) {
  const bool kept = d.action == names::Action::Keep;
  if (kept && !zlive_) return;
  while (!text.empty() && text.back() == '.') text.remove_suffix(1);
  if (text.size() < kMinName || text.size() > kMaxValue) return;
  low_.assign(text);
  // ASCII only, as the C locale's tolower, without its call per byte (a
  // hidden name per DNS packet made it 5 % of the normal DNS trace).
  for (char& c : low_) c = char(c | (uint8_t(c - 'A') < 26 ? 0x20 : 0));
  if (kept) return release(EchoKind::Name, low_);
  record(EchoKind::Name, low_, {}, z, &d);
}

// A packet's values are mostly its flow's again (its addresses, its MACs):
// a small direct-mapped cache of recent slots, by a hash of the first
// bytes, answers those before the index's hash of the whole value.
static unsigned quick_of(EchoKind k, std::string_view v) {
  uint64_t w = 0;
  std::memcpy(&w, v.data(), std::min<size_t>(8, v.size()));
  return unsigned(((w ^ (uint64_t(v.size()) << 56) ^ uint64_t(k)) * 0x9e3779b97f4a7c15ULL) >> 56);
}

void EchoScan::record(EchoKind k, std::string_view old, std::string_view repl, bool z, const names::Decision* dec) {
  if (anonymous(k, old)) return;
  // Known: only what it becomes may have moved (a MAC's timestamp, a
  // rotated key); the database searches for the old value alone. Rewritten
  // once by another action than z-anonymity's, it stays protected.
  auto update = [&](EchoValue& v) {
    if (v.repl != repl) v.repl.assign(repl);
    if (dec) v.dec = *dec;
    if (v.z && !z) v.z = false, --zlive_;
  };
  const unsigned q = quick_of(k, old);
  if (const uint32_t s = quick_[q]) {
    EchoValue& v = slots_[s - 1];
    if (v.seq && v.kind == k && v.old == old) return update(v);
  }
  const uint64_t h = echo_key(k, old);
  if (const uint32_t s = index_.find(h); s != EchoIndex::kNone) {
    EchoValue& v = slots_[s];
    quick_[q] = s + 1;
    if (v.kind == k && v.old == old) return update(v);
  }
  if (z && released_[h % kReleased] == h) return;
  const uint32_t slot = next_;
  next_ = (next_ + 1) % kEntries;
  EchoValue& v = slots_[slot];
  if (v.seq) {
    if (index_.find(v.key) == slot) index_.erase(v.key);
    zlive_ -= v.z;
    bin4_count(v, -1);
  }
  v.kind = k, v.old.assign(old), v.repl.assign(repl), v.seq = ++seq_, v.z = z, v.key = h;
  bin4_count(v, 1);
  zlive_ += z;
  if (dec) v.dec = *dec;
  index_.put(h, slot);
  quick_[q] = slot + 1;
  pending_.emplace_back(slot, v.seq);
  fresh_.emplace_back(slot, v.seq);
  // Between two searches only the values still in the table are kept.
  if (fresh_.size() >= 2 * size_t(kEntries))
    fresh_.erase(std::remove_if(fresh_.begin(), fresh_.end(), [&](const auto& f) { return slots_[f.first].seq != f.second; }),
                 fresh_.end());
  // Past the bound, the oldest value that took turns in the table has
  // left its slot by now. A preloaded one ahead of it is still held: it
  // goes behind, until a database covers it.
  while (pending_.size() > kEntries + pinned_) {
    const auto [s, q] = pending_.front();
    pending_.pop_front();
    if (s < kEntries || q <= covered_) break;
    pending_.emplace_back(s, q);
  }
  touch(slot);
}

// A value only z-anonymity hid, left in clear by a field now: it leaves
// the table (its slot is free; the next database no longer holds it, and
// until then its hits are dropped as any value's that left).
void EchoScan::release(EchoKind k, std::string_view old) {
  if (!zlive_) return;
  const uint64_t h = echo_key(k, old);
  const uint32_t slot = index_.find(h);
  if (slot == EchoIndex::kNone) return;
  EchoValue& v = slots_[slot];
  if (!v.z || v.kind != k || v.old != old) return;
  index_.erase(h);
  released_[h % kReleased] = h;
  bin4_count(v, -1);
  v.seq = 0, v.z = false, v.formed = 0;
  v.old.clear(), v.forms.clear();
  --zlive_;
  touch(slot);
}

unsigned EchoScan::pending() const {
  unsigned n = 0;
  for (const auto& [slot, seq] : pending_) n += seq > covered_ && slots_[slot].seq == seq && !in_db(slots_[slot]);
  return n;
}

void EchoScan::flush() {
  if (dirty_.empty()) return;
  outbox_.clear();
  for (uint32_t slot : dirty_) {
    const EchoValue& v = slots_[slot];
    outbox_.add(slot, v.seq, v.kind, v.seq ? std::string_view(v.old) : std::string_view());
  }
  outbox_.items.push_back({seq_, EchoBatch::kCovers, 0, 0, 0, EchoKind::Bytes});
  if (!echo_hand_over(shared_, member_, outbox_)) return;
  for (uint32_t slot : dirty_) is_dirty_[slot] = 0;
  dirty_.clear();
  handed_ = true;
}

void EchoScan::list_new() {
  for (size_t i = 0; i < fresh_.size(); ++i) {
    const auto [slot, seq] = fresh_[i];
    // add_pending may list everything again (a shorter window): fresh_ is
    // then empty.
    if (seq > covered_ && slots_[slot].seq == seq && !in_db(slots_[slot])) add_pending(slot);
  }
  fresh_.clear();
  // No database for a long while (a burst, a failed compile): the lists
  // keep only what the table holds, so they never outgrow it.
  if (listed_ > 4 * kEntries) relist_pending();
}

void EchoScan::adopt() {
  if (auto g = echo_take(*shared_, taken_)) {
    gen_ = std::move(g);
    covered_ = gen_->covered(member_);
    while (!pending_.empty() &&
           (pending_.front().second <= covered_ || slots_[pending_.front().first].seq != pending_.front().second))
      pending_.pop_front();
    relist_pending();
  }
}

bool EchoScan::wait_built(unsigned ms) {
  for (unsigned t = 0;; ++t) {
    flush();
    adopt();
    if (dirty_.empty() && covered_ >= seq_) return true;
    if (t >= ms) return false;
    echo_sleep_ms(1);
  }
}

int EchoScan::on_match(unsigned id, unsigned long long, unsigned long long to, unsigned, void* ctx) {
  auto* self = static_cast<EchoScan*>(ctx);
  const EchoGen::Pat& pat = self->gen_->pats[id];
  // Only a value this consumer's table still holds (what it becomes now):
  // one that left it, or that only another consumer holds, is not
  // rewritten, whether or not the database the worker holds is older than
  // its leaving, so the bytes written never depend on when a database was
  // built.
  const uint32_t s = self->index_.find(pat.key);
  if (s == EchoIndex::kNone) return 0;
  EchoValue& live = self->slots_[s];
  if (!live.seq || pat.form >= self->forms_of(live).size()) return 0;
  const EchoForm& f = live.forms[pat.form];
  const uint32_t from = uint32_t(to - pat.len);
  const char* at = reinterpret_cast<const char*>(self->scanned_ + from);
  if (f.lit.size() != pat.len || (f.caseless ? strncasecmp(at, f.lit.data(), pat.len) != 0
                                             : std::memcmp(at, f.lit.data(), pat.len) != 0))
    return 0;
  self->hits_.push_back({from, pat.len, f.form, &live});
  return 0;
}

// The values not in the database yet, by the two bytes that end the first
// m_ bytes of each of their forms (each case of a caseless form's), with
// the shift table of a Wu-Manber search over them. One pass over the
// payload then costs about the same for one value or a thousand, looks at
// about one byte pair in m_ - 1 where no form starts, and compares a form
// only where its first bytes may be.
namespace {
// Lists and shifts are by byte pairs with letters folded to lower case: a
// caseless form is listed once, not under each case of its letters, and
// the candidates' heads and the comparison tell the cases apart.
constexpr auto kFold = [] {
  std::array<uint8_t, 256> t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = uint8_t(c >= 'A' && c <= 'Z' ? c + 32 : c);
  return t;
}();
unsigned pair_key(uint8_t a, uint8_t b) { return unsigned(kFold[a]) | unsigned(kFold[b]) << 8; }
}  // namespace

void EchoScan::add_pending(uint32_t slot) {
  EchoValue& v = slots_[slot];
  ++listed_;
  for (const EchoForm& f : forms_of(v))
    if (f.lit.size() < m_) {
      // A shorter form than the window: every list is made again for it.
      m_ = unsigned(std::max<size_t>(2, f.lit.size()));
      relist_pending();
      return;
    }
  for (uint8_t fi = 0; fi < v.forms.size(); ++fi) {
    const EchoForm& f = v.forms[fi];
    const auto* b = reinterpret_cast<const uint8_t*>(f.lit.data());
    uint32_t head = 0, mask = 0;
    const size_t hn = std::min<size_t>(4, f.lit.size());
    std::memcpy(&head, b, hn);
    std::memset(&mask, 0xff, hn);
    if (f.caseless) head |= 0x20202020u & mask;
    for (size_t j = 1; j < m_; ++j) {
      const uint8_t sh = uint8_t(m_ - 1 - j);
      const unsigned k = pair_key(b[j - 1], b[j]);
      if (shift_[k] == kWindow - 1 && sh < kWindow - 1) shifted_.push_back(uint16_t(k));
      shift_[k] = std::min(shift_[k], sh);
      if (sh) continue;
      if (buckets_[k].empty()) touched_.push_back(uint16_t(k));
      buckets_[k].push_back({v.seq, slot, head, mask, fi, f.caseless});
    }
  }
}

// After a new database: only the values it does not hold stay listed.
void EchoScan::relist_pending() {
  fresh_.clear();
  for (uint16_t k : touched_) buckets_[k].clear();
  for (uint16_t k : shifted_) shift_[k] = kWindow - 1;
  touched_.clear(), shifted_.clear();
  auto listed = [&](uint32_t slot, uint64_t seq) {
    return seq > covered_ && slots_[slot].seq == seq && !in_db(slots_[slot]);
  };
  unsigned m = kWindow;
  for (const auto& [slot, seq] : pending_)
    if (listed(slot, seq))
      for (const EchoForm& f : forms_of(slots_[slot])) m = std::min<unsigned>(m, unsigned(std::max<size_t>(2, f.lit.size())));
  m_ = m;
  for (const auto& [slot, seq] : pending_)
    if (listed(slot, seq)) add_pending(slot);
  listed_ = 0;
}

void EchoScan::search_pending(const uint8_t* p, uint32_t n) {
  if (touched_.empty() || n < m_) return;
  const uint32_t m = m_;
  for (uint32_t e = m - 1; e < n;) {
    const unsigned k = pair_key(p[e - 1], p[e]);
    if (const uint8_t sh = shift_[k]) {
      e += std::min<uint32_t>(sh, m - 1);  // the default is kWindow - 1, for the longest window
      continue;
    }
    const uint32_t i = e + 1 - m;
    uint32_t at = 0;
    std::memcpy(&at, p + i, std::min<uint32_t>(4, n - i));
    for (const Cand& c : buckets_[k]) {
      // Equal under strncasecmp means equal with bit 0x20 set in every byte.
      if (((c.caseless ? at | 0x20202020u : at) & c.mask) != c.head) continue;
      const EchoValue& v = slots_[c.slot];
      if (v.seq != c.seq) continue;  // left the table
      const EchoForm& f = v.forms[c.form];
      const uint32_t L = uint32_t(f.lit.size());
      if (i + L > n) continue;
      const bool eq = f.caseless ? strncasecmp(reinterpret_cast<const char*>(p + i), f.lit.data(), L) == 0
                                 : std::memcmp(p + i, f.lit.data(), L) == 0;
      if (eq) hits_.push_back({i, L, f.form, &v});
    }
    ++e;
  }
}

void EchoScan::bin4_count(const EchoValue& v, int by) {
  if (v.kind != EchoKind::Addr4 || v.old.size() != 4 || std::count(v.old.begin(), v.old.end(), '\0') >= 2) return;
  auto count = [by](std::vector<uint16_t>& n, std::vector<uint64_t>& bits, unsigned pair) {
    n[pair] = uint16_t(n[pair] + by);
    if (n[pair]) bits[pair >> 6] |= uint64_t(1) << (pair & 63);
    else bits[pair >> 6] &= ~(uint64_t(1) << (pair & 63));
  };
  count(bin4_first_, bin4_first_bits_, unsigned(uint8_t(v.old[0])) << 8 | uint8_t(v.old[1]));
  count(bin4_last_, bin4_last_bits_, unsigned(uint8_t(v.old[2])) << 8 | uint8_t(v.old[3]));
  uint16_t& lead = bin4_lead_[uint8_t(v.old[0])];
  lead = uint16_t(lead + by);
  bin4_lead_changed_ = bin4_lead_changed_ || lead == 0 || (by > 0 && lead == 1);
  bin4_live_ += unsigned(by);
}

namespace {
// Payload that is not compressed or encrypted: there every byte value is
// about as likely as any other, a zero once in 256 bytes; records, lengths,
// padding and strings of structured binary hold zeros far more often. At
// least one in 64 (and two): a random 64-byte payload passes 2.6 % of the
// time, a random 1,400-byte one about never.
// Sixteen bytes at a time, done as soon as enough are found, over the
// first 256 bytes (where a record's header, padding and strings are): a
// byte loop over whole payloads cost some 3,900 instructions per packet of
// the generator's mix under ids.amon (doc/performance.md).
bool bin4_structured(const uint8_t* p, uint32_t n) {
  n = std::min<uint32_t>(n, 256);
  const uint32_t need = std::max<uint32_t>(2, n / 64);
  const __m128i zero = _mm_setzero_si128();
  uint32_t zeros = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    zeros += unsigned(__builtin_popcount(unsigned(_mm_movemask_epi8(_mm_cmpeq_epi8(v, zero)))));
    if (zeros >= need) return true;
  }
  for (; i < n; ++i) zeros += p[i] == 0;
  return zeros >= need;
}
}  // namespace

// Each four bytes whose first byte may begin some IPv4 value of the table
// (sixteen at a time) and whose first two begin, and last two end, some
// value: the table's index says whether they are one.
void EchoScan::search_bin4(const uint8_t* p, uint32_t n) {
  if (bin4_lead_changed_) {
    std::memset(bin4_lo_, 0, 16), std::memset(bin4_hi_, 0, 16);
    for (unsigned b = 0; b < 256; ++b)
      if (bin4_lead_[b]) {
        const uint8_t bucket = uint8_t(1u << ((b >> 4) & 7));
        bin4_lo_[b & 15] |= bucket, bin4_hi_[b >> 4] |= bucket;
      }
    bin4_lead_changed_ = false;
  }
  const uint64_t* const first = bin4_first_bits_.data();
  const uint64_t* const last = bin4_last_bits_.data();
  auto at = [&](uint32_t i) {
    const unsigned f = unsigned(p[i]) << 8 | p[i + 1];
    if (!(first[f >> 6] >> (f & 63) & 1)) return;
    const unsigned l = unsigned(p[i + 2]) << 8 | p[i + 3];
    if (!(last[l >> 6] >> (l & 63) & 1)) return;
    const std::string_view w(reinterpret_cast<const char*>(p + i), 4);
    const uint32_t s = index_.find(echo_key(EchoKind::Addr4, w));
    if (s == EchoIndex::kNone) return;
    const EchoValue& v = slots_[s];
    if (v.seq && v.kind == EchoKind::Addr4 && v.old == w) hits_.push_back({i, 4, 1, &v});
  };
  if (n < 4) return;
  const uint32_t starts = n - 3;  // where four bytes begin
  const __m128i lo_t = _mm_load_si128(reinterpret_cast<const __m128i*>(bin4_lo_));
  const __m128i hi_t = _mm_load_si128(reinterpret_cast<const __m128i*>(bin4_hi_));
  const __m128i nib = _mm_set1_epi8(0x0f), zero = _mm_setzero_si128();
  uint32_t i = 0;
  for (; i + 16 <= starts; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i lo = _mm_shuffle_epi8(lo_t, _mm_and_si128(v, nib));
    const __m128i hi = _mm_shuffle_epi8(hi_t, _mm_and_si128(_mm_srli_epi16(v, 4), nib));
    unsigned m = unsigned(_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(lo, hi), zero))) ^ 0xffffu;
    for (; m; m &= m - 1) at(i + unsigned(__builtin_ctz(m)));
  }
  for (; i < starts; ++i)
    if (bin4_lead_[p[i]]) at(i);
}

EchoCount EchoScan::scan(uint8_t* p, uint32_t n, const Span* keep, unsigned n_keep, void (*before_write)(void*),
                         void* ctx) {
  flush();
  adopt();
  if (n < 4 || (!gen_ && pending_.empty())) return {};
  list_new();
  hits_.clear();
  scanned_ = p;
  if (gen_ && gen_->db) hs_scan(gen_->db, reinterpret_cast<const char*>(p), n, 0, gen_->scratch, on_match, this);
  search_pending(p, n);
  if (bin4_live_ && bin4_structured(p, n)) search_bin4(p, n);
  if (hits_.empty()) return {};
  return apply(p, n, keep, n_keep, before_write, ctx);
}

// Whatever found them, the same hits give the same bytes: first in the
// payload first, the longer of two at one place first, none overlapping
// one taken.
EchoCount EchoScan::apply(uint8_t* p, uint32_t n, const Span* keep, unsigned n_keep, void (*before_write)(void*),
                          void* ctx) {
  std::sort(hits_.begin(), hits_.end(), [](const Hit& a, const Hit& b) {
    // Last the form: two forms of one value alike at one place (a MAC of
    // digits in either case) are taken in their order, whatever found them.
    return a.from != b.from ? a.from < b.from
           : a.len != b.len ? a.len > b.len
           : a.v->seq != b.v->seq ? a.v->seq > b.v->seq
                                  : a.form < b.form;
  });
  EchoCount r;
  uint32_t done = 0;
  char text[48];
  uint8_t mapped[16];
  for (const Hit& h : hits_) {
    if (h.from < done) continue;
    const uint32_t to = h.from + h.len;
    if (std::any_of(keep, keep + n_keep, [&](const Span& s) { return h.from < s.to && s.from < to; })) continue;
    const EchoValue& v = *h.v;
    const uint8_t* src = nullptr;
    bool fitted = true;
    switch (v.kind) {
      case EchoKind::Addr4:
      case EchoKind::Addr6: {
        const unsigned alen = v.kind == EchoKind::Addr4 ? 4 : 16;
        const bool binary = h.form == (alen == 4 ? 1 : 3);
        if (!binary && !addr_text_alone(p, n, h.from, to, alen)) continue;
        // A preloaded user's address no field has recorded yet: its rule's
        // rewrite at this packet's time (fail closed: the zero address).
        const uint8_t* repl = reinterpret_cast<const uint8_t*>(v.repl.data());
        if (v.repl.size() != alen) {
          if (!addr_map_ || !addr_map_(addr_map_ctx_, reinterpret_cast<const uint8_t*>(v.old.data()), mapped, alen))
            std::memset(mapped, 0, alen);
          repl = mapped;
        }
        if (binary) {
          src = repl;
          break;
        }
        fitted = fit_addr_text(repl, alen, h.len, text);
        if (h.form == 1)
          for (uint32_t i = 0; i < h.len; ++i) text[i] = char(std::toupper(uint8_t(text[i])));
        src = reinterpret_cast<const uint8_t*>(text);
        break;
      }
      case EchoKind::Mac: {
        if (h.form == kMacBinary) {
          src = reinterpret_cast<const uint8_t*>(v.repl.data());
          break;
        }
        if (!mac_alone(p, n, h.from, to, h.form)) continue;
        mac_text(reinterpret_cast<const uint8_t*>(v.repl.data()), h.form, text);
        src = reinterpret_cast<const uint8_t*>(text);
        break;
      }
      case EchoKind::Bytes:
      case EchoKind::Name:
        // A word stands alone: "john" is not hidden inside "johnson".
        if ((word(uint8_t(v.old.front())) && h.from && word(p[h.from - 1]) && !escaped_before(p, h.from)) ||
            (word(uint8_t(v.old.back())) && to < n && word(p[to])))
          continue;
        fitted = v.kind == EchoKind::Name || v.repl.size() == v.old.size();
        if (v.kind == EchoKind::Bytes && fitted) src = reinterpret_cast<const uint8_t*>(v.repl.data());
        break;
    }
    if (before_write) before_write(ctx), before_write = nullptr;
    if (src) {
      std::memcpy(p + h.from, src, h.len);
    } else if (v.kind == EchoKind::Name) {
      // The name's own decision on its text here: the same pseudonym, the
      // case of each letter kept.
      names::apply_to_text(reinterpret_cast<char*>(p + h.from), h.len, v.dec);
    } else {
      std::memset(p + h.from, 'x', h.len);  // no same-length form: redacted as redact() does
    }
    ++(fitted ? r.mapped : r.filled);
    done = to;
  }
  return r;
}

}  // namespace amon
