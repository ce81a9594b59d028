// The Mobility Header as a protocol plugin of IP protocol 135 (no field of
// its own: every address it finds takes its role's rule). After the
// rewrite, option data that names the node otherwise is zeroed and the
// checksum follows the bytes (one that was wrong stays wrong by as much);
// the runtime carries the header addresses' rewrite into its IPv6
// pseudo-header.
#include <algorithm>
#include <cstring>

#include "amon_mip6.hpp"
#include "checksum.h"

namespace amon::mip6_plugin {

namespace {

struct State {
  Parsed r;
  uint16_t sum = 0;  // of the message as it came
};

void* make_state() { return new State; }
void free_state(void* s) { delete static_cast<State*>(s); }

ProtoStatus parse_packet(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  if (parse(pkt.payload, pkt.len, s.r) != Result::Ok)
    return pkt.cut_short ? ProtoStatus::Incomplete : ProtoStatus::Malformed;
  s.sum = csum_sum({pkt.payload, s.r.len});
  return role_occurrences(s.r.addrs, pkt.payload, out, true);
}

// A prefix keeps its bits past its length zero (RFC 3963 6.2, RFC 5213 8.3).
void after_action(void*, uint8_t* p, const ProtoOcc& o) {
  zero_past_prefix(p + o.off, o.len, p[o.off - 1]);
}

bool finish(void* vs, uint8_t* p, uint32_t) {
  const State& s = *static_cast<const State*>(vs);
  for (unsigned i = 0; i < s.r.n_zero; ++i) std::memset(p + s.r.zero[i].off, 0, s.r.zero[i].len);
  csum_update_field(p + 4, s.sum, p, s.r.len);
  return true;
}

const ProtocolPlugin kPlugin = {
    .name = "mip6",
    .l4_proto = kProto,
    .pseudo_csum_v6 = 4,
    .role_addresses = true,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_packet,
    .after_action = after_action,
    .finish = finish,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::mip6_plugin
