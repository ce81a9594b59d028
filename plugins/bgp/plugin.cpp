// BGP as a protocol plugin of TCP 179 (no field of its own: every address
// it finds takes its role's rule). A message that runs on past its segment
// holds the segment until the rest comes (the runtime's stream holding);
// one that cannot be completed is cut, and the direction resumes at a
// segment that starts with a message header. The flow's state keeps what
// its OPENs negotiated of ADD-PATH, and what its UPDATEs showed of it when
// the OPENs were not seen.
#include "amon_bgp.hpp"

namespace amon::bgp_plugin {

namespace {

// ProtoPacket::flow_state: [0] bit d: direction d's OPEN seen (0: from
// the initiator); [1 + d]: its ADD-PATH capabilities (Parsed::addpath);
// [3 + d]: the PathIds of direction d's UPDATEs.
static_assert(kAppStateBytes >= 5);

struct State {
  Parsed r;
};

void* make_state() { return new State; }
void free_state(void* s) { delete static_cast<State*>(s); }

// Each span a role occurrence (role_addrs.h), a prefix's fix-up wherever
// its length leaves bits of its last byte.
ProtoStatus parse_packet(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  const int dir = pkt.from_initiator ? 0 : 1;
  uint8_t* fs = pkt.flow_state;
  uint8_t modes = fs ? fs[3 + dir] : 0;
  const Result res = parse(pkt.payload, pkt.len, modes, s.r);
  if (res == Result::Malformed) return pkt.cut_short ? ProtoStatus::Incomplete : ProtoStatus::Malformed;
  if (fs) {
    fs[3 + dir] = modes;
    if (s.r.open) {
      fs[0] |= uint8_t(1u << dir);
      fs[1 + dir] = s.r.addpath;
      if ((fs[0] & 3) == 3) fs[3] = negotiated(fs[1], fs[2]), fs[4] = negotiated(fs[2], fs[1]);
    }
  }
  if (res == Result::Cut) {
    if (pkt.cut_short) return ProtoStatus::Incomplete;
    if (pkt.ends) {
      // Nothing more will come: the whole messages are rewritten, the one
      // cut leaves masked.
      out.mask_from = s.r.end;
      return role_occurrences(s.r.addrs, pkt.payload, out, false, s.r.bits);
    }
    out.hold = true;
    out.need = s.r.need;
    return ProtoStatus::Incomplete;
  }
  return role_occurrences(s.r.addrs, pkt.payload, out, false, s.r.bits);
}

// A prefix keeps its bits past its length (the byte before it) zero.
void after_action(void*, uint8_t* p, const ProtoOcc& o) {
  zero_past_prefix(p + o.off, o.len, p[o.off - 1]);
}

bool starts(const uint8_t* p, uint32_t len, bool) { return message_start(p, len); }

const ProtocolPlugin kPlugin = {
    .name = "bgp",
    .l4_proto = 6,
    .ports = {kPort},
    .holds = true,
    .role_addresses = true,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_packet,
    .after_action = after_action,
    .message_start = starts,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::bgp_plugin
