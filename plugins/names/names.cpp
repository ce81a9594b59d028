#include "amon_names.hpp"

#include <libpsl.h>
#include <openssl/evp.h>

#include "amon_siphash.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_set>

#include <emmintrin.h>

namespace amon::names {
namespace {

// SipHash-2-4 fed a byte at a time: siphash64's straightforward form (label_seed
// builds its words directly).
struct Sip {
  sip::State st;
  uint64_t tail = 0;
  unsigned ntail = 0;
  uint64_t total = 0;
  // Second key half derived from the first: the contract is a 64-bit seed.
  explicit Sip(uint64_t key) : st(key, key ^ 0x9e3779b97f4a7c15ull) {}
  inline void word(uint64_t m) { st.absorb(m); }
  inline void byte(uint8_t b) {
    tail |= uint64_t(b) << (8 * ntail);
    ++total;
    if (++ntail == 8) { word(tail); tail = 0; ntail = 0; }
  }
  uint64_t finish() {
    word(tail | (total << 56));
    return st.finish64();
  }
};

inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c + 32) : c; }
inline bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

// splitmix64: a cheap stream from a PRF output; the secrecy is in the seed.
struct Rng {
  uint64_t s;
  inline uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Lemire's multiply-shift: unbiased enough for n <= 36 with 64-bit input.
  inline unsigned below(unsigned n) { return unsigned((unsigned __int128)next() * n >> 64); }
};

}  // namespace

uint64_t siphash64(uint64_t key, const void* data, size_t len) {
  Sip s(key);
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < len; ++i) s.byte(p[i]);
  return s.finish();
}

namespace {

// ASCII 'A'..'Z' -> 'a'..'z' in all 8 bytes of w at once; other bytes (those
// with the top bit set included) stay as they are. Adding 0x80 - 'A' moves
// exactly the upper-case letters to the 26 smallest signed byte values. SSE2
// rather than 64-bit SWAR: its constants are memory operands, not four 10-byte
// immediates in registers the SipHash state needs.
inline uint64_t lower8(uint64_t w) {
  const __m128i v = _mm_cvtsi64_si128(int64_t(w));
  const __m128i t = _mm_add_epi8(v, _mm_set1_epi8(char(0x80 - 'A')));
  const __m128i upper = _mm_cmpgt_epi8(_mm_set1_epi8(char(-128 + 26)), t);
  return uint64_t(_mm_cvtsi128_si64(_mm_or_si128(v, _mm_and_si128(upper, _mm_set1_epi8(0x20)))));
}

inline uint64_t load64(const char* p) { return sip::load_le64(reinterpret_cast<const uint8_t*>(p)); }
inline uint64_t load32(const char* p) { return sip::load_le32(reinterpret_cast<const uint8_t*>(p)); }

// The last len & 7 bytes of label[0..len) as a little-endian word, reading no
// byte outside the label (it may end a packet or a heap block): labels of 8+
// bytes load the word that ends at the label's end; 4..7 bytes two
// overlapping 32-bit loads (their common bytes are equal, so OR-ing them is
// exact); 1..3 bytes the first, middle and last byte, the same way.
inline uint64_t tail_bytes(const char* label, size_t len) {
  const unsigned r = unsigned(len & 7);
  if (len >= 8) return load64(label + len - 8) >> 1 >> (63 - 8 * r);  // r == 0 -> 0
  if (len >= 4) return load32(label) | load32(label + len - 4) << (8 * (len - 4));
  if (len == 0) return 0;
  return uint64_t(uint8_t(label[0])) | uint64_t(uint8_t(label[len / 2])) << (8 * (len / 2)) |
         uint64_t(uint8_t(label[len - 1])) << (8 * (len - 1));
}

}  // namespace

