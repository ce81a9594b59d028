// The audit's own pieces, shared by its files: frames read and tied
// (audit_frames.cpp), values collected from the original (audit_values.cpp)
// under the policy's address rules (audit_addresses.cpp) and its
// z-anonymity allowance (audit_zcount.h), the output searched
// (audit_search.cpp), the report (audit_report.cpp).
#pragma once

#include <libpsl.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "audit.h"
#include "audit_zcount.h"
#include "l2l4.h"
#include "policy.h"
#include "protocol.h"
#include "split_heads.h"
#include "values.h"

namespace amon::audit {

enum class Kind : uint8_t { Addr4, Addr6, Mac, Name, Text };

bool read_pcap(const std::string& path, std::vector<Frame>& out, int& linktype, std::string& err);

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

std::string lower(std::string_view s);
std::string addr_text(Kind k, const std::string& b);
std::string printable(Kind k, const std::string& v);
// DNS wire form of a dotted name (labels, no terminating root byte: the
// name may continue with a compression pointer).
std::string wire_name(const std::string& name);

struct Value {
  Kind kind;
  std::string bytes;
  std::string cls;   // the first field found protecting it
  std::string rule;  // the rule doing so
  bool cryptopan = false;  // an address that rule gives cryptopan()
  bool found = false;
};

struct Pattern {
  uint32_t value;
  std::string enc;
  uint32_t len;
  enum Bound : uint8_t { None, Digits, Hex, Label, Wire } bound;
  bool bin4;
};

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
  // Values a plugin finds stored XOR-ed (ProtoOcc::coded): the value's
  // offset, its key's, its length.
  struct Coded {
    uint32_t at, key, len;
  };
  std::vector<Coded> coded;
  // IPv4 addresses a plugin finds written as one decimal number
  // (ProtoOcc::form, IRC's DCC): the number's offset and length. Searched
  // as the address it reads as, a slot of 4 bytes at its offset.
  std::vector<std::pair<uint32_t, uint32_t>> decimal;
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
  ZCount counts;
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

  // The application values of a payload, read by the protocol plugins
  // that recognise it as the engine dispatches it (a datagram by its
  // plugins' ports or content probe, a TCP segment by every TCP plugin):
  // what the audit classes as a field is what the engine's plugin finds
  // and rewrites, no more (a NetBIOS datagram is not read as DNS).
  std::unique_ptr<PayloadValues> pv;

  Auditor(const Options& o_, Report& r_) : o(o_), r(r_), pv(std::make_unique<PayloadValues>(PayloadValues::Datagrams::Recognised)) {}
  ~Auditor() {
    if (psl) psl_free(psl);
  }


  bool run(std::string& err);

  // ---- values (audit_values.cpp) ----
  static std::string key(Kind k, const std::string& b) { return char(k) + b; }
  void protect(Kind k, const std::string& b, const std::string& cls, const FieldRule& fr);
  void allow(size_t frame, Kind k, const std::string& b);
  FieldRule rule_for(const std::string& field);
  int name_decision(const std::string& cls, const std::string& name, const std::string& rd, const std::string& user,
                    uint64_t t, const FieldRule& fr);
  void flow_of(const uint8_t* f, const Decoded& d, int side);
  void name_value(size_t fi, const std::string& field, std::string name, const std::string& user, uint64_t t);
  void text_value(size_t fi, const std::string& field, const std::string& v, const std::string& user, uint64_t t);
  void addr_value(size_t fi, const std::string& field, Kind k, const std::string& a, const std::string& user,
                  uint64_t t);
  void mac_value(size_t fi, const std::string& field, const std::string& m);
  void occ_value(size_t fi, const uint8_t* f, const Decoded& d, const uint8_t* p, const ProtoOcc& o,
                 const std::string& user, uint64_t t);
  void app_values(size_t fi, const uint8_t* f, const Decoded& d, int side, const std::string& user, uint64_t t);
  // Heads split over TCP segments (an HTTP head whose Cookie is in its
  // second segment), followed per direction of a flow, in sequence order
  // (split_heads.h), and read whole as the packet path reads a held head;
  // each segment is still read alone as well.
  SplitHeads heads;
  void stream_values(size_t fi, const uint8_t* f, const Decoded& d, int side, uint64_t t);
  // A followed head's values, taken at its last segment's frame and
  // allowed in each of its segments' frames. `whole`: complete; else what
  // was whole from its first byte, read as a head the stream cut.
  void head_values(const SplitHeads::Head& h, bool whole);
  // A link layer's own values (802.11 addresses, SSIDs, element contents) as engine/runtime/link.cpp treats them.
  void link_values(size_t fi, const uint8_t* f, uint32_t cap, uint64_t t);
  void collect();

