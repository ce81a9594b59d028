#include <cstring>

#include "checksum.h"
#include "l2l4.h"
#include "bytes.h"

namespace amon {

namespace {
}  // namespace

bool same_datagram(const FragInfo& a, const FragInfo& b) {
  const size_t alen = a.version == 4 ? 4 : 16;
  return a.version == b.version && a.proto == b.proto && a.id == b.id && !std::memcmp(a.src, b.src, alen) &&
         !std::memcmp(a.dst, b.dst, alen);
}
bool outer_frag_info(const uint8_t* p, const Decoded& d, FragInfo& fi) {
  if (!(d.flags & kFlagFragment) || d.status != DecodeStatus::Ok || d.n_encap || d.pppoe_off) return false;
  const uint32_t o = d.l3_off;
  // Every byte of the datagram captured: a fragment cut by the snap length
  // cannot give its data to the whole.
  if (d.cap_len != d.wire_len || o + d.l3_len > d.cap_len) return false;
  fi.version = d.ip_version;
  fi.l3_off = o;
  if (d.ip_version == 4) {
    const uint32_t ihl = d.l3_hdr_len;
    if (ihl < 20 || d.l3_len < ihl) return false;
    const uint16_t frag = rd16(p + o + 6);
    fi.proto = p[o + 9];
    fi.id = rd16(p + o + 4);
    fi.more = frag & 0x2000;
    fi.off = uint32_t(frag & 0x1fff) * 8;
    std::memcpy(fi.src, p + o + 12, 4);
    std::memcpy(fi.dst, p + o + 16, 4);
    fi.data_start = o + ihl;
  } else if (d.ip_version == 6) {
    // The fragment header follows the unfragmentable part (RFC 8200 4.5):
    // the fixed header and any hop-by-hop, routing and destination options
    // headers, which every fragment repeats. The decoder walked the same
    // chain (ipv6_frag_hdr_off); anything else before it (AH, another
    // fragment header) keeps the per-fragment path.
    const uint32_t end = o + d.l3_len;
    uint32_t fh = o + 40, nh_at = o + 6;
    for (int i = 0; p[nh_at] != 44; ++i) {
      const uint8_t nh = p[nh_at];
      if (i == 8 || (nh != 0 && nh != 43 && nh != 60) || fh + 8 > end) return false;
      nh_at = fh;
      fh += (p[fh + 1] + 1u) * 8u;
    }
    if (d.ipv6_frag_hdr_off != fh || fh + 8 > end) return false;
    fi.nh_at = nh_at;
    fi.proto = p[fh];
    const uint16_t fo = rd16(p + fh + 2);
    fi.more = fo & 1;
    fi.off = fo & 0xfff8;
    fi.id = uint32_t(rd16(p + fh + 4)) << 16 | rd16(p + fh + 6);
    std::memcpy(fi.src, p + o + 8, 16);
    std::memcpy(fi.dst, p + o + 24, 16);
    fi.data_start = fh + 8;
  } else {
    return false;
  }
  fi.ip_end = o + d.l3_len;
  if (fi.ip_end < fi.data_start) return false;
  fi.len = fi.ip_end - fi.data_start;
  // All but the last carry a multiple of 8 bytes; an empty one adds nothing.
  if (fi.len == 0 || (fi.more && fi.len % 8)) return false;
  return true;
}

uint32_t whole_header_len(const FragInfo& first) {
  // IPv6: without the fragment header, whose next header the fixed one names.
  return first.version == 4 ? first.data_start : first.data_start - 8;
}

void whole_header(const uint8_t* first_frame, const FragInfo& first, uint32_t total, uint8_t* out) {
  const uint32_t hlen = whole_header_len(first), o = first.l3_off;
  std::memcpy(out, first_frame, hlen);
  uint8_t* ip = out + o;
  if (first.version == 4) {
    wr16(ip + 2, uint16_t(hlen - o + total));
    wr16(ip + 6, uint16_t(rd16(ip + 6) & 0x4000));  // don't-fragment stays
    wr16(ip + 10, 0);
    wr16(ip + 10, ipv4_header_checksum({ip, hlen - o}));
  } else {
    out[first.nh_at] = first.proto;
    wr16(ip + 4, uint16_t(hlen - o - 40 + total));
  }
}

}  // namespace amon
