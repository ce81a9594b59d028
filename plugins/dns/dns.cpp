// DNS message parsing: a message's names (each label span once, its
// compression pointers followed), answer addresses, EDNS options and, over
// TCP, its framing. What the parse finds is rewritten in rewrite.cpp.
#include "amon_dns.hpp"
#include "bytes.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstring>

#include <emmintrin.h>

namespace amon::dns {

const char* role_name(NameRole r) {
  switch (r) {
    case NameRole::Qname: return "qname";
    case NameRole::AnswerOwner: return "answer_owner";
    case NameRole::AuthorityOwner: return "authority_owner";
    case NameRole::AdditionalOwner: return "additional_owner";
    case NameRole::Cname: return "cname";
    case NameRole::Ns: return "ns";
    case NameRole::Ptr: return "ptr";
    case NameRole::Mx: return "mx";
    case NameRole::Srv: return "srv";
    case NameRole::SoaMname: return "soa_mname";
    case NameRole::SoaRname: return "soa_rname";
    case NameRole::Dname: return "dname";
    case NameRole::RdataOther: return "rdata_other";
    case NameRole::EdnsName: return "edns_name";
  }
  return "?";
}

namespace {


struct Parser {
  const uint8_t* m;
  uint32_t len;
  ParseResult& r;
  bool nbns;

  Status fail(Status s, Error e, uint32_t off) {
    r.status = s;
    r.error = e;
    r.error_off = uint16_t(off > 0xffff ? 0xffff : off);
    if (e == Error::Capacity) r.overflow = true;
    return s;
  }

  // Returns label index, kMaxLabels on capacity overflow, 0xffff if absent
  // (or, for an insert, if it would not be the rightmost label yet). The
  // parser reads linear labels strictly left to right, so labels[] is
  // sorted by offset: inserts append, lookups (pointer targets and the
  // labels reached through them) binary-search. A hash table here touched
  // three random lines of 32 KB per label, as big as the L1 cache.
  uint16_t find_label(uint16_t off, uint8_t llen, bool insert) {
    const unsigned n = r.n_labels;
    if (insert && (n == 0 || r.labels[n - 1].off < off)) {
      if (n >= ParseResult::kMaxLabels) return ParseResult::kMaxLabels;
      r.labels[n] = {off, llen};
      return uint16_t(r.n_labels++);
    }
    unsigned lo = 0, hi = n;
    while (lo < hi) {
      const unsigned mid = (lo + hi) / 2;
      if (r.labels[mid].off < off) lo = mid + 1;
      else hi = mid;
    }
    return lo < n && r.labels[lo].off == off ? uint16_t(lo) : uint16_t(0xffff);
  }

  bool put_text(char c) {
    if (r.text_len >= ParseResult::kTextCap) return false;
    r.text[r.text_len++] = c;
    return true;
  }

  // A name that is nothing but a pointer to the start of a name parsed
  // before (an answer owner pointing at the question, the next owner at a
  // CNAME target) has exactly that name's labels and text: share them instead
  // of walking and copying again. The earlier name passed every check this
  // walk would make (its bytes all lie before `pos`, its pointers decrease
  // from the same target), so the result is the same. Returns false when the
  // name is not of that form; only the first name and the two latest are
  // candidates (the forms responses use).
  bool shared_pointer_name(uint32_t pos, uint32_t limit, NameRef& n, uint32_t* next) {
    if (pos + 1 >= limit || (m[pos] & 0xc0) != 0xc0) return false;
    const uint32_t target = uint32_t(m[pos] & 0x3f) << 8 | m[pos + 1];
    if (target >= pos || m[target] == 0 || (m[target] & 0xc0)) return false;
    // Names sit at distinct offsets, so at most one candidate matches and
    // the order they are tried in does not matter.
    const unsigned nn = r.n_names;
    const NameRef* t;
    if (nn >= 1 && r.names[0].off == target) t = &r.names[0];
    else if (nn >= 1 && r.names[nn - 1].off == target) t = &r.names[nn - 1];
    else if (nn >= 2 && r.names[nn - 2].off == target) t = &r.names[nn - 2];
    else return false;
    if (t->n_labels == 0) return false;
    n.first_ref = t->first_ref;
    n.n_labels = t->n_labels;
    n.text_off = t->text_off;
    n.text_len = t->text_len;
    n.compressed = true;
    n.wire_len = 2;
    *next = pos + 2;
    return true;
  }

