// Action calls: the action named, its parameters and each argument's
// value checked against the registry's descriptors.
#include "compiler.h"

#include <algorithm>
#include <cstdlib>

#include "cryptopan.h"

namespace amon::dsl {

namespace {

std::string kind_desc(ParamKind k, const ParamDesc& p) {
  switch (k) {
    case ParamKind::Int: return "an integer";
    case ParamKind::Duration: return "a duration (500ms 30s 15m 1h 2d)";
    case ParamKind::String: return "a string";
    case ParamKind::Key: return "a key name";
    case ParamKind::Action: return "an action call";
    case ParamKind::Ident: return "one of " + [&] {
      std::string s;
      for (const auto& c : p.choices) s += (s.empty() ? "" : ", ") + c;
      return s.empty() ? std::string("an identifier") : s;
    }();
    case ParamKind::Regex: return "a regex /.../";
    case ParamKind::ActionOrIdent: {
      std::string s;
      for (const auto& c : p.choices) s += c + ", ";
      return s + "or an action call";
    }
  }
  return "a value";
}

std::string signature(const ActionDesc& a) {
  std::string s = a.name + "(";
  bool first = true;
  for (const auto& p : a.params) {
    if (!first) s += ", ";
    first = false;
    std::string k = p.kind == ParamKind::Int ? "N" : p.kind == ParamKind::Duration ? "DURATION" : p.kind == ParamKind::Key ? "KEY" : p.kind == ParamKind::String ? "\"...\"" : p.kind == ParamKind::Regex ? "/.../" : "...";
    s += p.required ? p.name + "=" + k : "[" + p.name + "=" + k + "]";
  }
  return s + ")";
}

std::string actions_for(ValueType t) {
  std::vector<std::string> v;
  for (const auto& a : Registry::instance().actions())
    if (std::find(a.applies_to.begin(), a.applies_to.end(), t) != a.applies_to.end()) v.push_back(a.name);
  return join(v);
}

}  // namespace

std::optional<ActionCall> Compiler::check_call(ParseCtx& ctx, const Call& c, const std::vector<const FieldDesc*>& fields,
                                               bool nested) {
  SourceLoc name_at = ctx.where(c.name_loc);
  const ActionDesc* a = reg_.action(c.name);
  if (!a) {
    std::string hint;
    if (std::string sug = reg_.suggest_action(c.name); !sug.empty()) hint = "did you mean " + quote(sug) + "?";
    else if (reg_.field(c.name)) hint = quote(c.name) + " is a field; actions are: " + join([&] {
      std::vector<std::string> v;
      for (const auto& x : reg_.actions()) v.push_back(x.name);
      return v;
    }());
    d_.error(name_at, "unknown action " + quote(c.name), hint);
    return std::nullopt;
  }
  bool ok = true;
  for (const FieldDesc* f : fields) {
    if (std::find(a->applies_to.begin(), a->applies_to.end(), f->type) == a->applies_to.end()) {
      d_.error(name_at,
               std::string(nested ? "fallback " : "") + "action " + quote(a->name) + " does not apply to " + f->name +
                   " (" + std::string(to_string(f->type)) + ")",
               "actions for " + std::string(to_string(f->type)) + " fields: " + actions_for(f->type));
      ok = false;
    }
  }
  // Removing bytes is only possible at the end of a packet: inside a
  // header or a message the value would have to become another action.
  if (a->changes_length) {
    for (const FieldDesc* f : fields) {
      if (f->trailing || !ok) continue;
      std::vector<std::string> v;
      for (const auto& x : reg_.actions())
        if (x.protects && !x.changes_length &&
            std::find(x.applies_to.begin(), x.applies_to.end(), f->type) != x.applies_to.end())
          v.push_back(x.name + "()");
      d_.error(name_at,
               std::string(nested ? "fallback " : "") + "action " + quote(a->name) +
                   " removes bytes, which only the packet's trailing content (payload) allows; " + f->name +
                   " sits inside its header or message",
               "protect it with " + join(v, " or "));
      ok = false;
    }
  }
  // z-anonymity counts users per value class; a field without one has no
  // shared store to count in.
  if (a->uses_zstore) {
    for (const FieldDesc* f : fields) {
      if (f->value_class.empty() && ok) {
        d_.error(name_at, "zanon does not apply to " + f->name + ": it has no z-anonymity value class",
                 "protect it with " + [&] {
                   std::vector<std::string> v;
                   for (const auto& x : reg_.actions())
                     if (x.protects && &x != a &&
                         std::find(x.applies_to.begin(), x.applies_to.end(), f->type) != x.applies_to.end())
                       v.push_back(x.name + "()");
                   return join(v, " or ");
                 }());
        ok = false;
      }
    }
  }
  ActionCall out;
  out.desc = a;
  out.loc = ctx.where(c.loc);
  std::map<std::string, SourceLoc> given;
  int positional = 0;
  bool named_seen = false;
  for (const Arg* arg : c.args) {
    SourceLoc arg_at = ctx.where(arg->loc);
    const ParamDesc* p = nullptr;
    if (arg->name.empty()) {
      if (named_seen) {
        d_.error(arg_at, "positional argument after a named one", "name it: " + signature(*a));
        ok = false;
        continue;
      }
      for (const auto& pd : a->params)
        if (pd.positional == positional) p = &pd;
      ++positional;
      if (!p) {
        d_.error(arg_at,
                 a->params.empty() ? a->name + "() takes no arguments"
                                   : "too many positional arguments for " + quote(a->name),
                 "usage: " + signature(*a));
        ok = false;
        continue;
      }
    } else {
      named_seen = true;
      for (const auto& pd : a->params)
        if (pd.name == arg->name) p = &pd;
      if (!p) {
        std::vector<std::string_view> names;
        for (const auto& pd : a->params) names.push_back(pd.name);
        std::string sug = closest(arg->name, names);
        d_.error(ctx.where(arg->name_loc), "unknown parameter " + quote(arg->name) + " of " + quote(a->name),
                 sug.empty() ? "usage: " + signature(*a) : "did you mean " + quote(sug) + "?");
        ok = false;
        continue;
      }
    }
    if (auto it = given.find(p->name); it != given.end()) {
      d_.error(arg_at, "parameter " + quote(p->name) + " of " + quote(a->name) + " given twice", "keep one");
      d_.note(it->second, "first given here");
      ok = false;
      continue;
    }
    given[p->name] = arg_at;
    ArgValue av;
    if (!convert_arg(ctx, c, *a, *p, *arg->value, fields, av)) {
      ok = false;
      continue;
    }
    out.args.emplace_back(p->name, std::move(av));
  }
  for (const auto& pd : a->params) {
    if (pd.required && !given.count(pd.name)) {
      d_.error(ctx.where(c.loc), "missing parameter " + quote(pd.name) + " of " + quote(a->name),
               "usage: " + signature(*a));
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  if (a->validate) {
    for (const FieldDesc* f : fields) {
      std::string msg = a->validate(out, *f);
      if (!msg.empty()) {
        d_.error(ctx.where(c.loc), msg, "usage: " + signature(*a));
        return std::nullopt;
      }
    }
  }
  return out;
}

bool Compiler::convert_arg(ParseCtx& ctx, const Call& c, const ActionDesc& a, const ParamDesc& p, const Value& v,
                           const std::vector<const FieldDesc*>& fields, ArgValue& out) {
  SourceLoc at = ctx.where(v.loc);
  out.kind = p.kind;
  auto mismatch = [&] {
    std::string hint;
    if (p.kind == ParamKind::Duration && v.kind == Value::Int) hint = "add a unit: 500ms 30s 15m 1h 2d";
    else if (p.kind == ParamKind::Key && v.kind == Value::String) hint = "name a declared key, without quotes";
    d_.error(at, "parameter " + quote(p.name) + " of " + quote(a.name) + " takes " + kind_desc(p.kind, p) + ", not " +
                     value_desc(v.kind),
             hint);
    return false;
  };
  auto range = [&](int64_t x, bool dur) {
    if (x >= p.min && x <= p.max) return true;
    auto f = [&](int64_t y) { return dur ? format_duration(y) : std::to_string(y); };
    std::string allowed = p.min == INT64_MIN ? "at most " + f(p.max)
                          : p.max == INT64_MAX ? "at least " + f(p.min)
                                               : "between " + f(p.min) + " and " + f(p.max);
    d_.error(at, "parameter " + quote(p.name) + " of " + quote(a.name) + " must be " + allowed + " (got " + f(x) + ")",
             p.doc.empty() ? "" : p.name + ": " + p.doc);
    return false;
  };
  switch (p.kind) {
    case ParamKind::Int:
      if (v.kind != Value::Int) return mismatch();
      out.i = v.i;
      return range(v.i, false);
    case ParamKind::Duration:
      if (v.kind != Value::Duration) return mismatch();
      out.i = v.i;
      return range(v.i, true);
    case ParamKind::String:
      if (v.kind != Value::String) return mismatch();
      out.s = v.text;
      return true;
    case ParamKind::Key: {
      if (v.kind != Value::Ident) return mismatch();
      auto it = keys_.find(v.text);
      if (it == keys_.end()) {
        std::vector<std::string_view> names;
        for (const auto& [n, k] : keys_) names.push_back(n);
        std::string sug = closest(v.text, names);
        d_.error(at, "unknown key " + quote(v.text),
                 sug.empty() ? "declare it: key " + v.text + " = file(\"keys/" + v.text + ".key\")"
                             : "did you mean " + quote(sug) + "?");
        return false;
      }
      out.s = v.text;
      out.key = it->second.km;
      // A key that failed to load has its own error already.
      return it->second.ok;
    }
    case ParamKind::Regex: {
      if (v.kind != Value::Regex) return mismatch();
      Cond::Regex rx;
      if (!check_regex(ctx, v, rx)) return false;
      out.s = rx.source;
      out.regex_flags = rx.flags;
      return true;
    }
    case ParamKind::Ident:
    case ParamKind::ActionOrIdent:
    case ParamKind::Action: {
      if (v.kind == Value::CallV && p.kind != ParamKind::Ident) {
        auto nested = check_call(ctx, *v.call, fields, true);
        if (!nested) return false;
        out.kind = ParamKind::Action;
        out.action = std::make_shared<ActionCall>(std::move(*nested));
        return true;
      }
      if (v.kind != Value::Ident || p.kind == ParamKind::Action) return mismatch();
      if (!p.choices.empty() && std::find(p.choices.begin(), p.choices.end(), v.text) == p.choices.end()) {
        std::vector<std::string_view> cs(p.choices.begin(), p.choices.end());
        std::string sug = closest(v.text, cs);
        std::string hint = sug.empty() ? "" : "did you mean " + quote(sug) + "?";
        if (hint.empty() && p.kind == ParamKind::ActionOrIdent && reg_.action(v.text))
          hint = quote(v.text) + " is an action: write " + v.text + "(...)";
        d_.error(at, "parameter " + quote(p.name) + " of " + quote(a.name) + " takes " + kind_desc(p.kind, p) +
                         ", not " + quote(v.text),
                 hint);
        return false;
      }
      // The registrable domain is a part of a name only: a user agent or an
      // address has none to fall back to.
      if (a.uses_zstore && p.name == "fallback" && v.text == "sld") {
        for (const FieldDesc* f : fields)
          if (f->type != ValueType::Name) {
            d_.error(at, "fallback 'sld' applies to domain names only; " + f->name + " is " +
                             std::string(to_string(f->type)),
                     f->type == ValueType::Addr ? "fallback=zero, prefix(N) or hash(key=K)"
                                                : "fallback=redact, zero or hash(key=K)");
            return false;
          }
      }
      out.kind = ParamKind::Ident;
      out.s = v.text;
      // A word naming an action (fallback=redact) is that action, checked on
      // the fields as its call form is: the runtime then reads the action,
      // never the word, and a word it would have to reinterpret (redact on
      // an address) is refused here.
      if (p.kind == ParamKind::ActionOrIdent && reg_.action(v.text)) {
        Call bare;
        bare.name = v.text;
        bare.name_loc = bare.loc = v.loc;
        auto nested = check_call(ctx, bare, fields, true);
        if (!nested) return false;
        out.action = std::make_shared<ActionCall>(std::move(*nested));
      }
      return true;
    }
  }
  return mismatch();
}

}  // namespace amon::dsl
