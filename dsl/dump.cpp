// `amon lint --dump`: the compiled policy in a stable text form. Golden tests
// compare it byte for byte, so it prints only what the policy says, in the
// order the policy says it; key bytes are never printed.
#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "policy.h"

namespace amon::dsl {

std::string format_duration(int64_t ns) {
  static const struct { const char* unit; int64_t ns; } units[] = {
      {"d", 86'400'000'000'000}, {"h", 3'600'000'000'000}, {"m", 60'000'000'000}, {"s", 1'000'000'000}, {"ms", 1'000'000}};
  if (ns == 0) return "0s";
  for (const auto& u : units)
    if (ns % u.ns == 0) return std::to_string(ns / u.ns) + u.unit;
  return std::to_string(ns) + "ns";
}

static std::string quoted(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') { o += "\\n"; continue; }
    if (c == '\t') { o += "\\t"; continue; }
    o += c;
  }
  return o + "\"";
}

static std::string regex_text(const std::string& src, const std::string& flags) {
  std::string o = "/";
  for (char c : src) {
    if (c == '/') o += '\\';
    o += c;
  }
  return o + "/" + flags;
}

static std::string arg_text(const ArgValue& v) {
  switch (v.kind) {
    case ParamKind::Int: return std::to_string(v.i);
    case ParamKind::Duration: return format_duration(v.i);
    case ParamKind::String: return quoted(v.s);
    case ParamKind::Key:
    case ParamKind::Ident: return v.s;
    case ParamKind::Regex: return regex_text(v.s, v.regex_flags);
    case ParamKind::Action:
    case ParamKind::ActionOrIdent: return v.action ? to_string(*v.action) : v.s;
  }
  return "?";
}

std::string to_string(const ActionCall& c) {
  // Arguments in the action's parameter order, always by name: one canonical
  // spelling for prefix(24) and prefix(bits=24).
  std::string o = (c.desc ? c.desc->name : std::string("?")) + "(";
  bool first = true;
  auto emit = [&](const std::string& n, const ArgValue& v) {
    if (!first) o += ", ";
    first = false;
    o += n + "=" + arg_text(v);
  };
  if (c.desc) {
    for (const auto& p : c.desc->params)
      if (const ArgValue* v = c.arg(p.name)) emit(p.name, *v);
  } else {
    for (const auto& [n, v] : c.args) emit(n, v);
  }
  return o + ")";
}

static std::string mac_text(const std::array<uint8_t, 6>& m) {
  char b[18];
  std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return b;
}

std::string to_string(const Cond& c) {
  auto child = [](const Cond& k) {
    std::string s = to_string(k);
    return (k.kind == Cond::Kind::And || k.kind == Cond::Kind::Or) ? "(" + s + ")" : s;
  };
  switch (c.kind) {
    case Cond::Kind::And:
    case Cond::Kind::Or: {
      std::string o;
      for (const auto& k : c.children) {
        if (!o.empty()) o += c.kind == Cond::Kind::And ? " and " : " or ";
        o += child(*k);
      }
      return o;
    }
    case Cond::Kind::Not: return "not " + child(*c.children.at(0));
    case Cond::Kind::ProtoIn: {
      std::string o = "proto in { ";
      for (size_t i = 0; i < c.protocols.size(); ++i) o += (i ? ", " : "") + c.protocols[i];
      return o + " }";
    }
    case Cond::Kind::FieldCmp: break;
  }
  std::vector<std::string> vals;
  for (const auto& x : c.cidrs) vals.push_back(x.to_string());
  for (const auto& x : c.macs) vals.push_back(mac_text(x));
  for (auto x : c.ints) vals.push_back(std::to_string(x));
  for (const auto& x : c.strings) vals.push_back(quoted(x));
  for (const auto& x : c.regexes) vals.push_back(regex_text(x.source, x.flags));
  std::string o = c.field->name;
  switch (c.op) {
    case Cond::Op::Eq: return o + " == " + (vals.empty() ? "" : vals[0]);
    case Cond::Op::Ne: return o + " != " + (vals.empty() ? "" : vals[0]);
    case Cond::Op::Match: return o + " ~ " + (vals.empty() ? "" : vals[0]);
    case Cond::Op::In: {
      o += " in { ";
      for (size_t i = 0; i < vals.size(); ++i) o += (i ? ", " : "") + vals[i];
      return o + " }";
    }
  }
  return o;
}

