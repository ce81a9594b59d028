// DHCP parse, then rewrite every occurrence and parse again. First input
// byte: bit 0 picks DHCPv4 (0) or DHCPv6 (1). Checks: no crash or
// out-of-bounds access, every occurrence and label inside the message, no
// two occurrences overlapping, and a rewrite keeps the message parseable to
// exactly the same occurrences.
#include <array>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "amon_dhcp.hpp"
#include "keyed_hash.h"

using namespace amon;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static auto* r = new dhcp::Result();
  static auto* r2 = new dhcp::Result();
  static auto* h = new KeyedHash(std::array<uint8_t, 16>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  const dhcp::Version v = (data[0] & 1) ? dhcp::Version::V6 : dhcp::Version::V4;
  const uint8_t* m = data + 1;
  const size_t n = size - 1;
  const dhcp::Status s = dhcp::parse(m, n, v, *r);
  for (unsigned i = 0; i < r->n_occ; ++i) {
    const dhcp::Occurrence& o = r->occ[i];
    if (size_t(o.off) + o.len > n || o.tag_len > o.len) std::abort();
    if (o.mac_off && (o.mac_off < o.off || o.mac_off + 6u > o.off + o.len)) std::abort();
    if (o.text_off + o.text_len > r->text_len) std::abort();
    for (unsigned k = 0; k < o.n_labels; ++k) {
      const dhcp::Span& l = r->labels[o.first_label + k];
      if (l.off < o.off || l.off + l.len > o.off + o.len) std::abort();
    }
  }
  // Occurrences never overlap: the runtime may rewrite them in any order.
  for (unsigned i = 0; i < r->n_occ; ++i)
    for (unsigned k = i + 1; k < r->n_occ; ++k)
      if (r->occ[i].off < r->occ[k].off + r->occ[k].len && r->occ[k].off < r->occ[i].off + r->occ[i].len)
        std::abort();
  if (s != dhcp::Status::Ok) return 0;
  std::vector<uint8_t> w(m, m + n);
  for (unsigned i = 0; i < r->n_occ; ++i) {
    const dhcp::Occurrence& o = r->occ[i];
    switch (o.kind) {
      case dhcp::Kind::NameText:
      case dhcp::Kind::NameWire: dhcp::rewrite_name(w.data(), *r, o, names::Decision::mask(7)); break;
      case dhcp::Kind::Bytes:
      case dhcp::Kind::Text: dhcp::hash_identifier(*h, w.data(), o); break;
      case dhcp::Kind::Mac: h->anon_mac(w.data() + o.off, w.data() + o.off); break;
      default:
        for (unsigned k = 0; k < o.len; ++k) w[o.off + k] ^= 0xa5;
        dhcp::fix_prefix(w.data(), o);
    }
  }
  if (dhcp::parse(w.data(), w.size(), v, *r2) != dhcp::Status::Ok || r2->n_occ != r->n_occ) std::abort();
  for (unsigned i = 0; i < r->n_occ; ++i) {
    const dhcp::Occurrence &a = r->occ[i], &b = r2->occ[i];
    if (a.off != b.off || a.len != b.len || a.field != b.field || a.kind != b.kind || a.n_labels != b.n_labels)
      std::abort();
  }
  return 0;
}
