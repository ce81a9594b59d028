#include "addr_text.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cstddef>

namespace amon {

namespace {

unsigned digits(unsigned v) { return v >= 100 ? 3 : v >= 10 ? 2 : 1; }

void put_dec(char* o, unsigned v, unsigned w) {
  for (unsigned i = w; i-- > 0; v /= 10) o[i] = char('0' + v % 10);
}

void put_hex(char* o, unsigned v, unsigned w) {
  static const char hex[] = "0123456789abcdef";
  for (unsigned i = w; i-- > 0; v >>= 4) o[i] = hex[v & 15];
}

unsigned hex_width(unsigned v) { return v >= 0x1000 ? 4 : v >= 0x100 ? 3 : v >= 0x10 ? 2 : 1; }

bool is_hex(int c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

// The shortest IPv4 text (what is looked for): "192.0.2.1".
unsigned ipv4_text(const uint8_t* a, char* o) {
  unsigned n = 0;
  for (int i = 0; i < 4; ++i) {
    if (i) o[n++] = '.';
    put_dec(o + n, a[i], digits(a[i]));
    n += digits(a[i]);
  }
  return n;
}

// An RPC universal address (RFC 5665: rpcbind's GETADDR reply, NFSv4
// callbacks and locations) writes a port after the address as two more
// decimal octets, h1.h2.h3.h4.p1.p2: the address is its first four.
bool uaddr_port_tail(const uint8_t* p, uint32_t n, uint32_t to) {
  uint32_t i = to;
  for (int k = 0; k < 2; ++k) {
    if (i >= n || p[i] != '.') return false;
    const uint32_t j = ++i;
    while (i < n && i - j < 4 && std::isdigit(p[i])) ++i;
    if (i == j || i - j > 3) return false;
  }
  return !(i < n && (std::isdigit(p[i]) || p[i] == '.'));
}

// Standing alone: not part of a longer number, dotted name or address.
bool alone4(const uint8_t* p, uint32_t n, uint32_t from, uint32_t to) {
  if (from && (std::isdigit(p[from - 1]) || p[from - 1] == '.')) return false;
  if (to < n && std::isdigit(p[to])) return false;
  if (to + 1 < n && p[to] == '.' && std::isdigit(p[to + 1])) return uaddr_port_tail(p, n, to);
  return true;
}

bool alone6(const uint8_t* p, uint32_t n, uint32_t from, uint32_t to) {
  if (from && (is_hex(p[from - 1]) || p[from - 1] == ':')) return false;
  if (to < n && (is_hex(p[to]) || p[to] == ':')) return false;
  return true;
}

}  // namespace

bool addr_text_alone(const uint8_t* p, uint32_t n, uint32_t from, uint32_t to, unsigned alen) {
  return alen == 4 ? alone4(p, n, from, to) : alone6(p, n, from, to);
}

bool fit_ipv4_text(const uint8_t* a, char* out, unsigned len) {
  if (len < 7 || len > 15) return false;
  unsigned w[4], sum = 0;
  for (int i = 0; i < 4; ++i) sum += w[i] = digits(a[i]);
  const unsigned room = len - 3;
  if (sum > room) return false;
  unsigned extra = room - sum;
  for (int i = 0; i < 4 && extra; ++i) {
    const unsigned add = std::min(extra, 3 - w[i]);
    w[i] += add, extra -= add;
  }
  unsigned o = 0;
  for (int i = 0; i < 4; ++i) {
    if (i) out[o++] = '.';
    put_dec(out + o, a[i], w[i]);
    o += w[i];
  }
  return true;
}

bool fit_ipv6_text(const uint8_t* a, char* out, unsigned len) {
  if (len < 2 || len > 39) return false;
  unsigned g[8], w[8];
  for (int i = 0; i < 8; ++i) g[i] = unsigned(a[2 * i]) << 8 | a[2 * i + 1], w[i] = hex_width(g[i]);
  // Candidates: no "::" first (the plainest text), then "::" over a run of
  // zero groups, longest first: the first whose shortest and longest forms
  // bracket `len` gives it, groups padded with leading zeros from the left.
  auto emit = [&](int s, int e) {  // [s, e): the groups "::" stands for; s == e: none
    unsigned minl = 0, maxl = 0;
    for (int i = 0; i < 8; ++i)
      if (i < s || i >= e) minl += w[i], maxl += 4;
    unsigned seps;
    if (s == e) {
      seps = 7;
    } else {
      const unsigned left = unsigned(s), right = unsigned(8 - e);
      seps = (left ? left - 1 : 0) + (right ? right - 1 : 0) + 2;
    }
    minl += seps, maxl += seps;
    if (len < minl || len > maxl) return false;
    unsigned extra = len - minl, pw[8];
    for (int i = 0; i < 8; ++i) {
      pw[i] = w[i];
      if ((i < s || i >= e) && extra) {
        const unsigned add = std::min(extra, 4 - w[i]);
        pw[i] += add, extra -= add;
      }
    }
    unsigned o = 0;
    for (int i = 0; i < 8; ++i) {
      if (s != e && i == s) {
        out[o++] = ':', out[o++] = ':';
        i = e - 1;
        continue;
      }
      if (i && !(s != e && i == e)) out[o++] = ':';
      put_hex(out + o, g[i], pw[i]);
      o += pw[i];
    }
    return o == len;
  };
  if (emit(0, 0)) return true;
  for (int k = 8; k >= 1; --k)
    for (int s = 0; s + k <= 8; ++s) {
      bool zero = true;
      for (int i = s; i < s + k; ++i) zero = zero && g[i] == 0;
      if (zero && emit(s, s + k)) return true;
    }
  return false;
}

unsigned addr_text_of(const uint8_t* a, unsigned alen, char* t) {
  if (alen == 4) return ipv4_text(a, t);
  // RFC 5952: the longest run of two or more zero groups (the first of
  // equals) is "::"; lower case, no leading zeros. Written here, not by
  // inet_ntop, which formats through sprintf on every packet.
  // Mixed notation (IPv4-mapped or -compatible): its dotted part is what
  // the IPv4 search finds in an IPv4 packet; an IPv6 packet carrying one is
  // rare enough to leave to the hex forms.
  unsigned g[8];
  for (int i = 0; i < 8; ++i) g[i] = unsigned(a[2 * i]) << 8 | a[2 * i + 1];
  int best = -1, best_len = 1;
  for (int i = 0; i < 8;) {
    int j = i;
    while (j < 8 && g[j] == 0) ++j;
    if (j - i > best_len) best = i, best_len = j - i;
    i = j == i ? i + 1 : j;
  }
  unsigned tl = 0;
  for (int i = 0; i < 8; ++i) {
    if (i == best) {
      t[tl++] = ':', t[tl++] = ':';
      i += best_len - 1;
      continue;
    }
    if (i && i != best + best_len) t[tl++] = ':';
    const unsigned w = hex_width(g[i]);
    put_hex(t + tl, g[i], w);
    tl += w;
  }
  return tl;
}

namespace {

// The text forms looked for, each with the offset of its first separator:
// the scan finds separators ('.' or ':', rare in binary payloads and less
// common than letters in text) and compares each form around them.
struct Forms {
  char forms[6][40];
  uint8_t flen[6], anchor[6], which[6];
  unsigned nf = 0;
  void add(const uint8_t* old_a, unsigned alen, uint8_t w);
};

void Forms::add(const uint8_t* old_a, unsigned alen, uint8_t w) {
  const unsigned first = nf;
  char* t = forms[nf];
  const unsigned tl = addr_text_of(old_a, alen, t);
  flen[nf++] = uint8_t(tl);
  if (alen == 16) {
    bool letters = false;
    for (unsigned i = 0; i < tl; ++i) letters = letters || t[i] > '9';
    if (letters) {
      for (unsigned i = 0; i < tl; ++i) forms[nf][i] = t[i] >= 'a' ? char(t[i] - 'a' + 'A') : t[i];
      flen[nf++] = uint8_t(tl);
    }
    unsigned o = 0;
    for (int i = 0; i < 8; ++i) {
      if (i) forms[nf][o++] = ':';
      put_hex(forms[nf] + o, unsigned(old_a[2 * i]) << 8 | old_a[2 * i + 1], 4);
      o += 4;
    }
    if (o != tl) flen[nf++] = uint8_t(o);
  }
  for (unsigned f = first; f < nf; ++f) {
    which[f] = w;
    const char sep = alen == 4 ? '.' : ':';
    anchor[f] = uint8_t(std::find(forms[f], forms[f] + flen[f], sep) - forms[f]);
  }
}

}  // namespace

AddrTextCount map_addr_text(uint8_t* p, uint32_t n, const uint8_t* old_a, const uint8_t* new_a, unsigned alen,
                            void (*before_write)(void*), void* ctx) {
  const uint8_t* olds[1] = {old_a};
  const uint8_t* news[1] = {new_a};
  return map_addrs_text(p, n, olds, news, 1, alen, before_write, ctx);
}

bool fit_addr_text(const uint8_t* new_a, unsigned alen, unsigned len, char* text) {
  static const uint8_t zero[16] = {};
  if (alen == 4 ? fit_ipv4_text(new_a, text, len) : fit_ipv6_text(new_a, text, len)) return true;
  // Always possible: "0.0.0.0" with its octets padded, "::" and
  // "0:...:0" forms cover every length an address text can have.
  if (alen == 4) fit_ipv4_text(zero, text, len);
  else if (!fit_ipv6_text(zero, text, len)) std::memset(text, '0', len);
  return false;
}

bool fit_addr_form(const uint8_t* new_a, unsigned alen, AddrForm f, unsigned len, char* text) {
  if (f != AddrForm::Decimal) return fit_addr_text(new_a, alen, len, text);
  uint32_t v = uint32_t(new_a[0]) << 24 | uint32_t(new_a[1]) << 16 | uint32_t(new_a[2]) << 8 | new_a[3];
  unsigned need = 1;
  for (uint32_t x = v; x >= 10; x /= 10) ++need;
  std::memset(text, '0', len);
  if (alen != 4 || need > len) return false;
  for (unsigned i = len; v; v /= 10) text[--i] = char('0' + v % 10);
  return true;
}

namespace {

// The scan behind map_addrs_text (`news` given: each match rewritten) and
// find_addrs_text (`memo` given: each match recorded, nothing written).
AddrTextCount scan(uint8_t* p, uint32_t n, const uint8_t* const* olds, const uint8_t* const* news, unsigned count,
                   unsigned alen, void (*before_write)(void*), void* ctx, AddrTextMemo* memo) {
  AddrTextCount r;
  if (n < 2) return r;
  // Most payloads hold no address text: a separator must sit between two
  // digits (IPv4), or before a hex digit or a colon (IPv6), before the
  // forms are even written.
  Forms F;
  bool built = false;
  const char sep = alen == 4 ? '.' : ':';
  uint32_t i = 0, done = 0;  // done: the end of the last match
  while (i < n) {
    const uint8_t* h = static_cast<const uint8_t*>(std::memchr(p + i, sep, n - i));
    if (!h) break;
    const uint32_t at = uint32_t(h - p);
    i = at + 1;
    if (at + 1 >= n) break;
    const int nx = p[at + 1], pv = at ? p[at - 1] : -1;
    if (alen == 4 ? !(pv >= '0' && pv <= '9' && nx >= '0' && nx <= '9') : !(is_hex(nx) || nx == ':')) continue;
    if (!built) {
      for (unsigned a = 0; a < count && a < 2; ++a) F.add(olds[a], alen, uint8_t(a));
      built = true;
    }
    for (unsigned f = 0; f < F.nf; ++f) {
      const unsigned L = F.flen[f];
      if (at < F.anchor[f] || at - F.anchor[f] < done) continue;
      const uint32_t from = at - F.anchor[f], to = from + L;
      if (to > n || p[from] != uint8_t(F.forms[f][0]) || std::memcmp(p + from, F.forms[f], L) != 0) continue;
      if (!(alen == 4 ? alone4(p, n, from, to) : alone6(p, n, from, to))) continue;
      if (memo) {
        if (memo->count == AddrTextMemo::kMax) {
          memo->overflow = true;
          return r;
        }
        // Equal addresses: the match is a form of both.
        const bool both = count == 2 && std::memcmp(olds[0], olds[1], alen) == 0;
        memo->m[memo->count++] = {from, uint8_t(L), uint8_t(both ? 3u : 1u << F.which[f])};
      } else {
        char text[48];
        if (fit_addr_text(news[F.which[f]], alen, L, text)) ++r.mapped;
        else ++r.zeroed;
        if (before_write) before_write(ctx), before_write = nullptr;
        std::memcpy(p + from, text, L);
      }
      i = done = to;
      break;
    }
  }
  return r;
}

}  // namespace

AddrTextCount map_addrs_text(uint8_t* p, uint32_t n, const uint8_t* const* olds, const uint8_t* const* news,
                             unsigned count, unsigned alen, void (*before_write)(void*), void* ctx) {
  return scan(p, n, olds, news, count, alen, before_write, ctx, nullptr);
}

namespace {
// The byte of an address least common in payload: one with the high bit
// set (rare in text, not 0xff filler), else a control byte other than
// zero, tab and line ends, else a printable one; zero, blank, line ends
// and 0xff last.
unsigned rare_byte(const uint8_t* a, unsigned alen) {
  auto score = [](uint8_t b) {
    if (b == 0 || b == 0xff || b == '\n' || b == '\r' || b == ' ' || b == '\t') return 0;
    if (b >= 0x80) return 3;
    return b < 0x20 ? 2 : 1;
  };
  unsigned best = 0;
  for (unsigned i = 1; i < alen; ++i)
    if (score(a[i]) > score(a[best])) best = i;
  return best;
}
}  // namespace

unsigned map_addrs_binary(uint8_t* p, uint32_t n, const uint8_t* const* olds, const uint8_t* const* news,
                          unsigned count, unsigned alen, void (*before_write)(void*), void* ctx) {
  unsigned r = 0;
  for (unsigned a = 0; a < count && a < 2; ++a) {
    // The zero and all-ones addresses name no one (and fill padding). An
    // IPv4 address with two zero bytes (10.0.0.6: `0a 00 00 06`) is a
    // common run of small numbers in binary formats (an image's header
    // fields): rewriting it there would corrupt more than it hides.
    if (std::all_of(olds[a], olds[a] + alen, [](uint8_t b) { return b == 0; }) ||
        std::all_of(olds[a], olds[a] + alen, [](uint8_t b) { return b == 0xff; }) ||
        (alen == 4 && std::count(olds[a], olds[a] + 4, uint8_t(0)) >= 2))
      continue;
    // memchr for the address's rarest byte, then the rest: a vector scan
    // where a general substring search costs about a cycle a byte. The
    // first byte of 10.x.x.x is a newline, found on every line of a text
    // protocol.
    const unsigned k = rare_byte(olds[a], alen);
    const uint8_t c = olds[a][k];
    for (uint32_t i = k; i + (alen - k) <= n;) {
      const auto* h = static_cast<const uint8_t*>(std::memchr(p + i, c, n - (alen - k) + 1 - i));
      if (!h) break;
      const uint32_t at = uint32_t(h - p) - k;
      if (std::memcmp(p + at, olds[a], alen) != 0) {
        i = at + k + 1;
        continue;
      }
      if (before_write) before_write(ctx), before_write = nullptr;
      std::memcpy(p + at, news[a], alen);
      ++r, i = at + alen + k;
    }
  }
  return r;
}

void find_addrs_text(const uint8_t* p, uint32_t n, const uint8_t* src, const uint8_t* dst, unsigned alen,
                     AddrTextMemo& out) {
  out.scanned = n, out.count = 0, out.overflow = false;
  const uint8_t* olds[2] = {src, dst};
  // Nothing is written with a memo: the bytes stay as given.
  scan(const_cast<uint8_t*>(p), n, olds, nullptr, 2, alen, nullptr, nullptr, &out);
}

AddrTextCount apply_addrs_text(uint8_t* p, const AddrTextMemo& memo, const uint8_t* new_src, const uint8_t* new_dst,
                               unsigned alen, void (*before_write)(void*), void* ctx) {
  AddrTextCount r;
  for (unsigned i = 0; i < memo.count; ++i) {
    const AddrTextMatch& x = memo.m[i];
    // The source's mapping first, as a scan with both changed takes it.
    const uint8_t* new_a = (x.who & 1) && new_src ? new_src : (x.who & 2) && new_dst ? new_dst : nullptr;
    if (!new_a) continue;
    char text[48];
    if (fit_addr_text(new_a, alen, x.len, text)) ++r.mapped;
    else ++r.zeroed;
    if (before_write) before_write(ctx), before_write = nullptr;
    std::memcpy(p + x.from, text, x.len);
  }
  return r;
}

}  // namespace amon
