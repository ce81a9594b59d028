// Privacy checks of a compiled policy that look at how its rules relate
// (which side of a flow, which carrier of a name gets the weaker action).
#include "policy.h"

#include <string>
#include <vector>

namespace amon::dsl {

namespace {

// How much of an address an action lets through, least first: what a
// consumer sees when the two sides of a flow are told apart wrongly.
int addr_strength(const ActionCall& a) {
  switch (a.desc->kind) {
    case ActionKind::Keep: return 0;
    case ActionKind::Zanon: return 1;   // released once z users share it
    case ActionKind::Prefix: return 2;  // the network in clear
    case ActionKind::CryptoPan:
    case ActionKind::Hash: return 3;    // a pseudonym
    default: return 4;                  // nothing of it
  }
}

const Rule* unconditional(const Policy& pol, const FieldDesc* f) {
  if (!f) return nullptr;
  for (const Rule& r : pol.rules)
    if (!r.when)
      for (const FieldDesc* g : r.fields)
        if (g == f) return &r;
  return nullptr;
}

bool named(const Policy& pol, const FieldDesc* f) {
  for (const Rule& r : pol.rules)
    for (const FieldDesc* g : r.fields)
      if (g == f) return true;
  return false;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

void roles_without_clients(const Policy& pol, const Registry& reg, Diagnostics& d) {
  if (!pol.clients.empty()) return;
  const Rule* rc = unconditional(pol, reg.field("ip.client"));
  const Rule* rs = unconditional(pol, reg.field("ip.server"));
  if (!rc || !rs || rc == rs) return;
  const int c = addr_strength(rc->action), s = addr_strength(rs->action);
  if (s >= c) return;
  // keep(): the compiler's own warning says it.
  if (s > 0)
    d.warning(rs->loc,
              "'ip.server' gets a weaker action (" + to_string(rs->action) + ") than 'ip.client' (" +
                  to_string(rc->action) + ") but no 'clients' says which end is a user: a user whose host "
                  "accepts connections (P2P, games) is then a server wherever the engine has not seen it "
                  "initiate a flow",
              "set clients = { your users' address ranges } (e.g. clients = { 10.0.0.0/8, 2001:db8::/32 })");
  const FieldDesc* tunnel = reg.field("tunnel.addr");
  if (tunnel && !named(pol, tunnel))
    d.warning(rs->loc,
              "tunnel endpoints ('tunnel.addr', no rule) inherit 'ip.server''s action (" + to_string(rs->action) +
                  "), weaker than 'ip.client''s, and without 'clients' a user's tunnel endpoint cannot be told "
                  "from a relay's",
              "set clients = { ... }, or add a rule: tunnel.addr : " + to_string(rc->action));
}

// A name protected on one carrier and in clear on another is published by
// the second: the same visit, the same name.
void names_across_carriers(const Policy& pol, const Registry& reg, Diagnostics& d,
                           const std::function<bool(const FieldDesc&)>& in_clear) {
  const char* const dns[] = {"dns.qname", "dns.answer.name"};
  const char* const web[] = {"tls.sni", "http.host"};
  auto check = [&](const char* const* prot, const char* const* other, const char* what) {
    const Rule* anchor = nullptr;
    for (const Rule& r : pol.rules) {
      if (!r.action.desc->protects || anchor) continue;
      for (const FieldDesc* f : r.fields)
        for (int i = 0; i < 2; ++i)
          if (f == reg.field(prot[i])) anchor = &r;
    }
    if (!anchor) return;
    std::string clear;
    for (int i = 0; i < 2; ++i)
      if (const FieldDesc* g = reg.field(other[i]); g && in_clear(*g)) clear += (clear.empty() ? "" : ", ") + quote(g->name);
    if (clear.empty()) return;
    std::string list;
    for (int i = 0; i < 2; ++i)
      if (const FieldDesc* g = reg.field(other[i]); g && in_clear(*g)) list += (list.empty() ? "" : ", ") + g->name;
    d.warning(anchor->loc,
              std::string("this rule protects ") + what + ", but the same names travel in clear in " + clear +
                  " (QUIC Initials carry 'tls.sni')",
              "add a rule: " + list + " : " + to_string(anchor->action));
  };
  check(dns, web, "DNS names");
  check(web, dns, "the names of TLS SNI or the HTTP Host");
}

}  // namespace

void lint_privacy(const Policy& pol, const Registry& reg, Diagnostics& d,
                  const std::function<bool(const FieldDesc&)>& in_clear) {
  roles_without_clients(pol, reg, d);
  names_across_carriers(pol, reg, d, in_clear);
}

}  // namespace amon::dsl
