// QUIC as a protocol plugin (plugins/core/protocol.h): a long-header
// datagram on any port; the client's Initials decrypted once per datagram
// and their ClientHello's server names located as tls.sni occurrences; a
// consumer whose names differ gets its copy re-encrypted (finish).
#include <cstring>

#include "amon_quic.hpp"
#include "protocol.h"

namespace amon::quic {

namespace {

struct State {
  Crypto crypto;  // the worker's OpenSSL contexts and key caches
  Datagram d;     // the datagram's decrypted Initials, shared by the consumers
  // A consumer's decisions, by name: Keep unless rewrite_name said
  // otherwise; finish() uses them and puts them back to Keep.
  names::Decision dec[Datagram::kMaxNames];
  bool changed = false;
  FieldId sni = kNoField;
};
static_assert(sizeof(FlowState) <= kAppStateBytes, "QUIC's flow state exceeds the per-flow budget");

void* make_state() {
  auto* s = new State;
  s->sni = Registry::instance().field("tls.sni")->id;
  return s;
}
void free_state(void* s) { delete static_cast<State*>(s); }

// Form and fixed bits, and a known version (v1, v2, drafts, or 0 for
// version negotiation); Google QUIC ('Q0xx', 'T0xx') too, and anything
// long-header on 443.
bool probe_long_header(const uint8_t* pl, uint32_t avail, uint16_t sport, uint16_t dport) {
  if (avail < 7 || (pl[0] & 0xc0) != 0xc0) return false;
  const uint32_t v = uint32_t(pl[1]) << 24 | uint32_t(pl[2]) << 16 | uint32_t(pl[3]) << 8 | pl[4];
  const bool gquic = (pl[1] == 'Q' || pl[1] == 'T') && pl[2] == '0';
  const bool port = sport == 443 || dport == 443 || sport == 8443 || dport == 8443;
  return v == kVersion1 || v == kVersion2 || (v >> 8) == 0xff0000 || (v >> 4) == 0xfaceb00 || v == 0 ||
         (v & 0x0f0f0f0f) == 0x0a0a0a0a || gquic || port;
}

// Datagrams that can hold no client name (1-RTT, Handshake, 0-RTT, Retry,
// the server's Initials, ACK-only Initials) pass; anything not understood
// fails closed.
ProtoStatus parse_packet(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  FlowState qs;
  if (pkt.flow_state) std::memcpy(&qs, pkt.flow_state, sizeof qs);
  // One direction of the flow: keys its remembered DCID per worker.
  uint64_t fk = 0x9e3779b97f4a7c15ULL ^ (uint64_t(pkt.sport) << 16 | pkt.dport);
  for (uint32_t i = 0; i < pkt.addr_len; ++i) fk = (fk ^ pkt.src[i]) * 0x100000001b3ULL;
  for (uint32_t i = 0; i < pkt.addr_len; ++i) fk = (fk ^ pkt.dst[i]) * 0x100000001b3ULL;
  const Status st = analyze(pkt.payload, pkt.len, pkt.from_initiator ? 0 : 1, fk | 1, s.crypto, qs, s.d);
  if (pkt.flow_state) std::memcpy(pkt.flow_state, &qs, sizeof qs);
  switch (st) {
    case Status::None: return ProtoStatus::None;
    case Status::Incomplete: return ProtoStatus::Incomplete;
    case Status::Malformed: return ProtoStatus::Malformed;
    case Status::Located: break;
  }
  for (unsigned i = 0; i < s.d.n_names; ++i) {
    ProtoOcc o;
    // The name lives in the encrypted CRYPTO stream: no payload bytes of
    // its own, only its text (and rewrite_name).
    o.field = s.sni, o.kind = OccKind::Name, o.index = uint16_t(i), o.text = s.d.name_text(i);
    if (!out.add(o)) return ProtoStatus::Malformed;
  }
  return ProtoStatus::Parsed;
}

void rewrite_name_occ(void* vs, uint8_t*, const ProtoOcc& o, const names::Decision& d) {
  State& s = *static_cast<State*>(vs);
  s.dec[o.index] = d;
  s.changed = true;
}

// Re-encrypted only when this consumer's names differ.
bool finish(void* vs, uint8_t* payload, uint32_t len) {
  State& s = *static_cast<State*>(vs);
  if (!s.changed) return true;
  const bool ok = rewrite(payload, len, s.d, s.dec, s.crypto);
  for (auto& x : s.dec) x = names::Decision::keep();
  s.changed = false;
  return ok;
}

const ProtocolPlugin kPlugin = {
    .name = "quic",
    .l4_proto = 17,
    .probe = probe_long_header,
    .probe_always = true,
    .carries = "tls",
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_packet,
    .rewrite_name = rewrite_name_occ,
    .finish = finish,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::quic
