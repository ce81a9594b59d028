#include "audit.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "audit_impl.h"
#include "l2l4.h"
#include "registry.h"

namespace amon::audit {

namespace {

// The policy compiled without its secrets. The audit reproduces no hash and
// no Crypto-PAn mapping (it only searches for values in clear), so it has
// no use for a key, and an officer signing an output off need not hold the
// operator's keys: each `key NAME = file(...)` or `env(...)` of the policy
// file becomes a placeholder the compiler takes in its stead. (Keys
// declared in an included file are still loaded by the compiler.)
std::shared_ptr<const dsl::Policy> compile_keyless(const std::string& path, dsl::Diagnostics& diags) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return dsl::compile_file(path, diags);  // the compiler says why
  std::stringstream ss;
  ss << f.rdbuf();
  static const std::regex key_src(R"(^(\s*key\s+[A-Za-z_][A-Za-z0-9_]*\s*=\s*)(file|env)\s*\(\s*"[^"]*"\s*\))",
                                  std::regex::multiline);
  std::string src = std::regex_replace(ss.str(), key_src, "$1env(\"AMON_AUDIT_NO_KEY\")");
  // Compiled from a string, includes would be read from the current
  // directory: point relative ones at the policy's own, as compile_file does.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty()) {
    static const std::regex inc(R"(^(\s*include\s+")([^/"][^"]*"))", std::regex::multiline);
    src = std::regex_replace(src, inc, "$1" + dir + "/$2");
  }
  dsl::CompileOptions opts;
  opts.getenv = [](const char* v) -> const char* {
    return std::string(v) == "AMON_AUDIT_NO_KEY" ? "0000000000000000000000000000000000000000000000000000000000000000"
                                                 : std::getenv(v);
  };
  return dsl::compile_string(src, path, diags, opts);
}

}  // namespace

bool Auditor::run(std::string& err) {
  dsl::Diagnostics diags;
  pol = compile_keyless(o.policy, diags);
  if (!pol || diags.errors()) {
    err = diags.render_text();
    if (err.empty()) err = o.policy + ": cannot compile";
    return false;
  }
  for (auto& rule : pol->rules) {
    for (auto* fd : rule.fields) {
      const auto& F = l2l4::g_fields;
      const FieldId n = fd->id;
      if (n == F.ip_src || n == F.ip_dst || n == F.ip_client || n == F.ip_server) {
        if (addr_rules.empty() || addr_rules.back() != &rule) addr_rules.push_back(&rule);
        continue;
      }
      // The first rule naming a field decides; a conditional keep still
      // protects elsewhere, so only an unconditional one counts as keep.
      auto it = frule.find(fd->name);
      if (it == frule.end()) frule[fd->name] = FieldRule{&rule};
      else if (it->second.keep() && it->second.rule && it->second.rule->when) it->second = FieldRule{&rule};
    }
  }
  psl = psl_latest(nullptr);
  if (!psl) psl = const_cast<psl_ctx_t*>(psl_builtin());
  if (!read_pcap(o.original, in, lt_in, err) || !read_pcap(o.anonymized, out, lt_out, err)) return false;
  r.original_frames = in.size();
  r.anonymized_frames = out.size();
  collect();
  return search(err);
}

bool run(const Options& o, Report& r, std::string& err) {
  register_builtin_plugins();
  Auditor a(o, r);
  return a.run(err);
}

}  // namespace amon::audit