  // Reads a payload with every plugin of its transport: as sent by the
  // flow's client, by its server, or both ways when the roles are unknown
  // (side as client_side() gives it).
  template <class Fn>
  void each_value(const uint8_t* f, const Decoded& d, uint32_t cap, int side, Fn&& fn) {
    if (d.status != DecodeStatus::Ok || (d.flags & kFlagLaterFragment)) return;
    // TCP and UDP by their ports; another protocol's whole IP payload when
    // a plugin parses it (ProtocolPlugin::l4_proto).
    if (d.l4_proto == kProtoTcp || d.l4_proto == kProtoUdp ? !d.has_l4_header()
                                                             : d.has_l4_header() || !pv->reads(d.l4_proto))
      return;
    const uint32_t end = std::min<uint32_t>(cap, d.payload_off + d.payload_len);
    if (end <= d.payload_off) return;
    const uint8_t* p = f + d.payload_off;
    auto one = [&](const ProtocolPlugin&, const ProtoOcc& o) { fn(p, o); };
    if (side != 1) pv->read(d.l4_proto, p, end - d.payload_off, d.sport, d.dport, true, one);
    if (side != 0) pv->read(d.l4_proto, p, end - d.payload_off, d.sport, d.dport, false, one);
  }

  // ---- addresses: roles and rules (audit_addresses.cpp) ----
  static bool names_no_host(Kind k, const std::string& a);
  // `clients` are users wherever their addresses appear: in clear they are
  // a leak unless ip.client's own rule keeps them (plan_clients).
  const dsl::Rule* client_rule = nullptr;
  bool clients_protected = false;
  void plan_clients();
  bool is_client_addr(Kind k, const std::string& a) const;
  void allow_derived(size_t fi, Kind k, const std::string& a, const ActionCall& c);
  static bool in_cidrs(const std::vector<dsl::Cidr>& cs, uint8_t fam, const uint8_t* a);
  static bool likely_server(uint16_t p);
  int client_side(const uint8_t* f, const Decoded& d);
  // The packet being collected: its flow (canonical endpoints; empty
  // without one) and whether its client sent it. The engine takes a
  // server address's z-decision once per flow, and a response shows its
  // query's decision for the names the query carried (ZOnce).
  std::string cur_flow;
  bool cur_from_client = true;
  std::map<std::string, std::string> initiator;  // flow -> the address that sent its first packet
  struct ZOnce {
    std::map<std::string, bool> flow_server;  // flow + rule + address -> released
    std::map<std::string, int> query_name;    // flow + value -> 0 hidden, 1 released, 2 its sld released
  } zonce;
  std::string user_of(const uint8_t* f, const Decoded& d, int side);
  void role_value(size_t fi, const uint8_t* f, const Decoded& d, Kind k, const std::string& a,
                  const std::string& user, uint64_t t, bool client = false);
  const dsl::Rule* addr_rule(int pos, bool is_client) const;
  void address_by_rule(size_t fi, Kind k, const std::string& a, const dsl::Rule* hit, const std::string& cls,
                       const std::string& user, uint64_t t, bool per_flow = false);

  // The encapsulations' own addresses (tunnel endpoints) are tunnel.addr,
  // not the packet's client or server: a rule naming tunnel.addr decides;
  // without one, a policy that protects addresses gives them its first
  // unconditional ip.server rule, or zeros when it has none (doc/language.md,
  // tunnel.addr). Endpoints take no z-count, so a zanon rule counts as its
  // fallback (allow_derived).
  const dsl::Rule* tunnel_rule = nullptr;
  bool tunnel_zero = false;
  void plan_tunnel_rule();
  void tunnel_endpoints(size_t fi, const uint8_t* f, uint32_t cap, const Decoded& d);

  // ---- frames (audit_frames.cpp) ----
  // Datagrams of a tunnel whose outer IP the link fragmented: the
  // original's first fragment is checked as the whole datagram (amon
  // anonymizes the packet inside as one), the other fragments through it.
  // members[i]: the frame holding the whole for fragment frame i.
  std::vector<size_t> whole_of;
  void join_tunnel_fragments();

  // ---- search (audit_search.cpp) ----
  std::vector<Pattern> pats;
  std::vector<std::string> lits;
  std::vector<unsigned> flags;
  void add(uint32_t v, std::string lit, const char* enc, bool caseless, Pattern::Bound b, bool bin4 = false);
  void build_patterns();
  static bool is_label_char(uint8_t c) { return std::isalnum(c) || c == '-' || c == '_'; }
  bool bounded(const Pattern& pt, const uint8_t* f, uint32_t n, uint32_t from) const;
  void addr_slots(const Frame& fr, Slots& sl);
  std::string context(const Frame& fr, uint32_t off);
  static bool is_dns_port(uint16_t p) { return p == 53 || p == 5353 || p == 5355; }
  bool search(std::string& err);
};

std::string jstr(const std::string& s);

}  // namespace amon::audit
