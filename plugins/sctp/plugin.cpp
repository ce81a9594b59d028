// SCTP as a protocol plugin of IP protocol 132 (no field of its own: every
// address it finds takes its role's rule). The CRC32c follows the
// rewrite: a checksum that was right stays right, a wrong one stays wrong
// by as much (CRC32c is linear: the difference of the two computations is
// carried over).
#include "amon_sctp.hpp"

namespace amon::sctp_plugin {

namespace {

struct State {
  Parsed r;
  uint32_t crc = 0;  // of the packet as it came, when it holds addresses
};

void* make_state() { return new State; }
void free_state(void* s) { delete static_cast<State*>(s); }

ProtoStatus parse_packet(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  if (parse(pkt.payload, pkt.len, pkt.src, pkt.dst, pkt.addr_len, s.r, pkt.cut_short) != Result::Ok)
    return pkt.cut_short ? ProtoStatus::Incomplete : ProtoStatus::Malformed;
  if (!s.r.addrs.n) return ProtoStatus::None;
  s.crc = checksum(pkt.payload, pkt.len);
  return role_occurrences(s.r.addrs, pkt.payload, out);
}

bool finish(void* vs, uint8_t* p, uint32_t len) {
  const State& s = *static_cast<const State*>(vs);
  if (len < 12) return true;
  const uint32_t now = checksum(p, len);
  if (now == s.crc) return true;
  for (int k = 0; k < 4; ++k) p[8 + k] ^= uint8_t((s.crc ^ now) >> (8 * k));
  return true;
}

const ProtocolPlugin kPlugin = {
    .name = "sctp",
    .l4_proto = kProto,
    .role_addresses = true,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_packet,
    .finish = finish,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::sctp_plugin
