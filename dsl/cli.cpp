// `amon lint`, `amon fields`, `amon actions` and the generated registry
// tables of doc/language.md. All of them read the same registry data.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "policy.h"

namespace amon::dsl {



static void lint_usage(FILE* f) {
  std::fprintf(f,
               "usage: amon lint [--format text|json] [--strict] [--dump] FILE...\n"
               "  --format text|json  diagnostics as compiler-style text (default) or a JSON array\n"
               "  --strict            exit 1 when there are warnings\n"
               "  --dump              print the compiled pipeline of each clean policy\n"
               "exit status: 0 clean, 1 warnings with --strict, 2 errors or bad usage\n");
}

int lint_main(int argc, char** argv) {
  bool json = false, strict = false, want_dump = false;
  std::vector<std::string> files;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--strict") strict = true;
    else if (a == "--dump") want_dump = true;
    else if (a == "--format" || a.rfind("--format=", 0) == 0) {
      std::string v = a == "--format" ? (i + 1 < argc ? argv[++i] : "") : a.substr(9);
      if (v == "json") json = true;
      else if (v == "text") json = false;
      else {
        std::fprintf(stderr, "amon lint: --format takes text or json, not '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      lint_usage(stdout);
      return 0;
    } else if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "amon lint: unknown option '%s'\n", a.c_str());
      lint_usage(stderr);
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    lint_usage(stderr);
    return 2;
  }
  register_builtin_plugins();
  Diagnostics all;
  size_t errors = 0, warnings = 0;
  std::string text, dumps;
  for (const auto& f : files) {
    Diagnostics d;
    auto p = compile_file(f, d);
    errors += d.errors();
    warnings += d.warnings();
    if (json) {
      for (const auto& x : d.all()) all.add(x);
    } else {
      text += d.render_text();
    }
    if (p && want_dump) dumps += dump(*p);
  }
  if (json) {
    std::fputs(all.render_json().c_str(), stdout);
  } else {
    if (!text.empty()) std::fputs(text.c_str(), stderr);
    if (errors || warnings) {
      std::fprintf(stderr, "%zu error%s, %zu warning%s\n", errors, errors == 1 ? "" : "s", warnings,
                   warnings == 1 ? "" : "s");
    }
  }
  std::fputs(dumps.c_str(), stdout);

  if (errors) return 2;
  if (warnings && strict) return 1;
  return 0;
}

// Plain fixed-width table; the last column (doc) is not padded.
static std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  std::string o;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    o += line + "\n";
  }
  return o;
}

static std::string applies_text(const ActionDesc& a) {
  std::string s;
  for (auto t : a.applies_to) s += (s.empty() ? "" : ",") + std::string(to_string(t));
  return s;
}

static std::string param_text(const ParamDesc& p, bool markdown) {
  std::string s = p.name;
  if (p.positional >= 0) s += "#" + std::to_string(p.positional);
  s += ":" + std::string(to_string(p.kind));
  bool dur = p.kind == ParamKind::Duration;
  auto f = [&](int64_t v) { return dur ? format_duration(v) : std::to_string(v); };
  if ((p.kind == ParamKind::Int || dur) && (p.min != INT64_MIN || p.max != INT64_MAX))
    s += "[" + (p.min == INT64_MIN ? std::string() : f(p.min)) + ".." + (p.max == INT64_MAX ? std::string() : f(p.max)) + "]";
  if (!p.choices.empty()) {
    std::string c;
    for (const auto& x : p.choices) c += (c.empty() ? "" : markdown ? "\\|" : "|") + x;
    s += "{" + c + "}";
  }
  if (!p.required) s = "[" + s + (p.default_text.empty() ? "" : "=" + p.default_text) + "]";
  return s;
}

// The fields a field takes its rules from while none names it, in order.
static std::string sources(const FieldDesc& f, const char* quote) {
  std::string s;
  for (const auto& from : f.split_from) s += (s.empty() ? "" : ", ") + std::string(quote) + from + quote;
  return s;
}

int fields_main(int argc, char** argv) {
  register_builtin_plugins();
  std::vector<std::vector<std::string>> rows{{"FIELD", "TYPE", "ROLE", "VALUE CLASS", "SPLIT FROM", "DOC"}};
  for (const auto& f : Registry::instance().fields())
    rows.push_back({f.name, std::string(to_string(f.type)), std::string(to_string(f.role)),
                    f.value_class.empty() ? "-" : f.value_class, f.split_from.empty() ? "-" : sources(f, ""), f.doc});
  std::fputs(table(rows).c_str(), stdout);
  return 0;
}

