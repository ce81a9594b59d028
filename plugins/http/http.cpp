#include "amon_http.hpp"

#include <hs.h>

#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace amon::http {

const char* field_name(Field f) {
  switch (f) {
    case Field::Other: return "http.other";
    case Field::Method: return "http.method";
    case Field::Uri: return "http.uri";
    case Field::UriDomain: return "http.uri.domain";
    case Field::Host: return "http.host";
    case Field::HostDomain: return "http.host.domain";
    case Field::UserAgent: return "http.user_agent";
    case Field::Referer: return "http.referer";
    case Field::RefererDomain: return "http.referer.domain";
    case Field::Cookie: return "http.cookie";
    case Field::Authorization: return "http.authorization";
    case Field::Xff: return "http.xff";
    case Field::Forwarded: return "http.forwarded";
    case Field::SetCookie: return "http.set_cookie";
    case Field::Location: return "http.location";
    case Field::LocationDomain: return "http.location.domain";
    case Field::Server: return "http.server";
    case Field::ContentLength: return "http.content_length";
    case Field::TransferEncoding: return "http.transfer_encoding";
    case Field::Origin: return "http.origin";
    case Field::ProxyAuthorization: return "http.proxy_authorization";
    case Field::XRealIp: return "http.x_real_ip";
    case Field::From: return "http.from";
    case Field::ContentType: return "http.content_type";
    case Field::ContentEncoding: return "http.content_encoding";
    case Field::CacheControl: return "http.cache_control";
    case Field::Date: return "http.date";
    case Field::Expires: return "http.expires";
    case Field::Pragma: return "http.pragma";
    case Field::OtherHeader: return "http.other_headers";
  }
  return "?";
}

namespace {

struct Pattern { const char* name; Field kind; };
// Anchored on the preceding LF and ending at the colon, so one scan of the
// whole head finds exactly the header lines whose full name matches
// (case-insensitively): "X-Host:" or a folded " Host:" cannot match.
constexpr Pattern kPatterns[] = {
    {"host", Field::Host},
    {"user-agent", Field::UserAgent},
    {"referer", Field::Referer},
    {"cookie", Field::Cookie},
    {"authorization", Field::Authorization},
    {"x-forwarded-for", Field::Xff},
    {"forwarded", Field::Forwarded},
    {"set-cookie", Field::SetCookie},
    {"location", Field::Location},
    {"server", Field::Server},
    {"content-length", Field::ContentLength},
    {"transfer-encoding", Field::TransferEncoding},
    {"origin", Field::Origin},
    {"proxy-authorization", Field::ProxyAuthorization},
    {"x-real-ip", Field::XRealIp},
    {"from", Field::From},
    {"content-type", Field::ContentType},
    {"content-encoding", Field::ContentEncoding},
    {"cache-control", Field::CacheControl},
    {"date", Field::Date},
    {"expires", Field::Expires},
    {"pragma", Field::Pragma},
};
constexpr unsigned kNumPatterns = sizeof kPatterns / sizeof kPatterns[0];

// tchar per RFC 9110.
constexpr bool is_tchar(uint8_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' || c == '*' || c == '+' ||
         c == '-' || c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~';
}
struct TcharTable {
  bool t[256];
  constexpr TcharTable() : t() {
    for (int i = 0; i < 256; ++i) t[i] = is_tchar(uint8_t(i));
  }
};
constexpr TcharTable kTchar;

inline bool ctl_in_value(uint8_t c) { return (c < 0x20 && c != '\t') || c == 0x7f; }
inline uint8_t lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? uint8_t(c + 32) : c; }

Span host_of_authority(const uint8_t* b, uint32_t s, uint32_t e) {
  // userinfo ends at the last '@'
  for (uint32_t i = e; i > s; --i)
    if (b[i - 1] == '@') { s = i; break; }
  if (s < e && b[s] == '[') return {};  // IP literal: not a name
  uint32_t end = e;
  for (uint32_t i = e; i > s; --i) {
    if (b[i - 1] == ':') { end = i - 1; break; }
    if (b[i - 1] < '0' || b[i - 1] > '9') break;
  }
  if (end <= s) return {};
  return {s, end - s};
}

struct Ctx {
  Result* r;
  uint16_t first, n, cursor;
  const uint8_t* b;
  uint32_t base;
};

