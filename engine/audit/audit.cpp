#include "audit.h"

#include "audit_impl.h"
#include "l2l4.h"
#include "registry.h"

namespace amon::audit {

bool Auditor::run(std::string& err) {
  dsl::Diagnostics diags;
  pol = dsl::compile_file(o.policy, diags);
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