int actions_main(int argc, char** argv) {
  register_builtin_plugins();
  std::vector<std::vector<std::string>> rows{{"ACTION", "APPLIES TO", "PARAMETERS", "DOC"}};
  for (const auto& a : Registry::instance().actions()) {
    std::string ps;
    for (const auto& p : a.params) ps += (ps.empty() ? "" : " ") + param_text(p, false);
    rows.push_back({a.name, applies_text(a), ps.empty() ? "-" : ps, a.doc});
  }
  std::fputs(table(rows).c_str(), stdout);
  return 0;
}

static std::string md(std::string s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else if (c == '\n') o += ' ';
    else o += c;
  }
  return o;
}

std::string registry_markdown() {
  register_builtin_plugins();
  const Registry& r = Registry::instance();
  std::string o;
  o += "### Fields\n\n| Field | Type | Role | Value class | Related | Split from | Description |\n"
       "|---|---|---|---|---|---|---|\n";
  for (const auto& f : r.fields()) {
    std::string rel;
    for (const auto& x : f.related) rel += (rel.empty() ? "" : ", ") + x;
    o += "| `" + f.name + "` | " + std::string(to_string(f.type)) + " | " + std::string(to_string(f.role)) + " | " +
         (f.value_class.empty() ? "-" : f.value_class) + " | " + (rel.empty() ? "-" : rel) + " | " + (f.split_from.empty() ? "-" : sources(f, "`")) + " | " + md(f.doc) +
         " |\n";
  }
  o += "\n### Actions\n\n| Action | Applies to | Protects | Description |\n|---|---|---|---|\n";
  for (const auto& a : r.actions())
    o += "| `" + a.name + "()` | " + applies_text(a) + " | " + (a.protects ? "yes" : "no") + " | " + md(a.doc) + " |\n";
  o += "\n### Action parameters\n\n| Action | Parameter | Kind | Required | Positional | Range / choices | Default | Description |\n"
       "|---|---|---|---|---|---|---|---|\n";
  for (const auto& a : r.actions()) {
    for (const auto& p : a.params) {
      bool dur = p.kind == ParamKind::Duration;
      auto f = [&](int64_t v) { return dur ? format_duration(v) : std::to_string(v); };
      std::string range;
      if ((p.kind == ParamKind::Int || dur) && (p.min != INT64_MIN || p.max != INT64_MAX))
        range = (p.min == INT64_MIN ? std::string() : f(p.min)) + " .. " + (p.max == INT64_MAX ? std::string() : f(p.max));
      for (const auto& c : p.choices) range += (range.empty() ? "" : ", ") + c;
      o += "| `" + a.name + "` | `" + p.name + "` | " + std::string(to_string(p.kind)) + " | " +
           (p.required ? "yes" : "no") + " | " + (p.positional >= 0 ? std::to_string(p.positional) : "-") + " | " +
           md(range.empty() ? "-" : range) + " | " + md(p.default_text.empty() ? "-" : p.default_text) + " | " +
           md(p.doc) + " |\n";
    }
  }
  o += "\n### Settings\n\n| Setting | Value | Description |\n|---|---|---|\n";
  for (const auto& s : r.settings())
    o += "| `" + s.name + "` | `" + md(s.value_form) + "` | " + md(s.doc) + " |\n";
  return o;
}

static const char kBegin[] = "<!-- BEGIN GENERATED REGISTRY TABLES: do not edit, run `amon-dsl doc-sync --update` -->\n";
static const char kEnd[] = "<!-- END GENERATED REGISTRY TABLES -->";

int doc_sync(const std::string& path, bool update, std::string& message) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    message = "cannot read " + path;
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  size_t b = doc.find(kBegin), e = doc.find(kEnd);
  if (b == std::string::npos || e == std::string::npos || e < b) {
    message = path + " has no generated block (" + std::string(kEnd) + " markers)";
    return 2;
  }
  size_t from = b + std::strlen(kBegin);
  std::string want = registry_markdown();
  if (doc.compare(from, e - from, want) == 0) {
    message = path + " is in sync with the registry";
    return 0;
  }
  if (!update) {
    message = path + " is out of date with the plugin registry; run: amon-dsl doc-sync --update " + path;
    return 1;
  }
  doc.replace(from, e - from, want);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << doc;
  if (!out) {
    message = "cannot write " + path;
    return 2;
  }
  message = path + " updated";
  return 0;
}

}  // namespace amon::dsl
