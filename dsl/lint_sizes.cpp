// Lint: cut() where the consumer keeps sizes. cut() removes bytes from the
// record and rewrites every IP, UDP and TCP length and the record's original
// length to what is left, so a flow probe (NetFlow/IPFIX octets from the IP
// length), a meter or `tshark -z conv` counts the bytes amon left, not the
// bytes the link carried. snap() removes the same bytes from the record and
// keeps every length (as a capture's snap length does). A policy that says
// it keeps sizes (`on_error = snap`: what cannot be anonymized leaves the
// record, sizes stay) or that keeps what a flow record is made of (an
// address kept for every packet, no application field named: a headers-only
// consumer) is told so at each cut() rule.
#include <string>

#include "lint.h"

namespace amon::dsl {

namespace {

// Fields of the packet's own headers: what a flow record is made of.
bool flow_field(const FieldDesc& f) { return f.header; }

bool is(const ActionCall& a, ActionKind k) { return a.desc && a.desc->kind == k; }

}  // namespace

void lint_sizes(LintContext& c) {
  const Policy& pol = c.pol;
  const Rule* kept_flow = nullptr;  // the first rule keeping a flow field
  bool app_fields = false;
  for (const Rule& r : pol.rules)
    for (const FieldDesc* f : r.fields) {
      if (f == c.payload) continue;
      if (!flow_field(*f)) app_fields = true;
      else if (!kept_flow && !r.when && is(r.action, ActionKind::Keep) && f->type == ValueType::Addr) kept_flow = &r;
    }
  const bool says_sizes = pol.on_error == Policy::OnError::Snap;
  if (!says_sizes && (!kept_flow || app_fields)) return;
  const std::string why = says_sizes ? "this policy says sizes stay (on_error = snap)"
                                     : "this policy keeps flow fields ('" + kept_flow->text + "') and no application field";
  auto warn = [&](const SourceLoc& loc, const std::string& fields, bool when) {
    c.d.warning(loc,
                "cut() rewrites every IP, UDP and TCP length and the record's original length to what is left, but " +
                    why + ": a flow probe or meter counting octets from these lengths would count only what amon "
                    "left, not what the link carried",
                "snap() removes the same bytes from the record and keeps every length (as a capture's snap "
                "length does): " + fields + " : snap()" + (when ? " when ..." : ""));
  };
  for (const Rule& r : pol.rules) {
    if (!is(r.action, ActionKind::Cut)) continue;
    std::string fields;
    for (const FieldDesc* f : r.fields) fields += (fields.empty() ? "" : ", ") + f->name;
    warn(r.loc, fields, r.when != nullptr);
  }
  if (pol.payload_default && is(*pol.payload_default, ActionKind::Cut)) warn(pol.payload_default->loc, "payload", false);
}

}  // namespace amon::dsl
