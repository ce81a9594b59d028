// Reading the captures and tying fragments of one datagram together.
#include <pcap/pcap.h>

#include <cstdio>
#include <cstring>

#include "audit_impl.h"
#include "l2l4.h"
#include "linktypes.h"
#include "pcapio.h"

namespace amon::audit {

Frame as_engine_sees(const pcapio::Record& r) {
  const uint32_t wire = r.len < r.caplen ? r.caplen : r.len;
  if (r.linktype == DLT_EN10MB) return {r.ts_ns, r.len, std::vector<uint8_t>(r.data, r.data + r.caplen)};
  std::vector<uint8_t> b(pcapio::kStandInLen);
  if (const LinkLayer* L = link_layer_for(r.linktype)) {
    link_stand_in(r.linktype, b.data());
    b.resize(pcapio::kStandInLen + r.caplen + 64);
    uint32_t nw = 0;
    const uint32_t n = L->normalize(r.linktype, r.data, r.caplen, wire, b.data() + pcapio::kStandInLen, nw);
    b.resize(pcapio::kStandInLen + n);
    return {r.ts_ns, nw + pcapio::kStandInLen, std::move(b)};
  }
  pcapio::LinkHeader lh;
  const uint32_t hl = pcapio::link_to_ethernet(r.linktype, r.data, r.caplen, b.data(), lh);
  b.insert(b.end(), r.data + hl, r.data + r.caplen);
  return {r.ts_ns, wire - hl + pcapio::kStandInLen, std::move(b)};
}

bool read_pcap(const std::string& path, std::vector<Frame>& out, int& linktype, std::string& err) {
  try {
    pcapio::Capture c(path);
    linktype = c.linktype();
    pcapio::Record r;
    while (c.next(r) == 1) out.push_back(as_engine_sees(r));
    // A file cut short or a record that cannot be read ends the capture
    // there, as it ends amon's input: what came before is still audited.
    if (!c.error().empty()) std::fprintf(stderr, "amon audit: %s (reading stops there)\n", c.error().c_str());
  } catch (const pcapio::BadInput& e) {
    err = e.what();
    return false;
  }
  return true;
}

void Auditor::join_tunnel_fragments() {
  whole_of.assign(in.size(), SIZE_MAX);
  struct Group {
    FragInfo first;
    size_t first_fi = SIZE_MAX;
    std::vector<std::pair<size_t, FragInfo>> frags;
    uint32_t total = 0, have = 0;
    bool last = false, bad = false;
  };
  std::vector<Group> groups;
  for (size_t fi = 0; fi < in.size(); ++fi) {
    Decoded d;
    decode(in[fi].bytes.data(), uint32_t(in[fi].bytes.size()), in[fi].wire, d);
    FragInfo x;
    if (!outer_frag_info(in[fi].bytes.data(), d, x)) continue;
    Group* g = nullptr;
    for (auto& gg : groups)
      if (!gg.bad && same_datagram(gg.first, x)) g = &gg;
    if (!g) {
      if (x.off != 0 || !(d.flags & kFlagTunnel)) continue;
      groups.emplace_back();
      g = &groups.back();
      g->first = x;
      g->first_fi = fi;
    }
    for (auto& [_, o] : g->frags)
      if (x.off < o.off + o.len && o.off < x.off + x.len) g->bad = true;
    g->frags.push_back({fi, x});
    g->have += x.len;
    if (!x.more) g->last = true, g->total = x.off + x.len;
  }
  for (auto& g : groups) {
    if (g.bad || !g.last || g.have != g.total) continue;
    const uint32_t hlen = whole_header_len(g.first);
    std::vector<uint8_t> w(hlen + g.total);
    whole_header(in[g.first_fi].bytes.data(), g.first, g.total, w.data());
    for (auto& [fi, x] : g.frags) {
      std::memcpy(w.data() + hlen + x.off, in[fi].bytes.data() + x.data_start, x.len);
      whole_of[fi] = g.first_fi;
    }
    in[g.first_fi].bytes = std::move(w);
    in[g.first_fi].wire = uint32_t(in[g.first_fi].bytes.size());
  }
}

}  // namespace amon::audit
