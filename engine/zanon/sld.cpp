#include "sld.h"

#include <libpsl.h>

#include <algorithm>

namespace amon::zanon {

namespace {
// The built-in list is compiled into libpsl; fall back to the system file for
// builds without it (Debian's has it; the fallback keeps other distros honest).
const psl_ctx_t* psl() {
  static const psl_ctx_t* ctx = [] {
    const psl_ctx_t* c = psl_builtin();
    if (!c) c = psl_latest(nullptr);
    return c;
  }();
  return ctx;
}
}  // namespace

std::string_view registrable_domain(std::string_view name, std::span<char> scratch) noexcept {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty() || name.size() > 253 || scratch.size() < name.size() + 1) return {};
  bool all_numeric = true;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c == '\0') return {};
    if (c == '.' && (i == 0 || name[i - 1] == '.')) return {};  // empty label
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != '.' && (c < '0' || c > '9')) all_numeric = false;
    scratch[i] = c;
  }
  // "10.0.0.1" would otherwise yield "0.1" (unknown TLD "1" acts as a suffix).
  if (all_numeric) return {};
  scratch[name.size()] = '\0';
  const psl_ctx_t* ctx = psl();
  if (!ctx) return {};
  const char* r = psl_registrable_domain(ctx, scratch.data());
  if (!r) return {};
  return std::string_view(r, size_t(scratch.data() + name.size() - r));
}

std::string registrable_domain(std::string_view name) {
  char buf[256];
  return std::string(registrable_domain(name, std::span<char>(buf, sizeof buf)));
}

}  // namespace amon::zanon
