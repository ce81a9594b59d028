// Collecting from the original every value the policy protects, and what
// it leaves in clear in each frame.
#include <pcap/pcap.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "addr_forms.h"
#include "audit_impl.h"
#include "bytes.h"
#include "registry.h"
#include "value_parts.h"

namespace amon::audit {

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  while (!r.empty() && r.back() == '.') r.pop_back();
  return r;
}

void Auditor::protect(Kind k, const std::string& b, const std::string& cls, const FieldRule& fr) {
  auto kk = key(k, b);
  if (index.count(kk)) return;
  index[kk] = uint32_t(values.size());
  // A user's address is protected as one, wherever it was first found.
  const bool user = clients_protected && is_client_addr(k, b);
  const FieldRule& by = user ? FieldRule{client_rule} : fr;
  values.push_back({k, b, user ? std::string("ip.client") : cls, by.rule ? by.where() : std::string()});
  if (by.rule && (k == Kind::Addr4 || k == Kind::Addr6)) {
    const ActionCall* x = &by.rule->action;
    if (x->desc->uses_zstore) {
      auto* fb = x->arg("fallback");
      x = fb && fb->action ? fb->action.get() : nullptr;
    }
    values.back().cryptopan = x && x->desc->kind == ActionKind::CryptoPan;
  }
}

// A field with no rule of its own that was carved out of a catch-all
// takes the catch-all's rule, as the engine binds it.
FieldRule Auditor::rule_for(const std::string& field) {
  auto it = frule.find(field);
  if (it != frule.end()) return it->second;
  const FieldDesc* f = Registry::instance().field(field);
  if (f)
    for (const auto& from : f->split_from)
      if (auto c = frule.find(from); c != frule.end()) return c->second;
  return FieldRule{};
}

// A zanon rule's decision on a name: 0 hidden, 1 released, 2 hidden with
// its registrable domain released (fallback=sld observes that domain in
// the same class, only when the name has more labels than it).
int Auditor::name_decision(const std::string& cls, const std::string& name, const std::string& rd,
                           const std::string& user, uint64_t t, const FieldRule& fr) {
  const std::string ek = cur_flow.empty() ? std::string() : cur_flow + '\0' + cls + '\0' + name;
  if (!cur_from_client && !ek.empty()) {
    // A name the flow's client sent before (a DNS response repeating its
    // question): the engine shows the query's decision and counts nothing.
    // The audit asks that the count still allow it now as well, so it never
    // allows more than either reading would.
    if (auto it = zonce.query_name.find(ek); it != zonce.query_name.end()) {
      int out = it->second;
      if (out == 1 && !counts.released(cls, name, t, fr.z(), fr.dt())) out = 0;
      if (out == 2 && !counts.released(cls, rd, t, fr.z(), fr.dt())) out = 0;
      return out;
    }
  }
  int out = counts.observe(cls, name, user, t, fr.z(), fr.dt()) ? 1 : 0;
  if (!out && !rd.empty() && counts.observe(cls, rd, user, t, fr.z(), fr.dt())) out = 2;
  if (cur_from_client && !ek.empty()) zonce.query_name[ek] = out;
  return out;
}

void Auditor::name_value(size_t fi, const std::string& field, std::string name, const std::string& user, uint64_t t) {
  name = lower(name);
  if (name.empty()) return;
  FieldRule fr = rule_for(field);
  if (fr.keep()) return allow(fi, Kind::Name, name);
  auto& fd = *Registry::instance().field(field);
  if (fr.zanon()) {
    std::string rd;
    if (fr.fallback_sld()) {
      const char* r = psl_registrable_domain(psl, name.c_str());
      if (r && *r && name != r) rd = r;
    }
    const int out = name_decision(fd.value_class, name, rd, user, t, fr);
    if (out == 1) return allow(fi, Kind::Name, name);
    if (out == 2) allow(fi, Kind::Name, rd);
  }
  protect(Kind::Name, name, field, fr);
}

