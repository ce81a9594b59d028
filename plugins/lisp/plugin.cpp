// LISP control messages as a protocol plugin (UDP 4342; no field of its
// own: every EID and locator takes its role's rule). The UDP checksum
// follows the payload's rewrite (the runtime's), the messages'
// authentication data is left as it came (a keyed digest: it no longer
// verifies, as it could not without the key).
#include "amon_lisp.hpp"

namespace amon::lisp_plugin {

namespace {

struct State {
  Parsed r;
};

void* make_state() { return new State; }
void free_state(void* s) { delete static_cast<State*>(s); }

ProtoStatus parse_packet(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  if (parse(pkt.payload, pkt.len, s.r) != Result::Ok)
    return pkt.cut_short ? ProtoStatus::Incomplete : ProtoStatus::Malformed;
  return role_occurrences(s.r.addrs, pkt.payload, out);
}

const ProtocolPlugin kPlugin = {
    .name = "lisp",
    .l4_proto = 17,
    .ports = {kPort},
    .role_addresses = true,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_packet,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::lisp_plugin
