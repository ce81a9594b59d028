// The NetBIOS datagram parser: no crash, no out-of-bounds read; every name
// and user-data value lies inside the payload, past the header's names,
// and no two overlap (each is rewritten on its own).
#include <cstdlib>

#include "amon_netbios.hpp"

using namespace amon::netbios_plugin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Datagram g;
  if (!parse_datagram(data, uint32_t(size), g)) return 0;
  if (g.n_names > 2 || g.n_values > Datagram::kMaxValues) std::abort();
  uint32_t end = g.n_names ? 0 : 10;
  for (uint32_t k = 0; k < g.n_names; ++k) {
    if (g.name_off[k] < end || g.name_off[k] + kEncodedLen > size) std::abort();
    end = g.name_off[k] + kEncodedLen;
  }
  // An error datagram (no names) has no user data.
  if (g.n_names ? g.data_off < end || g.data_off + g.data_len != size : g.data_len || g.n_values) std::abort();
  end = g.data_off;
  for (uint32_t k = 0; k < g.n_values; ++k) {
    const Datagram::Value& v = g.values[k];
    if (!v.len || v.off < end || v.off + v.len > size) std::abort();
    end = v.off + v.len;
  }
  return 0;
}