int on_match(unsigned id, unsigned long long, unsigned long long to, unsigned, void* vctx) {
  auto* c = static_cast<Ctx*>(vctx);
  const uint32_t name_end = c->base + uint32_t(to) - 1;  // the colon
  const uint32_t name_off = name_end - uint32_t(std::strlen(kPatterns[id].name));
  // Matches arrive in offset order; header names are in offset order too.
  while (c->cursor < c->n && c->r->headers[c->first + c->cursor].name.off < name_off) ++c->cursor;
  if (c->cursor < c->n) {
    HeaderLine& h = c->r->headers[c->first + c->cursor];
    if (h.name.off == name_off && h.name.len == name_end - name_off) h.kind = kPatterns[id].kind;
  }
  return 0;
}

struct Parser {
  const uint8_t* b;
  uint32_t len;
  Direction dir;
  const Matcher& m;
  Scratch& s;
  Result& r;
  bool ends;

  Status fail(Status st, Error e) {
    r.status = st;
    r.error = e;
    if (e == Error::Capacity) r.overflow = true;
    return st;
  }

  bool occ(Field k, uint16_t msg, uint16_t hdr, Span sp) {
    if (r.n_occ >= Result::kMaxOcc) return false;
    r.occ[r.n_occ++] = {k, msg, hdr, sp};
    return true;
  }

  // Find the end of the line starting at p: returns offset of CR, or
  // UINT32_MAX if no LF yet, or UINT32_MAX-1 on bare LF/CR.
  uint32_t line_end(uint32_t p, uint32_t limit) const {
    const void* lf = std::memchr(b + p, '\n', limit - p);
    if (!lf) {
      // A stray CR already visible is an error even before the LF arrives.
      const void* cr = std::memchr(b + p, '\r', limit - p);
      if (cr && static_cast<const uint8_t*>(cr) + 1 < b + limit) return UINT32_MAX - 1;
      return UINT32_MAX;
    }
    const uint32_t e = uint32_t(static_cast<const uint8_t*>(lf) - b);
    if (e == p || b[e - 1] != '\r') return UINT32_MAX - 1;
    if (std::memchr(b + p, '\r', e - 1 - p)) return UINT32_MAX - 1;
    return e - 1;
  }

  Status start_line(Message& msg, uint32_t p, uint32_t e) {
    const bool is_resp = e - p >= 5 && std::memcmp(b + p, "HTTP/", 5) == 0;
    if (dir == Direction::Request && is_resp) return fail(Status::Malformed, Error::RequestLine);
    if (dir == Direction::Response && !is_resp) return fail(Status::Malformed, Error::StatusLine);
    msg.request = !is_resp;
    if (is_resp) {
      // HTTP/1.x SP 3DIGIT [SP reason]
      if (e - p < 12 || b[p + 5] != '1' || b[p + 6] != '.' || b[p + 7] < '0' || b[p + 7] > '9' || b[p + 8] != ' ')
        return fail(Status::Malformed, Error::StatusLine);
      for (int i = 9; i < 12; ++i)
        if (b[p + i] < '0' || b[p + i] > '9') return fail(Status::Malformed, Error::StatusLine);
      msg.version_minor = uint8_t(b[p + 7] - '0');
      msg.status = uint16_t((b[p + 9] - '0') * 100 + (b[p + 10] - '0') * 10 + (b[p + 11] - '0'));
      if (e - p > 12) {
        if (b[p + 12] != ' ') return fail(Status::Malformed, Error::StatusLine);
        for (uint32_t i = p + 13; i < e; ++i)
          if (ctl_in_value(b[i])) return fail(Status::Malformed, Error::StatusLine);
        msg.reason = {p + 13, e - p - 13};
      }
      return Status::Ok;
    }
    uint32_t i = p;
    while (i < e && kTchar.t[b[i]]) ++i;
    if (i == p || i >= e || b[i] != ' ') return fail(Status::Malformed, Error::RequestLine);
    msg.method = {p, i - p};
    const uint32_t u = ++i;
    // The version is the last 9 bytes (" HTTP/1.x"); the target is all in
    // between. Scanners put raw spaces in targets ("GET /a;cat /etc/passwd
    // HTTP/1.1"): accept them (flagged) so the other fields of such requests
    // are still found and rewritten, as tshark and Zeek do.
    if (e < u + 10 || b[e - 9] != ' ') return fail(Status::Malformed, Error::RequestLine);
    const uint32_t ue = e - 9;
    for (uint32_t k = u; k < ue; ++k) {
      if (b[k] < 0x20 || b[k] == 0x7f) return fail(Status::Malformed, Error::RequestLine);
      if (b[k] == ' ') msg.uri_has_space = true;
    }
    if (b[u] == ' ' || b[ue - 1] == ' ') return fail(Status::Malformed, Error::RequestLine);
    msg.uri = {u, ue - u};
    i = ue + 1;
    if (std::memcmp(b + i, "HTTP/1.", 7) != 0 || b[i + 7] < '0' || b[i + 7] > '9')
      return fail(Status::Malformed, Error::RequestLine);
    msg.version_minor = uint8_t(b[i + 7] - '0');
    return Status::Ok;
  }