std::string dump(const Policy& p) {
  std::string o;
  o += "policy " + p.path + "\n";
  o += "identifier " + (p.identifier ? p.identifier->name : std::string("none"));
  if (p.identifier_prefix >= 0) o += "/" + std::to_string(p.identifier_prefix);
  o += "\n";
  o += "clients";
  if (p.clients.empty()) o += " none (client = flow initiator)";
  for (const auto& c : p.clients) o += " " + c.to_string();
  o += "\n";
  o += std::string("on_error ") + (p.on_error == Policy::OnError::Drop   ? "drop"
                                  : p.on_error == Policy::OnError::Snap ? "snap"
                                                                        : "cut") + "\n";
  static const char* unknown[] = {"default", "drop", "keep", "cut"};
  o += std::string("on_unknown ") + unknown[static_cast<int>(p.on_unknown)] + "\n";
  o += "payload_default " + (p.payload_default ? to_string(*p.payload_default) : std::string("keep()")) + "\n";
  o += std::string("addr_text ") + (p.addr_text == Policy::AddrText::Map ? "map" : "keep") + "\n";
  o += std::string("echoes ") + (p.echoes == Policy::Echoes::Map ? "map" : "keep") + "\n";
  for (const auto& k : p.keys) o += "key " + k->name + " " + k->origin + " (" + std::to_string(k->bytes.size()) + " bytes)\n";
  if (!p.select_bpf.empty()) o += "select bpf " + quoted(p.select_bpf) + "\n";
  else if (p.select_cond) o += "select " + to_string(*p.select_cond) + "\n";
  else o += "select all\n";
  for (const auto& r : p.rules) {
    o += "rule " + std::to_string(r.index) + " " + r.loc.file + ":" + std::to_string(r.loc.line) + ": ";
    for (size_t i = 0; i < r.fields.size(); ++i) o += (i ? ", " : "") + r.fields[i]->name;
    o += " : " + to_string(r.action);
    if (r.when) o += " when " + to_string(*r.when);
    o += "\n";
  }
  // Per-field pipeline in order of first mention: what the engine tries, in
  // order, for each field; the first rule whose condition holds is applied.
  std::vector<const FieldDesc*> order;
  std::set<const FieldDesc*> seen;
  for (const auto& r : p.rules)
    for (const FieldDesc* f : r.fields)
      if (seen.insert(f).second) order.push_back(f);
  const FieldDesc* payload = Registry::instance().field("payload");
  if (payload && !seen.count(payload) && p.payload_default) order.push_back(payload);
  o += "pipeline\n";
  for (const FieldDesc* f : order) {
    o += "  " + f->name + "\n";
    bool total = false;
    for (const auto& r : p.rules) {
      if (std::find(r.fields.begin(), r.fields.end(), f) == r.fields.end()) continue;
      o += "    rule " + std::to_string(r.index) + ": " + to_string(r.action);
      if (r.when) o += " when " + to_string(*r.when);
      o += "\n";
      if (!r.when) {
        total = true;
        break;
      }
    }
    if (!total) {
      std::string fallback = (f == payload && p.payload_default) ? to_string(*p.payload_default) + " (payload_default)"
                                                                 : "keep() (no rule applies)";
      o += "    otherwise: " + fallback + "\n";
    }
  }
  o += "  other fields: keep()\n";
  return o;
}

}  // namespace amon::dsl
