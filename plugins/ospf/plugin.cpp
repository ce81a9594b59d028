// OSPF as a protocol plugin of IP protocol 89 (no field of its own: every
// address it finds takes its role's rule). After the rewrite, an LSA whose
// Fletcher checksum was right gets it computed again, and the packet's
// checksum follows its bytes (one that was wrong stays wrong by as much;
// OSPFv2's cryptographic authentication computes none).
#include <algorithm>

#include "amon_ospf.hpp"
#include "bytes.h"
#include "checksum.h"

namespace amon::ospf_plugin {

namespace {

struct State {
  Parsed r;
  uint16_t sum = 0;  // of the packet as it came
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

// A prefix keeps its bits past its length zero (RFC 5340 A.4.1).
void after_action(void*, uint8_t* p, const ProtoOcc& o) {
  zero_past_prefix(p + o.off, o.len, p[o.off - 4]);
}

bool finish(void* vs, uint8_t* p, uint32_t) {
  const State& s = *static_cast<const State*>(vs);
  for (unsigned i = 0; i < s.r.n_lsa; ++i) {
    uint8_t* l = p + s.r.lsa[i];
    wr16(l + 16, lsa_checksum(l, rd16(l + 18)));
  }
  if (!(s.r.version == 2 && rd16(p + 14) == 2)) csum_update_field(p + 12, s.sum, p, s.r.len);
  return true;
}

const ProtocolPlugin kPlugin = {
    .name = "ospf",
    .l4_proto = kProto,
    .pseudo_csum_v6 = 12,
    .role_addresses = true,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_packet,
    .after_action = after_action,
    .finish = finish,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::ospf_plugin
