// The protocol-plugin interface: what an application protocol declares so
// that the runtime (engine/runtime) can recognise its packets, have them
// parsed into field occurrences, apply each occurrence's rule and call the
// protocol's fix-ups, without naming the protocol. One ProtocolPlugin per
// protocol, registered with Registry::add_protocol (plugins/builtin).
//
// Lean on purpose: the runtime calls the plugin once per packet to parse
// and once per changed occurrence for a fix-up (plain function pointers,
// no virtual dispatch per field), and the parse writes into tables made
// once per worker, so the packet path allocates nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "registry.h"

namespace amon {
namespace names {
struct Decision;
}

// How the runtime applies a rule to an occurrence: by the value it holds,
// not by the protocol it came from.
enum class OccKind : uint8_t {
  Name,   // a domain name: one name decision (names::Decision), written back by the plugin's rewrite_name
  Addr4,  // 4 address bytes: the rule's address action
  Addr6,  // 16 address bytes: the rule's address action
  Mac,    // 6 bytes: the rule's MAC action
  Bytes,  // an opaque identifier or text: the rule's byte action, length kept
  // Bytes of a message's payload (an HTTP body, chunk framing included):
  // the rule of the plugin's payload_field, taken once per packet for all
  // of them, applied as a payload rule: cut() zero-fills them and, for the
  // span that runs to the payload's end, ends the record there as snap()
  // does, every length kept. Listed after the packet's other occurrences.
  Payload,
};

// `addr_carrier` (a protocol name in conditions): TCP/UDP ports of
// protocols that carry addresses in their payload, as text or binary, where
// no plugin rewrites them (doc/language.md, "What kept payload still
// carries"), as the parts that know those protocols declared them
// (Registry::add_addr_carrier). The runtime tags such packets; the linter
// warns when a policy that protects addresses delivers their payload.
inline bool addr_carrier_port(uint16_t p) { return addr_carrier_bits[p >> 6] >> (p & 63) & 1; }

// An IP protocol whose payload a plugin may parse whole
// (ProtocolPlugin::l4_proto): not a transport with ports and not one the
// decoder itself reads through (ICMP, ICMPv6, tunnels, IPv6 extension
// headers, ESP/AH, no next header). The Mobility Header (135) ends the
// IPv6 header chain: its messages are a plugin's.
inline bool ip_message_proto(uint8_t p) {
  switch (p) {
    case 0: case 1: case 4: case 6: case 17: case 41: case 43: case 44: case 47: case 50: case 51: case 58: case 59:
    case 60: case 139: case 140: return false;
    default: return true;
  }
}

// How an address occurrence (Addr4/Addr6) is written in the payload.
enum class AddrForm : uint8_t {
  Binary,   // its 4 or 16 bytes
  Text,     // IPv4 as a dotted quad, IPv6 as RFC 4291 text (addr_forms.h reads them)
  Decimal,  // IPv4 as one decimal number of up to 10 digits (IRC's DCC)
};

// One value of a field in the payload. Offsets are from the payload's
// first byte; every occurrence keeps its length whatever the action.
struct ProtoOcc {
  FieldId field = kNoField;
  OccKind kind = OccKind::Bytes;
  bool fixup = false;      // the plugin's after_action wants this occurrence back after its action
  // An address (Addr4/Addr6) of the network, not of a field: it takes the
  // rule of the role it has under the policy, as the same address would in
  // an IP header (an address of this packet's own header: that header's
  // rewrite; inside `clients`: ip.client's rule; else ip.server's). field
  // is unused. Shorter than its family's length (Addr4/Addr6 by kind): a
  // prefix stored in its first `len` bytes, mapped as the address with the
  // rest zero (the plugin's after_action clears the bits past its length).
  bool role = false;
  // ProtocolPlugin::values only: the value repeats one that an earlier
  // message of the same exchange carried (a DNS response's question). A
  // z-anonymity rule decides it as that message had it, without an
  // observation of its own.
  bool repeat = false;
  // Mac only: a hardware address inside a value of field `carrier` (a
  // DHCP client identifier, a DUID). It takes `field`'s rule, the one for
  // that hardware address elsewhere, so one MAC has one pseudonym; with no
  // rule for `field`, the carrier's rule takes its bytes.
  FieldId carrier = kNoField;
  // The value is stored XOR-ed with the `len` bytes at `key` (offset in the
  // payload, outside the value: STUN's XOR-MAPPED-ADDRESS and its kin).
  // The rule applies to the value in clear, written back XOR-ed again; amon
  // audit collects it in clear and looks for it XOR-ed too.
  bool coded = false;
  uint32_t key = 0;
  // Addr4/Addr6 only: the address is written as `len` characters of text
  // in this form. The rule applies to the address it reads as; a changed
  // address is written back in the same form at the same length (the
  // engine's addr_text.h: leading zeros where it is shorter, the zero
  // address where it cannot be that short), so no length or TCP sequence
  // number moves.
  AddrForm form = AddrForm::Binary;
  uint16_t index = 0;      // the plugin's own number for it (its fix-ups get the occurrence back)
  uint32_t off = 0, len = 0;
  std::string_view text;   // Name: the name as dotted lowercase text (decided on this, not on the bytes)
  // Name: the name as people write it, where `text` is an encoding of it
  // (NetBIOS's first-level encoding): the runtime's search of kept payload
  // for the values it hid looks for this form too.
  std::string_view shown;
};

// Occurrences of one parse, in the order the plugin found them. Made once
// per worker (L7Parse), reused for every packet.
struct ProtoOccs {
  // Room for every value an HTTP parse locates (2048) and its body spans.
  static constexpr unsigned kMax = 2048 + 64;
  uint32_t n = 0;
  ProtoOcc occ[kMax];
  // What a parse of a TCP stream says about the bytes after these (all
  // emptied by the caller, read by the runtime's stream holding):
  //  need: Incomplete, or Parsed with rest_clear: bytes of this direction
  //    still to come before the message ends (0: unknown);
  //  hold: Incomplete, and holding the segment until more bytes of this
  //    direction come would let it parse (a header split over segments);
  //  rest_clear: Parsed although the message continues: its fields were
  //    all located here, so the `need` bytes that follow pass (conditions
  //    see its fields as this packet's);
  //  echo: this packet may repeat, where nothing locates it, a value the
  //    flow's earlier fields held (a server's certificate naming the
  //    server): a consumer whose decision hid those values cuts it.
  //  done: this direction of the flow carries nothing more of the
  //    protocol's (TLS after encryption starts): its later packets are
  //    not parsed, as if the parse said None.
  //  payload_left: Parsed although the last message's payload (a body of
  //    a known length) continues: bytes of it still to come. They carry
  //    no field but the payload_field and are not parsed.
  //  payload_open: the last message's payload runs on until a segment
  //    starts a new message (ProtocolPlugin::payload_ends): the segments
  //    between are payload.
  //  mask_from: Parsed from a packet that `ends`: the bytes from here on
  //    are the part of a message the stream cut (a name or value that may
  //    be cut anywhere): located as nothing, they leave masked.
  uint32_t need = 0, payload_left = 0, mask_from = UINT32_MAX;
  bool hold = false, rest_clear = false, echo = false, done = false, payload_open = false;
  void clear() {
    n = 0, need = payload_left = 0, mask_from = UINT32_MAX;
    hold = rest_clear = echo = done = payload_open = false;
  }
  // False when the table is full: the parse must report Malformed (a value
  // left out would leave in clear).
  bool add(const ProtoOcc& o) {
    if (n == kMax) return false;
    occ[n++] = o;
    return true;
  }
};

// What a parse concluded. Anything but Parsed leaves the occurrences
// unusable: a consumer protecting the protocol's fields fails closed
// (on_error, counted as l7_cut); None means the packet holds none of them.
enum class ProtoStatus : uint8_t { None, Parsed, Incomplete, Malformed };

// Bytes of per-flow state an application may keep in every flow-table
// entry (FlowState::app_state): the budget is fixed, as the flow table's
// memory is.
inline constexpr unsigned kAppStateBytes = 12;

struct ProtoPacket {
  const uint8_t* payload;
  uint32_t len;            // captured payload bytes
  uint16_t sport, dport;   // 0 for a stream reassembled from held segments
  // The packet's IP addresses (addr_len 4 or 16; 0 and null when absent).
  const uint8_t* src;
  const uint8_t* dst;
  uint8_t addr_len;
  bool from_initiator;     // the packet travels from the flow's client
  bool cut_short;          // the capture cut the payload: it cannot be parsed to its end
  // The flow's kAppStateBytes of state for its application, zero at the
  // flow's start; null when the packet has no flow. A plugin stores what
  // it needs across packets here, never pointers.
  uint8_t* flow_state;
  // ProtocolPlugin::numbered: the flow's number in this worker (distinct
  // per flow, never 0); 0 when the packet has no flow.
  uint32_t flow_no = 0;
  // No byte after these will be parsed with them (a header held until its
  // stream ended, a gap or a timeout): a plugin that can tell a message's
  // complete parts from the one the stream cut parses the first and says
  // where the cut part begins (ProtoOccs::mask_from); the runtime masks it.
  bool ends = false;
};

// What a plugin that rewrites its messages itself (ProtocolPlugin::rewrite)
// asks of the consumer whose copy it rewrites: the consumer's rule for each
// value, applied by the runtime. A value of a field without a rule is left
// as it came.
class RewriteHost {
 public:
  // The rule's decision on a name of field f. The same name again within
  // one message (next_message() starts one) gets the same decision, not a
  // second z-anonymity observation. `exchange`: the name is the one
  // open_exchange named, decided as the exchange's first message had it.
  // `shown`: the name as people write it where `text` is an encoding of it
  // (an NBNS name's 15 characters, ProtoOcc::shown): the runtime's search
  // of kept payload for the names it hid looks for it too.
  virtual names::Decision decide_name(FieldId f, std::string_view text, bool exchange,
                                      std::string_view shown = {}) = 0;
  // A message of an exchange (a query and its response, one occurrence
  // with one decision): `flow` (ProtoPacket::flow_no), the query's
  // direction (0: from the flow's initiator), the exchange's id and its
  // name. A query's decision on the name is remembered, a response's
  // recalled. False when this consumer keeps no exchanges
  // (ConsumerSetup::exchanges) or the response's query is unknown;
  // `recalled`: the response found its query.
  virtual bool open_exchange(uint32_t flow, unsigned query_dir, uint16_t id, std::string_view name, bool response,
                             bool& recalled) = 0;
  // The rule's action on an address (family 4 or 6) or a MAC of field f;
  // false: the rule drops the packet.
  virtual bool addr(FieldId f, uint8_t* a, uint8_t family) = 0;
  // An address of the network, not of a field (ProtoOcc::role): one of the
  // packet's own takes its header's rewrite, any other its role's rule.
  // False: the rule drops the packet.
  virtual bool role_addr(uint8_t* a, uint8_t family) = 0;
  virtual bool mac(FieldId f, uint8_t* a) = 0;
  // The rule for f in this packet changes values (its hit is counted).
  virtual bool modifies(FieldId f) = 0;
  // The policy protects this address (a user's inside `clients`, or any
  // address without `clients`, when a rule protects ip.client; another's
  // when a rule protects ip.server): for addresses written where no
  // action can map them (masked instead).
  virtual bool protects_addr(uint8_t family, const uint8_t* a) const = 0;
  // Counts a name whose address labels were masked (reverse_hidden).
  virtual void count_reverse_hidden() = 0;
  // The next message of the same payload: a new one-decision-per-name scope
  // (a payload's first message starts one without it).
  virtual void next_message() = 0;
  virtual void drop() = 0;

