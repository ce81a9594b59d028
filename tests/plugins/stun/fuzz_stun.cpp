// STUN parse of arbitrary bytes, as a datagram and as a TCP segment (first
// input byte: bit 0 stream, bit 1 classic allowed). Checks: no crash or
// out-of-bounds access; every span inside the payload; an XOR key (cookie
// and transaction ID) inside its message's header and never overlapping
// the value it decodes; no two values overlapping (the runtime rewrites
// them in any order); a FINGERPRINT inside the payload.
#include <cstdlib>

#include "amon_stun.hpp"

using namespace amon;
using namespace amon::stun_plugin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 65535) return 0;
  static auto* r = new Parsed();
  const uint8_t* p = data + 1;
  const uint32_t n = uint32_t(size - 1);
  const Result s = parse(p, n, data[0] & 1, data[0] & 2, *r);
  if (s != Result::Ok) return 0;
  struct S { uint32_t off, len; };
  S all[2 * Parsed::kMax];
  unsigned k = 0;
  for (unsigned i = 0; i < r->n_addr; ++i) {
    const Parsed::Addr& a = r->addr[i];
    if (a.at.len != 4 && a.at.len != 16) std::abort();
    if (uint64_t(a.at.off) + a.at.len > n) std::abort();
    if (a.coded && (a.key + 16 > a.at.off || p[a.key] != 0x21 || p[a.key + 1] != 0x12)) std::abort();
    all[k++] = {a.at.off, a.at.len};
  }
  for (unsigned i = 0; i < r->n_user; ++i) {
    if (uint64_t(r->user[i].off) + r->user[i].len > n) std::abort();
    all[k++] = {r->user[i].off, r->user[i].len};
  }
  for (unsigned i = 0; i < k; ++i)
    for (unsigned j = i + 1; j < k; ++j)
      if (all[i].off < all[j].off + all[j].len && all[j].off < all[i].off + all[i].len) std::abort();
  for (unsigned i = 0; i < r->n_finger; ++i)
    if (r->finger[i].msg >= r->finger[i].attr || uint64_t(r->finger[i].attr) + 8 > n) std::abort();
  return 0;
}
