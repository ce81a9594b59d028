// SCTP parse of arbitrary bytes (first input byte: the header addresses'
// length, 0, 4 or 16 by its value mod 3, taken from the bytes that follow
// it; bit 7: the capture cut the packet). Checks: no
// crash or out-of-bounds access; every address inside the packet, of its
// family's length; no two overlapping (the runtime rewrites them in any
// order).
#include <cstdlib>

#include "amon_sctp.hpp"

using namespace amon;
using namespace amon::sctp_plugin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 65535) return 0;
  static auto* r = new Parsed();
  const uint8_t alen = data[0] % 3 == 0 ? 0 : data[0] % 3 == 1 ? 4 : 16;
  if (size < 1u + 2u * alen) return 0;
  const uint8_t* src = data + 1;
  const uint8_t* dst = data + 1 + alen;
  const uint8_t* p = data + 1 + 2 * alen;
  const uint32_t n = uint32_t(size - 1 - 2 * alen);
  if (parse(p, n, alen ? src : nullptr, alen ? dst : nullptr, alen, *r, data[0] & 0x80) != Result::Ok) return 0;
  if (!spans_sound(r->addrs, n)) std::abort();
  return 0;
}