 protected:
  ~RewriteHost() = default;
};

// What a consumer's policy says to a plugin making its per-consumer state
// (ProtocolPlugin::make_consumer), once per policy and worker.
class ConsumerSetup {
 public:
  virtual bool has_rules(FieldId f) const = 0;
  // A rule on f decides by the z-anonymity store.
  virtual bool zanon(FieldId f) const = 0;
  // Some rule protects an address field (ip.*): see RewriteHost::protects_addr.
  virtual bool protects_addresses() const = 0;
  // A rule protects ip.client: a user's address in any of the plugin's
  // address fields gets it (RewriteHost::addr), whether a rule names the
  // field or not, so the plugin visits them all.
  virtual bool protects_users() const = 0;
  // Set by the plugin: keep this consumer's exchanges (RewriteHost::open_exchange).
  bool exchanges = false;

 protected:
  ~ConsumerSetup() = default;
};

// What ProtocolPlugin::rewrite knows of the packet besides its bytes.
struct ProtoRewrite {
  uint32_t flow_no;     // ProtoPacket::flow_no of the packet (0: no flow)
  bool from_initiator;  // the packet travels from the flow's client
  // The consumer protects the protocol's fields: a message that cannot be
  // rewritten ends the rewrite (the caller fails closed); without, the
  // payload's other messages still get their rules.
  bool protects;
  // Set for a datagram's payload (ProtocolPlugin::shortcut): add the sums
  // of the bytes the rewrite changes, before ([0]) and after ([1]), as
  // 16-bit words at their offsets in the payload (a byte at an even offset
  // the high half), so the caller updates the checksum by their difference.
  uint64_t* sums;
  // The packet's transport ports (ProtoPacket::sport/dport): a protocol
  // spoken on several ports may mean different things on each.
  uint16_t sport = 0, dport = 0;
};

struct ProtocolPlugin {
  // The protocol's own name, unique among plugins; also the name its
  // fields carry (FieldDesc::protocol) unless `carries` says otherwise.
  const char* name;
  // 6 TCP, 17 UDP: the transport its messages travel over. Any other IP
  // protocol (ip_message_proto: SCTP 132, OSPF 89, PIM 103): its messages
  // are the whole IP payload, recognised by the protocol number alone (no
  // ports, probes or stream options; ProtoPacket's ports are 0), one plugin
  // per protocol number.
  uint8_t l4_proto;
  // Declares the fields (names, types, roles, value classes, docs); null
  // when it locates another protocol's fields (`carries`).
  void (*register_fields)(Registry& r);
  // Recognition: its well-known ports (either end; 0 ends the list), and
  // a content probe for other ports (null: ports only). The probe runs
  // only where a policy protects the protocol, on packets nothing else
  // recognised, unless `probe_always`.
  uint16_t ports[8];
  bool (*probe)(const uint8_t* payload, uint32_t len, uint16_t sport, uint16_t dport);
  // The probe is cheap and decides what the packet is whether or not a
  // policy protects the protocol (`proto in` sees it): it runs right after
  // the well-known ports of every protocol.
  bool probe_always;
  // TCP: Hyperscan expressions anchored at a stream's first byte (null
  // ends the list, the list may be null), compiled with every other
  // plugin's into the one content-probe database; and the server ports
  // that mean this protocol when no content probe recognises a stream.
  const char* const* patterns;
  uint16_t server_ports[4];
  // TCP: the runtime may hold a segment whose parse is Incomplete with
  // `hold` until the message is whole, and parse the reassembled bytes.
  bool holds;
  // An IP protocol's plugin whose messages hold a checksum over the IPv6
  // pseudo-header (OSPFv3, PIM over IPv6): its offset in the payload (0:
  // none). The runtime carries the rewrite of the packet's own IPv6
  // addresses into it, after `finish`.
  uint8_t pseudo_csum_v6;
  // Its messages carry addresses of the network (ProtoOcc::role): they are
  // parsed wherever the policy protects ip.* addresses and keeps payload,
  // with or without a rule on the protocol's own fields, so that no
  // address leaves in clear beside its header's pseudonym.
  bool role_addresses;
  // A registered plugin whose fields this one locates and whose name
  // `proto in` matches its packets by (QUIC carries TLS's tls.sni); null:
  // its own.
  const char* carries;
  // Whether its parse locates the field named `field` of its protocol
  // (check_completeness asks; a field registered for the protocol that the
  // parse never finds would pass in clear). Null: every field of its
  // protocol.
  bool (*locates)(std::string_view field);
  // Per-worker parse state (the parser's own result tables), made when a
  // worker's application parse state is, freed with it.
  void* (*make_state)();
  void (*free_state)(void* state);
  // Parses one packet's payload into `out` (emptied by the caller).
  ProtoStatus (*parse)(void* state, const ProtoPacket& pkt, ProtoOccs& out);
  // Writes a name decision into the occurrence's bytes (Name occurrences
  // whose decision is not keep). Required when the plugin has Name fields.
  void (*rewrite_name)(void* state, uint8_t* payload, const ProtoOcc& o, const names::Decision& d);
  // After the rule's action rewrote an occurrence flagged `fixup` (a
  // delegated prefix keeps its host bits zero, ...). May be null.
  void (*after_action)(void* state, uint8_t* payload, const ProtoOcc& o);
  // After every occurrence of a consumer's copy had its action: a fix-up
  // of the whole message (QUIC re-encrypts the packets whose names
  // changed). False when the message could not be rewritten: the runtime
  // fails closed as for fields it could not locate. May be null.
  bool (*finish)(void* state, uint8_t* payload, uint32_t len);
  // The field of the protocol's message payloads (a Bytes field, as
  // http.body), or null: its rule applies to the Payload occurrences, to
  // the payload bytes that follow a message (payload_left, payload_open),
  // and to a whole payload whose messages the parse could not place
  // (lengths kept, instead of the cut a protected field's failure takes).
  const char* payload_field;
  // TCP, messages framed by counting bytes (bodies of a known length,
  // chunks): the count is right only while segments come in order. The
  // runtime follows the stream's sequence numbers; after a gap that may
  // have held a message's start, or new bytes in a retransmission, the
  // direction fails closed until a segment for which message_start holds,
  // where the parse starts afresh. A repeated segment is parsed only when
  // it starts a message, without touching the stream's counts.
  bool ordered;
  // TCP; required with `ordered`, optional otherwise: whether a segment's
  // first byte starts one of the protocol's messages in that direction
  // (HTTP's whole request or status line, a TLS record header, DNS's
  // length prefix and message header). After a capture gap, or a header
  // that could not be completed, the direction resumes at such a segment
  // instead of staying closed to its end; what lies between is cut where a
  // policy protects the protocol. Strict on purpose: a false start makes
  // the parse place fields where there are none, and misses the real ones
  // of that segment (a Cookie, an SNI) in clear. Null: the direction stays
  // closed.
  bool (*message_start)(const uint8_t* payload, uint32_t len, bool from_initiator);
  // Inside a payload_open payload: whether this segment starts a new
  // message (the payload ends before it). `recognised`: the runtime's
  // detection (ports, content probes) names this protocol for the segment.
  // Required with payload_open.
  bool (*payload_ends)(const uint8_t* payload, uint32_t len, bool recognised);