  Status content_length(Message& msg, const HeaderLine& h) {
    uint64_t v = 0;
    if (h.value.len == 0 || h.value.len > 15) return fail(Status::Malformed, Error::ContentLength);
    for (uint32_t i = 0; i < h.value.len; ++i) {
      const uint8_t c = b[h.value.off + i];
      if (c < '0' || c > '9') return fail(Status::Malformed, Error::ContentLength);
      v = v * 10 + (c - '0');
    }
    // Two different lengths are a smuggling vector: refuse rather than pick.
    if (msg.has_content_length && msg.content_length != v) return fail(Status::Malformed, Error::ContentLength);
    msg.has_content_length = true;
    msg.content_length = v;
    return Status::Ok;
  }

  // The stream ends in the head starting at p, which holds no more than a
  // head may.
  bool cut_here(uint32_t p) const { return ends && len - p < Result::kMaxHeadBytes; }

  // A head cut inside its start line: one message of no field, to the end.
  Status partial(Message& msg, uint32_t p) {
    msg.head_len = len - p;
    msg.body_off = len;
    r.partial_from = p;
    r.n_msgs++;
    r.consumed = len;
    r.status = Status::Ok;
    return Status::Ok;
  }

  // Parse one message head at p. Returns Ok with *next = body start.
  Status head(uint32_t p, uint32_t* next) {
    const uint16_t mi = r.n_msgs;
    Message& msg = r.msgs[mi];
    msg = Message{};
    msg.off = p;
    msg.first_header = r.n_headers;
    const uint32_t limit = len - p > Result::kMaxHeadBytes ? p + Result::kMaxHeadBytes : len;
    uint32_t e = line_end(p, limit);
    // The stream ends inside the start line: nothing of it is trusted.
    if (e == UINT32_MAX && cut_here(p)) return partial(msg, p);
    if (e == UINT32_MAX) return fail(len - p >= Result::kMaxHeadBytes ? Status::Malformed : Status::Truncated,
                                     len - p >= Result::kMaxHeadBytes ? Error::HeadTooLarge : Error::NeedMore);
    if (e == UINT32_MAX - 1) return fail(Status::Malformed, Error::BareLf);
    if (Status st = start_line(msg, p, e); st != Status::Ok) return st;
    uint32_t q = e + 2;
    bool cut = false;
    for (;;) {
      e = line_end(q, limit);
      if (e == UINT32_MAX && cut_here(p)) {
        // The complete lines before q are the head's; the line the stream
        // cuts is not a value anyone can locate.
        r.partial_from = q;
        cut = true;
        break;
      }
      if (e == UINT32_MAX) return fail(len - p >= Result::kMaxHeadBytes ? Status::Malformed : Status::Truncated,
                                       len - p >= Result::kMaxHeadBytes ? Error::HeadTooLarge : Error::NeedMore);
      if (e == UINT32_MAX - 1) return fail(Status::Malformed, Error::BareLf);
      if (e == q) break;  // empty line: end of head
      if (b[q] == ' ' || b[q] == '\t') {
        // obs-fold: the value continues; keep one span over the fold so a
        // rewrite covers every byte of it (and keeps the CRLF+WSP).
        if (msg.n_headers == 0) return fail(Status::Malformed, Error::Fold);
        HeaderLine& h = r.headers[r.n_headers - 1];
        for (uint32_t i = q; i < e; ++i)
          if (ctl_in_value(b[i])) return fail(Status::Malformed, Error::HeaderValue);
        uint32_t ve = e;
        while (ve > q && (b[ve - 1] == ' ' || b[ve - 1] == '\t')) --ve;
        if (ve > q) {
          uint32_t vs = q;
          while (b[vs] == ' ' || b[vs] == '\t') ++vs;
          if (h.value.len == 0) h.value.off = vs;
          h.value.len = ve - h.value.off;
          h.folded = true;
        }
        q = e + 2;
        continue;
      }
      uint32_t i = q;
      while (i < e && kTchar.t[b[i]]) ++i;
      if (i == q || i >= e || b[i] != ':') return fail(Status::Malformed, Error::HeaderName);
      uint32_t vs = i + 1;
      // Validate before the header enters the table: a refused message must
      // not leave a half-filled entry behind for the caller to read.
      for (uint32_t k = vs; k < e; ++k)
        if (ctl_in_value(b[k])) return fail(Status::Malformed, Error::HeaderValue);
      if (r.n_headers >= Result::kMaxHeaders) return fail(Status::Malformed, Error::Capacity);
      HeaderLine& h = r.headers[r.n_headers++];
      ++msg.n_headers;
      h.name = {q, i - q};
      h.kind = Field::Other;
      h.folded = false;
      while (vs < e && (b[vs] == ' ' || b[vs] == '\t')) ++vs;
      uint32_t ve = e;
      while (ve > vs && (b[ve - 1] == ' ' || b[ve - 1] == '\t')) --ve;
      h.value = {vs, ve - vs};
      q = e + 2;
    }
    // A head the stream cuts runs to the buffer's end, and has no body.
    const uint32_t head_end = cut ? len : q + 2;
    msg.head_len = head_end - p;
    msg.body_off = head_end;
    *next = head_end;

    // One Hyperscan pass over the head classifies every header name (of
    // the complete lines only, when the stream cuts it).
    Ctx c{&r, msg.first_header, msg.n_headers, 0, b, p};
    if (msg.n_headers && hs_scan(m.db(), reinterpret_cast<const char*>(b + p), cut ? q - p : msg.head_len, 0,
                                 s.get(), on_match, &c) != HS_SUCCESS)
      return fail(Status::Malformed, Error::Scan);

    if (msg.request) {
      if (!occ(Field::Method, mi, 0xffff, msg.method) || !occ(Field::Uri, mi, 0xffff, msg.uri))
        return fail(Status::Malformed, Error::Capacity);
      const Span d = url_host(b, msg.uri);
      if (d.len && !occ(Field::UriDomain, mi, 0xffff, d)) return fail(Status::Malformed, Error::Capacity);
    }
    bool te = false, te_chunked = false;
    for (uint16_t k = 0; k < msg.n_headers; ++k) {
      const uint16_t hi = uint16_t(msg.first_header + k);
      const HeaderLine& h = r.headers[hi];
      switch (h.kind) {
        case Field::Other:
          // Any header can carry a name, a URL or an address (P3P policyref,
          // Content-Location, Via, Link, vendor headers): its value is an
          // occurrence a policy can hide as http.other_headers.
          if (!occ(Field::OtherHeader, mi, hi, h.value)) return fail(Status::Malformed, Error::Capacity);
          continue;
        case Field::ContentLength:
          if (Status st = content_length(msg, h); st != Status::Ok) return st;
          break;
        case Field::TransferEncoding: {
          te = true;
          // The final coding decides framing; match "chunked" at the end.
          uint32_t e2 = h.value.off + h.value.len, s2 = e2;
          while (s2 > h.value.off && b[s2 - 1] != ',' && b[s2 - 1] != ' ' && b[s2 - 1] != '\t') --s2;
          te_chunked = e2 - s2 == 7;
          for (uint32_t z = 0; te_chunked && z < 7; ++z) te_chunked = lower(b[s2 + z]) == "chunked"[z];
          break;
        }
        default:
          break;
      }
      if (!occ(h.kind, mi, hi, h.value)) return fail(Status::Malformed, Error::Capacity);
      Span d{};
      Field dk = Field::Other;
      if (h.kind == Field::Host) {
        d = host_of_authority(b, h.value.off, h.value.off + h.value.len);
        dk = Field::HostDomain;
      } else if (h.kind == Field::Referer || h.kind == Field::Location) {
        d = url_host(b, h.value);
        dk = h.kind == Field::Referer ? Field::RefererDomain : Field::LocationDomain;
      }
      if (d.len && !occ(dk, mi, hi, d)) return fail(Status::Malformed, Error::Capacity);
    }
    if (cut) {
      msg.has_content_length = false;  // its body, if any, is not in the stream
      r.n_msgs++;
      return Status::Ok;
    }
    if (te) {
      if (!te_chunked && msg.request) return fail(Status::Malformed, Error::TransferEncoding);
      msg.chunked = te_chunked;
      msg.body_unbounded = true;  // chunk framing is not followed here
    } else if (!msg.request && !msg.has_content_length &&
               !(msg.status / 100 == 1 || msg.status == 204 || msg.status == 304)) {
      msg.body_unbounded = true;  // read until close
    }
    if (!msg.request && (msg.status / 100 == 1 || msg.status == 204 || msg.status == 304)) {
      msg.has_content_length = msg.has_content_length && msg.content_length == 0 ? true : msg.has_content_length;
      msg.content_length = 0;
    }
    r.n_msgs++;
    return Status::Ok;
  }

