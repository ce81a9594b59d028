// PIM as a protocol plugin of IP protocol 103 (no field of its own: every
// address it finds takes its role's rule). After the rewrite the PIM
// checksum, and a Register's inner IPv4 header checksum, follow the bytes
// they cover (one that was wrong stays wrong by as much).
#include "amon_pim.hpp"
#include "checksum.h"

namespace amon::pim_plugin {

namespace {

struct State {
  Parsed r;
  uint16_t sum = 0, inner_sum = 0;  // as they came
};

void* make_state() { return new State; }
void free_state(void* s) { delete static_cast<State*>(s); }

ProtoStatus parse_packet(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  if (parse(pkt.payload, pkt.len, s.r) != Result::Ok)
    return pkt.cut_short ? ProtoStatus::Incomplete : ProtoStatus::Malformed;
  s.sum = csum_sum({pkt.payload, s.r.summed});
  if (s.r.inner) s.inner_sum = csum_sum({pkt.payload + 8, s.r.inner});
  return role_occurrences(s.r.addrs, pkt.payload, out);
}

bool finish(void* vs, uint8_t* p, uint32_t) {
  const State& s = *static_cast<const State*>(vs);
  if (s.r.inner) csum_update_field(p + 8 + 10, s.inner_sum, p + 8, s.r.inner);
  csum_update_field(p + 2, s.sum, p, s.r.summed);
  return true;
}

const ProtocolPlugin kPlugin = {
    .name = "pim",
    .l4_proto = kProto,
    .pseudo_csum_v6 = 2,
    .role_addresses = true,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_packet,
    .finish = finish,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::pim_plugin