// A media type ("application/json", "image/svg+xml"): the protocol's own
// vocabulary, in Accept and Content-Type headers everywhere. A request
// whose header spans TCP segments is read by the audit without its kept
// Content-Type, so an Accept item there would be reported in it.
static bool media_type(std::string_view v) {
  constexpr std::string_view kTop[] = {"application", "audio", "font", "image", "message",
                                       "model", "multipart", "text", "video"};
  const size_t slash = v.find('/');
  if (slash == std::string_view::npos || slash + 1 == v.size()) return false;
  const std::string_view top = v.substr(0, slash), sub = v.substr(slash + 1);
  if (std::none_of(std::begin(kTop), std::end(kTop), [&](std::string_view t) {
        return t.size() == top.size() &&
               std::equal(t.begin(), t.end(), top.begin(), [](char a, char b) { return a == (b | 0x20); });
      }))
    return false;
  return std::all_of(sub.begin(), sub.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-';
  });
}

// Shorter values ("/", "gzip") say nothing about a person and would match
// everywhere by chance; so does a word of letters and hyphens alone, the
// protocol's own vocabulary (a Connection header's "keep-alive", a Vary
// header's "Accept-Encoding", both header names too), or a media type.
static bool telling(std::string_view v) {
  if (v.size() < 8) return false;
  if (v.find_first_not_of('\0') == std::string_view::npos) return false;  // zero filler identifies no one
  if (media_type(v)) return false;
  return !std::all_of(v.begin(), v.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '-'; });
}

void Auditor::text_value(size_t fi, const std::string& field, const std::string& v, const std::string& user, uint64_t t) {
  if (!telling(v)) return;
  FieldRule fr = rule_for(field);
  auto& fd = *Registry::instance().field(field);
  // Left in clear here: by its rule, or z users seen with it.
  const bool clear = fr.keep() || (fr.zanon() && counts.observe(fd.value_class, v, user, t, fr.z(), fr.dt()));
  auto decide = [&](const std::string& x) {
    if (clear) allow(fi, Kind::Text, x);
    else protect(Kind::Text, x, field, fr);
  };
  decide(v);
  // Its name=value parts travel alone too (a cookie's id in a query string,
  // a log line): searched as the engine's echo search finds them
  // (value_parts.h), each taking the whole value's decision in this frame,
  // as the engine records and releases them: protected wherever the value
  // was rewritten, in clear in a frame whose field leaves the value in
  // clear (a kept Content-Type's "application/json", a released header's
  // media type), as the engine searches no field a rule decided.
  value_parts(v, [&](uint32_t off, uint32_t len) {
    std::string part = v.substr(off, len);
    if (telling(part)) decide(part);
  });
}

void Auditor::addr_value(size_t fi, const std::string& field, Kind k, const std::string& a, const std::string& user,
                uint64_t t) {
  FieldRule fr = rule_for(field);
  if (fr.keep()) return allow(fi, k, a);
  if (fr.zanon() && counts.observe("server-addr", a, user, t, fr.z(), fr.dt())) return allow(fi, k, a);
  allow_derived(fi, k, a, fr.rule->action);
  if (!names_no_host(k, a)) protect(k, a, field, fr);
}

void Auditor::mac_value(size_t fi, const std::string& field, const std::string& m) {
  // All zeros (a DHCP chaddr left empty, a placeholder) identify no one.
  if (m == std::string(6, '\0')) return;
  FieldRule fr = rule_for(field);
  if (fr.keep()) allow(fi, Kind::Mac, m);
  else protect(Kind::Mac, m, field, fr);
}

// One value a plugin found in the original, by the kind of value it is.
void Auditor::occ_value(size_t fi, const uint8_t* f, const Decoded& d, const uint8_t* p, const ProtoOcc& o,
               const std::string& user, uint64_t t) {
  std::string v(reinterpret_cast<const char*>(p + o.off), o.len);
  if (o.coded) xor_with(reinterpret_cast<uint8_t*>(v.data()), p + o.key, o.len);  // collected in clear
  bool addr4 = o.kind == OccKind::Addr4 && o.len == 4, addr6 = o.kind == OccKind::Addr6 && o.len == 16;
  if (o.form != AddrForm::Binary && (o.kind == OccKind::Addr4 || o.kind == OccKind::Addr6)) {
    // Written as text (DCC's decimal number): collected as the address it
    // reads as, whose text and binary forms the search looks for.
    const uint8_t family = o.kind == OccKind::Addr4 ? 4 : 6;
    uint8_t a[16];
    if (!read_addr_form(p + o.off, o.len, o.form, family, a)) return;
    v.assign(reinterpret_cast<const char*>(a), family == 4 ? 4 : 16);
    addr4 = family == 4, addr6 = family == 6;
  }
  if (o.role) {
    if (addr4 || addr6) role_value(fi, f, d, addr4 ? Kind::Addr4 : Kind::Addr6, v, user, t);
    return;
  }
  const std::string& field = Registry::instance().field(o.field).name;
  switch (o.kind) {
    case OccKind::Name: name_value(fi, field, std::string(o.text), user, t); break;
    case OccKind::Addr4:
    case OccKind::Addr6:
      // An ECS prefix shorter than the address is no whole address.
      if (addr4 || addr6) addr_value(fi, field, addr4 ? Kind::Addr4 : Kind::Addr6, v, user, t);
      break;
    case OccKind::Mac:
      if (o.len == 6) mac_value(fi, field, v);
      break;
    case OccKind::Bytes: text_value(fi, field, v, user, t); break;
    case OccKind::Payload: break;
  }
}

