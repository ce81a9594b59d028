// parse -> rewrite (decision varies per name) -> re-parse must succeed with
// the same names, label spans and lengths; ECS helpers keep it parseable.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "amon_dns.hpp"

using namespace amon;
using namespace amon::dns;

// As NBNS: the labels rewritten and every NBSTAT node name's characters
// too (as the plugin applies a name decision to them), the message parses
// again with the same names, node names and unit IDs at the same places.
static void nbns(const uint8_t* data, size_t size, ParseResult& r, ParseResult& r2) {
  if (parse(data, size, r, true) != Status::Ok) return;
  std::vector<uint8_t> w(data, data + size);
  rewrite_names(w.data(), w.size(), r, [](const NameView& v) { return names::Decision::mask(v.index + 7u); });
  for (unsigned i = 0; i < r.n_nb_names; ++i) {
    unsigned n = 15;
    while (n && w[r.nb_name[i] + n - 1] == ' ') --n;
    names::apply_to_text(reinterpret_cast<char*>(w.data() + r.nb_name[i]), n, names::Decision::mask(i + 1u));
  }
  if (parse(w.data(), w.size(), r2, true) != Status::Ok) std::abort();
  if (r2.n_names != r.n_names || r2.n_nb_names != r.n_nb_names || r2.n_nb_units != r.n_nb_units ||
      r2.n_addrs != r.n_addrs)
    std::abort();
  for (unsigned i = 0; i < r.n_nb_names; ++i)
    if (r2.nb_name[i] != r.nb_name[i]) std::abort();
  for (unsigned i = 0; i < r.n_nb_units; ++i)
    if (r2.nb_unit[i] != r.nb_unit[i]) std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* r = new ParseResult();
  static auto* r2 = new ParseResult();
  nbns(data, size, *r, *r2);
  if (parse(data, size, *r) != Status::Ok) return 0;
  std::vector<uint8_t> w(data, data + size);
  const uint8_t sel = size ? data[size - 1] : 0;
  auto decide = [sel](const NameView& v) {
    switch ((v.index + sel) % 4) {
      case 0: return names::Decision::keep();
      case 1: return names::Decision::mask(v.index * 31u + sel);
      case 2: return names::Decision::mask_left_of(uint8_t(sel % 3), 99);
      default: return names::Decision::redact();
    }
  };
  rewrite_names(w.data(), w.size(), *r, decide);
  // The first name's masks kept and taken from FirstNameMasks (the second
  // rewrite finds what the first stored) give the same bytes.
  static auto* first = new FirstNameMasks();
  using D = decltype(decide);
  const DecideFn fn = [](void* c, const NameView& v) { return (*static_cast<D*>(c))(v); };
  for (int pass = 0; pass < 2; ++pass) {
    first->reuse = pass == 1;
    std::vector<uint8_t> f(data, data + size);
    rewrite_names(f.data(), f.size(), *r, fn, &decide, nullptr, ~0u, first);
    if (f != w) std::abort();
  }
  if (parse(w.data(), w.size(), *r2) != Status::Ok) std::abort();
  if (r2->n_names != r->n_names || r2->n_labels != r->n_labels || r2->n_rrs != r->n_rrs) std::abort();
  for (unsigned i = 0; i < r->n_names; ++i) {
    if (r2->names[i].off != r->names[i].off || r2->names[i].n_labels != r->names[i].n_labels ||
        r2->names[i].role != r->names[i].role)
      std::abort();
    for (unsigned k = 0; k < r->names[i].n_labels; ++k)
      if (r2->name_label(i, k).off != r->name_label(i, k).off || r2->name_label(i, k).len != r->name_label(i, k).len)
        std::abort();
  }
  if (r->ecs.present) {
    std::vector<uint8_t> z = w;
    if (!ecs_zero(z.data(), z.size(), *r2) || parse(z.data(), z.size(), *r2) != Status::Ok) std::abort();
    parse(w.data(), w.size(), *r2);
    const size_t n = ecs_strip(w.data(), w.size(), *r2);
    if (n && parse(w.data(), n, *r2) != Status::Ok) std::abort();
  }
  return 0;
}