  // A plugin whose fields the occurrence model cannot carry (one decision
  // per name across compression pointers, values whose rule depends on
  // other values) rewrites its messages itself: `rewrite`, instead of
  // occurrences, applies a consumer's rules to every message of the last
  // parse, through the host; false when the payload could not be rewritten
  // (fail closed). `consumer` is its make_consumer state for that consumer.
  bool (*rewrite)(void* state, void* consumer, RewriteHost& host, uint8_t* payload, const uint8_t* orig,
                  uint32_t len, const ProtoRewrite& at);
  // Per-consumer state (what its policy has rules for, caches of its
  // decisions), made once per policy and worker; null: none.
  void* (*make_consumer)(ConsumerSetup& setup);
  void (*free_consumer)(void* consumer);
  // For conditions, with `rewrite`: the first value of field f in the last
  // parse (a name as its text), false when it holds none.
  bool (*value)(void* state, FieldId f, std::string_view& out);
  // The runtime numbers the plugin's flows (ProtoPacket::flow_no) at their
  // first message: keys of exchanges.
  bool numbered;
  // UDP, with `rewrite`: a datagram on one of `ports` is the protocol's
  // whatever it holds, one message, and `rewrite` keeps checksum sums
  // (ProtoRewrite::sums): the runtime takes a shortcut for it (recognised
  // before anything else, rewritten without the general path's questions).
  // One plugin at most.
  bool shortcut;
  // With `shortcut`, may be null: `parse` of a shortcut datagram from its
  // bytes alone, for a plugin whose datagram parse needs nothing else of
  // ProtoPacket and adds no occurrence (building a ProtoPacket cost a
  // shortcut datagram as much as its parse's call). True: Parsed; false:
  // Malformed. Not called for a datagram the capture cut short (the
  // runtime takes it as Incomplete: it cannot be parsed to its end).
  bool (*parse_datagram)(void* state, const uint8_t* payload, uint32_t len);

  // Off the packet path, for tools that read a capture's values with the
  // plugins' own parsers (amon audit, amon whatif; PayloadValues in
  // values.h): every value of the last parse that said Parsed, handed to
  // `emit` one at a time as occurrences (offsets from the payload's first
  // byte; a Name with its text, valid during the call). Required with
  // `rewrite`, whose parse adds no occurrence; without `rewrite` a parse's
  // occurrences are its values.
  void (*values)(void* state, const uint8_t* payload, uint32_t len, void (*emit)(void* ctx, const ProtoOcc& o),
                 void* ctx);
};

// Why Registry::add_protocol refuses `p` (empty: it may join): its
// descriptor before its fields are declared, then its fields.
std::string plugin_problem(const ProtocolPlugin& p, const Registry& r);
std::string plugin_fields_problem(const ProtocolPlugin& p, const Registry& r);

}  // namespace amon
