#include "mbuf_meta.h"

namespace amon {

MbufMeta g_meta;

bool mbuf_meta_register() {
  if (rte_mbuf_dyn_rx_timestamp_register(&g_meta.ts_off, &g_meta.ts_flag) != 0) return false;
  static const rte_mbuf_dynfield wire = {"amon_wire_len", sizeof(uint32_t), alignof(uint32_t), 0};
  g_meta.wire_off = rte_mbuf_dynfield_register(&wire);
  if (g_meta.wire_off < 0) return false;
  static const rte_mbuf_dynfield link = {"amon_link_hdr", sizeof(LinkHdr), alignof(LinkHdr), 0};
  g_meta.link_off = rte_mbuf_dynfield_register(&link);
  if (g_meta.link_off < 0) return false;
  static const rte_mbuf_dynfield origin = {"amon_origin", sizeof(Origin), alignof(Origin), 0};
  g_meta.origin_off = rte_mbuf_dynfield_register(&origin);
  return g_meta.origin_off >= 0;
}

}  // namespace amon
