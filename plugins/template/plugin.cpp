// The template protocol as a protocol plugin (plugins/core/protocol.h): its
// field declared, its datagrams recognised by port, parsed into one Name
// occurrence, and the name's decision written back. The occurrences of a
// parse are also its values for amon audit and amon whatif: a plugin that
// leaves its rewrite to the runtime, as this one, needs no `values` hook.
#include <cctype>

#include "amon_names.hpp"
#include "amon_template.hpp"

namespace amon::template_plugin {

namespace {

void register_fields(Registry& r) {
  // A host name: decided with the other names (value class "domain"), so a
  // z-anonymity rule counts it with DNS, SNI and Host names.
  r.add_field({"template.host", ValueType::Name, "template", FieldRole::QuasiIdentifier, "domain",
               "the host name a client announces in a HELLO", {"dns.qname"}});
}

// A worker's parse state: the field's id, and the name's text as the
// runtime decides it (lowercase), valid until the next parse.
struct State {
  FieldId host = Registry::instance().field("template.host")->id;
  char text[253];
};

void* make_state() { return new State; }
void free_state(void* s) { delete static_cast<State*>(s); }

ProtoStatus parse(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  // A datagram cut by the capture may have lost part of the name.
  if (pkt.cut_short) return ProtoStatus::Incomplete;
  Span h;
  // On the protocol's port, anything else is malformed: a consumer that
  // protects the field fails closed.
  if (!find_host(pkt.payload, pkt.len, h)) return ProtoStatus::Malformed;
  if (!h.len) return ProtoStatus::Parsed;
  for (uint32_t i = 0; i < h.len; ++i)
    s.text[i] = char(std::tolower(static_cast<unsigned char>(pkt.payload[h.off + i])));
  ProtoOcc o;
  o.field = s.host, o.kind = OccKind::Name, o.off = h.off, o.len = h.len;
  o.text = std::string_view(s.text, h.len);
  return out.add(o) ? ProtoStatus::Parsed : ProtoStatus::Malformed;
}

// The runtime decided the name (keep, mask, redact, z-anonymity): written
// in place, at its length.
void rewrite_name(void*, uint8_t* payload, const ProtoOcc& o, const names::Decision& d) {
  names::apply_to_text(reinterpret_cast<char*>(payload + o.off), o.len, d);
}

const ProtocolPlugin kPlugin = {
    .name = "template",
    .l4_proto = 17,
    .register_fields = register_fields,
    .ports = {kPort},
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse,
    .rewrite_name = rewrite_name,
    // Over TCP, `.message_start` (protocol.h): the strict test of a segment
    // that starts a message, where the stream resumes after a capture gap
    // instead of staying cut to its end. A datagram protocol needs none.
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::template_plugin