  // Presentation text of one label: letters lowercased, '.' and '\\'
  // escaped, other bytes outside 0x21..0x7e as \DDD. 0 in the table marks
  // the bytes that need an escape.
  static constexpr auto kText = [] {
    std::array<uint8_t, 256> t{};
    for (unsigned c = 0x21; c < 0x7f; ++c) t[c] = uint8_t(c >= 'A' && c <= 'Z' ? c + 32 : c);
    t['.'] = t['\\'] = 0;
    return t;
  }();

  static char* escape(char* out, uint8_t c) {
    *out++ = '\\';
    if (c == '.' || c == '\\') {
      *out++ = char(c);
    } else {
      *out++ = char('0' + c / 100);
      *out++ = char('0' + c / 10 % 10);
      *out++ = char('0' + c % 10);
    }
    return out;
  }

  // 16 bytes lowercased; *bad gets a bit per byte that needs an escape instead.
  [[gnu::always_inline]] static __m128i lower_vec(const uint8_t* s, unsigned* bad) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    // Range tests as one signed compare each: x + (0x80 - lo) < -128 + n
    // holds exactly for lo <= x < lo + n.
    const __m128i upper = _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8(0x80 - 'A')), _mm_set1_epi8(-128 + 26));
    const __m128i plain = _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8(0x80 - 0x21)), _mm_set1_epi8(-128 + 0x5e));
    const __m128i special = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('.')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\')));
    *bad = unsigned(_mm_movemask_epi8(_mm_andnot_si128(special, plain))) ^ 0xffffu;
    return _mm_add_epi8(v, _mm_and_si128(upper, _mm_set1_epi8(0x20)));
  }
  [[gnu::always_inline]] static unsigned lower16(char* out, const uint8_t* s) {
    unsigned bad;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), lower_vec(s, &bad));
    return bad;
  }
  // v moved down by n bytes (SSE2 shifts take the count as an immediate).
  static __m128i shift_down(__m128i v, unsigned n) {
    switch (n) {
      case 1: return _mm_srli_si128(v, 1);
      case 2: return _mm_srli_si128(v, 2);
      case 3: return _mm_srli_si128(v, 3);
      case 4: return _mm_srli_si128(v, 4);
      case 5: return _mm_srli_si128(v, 5);
      case 6: return _mm_srli_si128(v, 6);
      case 7: return _mm_srli_si128(v, 7);
      case 8: return _mm_srli_si128(v, 8);
      case 9: return _mm_srli_si128(v, 9);
      case 10: return _mm_srli_si128(v, 10);
      case 11: return _mm_srli_si128(v, 11);
      case 12: return _mm_srli_si128(v, 12);
      case 13: return _mm_srli_si128(v, 13);
      case 14: return _mm_srli_si128(v, 14);
      case 15: return _mm_srli_si128(v, 15);
      default: return v;
    }
  }

  // One label's presentation text at out; returns its end. The caller
  // checked there is room for the worst case (every byte as \DDD), so there
  // is no check per byte; the 16-byte stores may run up to 12 bytes past
  // that, into ParseResult::kTextSlack. 16 bytes at a time (SSE2, in the
  // base x86-64 target): byte at a time, this was a quarter of parse(). A
  // vector is loaded only where 16 bytes remain in the message; a label
  // ending closer to the end (a query's last label) goes byte by byte.
  [[gnu::always_inline]] static char* label_text(char* out, const uint8_t* s, uint32_t b, const uint8_t* mend) {
    const uint8_t* const e = s + b;
    while (s < e) {
      if (mend - s >= 16) {
        const unsigned run = unsigned(__builtin_ctz(lower16(out, s) | 0x10000u));  // 0..16: bytes stored as they are
        const uint32_t rest = uint32_t(e - s);
        if (run >= rest) return out + rest;
        out += run, s += run;
        if (run < 16) out = escape(out, *s++);
        continue;
      }
      const uint8_t c = *s++, t = kText[c];
      if (t) *out++ = char(t);
      else out = escape(out, c);
    }
    return out;
  }

  // The text of a name's leading labels in one pass: their wire bytes after
  // the first length byte, [src, src + len), are the text itself but for the
  // letters and the inner length bytes (dots, at the bits of `dots`), when
  // no byte needs an escape. A vector for every 16 bytes instead of one per
  // label (three in the usual name). Names over 63 bytes, ones with an
  // escape and short ones at the very start of a short message take the
  // labels one by one.
  [[gnu::always_inline]] static char* name_text(char* out, const uint8_t* src, uint32_t len, uint64_t dots,
                                                const LabelSpan* lab, unsigned count, const uint8_t* msg,
                                                const uint8_t* mend) {
    if (len <= 63) {
      uint64_t bad;
      bool done = true;
      if (len >= 16) {
        // Whole vectors, then one ending at the name's end (overlapping the
        // one before it with the same bytes): no load leaves the name.
        bad = 0;
        for (uint32_t i = 0; i + 16 < len; i += 16) bad |= uint64_t(lower16(out + i, src + i)) << i;
        bad |= uint64_t(lower16(out + len - 16, src + len - 16)) << (len - 16);
      } else if (mend - src >= 16) {
        bad = lower16(out, src) & ((1u << len) - 1);  // stores past the text land in the slack
      } else if (src + len - msg >= 16) {
        // Near the message end (a query's name): the 16 bytes ending at the
        // name's end, moved down to its start.
        unsigned b16;
        const __m128i v = lower_vec(src + len - 16, &b16);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), shift_down(v, 16 - len));
        bad = b16 >> (16 - len);
      } else {
        done = false;
        bad = 0;
      }
      if (done && !(bad & ~dots)) {
        for (; dots; dots &= dots - 1) out[std::countr_zero(dots)] = '.';
        return out + len;
      }
    }
    for (unsigned k = 0; k < count; ++k) {
      if (k) *out++ = '.';
      out = label_text(out, msg + lab[k].off, lab[k].len, mend);
    }
    return out;
  }

  void append_text(const uint8_t* src, uint8_t b, bool dot) {
    char* out = r.text + r.text_len;
    if (dot) *out++ = '.';
    r.text_len = uint32_t(label_text(out, src, b, m + len) - r.text);
  }

  // Parse a name starting at pos; linear bytes must stay below `limit`.
  // On success *next = first byte after the linear encoding.
  // The head is inlined into the callers: an answer owner that points at
  // the question, and the root (OPT owner), are most names of a response
  // and need no label walk; the walk (name_labels) stays out of line.
  [[gnu::always_inline]] Status name(uint32_t pos, uint32_t limit, NameRole role, Section sec, uint16_t type,
                                     uint16_t rr_index, uint32_t* next, uint16_t* name_index) {
    if (r.n_names >= ParseResult::kMaxNames) return fail(Status::Malformed, Error::Capacity, pos);
    NameRef& n = r.names[r.n_names];
    n.role = role;
    n.section = sec;
    n.rr_type = type;
    n.rr_index = rr_index;
    n.off = uint16_t(pos);
    if (shared_pointer_name(pos, limit, n, next)) {
      *name_index = r.n_names++;
      return Status::Ok;
    }
    n.first_ref = r.n_label_refs;
    n.n_labels = 0;
    n.compressed = false;
    n.text_off = uint16_t(r.text_len);
    if (pos < limit && m[pos] == 0) {
      // The root (the OPT owner in nearly every message): what the loops
      // below conclude for a first byte of 0, without them.
      n.wire_len = 1;
      n.text_len = 0;
      *next = pos + 1;
      *name_index = r.n_names++;
      return Status::Ok;
    }
    return name_labels(pos, limit, n, next, name_index);
  }

  // name() past its head: n has its fields but the labels, wire and text.
  [[gnu::noinline]] Status name_labels(uint32_t pos, uint32_t limit, NameRef& n, uint32_t* next, uint16_t* name_index) {
    const uint32_t text_start = r.text_len;
    uint32_t p = pos, run_start = pos, wire = 0, end_linear = 0;
    bool jumped = false;
    // Leading linear labels, the bulk of every name, without the jumped-run
    // bookkeeping: stops at the end, a pointer, or anything the general loop
    // below must judge (it re-reads the same byte, so errors are unchanged).
    // Skipped whole when a capacity could run out inside the name (at most
    // 127 labels and 4 * 254 text bytes fit in its 255 wire bytes) or the
    // first label would not be the rightmost yet: the general loop alone
    // gives the same result then. That leaves two tests per label, and the
    // counters live in registers: stores to r.text (char) may alias any of
    // r's fields, so the compiler reloads those after each one.
    {
      ParseResult& R = r;
      const uint8_t* const msg = m;
      const uint8_t* const mend = m + len;
      unsigned nl = R.n_labels, nr = R.n_label_refs;
      if (nl + 127 <= ParseResult::kMaxLabels && nr + 127 <= ParseResult::kMaxLabelRefs &&
          text_start + 4 * 254 <= ParseResult::kTextCap && !(nl && R.labels[nl - 1].off >= p + 1)) {
        // wire + 1 + b + 1 <= 255 with wire == p - pos: p + 1 + b <= pos + 254.
        const uint32_t lim = std::min(limit, pos + 254);
        const unsigned nl0 = nl;
        uint64_t starts = 0;  // bit p - pos for each label at p (valid up to bit 63)
        while (p < lim) {
          const uint8_t b = msg[p];
          if (uint8_t(b - 1) >= 0x3f || p + 1 + b > lim) break;
          R.labels[nl] = {uint16_t(p + 1), b};
          R.label_refs[nr++] = uint16_t(nl++);
          starts |= uint64_t(1) << ((p - pos) & 63);
          p += 1u + b;
        }
        char* out = R.text + text_start;
        if (nl != nl0) out = name_text(out, msg + pos + 1, p - pos - 1, starts >> 1, R.labels + nl0, nl - nl0, msg, mend);
        n.n_labels = uint8_t(nl - nl0);
        wire = p - pos;
        R.n_labels = uint16_t(nl);
        R.n_label_refs = uint16_t(nr);
        R.text_len = uint32_t(out - R.text);
        // The root right after: what the general loop below concludes.
        if (p < limit && msg[p] == 0) {
          n.wire_len = uint16_t(p + 1 - pos);
          n.text_len = uint16_t(R.text_len - text_start);
          *next = p + 1;
          *name_index = R.n_names++;
          return Status::Ok;
        }
      }
    }
    for (;;) {
      // Bytes of a jumped run must lie before the name itself: a pointer
      // names a prior occurrence, and this keeps jumped labels from
      // overlapping labels parsed later.
      const uint32_t lim = jumped ? pos : limit;
      if (p >= lim) {
        if (jumped) return fail(Status::Malformed, Error::BadPointer, p);
        return p >= len ? fail(Status::Truncated, Error::PastEnd, p) : fail(Status::Malformed, Error::RdataLength, p);
      }
      const uint8_t b = m[p];
      if (b == 0) {
        if (!jumped) end_linear = p + 1;
        break;
      }
      if ((b & 0xc0) == 0xc0) {
        if (p + 1 >= lim) {
          if (jumped) return fail(Status::Malformed, Error::BadPointer, p);
          return p + 1 >= len ? fail(Status::Truncated, Error::PastEnd, p) : fail(Status::Malformed, Error::RdataLength, p);
        }
        const uint32_t target = uint32_t(b & 0x3f) << 8 | m[p + 1];
        // Strictly decreasing targets: no loop can be built, no forward or
        // out-of-bounds pointer survives.
        if (target >= run_start) return fail(Status::Malformed, Error::BadPointer, p);
        // Must land on a label already parsed (or the root byte is refused
        // too): otherwise a crafted pointer into the middle of a label would
        // make two label spans overlap and masking one would corrupt the other.
        if (target + 1 > 0xffff || find_label(uint16_t(target + 1), 0, false) == 0xffff)
          return fail(Status::Malformed, Error::BadPointer, p);
        if (!jumped) end_linear = p + 2;
        jumped = true;
        n.compressed = true;
        run_start = target;
        p = target;
        continue;
      }
      if (b & 0xc0) return fail(Status::Malformed, Error::LabelType, p);
      if (p + 1 + b > lim) {
        if (jumped) return fail(Status::Malformed, Error::BadPointer, p);
        return p + 1 + b > len ? fail(Status::Truncated, Error::PastEnd, p) : fail(Status::Malformed, Error::RdataLength, p);
      }
      wire += 1u + b;
      if (wire + 1 > 255) return fail(Status::Malformed, Error::NameTooLong, p);
      const uint16_t li = find_label(uint16_t(p + 1), b, !jumped);
      if (li == ParseResult::kMaxLabels || r.n_label_refs >= ParseResult::kMaxLabelRefs)
        return fail(Status::Malformed, Error::Capacity, p);
      if (li == 0xffff) return fail(Status::Malformed, Error::BadPointer, p);  // unreachable: checked at jump
      r.label_refs[r.n_label_refs++] = li;
      ++n.n_labels;
      if (r.text_len + 1 + 4u * b <= ParseResult::kTextCap) {
        append_text(m + p + 1, b, r.text_len != text_start);
        p += 1u + b;
        continue;
      }
      if (r.text_len != text_start && !put_text('.')) return fail(Status::Malformed, Error::Capacity, p);
      for (uint32_t i = 0; i < b; ++i) {
        const uint8_t c = m[p + 1 + i];
        bool ok;
        if (c == '.' || c == '\\') {
          ok = put_text('\\') && put_text(char(c));
        } else if (c <= 0x20 || c >= 0x7f) {
          ok = put_text('\\') && put_text(char('0' + c / 100)) && put_text(char('0' + c / 10 % 10)) &&
               put_text(char('0' + c % 10));
        } else {
          ok = put_text((c >= 'A' && c <= 'Z') ? char(c + 32) : char(c));
        }
        if (!ok) return fail(Status::Malformed, Error::Capacity, p);
      }
      p += 1u + b;
    }
    n.wire_len = uint16_t(end_linear - pos);
    n.text_len = uint16_t(r.text_len - text_start);
    *next = end_linear;
    *name_index = r.n_names++;
    return Status::Ok;
  }

  struct RdataLayout {
    uint16_t type;
    uint8_t prefix;     // fixed bytes before the first name
    uint8_t n_names;
    int8_t tail;        // exact bytes after the names, or -1 for "any"
    NameRole role1, role2;
  };

  static const RdataLayout* layout(uint16_t type) {
    static constexpr RdataLayout kLayouts[] = {
        {2, 0, 1, 0, NameRole::Ns, NameRole::Ns},
        {3, 0, 1, 0, NameRole::RdataOther, NameRole::RdataOther},   // MD
        {4, 0, 1, 0, NameRole::RdataOther, NameRole::RdataOther},   // MF
        {5, 0, 1, 0, NameRole::Cname, NameRole::Cname},
        {6, 0, 2, 20, NameRole::SoaMname, NameRole::SoaRname},
        {7, 0, 1, 0, NameRole::RdataOther, NameRole::RdataOther},   // MB
        {8, 0, 1, 0, NameRole::RdataOther, NameRole::RdataOther},   // MG
        {9, 0, 1, 0, NameRole::RdataOther, NameRole::RdataOther},   // MR
        {12, 0, 1, 0, NameRole::Ptr, NameRole::Ptr},
        {14, 0, 2, 0, NameRole::RdataOther, NameRole::RdataOther},  // MINFO
        {15, 2, 1, 0, NameRole::Mx, NameRole::Mx},
        {17, 0, 2, 0, NameRole::RdataOther, NameRole::RdataOther},  // RP
        {18, 2, 1, 0, NameRole::RdataOther, NameRole::RdataOther},  // AFSDB
        {21, 2, 1, 0, NameRole::RdataOther, NameRole::RdataOther},  // RT
        {33, 6, 1, 0, NameRole::Srv, NameRole::Srv},
        {36, 2, 1, 0, NameRole::RdataOther, NameRole::RdataOther},  // KX
        {39, 0, 1, 0, NameRole::Dname, NameRole::Dname},
        {46, 18, 1, -1, NameRole::RdataOther, NameRole::RdataOther},  // RRSIG signer
        {47, 0, 1, -1, NameRole::RdataOther, NameRole::RdataOther},   // NSEC next
    };
    for (const auto& l : kLayouts)
      if (l.type == type) return &l;
    return nullptr;
  }

  Status rdata_names(uint32_t off, uint32_t rdlen, uint16_t type, Section sec, uint16_t rr_index) {
    const uint32_t end = off + rdlen;
    uint32_t p = off;
    uint16_t idx;
    if (type == 35) {  // NAPTR: order, pref, flags, services, regexp, replacement
      p += 4;
      for (int i = 0; i < 3; ++i) {
        if (p >= end) return fail(Status::Malformed, Error::RdataLength, p);
        p += 1u + m[p];
      }
      if (p >= end) return fail(Status::Malformed, Error::RdataLength, p);
      uint32_t next;
      if (Status s = name(p, end, NameRole::RdataOther, sec, type, rr_index, &next, &idx); s != Status::Ok)
        return s == Status::Truncated ? fail(Status::Malformed, Error::RdataLength, p) : s;
      return next == end ? Status::Ok : fail(Status::Malformed, Error::RdataLength, next);
    }
    const RdataLayout* l = layout(type);
    if (!l) return Status::Ok;
    p += l->prefix;
    for (int i = 0; i < l->n_names; ++i) {
      if (p >= end) return fail(Status::Malformed, Error::RdataLength, p);
      uint32_t next;
      // The rdata is fully inside the message, so running out is a lie in
      // RDLENGTH, not a short capture.
      if (Status s = name(p, end, i == 0 ? l->role1 : l->role2, sec, type, rr_index, &next, &idx); s != Status::Ok)
        return s == Status::Truncated ? fail(Status::Malformed, Error::RdataLength, p) : s;
      p = next;
    }
    if (l->tail >= 0 && p + uint32_t(l->tail) != end) return fail(Status::Malformed, Error::RdataLength, p);
    if (p > end) return fail(Status::Malformed, Error::RdataLength, p);
    return Status::Ok;
  }

  // TXT strings: each MAC written as text (the MAC rule maps it in place).
  Status txt(uint32_t off, uint32_t rdlen) {
    const uint32_t end = off + rdlen;
    auto hex = [](uint8_t c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); };
    auto part = [&](uint8_t c) { return hex(c) || c == ':' || c == '-'; };
    for (uint32_t p = off; p < end;) {
      const uint32_t s = p + 1, e = s + m[p];
      if (e > end) return fail(Status::Malformed, Error::RdataLength, p);
      for (uint32_t i = s; i + 17 <= e; ++i) {
        const uint8_t sep = m[i + 2];
        bool ok = (sep == ':' || sep == '-') && (i == s || !part(m[i - 1])) && (i + 17 == e || !part(m[i + 17]));
        for (uint32_t k = 0; ok && k < 17; ++k) ok = k % 3 == 2 ? m[i + k] == sep : hex(m[i + k]);
        if (!ok) continue;
        if (r.n_txt_macs >= ParseResult::kMaxTxtMacs) return fail(Status::Malformed, Error::Capacity, i);
        r.txt_mac[r.n_txt_macs++] = uint16_t(i);
        i += 16;
      }
      p = e;
    }
    return Status::Ok;
  }

  Status opt(uint32_t rr_off, uint32_t rdlen_off, uint32_t off, uint32_t rdlen, uint16_t rr_index) {
    const uint32_t end = off + rdlen;
    uint32_t p = off;
    while (p < end) {
      if (p + 4 > end) return fail(Status::Malformed, Error::BadOpt, p);
      const uint16_t code = rd16(m + p), olen = rd16(m + p + 2);
      if (p + 4 + olen > end) return fail(Status::Malformed, Error::BadOpt, p);
      if ((code == 13 || code == 18) && olen) {
        // CHAIN (a query's closest trust point) and Report-Channel (the
        // agent domain): one whole name filling the option.
        uint32_t next;
        uint16_t idx;
        if (Status s = name(p + 4, p + 4 + olen, NameRole::EdnsName, Section::Additional, 41, rr_index, &next, &idx);
            s != Status::Ok || next != p + 4u + olen)
          return fail(Status::Malformed, Error::BadOpt, p);
      } else if (code == 8) {
        if (r.ecs.present || olen < 4) return fail(Status::Malformed, Error::BadOpt, p);
        const uint16_t fam = rd16(m + p + 4);
        const uint8_t src = m[p + 6], scope = m[p + 7];
        const uint32_t alen = olen - 4u;
        const uint32_t maxbits = fam == 1 ? 32 : fam == 2 ? 128 : 0;
        // RFC 7871: exactly ceil(source/8) address bytes. Anything else is
        // refused so no address byte escapes the zero/strip helpers.
        if (maxbits == 0 || src > maxbits || scope > maxbits || alen != (src + 7u) / 8u)
          return fail(Status::Malformed, Error::BadOpt, p);
        r.ecs = {true, uint16_t(p), uint16_t(4 + olen), fam, src, scope, uint16_t(p + 8), uint16_t(alen),
                 uint16_t(rdlen_off)};
      } else if (code == 4) {
        // One Owner option per message: a second would need its own MACs
        // mapped, and no sender has a reason to send two.
        if (r.owner.present) return fail(Status::Malformed, Error::BadOpt, p);
        Owner& o = r.owner;
        o = {true, 0, uint16_t(p + 4), olen, {0, 0}, 0, 0};
        if (olen == 8 || olen == 14 || olen == 18 || olen == 20) {
          o.mac_off[0] = uint16_t(p + 6);
          o.n_macs = 1;
          if (olen >= 14) o.mac_off[1] = uint16_t(p + 12), o.n_macs = 2;
          if (olen > 14) o.pw_off = uint16_t(p + 18), o.pw_len = uint16_t(olen - 14);
        }
      }
      p += 4u + olen;
    }
    (void)rr_off;
    return Status::Ok;
  }

  // An NBNS record's data (RFC 1002 4.2): only the layouts the service
  // defines. NB: entries of 2 bytes of flags and an IPv4 address, the
  // address a host registers, answers or defends for its name (a WACK's 2
  // bytes are flags alone); NBSTAT: a count, that many node names of 18
  // bytes (15 characters, the type suffix, 2 bytes of flags), then the
  // statistics, led by the unit ID; NULL: empty; NS and A as in DNS.
  Status nbns_rdata(uint16_t type, uint16_t klass, uint32_t rd, uint16_t rdlen, Section sec, uint16_t rr_index) {
    if ((klass & 0x7fff) != 1) return fail(Status::Malformed, Error::Nbns, rd);
    switch (type) {
      case 32:
        if (rdlen == 2) return Status::Ok;
        if (rdlen % 6) return fail(Status::Malformed, Error::Nbns, rd);
        for (uint32_t k = 0; k < rdlen; k += 6) {
          if (r.n_addrs >= ParseResult::kMaxAddrs) return fail(Status::Malformed, Error::Capacity, rd);
          r.addrs[r.n_addrs++] = {sec, uint8_t(4), rr_index, uint16_t(rd + k + 2)};
        }
        return Status::Ok;
      case 33: {
        if (rdlen < 1) return fail(Status::Malformed, Error::Nbns, rd);
        const uint32_t n = m[rd];
        if (1 + 18 * n + 6 > rdlen) return fail(Status::Malformed, Error::Nbns, rd);
        if (r.n_nb_names + n > ParseResult::kMaxNbNames || r.n_nb_units >= ParseResult::kMaxNbUnits)
          return fail(Status::Malformed, Error::Capacity, rd);
        for (uint32_t k = 0; k < n; ++k) r.nb_name[r.n_nb_names++] = uint16_t(rd + 1 + 18 * k);
        r.nb_unit[r.n_nb_units++] = uint16_t(rd + 1 + 18 * n);
        return Status::Ok;
      }
      case 10: return rdlen ? fail(Status::Malformed, Error::Nbns, rd) : Status::Ok;
      case 2: return rdata_names(rd, rdlen, type, sec, rr_index);
      default: return fail(Status::Malformed, Error::Nbns, rd);
    }
  }

  Status run() {
    if (len > 0xffff) return fail(Status::Malformed, Error::TooLong, 0);
    if (len < 12) return fail(Status::Truncated, Error::ShortHeader, len);
    Header& h = r.hdr;
    h.id = rd16(m);
    h.flags = rd16(m + 2);
    h.qdcount = rd16(m + 4);
    h.ancount = rd16(m + 6);
    h.nscount = rd16(m + 8);
    h.arcount = rd16(m + 10);
    const uint32_t min_body = uint32_t(h.qdcount) * 5 + (uint32_t(h.ancount) + h.nscount + h.arcount) * 11;
    // Counts the bytes cannot hold even at minimum RR size are a lie, not a
    // short capture: Malformed. (A first IP fragment with plausible counts
    // that runs out later is Truncated.)
    if (min_body > len - 12) return fail(Status::Malformed, Error::CountsTooLarge, 4);
    uint32_t p = 12;
    uint16_t idx;
    for (uint32_t q = 0; q < h.qdcount; ++q) {
      uint32_t next;
      if (Status s = name(p, len, NameRole::Qname, Section::Question, 0, 0xffff, &next, &idx); s != Status::Ok) return s;
      if (next + 4 > len) return fail(Status::Truncated, Error::PastEnd, next);
      r.names[idx].rr_type = rd16(m + next);
      p = next + 4;
    }
    bool have_opt = false;
    const uint16_t counts[3] = {h.ancount, h.nscount, h.arcount};
    static constexpr NameRole owner_role[3] = {NameRole::AnswerOwner, NameRole::AuthorityOwner, NameRole::AdditionalOwner};
    static constexpr Section sections[3] = {Section::Answer, Section::Authority, Section::Additional};
    for (int s = 0; s < 3; ++s) {
      for (uint32_t i = 0; i < counts[s]; ++i) {
        if (r.n_rrs >= ParseResult::kMaxRRs) return fail(Status::Malformed, Error::Capacity, p);
        const uint16_t rr_index = r.n_rrs;
        const uint32_t rr_off = p;
        uint32_t next;
        if (Status st = name(p, len, owner_role[s], sections[s], 0, rr_index, &next, &idx); st != Status::Ok) return st;
        if (next + 10 > len) return fail(Status::Truncated, Error::PastEnd, next);
        const uint16_t type = rd16(m + next), klass = rd16(m + next + 2), rdlen = rd16(m + next + 8);
        const uint32_t rd = next + 10;
        if (rd + rdlen > len) return fail(Status::Truncated, Error::PastEnd, rd);
        r.names[idx].rr_type = type;
        r.rrs[r.n_rrs++] = {sections[s], type, klass, idx, uint16_t(rd), rdlen};
        if (type == 41) {
          if (have_opt || sections[s] != Section::Additional || r.names[idx].n_labels != 0)
            return fail(Status::Malformed, Error::BadOpt, rr_off);
          have_opt = true;
          if (Status st = opt(rr_off, next + 8, rd, rdlen, rr_index); st != Status::Ok) return st;
        } else if (type == 16) {
          if (Status st = txt(rd, rdlen); st != Status::Ok) return st;
        } else if ((type == 1 || type == 28) && (klass & 0x7fff) == 1) {
          const uint16_t want = type == 1 ? 4 : 16;
          if (rdlen != want) return fail(Status::Malformed, Error::RdataLength, rd);
          if (r.n_addrs >= ParseResult::kMaxAddrs) return fail(Status::Malformed, Error::Capacity, rd);
          r.addrs[r.n_addrs++] = {sections[s], uint8_t(type == 1 ? 4 : 6), rr_index, uint16_t(rd)};
        } else if (nbns) {
          if (Status st = nbns_rdata(type, klass, rd, rdlen, sections[s], rr_index); st != Status::Ok) return st;
        } else if (type == 32 && (klass & 0x7fff) == 1 && rdlen % 6 == 0) {
          // NetBIOS name service (RFC 1002) NB record: entries of 2 bytes
          // of flags and an IPv4 address each, the address a host registers
          // for its name. (Type 32 in DNS proper is the obsolete NIMLOC,
          // opaque bytes: rewriting them as addresses hides, never leaks.)
          for (uint32_t k = 0; k < rdlen; k += 6) {
            if (r.n_addrs >= ParseResult::kMaxAddrs) return fail(Status::Malformed, Error::Capacity, rd);
            r.addrs[r.n_addrs++] = {sections[s], uint8_t(4), rr_index, uint16_t(rd + k + 2)};
          }
        } else if ((klass & 0x7fff) == 1 || type == 6 || type == 2 || type == 5 || type == 12) {
          // Name-bearing layouts are class-independent for the classic
          // types; others only trusted in IN (CH/HS reuse type numbers).
          if (Status st = rdata_names(rd, rdlen, type, sections[s], rr_index); st != Status::Ok) return st;
        }
        p = rd + rdlen;
      }
    }
    r.trailing = uint16_t(len - p);
    r.status = Status::Ok;
    return Status::Ok;
  }
};

}  // namespace

