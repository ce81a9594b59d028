#include "outer_frag.h"

#include <algorithm>
#include <cstring>

#include "checksum.h"
#include "bytes.h"

namespace amon {

OuterFrags::Add OuterFrags::add(rte_mbuf* m, const FragInfo& fi, bool start, uint64_t ts, uint32_t& idx) {
  uint32_t found = UINT32_MAX;
  for (uint32_t a : active_)
    if (same_datagram(dg_[a].key, fi)) {
      found = a;
      break;
    }
  if (found == UINT32_MAX) {
    if (!start) return Add::NotOurs;
    if (active_.size() >= lim_.datagrams || held_ >= lim_.held) {
      ++st_.failed;
      ++st_.limit;
      return Add::NotOurs;
    }
    if (free_.empty()) {
      dg_.emplace_back();
      dg_.back().frags.reserve(8);
      found = uint32_t(dg_.size() - 1);
    } else {
      found = free_.back();
      free_.pop_back();
    }
    active_.push_back(found);
    Datagram& g = dg_[found];
    g.key = fi;
    g.total = g.have = 0;
    g.last = false;
    g.deadline = ts + lim_.timeout_ns;
    next_deadline_ = std::min(next_deadline_, g.deadline);
    g.frags.clear();
  }
  idx = found;
  Datagram& g = dg_[found];
  g.frags.push_back({m, fi, ts});
  ++held_;
  ++st_.fragments;
  // What cannot be made whole: too many pieces, a datagram past 64 KiB
  // (the whole has the first fragment's header and a 16-bit length field;
  // IPv6: the payload length counts the extension headers before the
  // fragment header too), a different link header length (the fragments
  // took different paths: the whole frame's link header would fit none of
  // them); a last fragment that ends elsewhere than another last fragment,
  // data past the last one's end, and bytes given twice that differ.
  const uint32_t max_data = 65535u - (fi.version == 4 ? g.key.data_start - g.key.l3_off : g.key.data_start - 8 - g.key.l3_off - 40);
  if (fi.l3_off != g.key.l3_off || g.frags.size() > lim_.fragments || held_ > lim_.held ||
      uint64_t(fi.off) + fi.len > max_data) {
    ++st_.failed;
    ++st_.limit;
    return Add::Failed;
  }
  bool bad = g.last && (fi.off + fi.len > g.total || (!fi.more && fi.off + fi.len != g.total));
  bool overlaps = false;
  for (size_t i = 0; !bad && i + 1 < g.frags.size(); ++i) {
    const FragInfo& o = g.frags[i].fi;
    if (fi.off < o.off + o.len && o.off < fi.off + fi.len) {
      overlaps = true;
      bad = !agree(g.frags[i], fi, m);
    }
  }
  if (!bad && !fi.more && !g.last) {
    g.last = true;
    g.total = fi.off + fi.len;
    for (const Frag& f : g.frags)
      if (f.fi.off + f.fi.len > g.total) bad = true;
  }
  if (bad) {
    ++st_.failed;
    ++st_.overlap;
    return Add::Failed;
  }
  // Without overlaps the bytes add up; with some, the union is counted.
  g.have = overlaps || g.have == UINT32_MAX ? UINT32_MAX : g.have + fi.len;
  const uint32_t have = g.have == UINT32_MAX && g.last ? covered(g) : g.have;
  if (g.last && have == g.total) {
    ++st_.datagrams;
    return Add::Whole;
  }
  return Add::Held;
}

uint32_t OuterFrags::covered(const Datagram& g) {
  // At most lim_.fragments pieces, and only for datagrams with bytes given twice.
  auto& r = spans_;
  r.clear();
  for (const Frag& f : g.frags) r.emplace_back(f.fi.off, f.fi.off + f.fi.len);
  std::sort(r.begin(), r.end());
  uint32_t n = 0, end = 0;
  for (const auto& [a, b] : r) {
    if (b <= end) continue;
    n += b - std::max(a, end);
    end = b;
  }
  return n;
}

bool OuterFrags::agree(const Frag& a, const FragInfo& b, const rte_mbuf* bm) {
  const uint32_t lo = std::max(a.fi.off, b.off), hi = std::min(a.fi.off + a.fi.len, b.off + b.len);
  const uint8_t* pa = rte_pktmbuf_mtod(a.m, const uint8_t*) + a.fi.data_start + (lo - a.fi.off);
  const uint8_t* pb = rte_pktmbuf_mtod(bm, const uint8_t*) + b.data_start + (lo - b.off);
  return !std::memcmp(pa, pb, hi - lo);
}

void OuterFrags::release(uint32_t idx) {
  Datagram& g = dg_[idx];
  held_ -= uint32_t(g.frags.size());
  g.frags.clear();
  for (size_t i = 0; i < active_.size(); ++i)
    if (active_[i] == idx) {
      active_[i] = active_.back();
      active_.pop_back();
      break;
    }
  free_.push_back(idx);
  uint64_t next = UINT64_MAX;
  for (uint32_t a : active_) next = std::min(next, dg_[a].deadline);
  next_deadline_ = next;
}

void OuterFrags::expired(uint64_t now_ns, std::vector<uint32_t>& out) const {
  out.clear();
  for (uint32_t a : active_)
    if (dg_[a].deadline < now_ns || now_ns == UINT64_MAX) out.push_back(a);
}

uint32_t OuterFrags::build(const Datagram& g, std::vector<uint8_t>& out) {
  const Frag* first = nullptr;
  for (const Frag& f : g.frags)
    if (f.fi.off == 0) first = &f;
  const uint8_t* p = rte_pktmbuf_mtod(first->m, const uint8_t*);
  const FragInfo& fi = first->fi;
  const uint32_t hlen = whole_header_len(fi);
  out.resize(hlen + g.total + 64);  // slack: Hyperscan may read past what it scans
  whole_header(p, fi, g.total, out.data());
  for (const Frag& f : g.frags)
    std::memcpy(out.data() + hlen + f.fi.off, rte_pktmbuf_mtod(f.m, const uint8_t*) + f.fi.data_start, f.fi.len);
  return hlen;
}

bool OuterFrags::refragment(const Datagram& g, const Frag& f, const uint8_t* w, uint32_t hlen, uint32_t dlen,
                            std::vector<uint8_t>& out) {
  if (f.fi.off >= dlen) return false;
  const uint32_t len = std::min(f.fi.len, dlen - f.fi.off);
  const bool shortened = len < f.fi.len || (dlen < g.total && f.fi.off + len == dlen);  // now the datagram's last
  const uint8_t* p = rte_pktmbuf_mtod(f.m, const uint8_t*);
  const uint32_t cap = f.m->pkt_len;
  const uint32_t o = f.fi.l3_off, ds = f.fi.data_start;
  // Padding after a datagram that kept its length stays (the frame's
  // length on the link); a shortened one ends at its data.
  const uint32_t tail = len == f.fi.len && cap > f.fi.ip_end ? cap - f.fi.ip_end : 0;
  out.resize(ds + len + tail);
  uint8_t* q = out.data();
  std::memcpy(q, w, o);                             // the rewritten link header
  std::memcpy(q + o, p + o, ds - o);                // the fragment's own IP header(s)
  std::memcpy(q + ds, w + hlen + f.fi.off, len);    // its range of the rewritten data
  if (tail) std::memcpy(q + ds + len, p + f.fi.ip_end, tail);
  uint8_t* ip = q + o;
  const uint8_t* wip = w + o;
  if (g.key.version == 4) {
    const uint32_t ihl = ds - o;
    if (ihl == hlen - o) {
      // The same header as the whole's (the usual case, no options that only
      // the first fragment carries): every field the rewrite may have
      // changed, but the fragment's own lengths and fragment fields.
      std::memcpy(ip, wip, 2);
      std::memcpy(ip + 8, wip + 8, 2);
      std::memcpy(ip + 12, wip + 12, ihl - 12);
    } else {
      std::memcpy(ip + 12, wip + 12, 8);
    }
    wr16(ip + 2, uint16_t(ihl + len));
    if (shortened) wr16(ip + 6, uint16_t(rd16(ip + 6) & ~0x2000));
    wr16(ip + 10, 0);
    wr16(ip + 10, ipv4_header_checksum({ip, ihl}));
  } else {
    std::memcpy(ip, wip, 4);             // version, class, flow label
    std::memcpy(ip + 7, wip + 7, 33);    // hop limit, addresses
    // The extension headers before the fragment header (a routing header's
    // addresses), when they are the whole's; the header that named the
    // fragment header names it again.
    if (ds - 8 == hlen && ds - 8 > o + 40) {
      std::memcpy(ip + 40, wip + 40, hlen - o - 40);
      q[f.fi.nh_at] = 44;
    }
    wr16(ip + 4, uint16_t(ds - o - 40 + len));
    if (shortened) q[ds - 8 + 3] &= uint8_t(~1u);  // the fragment header's M flag
  }
  return true;
}

}  // namespace amon
