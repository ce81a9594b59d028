// PIM parse of arbitrary bytes. Checks: no crash or out-of-bounds access;
// every address inside the message, of its family's length, no two
// overlapping (the runtime rewrites them in any order); the checksummed
// bytes and a Register's inner header inside the message.
#include <cstdlib>

#include "amon_pim.hpp"

using namespace amon;
using namespace amon::pim_plugin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65535) return 0;
  static auto* r = new Parsed();
  const uint32_t n = uint32_t(size);
  if (parse(data, n, *r) != Result::Ok) return 0;
  if (!spans_sound(r->addrs, n) || r->summed > n || (r->inner && 8 + r->inner > n)) std::abort();
  return 0;
}