  Status run() {
    uint32_t p = 0;
    while (p < len) {
      // RFC 9112 2.2: ignore empty lines before a request-line (clients add
      // a stray CRLF after a body).
      while (len - p >= 2 && b[p] == '\r' && b[p + 1] == '\n') p += 2;
      if (p >= len) break;
      if (len - p == 1 && b[p] == '\r') break;
      if (r.n_msgs >= Result::kMaxMsgs) {
        // Table full is not an error: report what we have, caller resumes at consumed.
        r.more = true;
        r.status = Status::Ok;
        return Status::Ok;
      }
      uint32_t body;
      if (Status st = head(p, &body); st != Status::Ok) return st;
      if (r.partial_from != UINT32_MAX) break;  // the stream ends in this head
      Message& msg = r.msgs[r.n_msgs - 1];
      if (msg.body_unbounded) {
        r.consumed = body;
        r.status = Status::Ok;
        return Status::Ok;
      }
      const uint64_t cl = msg.has_content_length ? msg.content_length : 0;
      if (cl > len - body) {
        r.consumed = len;
        r.body_missing = cl - (len - body);
        return fail(Status::Truncated, Error::NeedMore);
      }
      p = body + uint32_t(cl);
      r.consumed = p;
    }
    r.consumed = len;
    r.status = Status::Ok;
    return Status::Ok;
  }
};

}  // namespace

