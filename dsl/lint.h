// The lint checks: what `amon lint` (and every start-up and reload, which
// compile the same way) says about a whole policy once each of its rules
// compiled. Each check is one function taking a LintContext; kLintChecks
// (lint.cpp) lists them in the order they run. A new check goes in a file
// of its own (or beside a related one), is declared here and added to that
// list.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "policy.h"

namespace amon::dsl {

// What the checks read: the compiled policy, the registry, where each rule
// names each field, and facts several checks share. Checks report through
// `d` (errors, warnings, notes with their source locations).
struct LintContext {
  LintContext(const Policy& p, const Registry& r, Diagnostics& diags,
              const std::vector<std::vector<SourceLoc>>& field_locs);

  const Policy& pol;
  const Registry& reg;
  Diagnostics& d;
  const std::vector<std::vector<SourceLoc>>& rule_field_locs;  // per rule, per field it names
  std::vector<std::vector<size_t>> by_field;  // per field id: the rules naming it, in policy order
  const FieldDesc* payload;                   // the registry's `payload` field (null without one)
  // Payload removed or blanked for every packet: fields parsed out of it are gone too.
  bool payload_gone = false;
  // `payload : cut() when not proto in { dns }` keeps payload for DNS only:
  // fields of every other application protocol are removed with it.
  std::optional<std::vector<std::string>> payload_only_for;
  const Rule* anchor = nullptr;  // first rule that protects an address or identifier
  // Fields a check already warned about as left in clear (identifiers):
  // later checks say nothing more about them.
  std::set<const FieldDesc*> warned;

  // Where rule `rule` names field `f`.
  SourceLoc field_loc(size_t rule, const FieldDesc* f) const;
  const Rule* first_rule(const FieldDesc& f) const;
  // Some rule (or the payload default) protects f, for some packets at least.
  bool protected_any(const FieldDesc& f) const;
  // f reaches the output unprotected for some packets.
  bool in_clear(const FieldDesc& f) const;
};

// The checks, in the order they run (kLintChecks). Those about the policy
// as a whole run only while it has no error; the rule conflicts run always,
// beside whatever other error the file has.
void lint_rule_conflicts(LintContext& c);       // same field, rules that cannot both apply
void lint_identifiers_in_clear(LintContext& c);  // identifiers kept while addresses are protected
void lint_roles_without_clients(LintContext& c);
void lint_addr_carrier_payload(LintContext& c);  // clear addresses in payloads no plugin rewrites
void lint_related_in_clear(LintContext& c);      // a protected field's related fields left in clear
void lint_sizes(LintContext& c);                 // cut() where the consumer keeps sizes (lint_sizes.cpp)

// Runs every check in kLintChecks' order.
void run_lint_checks(LintContext& c);

}  // namespace amon::dsl
