// The lint checks (lint.h): conflicts between rules, and privacy warnings
// (identifiers and related fields left in clear, roles without `clients`,
// addresses in payloads no plugin rewrites), each one function, run in the
// order of kLintChecks.
#include "lint.h"

#include <pcap/pcap.h>

#include <algorithm>
#include <iterator>

#include "compiler.h"
#include "l2l4.h"

namespace amon::dsl {

namespace {

// Whether a BPF select lets through a TCP or UDP packet (IPv4 or IPv6,
// either direction) on some `addr_carrier` port: tried on such packets.
bool bpf_admits_addr_carrier(const std::string& expr) {
  pcap_t* p = pcap_open_dead(DLT_EN10MB, 65535);
  if (!p) return true;
  bpf_program prog{};
  if (pcap_compile(p, &prog, expr.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0) {
    pcap_close(p);
    return true;
  }
  bool any = false;
  for (uint16_t port : Registry::instance().addr_carrier_ports())
    for (uint8_t l4 : {uint8_t(6), uint8_t(17)})
      for (int v6 = 0; v6 < 2 && !any; ++v6)
        for (int dir = 0; dir < 2 && !any; ++dir) {
          uint8_t pkt[14 + 40 + 20] = {};
          pkt[12] = v6 ? 0x86 : 0x08, pkt[13] = v6 ? 0xdd : 0x00;
          uint8_t* ip = pkt + 14;
          const uint32_t l4len = l4 == 6 ? 20 : 8, iplen = v6 ? 40 : 20;
          if (v6) {
            ip[0] = 0x60, ip[5] = uint8_t(l4len), ip[6] = l4, ip[7] = 64;
            ip[8] = 0xfd, ip[23] = 1, ip[24] = 0x20, ip[25] = 0x01, ip[26] = 0x0d, ip[27] = 0xb8, ip[39] = 1;
          } else {
            ip[0] = 0x45, ip[3] = uint8_t(iplen + l4len), ip[8] = 64, ip[9] = l4;
            ip[12] = 10, ip[15] = 1, ip[16] = 192, ip[18] = 2, ip[19] = 1;
          }
          uint8_t* t = ip + iplen;
          const uint16_t sp = dir ? port : 40000, dp = dir ? 40000 : port;
          t[0] = uint8_t(sp >> 8), t[1] = uint8_t(sp), t[2] = uint8_t(dp >> 8), t[3] = uint8_t(dp);
          if (l4 == 6) t[12] = 0x50, t[13] = 0x18;
          else t[5] = 8;
          pcap_pkthdr h{};
          h.caplen = h.len = 14 + iplen + l4len;
          any = pcap_offline_filter(&prog, &h, pkt) != 0;
        }
  pcap_freecode(&prog);
  pcap_close(p);
  return any;
}

}  // namespace

LintContext::LintContext(const Policy& p, const Registry& r, Diagnostics& diags,
                         const std::vector<std::vector<SourceLoc>>& field_locs)
    : pol(p), reg(r), d(diags), rule_field_locs(field_locs), by_field(r.fields().size()), payload(r.field("payload")) {
  for (size_t i = 0; i < pol.rules.size(); ++i)
    for (const FieldDesc* f : pol.rules[i].fields) by_field[f->id].push_back(i);
  if (payload) {
    const Rule* r = first_rule(*payload);
    if (r) payload_gone = !r->when && r->action.desc->protects;
    else payload_gone = pol.payload_default && pol.payload_default->desc->protects;
  }
  if (payload && !payload_gone) {
    const Rule* r = first_rule(*payload);
    if (r && r->when && r->action.desc->protects && r->when->kind == Cond::Kind::Not &&
        r->when->children[0]->kind == Cond::Kind::ProtoIn)
      payload_only_for = r->when->children[0]->protocols;
  }
  for (const Rule& r : pol.rules) {
    if (!r.action.desc->protects) continue;
    for (const FieldDesc* f : r.fields)
      if (f->role == FieldRole::Identifier || f->type == ValueType::Addr) anchor = anchor ? anchor : &r;
  }
}

SourceLoc LintContext::field_loc(size_t rule, const FieldDesc* f) const {
  const auto& rf = pol.rules[rule].fields;
  size_t k = std::find(rf.begin(), rf.end(), f) - rf.begin();
  return rule_field_locs[rule][k];
}

const Rule* LintContext::first_rule(const FieldDesc& f) const {
  return by_field[f.id].empty() ? nullptr : &pol.rules[by_field[f.id].front()];
}

bool LintContext::protected_any(const FieldDesc& f) const {
  for (size_t i : by_field[f.id])
    if (pol.rules[i].action.desc->protects) return true;
  if (&f == payload && pol.payload_default && pol.payload_default->desc->protects) return true;
  return false;
}

bool LintContext::in_clear(const FieldDesc& f) const {
  if (protected_any(f)) return false;
  if (f.hidden_without_rule && by_field[f.id].empty()) return false;
  if (below_payload(f)) return true;
  if (payload_gone) return false;
  if (payload_only_for &&
      std::find(payload_only_for->begin(), payload_only_for->end(), f.protocol) == payload_only_for->end())
    return false;
  return true;
}

// Same-field combination: first matching rule wins, so anything after an
// unconditional rule is either a conflict or dead.
void lint_rule_conflicts(LintContext& c) {
  for (const auto& f : c.reg.fields()) {
    std::optional<size_t> uncond;
    for (size_t i : c.by_field[f.id]) {
      const Rule& r = c.pol.rules[i];
      if (uncond) {
        if (!r.when) {
          c.d.error(c.field_loc(i, &f), "conflicting rules for " + quote(f.name) + ": both apply to every packet",
                    "keep one, or add `when CONDITION` to the earlier one");
          c.d.note(c.field_loc(*uncond, &f), "the first rule for " + quote(f.name) + " is here");
        } else {
          c.d.warning(c.field_loc(i, &f), "rule for " + quote(f.name) + " can never match",
                      "an earlier rule applies to every packet; move this one above it");
          c.d.note(c.field_loc(*uncond, &f), "the earlier rule for " + quote(f.name) + " is here");
        }
        continue;
      }
      if (!r.when) uncond = i;
    }
  }
}

// Identifiers (a user's address, MAC, name...) left in clear while some
// rule protects addresses: named ones kept get a warning each, unnamed ones
// one warning together.
void lint_identifiers_in_clear(LintContext& c) {
  if (!c.anchor) return;
  const auto& fields = c.reg.fields();
  std::vector<const FieldDesc*> unnamed;
  for (const auto& f : fields) {
    if (f.role != FieldRole::Identifier || !c.in_clear(f)) continue;
    const Rule* r = c.first_rule(f);
    if (r) {
      // Named, yet kept: the first rule is a keep (conditional ones only
      // protect some packets, which protected_any already accepted).
      size_t k = std::find(r->fields.begin(), r->fields.end(), &f) - r->fields.begin();
      c.d.warning(c.rule_field_locs[r->index][k],
                  "identifier " + quote(f.name) + " is kept in clear while addresses are protected",
                  "protect it, e.g. " + example_protection(f));
      c.warned.insert(&f);
      continue;
    }
    // Unnamed address identifiers alias other address fields of their
    // protocol (ip.src/ip.dst vs ip.client/ip.server): one named
    // identifier of the same protocol and type covers the bytes.
    bool covered = false;
    if (f.type == ValueType::Addr)
      for (const auto& g : fields)
        if (&g != &f && g.protocol == f.protocol && g.type == f.type && g.role == FieldRole::Identifier &&
            (c.protected_any(g) || c.first_rule(g)))
          covered = true;  // a kept alias gets its own warning above
    // A field split from another takes its rules while none names it: the
    // split lint speaks of it.
    for (const auto& g : fields)
      for (const auto& from : f.split_from)
        if (g.name == from && c.first_rule(g)) covered = true;
    if (!covered) unnamed.push_back(&f);
  }
  // One warning for all unnamed identifiers: they share a cause and a fix.
  if (!unnamed.empty()) {
    std::string names, hint;
    for (const FieldDesc* f : unnamed) {
      names += (names.empty() ? "" : ", ") + quote(f->name);
      hint += (hint.empty() ? (unnamed.size() == 1 ? "add a rule: " : "add rules, e.g. ") : "; ") +
              example_protection(*f);
      c.warned.insert(f);
    }
    c.d.warning(c.anchor->loc,
                std::string(unnamed.size() == 1 ? "identifier " : "identifiers ") + names +
                    (unnamed.size() == 1 ? " is" : " are") + " left in clear (no rule names " +
                    (unnamed.size() == 1 ? "it" : "them") + ") while this rule protects addresses",
                hint);
  }
}

// Roles decide which end a client action protects. Without `clients` the
// engine infers them (SYN/SYN-ACK, a server seen on that port, likely
// server ports); where it cannot, both ends get the client's action, but a
// wrong inference on a flow picked up mid-way leaves a user in clear.
void lint_roles_without_clients(LintContext& c) {
  if (!c.pol.clients.empty()) return;
  const FieldDesc* cl = c.reg.field("ip.client");
  const FieldDesc* sv = c.reg.field("ip.server");
  const Rule* rs = sv ? c.first_rule(*sv) : nullptr;
  if (cl && sv && rs && !rs->when && !rs->action.desc->protects && c.protected_any(*cl)) {
    size_t k = std::find(rs->fields.begin(), rs->fields.end(), sv) - rs->fields.begin();
    c.d.warning(c.rule_field_locs[rs->index][k],
                "'ip.server' is kept while 'ip.client' is protected, but no 'clients' says which end is a user: "
                "roles are then inferred per flow, and a flow picked up mid-way whose roles are guessed wrong "
                "leaves the user's address in clear",
                "set clients = { your users' address ranges } (e.g. clients = { 10.0.0.0/8, 2001:db8::/32 })");
  }
}

namespace {

enum Tri { F, T, U };

// Whether a condition holds for a packet of a protocol that carries
// addresses in its payload (`addr_carrier`): T always, F never, U when the
// packet's kind does not settle it.
Tri on_addr_carrier(const Registry& reg, const Cond& c) {
  const int certain[] = {reg.proto_id("addr_carrier"), reg.proto_id("eth"), reg.proto_id("ip")};
  // A link layer's frames (802.11 data frames) carry IP packets too.
  const LinkLayer* link = link_layer();
  const int maybe[] = {reg.proto_id("ipv4"), reg.proto_id("ipv6"), reg.proto_id("tcp"),
                       reg.proto_id("udp"),  reg.proto_id("vlan"), reg.proto_id("mpls"),
                       link ? reg.proto_id(link->name) : -1};
  switch (c.kind) {
    case Cond::Kind::And: {
      Tri v = T;
      for (auto& ch : c.children) {
        Tri x = on_addr_carrier(reg, *ch);
        if (x == F) return F;
        if (x == U) v = U;
      }
      return v;
    }
    case Cond::Kind::Or: {
      Tri v = F;
      for (auto& ch : c.children) {
        Tri x = on_addr_carrier(reg, *ch);
        if (x == T) return T;
        if (x == U) v = U;
      }
      return v;
    }
    case Cond::Kind::Not: {
      Tri x = on_addr_carrier(reg, *c.children[0]);
      return x == U ? U : x == T ? F : T;
    }
    case Cond::Kind::ProtoIn: {
      Tri v = F;
      for (const auto& p : c.protocols) {
        const int id = reg.proto_id(p);
        if (id < 0) continue;
        // Every packet of such a protocol is one of these; some packets of these are.
        if (std::find(std::begin(certain), std::end(certain), id) != std::end(certain)) return T;
        if (std::find(std::begin(maybe), std::end(maybe), id) != std::end(maybe)) v = U;
      }
      return v;
    }
    case Cond::Kind::FieldCmp: return U;
  }
  return U;
}

}  // namespace

// Addresses protected, but the payload of protocols that carry addresses
// in it, and that no plugin rewrites (`addr_carrier`, doc/language.md),
// delivered: the header's pseudonym and the payload's clear address
// would sit side by side. Decided for such a packet by the payload rules
// in order, with conditions that the packet's kind does not settle taken
// as "maybe": a keep that may apply warns, a protection that may not
// apply does not end the search.
void lint_addr_carrier_payload(LintContext& c) {
  const FieldDesc* const addr_fields[] = {c.reg.field("ip.client"), c.reg.field("ip.src"), c.reg.field("ip.dst")};
  bool protects_addr = false;
  for (const Rule& r : c.pol.rules)
    for (const FieldDesc* f : r.fields)
      if (r.action.desc->protects && std::find(std::begin(addr_fields), std::end(addr_fields), f) != std::end(addr_fields))
        protects_addr = true;
  if (!protects_addr || !c.payload) return;
  const Rule* keeps = nullptr;
  // A select that admits none of them decides for every rule.
  bool decided = (c.pol.select_cond && on_addr_carrier(c.reg, *c.pol.select_cond) == F) ||
                 (!c.pol.select_bpf.empty() && !bpf_admits_addr_carrier(c.pol.select_bpf));
  for (size_t i : c.by_field[c.payload->id]) {
    if (decided) break;
    const Rule& r = c.pol.rules[i];
    const Tri v = r.when ? on_addr_carrier(c.reg, *r.when) : T;
    if (v == F) continue;
    if (!r.action.desc->protects) {
      keeps = &r;
      break;
    }
    if (v == T) {
      decided = true;
      break;
    }
  }
  if (!keeps && !decided && !(c.pol.payload_default && c.pol.payload_default->desc->protects))
    keeps = c.anchor;
  if (keeps) {
    size_t k = 0;
    while (k < keeps->fields.size() && keeps->fields[k] != c.payload) ++k;
    c.d.warning(k < keeps->fields.size() ? c.rule_field_locs[keeps->index][k] : keeps->loc,
                "addresses are protected, but the payload of protocols that carry addresses in it (FTP PORT/PASV, "
                "SIP/SDP, H.323, NetBIOS, SMB, RADIUS, STUN, NetFlow, syslog...: `addr_carrier`, see "
                "doc/language.md) is delivered, and no plugin rewrites the addresses there",
                "protect it before this rule: payload : cut() when proto in { addr_carrier }");
  }
}

// A protected field whose plugin names related fields (the same value
// elsewhere in the packet) that stay in clear.
void lint_related_in_clear(LintContext& c) {
  std::set<std::pair<const FieldDesc*, const FieldDesc*>> pairs;
  for (const Rule& r : c.pol.rules) {
    if (!r.action.desc->protects) continue;
    for (size_t k = 0; k < r.fields.size(); ++k) {
      const FieldDesc* f = r.fields[k];
      for (const auto& rn : f->related) {
        const FieldDesc* g = c.reg.field(rn);
        if (!g || c.warned.count(g) || !c.in_clear(*g) || g->role == FieldRole::Content || g->role == FieldRole::Other)
          continue;
        if (!pairs.insert({f, g}).second) continue;
        std::string hint = "add a rule: ";
        bool same = g->type == f->type;
        hint += same ? g->name + " : " + to_string(r.action) : example_protection(*g);
        c.d.warning(c.rule_field_locs[r.index][k],
                    quote(f->name) + " is protected but the related " + quote(g->name) + " is left in clear", hint);
      }
    }
  }
}

namespace {

struct LintCheck {
  const char* name;
  void (*run)(LintContext&);
  // Reasons about the policy as a whole (what it leaves in clear): run only
  // on a policy with no error, where no rule is missing. The others judge
  // the rules that compiled among themselves, and run whatever else is
  // wrong in the file, so one run reports every error.
  bool whole_policy = true;
};

// In this order: the identifiers check marks what it warned about
// (`warned`), which the related-fields check then leaves alone.
constexpr LintCheck kLintChecks[] = {
    {"rule-conflicts", lint_rule_conflicts, false},
    {"identifiers-in-clear", lint_identifiers_in_clear},
    {"roles-without-clients", lint_roles_without_clients},
    {"addr-carrier-payload", lint_addr_carrier_payload},
    {"related-in-clear", lint_related_in_clear},
    {"sizes", lint_sizes},
    {"catch-alls", [](LintContext& c) { lint_catch_alls(c.pol, c.reg, c.d); }},
    {"privacy", [](LintContext& c) {
       lint_privacy(c.pol, c.reg, c.d, [&c](const FieldDesc& f) { return c.in_clear(f); });
     }},
};

}  // namespace

void run_lint_checks(LintContext& c) {
  for (const LintCheck& check : kLintChecks)
    if (!check.whole_policy || !c.d.errors()) check.run(c);
}

void Compiler::analyze() {
  LintContext c(*pol_, reg_, d_, rule_field_locs_);
  run_lint_checks(c);
}

}  // namespace amon::dsl
