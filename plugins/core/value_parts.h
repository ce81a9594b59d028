// The parts of a protected value that travel alone: a cookie's, a query
// string's or credentials' `name=value` items, whose values a page, a log or
// another header may repeat without the rest. The engine searches its kept
// payload for them (echo.h) and `amon audit` for the same parts, so the two
// agree on what counts as a copy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

namespace amon {

// The shortest part searched for (shorter ones occur by chance: with 8,
// a Set-Cookie's expiry time "00:00:00" and a user agent's "http/1.1" were
// found in Date headers and TLS ALPN lists), the shortest value of a named
// item (after `name=`: an identifier such as a 9-digit visitor id, never
// a date's or a version's words), and the longest (a longer one by its
// first bytes).
inline constexpr uint32_t kValuePartMin = 10, kValuePartNamedMin = 8, kValuePartMax = 512;

// A Set-Cookie attribute's name (RFC 6265 and its successors): its value
// (the site's domain, a path, a date) names no one, and a Host header or a
// link repeats it everywhere.
inline bool cookie_attribute(std::string_view name) {
  constexpr std::string_view kAttrs[] = {"domain", "path", "expires", "max-age", "samesite", "priority"};
  for (std::string_view a : kAttrs)
    if (name.size() == a.size() &&
        std::equal(a.begin(), a.end(), name.begin(), [](char x, char y) { return x == (y | 0x20); }))
      return true;
  return false;
}

// Calls f(offset, length) for each part of v (but a cookie attribute's): between separators (; & ,
// blanks and line ends), the bytes after the first '=' of an item (of
// kValuePartNamedMin bytes or more) or the whole item (kValuePartMin or
// more), shorter than v, cut to kValuePartMax.
template <class F>
void value_parts(std::string_view v, F&& f) {
  auto sep = [](char c) { return c == ';' || c == '&' || c == ',' || c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  const uint32_t len = uint32_t(v.size());
  for (uint32_t i = 0; i < len;) {
    while (i < len && sep(v[i])) ++i;
    uint32_t j = i;
    while (j < len && !sep(v[j])) ++j;
    uint32_t s = i, min = kValuePartMin;
    bool attr = false;
    if (const size_t eq = v.substr(i, j - i).find('='); eq != std::string_view::npos) {
      s = i + uint32_t(eq) + 1;
      attr = cookie_attribute(v.substr(i, eq));
      min = kValuePartNamedMin;
    }
    if (!attr && j - s >= min && j - s < len) f(s, std::min(j - s, kValuePartMax));
    i = j;
  }
}

}  // namespace amon
