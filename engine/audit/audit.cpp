#include "audit.h"

#include <arpa/inet.h>
#include <hs/hs.h>
#include <libpsl.h>
#include <pcap/pcap.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "cryptopan.h"
#include "l2l4.h"
#include "policy.h"
#include "protocol.h"
#include "registry.h"
#include "values.h"

namespace amon::audit {
namespace {

enum class Kind : uint8_t { Addr4, Addr6, Mac, Name, Text };

struct Frame {
  uint64_t ts;
  uint32_t wire;
  std::vector<uint8_t> bytes;
};

bool read_pcap(const std::string& path, std::vector<Frame>& out, int& linktype, std::string& err) {
  char eb[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, eb);
  if (!p) {
    err = path + ": " + eb;
    return false;
  }
  linktype = pcap_datalink(p);
  pcap_pkthdr* h;
  const u_char* d;
  int rc;
  while ((rc = pcap_next_ex(p, &h, &d)) == 1)
    out.push_back({uint64_t(h->ts.tv_sec) * 1000000000ULL + uint64_t(h->ts.tv_usec), h->len,
                   std::vector<uint8_t>(d, d + h->caplen)});
  // A file cut short or a record that cannot be read ends the capture
  // there, as it ends amon's input: what came before is still audited.
  if (rc == -1) std::fprintf(stderr, "amon audit: %s: %s (reading stops there)\n", path.c_str(), pcap_geterr(p));
  pcap_close(p);
  return true;
}


// How a rule of the policy treats one field.
struct FieldRule {
  const dsl::Rule* rule = nullptr;  // null: no rule names the field, it travels as it is
  bool keep() const { return !rule || !rule->action.desc->protects; }
  bool zanon() const { return rule && rule->action.desc->uses_zstore; }
  int64_t z() const { return rule->action.int_or("z", 2); }
  int64_t dt() const { return rule->action.int_or("dt", 3600LL * 1000000000LL); }
  bool fallback_sld() const {
    auto* a = rule->action.arg("fallback");
    return a && !a->action && a->s == "sld";
  }
  std::string where() const {
    return rule->loc.file + ":" + std::to_string(rule->loc.line) + ": " + rule->text;
  }
};

// Brute-force z-anonymity count: per (class, value) every user's last time.
// A value observed at t is released iff at least z distinct users (this
// one included) were seen with it in (t - dt, t].
class BruteCount {
 public:
  bool observe(const std::string& cls, const std::string& value, const std::string& user, uint64_t t, int64_t z,
               int64_t dt) {
    auto& users = m_[cls + '\0' + value];
    users[user] = t;
    int64_t n = 0;
    for (auto& [u, last] : users)
      if (int64_t(t) - int64_t(last) < dt) ++n;
    return n >= z;
  }

 private:
  std::unordered_map<std::string, std::unordered_map<std::string, uint64_t>> m_;
};

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  while (!r.empty() && r.back() == '.') r.pop_back();
  return r;
}

std::string addr_text(Kind k, const std::string& b) {
  char buf[64];
  inet_ntop(k == Kind::Addr4 ? AF_INET : AF_INET6, b.data(), buf, sizeof buf);
  return buf;
}

std::string printable(Kind k, const std::string& v) {
  switch (k) {
    case Kind::Addr4:
    case Kind::Addr6: return addr_text(k, v);
    case Kind::Mac: {
      char buf[20];
      auto* m = reinterpret_cast<const uint8_t*>(v.data());
      std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
      return buf;
    }
    default: {
      std::string r;
      for (unsigned char c : v.substr(0, 120)) r += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
      return r;
    }
  }
}

// DNS wire form of a dotted name (labels, no terminating root byte: the
// name may continue with a compression pointer).
std::string wire_name(const std::string& name) {
  std::string w;
  size_t i = 0;
  while (i <= name.size()) {
    size_t j = name.find('.', i);
    if (j == std::string::npos) j = name.size();
    if (j - i == 0 || j - i > 63) return {};
    w += char(j - i);
    w += name.substr(i, j - i);
    i = j + 1;
  }
  return w;
}

struct Value {
  Kind kind;
  std::string bytes;
  std::string cls;   // the first field found protecting it
  std::string rule;  // the rule doing so
  bool found = false;
};

struct Pattern {
  uint32_t value;
  std::string enc;
  uint32_t len;
  enum Bound : uint8_t { None, Digits, Hex, Label, Wire } bound;
  bool bin4;
};

struct Auditor {
  const Options& o;
  Report& r;
  std::shared_ptr<const dsl::Policy> pol;
  std::vector<Frame> in, out;
  int lt_in = 1, lt_out = 1;

  std::map<std::string, FieldRule> frule;  // by field name
  std::vector<const dsl::Rule*> addr_rules;  // rules naming an address position or role, source order
  std::vector<Value> values;
  std::unordered_map<std::string, uint32_t> index;  // kind byte + bytes -> values
  // Per original frame: keys of the values the policy leaves in clear there.
  std::vector<std::vector<std::string>> allowed_keys;
  BruteCount counts;
  psl_ctx_t* psl = nullptr;

  // Flow roles, worked out independently of the engine's flow table.
  struct Ep {
    std::string addr;
    uint16_t port;
    uint8_t proto;
    bool operator<(const Ep& e) const { return std::tie(addr, port, proto) < std::tie(e.addr, e.port, e.proto); }
  };
  std::map<std::pair<Ep, Ep>, int> flows;  // canonical (lower, higher) -> 0 lower is client, 1 higher, 2 uncertain
  std::set<Ep> servers;                    // endpoints seen accepting a connection
  std::map<std::pair<std::string, std::string>, int> pair_role;  // addresses only, for later fragments

  // The application values of a payload, read by every protocol plugin
  // of its transport (the plugins' parsers; the rewrite path is not
  // involved).
  std::unique_ptr<PayloadValues> pv;

