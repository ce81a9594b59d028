// DHCP as a protocol plugin (plugins/core/protocol.h): recognition by its
// ports and magic cookie, the parse turned into field occurrences, and the
// fix-ups that keep names and delegated prefixes well-formed.
#include "amon_dhcp.hpp"
#include "protocol.h"

namespace amon::dhcp {

namespace {

struct State {
  Result r;
  FieldId ids[kNumFields];
  FieldId eth_src = kNoField;
};

void* make_state() {
  auto* s = new State;
  const Registry& reg = Registry::instance();
  for (unsigned i = 0; i < kNumFields; ++i) s->ids[i] = reg.field(field_name(Field(i)))->id;
  if (const FieldDesc* f = reg.field("eth.src")) s->eth_src = f->id;
  return s;
}

void free_state(void* s) { delete static_cast<State*>(s); }

bool all_zero(const uint8_t* p, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

bool probe_v4(const uint8_t* p, uint32_t n, uint16_t, uint16_t) { return probe(p, n) == Version::V4; }

// The Ethernet MAC inside a client identifier or DUID (DUID-LL, DUID-LLT)
// is the same hardware address as the client's chaddr (the server's MAC in
// its frames, for the server DUID): it takes that MAC's rule, so every field
// carrying one MAC shows one pseudonym, and a MAC-shaped value stays a MAC.
// `x` keeps the bytes before it (a DUID-LLT's time), if any.
bool split_mac(const State& s, const Occurrence& o, ProtoOcc& x, ProtoOccs& out) {
  ProtoOcc m = x;
  m.kind = OccKind::Mac, m.off = o.mac_off, m.len = 6, m.carrier = x.field;
  m.field = o.field == Field::ServerId ? s.eth_src : s.ids[unsigned(Field::Chaddr)];
  if (m.field == kNoField || m.off < x.off || m.off + 6u != o.off + o.len) return true;
  x.len = m.off - x.off;
  if (x.len && !out.add(x)) return false;
  x.len = 0;
  return out.add(m);
}

ProtoStatus parse_packet(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  Version v = version_for_ports(pkt.sport, pkt.dport);
  if (v == Version::None) v = probe(pkt.payload, pkt.len);
  if (v == Version::None) return ProtoStatus::None;
  // A datagram cut by the capture: options past the cut would stay unread.
  if (pkt.cut_short) return ProtoStatus::Incomplete;
  // Truncated is a datagram shorter than its header: UDP brings no rest.
  if (parse(pkt.payload, pkt.len, v, s.r) != Status::Ok) return ProtoStatus::Malformed;
  for (unsigned i = 0; i < s.r.n_occ; ++i) {
    const Occurrence& o = s.r.occ[i];
    ProtoOcc x;
    x.field = s.ids[unsigned(o.field)];
    x.index = uint16_t(i);
    x.off = o.off, x.len = o.len;
    // An unset address (0.0.0.0 in a DISCOVER's ciaddr and yiaddr) names
    // nobody, and a pseudonym there would read as an address in use.
    if ((o.kind == Kind::Addr4 || o.kind == Kind::Addr6 || o.kind == Kind::Prefix6) && all_zero(pkt.payload + o.off, o.len))
      continue;
    switch (o.kind) {
      case Kind::Mac: x.kind = OccKind::Mac; break;
      case Kind::Addr4: x.kind = OccKind::Addr4; break;
      case Kind::Addr6: x.kind = OccKind::Addr6; break;
      case Kind::Prefix6: x.kind = OccKind::Addr6, x.fixup = true; break;
      case Kind::NameText:
      case Kind::NameWire: x.kind = OccKind::Name, x.text = s.r.name_text(o); break;
      case Kind::Bytes:
      case Kind::Text:
        // The type tag (DUID type, client-id hardware type, enterprise
        // number) stays, so the message still decodes; the rest is the value.
        if (o.len <= o.tag_len) continue;
        x.kind = OccKind::Bytes, x.off = o.off + o.tag_len, x.len = o.len - o.tag_len;
        if (o.mac_off && !split_mac(s, o, x, out)) return ProtoStatus::Malformed;
        if (x.len == 0) continue;
        break;
    }
    if (!out.add(x)) return ProtoStatus::Malformed;
  }
  // The server's, relays' and services' addresses: a pseudonym for the
  // server in its IP header and its own address in clear in option 54
  // would undo each other, so they take the mapping of their role.
  for (unsigned i = 0; i < s.r.n_role; ++i) {
    const RoleAddr& a = s.r.role[i];
    if (all_zero(pkt.payload + a.off, a.len)) continue;
    ProtoOcc x;
    x.role = true;
    x.kind = a.len == 4 ? OccKind::Addr4 : OccKind::Addr6;
    x.off = a.off, x.len = a.len;
    if (!out.add(x)) return ProtoStatus::Malformed;
  }
  return ProtoStatus::Parsed;
}

void rewrite_name_occ(void* vs, uint8_t* payload, const ProtoOcc& o, const names::Decision& d) {
  const State& s = *static_cast<const State*>(vs);
  rewrite_name(payload, s.r, s.r.occ[o.index], d);
}

void after_action(void* vs, uint8_t* payload, const ProtoOcc& o) {
  const State& s = *static_cast<const State*>(vs);
  fix_prefix(payload, s.r.occ[o.index]);
}

const ProtocolPlugin kPlugin = {
    .name = "dhcp",
    .l4_proto = 17,
    .register_fields = register_fields,
    .ports = {67, 68, 546, 547},
    .probe = probe_v4,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_packet,
    .rewrite_name = rewrite_name_occ,
    .after_action = after_action,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::dhcp
