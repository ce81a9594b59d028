// IRC line reading of arbitrary bytes. Checks: no crash or out-of-bounds
// access; every address found lies inside the bytes, reads back in its
// form as an address of its family (what the runtime rewrites), and no two
// overlap; a line start is found only where the bytes hold one.
#include <cstdlib>

#include "addr_forms.h"
#include "amon_irc.hpp"

using namespace amon;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65535) return 0;
  static auto* r = new irc::Parsed();
  const irc::Result res = irc::parse(data, uint32_t(size), *r);
  if (res == irc::Result::Incomplete && (r->open_dcc < r->cut_line || r->open_dcc >= size || data[r->open_dcc] != 0x01))
    std::abort();
  if (res == irc::Result::Malformed) return 0;
  for (unsigned i = 0; i < r->n; ++i) {
    const irc::Addr& a = r->addr[i];
    if (uint64_t(a.off) + a.len > size || a.len == 0 || a.len > 39) std::abort();
    if (a.form != AddrForm::Decimal && a.form != AddrForm::Text) std::abort();
    uint8_t b[16];
    if (!read_addr_form(data + a.off, a.len, a.form, a.family, b)) std::abort();
    if (i && a.off < r->addr[i - 1].off + r->addr[i - 1].len) std::abort();
  }
  if (irc::line_start(data, uint32_t(size)) && size < 2) std::abort();
  return 0;
}