Status parse(const uint8_t* msg, size_t len, ParseResult& out, bool nbns) {
  out.status = Status::Malformed;
  out.error = Error::None;
  out.error_off = 0;
  out.msg_len = uint16_t(len > 0xffff ? 0xffff : len);
  out.trailing = 0;
  out.overflow = false;
  out.hdr = {};
  out.n_names = out.n_labels = out.n_label_refs = out.n_rrs = out.n_addrs = 0;
  out.text_len = 0;
  out.ecs = {};
  out.owner = {};
  out.n_txt_macs = 0;
  out.n_nb_names = out.n_nb_units = 0;
  Parser p{msg, uint32_t(len > 0x10000 ? 0x10000 : len), out, nbns};
  if (len > 0xffff) return p.fail(Status::Malformed, Error::TooLong, 0);
  return p.run();
}

Status split_tcp(const uint8_t* data, size_t len, TcpSplit& out) {
  out.n = 0;
  out.consumed = 0;
  out.partial = false;
  out.partial_off = 0;
  out.need = 0;
  out.overflow = false;
  size_t p = 0;
  while (p < len) {
    if (len - p < 2) {
      out.partial = true;
      out.partial_off = uint32_t(p);
      return Status::Truncated;
    }
    const uint16_t mlen = rd16(data + p);
    if (mlen < 12) return Status::Malformed;
    if (len - p - 2 < mlen) {
      out.partial = true;
      out.partial_off = uint32_t(p);
      out.need = 2u + mlen;
      return Status::Truncated;
    }
    if (out.n >= TcpSplit::kMax) {
      out.overflow = true;
      return Status::Malformed;
    }
    out.msgs[out.n++] = {uint32_t(p + 2), mlen};
    p += 2u + mlen;
    out.consumed = uint32_t(p);
  }
  return Status::Ok;
}

}  // namespace amon::dns