  Auditor(const Options& o_, Report& r_) : o(o_), r(r_), pv(std::make_unique<PayloadValues>()) {}
  ~Auditor() {
    if (psl) psl_free(psl);
  }

  static std::string key(Kind k, const std::string& b) { return char(k) + b; }

  void protect(Kind k, const std::string& b, const std::string& cls, const FieldRule& fr) {
    auto kk = key(k, b);
    if (index.count(kk)) return;
    index[kk] = uint32_t(values.size());
    values.push_back({k, b, cls, fr.rule ? fr.where() : std::string()});
  }

  void allow(size_t frame, Kind k, const std::string& b) { allowed_keys[frame].push_back(key(k, b)); }

  FieldRule rule_for(const std::string& field) {
    auto it = frule.find(field);
    return it == frule.end() ? FieldRule{} : it->second;
  }

  // Unspecified, broadcast and group addresses name no host; neither does a
  // /24's broadcast address (a host at .255 of a wider subnet is missed).
  static bool names_no_host(Kind k, const std::string& a) {
    auto* b = reinterpret_cast<const uint8_t*>(a.data());
    if (k == Kind::Addr4) return b[0] == 0 || b[0] >= 224 || b[3] == 255 || b[0] == 127;
    if (b[0] == 0xff) return true;
    for (int i = 0; i < 15; ++i)
      if (b[i]) return false;
    return b[15] <= 1;  // :: and ::1
  }

  // Crypto-PAn by (call, rotation epoch), for cryptopan_fixed; cached, as
  // the same address recurs in frame after frame.
  std::map<std::pair<const ActionCall*, uint64_t>, std::unique_ptr<CryptoPAnCache>> cpans;

  // Whether cryptopan() with this call's key gives `a` back unchanged at
  // time t. Crypto-PAn's one-time pad repeats a bit wherever the address
  // agrees with the pad, so a key maps a small share of addresses onto
  // themselves (for some keys several per thousand of a /8; doc/cryptopan.md).
  // Such an address in the output is the policy's own doing. The primitive
  // is the reference algorithm (its vectors in tests/crypto); the epoch key
  // is derived as doc/cryptopan.md defines it.
  bool cryptopan_fixed(const ActionCall& c, Kind k, const std::string& a, uint64_t t) {
    const ArgValue* kv = c.arg("key");
    if (!kv || !kv->key || kv->key->bytes.size() != 32) return false;
    const int64_t rot = c.int_or("rotate", 0);
    const uint64_t epoch = rot > 0 ? t / uint64_t(rot) : 0;
    std::unique_ptr<CryptoPAnCache>& cp = cpans[{&c, epoch}];
    if (!cp) {
      CryptoPAnKey base;
      std::memcpy(base.data(), kv->key->bytes.data(), 32);
      cp = std::make_unique<CryptoPAnCache>(rot > 0 ? CryptoPAn::derive_epoch_key(base, epoch) : base, 1 << 12,
                                            1 << 10, /*keep_classes=*/true);  // the mapping cryptopan() applies
    }
    if (k == Kind::Addr4) {
      uint32_t v;
      std::memcpy(&v, a.data(), 4);
      v = ntohl(v);
      return cp->anon_v4_cached(v) == v;
    }
    uint8_t out[16];
    cp->anon_v6_cached(reinterpret_cast<const uint8_t*>(a.data()), out);
    return std::memcmp(out, a.data(), 16) == 0;
  }

  // What a rule's action writes where it leaves part of the value: prefix(n)
  // keeps the first n bits (and may thus give back the address itself),
  // zero() writes zeros, cryptopan() may map an address onto itself. Those
  // bytes are the policy's to give.
  void allow_derived(size_t fi, Kind k, const std::string& a, const ActionCall& c) {
    const ActionCall* x = &c;
    if (c.desc->uses_zstore) {
      auto* fb = c.arg("fallback");
      if (!fb || !fb->action) return;
      x = fb->action.get();
    }
    if (x->desc->kind == ActionKind::CryptoPan) {
      if ((k == Kind::Addr4 && a.size() == 4) || (k == Kind::Addr6 && a.size() == 16))
        if (cryptopan_fixed(*x, k, a, in[fi].ts)) allow(fi, k, a);
      return;
    }
    int bits = -1;
    if (x->desc->kind == ActionKind::Zero) bits = 0;
    else if (x->desc->kind == ActionKind::Prefix) bits = int(k == Kind::Addr4 ? x->int_or("bits", 32) : x->int_or("v6", 128));
    if (bits < 0) return;
    std::string m = a;
    for (unsigned i = 0; i < m.size(); ++i) m[i] = char(uint8_t(m[i]) & uint8_t(0xff00 >> std::clamp(bits - int(i * 8), 0, 8)));
    allow(fi, k, m);
  }

  static bool in_cidrs(const std::vector<dsl::Cidr>& cs, uint8_t fam, const uint8_t* a) {
    for (auto& c : cs)
      if (c.contains(fam, a)) return true;
    return false;
  }

  // Likely server ports, as Zeek's likely_server_ports: the system range and
  // registered services that listen on a fixed port.
  static bool likely_server(uint16_t p) {
    static const std::unordered_set<uint16_t> reg = {
        1080, 1194, 1433, 1521, 1701, 1723, 1812, 1813, 1900, 2049, 2083, 2087, 2096, 3128, 3268, 3306, 3389,
        3478, 3479, 4433, 4500, 5060, 5061, 5222, 5223, 5228, 5349, 5353, 5355, 5432, 5900, 6379, 6443, 6666,
        6667, 6697, 8000, 8008, 8080, 8081, 8443, 8883, 8888, 9000, 9090, 9092, 9200, 9418, 11211, 27017};
    return p != 0 && (p < 1024 || reg.count(p));
  }

