// Searching the output for every encoding of every protected value, and
// judging each match against what the policy allows in its original.
#include <arpa/inet.h>
#include <hs/hs.h>
#include <pcap/pcap.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <unordered_set>

#include "addr_forms.h"
#include "audit_impl.h"
#include "bytes.h"

namespace amon::audit {

std::string addr_text(Kind k, const std::string& b) {
  char buf[64];
  inet_ntop(k == Kind::Addr4 ? AF_INET : AF_INET6, b.data(), buf, sizeof buf);
  return buf;
}

namespace {

// Bits per byte of a frame above its first 42 (the headers of a plain
// Ethernet/IPv4/UDP frame), as tests/tools/leak_sweep.py measures it.
double entropy_above_headers(const std::vector<uint8_t>& f) {
  if (f.size() <= 42) return 0;
  unsigned n[256] = {};
  for (size_t i = 42; i < f.size(); ++i) ++n[f[i]];
  const double total = double(f.size() - 42);
  double e = 0;
  for (unsigned c : n)
    if (c) e -= c / total * std::log2(c / total);
  return e;
}

// Why a binary match in opaque bytes is likely chance (Hit::chance), or
// empty. `ent`: the frame's entropy, computed on first use (-1 before).
std::string chance_cause(const std::vector<uint8_t>& frame, const std::string& v, double& ent) {
  const size_t zeros = size_t(std::count(v.begin(), v.end(), '\0'));
  if (zeros >= 2 || std::count(v.begin(), v.end(), v[0]) == std::ptrdiff_t(v.size())) return "low-entropy value";
  if (ent < 0) ent = entropy_above_headers(frame);
  return ent > 6.0 ? "random-looking bytes" : "";
}

}  // namespace

std::string printable(Kind k, const std::string& v) {
  switch (k) {
    case Kind::Addr4:
    case Kind::Addr6: return addr_text(k, v);
    case Kind::Mac: {
      char buf[20];
      auto* m = reinterpret_cast<const uint8_t*>(v.data());
      std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
      return buf;
    }
    default: {
      std::string r;
      for (unsigned char c : v.substr(0, 120)) r += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
      return r;
    }
  }
}

// DNS wire form of a dotted name (labels, no terminating root byte: the
// name may continue with a compression pointer).
std::string wire_name(const std::string& name) {
  std::string w;
  size_t i = 0;
  while (i <= name.size()) {
    size_t j = name.find('.', i);
    if (j == std::string::npos) j = name.size();
    if (j - i == 0 || j - i > 63) return {};
    w += char(j - i);
    w += name.substr(i, j - i);
    i = j + 1;
  }
  return w;
}

void Auditor::add(uint32_t v, std::string lit, const char* enc, bool caseless, Pattern::Bound b, bool bin4) {
  if (lit.empty()) return;
  pats.push_back({v, enc, uint32_t(lit.size()), b, bin4});
  lits.push_back(std::move(lit));
  flags.push_back(caseless ? HS_FLAG_CASELESS : 0);
}

void Auditor::build_patterns() {
  static const char* hx = "0123456789abcdef";
  for (uint32_t i = 0; i < values.size(); ++i) {
    auto& v = values[i];
    auto* b = reinterpret_cast<const uint8_t*>(v.bytes.data());
    switch (v.kind) {
      case Kind::Addr4: {
        add(i, v.bytes, "binary", false, Pattern::None, true);
        add(i, addr_text(v.kind, v.bytes), "dotted quad", false, Pattern::Digits);
        std::string rev = std::to_string(b[3]) + "." + std::to_string(b[2]) + "." + std::to_string(b[1]) + "." +
                          std::to_string(b[0]) + ".in-addr.arpa";
        add(i, rev, "in-addr.arpa (text)", true, Pattern::Label);
        add(i, wire_name(rev), "in-addr.arpa (DNS wire)", true, Pattern::Wire);
        break;
      }
      case Kind::Addr6: {
        add(i, v.bytes, "binary", false, Pattern::None);
        add(i, addr_text(v.kind, v.bytes), "IPv6 text", true, Pattern::Hex);
        std::string full;
        for (int k = 0; k < 16; k += 2) {
          if (k) full += ':';
          full += {hx[b[k] >> 4], hx[b[k] & 15], hx[b[k + 1] >> 4], hx[b[k + 1] & 15]};
        }
        if (full != addr_text(v.kind, v.bytes)) add(i, full, "IPv6 text (expanded)", true, Pattern::Hex);
        std::string rev;
        for (int k = 15; k >= 0; --k) rev += {hx[b[k] & 15], '.', hx[b[k] >> 4], '.'};
        rev += "ip6.arpa";
        add(i, rev, "ip6.arpa (text)", true, Pattern::Label);
        add(i, wire_name(rev), "ip6.arpa (DNS wire)", true, Pattern::Wire);
        break;
      }
      case Kind::Mac: {
        // A MAC of 6 random-looking bytes does not turn up by chance; one
        // of few distinct bytes (aa:aa:aa:aa:aa:aa, 00:..:01) does, in
        // padding and fuzzed payloads, and counts as possible there.
        add(i, v.bytes, "binary", false, Pattern::None, std::set<char>(v.bytes.begin(), v.bytes.end()).size() <= 3);
        std::string c = printable(v.kind, v.bytes), h = c;
        std::replace(h.begin(), h.end(), ':', '-');
        add(i, c, "text (aa:bb)", true, Pattern::Hex);
        add(i, h, "text (aa-bb)", true, Pattern::Hex);
        break;
      }
      case Kind::Name:
        // A one-label name shorter than 4 letters ("com", "lan") is in
        // every other name; its wire form still has to match at a label.
        if (v.bytes.size() >= 4 || v.bytes.find('.') != std::string::npos)
          add(i, v.bytes, "text", true, Pattern::Label);
        add(i, wire_name(v.bytes), "DNS wire", true, Pattern::Wire);
        break;
      case Kind::Text: add(i, v.bytes, "text", false, Pattern::None); break;
    }
  }
}

bool Auditor::bounded(const Pattern& pt, const uint8_t* f, uint32_t n, uint32_t from) const {
  uint32_t to = from + pt.len;
  int prev = from ? f[from - 1] : -1, next = to < n ? f[to] : -1;
  switch (pt.bound) {
    case Pattern::None: return true;
    case Pattern::Digits:
      if (prev >= 0 && (std::isdigit(prev) || prev == '.')) return false;
      if (next >= 0 && std::isdigit(next)) return false;
      if (next == '.' && to + 1 < n && std::isdigit(f[to + 1])) return false;
      return true;
    case Pattern::Hex:
      return !(prev >= 0 && (std::isxdigit(prev) || prev == ':' || prev == '-')) &&
             !(next >= 0 && (std::isxdigit(next) || next == ':' || next == '-'));
    case Pattern::Label:
      // Left of a dot it is a longer name's suffix: the registrable domain
      // a `sld` fallback may release, judged as that longer name. A byte
      // equal to the name's length is its length prefix (a TLS server name
      // of 82 bytes follows 'R'), not a letter of a longer name.
      if (prev == int(pt.len & 0xff)) prev = -1;
      return !(prev >= 0 && (is_label_char(uint8_t(prev)) || prev == '.')) &&
             !(next >= 0 && is_label_char(uint8_t(next)));
    case Pattern::Wire:
      return !(prev >= 0 && is_label_char(uint8_t(prev)));
  }
  return true;
}

void Auditor::addr_slots(const Frame& fr, Slots& sl) {
  const uint8_t* f = fr.bytes.data();
  uint32_t cap = uint32_t(fr.bytes.size());
  Decoded d;
  decode(f, cap, fr.wire, d);
  sl.add(0, 6), sl.add(6, 6);  // Ethernet's, or the stand-in header's (audit_frames.cpp)
  if (d.ethertype == 0x0806) sl.regions.push_back({0, cap});
  for (unsigned li = 0; li < d.n_encap && li < unsigned(kMaxEncap); ++li) {
    const EncapLayer& L = d.encap[li];
    const uint32_t al = L.ip_version == 4 ? 4 : 16;
    sl.add(L.l3_off + (L.ip_version == 4 ? 12u : 8u), al);
    sl.add(L.l3_off + (L.ip_version == 4 ? 16u : 24u), al);
    if (uint32_t at, end; teredo_trailers(f, cap, L, at, end))
      each_teredo_alt_addr(f, at, end, [&](uint32_t a) { sl.add(a, 4); });
  }
  if (!d.has_ip()) return;
  sl.add(d.src_off(), d.addr_len());
  sl.add(d.dst_off(), d.addr_len());
  if ((d.flags & kFlagIcmpError) && d.ip_version == 4 && d.l4_off + 8 + 20 <= cap) {
    sl.add(d.l4_off + 8 + 12, 4);
    sl.add(d.l4_off + 8 + 16, 4);
  }
  if ((d.flags & kFlagIcmpError) && d.ip_version == 6 && d.l4_off + 8 + 40 <= cap) {
    sl.add(d.l4_off + 8 + 8, 16);
    sl.add(d.l4_off + 8 + 24, 16);
  }
  if (d.flags & kFlagLaterFragment) return;
  // Without a transport header: an IP protocol a plugin may parse whole (each_value).
  const bool whole = !d.has_l4_header();
  // A Multipath TCP ADD_ADDR's address (each_add_addr, as the runtime reads it).
  if (d.l4_proto == kProtoTcp && (d.flags & kFlagAddrBody) && d.l4_hdr_len > 20 && d.l4_off + d.l4_hdr_len <= cap)
    each_add_addr(f + d.l4_off + 20, d.l4_hdr_len - 20u, [&](const AddAddr& a) {
      if (a.family) sl.add(d.l4_off + 20u + a.off + a.addr, a.family == 4 ? 4 : 16);
    });
  uint32_t end = std::min(cap, d.payload_off + d.payload_len);
  if (d.l4_proto == kProtoIcmpv6) {
    uint8_t type = d.sport >> 8;
    if (type >= 133 && type <= 137) sl.regions.push_back({d.l4_off, end});
  }
  if (end <= d.payload_off) return;
  auto dhcp = [](uint16_t p) { return p == 67 || p == 68 || p == 546 || p == 547; };
  if (d.l4_proto == kProtoUdp && (dhcp(d.sport) || dhcp(d.dport))) sl.regions.push_back({d.payload_off, end});
  // Where a plugin finds an address or a MAC in a datagram (an A record's
  // 4 bytes, an AAAA's 16, an ECS prefix): a slot as wide as the widest
  // address, so a shorter prefix still holds the match that starts there.
  // In a datagram or a segment: the values stored XOR-ed.
  each_value(f, d, cap, 2, [&](const uint8_t* p, const ProtoOcc& o) {
    if ((d.l4_proto == kProtoUdp || whole) && (o.kind == OccKind::Addr4 || o.kind == OccKind::Addr6 || o.kind == OccKind::Mac))
      sl.add(uint32_t(p - f) + o.off, 16);
    // Read both ways (side 2), a value comes twice: XOR-ed twice it would
    // be back as it was.
    const uint32_t at = uint32_t(p - f) + o.off;
    if (o.coded && std::none_of(sl.coded.begin(), sl.coded.end(), [&](const Slots::Coded& c) { return c.at == at; }))
      sl.coded.push_back({at, uint32_t(p - f) + o.key, o.len});
    if (o.form == AddrForm::Decimal && o.kind == OccKind::Addr4 && o.len >= 4 &&
        std::none_of(sl.decimal.begin(), sl.decimal.end(), [&](const auto& x) { return x.first == at; })) {
      sl.decimal.push_back({at, o.len});
      sl.add(at, 4);
    }
  });
}

std::string Auditor::context(const Frame& fr, uint32_t off) {
  Decoded d;
  decode(fr.bytes.data(), uint32_t(fr.bytes.size()), fr.wire, d);
  if (off < 14) return lt_out == DLT_EN10MB ? "ethernet header" : "link header";
  if (!d.has_ip()) return d.ethertype == 0x0806 ? "arp" : "non-ip frame";
  if (off == d.src_off()) return "ip.src";
  if (off == d.dst_off()) return "ip.dst";
  if (off < d.l3_off + d.l3_hdr_len) return "ip header";
  if ((d.flags & kFlagIcmpError) && off >= d.l4_off + 8) return "icmp quote";
  if (off < d.payload_off) return "transport header";
  const char* l4 = d.l4_proto == kProtoTcp ? "tcp" : d.l4_proto == kProtoUdp ? "udp" : "ip";
  std::string app;
  uint16_t lo = std::min(d.sport, d.dport);
  if (is_dns_port(d.sport) || is_dns_port(d.dport)) app = " (dns)";
  else if (d.sport == 80 || d.dport == 80 || d.sport == 8080 || d.dport == 8080) app = " (http)";
  else if (d.sport == 443 || d.dport == 443) app = " (tls/quic)";
  else if (lo) app = " (port " + std::to_string(lo) + ")";
  return std::string(l4) + " payload" + app;
}

bool Auditor::search(std::string& err) {
  build_patterns();
  // Output frames are tied to their original by timestamp (amon keeps
  // each packet's time); several originals may share one.
  std::unordered_multimap<uint64_t, size_t> by_ts;
  for (size_t i = 0; i < in.size(); ++i) by_ts.emplace(in[i].ts, i);
  // An output none of whose frames has an original is no output of this
  // input (another capture, timestamps rewritten or made coarser): judged
  // with no allowances it would be all "leaks", and with nothing to judge
  // it would look clean. Neither is an answer.
  size_t judged = 0, tied = 0;
  for (auto& fr : out)
    if (!fr.bytes.empty()) ++judged, tied += by_ts.count(fr.ts) != 0;
  if (judged && !tied) {
    err = o.anonymized + ": no frame is tied to a frame of " + o.original +
          " by its timestamp (amon keeps each packet's time): not an anonymized copy of it";
    return false;
  }
  std::unordered_map<uint32_t, ClassSummary*> cls_of;
  std::map<std::string, ClassSummary> sums;
  for (uint32_t i = 0; i < values.size(); ++i) sums[values[i].cls].cls = values[i].cls, ++sums[values[i].cls].protected_values;
  uint64_t n4 = 0;
  for (auto& v : values) n4 += v.kind == Kind::Addr4;
  if (!pats.empty()) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    std::vector<unsigned> ids;
    for (size_t i = 0; i < lits.size(); ++i) ptrs.push_back(lits[i].data()), lens.push_back(lits[i].size()), ids.push_back(unsigned(i));
    hs_database_t* db = nullptr;
    hs_compile_error_t* ce = nullptr;
    if (hs_compile_lit_multi(ptrs.data(), flags.data(), ids.data(), lens.data(), unsigned(ptrs.size()), HS_MODE_BLOCK,
                             nullptr, &db, &ce) != HS_SUCCESS) {
      err = std::string("hyperscan: ") + (ce ? ce->message : "compile failed");
      if (ce) hs_free_compile_error(ce);
      return false;
    }
    hs_scratch_t* scratch = nullptr;
    hs_alloc_scratch(db, &scratch);
    struct M { unsigned id; unsigned long long to; };
    std::vector<M> ms;
    std::vector<std::pair<uint32_t, uint32_t>> allowed_names;
    auto inside = [](const std::vector<std::pair<uint32_t, uint32_t>>& spans, uint32_t a, uint32_t b) {
      for (auto& [f, t] : spans)
        if (f <= a && b <= t && (t - f) > (b - a)) return true;
      return false;
    };
    auto allowed_in = [&](const Frame& fr, std::unordered_set<uint32_t>& allowed) {
      auto rng = by_ts.equal_range(fr.ts);
      for (auto it = rng.first; it != rng.second; ++it)
        for (auto& k : allowed_keys[it->second]) {
          auto x = index.find(k);
          if (x != index.end()) allowed.insert(x->second);
        }
      return rng.first != rng.second;
    };
    // A value the output carries across two segments of a TCP stream is
    // whole in neither frame: each direction's last segment's end is kept
    // (the longest text pattern's length less one, at most 16 KiB; 4,096
    // directions at once) and searched joined to the start of the segment
    // that follows it in sequence. Text encodings only: a short binary
    // value split by a segment boundary is no field the engine writes.
    struct Tail {
      uint32_t end_seq = 0;
      size_t frame = 0;
      std::vector<uint8_t> bytes;
    };
    std::unordered_map<std::string, Tail> tails;
    constexpr size_t kTails = 4096;
    auto textual = [&](const Pattern& pt) { return pt.bound != Pattern::None || values[pt.value].kind == Kind::Text; };
    uint32_t reach = 0;
    for (const auto& pt : pats)
      if (textual(pt)) reach = std::max(reach, pt.len - 1);
    reach = std::min<uint32_t>(reach, 16384);
    std::vector<uint8_t> join;
    std::vector<M> jm;
    auto across = [&](size_t oi, const std::unordered_set<uint32_t>& allowed) {
      const Frame& fr = out[oi];
      const uint32_t cap = uint32_t(fr.bytes.size());
      Decoded d;
      decode(fr.bytes.data(), cap, fr.wire, d);
      if (!reach || d.status != DecodeStatus::Ok || d.l4_proto != kProtoTcp || !d.has_l4_header() ||
          (d.flags & (kFlagFragment | kFlagLaterFragment)) || d.l4_off + 8 > cap)
        return;
      const uint32_t avail = cap > d.payload_off ? std::min(d.payload_len, cap - d.payload_off) : 0;
      if (!avail) return;
      const uint8_t* p = fr.bytes.data() + d.payload_off;
      const uint32_t seq = rd32(fr.bytes.data() + d.l4_off + 4);
      const std::string k =
          SplitHeads::key(fr.bytes.data() + d.src_off(), fr.bytes.data() + d.dst_off(), d.addr_len(), d.sport, d.dport);
      auto it = tails.find(k);
      const bool next = it != tails.end() && it->second.end_seq == seq;
      if (next) {
        const Tail& tl = it->second;
        const uint32_t cut = uint32_t(tl.bytes.size());
        join.assign(tl.bytes.begin(), tl.bytes.end());
        join.insert(join.end(), p, p + std::min(avail, reach));
        jm.clear();
        hs_scan(db, reinterpret_cast<const char*>(join.data()), unsigned(join.size()), 0, scratch,
                [](unsigned id, unsigned long long, unsigned long long to, unsigned, void* ctx) {
                  static_cast<std::vector<M>*>(ctx)->push_back({id, to});
                  return 0;
                },
                &jm);
        std::unordered_set<uint32_t> before;
        bool judged_before = false;
        for (const M& m : jm) {
          const Pattern& pt = pats[m.id];
          const uint32_t from = uint32_t(m.to - pt.len);
          if (from >= cut || m.to <= cut || !textual(pt) || !bounded(pt, join.data(), uint32_t(join.size()), from))
            continue;
          Value& v = values[pt.value];
          v.found = true;
          if (!judged_before) allowed_in(out[tl.frame], before), judged_before = true;
          if (allowed.count(pt.value) || before.count(pt.value)) {
            ++r.allowed;
            continue;
          }
          ClassSummary& cs = sums[v.cls];
          ++r.leaks, ++cs.leaks;
          if (cs.leaks <= o.max_listed)
            r.leak_list.push_back({oi + 1, d.payload_off, v.cls, printable(v.kind, v.bytes), pt.enc,
                                   context(fr, d.payload_off) + ", across segments from frame " +
                                       std::to_string(tl.frame + 1),
                                   v.rule});
        }
      }
      if (avail < d.payload_len) {  // cut short: the next segment does not follow these bytes
        if (it != tails.end()) tails.erase(it);
        return;
      }
      if (it == tails.end()) {
        if (tails.size() >= kTails) tails.erase(tails.begin());
        it = tails.emplace(k, Tail{}).first;
      }
      Tail& tl = it->second;
      if (!next) tl.bytes.clear();
      tl.bytes.insert(tl.bytes.end(), p, p + avail);
      if (tl.bytes.size() > reach) tl.bytes.erase(tl.bytes.begin(), tl.bytes.end() - reach);
      tl.end_seq = seq + avail;
      tl.frame = oi;
    };
    for (size_t oi = 0; oi < out.size(); ++oi) {
      auto& fr = out[oi];
      if (fr.bytes.empty()) continue;
      double frame_entropy = -1;
      std::unordered_set<uint32_t> allowed;
      if (!allowed_in(fr, allowed)) ++r.unmatched_frames;
      Slots slots;
      addr_slots(fr, slots);
      ms.clear();
      hs_scan(db, reinterpret_cast<const char*>(fr.bytes.data()), unsigned(fr.bytes.size()), 0, scratch,
              [](unsigned id, unsigned long long, unsigned long long to, unsigned, void* ctx) {
                static_cast<std::vector<M>*>(ctx)->push_back({id, to});
                return 0;
              },
              &ms);
      // A value stored XOR-ed is searched in clear too: left as it came,
      // its XOR is undone by anyone who reads the protocol.
      if (!slots.coded.empty()) {
        std::vector<uint8_t> clear(fr.bytes);
        for (const auto& c : slots.coded) xor_with(clear.data() + c.at, fr.bytes.data() + c.key, c.len);
        const size_t before = ms.size();
        hs_scan(db, reinterpret_cast<const char*>(clear.data()), unsigned(clear.size()), 0, scratch,
                [](unsigned id, unsigned long long, unsigned long long to, unsigned, void* ctx) {
                  static_cast<std::vector<M>*>(ctx)->push_back({id, to});
                  return 0;
                },
                &ms);
        // Only what lies within a clear value: the rest was scanned above.
        auto within = [&](const M& m) {
          const uint64_t from = m.to - pats[m.id].len;
          for (const auto& c : slots.coded)
            if (from >= c.at && m.to <= uint64_t(c.at) + c.len) return true;
          return false;
        };
        ms.erase(std::remove_if(ms.begin() + long(before), ms.end(), [&](const M& m) { return !within(m); }), ms.end());
      }
      // A decimal number a plugin reads as an IPv4 address is that address:
      // its 4 bytes take the number's place in a copy, searched there.
      const size_t decimal_from = ms.size();
      if (!slots.decimal.empty()) {
        std::vector<uint8_t> clear(fr.bytes);
        for (const auto& [at, len] : slots.decimal) {
          uint8_t a[4];
          if (read_decimal_addr(fr.bytes.data() + at, len, a)) std::memcpy(clear.data() + at, a, 4);
        }
        hs_scan(db, reinterpret_cast<const char*>(clear.data()), unsigned(clear.size()), 0, scratch,
                [](unsigned id, unsigned long long, unsigned long long to, unsigned, void* ctx) {
                  static_cast<std::vector<M>*>(ctx)->push_back({id, to});
                  return 0;
                },
                &ms);
        // Only an address's 4 bytes where a number was: the rest was scanned above.
        auto at_number = [&](const M& m) {
          const uint64_t from = m.to - pats[m.id].len;
          for (const auto& x : slots.decimal)
            if (from == x.first && m.to == uint64_t(x.first) + 4) return pats[m.id].bin4;
          return false;
        };
        ms.erase(std::remove_if(ms.begin() + long(decimal_from), ms.end(), [&](const M& m) { return !at_number(m); }),
                 ms.end());
      }
      if (n4 && fr.bytes.size() >= 4) {
        uint64_t opaque = fr.bytes.size() - 3 - std::min<size_t>(slots.at.size(), fr.bytes.size() - 3);
        r.opaque_bytes += opaque;
        r.possible_expected += double(n4) * double(opaque) / 4294967296.0;
      }
      // Where an allowed name travels, its bytes are the policy's to
      // show: a protected name found wholly inside one (the label "_sip"
      // inside a released "_sip._udp.example.org") is disclosed by the
      // allowed name, not leaked.
      allowed_names.clear();
      for (auto& m : ms) {
        auto& pt = pats[m.id];
        if (values[pt.value].kind != Kind::Name || !allowed.count(pt.value)) continue;
        uint32_t from = uint32_t(m.to - pt.len);
        if (bounded(pt, fr.bytes.data(), uint32_t(fr.bytes.size()), from)) allowed_names.push_back({from, uint32_t(m.to)});
      }
      for (size_t mi = 0; mi < ms.size(); ++mi) {
        const M& m = ms[mi];
        auto& pt = pats[m.id];
        uint32_t from = uint32_t(m.to - pt.len);
        const bool number = mi >= decimal_from;
        if (!number && !bounded(pt, fr.bytes.data(), uint32_t(fr.bytes.size()), from)) continue;
        auto& v = values[pt.value];
        auto& cs = sums[v.cls];
        v.found = true;
        if (allowed.count(pt.value)) {
          ++r.allowed;
          continue;
        }
        if (v.kind == Kind::Name && inside(allowed_names, from, uint32_t(m.to))) {
          ++r.allowed, ++r.inside_allowed;
          continue;
        }
        Hit h{oi + 1, from, v.cls, printable(v.kind, v.bytes), number ? "decimal number" : pt.enc, context(fr, from),
              v.rule};
        // The audit reads no key, so it cannot tell a key's fixed point
        // (cryptopan() giving the address back) from an address not
        // rewritten: either way it is the address in clear.
        if (v.cryptopan && (h.context == "ip.src" || h.context == "ip.dst"))
          h.context += " (where cryptopan() applies: not rewritten, or a fixed point of the key)";
        if (pt.bin4 && !slots.has(from, pt.len)) {
          h.chance = chance_cause(fr.bytes, v.bytes, frame_entropy);
          ++r.possible, ++cs.possible, r.possible_chance += !h.chance.empty();
          if (cs.possible <= o.max_listed) r.possible_list.push_back(h);
        } else {
          ++r.leaks, ++cs.leaks;
          if (cs.leaks <= o.max_listed) r.leak_list.push_back(h);
        }
      }
      across(oi, allowed);
    }
    hs_free_scratch(scratch);
    hs_free_database(db);
  }
  for (auto& v : values)
    if (v.found) ++sums[v.cls].found;
  for (auto& [k, s] : sums) r.classes.push_back(s);
  (void)cls_of;
  return true;
}

}  // namespace amon::audit