void Auditor::app_values(size_t fi, const uint8_t* f, const Decoded& d, int side, const std::string& user, uint64_t t) {
  each_value(f, d, uint32_t(in[fi].bytes.size()), side,
             [&](const uint8_t* p, const ProtoOcc& o) { occ_value(fi, f, d, p, o, user, t); });
}

// A TCP segment of a head split over segments: kept in sequence order with
// the head's other segments until the head is whole (a plugin that holds
// split heads no longer asks for more), the direction ends, or a bound is
// reached; then the head is read as one payload. A segment before the
// head's start or past a bound ends it, and may start the next.
void Auditor::stream_values(size_t fi, const uint8_t* f, const Decoded& d, int side, uint64_t t) {
  if (d.status != DecodeStatus::Ok || d.l4_proto != kProtoTcp || !d.has_l4_header() ||
      (d.flags & (kFlagFragment | kFlagLaterFragment)))
    return;
  const uint32_t cap = uint32_t(in[fi].bytes.size());
  if (d.l4_off + 8 > cap) return;
  const uint32_t seq = rd32(f + d.l4_off + 4);
  const uint32_t avail = cap > d.payload_off ? std::min(d.payload_len, cap - d.payload_off) : 0;
  const uint8_t* p = f + d.payload_off;
  const bool ends = d.tcp_flags & (0x01 | 0x04);  // FIN, RST
  const std::string k = SplitHeads::key(f + d.src_off(), f + d.dst_off(), d.addr_len(), d.sport, d.dport);
  auto incomplete = [&](const uint8_t* b, uint32_t n, int sd) {
    return (sd != 1 && pv->split_head(b, n, d.sport, d.dport, true)) ||
           (sd != 0 && pv->split_head(b, n, d.sport, d.dport, false));
  };
  auto leave = [&](SplitHeads::Head& h, bool whole) {
    head_values(h, whole);
    heads.end(k, whole);
  };
  if (SplitHeads::Head* h = heads.find(k)) {
    if (avail < d.payload_len) {
      // The capture cut this segment: the head cannot be read past it.
      leave(*h, false);
      return;
    }
    switch (heads.add(*h, seq, p, avail, t)) {
      case SplitHeads::Add::Grew:
        h->marks.push_back(fi);
        if (!incomplete(h->bytes.data(), h->contiguous, int(h->tag))) return leave(*h, true);
        if (ends) leave(*h, false);
        return;
      case SplitHeads::Add::Waiting:
        if (avail) h->marks.push_back(fi);
        if (ends) leave(*h, false);
        return;
      case SplitHeads::Add::Outside:
        leave(*h, false);
        break;  // this segment may start the next head
    }
  }
  if (!avail || avail < d.payload_len || ends || !incomplete(p, avail, side)) return;
  if (heads.full()) heads.expire(t, [&](const std::string&, const SplitHeads::Head& h) { head_values(h, false); });
  if (SplitHeads::Head* h = heads.start(k, seq, p, avail, t)) {
    h->tag = uint32_t(side);
    h->marks.assign(1, fi);
  }
}