uint64_t label_seed(uint64_t key, const char* label, size_t len, uint64_t right_seed) {
  // SipHash over lowercase(label) || 0xff || right_seed (little-endian),
  // the 0xff length-separating the label from the chained seed so "ab"+X !=
  // "a"+Y. Built in registers a word at a time rather than assembled in a
  // buffer (the result is the same byte stream's hash: the tests check it
  // against a byte-at-a-time SipHash).
  sip::State st(key, key ^ 0x9e3779b97f4a7c15ull);
  const char* const end = label + (len & ~size_t{7});
  for (const char* p = label; p != end; p += 8) st.absorb(lower8(load64(p)));
  // What is left: r = len & 7 label bytes, 0xff, the 8 seed bytes; 9..16
  // bytes, so one full word, then r + 1 bytes (a full word again when r == 7).
  const unsigned r = unsigned(len & 7);
  const uint64_t total = uint64_t(len + 9) << 56;
  st.absorb(lower8(tail_bytes(label, len)) | (right_seed << 8 | 0xff) << (8 * r));
  const uint64_t rest = right_seed >> (8 * (7 - r));
  if (r == 7) {
    st.absorb(rest);
    st.absorb(total);
  } else {
    st.absorb(rest | total);
  }
  return st.finish64();
}

namespace {
// Per input byte: the first character of its output class and the class size
// (10 or 26). Digits stay digits, upper case upper, everything else (lower
// case, '_', binary, an end hyphen) becomes a lower-case letter.
struct MaskClass {
  uint8_t base, n;
};
struct MaskClasses {
  MaskClass e[256];
  constexpr MaskClasses() : e() {
    for (int c = 0; c < 256; ++c) {
      if (c >= '0' && c <= '9') e[c] = {'0', 10};
      else if (c >= 'A' && c <= 'Z') e[c] = {'A', 26};
      else e[c] = {'a', 26};
    }
  }
};
constexpr MaskClasses kMaskClasses;
}  // namespace

void mask_label(char* p, size_t len, uint64_t seed) {
  Rng r{seed};
  uint8_t diff = 0;
  // A table lookup instead of branches on the class; interior hyphens (kept,
  // and drawing no random number) are the one branch, rarely taken.
  for (size_t i = 0; i < len; ++i) {
    const uint8_t c = uint8_t(p[i]);
    // i - 1 < len - 2: neither the first nor the last byte (unsigned wrap).
    if (__builtin_expect(c == '-', 0) && __builtin_expect(i - 1 < len - 2, 1)) continue;
    const MaskClass e = kMaskClasses.e[c];
    const uint8_t out = uint8_t(e.base + r.below(e.n));
    diff |= out ^ c;
    p[i] = char(out);
  }
  if (diff == 0 && len != 0) {
    // Position 0 is never an interior hyphen, so it can always be bumped
    // within its class.
    char& c = p[0];
    if (is_digit(c)) c = char('0' + (c - '0' + 1) % 10);
    else if (is_upper(c)) c = char('A' + (c - 'A' + 1) % 26);
    else c = char('a' + (c - 'a' + 1) % 26);
  }
}

void hide_label(char* p, size_t len) { std::memset(p, kHiddenFill, len); }

void redact(char* p, size_t len) {
  for (size_t i = 0; i < len; ++i)
    if (p[i] != '.') p[i] = 'x';
}

void keyed_fill(char* p, size_t len, uint64_t seed) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  Rng r{seed};
  for (size_t i = 0; i < len; ++i) p[i] = kAlnum[r.below(62)];
}

unsigned count_labels(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty()) return 0;
  unsigned n = 1;
  for (char c : name) n += c == '.';
  return n;
}

