// The NetBIOS datagram service as a protocol plugin (plugins/core/protocol.h).
// Its own plugin, not one carrying DNS: its datagrams are no DNS messages,
// and `proto in {dns}` must go on meaning DNS's ports only.
//
// The names are a device's and its workgroup's, as the NBNS names of the
// same host: decided on the same encoded form (32 lowercase letters), so a
// name counts as one value on 137 and 138, and written back in first-level
// encoding at the same length. With no rule of their own, they take the
// DNS name rules, as the same names do on NBNS, else the device host
// name's rule (FieldDesc::split_from: dns.qname, then dhcp.hostname), as
// the device names of mDNS, LLMNR and NBNS do where no DNS name rule applies.
// The header's source IP takes the packet's own address treatment (a role
// occurrence), parsed wherever a policy protects addresses. The user data,
// a browser message, repeats host and workgroup names (decided as the
// name service's <00> names, written plain) and may carry a comment (the
// same rule on its bytes, length kept): a policy that protects the names
// leaves none of it in clear. Other user data fails closed.
#include <cctype>
#include <cstring>

#include "amon_names.hpp"
#include "amon_netbios.hpp"

namespace amon::netbios_plugin {

namespace {

void register_fields(Registry& r) {
  r.add_field({"netbios.name", ValueType::Name, "netbios", FieldRole::Identifier, "domain",
               "NetBIOS datagram source and destination names (a host, a workgroup), first-level encoded",
               {"dhcp.hostname"}, kNoField, 0, false, false, {"dns.qname", "dhcp.hostname"}});
}

// A worker's parse state: the fields' ids and the names' texts as the
// runtime decides them (lowercase encoded), valid until the next parse.
struct State {
  static constexpr unsigned kNames = 2 + Datagram::kMaxValues;
  FieldId name = Registry::instance().field("netbios.name")->id;
  char text[kNames][kEncodedLen];
  char shown[kNames][16];
};

// A name's value: its first-level encoding in lowercase (RFC 1001 14.1),
// the value NBNS decides the same name on.
void encoded_text(const uint8_t raw[16], char* out) {
  uint8_t e[kEncodedLen];
  encode_name(raw, e);
  for (uint32_t i = 0; i < kEncodedLen; ++i) out[i] = char(e[i] | 0x20);
}

void* make_state() { return new State; }
void free_state(void* s) { delete static_cast<State*>(s); }

ProtoStatus parse(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  // A datagram cut by the capture may have lost part of a name.
  if (pkt.cut_short) return ProtoStatus::Incomplete;
  Datagram g;
  // On the service's port, anything else is malformed: a consumer that
  // protects the fields fails closed.
  if (!parse_datagram(pkt.payload, pkt.len, g)) return ProtoStatus::Malformed;
  ProtoOcc a;
  a.kind = OccKind::Addr4, a.role = true, a.off = g.src_ip, a.len = 4;
  bool ok = out.add(a);
  for (uint32_t k = 0; k < g.n_names; ++k) {
    for (uint32_t i = 0; i < kEncodedLen; ++i) s.text[k][i] = char(pkt.payload[g.name_off[k] + i] | 0x20);
    ProtoOcc o;
    o.field = s.name, o.kind = OccKind::Name, o.off = g.name_off[k], o.len = kEncodedLen, o.index = uint16_t(k);
    o.text = std::string_view(s.text[k], kEncodedLen);
    // The 15 characters without their padding: how a host's name is
    // written elsewhere (an agent's report, a share path).
    uint8_t plain[16];
    decode_name(pkt.payload + g.name_off[k], plain);
    unsigned n = 15;
    while (n && plain[n - 1] == ' ') --n;
    std::memcpy(s.shown[k], plain, n);
    o.shown = std::string_view(s.shown[k], n);
    ok = ok && out.add(o);
  }
  // The browser message's names: a host's (or a workgroup's) as its NBNS
  // registration of suffix <00> writes it (NetBIOS names are upper case),
  // so the message's name and the name service's are one value. A name
  // longer than NetBIOS allows, and a comment, take the rule on their bytes.
  for (uint32_t k = 0; k < g.n_values; ++k) {
    const Datagram::Value& v = g.values[k];
    ProtoOcc o;
    o.field = s.name, o.off = v.off, o.len = v.len, o.index = uint16_t(2 + k);
    if (v.comment || v.len > 15) {
      o.kind = OccKind::Bytes;
    } else {
      const uint32_t i = 2 + k;
      uint8_t raw[16];
      for (uint32_t j = 0; j < 15; ++j) raw[j] = j < v.len ? uint8_t(std::toupper(pkt.payload[v.off + j])) : ' ';
      raw[15] = 0x00;
      encoded_text(raw, s.text[i]);
      std::memcpy(s.shown[i], pkt.payload + v.off, v.len);
      o.kind = OccKind::Name;
      o.text = std::string_view(s.text[i], kEncodedLen);
      o.shown = std::string_view(s.shown[i], v.len);
    }
    ok = ok && out.add(o);
  }
  return ok ? ProtoStatus::Parsed : ProtoStatus::Malformed;
}

// The decision on the name's 15 characters (its padding and its type
// suffix kept), re-encoded: every result decodes as a NetBIOS name again.
// A browser message's name is written plain: the decision on its
// characters, in place.
void rewrite_name(void*, uint8_t* payload, const ProtoOcc& o, const names::Decision& d) {
  if (o.index >= 2) return names::apply_to_text(reinterpret_cast<char*>(payload + o.off), o.len, d);
  uint8_t name[16];
  decode_name(payload + o.off, name);
  unsigned n = 15;
  while (n && name[n - 1] == ' ') --n;
  names::apply_to_text(reinterpret_cast<char*>(name), n, d);
  encode_name(name, payload + o.off);
}

const ProtocolPlugin kPlugin = {
    .name = "netbios",
    .l4_proto = 17,
    .register_fields = register_fields,
    .ports = {kPort},
    .role_addresses = true,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse,
    .rewrite_name = rewrite_name,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::netbios_plugin
