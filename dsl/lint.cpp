// The checks of a whole policy once every rule compiled: conflicts between
// rules, and privacy warnings (identifiers and related fields left in clear,
// roles without `clients`, addresses in payloads no plugin rewrites).
#include "compiler.h"

#include <pcap/pcap.h>

#include <algorithm>
#include <functional>

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
  for (uint16_t port : kAddrCarrierPorts)
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

void Compiler::analyze() {
  const auto& fields = reg_.fields();
  std::vector<std::vector<size_t>> by_field(fields.size());
  for (size_t i = 0; i < pol_->rules.size(); ++i)
    for (const FieldDesc* f : pol_->rules[i].fields) by_field[f->id].push_back(i);

  auto field_loc = [&](size_t rule, const FieldDesc* f) {
    const auto& rf = pol_->rules[rule].fields;
    size_t k = std::find(rf.begin(), rf.end(), f) - rf.begin();
    return rule_field_locs_[rule][k];
  };

  // Same-field combination: first matching rule wins, so anything after an
  // unconditional rule is either a conflict or dead.
  for (const auto& f : fields) {
    std::optional<size_t> uncond;
    for (size_t i : by_field[f.id]) {
      const Rule& r = pol_->rules[i];
      if (uncond) {
        if (!r.when) {
          d_.error(field_loc(i, &f), "conflicting rules for " + quote(f.name) + ": both apply to every packet",
                   "keep one, or add `when CONDITION` to the earlier one");
          d_.note(field_loc(*uncond, &f), "the first rule for " + quote(f.name) + " is here");
        } else {
          d_.warning(field_loc(i, &f), "rule for " + quote(f.name) + " can never match",
                     "an earlier rule applies to every packet; move this one above it");
          d_.note(field_loc(*uncond, &f), "the earlier rule for " + quote(f.name) + " is here");
        }
        continue;
      }
      if (!r.when) uncond = i;
    }
  }
  if (d_.errors()) return;

  // Privacy warnings.
  const FieldDesc* payload = reg_.field("payload");
  auto first_rule = [&](const FieldDesc& f) -> const Rule* {
    return by_field[f.id].empty() ? nullptr : &pol_->rules[by_field[f.id].front()];
  };
  auto protected_any = [&](const FieldDesc& f) {
    for (size_t i : by_field[f.id])
      if (pol_->rules[i].action.desc->protects) return true;
    if (&f == payload && pol_->payload_default && pol_->payload_default->desc->protects) return true;
    return false;
  };
  // Payload removed or blanked for every packet: fields parsed out of it are gone too.
  bool payload_gone = false;
  if (payload) {
    const Rule* r = first_rule(*payload);
    if (r) payload_gone = !r->when && r->action.desc->protects;
    else payload_gone = pol_->payload_default && pol_->payload_default->desc->protects;
  }
  // `payload : cut() when not proto in { dns }` keeps payload for DNS only:
  // fields of every other application protocol are removed with it.
  std::optional<std::vector<std::string>> payload_only_for;
  if (payload && !payload_gone) {
    const Rule* r = first_rule(*payload);
    if (r && r->when && r->action.desc->protects && r->when->kind == Cond::Kind::Not &&
        r->when->children[0]->kind == Cond::Kind::ProtoIn)
      payload_only_for = r->when->children[0]->protocols;
  }
  auto in_clear = [&](const FieldDesc& f) {
    if (protected_any(f)) return false;
    if (below_payload(f)) return true;
    if (payload_gone) return false;
    if (payload_only_for &&
        std::find(payload_only_for->begin(), payload_only_for->end(), f.protocol) == payload_only_for->end())
      return false;
    return true;
  };
  const Rule* anchor = nullptr;  // first rule that protects an address or identifier
  for (const Rule& r : pol_->rules) {
    if (!r.action.desc->protects) continue;
    for (const FieldDesc* f : r.fields)
      if (f->role == FieldRole::Identifier || f->type == ValueType::Addr) anchor = anchor ? anchor : &r;
  }
  std::set<const FieldDesc*> warned;
  std::vector<const FieldDesc*> unnamed;
  if (anchor) {
    for (const auto& f : fields) {
      if (f.role != FieldRole::Identifier || !in_clear(f)) continue;
      const Rule* r = first_rule(f);
      if (r) {
        // Named, yet kept: the first rule is a keep (conditional ones only
        // protect some packets, which protected_any already accepted).
        size_t k = std::find(r->fields.begin(), r->fields.end(), &f) - r->fields.begin();
        d_.warning(rule_field_locs_[r->index][k],
                   "identifier " + quote(f.name) + " is kept in clear while addresses are protected",
                   "protect it, e.g. " + example_protection(f));
        warned.insert(&f);
        continue;
      }
      // Unnamed address identifiers alias other address fields of their
      // protocol (ip.src/ip.dst vs ip.client/ip.server): one named
      // identifier of the same protocol and type covers the bytes.
      bool covered = false;
      if (f.type == ValueType::Addr)
        for (const auto& g : fields)
          if (&g != &f && g.protocol == f.protocol && g.type == f.type && g.role == FieldRole::Identifier &&
              (protected_any(g) || first_rule(g)))
            covered = true;  // a kept alias gets its own warning above
      if (!covered) unnamed.push_back(&f);
    }
    // One warning for all unnamed identifiers: they share a cause and a fix.
    if (!unnamed.empty()) {
      std::string names, hint;
      for (const FieldDesc* f : unnamed) {
        names += (names.empty() ? "" : ", ") + quote(f->name);
        hint += (hint.empty() ? (unnamed.size() == 1 ? "add a rule: " : "add rules, e.g. ") : "; ") +
                example_protection(*f);
        warned.insert(f);
      }
      d_.warning(anchor->loc,
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
  if (pol_->clients.empty()) {
    const FieldDesc* cl = reg_.field("ip.client");
    const FieldDesc* sv = reg_.field("ip.server");
    const Rule* rs = sv ? first_rule(*sv) : nullptr;
    if (cl && sv && rs && !rs->when && !rs->action.desc->protects && protected_any(*cl)) {
      size_t k = std::find(rs->fields.begin(), rs->fields.end(), sv) - rs->fields.begin();
      d_.warning(rule_field_locs_[rs->index][k],
                 "'ip.server' is kept while 'ip.client' is protected, but no 'clients' says which end is a user: "
                 "roles are then inferred per flow, and a flow picked up mid-way whose roles are guessed wrong "
                 "leaves the user's address in clear",
                 "set clients = { your users' address ranges } (e.g. clients = { 10.0.0.0/8, 2001:db8::/32 })");
    }
  }
  // Addresses protected, but the payload of protocols that carry addresses
  // in it, and that no plugin rewrites (`addr_carrier`, doc/language.md),
  // delivered: the header's pseudonym and the payload's clear address
  // would sit side by side. Decided for such a packet by the payload rules
  // in order, with conditions that the packet's kind does not settle taken
  // as "maybe": a keep that may apply warns, a protection that may not
  // apply does not end the search.
  const FieldDesc* const addr_fields[] = {reg_.field("ip.client"), reg_.field("ip.src"), reg_.field("ip.dst")};
  bool protects_addr = false;
  for (const Rule& r : pol_->rules)
    for (const FieldDesc* f : r.fields)
      if (r.action.desc->protects && std::find(std::begin(addr_fields), std::end(addr_fields), f) != std::end(addr_fields))
        protects_addr = true;
  if (protects_addr && payload) {
    const int certain[] = {reg_.proto_id("addr_carrier"), reg_.proto_id("eth"), reg_.proto_id("ip")};
    const int maybe[] = {reg_.proto_id("ipv4"), reg_.proto_id("ipv6"), reg_.proto_id("tcp"),
                         reg_.proto_id("udp"),  reg_.proto_id("vlan"), reg_.proto_id("mpls")};
    enum Tri { F, T, U };
    std::function<Tri(const Cond&)> ev;
    ev = [&](const Cond& c) -> Tri {
      switch (c.kind) {
        case Cond::Kind::And: {
          Tri v = T;
          for (auto& ch : c.children) {
            Tri x = ev(*ch);
            if (x == F) return F;
            if (x == U) v = U;
          }
          return v;
        }
        case Cond::Kind::Or: {
          Tri v = F;
          for (auto& ch : c.children) {
            Tri x = ev(*ch);
            if (x == T) return T;
            if (x == U) v = U;
          }
          return v;
        }
        case Cond::Kind::Not: {
          Tri x = ev(*c.children[0]);
          return x == U ? U : x == T ? F : T;
        }
        case Cond::Kind::ProtoIn: {
          Tri v = F;
          for (const auto& p : c.protocols) {
            const int id = reg_.proto_id(p);
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
    };
    const Rule* keeps = nullptr;
    // A select that admits none of them decides for every rule.
    bool decided = (pol_->select_cond && ev(*pol_->select_cond) == F) ||
                   (!pol_->select_bpf.empty() && !bpf_admits_addr_carrier(pol_->select_bpf));
    for (size_t i : by_field[payload->id]) {
      if (decided) break;
      const Rule& r = pol_->rules[i];
      const Tri v = r.when ? ev(*r.when) : T;
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
    if (!keeps && !decided && !(pol_->payload_default && pol_->payload_default->desc->protects))
      keeps = anchor;
    if (keeps) {
      size_t k = 0;
      while (k < keeps->fields.size() && keeps->fields[k] != payload) ++k;
      d_.warning(k < keeps->fields.size() ? rule_field_locs_[keeps->index][k] : keeps->loc,
                 "addresses are protected, but the payload of protocols that carry addresses in it (FTP PORT/PASV, "
                 "SIP/SDP, H.323, NetBIOS, SMB, RADIUS, STUN, NetFlow, syslog...: `addr_carrier`, see "
                 "doc/language.md) is delivered, and no plugin rewrites the addresses there",
                 "protect it before this rule: payload : cut() when proto in { addr_carrier }");
    }
  }
  std::set<std::pair<const FieldDesc*, const FieldDesc*>> pairs;
  for (const Rule& r : pol_->rules) {
    if (!r.action.desc->protects) continue;
    for (size_t k = 0; k < r.fields.size(); ++k) {
      const FieldDesc* f = r.fields[k];
      for (const auto& rn : f->related) {
        const FieldDesc* g = reg_.field(rn);
        if (!g || warned.count(g) || !in_clear(*g) || g->role == FieldRole::Content || g->role == FieldRole::Other)
          continue;
        if (!pairs.insert({f, g}).second) continue;
        std::string hint = "add a rule: ";
        bool same = g->type == f->type;
        hint += same ? g->name + " : " + to_string(r.action) : example_protection(*g);
        d_.warning(rule_field_locs_[r.index][k],
                   quote(f->name) + " is protected but the related " + quote(g->name) + " is left in clear", hint);
      }
    }
  }
}

}  // namespace amon::dsl
