// Mobility Header parse of arbitrary bytes. Checks: no crash or
// out-of-bounds access; every address inside the message, no longer than
// its family's, no two overlapping (the runtime rewrites them in any
// order); every span zeroed inside the message.
#include <cstdlib>

#include "amon_mip6.hpp"

using namespace amon;
using namespace amon::mip6_plugin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65535) return 0;
  static auto* r = new Parsed();
  const uint32_t n = uint32_t(size);
  if (parse(data, n, *r) != Result::Ok) return 0;
  if (r->len > n || !spans_sound(r->addrs, r->len)) std::abort();
  for (unsigned i = 0; i < r->n_zero; ++i)
    if (uint64_t(r->zero[i].off) + r->zero[i].len > r->len) std::abort();
  return 0;
}
