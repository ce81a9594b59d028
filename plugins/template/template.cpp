// The template protocol's parser: bytes in, spans out, no registry and no
// policy, so it can be tested and fuzzed on its own.
#include <cstring>

#include "amon_template.hpp"

namespace amon::template_plugin {

bool find_host(const uint8_t* p, uint32_t len, Span& host) {
  static constexpr char kVerb[] = "HELLO ";
  constexpr uint32_t n = sizeof kVerb - 1;
  if (len <= n || std::memcmp(p, kVerb, n) != 0) return false;
  uint32_t e = n;
  while (e < len && p[e] != '\r' && p[e] != '\n') ++e;
  // A name's presentation form: at most 253 letters, digits, hyphens and dots.
  if (e - n > 253) return false;
  for (uint32_t i = n; i < e; ++i) {
    const uint8_t c = p[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok) return false;
  }
  host = {n, e - n};
  return true;
}

}  // namespace amon::template_plugin
