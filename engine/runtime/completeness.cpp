// The registry against this runtime, as Suricata validates its app-layer
// parsers at start-up: every registered field is located by some plugin,
// every action the checker accepts on a field's type has an applier for it,
// every field a condition may test has an evaluator. (A protocol a
// condition names that no packet is recognised as refuses the policy when
// it is loaded: Program.) Run when a policy is loaded (Program)
// and by test_fields; an incomplete registration is an error naming what is
// missing, never a silent fallback.
#include "runtime_impl.h"

#include <algorithm>

namespace amon {

namespace {

// A protocol plugin's fields are located by its parse (protocol.h), those
// it says it finds (ProtocolPlugin::locates).
bool plugin_locates(const FieldDesc& f) {
  const auto& v = Registry::instance().protocols();
  for (unsigned i = 0; i < v.size(); ++i)
    if (f.protocol == v[plugin_proto(i)]->name && (!v[i]->locates || v[i]->locates(f.name))) return true;
  return false;
}

bool located(const FieldDesc& f) {
  const auto& F = l2l4::g_fields;
  for (FieldId x : {F.eth_src, F.eth_dst, F.ip_src, F.ip_dst, F.ip_client, F.ip_server, F.payload, F.tunnel_addr,
                    F.tunnel_vni, F.gre_key, F.gtp_teid})
    if (f.id == x) return true;
  // A link layer's fields: located by its walk of every frame (link.cpp).
  if (const LinkLayer* L = link_layer(); L && f.protocol == L->name) return true;
  return plugin_locates(f);
}

// What ProgramInstance::eval reads for each field (conditions.cpp).
bool evaluable(const FieldDesc& f) {
  const auto& F = l2l4::g_fields;
  if (f.id == F.eth_src || f.id == F.eth_dst) return f.type == ValueType::Mac && !(f.cond_ops & kCondMatch);
  if (is_addr_field(f.id)) return f.type == ValueType::Addr && !(f.cond_ops & kCondMatch);
  if (f.id == F.payload) return f.cond_ops == kCondMatch;
  // A protocol plugin's names, texts and bytes, from its occurrences (or
  // its ProtocolPlugin::value).
  return plugin_locates(f) && (f.type == ValueType::Name || f.type == ValueType::Text || f.type == ValueType::Bytes);
}

}  // namespace

std::vector<std::string> check_completeness(const Registry& r, uint32_t (*types)(const ActionDesc&)) {
  std::vector<std::string> out;
  const Registry& global = Registry::instance();
  for (const FieldDesc& f : r.fields()) {
    // Ids are the global registry's (a copy extended by a test keeps them).
    const bool known = f.id < global.fields().size() && global.field(f.id).name == f.name;
    const std::string type(to_string(f.type));
    if (!known || !located(f)) out.push_back(f.name + ": no plugin locates it in packets");
    for (const ActionDesc& a : r.actions()) {
      if (std::find(a.applies_to.begin(), a.applies_to.end(), f.type) == a.applies_to.end()) continue;
      if (!(types(a) & (1u << unsigned(f.type))))
        out.push_back(f.name + ": " + a.name + "() is accepted on " + type + " fields but has no applier for " + type);
    }
    if (f.cond_ops && (!known || !evaluable(f)))
      out.push_back(f.name + ": conditions may test it but the runtime has no evaluator for it");
  }
  return out;
}

std::string registry_problems() {
  const auto problems = check_completeness(Registry::instance());
  if (problems.empty()) return {};
  std::string m = "the plugin registry is incomplete:";
  for (const auto& x : problems) m += "\n  " + x;
  return m;
}

}  // namespace amon
