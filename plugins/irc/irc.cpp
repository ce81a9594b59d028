// The IRC line reader: CTCP DCC requests and the addresses they name.
#include <cstring>
#include <string_view>

#include "addr_forms.h"
#include "amon_irc.hpp"

namespace amon::irc {

namespace {

uint8_t upper(uint8_t c) { return c >= 'a' && c <= 'z' ? uint8_t(c - 32) : c; }

bool same_word(const uint8_t* p, uint32_t len, std::string_view w) {
  if (len != w.size()) return false;
  for (uint32_t i = 0; i < len; ++i)
    if (upper(p[i]) != uint8_t(w[i])) return false;
  return true;
}

bool all_digits(const uint8_t* p, uint32_t len) {
  if (len == 0) return false;
  for (uint32_t i = 0; i < len; ++i)
    if (p[i] < '0' || p[i] > '9') return false;
  return true;
}

bool port_token(const uint8_t* p, uint32_t len) {
  if (!all_digits(p, len) || len > 5) return false;
  uint32_t v = 0;
  for (uint32_t i = 0; i < len; ++i) v = v * 10 + (p[i] - '0');
  return v <= 65535;
}

struct Token {
  uint32_t off, len;
};

// A DCC request's arguments, p[from, to): space-separated words, a quoted
// file name ("my file.txt") one word with its quotes. False when a quote
// is left open.
bool tokens(const uint8_t* p, uint32_t from, uint32_t to, Token* t, unsigned max, unsigned& n) {
  n = 0;
  uint32_t i = from;
  while (i < to) {
    while (i < to && p[i] == ' ') ++i;
    if (i == to) break;
    const uint32_t s = i;
    if (p[i] == '"') {
      const void* q = std::memchr(p + i + 1, '"', to - i - 1);
      if (!q) return false;
      i = uint32_t(static_cast<const uint8_t*>(q) - p) + 1;
    }
    while (i < to && p[i] != ' ') ++i;
    if (n < max) t[n++] = {s, i - s};
  }
  return true;
}

// The request `DCC <args>` in p[from, to) (from: the first byte after
// "DCC"). Its address, when it names one, goes into `out`.
bool dcc(const uint8_t* p, uint32_t from, uint32_t to, Parsed& out) {
  Token t[6];
  unsigned n = 0;
  if (!tokens(p, from, to, t, 6, n) || n == 0) return false;
  const uint8_t* type = p + t[0].off;
  // No address: the receiver asks to resume at a position, the sender
  // agrees (`<file> <port> <position>`).
  if (same_word(type, t[0].len, "RESUME") || same_word(type, t[0].len, "ACCEPT"))
    return n >= 4 && port_token(p + t[2].off, t[2].len) && all_digits(p + t[3].off, t[3].len);
  // Every other request (SEND, CHAT, XMIT, SSEND, SCHAT, TSEND, ... and
  // types not known here, read the same way or refused): `<argument>
  // <address> <port> ...`.
  if (n < 4 || !port_token(p + t[3].off, t[3].len)) return false;
  const Token& a = t[2];
  const uint8_t* ap = p + a.off;
  uint8_t bytes[16];
  Addr x{a.off, a.len, 4, AddrForm::Decimal};
  if (all_digits(ap, a.len)) {
    if (!read_decimal_addr(ap, a.len, bytes)) return false;
  } else if (std::memchr(ap, ':', a.len)) {
    if (a.len > 39 || !read_ipv6_text(ap, a.len, bytes)) return false;
    x.family = 6, x.form = AddrForm::Text;
  } else {
    if (!read_dotted_addr(ap, a.len, bytes)) return false;
    x.form = AddrForm::Text;
  }
  // 0.0.0.0/8 (a passive request's placeholder, "0" or a small number) and
  // the unspecified IPv6 address name no host.
  bool none = x.family == 4 ? bytes[0] == 0 : true;
  if (x.family == 6)
    for (int i = 0; i < 16; ++i) none = none && bytes[i] == 0;
  if (none) return true;
  if (out.n == Parsed::kMax) return false;
  out.addr[out.n++] = x;
  return true;
}

// Whether the CTCP body p[from, to), cut by the segment's end, may still
// become a DCC request: "DCC" or a beginning of it, in any case.
bool may_be_dcc(const uint8_t* p, uint32_t from, uint32_t to) {
  static const char kDcc[] = "DCC ";
  for (uint32_t i = from; i < to; ++i)
    if (i - from >= 4 || upper(p[i]) != uint8_t(kDcc[i - from])) return i - from >= 4;
  return true;
}

enum class Line : uint8_t { Ok, Open, Bad };

// The CTCP messages of the line p[s, e) (`whole`: its line end follows).
// A CTCP message runs from \x01 to the next \x01 or the line's end.
Line line(const uint8_t* p, uint32_t s, uint32_t e, bool whole, Parsed& out) {
  uint32_t j = s;
  while (j < e) {
    const void* x = std::memchr(p + j, 0x01, e - j);
    if (!x) break;
    const uint32_t start = uint32_t(static_cast<const uint8_t*>(x) - p), body = start + 1;
    const void* c = std::memchr(p + body, 0x01, e - body);
    const uint32_t end = c ? uint32_t(static_cast<const uint8_t*>(c) - p) : e;
    const bool open = !c && !whole;
    const bool is_dcc = end - body >= 3 && same_word(p + body, 3, "DCC") && (end - body == 3 || p[body + 3] == ' ');
    if (open && (is_dcc || may_be_dcc(p, body, end))) {
      if (end - body > kMaxDcc) return Line::Bad;
      out.open_dcc = start;
      return Line::Open;
    }
    if (is_dcc && (end - body > kMaxDcc || !dcc(p, body + 3, end, out))) return Line::Bad;
    j = c ? end + 1 : e;
  }
  return Line::Ok;
}

}  // namespace

Result parse(const uint8_t* p, uint32_t len, Parsed& out) {
  out.n = 0, out.lines = 0, out.cut_line = out.open_dcc = 0;
  uint32_t i = 0;
  while (i < len) {
    const uint32_t s = i;
    uint32_t e = s;
    while (e < len && p[e] != '\r' && p[e] != '\n') {
      if (p[e] == 0) return Result::Malformed;  // no IRC line holds a NUL
      ++e;
    }
    if (e - s > kMaxLine) return Result::Malformed;
    const bool whole = e < len;
    switch (line(p, s, e, whole, out)) {
      case Line::Bad: return Result::Malformed;
      case Line::Open: out.cut_line = s; return Result::Incomplete;
      case Line::Ok: break;
    }
    if (!whole) break;
    if (e > s) ++out.lines;
    i = e + 1;
  }
  return Result::Ok;
}

namespace {

// Commands of RFC 2812 and IRCv3 a client or a server sends, and the
// extensions common servers take (WATCH, SILENCE, KNOCK, CPRIVMSG...).
constexpr std::string_view kCommands[] = {
    "ACCOUNT", "ADMIN",    "AUTHENTICATE", "AWAY",   "BATCH",    "CAP",      "CHATHISTORY", "CHGHOST",  "CNOTICE",
    "CONNECT", "CPRIVMSG", "DIE",          "ERROR",  "FAIL",     "HELP",     "HELPOP",      "INFO",     "INVITE",
    "ISON",    "JOIN",     "KICK",         "KILL",   "KNOCK",    "LINKS",    "LIST",        "LUSERS",   "MAP",
    "MARKREAD", "MODE",    "MONITOR",      "MOTD",   "NAMES",    "NICK",     "NOTE",        "NOTICE",   "OPER",
    "PART",    "PASS",     "PING",         "PONG",   "PRIVMSG",  "PROTOCTL", "QUIT",        "REHASH",   "RESTART",
    "RULES",   "SERVICE",  "SERVLIST",     "SETNAME", "SILENCE", "SQUERY",   "SQUIT",       "STATS",    "SUMMON",
    "TAGMSG",  "TIME",     "TOPIC",        "TRACE",  "USER",     "USERHOST", "USERS",       "VERSION",  "WALLOPS",
    "WARN",    "WATCH",    "WHO",          "WHOIS",  "WHOWAS",
};

bool command_at(const uint8_t* p, uint32_t len) {
  uint32_t w = 0;
  while (w < len && ((p[w] >= 'A' && p[w] <= 'Z') || (p[w] >= '0' && p[w] <= '9'))) ++w;
  if (w == 0 || w >= len || (p[w] != ' ' && p[w] != '\r' && p[w] != '\n')) return false;
  if (w == 3 && all_digits(p, 3)) return true;
  const std::string_view word(reinterpret_cast<const char*>(p), w);
  for (std::string_view c : kCommands)
    if (c == word) return true;
  return false;
}

}  // namespace

bool line_start(const uint8_t* p, uint32_t len) {
  uint32_t i = 0;
  auto word_then_space = [&] {
    const uint32_t s = i;
    while (i < len && p[i] > ' ' && p[i] != 0x7f && p[i] != 0x01) ++i;
    if (i == s || i >= len || p[i] != ' ') return false;
    while (i < len && p[i] == ' ') ++i;
    return true;
  };
  if (i < len && p[i] == '@' && (++i, !word_then_space())) return false;
  if (i < len && p[i] == ':' && (++i, !word_then_space())) return false;
  return command_at(p + i, len - i);
}

}  // namespace amon::irc