  // 0: source is the client, 1: destination, 2: uncertain (both protected).
  int client_side(const uint8_t* f, const Decoded& d) {
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

  std::string user_of(const uint8_t* f, const Decoded& d, int side) {
    const uint8_t* a = f + (side == 1 ? d.dst_off() : d.src_off());
    std::string u(reinterpret_cast<const char*>(a), d.addr_len());
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

  void name_value(size_t fi, const std::string& field, std::string name, const std::string& user, uint64_t t) {
    name = lower(name);
    if (name.empty()) return;
    FieldRule fr = rule_for(field);
    if (fr.keep()) return allow(fi, Kind::Name, name);
    auto& fd = *Registry::instance().field(field);
    if (fr.zanon()) {
      if (counts.observe(fd.value_class, name, user, t, fr.z(), fr.dt())) return allow(fi, Kind::Name, name);
      if (fr.fallback_sld()) {
        const char* rd = psl_registrable_domain(psl, name.c_str());
        if (rd && *rd && counts.observe(fd.value_class, rd, user, t, fr.z(), fr.dt())) allow(fi, Kind::Name, rd);
      }
    }
    protect(Kind::Name, name, field, fr);
  }

  void text_value(size_t fi, const std::string& field, const std::string& v, const std::string& user, uint64_t t) {
    // Shorter values ("/", "gzip") say nothing about a person and would
    // match everywhere by chance; so does a word of letters and hyphens
    // alone, the protocol's own vocabulary (a Connection header's
    // "keep-alive", a Vary header's "Accept-Encoding", both header names
    // too).
    if (v.size() < 8) return;
    if (std::all_of(v.begin(), v.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '-'; }))
      return;
    FieldRule fr = rule_for(field);
    if (fr.keep()) return allow(fi, Kind::Text, v);
    auto& fd = *Registry::instance().field(field);
    if (fr.zanon() && counts.observe(fd.value_class, v, user, t, fr.z(), fr.dt())) return allow(fi, Kind::Text, v);
    protect(Kind::Text, v, field, fr);
  }

  void addr_value(size_t fi, const std::string& field, Kind k, const std::string& a, const std::string& user,
                  uint64_t t) {
    FieldRule fr = rule_for(field);
    if (fr.keep()) return allow(fi, k, a);
    if (fr.zanon() && counts.observe("server-addr", a, user, t, fr.z(), fr.dt())) return allow(fi, k, a);
    allow_derived(fi, k, a, fr.rule->action);
    if (!names_no_host(k, a)) protect(k, a, field, fr);
  }

  void mac_value(size_t fi, const std::string& field, const std::string& m) {
    FieldRule fr = rule_for(field);
    if (fr.keep()) allow(fi, Kind::Mac, m);
    else protect(Kind::Mac, m, field, fr);
  }

  // An address a plugin found where no field names it (ProtoOcc::role): it
  // takes the rule of its role, as the runtime gives it. One of the
  // packet's own addresses is decided with the header; another inside
  // `clients` takes ip.client's rule, anything else ip.server's.
  void role_value(size_t fi, const uint8_t* f, const Decoded& d, Kind k, const std::string& a,
                  const std::string& user, uint64_t t) {
    const uint32_t al = d.addr_len();
    if (a.size() == al && (std::memcmp(a.data(), f + d.src_off(), al) == 0 ||
                           std::memcmp(a.data(), f + d.dst_off(), al) == 0))
      return;
    const bool client = in_cidrs(pol->clients, k == Kind::Addr4 ? 4 : 6, reinterpret_cast<const uint8_t*>(a.data()));
    address_by_rule(fi, k, a, addr_rule(-1, client), client ? "ip.client" : "ip.server", user, t);
  }

  // The first address rule that applies to an address at position `pos`
  // (0 source, 1 destination; -1 for one that is neither) on the side
  // `is_client` says, as the runtime picks it; null: none, it travels as it
  // is.
  const dsl::Rule* addr_rule(int pos, bool is_client) const {
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
  // brute-force count), or protected as `cls`, less what the action itself
  // writes back.
  void address_by_rule(size_t fi, Kind k, const std::string& a, const dsl::Rule* hit, const std::string& cls,
                       const std::string& user, uint64_t t) {
    FieldRule fr{hit};
    if (fr.keep()) return allow(fi, k, a);
    if (fr.zanon() && counts.observe("server-addr", a, user, t, fr.z(), fr.dt())) return allow(fi, k, a);
    allow_derived(fi, k, a, hit->action);
    if (!names_no_host(k, a)) protect(k, a, cls, fr);
  }

  // One value a plugin found in the original, by the kind of value it is.
  void occ_value(size_t fi, const uint8_t* f, const Decoded& d, const uint8_t* p, const ProtoOcc& o,
                 const std::string& user, uint64_t t) {
    const std::string v(reinterpret_cast<const char*>(p + o.off), o.len);
    const bool addr4 = o.kind == OccKind::Addr4 && o.len == 4, addr6 = o.kind == OccKind::Addr6 && o.len == 16;
    if (o.role) {
      if (addr4 || addr6) role_value(fi, f, d, addr4 ? Kind::Addr4 : Kind::Addr6, v, user, t);
      return;
    }
    const std::string& field = Registry::instance().field(o.field).name;
    switch (o.kind) {
      case OccKind::Name: name_value(fi, field, std::string(o.text), user, t); break;
      case OccKind::Addr4:
      case OccKind::Addr6:
        // An ECS prefix shorter than the address is no whole address.
        if (addr4 || addr6) addr_value(fi, field, addr4 ? Kind::Addr4 : Kind::Addr6, v, user, t);
        break;
      case OccKind::Mac:
        if (o.len == 6) mac_value(fi, field, v);
        break;
      case OccKind::Bytes: text_value(fi, field, v, user, t); break;
      case OccKind::Payload: break;
    }
  }

  // Reads a payload with every plugin of its transport: as sent by the
  // flow's client, by its server, or both ways when the roles are unknown
  // (side as client_side() gives it).
  template <class Fn>
  void each_value(const uint8_t* f, const Decoded& d, uint32_t cap, int side, Fn&& fn) {
    if (!d.has_l4_header() || (d.flags & kFlagLaterFragment)) return;
    if (d.l4_proto != kProtoTcp && d.l4_proto != kProtoUdp) return;
    const uint32_t end = std::min<uint32_t>(cap, d.payload_off + d.payload_len);
    if (end <= d.payload_off) return;
    const uint8_t* p = f + d.payload_off;
    auto one = [&](const ProtocolPlugin&, const ProtoOcc& o) { fn(p, o); };
    if (side != 1) pv->read(d.l4_proto, p, end - d.payload_off, d.sport, d.dport, true, one);
    if (side != 0) pv->read(d.l4_proto, p, end - d.payload_off, d.sport, d.dport, false, one);
  }

  void app_values(size_t fi, const uint8_t* f, const Decoded& d, int side, const std::string& user, uint64_t t) {
    each_value(f, d, uint32_t(in[fi].bytes.size()), side,
               [&](const uint8_t* p, const ProtoOcc& o) { occ_value(fi, f, d, p, o, user, t); });
  }

  // The encapsulations' own addresses (tunnel endpoints) are tunnel.addr,
  // not the packet's client or server: a rule naming tunnel.addr decides;
  // without one, a policy that protects addresses gives them its first
  // unconditional ip.server rule, or zeros when it has none (doc/language.md,
  // tunnel.addr). Endpoints take no z-count, so a zanon rule counts as its
  // fallback (allow_derived).
  const dsl::Rule* tunnel_rule = nullptr;
  bool tunnel_zero = false;

  void plan_tunnel_rule() {
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

  void tunnel_endpoints(size_t fi, const uint8_t* f, uint32_t cap, const Decoded& d) {
    for (unsigned li = 0; li < d.n_encap && li < unsigned(kMaxEncap); ++li) {
      const EncapLayer& L = d.encap[li];
      const unsigned al = L.ip_version == 4 ? 4 : 16;
      const unsigned so = L.l3_off + (L.ip_version == 4 ? 12u : 8u), dof = L.l3_off + (L.ip_version == 4 ? 16u : 24u);
      if (dof + al > cap) continue;
      const Kind k = L.ip_version == 4 ? Kind::Addr4 : Kind::Addr6;
      for (unsigned off : {so, dof}) {
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

  // Datagrams of a tunnel whose outer IP the link fragmented: the
  // original's first fragment is checked as the whole datagram (amon
  // anonymizes the packet inside as one), the other fragments through it.
  // members[i]: the frame holding the whole for fragment frame i.
  std::vector<size_t> whole_of;

  void join_tunnel_fragments() {
    whole_of.assign(in.size(), SIZE_MAX);
    struct Group {
      FragInfo first;
      size_t first_fi = SIZE_MAX;
      std::vector<std::pair<size_t, FragInfo>> frags;
      uint32_t total = 0, have = 0;
      bool last = false, bad = false;
    };
    std::vector<Group> groups;
    for (size_t fi = 0; fi < in.size(); ++fi) {
      Decoded d;
      decode(in[fi].bytes.data(), uint32_t(in[fi].bytes.size()), in[fi].wire, d);
      FragInfo x;
      if (!outer_frag_info(in[fi].bytes.data(), d, x)) continue;
      Group* g = nullptr;
      for (auto& gg : groups)
        if (!gg.bad && same_datagram(gg.first, x)) g = &gg;
      if (!g) {
        if (x.off != 0 || !(d.flags & kFlagTunnel)) continue;
        groups.emplace_back();
        g = &groups.back();
        g->first = x;
        g->first_fi = fi;
      }
      for (auto& [_, o] : g->frags)
        if (x.off < o.off + o.len && o.off < x.off + x.len) g->bad = true;
      g->frags.push_back({fi, x});
      g->have += x.len;
      if (!x.more) g->last = true, g->total = x.off + x.len;
    }
    for (auto& g : groups) {
      if (g.bad || !g.last || g.have != g.total) continue;
      const uint32_t hlen = whole_header_len(g.first);
      std::vector<uint8_t> w(hlen + g.total);
      whole_header(in[g.first_fi].bytes.data(), g.first, g.total, w.data());
      for (auto& [fi, x] : g.frags) {
        std::memcpy(w.data() + hlen + x.off, in[fi].bytes.data() + x.data_start, x.len);
        whole_of[fi] = g.first_fi;
      }
      in[g.first_fi].bytes = std::move(w);
      in[g.first_fi].wire = uint32_t(in[g.first_fi].bytes.size());
    }
  }

  void collect() {
    plan_tunnel_rule();
    join_tunnel_fragments();
    allowed_keys.resize(in.size());
    for (size_t fi = 0; fi < in.size(); ++fi) {
      if (whole_of[fi] != SIZE_MAX && whole_of[fi] != fi) continue;  // checked through its whole datagram
      const uint8_t* f = in[fi].bytes.data();
      uint32_t cap = uint32_t(in[fi].bytes.size());
      uint64_t t = in[fi].ts;
      Decoded d;
      decode(f, cap, in[fi].wire, d);
      if (lt_in == DLT_EN10MB && cap >= 14) {
        for (int which = 0; which < 2; ++which) {
          const uint8_t* m = f + (which ? 6 : 0);
          std::string mac(reinterpret_cast<const char*>(m), 6);
          // Group and broadcast addresses name no host.
          if ((m[0] & 1) || mac == std::string(6, '\0')) continue;
          FieldRule fr = rule_for(which ? "eth.src" : "eth.dst");
          if (fr.keep()) allow(fi, Kind::Mac, mac);
          else protect(Kind::Mac, mac, which ? "eth.src" : "eth.dst", fr);
        }
      }
      tunnel_endpoints(fi, f, cap, d);
      if (!d.has_ip() || d.l3_off + (d.ip_version == 4 ? 20u : 40u) > cap) continue;
      int side = client_side(f, d);
      std::string user = user_of(f, d, side == 1 ? 1 : 0);
      Kind ak = d.ip_version == 4 ? Kind::Addr4 : Kind::Addr6;
      for (int pos = 0; pos < 2; ++pos) {
        std::string a(reinterpret_cast<const char*>(f + (pos ? d.dst_off() : d.src_off())), d.addr_len());
        bool is_client = side == 2 || side == pos;
        const dsl::Rule* hit = addr_rule(pos, is_client);
        std::string cls = hit ? hit->fields[0]->name : "ip";
        if (hit)
          for (auto* fd : hit->fields)
            if (fd->name == (pos ? "ip.dst" : "ip.src") || fd->name == (is_client ? "ip.client" : "ip.server"))
              cls = fd->name;
        address_by_rule(fi, ak, a, hit, cls, user, t);
      }
      app_values(fi, f, d, side, user, t);
    }
    // Each fragment's output may carry what its datagram's whole may.
    for (size_t fi = 0; fi < in.size(); ++fi)
      if (whole_of[fi] != SIZE_MAX && whole_of[fi] != fi) allowed_keys[fi] = allowed_keys[whole_of[fi]];
  }

  // ---- search ----
  std::vector<Pattern> pats;
  std::vector<std::string> lits;
  std::vector<unsigned> flags;

  void add(uint32_t v, std::string lit, const char* enc, bool caseless, Pattern::Bound b, bool bin4 = false) {
    if (lit.empty()) return;
    pats.push_back({v, enc, uint32_t(lit.size()), b, bin4});
    lits.push_back(std::move(lit));
    flags.push_back(caseless ? HS_FLAG_CASELESS : 0);
  }

  void build_patterns() {
    static const char* hx = "0123456789abcdef";
    for (uint32_t i = 0; i < values.size(); ++i) {
      auto& v = values[i];
      auto* b = reinterpret_cast<const uint8_t*>(v.bytes.data());
      switch (v.kind) {
        case Kind::Addr4: {
          add(i, v.bytes, "binary", false, Pattern::None, true);
          add(i, addr_text(v.kind, v.bytes), "dotted quad", false, Pattern::Digits);
          std::string rev = std::to_string(b[3]) + "." + std::to_string(b[2]) + "." + std::to_string(b[1]) + "." +
                            std::to_string(b[0]) + ".in-addr.arpa";
          add(i, rev, "in-addr.arpa (text)", true, Pattern::Label);
          add(i, wire_name(rev), "in-addr.arpa (DNS wire)", true, Pattern::Wire);
          break;
        }
        case Kind::Addr6: {
          add(i, v.bytes, "binary", false, Pattern::None);
          add(i, addr_text(v.kind, v.bytes), "IPv6 text", true, Pattern::Hex);
          std::string full;
          for (int k = 0; k < 16; k += 2) {
            if (k) full += ':';
            full += {hx[b[k] >> 4], hx[b[k] & 15], hx[b[k + 1] >> 4], hx[b[k + 1] & 15]};
          }
          if (full != addr_text(v.kind, v.bytes)) add(i, full, "IPv6 text (expanded)", true, Pattern::Hex);
          std::string rev;
          for (int k = 15; k >= 0; --k) rev += {hx[b[k] & 15], '.', hx[b[k] >> 4], '.'};
          rev += "ip6.arpa";
          add(i, rev, "ip6.arpa (text)", true, Pattern::Label);
          add(i, wire_name(rev), "ip6.arpa (DNS wire)", true, Pattern::Wire);
          break;
        }
        case Kind::Mac: {
          // A MAC of 6 random-looking bytes does not turn up by chance; one
          // of few distinct bytes (aa:aa:aa:aa:aa:aa, 00:..:01) does, in
          // padding and fuzzed payloads, and counts as possible there.
          add(i, v.bytes, "binary", false, Pattern::None, std::set<char>(v.bytes.begin(), v.bytes.end()).size() <= 3);
          std::string c = printable(v.kind, v.bytes), h = c;
          std::replace(h.begin(), h.end(), ':', '-');
          add(i, c, "text (aa:bb)", true, Pattern::Hex);
          add(i, h, "text (aa-bb)", true, Pattern::Hex);
          break;
        }
        case Kind::Name:
          // A one-label name shorter than 4 letters ("com", "lan") is in
          // every other name; its wire form still has to match at a label.
          if (v.bytes.size() >= 4 || v.bytes.find('.') != std::string::npos)
            add(i, v.bytes, "text", true, Pattern::Label);
          add(i, wire_name(v.bytes), "DNS wire", true, Pattern::Wire);
          break;
        case Kind::Text: add(i, v.bytes, "text", false, Pattern::None); break;
      }
    }
  }

  static bool is_label_char(uint8_t c) { return std::isalnum(c) || c == '-' || c == '_'; }

  bool bounded(const Pattern& pt, const uint8_t* f, uint32_t n, uint32_t from) const {
    uint32_t to = from + pt.len;
    int prev = from ? f[from - 1] : -1, next = to < n ? f[to] : -1;
    switch (pt.bound) {
      case Pattern::None: return true;
      case Pattern::Digits:
        if (prev >= 0 && (std::isdigit(prev) || prev == '.')) return false;
        if (next >= 0 && std::isdigit(next)) return false;
        if (next == '.' && to + 1 < n && std::isdigit(f[to + 1])) return false;
        return true;
      case Pattern::Hex:
        return !(prev >= 0 && (std::isxdigit(prev) || prev == ':' || prev == '-')) &&
               !(next >= 0 && (std::isxdigit(next) || next == ':' || next == '-'));
      case Pattern::Label:
        // Left of a dot it is a longer name's suffix: the registrable domain
        // a `sld` fallback may release, judged as that longer name.
        return !(prev >= 0 && (is_label_char(uint8_t(prev)) || prev == '.')) &&
               !(next >= 0 && is_label_char(uint8_t(next)));
      case Pattern::Wire:
        return !(prev >= 0 && is_label_char(uint8_t(prev)));
    }
    return true;
  }

  // Where short binary values (4-byte addresses, MACs) sit in an output
  // frame by protocol, not by chance: exact offsets (Ethernet and IP headers,
  // the header an ICMP error quotes, DNS A records and ECS) and whole regions
  // made of such fields (ARP, DHCP, neighbour discovery).
  // Where the output carries addresses and MACs as fields: a binary match
  // there is the value itself, elsewhere it may be chance. A match must fit
  // its slot: six 0xaa bytes that begin at a kept 170.170.170.170 and run
  // into the port after it are two fields' values, not a MAC.
  struct Slots {
    std::unordered_map<uint32_t, uint32_t> at;  // offset -> the field's length
    std::vector<std::pair<uint32_t, uint32_t>> regions;
    void add(uint32_t off, uint32_t len) {
      auto [it, fresh] = at.emplace(off, len);
      if (!fresh) it->second = std::max(it->second, len);
    }
    bool has(uint32_t off, uint32_t len) const {
      if (auto it = at.find(off); it != at.end() && len <= it->second) return true;
      for (auto& [a, b] : regions)
        if (off >= a && off + len <= b) return true;
      return false;
    }
  };

  void addr_slots(const Frame& fr, Slots& sl) {
    const uint8_t* f = fr.bytes.data();
    uint32_t cap = uint32_t(fr.bytes.size());
    Decoded d;
    decode(f, cap, fr.wire, d);
    if (lt_out == DLT_EN10MB) sl.add(0, 6), sl.add(6, 6);
    if (d.ethertype == 0x0806) sl.regions.push_back({0, cap});
    for (unsigned li = 0; li < d.n_encap && li < unsigned(kMaxEncap); ++li) {
      const EncapLayer& L = d.encap[li];
      const uint32_t al = L.ip_version == 4 ? 4 : 16;
      sl.add(L.l3_off + (L.ip_version == 4 ? 12u : 8u), al);
      sl.add(L.l3_off + (L.ip_version == 4 ? 16u : 24u), al);
    }
    if (!d.has_ip()) return;
    sl.add(d.src_off(), d.addr_len());
    sl.add(d.dst_off(), d.addr_len());
    if ((d.flags & kFlagIcmpError) && d.ip_version == 4 && d.l4_off + 8 + 20 <= cap) {
      sl.add(d.l4_off + 8 + 12, 4);
      sl.add(d.l4_off + 8 + 16, 4);
    }
    if ((d.flags & kFlagIcmpError) && d.ip_version == 6 && d.l4_off + 8 + 40 <= cap) {
      sl.add(d.l4_off + 8 + 8, 16);
      sl.add(d.l4_off + 8 + 24, 16);
    }
    if (!d.has_l4_header() || (d.flags & kFlagLaterFragment)) return;
    uint32_t end = std::min(cap, d.payload_off + d.payload_len);
    if (d.l4_proto == kProtoIcmpv6) {
      uint8_t type = d.sport >> 8;
      if (type >= 133 && type <= 137) sl.regions.push_back({d.l4_off, end});
    }
    if (d.l4_proto != kProtoUdp || end <= d.payload_off) return;
    auto dhcp = [](uint16_t p) { return p == 67 || p == 68 || p == 546 || p == 547; };
    if (dhcp(d.sport) || dhcp(d.dport)) sl.regions.push_back({d.payload_off, end});
    // Where a plugin finds an address or a MAC (an A record's 4 bytes, an
    // AAAA's 16, an ECS prefix): a slot as wide as the widest address, so a
    // shorter prefix still holds the match that starts there.
    each_value(f, d, cap, 2, [&](const uint8_t* p, const ProtoOcc& o) {
      if (o.kind == OccKind::Addr4 || o.kind == OccKind::Addr6 || o.kind == OccKind::Mac)
        sl.add(uint32_t(p - f) + o.off, 16);
    });
  }

  std::string context(const Frame& fr, uint32_t off) {
    Decoded d;
    decode(fr.bytes.data(), uint32_t(fr.bytes.size()), fr.wire, d);
    if (off < 14 && lt_out == DLT_EN10MB) return "ethernet header";
    if (!d.has_ip()) return d.ethertype == 0x0806 ? "arp" : "non-ip frame";
    if (off == d.src_off()) return "ip.src";
    if (off == d.dst_off()) return "ip.dst";
    if (off < d.l3_off + d.l3_hdr_len) return "ip header";
    if ((d.flags & kFlagIcmpError) && off >= d.l4_off + 8) return "icmp quote";
    if (off < d.payload_off) return "transport header";
    const char* l4 = d.l4_proto == kProtoTcp ? "tcp" : d.l4_proto == kProtoUdp ? "udp" : "ip";
    std::string app;
    uint16_t lo = std::min(d.sport, d.dport);
    if (is_dns_port(d.sport) || is_dns_port(d.dport)) app = " (dns)";
    else if (d.sport == 80 || d.dport == 80 || d.sport == 8080 || d.dport == 8080) app = " (http)";
    else if (d.sport == 443 || d.dport == 443) app = " (tls/quic)";
    else if (lo) app = " (port " + std::to_string(lo) + ")";
    return std::string(l4) + " payload" + app;
  }

  static bool is_dns_port(uint16_t p) { return p == 53 || p == 5353 || p == 5355; }

  bool search(std::string& err) {
    build_patterns();
    // Output frames are tied to their original by timestamp (amon keeps
    // each packet's time); several originals may share one.
    std::unordered_multimap<uint64_t, size_t> by_ts;
    for (size_t i = 0; i < in.size(); ++i) by_ts.emplace(in[i].ts, i);
    std::unordered_map<uint32_t, ClassSummary*> cls_of;
    std::map<std::string, ClassSummary> sums;
    for (uint32_t i = 0; i < values.size(); ++i) sums[values[i].cls].cls = values[i].cls, ++sums[values[i].cls].protected_values;
    uint64_t n4 = 0;
    for (auto& v : values) n4 += v.kind == Kind::Addr4;
    if (!pats.empty()) {
      std::vector<const char*> ptrs;
      std::vector<size_t> lens;
      std::vector<unsigned> ids;
      for (size_t i = 0; i < lits.size(); ++i) ptrs.push_back(lits[i].data()), lens.push_back(lits[i].size()), ids.push_back(unsigned(i));
      hs_database_t* db = nullptr;
      hs_compile_error_t* ce = nullptr;
      if (hs_compile_lit_multi(ptrs.data(), flags.data(), ids.data(), lens.data(), unsigned(ptrs.size()), HS_MODE_BLOCK,
                               nullptr, &db, &ce) != HS_SUCCESS) {
        err = std::string("hyperscan: ") + (ce ? ce->message : "compile failed");
        if (ce) hs_free_compile_error(ce);
        return false;
      }
      hs_scratch_t* scratch = nullptr;
      hs_alloc_scratch(db, &scratch);
      struct M { unsigned id; unsigned long long to; };
      std::vector<M> ms;
      std::vector<std::pair<uint32_t, uint32_t>> allowed_names;
      auto inside = [](const std::vector<std::pair<uint32_t, uint32_t>>& spans, uint32_t a, uint32_t b) {
        for (auto& [f, t] : spans)
          if (f <= a && b <= t && (t - f) > (b - a)) return true;
        return false;
      };
      for (size_t oi = 0; oi < out.size(); ++oi) {
        auto& fr = out[oi];
        if (fr.bytes.empty()) continue;
        std::unordered_set<uint32_t> allowed;
        auto rng = by_ts.equal_range(fr.ts);
        if (rng.first == rng.second) ++r.unmatched_frames;
        for (auto it = rng.first; it != rng.second; ++it)
          for (auto& k : allowed_keys[it->second]) {
            auto x = index.find(k);
            if (x != index.end()) allowed.insert(x->second);
          }
        Slots slots;
        addr_slots(fr, slots);
        ms.clear();
        hs_scan(db, reinterpret_cast<const char*>(fr.bytes.data()), unsigned(fr.bytes.size()), 0, scratch,
                [](unsigned id, unsigned long long, unsigned long long to, unsigned, void* ctx) {
                  static_cast<std::vector<M>*>(ctx)->push_back({id, to});
                  return 0;
                },
                &ms);
        if (n4 && fr.bytes.size() >= 4) {
          uint64_t opaque = fr.bytes.size() - 3 - std::min<size_t>(slots.at.size(), fr.bytes.size() - 3);
          r.opaque_bytes += opaque;
          r.possible_expected += double(n4) * double(opaque) / 4294967296.0;
        }
        // Where an allowed name travels, its bytes are the policy's to
        // show: a protected name found wholly inside one (the label "_sip"
        // inside a released "_sip._udp.example.org") is disclosed by the
        // allowed name, not leaked.
        allowed_names.clear();
        for (auto& m : ms) {
          auto& pt = pats[m.id];
          if (values[pt.value].kind != Kind::Name || !allowed.count(pt.value)) continue;
          uint32_t from = uint32_t(m.to - pt.len);
          if (bounded(pt, fr.bytes.data(), uint32_t(fr.bytes.size()), from)) allowed_names.push_back({from, uint32_t(m.to)});
        }
        for (auto& m : ms) {
          auto& pt = pats[m.id];
          uint32_t from = uint32_t(m.to - pt.len);
          if (!bounded(pt, fr.bytes.data(), uint32_t(fr.bytes.size()), from)) continue;
          auto& v = values[pt.value];
          auto& cs = sums[v.cls];
          v.found = true;
          if (allowed.count(pt.value)) {
            ++r.allowed;
            continue;
          }
          if (v.kind == Kind::Name && inside(allowed_names, from, uint32_t(m.to))) {
            ++r.allowed, ++r.inside_allowed;
            continue;
          }
          Hit h{oi + 1, from, v.cls, printable(v.kind, v.bytes), pt.enc, context(fr, from), v.rule};
          if (pt.bin4 && !slots.has(from, pt.len)) {
            ++r.possible, ++cs.possible;
            if (r.possible_list.size() < o.max_listed) r.possible_list.push_back(h);
          } else {
            ++r.leaks, ++cs.leaks;
            if (r.leak_list.size() < o.max_listed) r.leak_list.push_back(h);
          }
        }
      }
      hs_free_scratch(scratch);
      hs_free_database(db);
    }
    for (auto& v : values)
      if (v.found) ++sums[v.cls].found;
    for (auto& [k, s] : sums) r.classes.push_back(s);
    (void)cls_of;
    return true;
  }

  bool run(std::string& err) {
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
};

std::string jstr(const std::string& s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') r += '\\', r += char(c);
    else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      r += b;
    } else r += char(c);
  }
  return r + "\"";
}

}  // namespace

bool run(const Options& o, Report& r, std::string& err) {
  register_builtin_plugins();
  Auditor a(o, r);
  return a.run(err);
}

std::string render_text(const Options& o, const Report& r) {
  std::string s;
  char b[512];
  std::snprintf(b, sizeof b, "amon audit: policy %s\n  original %s (%llu frames)\n  anonymized %s (%llu frames, %llu not tied to an original by time)\n",
                o.policy.c_str(), o.original.c_str(), (unsigned long long)r.original_frames, o.anonymized.c_str(),
                (unsigned long long)r.anonymized_frames, (unsigned long long)r.unmatched_frames);
  s += b;
  s += "  class                 protected      found      leaks   possible\n";
  for (auto& c : r.classes) {
    std::snprintf(b, sizeof b, "  %-20s %10llu %10llu %10llu %10llu\n", c.cls.c_str(),
                  (unsigned long long)c.protected_values, (unsigned long long)c.found, (unsigned long long)c.leaks,
                  (unsigned long long)c.possible);
    s += b;
  }
  for (auto& h : r.leak_list) {
    std::snprintf(b, sizeof b, "LEAK frame %llu offset %u: %s %s (%s) in %s; protected by %s\n",
                  (unsigned long long)h.frame, h.offset, h.cls.c_str(), h.value.c_str(), h.encoding.c_str(),
                  h.context.c_str(), h.rule.empty() ? "(no rule)" : h.rule.c_str());
    s += b;
  }
  if (r.leaks > r.leak_list.size()) s += "  ... " + std::to_string(r.leaks - r.leak_list.size()) + " more leaks\n";
  for (auto& h : r.possible_list) {
    std::snprintf(b, sizeof b, "possible frame %llu offset %u: %s %s (binary, in %s)\n", (unsigned long long)h.frame,
                  h.offset, h.cls.c_str(), h.value.c_str(), h.context.c_str());
    s += b;
  }
  std::snprintf(b, sizeof b,
                "%llu leaks; %llu possible (binary addresses or MACs in opaque bytes; %llu such bytes, %.2f 4-byte matches expected by chance); "
                "%llu matches allowed by the policy (%llu of them protected names inside an allowed name)\n",
                (unsigned long long)r.leaks, (unsigned long long)r.possible, (unsigned long long)r.opaque_bytes,
                r.possible_expected, (unsigned long long)r.allowed, (unsigned long long)r.inside_allowed);
  s += b;
  return s;
}

std::string render_json(const Options& o, const Report& r) {
  auto hit = [](const Hit& h) {
    return "{\"frame\":" + std::to_string(h.frame) + ",\"offset\":" + std::to_string(h.offset) + ",\"class\":" +
           jstr(h.cls) + ",\"value\":" + jstr(h.value) + ",\"encoding\":" + jstr(h.encoding) + ",\"context\":" +
           jstr(h.context) + ",\"rule\":" + jstr(h.rule) + "}";
  };
  std::string s = "{\"policy\":" + jstr(o.policy) + ",\"original\":" + jstr(o.original) + ",\"anonymized\":" +
                  jstr(o.anonymized) + ",\"original_frames\":" + std::to_string(r.original_frames) +
                  ",\"anonymized_frames\":" + std::to_string(r.anonymized_frames) + ",\"unmatched_frames\":" +
                  std::to_string(r.unmatched_frames) + ",\"leaks\":" + std::to_string(r.leaks) + ",\"possible\":" +
                  std::to_string(r.possible) + ",\"possible_expected\":" + std::to_string(r.possible_expected) +
                  ",\"opaque_bytes\":" + std::to_string(r.opaque_bytes) + ",\"allowed\":" + std::to_string(r.allowed) +
                  ",\"inside_allowed\":" + std::to_string(r.inside_allowed) + ",\"classes\":[";
  for (size_t i = 0; i < r.classes.size(); ++i) {
    auto& c = r.classes[i];
    s += (i ? "," : "") + std::string("{\"class\":") + jstr(c.cls) + ",\"protected\":" +
         std::to_string(c.protected_values) + ",\"found\":" + std::to_string(c.found) + ",\"leaks\":" +
         std::to_string(c.leaks) + ",\"possible\":" + std::to_string(c.possible) + "}";
  }
  s += "],\"leak_list\":[";
  for (size_t i = 0; i < r.leak_list.size(); ++i) s += (i ? "," : "") + hit(r.leak_list[i]);
  s += "],\"possible_list\":[";
  for (size_t i = 0; i < r.possible_list.size(); ++i) s += (i ? "," : "") + hit(r.possible_list[i]);
  return s + "]}\n";
}

int audit_main(int argc, char** argv) {
  Options o;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--policy" && v) o.policy = v, ++i;
    else if (a == "--original" && v) o.original = v, ++i;
    else if (a == "--anonymized" && v) o.anonymized = v, ++i;
    else if (a == "--format" && v && (std::string(v) == "json" || std::string(v) == "text")) o.json = std::string(v) == "json", ++i;
    else if (a == "--max-listed" && v) o.max_listed = unsigned(std::strtoul(v, nullptr, 10)), ++i;
    else {
      std::fprintf(stderr, "amon: unknown or incomplete option '%s' for audit\n(run 'amon --help' for usage)\n", a.c_str());
      return 2;
    }
  }
  if (o.policy.empty() || o.original.empty() || o.anonymized.empty()) {
    std::fprintf(stderr, "amon: audit needs --policy P.amon --original IN.pcap --anonymized OUT.pcap\n");
    return 2;
  }
  Report r;
  std::string err;
  if (!run(o, r, err)) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 2;
  }
  std::fputs((o.json ? render_json(o, r) : render_text(o, r)).c_str(), stdout);
  return r.leaks ? 1 : 0;
}

}  // namespace amon::audit
