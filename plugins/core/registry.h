// The plugin registry: the one place where fields, actions and policy settings
// are declared. The policy language, the linter and the engine know protocols
// only through it, so adding a field touches plugins/ alone.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <deque>
#include <vector>

namespace amon {

// What kind of bytes a field holds; actions declare which kinds they accept.
enum class ValueType : uint8_t {
  Mac,    // 6 bytes
  Addr,   // IPv4 or IPv6 address (family known per occurrence)
  Port,   // 16-bit transport port
  Bytes,  // opaque payload bytes
  Name,   // domain name (DNS wire labels or dotted text)
  Text,   // printable header text (HTTP header values, URIs)
};
std::string_view to_string(ValueType t);

// Privacy role of a field: drives the linter's warnings.
enum class FieldRole : uint8_t {
  Identifier,       // points at one user (client address, MAC)
  QuasiIdentifier,  // identifies in combination (names, server addresses, UAs)
  Content,          // payload
  Other,
};
std::string_view to_string(FieldRole r);

using FieldId = uint16_t;
inline constexpr FieldId kNoField = 0xffff;

struct FieldDesc {
  std::string name;         // "ip.client"
  ValueType type;
  std::string protocol;     // protocol that carries it: "eth", "ip", "dns", ...
  FieldRole role;
  // z-anonymity value class: fields with the same class are one quasi-identifier
  // ("domain" for dns.qname, tls.sni, http.host). Empty: zanon not applicable.
  std::string value_class;
  std::string doc;
  // Fields a privacy officer expects protected together with this one; the
  // linter warns when this field is protected and one of these is left clear.
  std::vector<std::string> related;
  FieldId id = kNoField;    // assigned by the registry
  // Condition operators (CondOp bits) the runtime evaluates on this field,
  // set by the field's plugin. The checker refuses any other: a condition
  // the runtime cannot evaluate is a compile error, never silently false.
  uint8_t cond_ops = 0;
  // The value runs to the end of the packet (payload): the only place an
  // action that removes bytes (changes_length, cut()) can apply. The
  // checker refuses such an action on any other field, which would have to
  // become another action there.
  bool trailing = false;
  // The field lives in the L2-L4 headers (or is the payload itself), not
  // inside the payload: cutting the payload leaves it. Set by its plugin;
  // the linter reads it to tell what a payload rule removes.
  bool header = false;
  // The fields whose rules this one takes while no rule names it, in
  // order: the first of them that a rule names lends its rules. The
  // catch-all a field was split from (http.other_headers for a header
  // promoted to a field of its own: a policy written before the split
  // protected its values through the catch-all), or the fields that decide
  // the same value elsewhere (a device's NetBIOS name: the DNS name rules,
  // as on NBNS, then the device host name's). The runtime binds them; the
  // linter says so.
  std::vector<std::string> split_from;
  // While no rule names it, the field is not kept: its plugin protects it
  // by a default of its own whenever the policy protects anything (a link
  // layer's addresses, names and elements: l2l4.h, LinkLayer). The linter
  // does not count it as left in clear.
  bool hidden_without_rule = false;
};

// Operators of a field comparison in a condition (`==`, `!=`, `in`, `~`).
enum CondOp : uint8_t { kCondEq = 1, kCondNe = 2, kCondIn = 4, kCondMatch = 8 };
inline constexpr uint8_t kCondAll = kCondEq | kCondNe | kCondIn | kCondMatch;
inline constexpr uint8_t kCondCompare = kCondEq | kCondNe | kCondIn;  // values of a set, no regex

enum class ParamKind : uint8_t {
  Int,       // 24
  Duration,  // 500ms 30s 15m 1h 2d, stored in nanoseconds
  String,    // "text"
  Key,       // name of a `key` declaration
  Action,    // nested action call: fallback=prefix(24)
  Ident,     // bare identifier: fallback=sld
  Regex,     // /.../flags
  ActionOrIdent,  // either an identifier naming a keyword or an action call
};
std::string_view to_string(ParamKind k);

struct ParamDesc {
  std::string name;
  ParamKind kind;
  bool required = false;
  int positional = -1;  // index when it may be given without name= (prefix(24))
  int64_t min = INT64_MIN, max = INT64_MAX;  // Int and Duration bounds (Duration in ns)
  std::vector<std::string> choices;          // Ident values allowed (empty: any)
  std::string default_text;                  // for docs
  std::string doc;
};

struct KeyMaterial {
  std::string name;
  std::string origin;              // "file keys/k.hex" or "env AMON_KEY"
  std::vector<uint8_t> bytes;      // 32 bytes for CryptoPAn keys
};

struct ActionDesc;
struct ActionCall;

// One argument value after the language's checks.
struct ArgValue {
  ParamKind kind = ParamKind::Int;
  int64_t i = 0;                                 // Int; Duration in ns
  std::string s;                                 // String, Ident, Regex source
  std::string regex_flags;                       // Regex: "i" etc.
  std::shared_ptr<const KeyMaterial> key;        // Key
  std::shared_ptr<const ActionCall> action;      // Action (nested call)
};

struct SourceLoc {
  std::string file;
  int line = 0, col = 0, end_col = 0;
};

struct ActionCall {
  const ActionDesc* desc = nullptr;
  std::vector<std::pair<std::string, ArgValue>> args;  // by parameter name, defaults not filled
  SourceLoc loc;
  const ArgValue* arg(std::string_view name) const;
  int64_t int_or(std::string_view name, int64_t dflt) const;
};

// What an action does, as the code acting on it needs to know (the
// runtime's appliers, the z-store's sizing, the checker): set by the
// action's plugin and read as an id, so nothing outside that plugin and the
// registry recognises an action by comparing its name. Unknown: an action
// no runtime implements (check_completeness refuses it on every type it
// declares).
enum class ActionKind : uint8_t { Unknown, Keep, Zero, Redact, Drop, Cut, Snap, Timestamp, Hash, CryptoPan, Prefix, Zanon };

struct ActionDesc {
  std::string name;
  std::string doc;
  std::vector<ValueType> applies_to;
  std::vector<ParamDesc> params;
  bool protects = true;        // hides information (everything but keep)
  bool changes_length = false; // cut(): may only be applied to trailing content
  // Checks that depend on the field (e.g. prefix width vs address width).
  // Returns an error message, or empty when fine.
  std::function<std::string(const ActionCall&, const FieldDesc&)> validate;
  ActionKind kind = ActionKind::Unknown;
  // Counts distinct users per value in the z-anonymity store (params z, dt):
  // a field needs a value class, and the store is sized for it.
  bool uses_zstore = false;
  bool drops() const { return kind == ActionKind::Drop; }
};

struct SettingDesc {
  std::string name;
  std::string doc;
  std::string value_form;               // "ip.client | ip.client/64", "{ CIDR, ... }", "drop | cut"
  std::vector<std::string> choices;     // for identifier-valued settings
};

// The ports Registry::add_addr_carrier declared, one bit each, for the
// packet path's test (addr_carrier_port in protocol.h): filled at start-up,
// read-only afterwards.
extern uint64_t addr_carrier_bits[65536 / 64];

// Registry of everything the language can name. Filled once at start-up by
// register_builtin_plugins(); read-only afterwards, so lookups need no lock.
struct ProtocolPlugin;  // protocol.h

class Registry {
 public:
  static Registry& instance();

