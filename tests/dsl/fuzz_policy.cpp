// libFuzzer target: lexer + parser + checker + renderers on arbitrary bytes.
// Any crash, leak, sanitizer report or hang is a bug; diagnostics are fine.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace amon::dsl;
  Diagnostics d;
  CompileOptions o;
  o.check_key_permissions = false;
  // Keys from the environment resolve to a fixed valid key so the checker's
  // later stages (conflicts, warnings, dump) are reached.
  o.getenv = [](const char*) -> const char* {
    return "1522178d33a4cf80130a5b1649907d10d8988f837979652762574c2d2a842202";
  };
  auto p = compile_string(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.amon", d, o);
  // Rendering walks every location against the source: part of the target.
  std::string out = d.render_text();
  out += d.render_json();
  if (p) out += dump(*p);
  return 0;
}
