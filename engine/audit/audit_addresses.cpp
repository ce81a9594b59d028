// Roles and address rules: which rule an address takes where it appears,
// and what an action writes back of it.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "audit_impl.h"

namespace amon::audit {

// Unspecified, broadcast and group addresses name no host; neither does a
// /24's broadcast address (a host at .255 of a wider subnet is missed).
// The reserved 240/4 does: networks number hosts in it.
bool Auditor::names_no_host(Kind k, const std::string& a) {
  auto* b = reinterpret_cast<const uint8_t*>(a.data());
  if (k == Kind::Addr4) return b[0] == 0 || (b[0] >= 224 && b[0] < 240) || b[3] == 255 || b[0] == 127;
  if (b[0] == 0xff) return true;
  for (int i = 0; i < 15; ++i)
    if (b[i]) return false;
  return b[15] <= 1;  // :: and ::1
}

// What a rule's action writes where it leaves part of the value: prefix(n)
// keeps the first n bits (and may thus give back the address itself),
// zero() writes zeros. Those bytes are the policy's to give. No key is
// read here, so a pseudonym is never worked out: an address that
// cryptopan() gives back unchanged (a fixed point of the key) is an
// address in clear, and reported as such (README.md, "No secret").
void Auditor::allow_derived(size_t fi, Kind k, const std::string& a, const ActionCall& c) {
  const ActionCall* x = &c;
  if (c.desc->uses_zstore) {
    auto* fb = c.arg("fallback");
    if (!fb || !fb->action) return;
    x = fb->action.get();
  }
  int bits = -1;
  if (x->desc->kind == ActionKind::Zero) bits = 0;
  else if (x->desc->kind == ActionKind::Prefix) bits = int(k == Kind::Addr4 ? x->int_or("bits", 32) : x->int_or("v6", 128));
  if (bits < 0) return;
  std::string m = a;
  for (unsigned i = 0; i < m.size(); ++i) m[i] = char(uint8_t(m[i]) & uint8_t(0xff00 >> std::clamp(bits - int(i * 8), 0, 8)));
  allow(fi, k, m);
}

void Auditor::plan_clients() {
  for (auto* rr : addr_rules)
    for (auto* fd : rr->fields)
      if (fd->id == l2l4::g_fields.ip_client && (!client_rule || (client_rule->when && !rr->when))) client_rule = rr;
  clients_protected = !pol->clients.empty() && client_rule && client_rule->action.desc->protects;
}

bool Auditor::is_client_addr(Kind k, const std::string& a) const {
  if (!((k == Kind::Addr4 && a.size() == 4) || (k == Kind::Addr6 && a.size() == 16))) return false;
  return in_cidrs(pol->clients, k == Kind::Addr4 ? 4 : 6, reinterpret_cast<const uint8_t*>(a.data()));
}

// A value left in clear in frame `frame`. An address inside `clients` never
// is, whatever rule its position takes (a tunnel endpoint, a server
// position, a DNS answer, a release by z-anonymity), unless ip.client's own
// rule keeps it: there it is protected as ip.client.
void Auditor::allow(size_t frame, Kind k, const std::string& b) {
  if (clients_protected && is_client_addr(k, b)) {
    if (!names_no_host(k, b)) protect(k, b, "ip.client", FieldRule{client_rule});
    return;
  }
  allowed_keys[frame].push_back(key(k, b));
}

bool Auditor::in_cidrs(const std::vector<dsl::Cidr>& cs, uint8_t fam, const uint8_t* a) {
  for (auto& c : cs)
    if (c.contains(fam, a)) return true;
  return false;
}

// Likely server ports, as Zeek's likely_server_ports: the system range and
// registered services that listen on a fixed port.
bool Auditor::likely_server(uint16_t p) {
  static const std::unordered_set<uint16_t> reg = {
      1080, 1194, 1433, 1521, 1701, 1723, 1812, 1813, 1900, 2049, 2083, 2087, 2096, 3128, 3268, 3306, 3389,
      3478, 3479, 4433, 4500, 5060, 5061, 5222, 5223, 5228, 5349, 5353, 5355, 5432, 5900, 6379, 6443, 6666,
      6667, 6697, 8000, 8008, 8080, 8081, 8443, 8883, 8888, 9000, 9090, 9092, 9200, 9418, 11211, 27017};
  return p != 0 && (p < 1024 || reg.count(p));
}

// 0: source is the client, 1: destination, 2: uncertain (both protected).
int Auditor::client_side(const uint8_t* f, const Decoded& d) {
  std::string sa(reinterpret_cast<const char*>(f + d.src_off()), d.addr_len());
  std::string da(reinterpret_cast<const char*>(f + d.dst_off()), d.addr_len());
  uint8_t fam = d.ip_version;
  if (!pol->clients.empty()) {
    bool s = in_cidrs(pol->clients, fam, f + d.src_off()), t = in_cidrs(pol->clients, fam, f + d.dst_off());
    if (s != t) return s ? 0 : 1;
    if (s && t) return 2;
  }
  bool ports = d.has_l4_header() && (d.l4_proto == kProtoTcp || d.l4_proto == kProtoUdp || d.l4_proto == kProtoSctp);
  bool later = d.flags & kFlagLaterFragment;
  if (later || !d.has_l4_header()) {
    auto it = pair_role.find({sa, da});
    return it == pair_role.end() ? 2 : it->second;
  }
  Ep s{sa, ports ? d.sport : uint16_t(0), d.l4_proto}, t{da, ports ? d.dport : uint16_t(0), d.l4_proto};
  bool swapped = t < s;
  auto fk = swapped ? std::make_pair(t, s) : std::make_pair(s, t);
  auto rel = [&](int canon) { return canon == 2 ? 2 : (canon ^ int(swapped)); };  // canonical -> this packet
  auto to_canon = [&](int side) { return side == 2 ? 2 : (side ^ int(swapped)); };
  auto decided = [&](int side) {
    flows[fk] = to_canon(side);
    pair_role[{sa, da}] = side;
    pair_role[{da, sa}] = side == 2 ? 2 : side ^ 1;
    return side;
  };
  bool syn = d.l4_proto == kProtoTcp && (d.tcp_flags & 0x02);
  if (syn) {
    bool ack = d.tcp_flags & 0x10;
    servers.insert(ack ? s : t);
    return decided(ack ? 1 : 0);
  }
  auto it = flows.find(fk);
  if (it != flows.end()) return rel(it->second);
  if (servers.count(s) && !servers.count(t)) return decided(1);
  if (servers.count(t) && !servers.count(s)) return decided(0);
  if (d.l4_proto == kProtoIcmp || d.l4_proto == kProtoIcmpv6) {
    uint8_t type = d.sport >> 8;
    if (type == 8 || type == 128) return decided(0);
    if (type == 0 || type == 129) return decided(1);
    return decided(2);
  }
  if (ports) {
    bool ls = likely_server(d.sport), ld = likely_server(d.dport);
    if (ls && !ld) return decided(1);
    if (ld && !ls) return decided(0);
  }
  return decided(2);
}

// The user a packet's values count for: its flow's client cut to the
// policy's identifier prefix. With roles uncertain, one end still counts
// for the whole flow, the one that sent its first packet (the engine's
// client then): counting each packet's sender would make two users of one
// exchange.
std::string Auditor::user_of(const uint8_t* f, const Decoded& d, int side) {
  const uint8_t* a = f + (side == 1 ? d.dst_off() : d.src_off());
  std::string u(reinterpret_cast<const char*>(a), d.addr_len());
  if (side == 2 && !cur_flow.empty()) u = initiator.emplace(cur_flow, u).first->second;
  int bits = pol->identifier_prefix;
  if (bits >= 0) {
    if (d.ip_version == 4) bits = std::min(bits, 32);
    for (unsigned i = 0; i < u.size(); ++i) {
      int keep = std::clamp(bits - int(i * 8), 0, 8);
      u[i] = char(uint8_t(u[i]) & uint8_t(0xff00 >> keep));
    }
  }
  return u;
}

// An address a plugin found where no field names it (ProtoOcc::role): it
// takes the rule of its role, as the runtime gives it. One of the
// packet's own addresses is decided with the header; another inside
// `clients` (or known as a client's: `client`) takes ip.client's rule,
// anything else ip.server's.
void Auditor::role_value(size_t fi, const uint8_t* f, const Decoded& d, Kind k, const std::string& a,
                const std::string& user, uint64_t t, bool client) {
  const uint32_t al = d.addr_len();
  if (a.size() == al && (std::memcmp(a.data(), f + d.src_off(), al) == 0 ||
                         std::memcmp(a.data(), f + d.dst_off(), al) == 0))
    return;
  client = client || in_cidrs(pol->clients, k == Kind::Addr4 ? 4 : 6, reinterpret_cast<const uint8_t*>(a.data()));
  address_by_rule(fi, k, a, addr_rule(-1, client), client ? "ip.client" : "ip.server", user, t);
}

// The first address rule that applies to an address at position `pos`
// (0 source, 1 destination; -1 for one that is neither) on the side
// `is_client` says, as the runtime picks it; null: none, it travels as it
// is.
const dsl::Rule* Auditor::addr_rule(int pos, bool is_client) const {
  const auto& F = l2l4::g_fields;
  for (auto* rr : addr_rules)
    for (auto* fd : rr->fields) {
      const FieldId n = fd->id;
      if ((n == F.ip_src && pos == 0) || (n == F.ip_dst && pos == 1) || (n == F.ip_client && is_client) ||
          (n == F.ip_server && !is_client))
        return rr;
    }
  return nullptr;
}

// An address under its rule `hit`: kept, released by z-anonymity (the
// replayed count), or protected as `cls`, less what the action itself
// writes back.
void Auditor::address_by_rule(size_t fi, Kind k, const std::string& a, const dsl::Rule* hit, const std::string& cls,
                              const std::string& user, uint64_t t, bool per_flow) {
  FieldRule fr{hit};
  if (fr.keep()) return allow(fi, k, a);
  if (fr.zanon()) {
    // A server address in a flow's header is counted once, at the flow's
    // first packet, and that decision holds for the flow (as the engine
    // keeps it in the flow's state): later packets count no user again.
    bool released;
    if (per_flow && !cur_flow.empty()) {
      const std::string fk = cur_flow + '\0' + std::to_string(hit->index) + '\0' + a;
      auto it = zonce.flow_server.find(fk);
      if (it == zonce.flow_server.end())
        it = zonce.flow_server.emplace(fk, counts.observe("server-addr", a, user, t, fr.z(), fr.dt())).first;
      released = it->second;
    } else {
      released = counts.observe("server-addr", a, user, t, fr.z(), fr.dt());
    }
    if (released) return allow(fi, k, a);
  }
  allow_derived(fi, k, a, hit->action);
  if (!names_no_host(k, a)) protect(k, a, cls, fr);
}

void Auditor::plan_tunnel_rule() {
  auto it = frule.find("tunnel.addr");
  if (it != frule.end()) {
    tunnel_rule = it->second.rule;
    return;
  }
  bool protects = false;
  for (auto* rr : addr_rules) protects = protects || rr->action.desc->protects;
  if (!protects) return;
  for (auto* rr : addr_rules)
    for (auto* fd : rr->fields)
      if (fd->id == l2l4::g_fields.ip_server && !rr->when && !tunnel_rule) tunnel_rule = rr;
  tunnel_zero = !tunnel_rule;
}

void Auditor::tunnel_endpoints(size_t fi, const uint8_t* f, uint32_t cap, const Decoded& d) {
  for (unsigned li = 0; li < d.n_encap && li < unsigned(kMaxEncap); ++li) {
    const EncapLayer& L = d.encap[li];
    const unsigned al = L.ip_version == 4 ? 4 : 16;
    const unsigned so = L.l3_off + (L.ip_version == 4 ? 12u : 8u), dof = L.l3_off + (L.ip_version == 4 ? 16u : 24u);
    if (dof + al > cap) continue;
    const Kind k = L.ip_version == 4 ? Kind::Addr4 : Kind::Addr6;
    // A Teredo bubble's alternate addresses (IPv4, as its endpoints) take their rule.
    std::vector<unsigned> offs = {so, dof};
    if (uint32_t at, end; teredo_trailers(f, cap, L, at, end))
      each_teredo_alt_addr(f, at, end, [&](uint32_t a) { offs.push_back(a); });
    for (unsigned off : offs) {
      std::string a(reinterpret_cast<const char*>(f + off), al);
      if (tunnel_zero) {
        allow(fi, k, std::string(al, '\0'));
        if (!names_no_host(k, a)) protect(k, a, "tunnel.addr", FieldRule{});
        continue;
      }
      FieldRule fr{tunnel_rule};
      if (fr.keep()) {
        allow(fi, k, a);
        continue;
      }
      allow_derived(fi, k, a, tunnel_rule->action);
      if (!names_no_host(k, a)) protect(k, a, "tunnel.addr", fr);
    }
  }
}

}  // namespace amon::audit
