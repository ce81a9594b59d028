#include "registry.h"

#include "protocol.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace amon {

std::string_view to_string(ValueType t) {
  switch (t) {
    case ValueType::Mac: return "mac";
    case ValueType::Addr: return "addr";
    case ValueType::Port: return "port";
    case ValueType::Bytes: return "bytes";
    case ValueType::Name: return "name";
    case ValueType::Text: return "text";
  }
  return "?";
}

std::string_view to_string(FieldRole r) {
  switch (r) {
    case FieldRole::Identifier: return "identifier";
    case FieldRole::QuasiIdentifier: return "quasi-identifier";
    case FieldRole::Content: return "content";
    case FieldRole::Other: return "other";
  }
  return "?";
}

std::string_view to_string(ParamKind k) {
  switch (k) {
    case ParamKind::Int: return "int";
    case ParamKind::Duration: return "duration";
    case ParamKind::String: return "string";
    case ParamKind::Key: return "key";
    case ParamKind::Action: return "action";
    case ParamKind::Ident: return "ident";
    case ParamKind::Regex: return "regex";
    case ParamKind::ActionOrIdent: return "action|ident";
  }
  return "?";
}

const ArgValue* ActionCall::arg(std::string_view name) const {
  for (const auto& [n, v] : args)
    if (n == name) return &v;
  return nullptr;
}

int64_t ActionCall::int_or(std::string_view name, int64_t dflt) const {
  const ArgValue* v = arg(name);
  return v ? v->i : dflt;
}

Registry& Registry::instance() {
  static Registry r;
  return r;
}

FieldId Registry::add_field(FieldDesc d) {
  if (field(d.name)) throw std::logic_error("field registered twice: " + d.name);
  d.id = static_cast<FieldId>(fields_.size());
  fields_.push_back(std::move(d));
  return fields_.back().id;
}

void Registry::add_action(ActionDesc d) {
  if (action(d.name)) throw std::logic_error("action registered twice: " + d.name);
  actions_.push_back(std::move(d));
}

void Registry::add_setting(SettingDesc d) {
  if (setting(d.name)) throw std::logic_error("setting registered twice: " + d.name);
  settings_.push_back(std::move(d));
}

void Registry::add_protocol(const ProtocolPlugin& p) {
  const std::string who = std::string("protocol plugin ") + (p.name ? p.name : "(unnamed)") + ": ";
  if (!p.name) throw std::logic_error(who + "no name");
  if (protocol(p.name)) throw std::logic_error(who + "registered twice");
  // The runtime gives each plugin a bit in 32-bit masks of applications
  // and of protocols a condition names (engine/runtime).
  if (protocols_.size() == kMaxProtocolPlugins)
    throw std::logic_error(who + "too many protocol plugins (" + std::to_string(kMaxProtocolPlugins) + " at most)");
  if (p.carries && !protocol(p.carries))
    throw std::logic_error(who + "carries " + p.carries + ", which is not registered");
  if (std::string err = plugin_problem(p, *this); !err.empty()) throw std::logic_error(who + err);
  // Its fields are checked once declared; a refused plugin leaves none
  // behind, so the registry stays what it was.
  const size_t before = fields_.size();
  if (p.register_fields) p.register_fields(*this);
  if (std::string err = plugin_fields_problem(p, *this); !err.empty()) {
    fields_.erase(fields_.begin() + std::ptrdiff_t(before), fields_.end());
    throw std::logic_error(who + err);
  }
  protocols_.push_back(&p);
  if (!p.carries) add_proto_name(p.name);
}

uint64_t addr_carrier_bits[65536 / 64];

void Registry::add_addr_carrier(std::string_view protocol, std::initializer_list<uint16_t> ports) {
  for (uint16_t p : ports) {
    if (addr_carrier_bits[p >> 6] >> (p & 63) & 1)
      throw std::logic_error("addr_carrier port " + std::to_string(p) + " of " + std::string(protocol) + " declared twice");
    addr_carrier_bits[p >> 6] |= uint64_t(1) << (p & 63);
    addr_carrier_ports_.push_back(p);
  }
}

const ProtocolPlugin* Registry::protocol(std::string_view name) const {
  for (const ProtocolPlugin* p : protocols_)
    if (name == p->name) return p;
  return nullptr;
}

template <typename C>
static auto find_named(const C& c, std::string_view name) -> decltype(&*c.begin()) {
  for (const auto& x : c)
    if (x.name == name) return &x;
  return nullptr;
}

const FieldDesc* Registry::field(std::string_view name) const { return find_named(fields_, name); }
const ActionDesc* Registry::action(std::string_view name) const { return find_named(actions_, name); }
const SettingDesc* Registry::setting(std::string_view name) const { return find_named(settings_, name); }

unsigned Registry::add_proto_name(std::string_view name) {
  if (int id = proto_id(name); id >= 0) return unsigned(id);
  if (proto_names_.size() == kMaxProtoNames) throw std::logic_error("too many protocol names");
  proto_names_.emplace_back(name);
  return unsigned(proto_names_.size() - 1);
}

int Registry::proto_id(std::string_view name) const {
  for (size_t i = 0; i < proto_names_.size(); ++i)
    if (proto_names_[i] == name) return int(i);
  return -1;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest(std::string_view name, const std::vector<std::string_view>& candidates) {
  // A suggestion must be closer than a third of the name, or it is noise
  // ("foo" -> "ip"); ties go to the first registered name, which is stable.
  size_t best = SIZE_MAX;
  std::string_view pick;
  for (auto c : candidates) {
    size_t d = edit_distance(name, c);
    if (d < best) best = d, pick = c;
  }
  size_t limit = std::max<size_t>(1, (name.size() + 2) / 3);
  if (pick.empty() || best > limit) return {};
  return std::string(pick);
}

template <typename C>
static std::string suggest_in(const C& c, std::string_view name) {
  std::vector<std::string_view> names;
  for (const auto& x : c) names.push_back(x.name);
  return closest(name, names);
}

std::string Registry::suggest_field(std::string_view name) const { return suggest_in(fields_, name); }
std::string Registry::suggest_action(std::string_view name) const { return suggest_in(actions_, name); }
std::string Registry::suggest_setting(std::string_view name) const { return suggest_in(settings_, name); }

}  // namespace amon
