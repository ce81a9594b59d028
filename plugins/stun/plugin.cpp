// STUN and TURN as protocol plugins (plugins/core/protocol.h), over UDP
// and over TCP: every transport address an attribute carries is an
// address of the network, taking the rule of its role as the same address
// would in an IP header (one address, one treatment: the mapped address a
// server reflects is the client's, rewritten as the client's header is);
// XOR-ed ones are rewritten in clear and XOR-ed again (ProtoOcc::coded).
// USERNAME (a TURN user's long-term credential name, an ICE fragment) is
// stun.username. A message with the magic cookie is recognised on any port.
#include "amon_stun.hpp"
#include "bytes.h"

namespace amon::stun_plugin {

namespace {

void register_fields(Registry& r) {
  r.add_field({"stun.username", ValueType::Bytes, "stun", FieldRole::Identifier, "",
               "the USERNAME attribute of a STUN/TURN request: a TURN user's long-term credential name, or ICE's "
               "username fragments. The transport addresses of the address attributes (XOR-MAPPED-ADDRESS, "
               "XOR-PEER-ADDRESS, XOR-RELAYED-ADDRESS, MAPPED-ADDRESS, ...) have no field: each takes the rule "
               "of its role, as the same address in an IP header",
               {}});
}

struct State {
  FieldId user = Registry::instance().field("stun.username")->id;
  Parsed r;
};

void* make_state() { return new State; }
void free_state(void* s) { delete static_cast<State*>(s); }

ProtoStatus occurrences(State& s, const uint8_t* p, ProtoOccs& out) {
  for (unsigned i = 0; i < s.r.n_addr; ++i) {
    const Parsed::Addr& a = s.r.addr[i];
    ProtoOcc x;
    x.role = true;
    x.kind = a.at.len == 4 ? OccKind::Addr4 : OccKind::Addr6;
    x.off = a.at.off, x.len = a.at.len;
    if (a.coded) x.coded = true, x.key = a.key;
    // An unset address (all zero, as sent) names nobody.
    bool zero = true;
    for (uint32_t k = 0; k < a.at.len; ++k) zero = zero && (p[a.at.off + k] ^ (a.coded ? p[a.key + k] : 0)) == 0;
    if (zero) continue;
    if (!out.add(x)) return ProtoStatus::Malformed;
  }
  for (unsigned i = 0; i < s.r.n_user; ++i) {
    ProtoOcc x;
    x.field = s.user, x.kind = OccKind::Bytes, x.off = s.r.user[i].off, x.len = s.r.user[i].len;
    if (!out.add(x)) return ProtoStatus::Malformed;
  }
  return ProtoStatus::Parsed;
}

ProtoStatus parse_with(void* vs, const ProtoPacket& pkt, ProtoOccs& out, bool stream) {
  State& s = *static_cast<State*>(vs);
  const bool classic = pkt.sport == kPort || pkt.dport == kPort;
  switch (parse(pkt.payload, pkt.len, stream, classic, s.r)) {
    case Result::NotStun: return ProtoStatus::None;
    case Result::Malformed: return pkt.cut_short ? ProtoStatus::Incomplete : ProtoStatus::Malformed;
    case Result::Incomplete:
      out.hold = stream;
      return ProtoStatus::Incomplete;
    case Result::Ok: break;
  }
  return occurrences(s, pkt.payload, out);
}

// After the addresses' rules: the FINGERPRINTs that verified as they came
// verify again (one that did not stays wrong).
bool finish(void* vs, uint8_t* p, uint32_t) {
  const State& s = *static_cast<const State*>(vs);
  for (unsigned i = 0; i < s.r.n_finger; ++i) {
    const Parsed::Finger& f = s.r.finger[i];
    const uint32_t c = fingerprint(p, f.msg, f.attr);
    for (int k = 0; k < 4; ++k) p[f.attr + 4 + k] = uint8_t(c >> (24 - 8 * k));
  }
  return true;
}

ProtoStatus parse_udp(void* vs, const ProtoPacket& pkt, ProtoOccs& out) { return parse_with(vs, pkt, out, false); }
ProtoStatus parse_tcp(void* vs, const ProtoPacket& pkt, ProtoOccs& out) { return parse_with(vs, pkt, out, true); }

// Any port: the header's shape and the magic cookie. Cheap enough to run
// on every datagram nothing else recognised.
bool probe(const uint8_t* p, uint32_t len, uint16_t, uint16_t) { return has_cookie(p, len) && 20u + rd16(p + 2) == len; }

// A stream that starts with a STUN message: its header's first two bits
// zero, the cookie at byte 4.
const char* const kPatterns[] = {"^[\\x00-\\x3f][\\x00-\\xff][\\x00-\\xff][\\x00\\x04\\x08\\x0c\\x10\\x14\\x18\\x1c"
                                 "\\x20\\x24\\x28\\x2c\\x30\\x34\\x38\\x3c\\x40\\x44\\x48\\x4c\\x50\\x54\\x58\\x5c"
                                 "\\x60\\x64\\x68\\x6c\\x70\\x74\\x78\\x7c\\x80\\x84\\x88\\x8c\\x90\\x94\\x98\\x9c"
                                 "\\xa0\\xa4\\xa8\\xac\\xb0\\xb4\\xb8\\xbc\\xc0\\xc4\\xc8\\xcc\\xd0\\xd4\\xd8\\xdc"
                                 "\\xe0\\xe4\\xe8\\xec\\xf0\\xf4\\xf8\\xfc]\\x21\\x12\\xa4\\x42",
                                 nullptr};

const ProtocolPlugin kUdp = {
    .name = "stun",
    .l4_proto = 17,
    .register_fields = register_fields,
    .ports = {kPort},
    .probe = probe,
    .probe_always = true,
    .role_addresses = true,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_udp,
    .finish = finish,
};

const ProtocolPlugin kTcp = {
    .name = "stun-tcp",
    .l4_proto = 6,
    .ports = {kPort},
    .patterns = kPatterns,
    .server_ports = {kPort},
    .holds = true,
    .role_addresses = true,
    .carries = "stun",
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_tcp,
    .finish = finish,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kUdp; }
const ProtocolPlugin& tcp_protocol_plugin() { return kTcp; }

}  // namespace amon::stun_plugin
