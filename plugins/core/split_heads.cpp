#include "split_heads.h"

#include <algorithm>
#include <cstring>

namespace amon {

std::string SplitHeads::key(const uint8_t* src, const uint8_t* dst, unsigned addr_len, uint16_t sport,
                            uint16_t dport) {
  std::string k;
  k.reserve(2 * addr_len + 4);
  k.append(reinterpret_cast<const char*>(src), addr_len);
  k.append(reinterpret_cast<const char*>(dst), addr_len);
  k += char(sport >> 8), k += char(sport), k += char(dport >> 8), k += char(dport);
  return k;
}

SplitHeads::Head* SplitHeads::start(const std::string& k, uint32_t seq, const uint8_t* p, uint32_t len, uint64_t ts) {
  if (!len || len > lim_.bytes || heads_.count(k) || heads_.size() >= lim_.heads) {
    ++st_.refused;
    return nullptr;
  }
  Head& h = heads_[k];
  h.base = seq;
  h.bytes.assign(p, p + len);
  h.bytes.resize(size_t(len) + kSlack);
  h.contiguous = len;
  h.segs.assign(1, {0u, len});
  h.last_ts = ts;
  ++st_.held;
  return &h;
}

SplitHeads::Add SplitHeads::add(Head& h, uint32_t seq, const uint8_t* p, uint32_t len, uint64_t ts) {
  h.last_ts = std::max(h.last_ts, ts);
  if (!len) return Add::Waiting;
  const int64_t off = int32_t(seq - h.base);
  if (off < 0 || off + len > lim_.bytes || h.segs.size() >= lim_.segments) {
    ++st_.outside;
    return Add::Outside;
  }
  const uint32_t at = uint32_t(off);
  if (at > h.contiguous) ++st_.out_of_order;
  if (h.bytes.size() < size_t(at) + len + kSlack) h.bytes.resize(size_t(at) + len + kSlack);
  // A retransmission that disagrees overwrites: the stream's version of a
  // byte is its last, as the packet path rewrites it.
  std::memcpy(h.bytes.data() + at, p, len);
  h.segs.push_back({at, len});
  uint32_t cov = h.contiguous;
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [o, n] : h.segs)
      if (o <= cov && o + n > cov) cov = o + n, grew = true;
  }
  if (cov == h.contiguous) return Add::Waiting;
  h.contiguous = cov;
  return Add::Grew;
}

void SplitHeads::end(const std::string& k, bool completed) {
  if (!heads_.erase(k)) return;
  ++(completed ? st_.completed : st_.unfinished);
}

}  // namespace amon
