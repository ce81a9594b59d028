// DNS parse + TCP split: no crash, no out-of-bounds read, and every reported
// span lies inside the message.
#include <cstdlib>
#include <memory>

#include "amon_dns.hpp"

using namespace amon::dns;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* r = new ParseResult();
  if (parse(data, size, *r) == Status::Ok) {
    for (unsigned i = 0; i < r->n_labels; ++i)
      if (r->labels[i].off + r->labels[i].len > size) std::abort();
    for (unsigned i = 0; i < r->n_names; ++i) {
      if (r->names[i].text_off + r->names[i].text_len > r->text_len) std::abort();
      if (r->names[i].off + r->names[i].wire_len > size) std::abort();
    }
    for (unsigned i = 0; i < r->n_addrs; ++i)
      if (r->addrs[i].off + (r->addrs[i].family == 4 ? 4u : 16u) > size) std::abort();
    if (r->ecs.present && r->ecs.addr_off + r->ecs.addr_len > size) std::abort();
  }
  static TcpSplit t;
  if (split_tcp(data, size, t) != Status::Malformed)
    for (unsigned i = 0; i < t.n; ++i) {
      if (t.msgs[i].off + t.msgs[i].len > size) std::abort();
      parse(data + t.msgs[i].off, t.msgs[i].len, *r);
    }
  return 0;
}