namespace {

// libpsl's registrable domain of a lowercased, NUL-terminated name: its
// label count, the whole name's when it has none.
unsigned psl_count(const char* lowered, std::string_view name) {
  const char* reg = psl_registrable_domain(psl_builtin(), lowered);
  if (reg == nullptr) return count_labels(name);
  return count_labels(std::string_view(reg));
}

// libpsl finds a name's registrable domain by asking, from the left, whether
// the name, then its parent (the name without its first label), then the
// parent's suffixes are public suffixes; from the parent on, the walk is the
// parent's own. So a name's count is the whole name's when the name or its
// parent is a public suffix, and the parent's count otherwise: a flood of
// random labels under one domain asks libpsl one question per name (is it
// a suffix) instead of one per label. Per thread, direct-mapped, by the
// parent's bytes (compared in full). libpsl cuts a name of more than 9
// labels to its last 9; those names and parents longer than an entry go to
// libpsl whole.
struct ParentMemo {
  uint64_t tag = 0;
  uint8_t len = 0;
  uint8_t count = 0;  // the parent's count: 0 when the parent is a public suffix
  bool rules = true;  // some rule may make a name under the parent a public suffix (RuleParents)
  char text[53];
};
constexpr unsigned kParentMemo = 1024, kMaxMemoLabels = 9;
thread_local ParentMemo parent_memo[kParentMemo];

// A name of two labels or more is a public suffix for libpsl's builtin
// list only when the list has a rule for the name itself (plain, "!" or
// "*." before it) or a wildcard rule over its parent ("*.parent"): the
// two lookups libpsl makes. So under a parent that is neither a rule's
// parent nor a wildcard rule's base no name is a suffix, and a flood of
// random labels under one domain needs no lookup per name (each one walks
// the list's graph: some 3,000 instructions). The rules are read from the
// file libpsl's builtin list was made from, and only when its SHA-1 is the
// one libpsl was built with; otherwise every name is asked of libpsl.
struct RuleParents {
  bool known = false;
  std::unordered_set<std::string> set;
  bool may_hold(std::string_view parent) const {
    if (!known) return true;
    // A rule of an internationalised name is also in the list in ASCII
    // (punycode), whose parent this set does not hold: such parents ask.
    for (char c : parent)
      if (uint8_t(c) >= 0x80) return true;
    if (parent.find("xn--") != std::string_view::npos) return true;
    return set.count(std::string(parent)) != 0;
  }
};

std::string sha1_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (!EVP_Digest(data.data(), data.size(), md, &len, EVP_sha1(), nullptr)) return {};
  std::string hex;
  char b[3];
  for (unsigned i = 0; i < len; ++i) std::snprintf(b, sizeof b, "%02x", md[i]), hex += b;
  return hex;
}

RuleParents load_rule_parents() {
  RuleParents r;
  const char* path = psl_builtin_filename();
  const char* want = psl_builtin_sha1sum();
  if (!path || !want || !*want) return r;
  std::ifstream in(path, std::ios::binary);
  if (!in) return r;
  std::ostringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  if (sha1_hex(text) != want) return r;
  // As libpsl reads a rule: the line's first word, without leading blanks;
  // "//" starts a comment. Every word may be a rule: more parents only
  // mean more names asked.
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line.compare(a, 2, "//") == 0) continue;
    const size_t b = line.find_first_of(" \t\r", a);
    std::string rule = line.substr(a, b == std::string::npos ? std::string::npos : b - a);
    for (char& c : rule) c = lower(c);
    bool wild = false;
    if (rule[0] == '!') rule.erase(0, 1);
    else if (rule.compare(0, 2, "*.") == 0) rule.erase(0, 2), wild = true;
    if (rule.find('*') != std::string::npos) wild = true;  // no such rule in libpsl's reading; kept asking
    if (wild) r.set.insert(rule);
    if (const size_t dot = rule.find('.'); dot != std::string::npos) r.set.insert(rule.substr(dot + 1));
  }
  r.known = true;
  return r;
}

const RuleParents& rule_parents() {
  static const RuleParents r = load_rule_parents();
  return r;
}

}  // namespace

