#include "mbuf_meta.h"

namespace amon {

MbufMeta g_meta;

bool mbuf_meta_register() {
  if (rte_mbuf_dyn_rx_timestamp_register(&g_meta.ts_off, &g_meta.ts_flag) != 0) return false;
  static const rte_mbuf_dynfield wire = {"amon_wire_len", sizeof(uint32_t), alignof(uint32_t), 0};
  g_meta.wire_off = rte_mbuf_dynfield_register(&wire);
  return g_meta.wire_off >= 0;
}

}  // namespace amon
