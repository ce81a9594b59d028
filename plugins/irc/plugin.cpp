// IRC as a protocol plugin (TCP 6667; no field of its own): the address a
// CTCP DCC request names takes the rule of its role, as the same address
// would in an IP header (the sender's own, as its header has it), written
// back in its form at its length (ProtoOcc::form). A request the segment
// cuts is held until its line is whole; one that cannot be read fails
// closed where the policy protects addresses.
#include "amon_irc.hpp"

namespace amon::irc {

namespace {

struct State {
  Parsed r;
};

void* make_state() { return new State; }
void free_state(void* s) { delete static_cast<State*>(s); }

ProtoStatus parse_packet(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  // The direction's first segment must start a line: a capture that began
  // inside one would show its rest (a request's address and port, with the
  // "DCC" before them unseen) as a line of its own.
  const uint8_t first = pkt.from_initiator ? 1 : 2;
  if (pkt.flow_state && !(pkt.flow_state[0] & first)) {
    if (!line_start(pkt.payload, pkt.len)) return ProtoStatus::Malformed;
    pkt.flow_state[0] |= first;
  }
  switch (parse(pkt.payload, pkt.len, s.r)) {
    case Result::Malformed: return ProtoStatus::Malformed;
    case Result::Incomplete:
      // Nothing more will come with these bytes (the stream ended, a gap):
      // the lines before the cut request are rewritten, the request from
      // its \x01 on leaves masked.
      if (!pkt.ends) {
        out.hold = !pkt.cut_short;
        return ProtoStatus::Incomplete;
      }
      out.mask_from = s.r.open_dcc;
      break;
    case Result::Ok: break;
  }
  for (unsigned i = 0; i < s.r.n; ++i) {
    const Addr& a = s.r.addr[i];
    ProtoOcc o;
    o.role = true;
    o.kind = a.family == 4 ? OccKind::Addr4 : OccKind::Addr6;
    o.form = a.form;
    o.off = a.off, o.len = a.len;
    o.index = uint16_t(i);
    if (!out.add(o)) return ProtoStatus::Malformed;
  }
  return ProtoStatus::Parsed;
}

// After a gap the stream resumes only where a line starts for certain.
bool message_start(const uint8_t* p, uint32_t len, bool) { return line_start(p, len); }

// IRC on other ports (6660-6669, 7000, 8000 and whatever a network
// chooses): a stream is IRC by how its first segment starts, the client's
// registration or the server's first lines. Strict on purpose: FTP and
// POP3 send `USER name` too, with one argument, never RFC 1459's four with
// a trailing `:`; a server's line is a prefix, then a numeric or NOTICE.
const char* const kPatterns[] = {
    "^(CAP (LS|REQ)|NICK [^ \\r\\n]+\\r?\\n|USER [^ \\r\\n]+ [^ \\r\\n]+ [^ \\r\\n]+ :)",
    "^PASS [^\\r\\n]+\\r?\\n(NICK|USER|CAP) ",
    "^(:[^ \\r\\n]+ )?NOTICE (\\*|AUTH|[^ \\r\\n]+) :",
    "^:[^ \\r\\n]+ [0-9]{3} [^ \\r\\n]+ ",
    nullptr};

const ProtocolPlugin kPlugin = {
    .name = "irc",
    .l4_proto = 6,
    .ports = {kPort},
    .patterns = kPatterns,
    .holds = true,
    .role_addresses = true,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_packet,
    .ordered = true,
    .message_start = message_start,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::irc
