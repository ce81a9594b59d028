// DNS parse (as DNS and as NBNS) + TCP split: no crash, no out-of-bounds
// read, and every reported span lies inside the message.
#include <cstdlib>
#include <memory>

#include "amon_dns.hpp"

using namespace amon::dns;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* r = new ParseResult();
  // As NBNS too: NBSTAT node names (16 bytes) and unit IDs (6) inside the
  // message, none overlapping a label (its rewrite would corrupt the name).
  if (parse(data, size, *r, true) == Status::Ok) {
    for (unsigned i = 0; i < r->n_addrs; ++i)
      if (r->addrs[i].off + (r->addrs[i].family == 4 ? 4u : 16u) > size) std::abort();
    for (unsigned i = 0; i < r->n_nb_names; ++i)
      if (r->nb_name[i] + 16u > size) std::abort();
    for (unsigned i = 0; i < r->n_nb_units; ++i)
      if (r->nb_unit[i] + 6u > size) std::abort();
    for (unsigned k = 0; k < r->n_labels; ++k)
      for (unsigned i = 0; i < r->n_nb_names; ++i)
        if (r->labels[k].off < r->nb_name[i] + 16u && r->nb_name[i] < r->labels[k].off + r->labels[k].len) std::abort();
  }
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