  FieldId add_field(FieldDesc d);
  void add_action(ActionDesc d);
  void add_setting(SettingDesc d);
  // An application protocol (protocol.h): declares its fields and joins the
  // list the runtime recognises, parses and rewrites. `p` must outlive the
  // registry (a static descriptor).
  void add_protocol(const ProtocolPlugin& p);
  // A protocol with no plugin to rewrite it that carries addresses in its
  // payload (`addr_carrier` in conditions), by its TCP/UDP ports. A plugin
  // that comes to rewrite such a protocol takes its declaration away.
  void add_addr_carrier(std::string_view protocol, std::initializer_list<uint16_t> ports);
  // Every declared port, in the order declared.
  const std::vector<uint16_t>& addr_carrier_ports() const { return addr_carrier_ports_; }

  const FieldDesc* field(std::string_view name) const;
  const FieldDesc& field(FieldId id) const { return fields_[id]; }
  const ActionDesc* action(std::string_view name) const;
  const SettingDesc* setting(std::string_view name) const;
  // Protocols a condition may name (`proto in { ... }`), each with an id
  // (its index) that is its bit in the runtime's set of a packet's
  // protocols: the L2-L4 layers the decoder tells, DNS and HTTP, and every
  // protocol plugin not carrying another's fields. Adding a name twice
  // returns its id.
  static constexpr unsigned kMaxProtoNames = 31;  // bit 31 is the runtime's "computed" mark
  // Protocol plugins, at most: the runtime numbers plugin i application
  // 8 + i, a bit in its 32-bit masks of applications (engine/runtime/l7.h).
  static constexpr unsigned kMaxProtocolPlugins = 24;
  unsigned add_proto_name(std::string_view name);
  int proto_id(std::string_view name) const;  // -1: not a protocol
  const std::vector<std::string>& proto_names() const { return proto_names_; }

  const std::deque<FieldDesc>& fields() const { return fields_; }
  const std::deque<ActionDesc>& actions() const { return actions_; }
  const std::deque<SettingDesc>& settings() const { return settings_; }
  const std::vector<const ProtocolPlugin*>& protocols() const { return protocols_; }
  // The registered protocol whose fields carry FieldDesc::protocol `name`, or null.
  const ProtocolPlugin* protocol(std::string_view name) const;

  // Closest known names for a "did you mean" hint (empty when nothing is close).
  std::string suggest_field(std::string_view name) const;
  std::string suggest_action(std::string_view name) const;
  std::string suggest_setting(std::string_view name) const;

 private:
  // deques: descriptors are handed out by pointer and must never move.
  std::deque<FieldDesc> fields_;
  std::deque<ActionDesc> actions_;
  std::deque<SettingDesc> settings_;
  std::vector<const ProtocolPlugin*> protocols_;
  std::vector<std::string> proto_names_;
  std::vector<uint16_t> addr_carrier_ports_;
};

// Registers every built-in plugin (idempotent). Called by the CLI, the tests
// and the fuzzers before they parse a policy.
void register_builtin_plugins();

// Damerau-free Levenshtein distance, for suggestions.
size_t edit_distance(std::string_view a, std::string_view b);
std::string closest(std::string_view name, const std::vector<std::string_view>& candidates);

}  // namespace amon
