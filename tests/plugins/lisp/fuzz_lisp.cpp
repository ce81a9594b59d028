// LISP control parse of arbitrary bytes. Checks: no crash or out-of-bounds
// access; every address inside the payload, of its family's length, no two
// overlapping (the runtime rewrites them in any order).
#include <cstdlib>

#include "amon_lisp.hpp"

using namespace amon;
using namespace amon::lisp_plugin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65535) return 0;
  static auto* r = new Parsed();
  if (parse(data, uint32_t(size), *r) != Result::Ok) return 0;
  if (!spans_sound(r->addrs, uint32_t(size))) std::abort();
  return 0;
}