void Auditor::head_values(const SplitHeads::Head& h, bool whole) {
  if (!h.contiguous || h.marks.empty()) return;
  const size_t fi = size_t(h.marks.back());
  const uint8_t* f = in[fi].bytes.data();
  Decoded d;
  decode(f, uint32_t(in[fi].bytes.size()), in[fi].wire, d);
  // Read as at its last segment, whichever packet is being collected.
  const std::string flow = cur_flow;
  const bool from_client = cur_from_client;
  const int side = int(h.tag);
  flow_of(f, d, side);
  const std::string user = user_of(f, d, side);
  const size_t before = allowed_keys[fi].size();
  auto one = [&](const ProtocolPlugin&, const ProtoOcc& o) { occ_value(fi, f, d, h.bytes.data(), o, user, in[fi].ts); };
  if (side != 1) pv->read(kProtoTcp, h.bytes.data(), h.contiguous, d.sport, d.dport, true, one, !whole);
  if (side != 0) pv->read(kProtoTcp, h.bytes.data(), h.contiguous, d.sport, d.dport, false, one, !whole);
  // Its output may carry what the head leaves in clear in any of its segments.
  const std::vector<std::string> got(allowed_keys[fi].begin() + before, allowed_keys[fi].end());
  for (uint64_t m : h.marks)
    if (m != fi) allowed_keys[m].insert(allowed_keys[m].end(), got.begin(), got.end());
  cur_flow = flow;
  cur_from_client = from_client;
}

// The flow of the packet being collected, its endpoints in a canonical
// order (none for a later fragment: it carries no ports), and whether the
// flow's client sent it (with uncertain roles, as if it had: its names
// are counted).
void Auditor::flow_of(const uint8_t* f, const Decoded& d, int side) {
  cur_flow.clear();
  cur_from_client = side != 1;
  if ((d.flags & kFlagLaterFragment) || !d.has_l4_header()) return;
  std::string a(reinterpret_cast<const char*>(f + d.src_off()), d.addr_len()), b(reinterpret_cast<const char*>(f + d.dst_off()), d.addr_len());
  const bool ports = d.l4_proto == kProtoTcp || d.l4_proto == kProtoUdp || d.l4_proto == kProtoSctp;
  a += char(ports ? d.sport >> 8 : 0), a += char(ports ? d.sport : 0);
  b += char(ports ? d.dport >> 8 : 0), b += char(ports ? d.dport : 0);
  cur_flow = char(d.l4_proto) + (a < b ? a + b : b + a);
}

void Auditor::collect() {
  plan_tunnel_rule();
  plan_clients();
  join_tunnel_fragments();
  allowed_keys.resize(in.size());
  for (size_t fi = 0; fi < in.size(); ++fi) {
    if (whole_of[fi] != SIZE_MAX && whole_of[fi] != fi) continue;  // checked through its whole datagram
    const uint8_t* f = in[fi].bytes.data();
    uint32_t cap = uint32_t(in[fi].bytes.size());
    uint64_t t = in[fi].ts;
    Decoded d;
    decode(f, cap, in[fi].wire, d);
    // Frames are read as the engine sees them (audit_frames.cpp): a stand-in
    // header's addresses are a Linux cooked capture's source, or zeros.
    if (cap >= 14 && !(d.flags & kFlagLink)) {
      for (int which = 0; which < 2; ++which) {
        const uint8_t* m = f + (which ? 6 : 0);
        std::string mac(reinterpret_cast<const char*>(m), 6);
        // Group and broadcast addresses name no host.
        if ((m[0] & 1) || mac == std::string(6, '\0')) continue;
        FieldRule fr = rule_for(which ? "eth.src" : "eth.dst");
        if (fr.keep()) allow(fi, Kind::Mac, mac);
        else protect(Kind::Mac, mac, which ? "eth.src" : "eth.dst", fr);
      }
    }
    if (d.flags & kFlagLink) link_values(fi, f, cap, t);
    tunnel_endpoints(fi, f, cap, d);
    if (!d.has_ip() || d.l3_off + (d.ip_version == 4 ? 20u : 40u) > cap) continue;
    int side = client_side(f, d);
    flow_of(f, d, side);
    std::string user = user_of(f, d, side);
    Kind ak = d.ip_version == 4 ? Kind::Addr4 : Kind::Addr6;
    for (int pos = 0; pos < 2; ++pos) {
      std::string a(reinterpret_cast<const char*>(f + (pos ? d.dst_off() : d.src_off())), d.addr_len());
      bool is_client = side == 2 || side == pos;
      const dsl::Rule* hit = addr_rule(pos, is_client);
      std::string cls = hit ? hit->fields[0]->name : "ip";
      if (hit)
        for (auto* fd : hit->fields)
          if (fd->name == (pos ? "ip.dst" : "ip.src") || fd->name == (is_client ? "ip.client" : "ip.server"))
            cls = fd->name;
      address_by_rule(fi, ak, a, hit, cls, user, t, !is_client);
    }
    // Multipath TCP's ADD_ADDR: another address of the sender, as the
    // runtime reads it (each_add_addr) and treats it (the sender's role).
    if (d.l4_proto == kProtoTcp && (d.flags & kFlagAddrBody) && d.l4_hdr_len > 20 && d.l4_off + d.l4_hdr_len <= cap)
      each_add_addr(f + d.l4_off + 20, d.l4_hdr_len - 20u, [&](const AddAddr& a) {
        if (!a.family) return;
        const uint8_t* o = f + d.l4_off + 20 + a.off + a.addr;
        role_value(fi, f, d, a.family == 4 ? Kind::Addr4 : Kind::Addr6,
                   std::string(reinterpret_cast<const char*>(o), a.family == 4 ? 4 : 16), user, t, side == 2 || side == (a.echo ? 1 : 0));
      });
    app_values(fi, f, d, side, user, t);
    stream_values(fi, f, d, side, t);
    if ((fi & 4095) == 4095)
      heads.expire(t, [&](const std::string&, const SplitHeads::Head& h) { head_values(h, false); });
  }
  heads.flush([&](const std::string&, const SplitHeads::Head& h) { head_values(h, false); });
  const SplitHeads::Stats& hs = heads.stats();
  r.heads_followed = hs.held, r.heads_whole = hs.completed, r.heads_unfinished = hs.unfinished;
  r.heads_refused = hs.refused, r.heads_out_of_order = hs.out_of_order;
  // Each fragment's output may carry what its datagram's whole may.
  for (size_t fi = 0; fi < in.size(); ++fi)
    if (whole_of[fi] != SIZE_MAX && whole_of[fi] != fi) allowed_keys[fi] = allowed_keys[whole_of[fi]];
}

}  // namespace amon::audit

