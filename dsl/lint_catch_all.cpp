// Lint: fields split from a catch-all. A catch-all field (http.other_headers:
// every header no other field names) loses a value each time a plugin
// promotes it to a field of its own; the engine gives such a field the
// catch-all's rules while no rule names it, so a policy written before the
// split protects it still. The linter says where that happens, so that the
// operator sees which rule decides the field and can give it its own.
#include <set>
#include <string>

#include "policy.h"

namespace amon::dsl {

void lint_catch_alls(const Policy& pol, const Registry& reg, Diagnostics& d) {
  std::set<const FieldDesc*> named;
  for (const Rule& r : pol.rules) named.insert(r.fields.begin(), r.fields.end());
  std::set<const FieldDesc*> warned;
  for (const Rule& r : pol.rules)
    for (const FieldDesc* catch_all : r.fields)
      for (const FieldDesc& f : reg.fields()) {
        // Only the first of its sources that a rule names lends its rules.
        const std::string* lender = nullptr;
        for (const auto& from : f.split_from)
          if (const FieldDesc* g = reg.field(from); g && named.count(g)) {
            lender = &from;
            break;
          }
        // Another protocol's field lends its rules to the same value seen
        // elsewhere (a device's NetBIOS name takes the DNS name rules): that
        // is the rule the operator wrote for it, nothing to point out.
        if (!lender || *lender != catch_all->name || catch_all->protocol != f.protocol || named.count(&f) ||
            !warned.insert(&f).second)
          continue;
        d.warning(r.loc,
                  "'" + f.name + "' was split from '" + catch_all->name + "' and no rule names it: it takes this " +
                      "rule of '" + catch_all->name + "' (" + to_string(r.action) + ")",
                  "name it in a rule of its own to give it another action, e.g. " + f.name + " : " +
                      to_string(r.action));
      }
}

}  // namespace amon::dsl
