// OSPF parse of arbitrary bytes. Checks: no crash or out-of-bounds access;
// every address inside the packet, no longer than its family's, no two
// overlapping (the runtime rewrites them in any order); every LSA whose
// checksum the plugin computes again inside the packet.
#include <cstdlib>

#include "amon_ospf.hpp"
#include "bytes.h"

using namespace amon;
using namespace amon::ospf_plugin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65535) return 0;
  static auto* r = new Parsed();
  const uint32_t n = uint32_t(size);
  if (parse(data, n, *r) != Result::Ok) return 0;
  if (r->len > n || !spans_sound(r->addrs, r->len)) std::abort();
  for (unsigned i = 0; i < r->n_lsa; ++i)
    if (uint64_t(r->lsa[i]) + 20 > r->len || r->lsa[i] + rd16(data + r->lsa[i] + 18) > r->len) std::abort();
  return 0;
}