namespace amon::audit {

// Without a rule of their own a link layer's addresses take eth.src's rule
// (else eth.dst's); with no MAC rule, and for names and element contents
// without a rule, they are hidden whenever the policy protects anything.
void Auditor::link_values(size_t fi, const uint8_t* f, uint32_t cap, uint64_t t) {
  const int dlt = link_stand_in_dlt(f, cap);
  const LinkLayer* L = link_layer_for(dlt);
  if (!L || !L->locate) return;
  LinkOccs occs;
  L->locate(dlt, f, cap, 14, occs);
  bool protects = !addr_rules.empty();
  for (const auto& [_, fr] : frule) protects = protects || !fr.keep();
  const std::string mac_field = frule.count("eth.src") ? "eth.src" : frule.count("eth.dst") ? "eth.dst" : "";
  for (uint32_t i = 0; i < occs.n; ++i) {
    const ProtoOcc& o = occs.occ[i];
    if (o.off + o.len > cap) break;
    const FieldDesc& fd = Registry::instance().field(o.field);
    const bool ruled = frule.count(fd.name) > 0;
    const uint8_t* v = f + o.off;
    if (o.kind == OccKind::Mac && o.len == 6) {
      const std::string mac(reinterpret_cast<const char*>(v), 6);
      if ((v[0] & 1) || mac == std::string(6, '\0')) continue;
      const std::string by = ruled ? fd.name : mac_field;
      if (!by.empty()) {
        const FieldRule fr = rule_for(by);
        if (fr.keep()) allow(fi, Kind::Mac, mac);
        else protect(Kind::Mac, mac, by, fr);
      } else if (protects) {
        protect(Kind::Mac, mac, fd.name, FieldRule{});
      } else {
        allow(fi, Kind::Mac, mac);
      }
    } else if (o.kind == OccKind::Name) {
      const std::string name = o.text.empty() ? std::string(reinterpret_cast<const char*>(v), o.len) : std::string(o.text);
      if (ruled) name_value(fi, fd.name, name, std::string(), t);
      else if (protects && !name.empty()) protect(Kind::Name, lower(name), fd.name, FieldRule{});
      else if (!name.empty()) allow(fi, Kind::Name, lower(name));
    } else if (o.kind == OccKind::Bytes) {
      const std::string text(reinterpret_cast<const char*>(v), o.len);
      if (ruled) text_value(fi, fd.name, text, std::string(), t);
      else if (protects && text.size() >= 8 && text.find_first_not_of('\0') != std::string::npos)
        protect(Kind::Text, text, fd.name, FieldRule{});
    }
  }
}

}  // namespace amon::audit