unsigned registrable_label_count(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty()) return 0;
  if (name.size() > 253) return 0;
  char buf[256];
  unsigned labels = 1, first_dot = 0;
  bool plain = name.front() != '.';
  for (size_t i = 0; i < name.size(); ++i) {
    // libpsl wants lowercase; an embedded NUL would silently shorten the name.
    if (name[i] == '\0') return 0;
    buf[i] = lower(name[i]);
    if (name[i] == '.') {
      if (!first_dot) first_dot = unsigned(i);
      plain &= i > 0 && name[i - 1] != '.';
      ++labels;
    }
  }
  buf[name.size()] = '\0';
  const char* parent = buf + first_dot + 1;
  const size_t plen = name.size() - first_dot - 1;
  if (!plain || labels < 3 || labels > kMaxMemoLabels || plen > sizeof ParentMemo::text) return psl_count(buf, name);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < plen; ++i) h = (h ^ uint8_t(parent[i])) * 0x100000001b3ULL;
  h |= 1;
  ParentMemo& m = parent_memo[(h >> 32) % kParentMemo];
  if (m.tag != h || m.len != plen || std::memcmp(m.text, parent, plen) != 0) {
    // The walk of a parent of two labels or more (and at most 8: not cut)
    // finds no registrable domain exactly when the parent is a public
    // suffix, its first question.
    const char* reg = psl_registrable_domain(psl_builtin(), parent);
    m.tag = h, m.len = uint8_t(plen);
    m.count = uint8_t(reg ? count_labels(std::string_view(reg)) : 0);
    m.rules = rule_parents().may_hold({parent, plen});
    std::memcpy(m.text, parent, plen);
  }
  if (!m.count || (m.rules && psl_is_public_suffix2(psl_builtin(), buf, 0))) return labels;
  return m.count;
}

void apply_to_text(char* p, size_t len, const Decision& d) {
  if (d.action == Action::Keep || len == 0) return;
  if (d.action == Action::Redact) {
    if (!d.flat) return redact(p, len);
    std::memset(p, 'x', p[len - 1] == '.' ? len - 1 : len);  // the total length, nothing of the labels
    return;
  }
  size_t stop = len;
  if (p[stop - 1] == '.') --stop;
  // Walk right-to-left so each label's seed chains from its right neighbour
  // (computed from that neighbour's original bytes before it was masked).
  unsigned idx_from_right = 0;
  uint64_t right = 0;
  for (;;) {
    size_t start = stop;
    while (start > 0 && p[start - 1] != '.') --start;
    const size_t n = stop - start;
    right = label_seed(d.seed, p + start, n, right);
    const bool keep = d.action == Action::MaskLeftOf && idx_from_right < d.keep_labels;
    if (!keep && d.hide) hide_label(p + start, n);
    else if (!keep) mask_label(p + start, n, right);
    ++idx_from_right;
    if (start == 0) break;
    stop = start - 1;
  }
}

void apply_to_labels(char* const* labels, const uint8_t* lens, unsigned n, const Decision& d) {
  if (d.action == Action::Keep) return;
  if (d.action == Action::Redact) {
    for (unsigned i = 0; i < n; ++i) std::memset(labels[i], 'x', lens[i]);
    return;
  }
  if (n > 128) n = 128;  // > 127 labels cannot occur in a 255-octet name
  if (d.hide) {
    const unsigned keep = d.action == Action::MaskLeftOf ? d.keep_labels : 0;
    for (unsigned i = 0; i + keep < n; ++i) hide_label(labels[i], lens[i]);
    return;
  }
  uint64_t seeds[128];  // > 127 labels cannot occur in a 255-octet name
  uint64_t right = 0;
  for (unsigned i = n; i-- > 0;) seeds[i] = right = label_seed(d.seed, labels[i], lens[i], right);
  const unsigned keep = d.action == Action::MaskLeftOf ? d.keep_labels : 0;
  for (unsigned i = 0; i + keep < n; ++i) mask_label(labels[i], lens[i], seeds[i]);
}

unsigned netbios_plain(std::string_view e, char out[15]) {
  if (e.size() < 32 || (e.size() > 32 && e[32] != '.')) return 0;
  unsigned n = 0;
  for (unsigned i = 0; i < 15; ++i) {
    const unsigned hi = unsigned(e[2 * i] | 0x20) - 'a', lo = unsigned(e[2 * i + 1] | 0x20) - 'a';
    if (hi > 15 || lo > 15) return 0;
    const char c = char(hi << 4 | lo);
    if (c < ' ' || c > '~' || c == '.') return 0;
    out[i] = c;
    if (c != ' ') n = i + 1;
  }
  for (unsigned i = 30; i < 32; ++i)
    if (unsigned(e[i] | 0x20) - 'a' > 15) return 0;
  return n;
}

}  // namespace amon::names
