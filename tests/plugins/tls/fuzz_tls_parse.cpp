// ClientHello parse: no crash/over-read; spans inside the buffer; SNI
// rewrite keeps the hello parseable with the same structure.
#include <cstdlib>
#include <vector>

#include "amon_tls.hpp"

using namespace amon;
using namespace amon::tls;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* c = new ClientHello();
  static auto* c2 = new ClientHello();
  const Status s = parse_client_hello(data, size, *c);
  if (s == Status::Truncated && c->need <= size) std::abort();
  if (s != Status::Ok) return 0;
  for (unsigned i = 0; i < c->n_ext; ++i)
    if (c->ext[i].body.off + (c->ext[i].body.contiguous ? c->ext[i].body.len : 0) > size) std::abort();
  std::vector<uint8_t> w(data, data + size);
  for (unsigned i = 0; i < c->n_sni; ++i) {
    if (c->sni[i].span.contiguous && c->sni[i].span.off + c->sni[i].span.len > size) std::abort();
    rewrite_sni(w.data(), w.size(), *c, i, names::Decision::mask(i));
  }
  if (parse_client_hello(w.data(), w.size(), *c2) != Status::Ok || c2->n_sni != c->n_sni || c2->n_ext != c->n_ext)
    std::abort();
  return 0;
}
