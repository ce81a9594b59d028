// BGP parse of arbitrary bytes, the first taken as the direction's ADD-PATH
// modes. Checks: no crash or out-of-bounds access; every address inside the
// payload (before the cut message, if any), no longer than its family's,
// no two overlapping (the runtime rewrites them in any order); a prefix's
// span as long as its length byte, just before it, says.
#include <cstdlib>

#include "amon_bgp.hpp"

using namespace amon;
using namespace amon::bgp_plugin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 65536) return 0;
  static auto* r = new Parsed();
  uint8_t modes = data[0];
  const uint8_t* p = data + 1;
  const uint32_t n = uint32_t(size - 1);
  const Result res = parse(p, n, modes, *r);
  if (res == Result::Malformed) return 0;
  const uint32_t end = res == Result::Cut ? r->end : n;
  if (end > n || !spans_sound(r->addrs, end)) std::abort();
  for (unsigned i = 0; i < r->addrs.n; ++i) {
    const AddrSpan& a = r->addrs.a[i];
    const unsigned bits = r->bits[i];
    if (bits && (a.off == 0 || p[a.off - 1] != bits || (bits + 7) / 8 != a.len)) std::abort();
  }
  return 0;
}
