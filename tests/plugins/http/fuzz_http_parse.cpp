// HTTP head parse: no crash/over-read; spans inside the buffer; consumed
// never beyond the input.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "amon_http.hpp"

using namespace amon::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Matcher* m = new Matcher();
  static Scratch* s = new Scratch(*m);
  static Result* r = new Result();
  const Direction d = size && (data[0] & 1) ? Direction::Auto : Direction::Request;
  // Hyperscan 5.4's AVX-512VBMI literal matcher may read up to 64 bytes past
  // the buffer (VectorCamp/vectorscan#322): callers keep readable slack after
  // what they scan, as the engine's buffers do. libFuzzer's copy ends at its
  // allocation, so the input goes into a buffer with that slack.
  std::vector<uint8_t> buf(size + 64);
  if (size) std::memcpy(buf.data(), data, size);
  parse(buf.data(), size, d, *m, *s, *r);
  if (r->consumed > size) std::abort();
  for (unsigned i = 0; i < r->n_occ; ++i)
    if (uint64_t(r->occ[i].span.off) + r->occ[i].span.len > size) std::abort();
  for (unsigned i = 0; i < r->n_headers; ++i)
    if (uint64_t(r->headers[i].value.off) + r->headers[i].value.len > size) std::abort();
  return 0;
}