Matcher::Matcher() {
  static char exprs[kNumPatterns][48];
  const char* ptrs[kNumPatterns];
  unsigned flags[kNumPatterns], ids[kNumPatterns];
  for (unsigned i = 0; i < kNumPatterns; ++i) {
    std::snprintf(exprs[i], sizeof exprs[i], "\\n%s:", kPatterns[i].name);
    ptrs[i] = exprs[i];
    flags[i] = HS_FLAG_CASELESS;
    ids[i] = i;
  }
  hs_compile_error_t* err = nullptr;
  if (hs_compile_multi(ptrs, flags, ids, kNumPatterns, HS_MODE_BLOCK, nullptr, &db_, &err) != HS_SUCCESS) {
    std::string msg = err ? err->message : "hs_compile_multi failed";
    hs_free_compile_error(err);
    throw std::runtime_error("amon_http: " + msg);
  }
}

Matcher::~Matcher() { hs_free_database(db_); }

Scratch::Scratch(const Matcher& m) {
  if (hs_alloc_scratch(m.db(), &s_) != HS_SUCCESS) throw std::runtime_error("amon_http: hs_alloc_scratch failed");
}

Scratch::~Scratch() { hs_free_scratch(s_); }

Span url_host(const uint8_t* b, Span v) {
  uint32_t p = v.off;
  const uint32_t e = v.off + v.len;
  // scheme ":" "//" authority, or a scheme-relative "//" authority
  uint32_t i = p;
  if (i < e && ((b[i] | 0x20) >= 'a' && (b[i] | 0x20) <= 'z')) {
    while (i < e && (((b[i] | 0x20) >= 'a' && (b[i] | 0x20) <= 'z') || (b[i] >= '0' && b[i] <= '9') ||
                     b[i] == '+' || b[i] == '-' || b[i] == '.'))
      ++i;
    if (i < e && b[i] == ':') p = i + 1;
    else return {};
  }
  if (e - p < 2 || b[p] != '/' || b[p + 1] != '/') return {};
  p += 2;
  uint32_t a = p;
  while (a < e && b[a] != '/' && b[a] != '?' && b[a] != '#') ++a;
  return host_of_authority(b, p, a);
}

Status parse(const uint8_t* buf, size_t len, Direction dir, const Matcher& m, Scratch& s, Result& out, bool ends) {
  out.status = Status::Malformed;
  out.partial_from = UINT32_MAX;
  out.error = Error::None;
  out.overflow = false;
  out.consumed = 0;
  out.more = false;
  out.body_missing = 0;
  out.n_msgs = out.n_headers = out.n_occ = 0;
  if (len > 0xffffffffu) len = 0xffffffffu;
  Parser p{buf, uint32_t(len), dir, m, s, out, ends};
  return p.run();
}

}  // namespace amon::http
