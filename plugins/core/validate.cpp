// What Registry::add_protocol refuses: a descriptor the runtime would call
// through a null pointer at the first packet, or one whose values the
// tools that check a policy's output (amon audit, amon whatif) could not
// read. Each rule is one requirement protocol.h states beside the member;
// refusing at start-up, with the rule named, is what keeps a plugin's
// mistake from becoming a crash or a silent leak.
#include <string>

#include "protocol.h"

namespace amon {

namespace {

std::string field_protocol(const ProtocolPlugin& p) { return p.carries ? p.carries : p.name; }

bool has_port(const ProtocolPlugin& p, uint16_t port) {
  for (uint16_t q : p.ports) {
    if (!q) break;
    if (q == port) return true;
  }
  return false;
}

// The UDP shortcut takes a datagram on its ports before anything else
// looks at it: a second shortcut would never run, and another plugin's
// port shared with a shortcut would never reach that plugin.
std::string shortcut_problem(const ProtocolPlugin& p, const Registry& r) {
  if (p.l4_proto != 17) return {};
  for (const ProtocolPlugin* o : r.protocols()) {
    if (o->l4_proto != 17 || !(p.shortcut || o->shortcut)) continue;
    if (p.shortcut && o->shortcut) return std::string("a second UDP shortcut (") + o->name + " has the one the runtime takes)";
    for (uint16_t q : p.ports) {
      if (!q) break;
      if (has_port(*o, q))
        return "UDP port " + std::to_string(q) + " is also " + o->name + "'s, and a shortcut takes every datagram on its ports";
    }
  }
  return {};
}

}  // namespace

std::string plugin_problem(const ProtocolPlugin& p, const Registry& r) {
  if (p.l4_proto != 6 && p.l4_proto != 17) {
    if (!ip_message_proto(p.l4_proto))
      return "l4_proto is " + std::to_string(p.l4_proto) +
             "; it must be 6 (TCP), 17 (UDP) or an IP protocol whose payload no decoder reads";
    // Recognised by the protocol number alone: nothing else would be asked.
    if (p.ports[0] || p.probe || p.patterns || p.server_ports[0] || p.holds || p.ordered || p.shortcut ||
        p.payload_field)
      return "an IP protocol's plugin with ports, probes, patterns, payload or stream options (its packets are "
             "recognised by the protocol number alone)";
    for (const ProtocolPlugin* o : r.protocols())
      if (o->l4_proto == p.l4_proto)
        return "IP protocol " + std::to_string(p.l4_proto) + " is " + o->name + "'s already";
  }
  if (!p.parse) return "no parse";
  // The runtime makes and frees every plugin's state for each worker.
  if (!p.make_state || !p.free_state) return "make_state and free_state must both be set";
  if (!!p.make_consumer != !!p.free_consumer) return "make_consumer and free_consumer must be set together";
  if (p.rewrite && !p.values)
    return "rewrite without values: amon audit and amon whatif would read none of its values";
  if (p.ordered && !p.message_start) return "ordered without message_start (where a stream resumes after a gap)";
  if (p.ordered && p.l4_proto != 6) return "ordered on a transport other than TCP";
  if (p.message_start) {
    if (p.l4_proto != 6) return "message_start on a transport other than TCP (it resumes a TCP stream)";
    // The least a strict test refuses: no bytes, or one byte of anything.
    static const uint8_t kOne[1] = {0};
    if (p.message_start(kOne, 0, true) || p.message_start(kOne, 0, false) || p.message_start(kOne, 1, true) ||
        p.message_start(kOne, 1, false))
      return "message_start accepts an empty or one-byte segment (it must recognise a whole message start)";
  }
  // A parse may leave a message's payload open (ProtoOccs::payload_open)
  // wherever the protocol has a payload field.
  if (p.payload_field && !p.payload_ends)
    return "payload_field without payload_ends (where an open payload ends)";
  if (p.shortcut) {
    if (p.l4_proto != 17) return "shortcut on a transport other than UDP";
    if (!p.rewrite) return "shortcut without rewrite (a shortcut datagram is rewritten by the plugin alone)";
    if (!p.ports[0]) return "shortcut without ports";
  }
  if (p.parse_datagram && !p.shortcut) return "parse_datagram without shortcut";
  if (p.pseudo_csum_v6 && !ip_message_proto(p.l4_proto))
    return "pseudo_csum_v6 on TCP or UDP (the runtime keeps their checksums itself)";
  return shortcut_problem(p, r);
}

std::string plugin_fields_problem(const ProtocolPlugin& p, const Registry& r) {
  const std::string proto = field_protocol(p);
  if (p.payload_field) {
    const FieldDesc* f = r.field(p.payload_field);
    if (!f || f->protocol != proto)
      return std::string("payload_field ") + p.payload_field + " is not a registered field of " + proto;
  }
  for (const FieldDesc& f : r.fields()) {
    if (f.protocol != proto || (p.locates && !p.locates(f.name))) continue;
    const std::string at = "field " + f.name + ": ";
    for (const auto& from : f.split_from) {
      // The catch-all's rules apply to it as they are: same type, and no
      // chain to follow. Another protocol's field is allowed for a value
      // that field already names (a device's host name seen elsewhere).
      const FieldDesc* c = r.field(from);
      if (!c || c->type != f.type || !c->split_from.empty())
        return at + "split from " + from + ", which is no field of its type to take rules from";
    }
    // The runtime writes a name decision back through rewrite_name
    // unless the plugin rewrites its messages itself.
    if (f.type == ValueType::Name && !p.rewrite_name && !p.rewrite)
      return at + "a name field without rewrite_name (or rewrite)";
    // What the audit can collect: values it counts per value class
    // (names, text) need one; addresses it counts as one class; ports and
    // MACs it does not count (no occurrence kind carries a port).
    switch (f.type) {
      case ValueType::Name:
        if (f.value_class.empty()) return at + "a name field without a value class";
        break;
      case ValueType::Port: return at + "a port in the payload: no occurrence kind carries it";
      case ValueType::Addr:
        if (!f.value_class.empty() && f.value_class != "server-addr")
          return at + "value class " + f.value_class + " on an address (addresses are counted as server-addr)";
        break;
      case ValueType::Mac:
        if (!f.value_class.empty()) return at + "a value class on a MAC, which nothing counts";
        break;
      case ValueType::Bytes:
      case ValueType::Text: break;
    }
  }
  return {};
}

}  // namespace amon
