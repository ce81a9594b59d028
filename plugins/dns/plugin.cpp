// DNS as a protocol plugin (plugins/core/protocol.h): DNS, mDNS and LLMNR
// over UDP on their ports (the runtime's datagram shortcut) or found by a
// content probe on other ports, and DNS over TCP (length-prefixed messages,
// held while a message is split over segments). Its names cannot be
// rewritten one occurrence at a time (a label shared through compression
// pointers takes one decision for every name using it), so the plugin
// rewrites each message itself and asks the consumer's rules through the
// runtime (RewriteHost).
#include <algorithm>
#include <cstring>
#include <memory>

#include "amon_dns.hpp"
#include "checksum.h"
#include "protocol.h"

namespace amon::dns {

namespace {

void register_dns_fields(Registry& r) {
  using VT = ValueType;
  using R = FieldRole;
  r.add_field({"dns.qname", VT::Name, "dns", R::QuasiIdentifier, "domain", "DNS question name",
               {"dns.answer.name", "dns.rdata.name", "dns.answer.addr"}, kNoField, kCondAll});
  r.add_field({"dns.answer.name", VT::Name, "dns", R::QuasiIdentifier, "domain",
               "owner names of answer, authority and additional records", {"dns.qname"}});
  r.add_field({"dns.rdata.name", VT::Name, "dns", R::QuasiIdentifier, "domain",
               "names inside record data (CNAME, NS, PTR, MX, SRV, SOA, DNAME)", {"dns.qname"}});
  r.add_field({"dns.answer.addr", VT::Addr, "dns", R::QuasiIdentifier, "server-addr",
               "addresses in A/AAAA record data", {"dns.qname"}});
  r.add_field({"dns.ecs", VT::Addr, "dns", R::Identifier, "",
               "EDNS Client Subnet address (the client's own network)", {}});
}

struct Fields {
  // hostname: the DHCP client host name, the field a device's own name has
  // where a policy names one (kNoField without a DHCP plugin).
  FieldId qname, answer_name, rdata_name, answer_addr, ecs, eth_src, hostname;
  static const Fields& get() {
    static const Fields f = [] {
      const Registry& r = Registry::instance();
      auto id = [&](const char* n) { return r.field(n)->id; };
      const FieldDesc* h = r.field("dhcp.hostname");
      return Fields{id("dns.qname"), id("dns.answer.name"), id("dns.rdata.name"), id("dns.answer.addr"),
                    id("dns.ecs"), id("eth.src"), h ? h->id : kNoField};
    }();
    return f;
  }
  // The field a name's role makes it: the question (and a name in an EDNS
  // option, the query's business), an owner name of a record, or a name
  // inside a record's data.
  FieldId of(NameRole r) const {
    switch (r) {
      case NameRole::Qname:
      case NameRole::EdnsName: return qname;
      case NameRole::AnswerOwner:
      case NameRole::AuthorityOwner:
      case NameRole::AdditionalOwner: return answer_name;
      default: return rdata_name;
    }
  }
};

// A worker's parse: one message (UDP), or a TCP payload's messages, each
// parsed when a consumer's rewrite (or a condition) reaches it.
struct State {
  const Fields F = Fields::get();
  ParseResult pr;
  TcpSplit split;
  int msg = -1;  // which message of the payload pr holds (-1: none)
  bool nbns = false;  // the NetBIOS name service's state: its messages parse as NBNS
  // NBSTAT node names as values() hands them on: first-level encoded, lowercase.
  char nb_text[ParseResult::kMaxNbNames][32];
};

// What one consumer's policy asks of DNS, fixed when it is loaded.
struct Consumer {
  // The name roles it decides (bit 1 << NameRole): a name of a field
  // without rules is kept without asking.
  uint32_t roles = 0;
  bool addr_rules = false, ecs_rules = false, owner_rules = false, protects_addresses = false;
  // A rule names the device host name (Fields::hostname): the device names
  // of local name protocols take it where no DNS name rule applies.
  bool device_rules = false;
  // The query's masks of its question, for the response (same seed, same
  // bytes: the same masks without the SipHash chain). With exchanges.
  std::unique_ptr<FirstNameMasks> first;
};

void* make_state() { return new State; }
void* make_nbns_state() {
  auto* s = new State;
  s->nbns = true;
  return s;
}
void free_state(void* s) { delete static_cast<State*>(s); }

void* make_consumer(ConsumerSetup& setup) {
  const Fields& F = Fields::get();
  auto* c = new Consumer;
  constexpr uint32_t kOwners = 1u << unsigned(NameRole::AnswerOwner) | 1u << unsigned(NameRole::AuthorityOwner) |
                               1u << unsigned(NameRole::AdditionalOwner);
  constexpr uint32_t kQname = 1u << unsigned(NameRole::Qname) | 1u << unsigned(NameRole::EdnsName);
  static_assert(unsigned(NameRole::EdnsName) < 32);
  if (setup.has_rules(F.qname)) c->roles |= kQname;
  if (setup.has_rules(F.answer_name)) c->roles |= kOwners;
  if (setup.has_rules(F.rdata_name)) c->roles |= ~(kQname | kOwners);
  c->device_rules = F.hostname != kNoField && setup.has_rules(F.hostname);
  // A user's address in an answer or a client subnet takes ip.client's
  // rule where no rule names the field (RewriteHost::addr decides).
  c->addr_rules = setup.has_rules(F.answer_addr) || setup.protects_users();
  c->ecs_rules = setup.has_rules(F.ecs) || setup.protects_users();
  c->owner_rules = setup.has_rules(F.eth_src);
  c->protects_addresses = setup.protects_addresses();
  // A response's names are decided as its query's were only where the
  // store decides them (a plain rule decides the same each time).
  if (setup.zanon(F.qname) || setup.zanon(F.answer_name)) {
    setup.exchanges = true;
    c->first = std::make_unique<FirstNameMasks>();
  }
  return c;
}
void free_consumer(void* c) { delete static_cast<Consumer*>(c); }

// DNS on another UDP port: a standard query or response with a question or
// two that parses whole.
bool probe_udp(const uint8_t* q, uint32_t avail, uint16_t, uint16_t) {
  if (avail < 17) return false;
  const uint16_t qd = uint16_t(q[4] << 8 | q[5]);
  if (((q[2] >> 3) & 0xf) != 0 || qd < 1 || qd > 2) return false;
  static thread_local std::unique_ptr<ParseResult> scratch;
  if (!scratch) scratch = std::make_unique<ParseResult>();
  return parse(q, avail, *scratch) == Status::Ok;
}

bool parse_datagram(void* vs, const uint8_t* payload, uint32_t len) {
  State& s = *static_cast<State*>(vs);
  s.msg = 0;
  return parse(payload, len, s.pr, s.nbns) == Status::Ok;
}

ProtoStatus parse_udp(void* vs, const ProtoPacket& pkt, ProtoOccs&) {
  if (pkt.cut_short) return ProtoStatus::Incomplete;  // cannot be parsed to its end
  return parse_datagram(vs, pkt.payload, pkt.len) ? ProtoStatus::Parsed : ProtoStatus::Malformed;
}

ProtoStatus parse_tcp(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  const Status st = split_tcp(pkt.payload, pkt.len, s.split);
  s.msg = -1;
  if (st == Status::Malformed || pkt.cut_short) return ProtoStatus::Malformed;
  if (st == Status::Truncated) {
    if (pkt.flow_state && s.split.need) out.need = s.split.need - (pkt.len - s.split.partial_off);
    out.hold = true;
    return ProtoStatus::Incomplete;
  }
  return ProtoStatus::Parsed;
}

// One message's values, for tools off the packet path (ProtocolPlugin::
// values). A response's question repeats its query's name.
void emit_message(const State& s, uint32_t base, void (*emit)(void*, const ProtoOcc&), void* ctx) {
  const ParseResult& pr = s.pr;
  const Fields& F = s.F;
  for (unsigned i = 0; i < pr.n_names; ++i) {
    const NameRef& n = pr.names[i];
    ProtoOcc o;
    o.kind = OccKind::Name;
    o.field = F.of(n.role);
    o.repeat = n.role == NameRole::Qname && pr.hdr.qr();
    o.index = uint16_t(i), o.off = base + n.off, o.len = n.wire_len, o.text = pr.name_text(i);
    emit(ctx, o);
  }
  for (unsigned i = 0; i < pr.n_addrs; ++i) {
    ProtoOcc o;
    o.field = F.answer_addr, o.kind = pr.addrs[i].family == 4 ? OccKind::Addr4 : OccKind::Addr6;
    o.role = s.nbns;
    o.index = uint16_t(i), o.off = base + pr.addrs[i].off, o.len = pr.addrs[i].family == 4 ? 4 : 16;
    emit(ctx, o);
  }
  if (pr.ecs.present && pr.ecs.addr_len) {
    // The prefix's bytes only (a /24 sends 3): the rest of the address is not on the wire.
    ProtoOcc o;
    o.field = F.ecs, o.kind = pr.ecs.family == 1 ? OccKind::Addr4 : OccKind::Addr6;
    o.off = base + pr.ecs.addr_off, o.len = pr.ecs.addr_len;
    emit(ctx, o);
  }
  for (unsigned i = 0; i < pr.n_nb_names; ++i) {
    ProtoOcc o;
    o.field = F.rdata_name, o.kind = OccKind::Name, o.index = uint16_t(i);
    o.off = base + pr.nb_name[i], o.len = 16;
    o.text = std::string_view(s.nb_text[i], 32);
    emit(ctx, o);
  }
  for (unsigned i = 0; i < pr.n_nb_units; ++i) {
    ProtoOcc o;
    o.field = F.eth_src, o.kind = OccKind::Mac, o.index = uint16_t(i);
    o.off = base + pr.nb_unit[i], o.len = 6;
    emit(ctx, o);
  }
  if (pr.owner.present)
    for (unsigned k = 0; k < pr.owner.n_macs; ++k) {
      ProtoOcc o;
      o.field = F.eth_src, o.kind = OccKind::Mac, o.index = uint16_t(k);
      o.off = base + pr.owner.mac_off[k], o.len = 6;
      emit(ctx, o);
    }
}

// An NBSTAT node name (16 bytes: 15 characters, the type suffix) as the
// value an NBNS name of the same node and suffix is decided on: its
// first-level encoding (RFC 1001 14.1), lowercase.
void nb_encode_lower(const uint8_t* name, char* out) {
  for (unsigned i = 0; i < 16; ++i) out[2 * i] = char('a' + (name[i] >> 4)), out[2 * i + 1] = char('a' + (name[i] & 15));
}

void values_udp(void* vs, const uint8_t* payload, uint32_t, void (*emit)(void*, const ProtoOcc&), void* ctx) {
  State& s = *static_cast<State*>(vs);
  if (s.msg != 0 || s.pr.status != Status::Ok) return;
  for (unsigned i = 0; i < s.pr.n_nb_names; ++i) nb_encode_lower(payload + s.pr.nb_name[i], s.nb_text[i]);
  emit_message(s, 0, emit, ctx);
}

void values_tcp(void* vs, const uint8_t* payload, uint32_t, void (*emit)(void*, const ProtoOcc&), void* ctx) {
  State& s = *static_cast<State*>(vs);
  for (unsigned i = 0; i < s.split.n; ++i) {
    const TcpMessage& m = s.split.msgs[i];
    s.msg = int(i);
    if (parse(payload + m.off, m.len, s.pr) == Status::Ok) emit_message(s, m.off, emit, ctx);
  }
}

// Conditions test the question name of the message parsed last.
bool value(void* vs, FieldId f, std::string_view& out) {
  const State& s = *static_cast<const State*>(vs);
  if (f != s.F.qname || s.msg < 0) return false;
  for (unsigned i = 0; i < s.pr.n_names; ++i)
    if (s.pr.names[i].role == NameRole::Qname) return out = s.pr.name_text(i), true;
  return false;
}

// A reverse-DNS name (in-addr.arpa, ip6.arpa) is an address written as
// labels. Its address labels are masked with 'x' when the policy protects
// that address (RewriteHost::protects_addr; inside no `clients` set the
// name's role in its flow is unknown, so any address counts as a user's).
// Masked, not mapped: a mapped IPv4 address rarely has the digit counts of
// the original, and the labels cannot change length without moving every
// compression pointer after them; mapping only where the lengths happen to
// fit would tell which names those are. Taken before the name rules rewrite
// (the labels as they came: at most 3 bytes each), applied after them, so
// a label they already changed stays as they left it.
struct RevLabel {
  uint16_t name, off;
  uint8_t len, b[3];
};

unsigned reverse_collect(const uint8_t* msg, const ParseResult& pr, const RewriteHost& host, RevLabel* out,
                         unsigned cap) {
  unsigned n_out = 0;
  for (unsigned i = 0; i < pr.n_names && n_out < cap; ++i) {
    const NameRef& nr = pr.names[i];
    if (nr.n_labels < 3) continue;
    uint8_t family, a[16];
    const unsigned n = reverse_address(pr.name_text(i), family, a);
    if (!n || !host.protects_addr(family, a)) continue;
    // The address labels are the n right before the two suffix labels.
    for (unsigned k = nr.n_labels - 2 - n; k < nr.n_labels - 2u && n_out < cap; ++k) {
      const LabelSpan& l = pr.name_label(i, k);
      RevLabel& r = out[n_out++];
      r.name = uint16_t(i), r.off = l.off, r.len = uint8_t(std::min<unsigned>(l.len, sizeof r.b));
      std::memcpy(r.b, msg + l.off, r.len);
    }
  }
  return n_out;
}

void reverse_apply(uint8_t* msg, const RevLabel* rl, unsigned n, RewriteHost& host, uint64_t* sums) {
  int counted = -1;
  for (unsigned i = 0; i < n; ++i) {
    uint8_t* p = msg + rl[i].off;
    if (std::memcmp(p, rl[i].b, rl[i].len) != 0) continue;  // changed already (a name rule, or a shared label)
    if (sums) sums[0] += csum_span_at(msg, rl[i].off, rl[i].len);
    std::memset(p, 'x', rl[i].len);
    if (sums) sums[1] += csum_span_at(msg, rl[i].off, rl[i].len);
    if (counted != rl[i].name) host.count_reverse_hidden(), counted = rl[i].name;
  }
}

// mDNS and LLMNR (and NBNS, a plugin of its own): their names are the
// names users give their devices.
bool local_port(uint16_t p) { return p == 5353 || p == 5355; }

// How many labels at the right of a name are the protocol's, not the
// device's: DNS-SD service labels (`_ipp`, `_tcp`, `_sub`) and the `local`
// domain. A name made of them only names no device.
unsigned service_labels(std::string_view t, unsigned& n_labels) {
  // Unescaped dots, left to right (the presentation form escapes a dot
  // inside a label as \.).
  uint16_t dots[128];
  unsigned nd = 0;
  for (size_t i = 0; i < t.size() && nd < 128; ++i)
    if (t[i] == '\\') ++i;
    else if (t[i] == '.') dots[nd++] = uint16_t(i);
  n_labels = t.empty() ? 0 : nd + 1;
  unsigned n = 0;
  for (unsigned k = n_labels; k-- > 0;) {
    const size_t b = k ? dots[k - 1] + 1u : 0, e = k < nd ? dots[k] : t.size();
    const std::string_view lab = t.substr(b, e - b);
    if (!(lab.starts_with('_') || (n == 0 && lab == "local"))) break;
    ++n;
  }
  return n;
}

// A device name of a local name protocol under a policy without a rule for
// its DNS role: the device host name's rule decides it, on the labels left
// of the protocol's own, so a host name hashed in DHCP does not travel in
// clear in the same device's mDNS announcements.
names::Decision device_name(RewriteHost& host, FieldId hostname, std::string_view text, std::string_view shown) {
  unsigned n;
  const unsigned keep = service_labels(text, n);
  if (keep >= n || text.ends_with(".arpa")) return names::Decision::keep();
  names::Decision d = host.decide_name(hostname, text, false, shown);
  if (!keep) return d;
  switch (d.action) {
    case names::Action::Keep: return d;
    case names::Action::Mask: return names::Decision::mask_left_of(uint8_t(keep), d.seed);
    case names::Action::MaskLeftOf: d.keep_labels = uint8_t(std::max<unsigned>(keep, d.keep_labels)); return d;
    default: return names::Decision::hidden(uint8_t(keep));
  }
}

// A MAC written as text (TXT values) in place: parsed, given the MAC rule,
// written back with its separator and the case of its letters.
bool txt_mac(RewriteHost& host, FieldId f, uint8_t* p) {
  auto nib = [](uint8_t c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  uint8_t mac[6];
  bool upper = false;
  for (unsigned k = 0; k < 6; ++k) {
    mac[k] = uint8_t(nib(p[3 * k]) << 4 | nib(p[3 * k + 1]));
    upper = upper || (p[3 * k] >= 'A' && p[3 * k] <= 'F') || (p[3 * k + 1] >= 'A' && p[3 * k + 1] <= 'F');
  }
  if (!host.mac(f, mac)) return false;
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  for (unsigned k = 0; k < 6; ++k) p[3 * k] = uint8_t(digits[mac[k] >> 4]), p[3 * k + 1] = uint8_t(digits[mac[k] & 15]);
  return true;
}

// An NBSTAT answer's node names and unit ID. A node name is the name its
// NBNS registrations carry, written plain: decided on the same value (its
// first-level encoding, lowercase), by dns.rdata.name's rule or, without
// one, the device host name's, the decision applied to its characters
// (padding and type suffix kept). The unit ID is the adapter's MAC: the
// source MAC's rule, as the Owner option's (an all-zero one, as Samba
// sends, names no adapter).
void nbstat(const ParseResult& pr, const Consumer& c, RewriteHost& host, uint8_t* msg, bool devices, uint64_t* sums) {
  const Fields& F = Fields::get();
  const bool rules = c.roles >> unsigned(NameRole::RdataOther) & 1;
  if (rules || devices)
    for (unsigned i = 0; i < pr.n_nb_names; ++i) {
      uint8_t* p = msg + pr.nb_name[i];
      char text[32], plain[15];
      nb_encode_lower(p, text);
      const std::string_view t(text, 32), shown(plain, names::netbios_plain(t, plain));
      const names::Decision d = rules ? host.decide_name(F.rdata_name, t, false, shown)
                                      : host.decide_name(F.hostname, t, false, shown);
      if (d.action == names::Action::Keep) continue;
      unsigned n = 15;
      while (n && p[n - 1] == ' ') --n;
      if (sums) sums[0] += csum_span_at(msg, pr.nb_name[i], 15);
      names::apply_to_text(reinterpret_cast<char*>(p), n, d);
      if (sums) sums[1] += csum_span_at(msg, pr.nb_name[i], 15);
    }
  if (c.owner_rules && host.modifies(F.eth_src))
    for (unsigned i = 0; i < pr.n_nb_units; ++i) {
      uint8_t* p = msg + pr.nb_unit[i];
      static constexpr uint8_t kZero[6] = {};
      if (std::memcmp(p, kZero, 6) == 0) continue;
      if (sums) sums[0] += csum_span_at(msg, pr.nb_unit[i], 6);
      if (!host.mac(F.eth_src, p)) host.drop();
      if (sums) sums[1] += csum_span_at(msg, pr.nb_unit[i], 6);
    }
}

// One message of a consumer's copy: every name by its role's rule (one
// decision per label span), the reverse names' address labels, the answer
// addresses, the ECS subnet and the mDNS Owner option's MACs. Inlined: a
// call level per datagram cost as much as a tenth of the rewrite's own work.
[[gnu::always_inline]] inline bool rewrite_msg(State& s, const Consumer& c, RewriteHost& host, uint8_t* msg, const uint8_t* orig, uint32_t len,
                 int index, const ProtoRewrite& at) {
  const Fields& F = s.F;
  if (s.msg != index) {
    // Parsed from the original bytes (the copy is identical in this span:
    // nothing before the application layer rewrites payload bytes).
    parse(orig, len, s.pr, s.nbns);
    s.msg = index;
  }
  const ParseResult& pr = s.pr;
  if (pr.status != Status::Ok) return false;
  if (index) host.next_message();  // the host starts each payload afresh
  struct Ctx {
    RewriteHost* host;
    const Fields* F;
    bool exchange = false, recalled = false;
    uint32_t roles;  // the roles a DNS name rule decides; the others are device names
    std::string_view qname;
    bool nbns = false;
  } cx;
  cx.host = &host;
  cx.F = &F;
  cx.roles = c.roles;
  cx.nbns = s.nbns;
  const bool devices = c.device_rules && (s.nbns || local_port(at.sport) || local_port(at.dport));
  // The exchange this message belongs to: a query records its first
  // question's decision, a response recalls it for that question and for the
  // owner names equal to it. Other names (CNAME targets, rdata) are decided
  // at their own time.
  if (c.first && at.flow_no && pr.hdr.qdcount && pr.n_names && pr.names[0].role == NameRole::Qname) {
    cx.qname = pr.name_text(0);
    const bool response = pr.hdr.qr();
    const unsigned qdir = (at.from_initiator ? 0u : 1u) ^ (response ? 1u : 0u);
    cx.exchange = host.open_exchange(at.flow_no, qdir, pr.hdr.id, cx.qname, response, cx.recalled);
  }
  auto fn = [](void* vctx, const NameView& nv) -> names::Decision {
    auto* x = static_cast<Ctx*>(vctx);
    const Fields& F = *x->F;
    // An NBNS name is also searched for as its host's name is written
    // elsewhere (a DNS query for it, an account name in a certificate).
    char plain[15];
    const std::string_view shown(plain, x->nbns ? names::netbios_plain(nv.text, plain) : 0);
    if (!(x->roles >> unsigned(nv.role) & 1)) return device_name(*x->host, F.hostname, nv.text, shown);
    const FieldId f = F.of(nv.role);
    const bool owner = f == F.answer_name;
    const bool ex = x->exchange && (nv.index == 0 || (owner && x->recalled && nv.text == x->qname));
    return x->host->decide_name(f, nv.text, ex, shown);
  };
  uint64_t* const sums = at.sums;
  // Only an exchange's seed can come back (a fresh random one cannot): a
  // query stores its question's masks, its response takes them.
  if (cx.exchange) c.first->reuse = cx.recalled;
  RevLabel rev[64];
  const unsigned n_rev = c.protects_addresses ? reverse_collect(msg, pr, host, rev, 64) : 0;
  const uint32_t roles = devices ? ~0u : c.roles;
  if (roles) rewrite_names(msg, len, pr, fn, &cx, sums, roles, cx.exchange ? c.first.get() : nullptr);
  // Bytes after the last record are no field and no rule decides them: where
  // rules decide this message's names they may be the rest of a name that a
  // fuzzed or miscounted question left outside the parse (`_sip` asked, then
  // `\x04_udp\x03sip\x09cybercity\x02dk` behind it), so they are zeroed, the
  // length kept (fail closed).
  if (roles && pr.trailing) {
    const unsigned off = unsigned(len) - pr.trailing;
    if (sums) sums[0] += csum_span_at(msg, off, pr.trailing);
    std::memset(msg + off, 0, pr.trailing);
    if (sums) sums[1] += csum_span_at(msg, off, pr.trailing);
  }
  if (n_rev) reverse_apply(msg, rev, n_rev, host, sums);
  if (s.nbns) {
    // The addresses a host registers, answers or defends for its name are
    // addresses of the network: its header's rewrite where one is the
    // packet's own, else its role's rule, as an IP header would have it.
    for (unsigned i = 0; i < pr.n_addrs; ++i) {
      const unsigned off = pr.addrs[i].off, n = pr.addrs[i].family == 4 ? 4 : 16;
      if (sums) sums[0] += csum_span_at(msg, off, n);
      if (!host.role_addr(msg + off, pr.addrs[i].family)) host.drop();
      if (sums) sums[1] += csum_span_at(msg, off, n);
    }
    nbstat(pr, c, host, msg, devices, sums);
  } else if (c.addr_rules)
    for (unsigned i = 0; i < pr.n_addrs; ++i) {
      const unsigned off = pr.addrs[i].off, n = pr.addrs[i].family == 4 ? 4 : 16;
      if (sums) sums[0] += csum_span_at(msg, off, n);
      if (!host.addr(F.answer_addr, msg + off, pr.addrs[i].family)) host.drop();
      if (sums) sums[1] += csum_span_at(msg, off, n);
    }
  if (pr.ecs.present && pr.ecs.addr_len && c.ecs_rules) {
    // The subnet (the client's own network) carries only the bytes its
    // source prefix needs: the rule's action runs on it as on a whole
    // address, the rest zero, and its bytes go back. Each action keeps its
    // meaning: zero() zeroes it, prefix(n) keeps n bits, cryptopan() maps it
    // prefix-preservingly (the leading bytes of the mapped address depend on
    // the leading bytes of the subnet only), hash() hashes it. The bits past
    // the source prefix are zeroed again, as RFC 7871 requires of them; the
    // prefix lengths stay, so the option still parses.
    const unsigned off = pr.ecs.addr_off, n = pr.ecs.addr_len;
    const uint8_t family = pr.ecs.family == 1 ? 4 : 6;
    uint8_t a[16] = {}, before[16];
    std::memcpy(a, msg + off, n);
    std::memcpy(before, a, sizeof a);
    if (!host.addr(F.ecs, a, family)) {
      host.drop();
    } else if (std::memcmp(a, before, sizeof a) != 0) {
      const unsigned src = pr.ecs.source_prefix;
      if (src % 8) a[n - 1] &= uint8_t(0xff00 >> (src % 8));
      if (sums) sums[0] += csum_span_at(msg, off, n);
      std::memcpy(msg + off, a, n);
      if (sums) sums[1] += csum_span_at(msg, off, n);
    }
  }
  if (pr.n_txt_macs && c.owner_rules && host.modifies(F.eth_src))
    // A device's MAC in its DNS-SD values (waMA=, deviceid=) is the MAC of
    // its frames: the source MAC's rule, as the Owner option's.
    for (unsigned i = 0; i < pr.n_txt_macs; ++i) {
      uint8_t* p = msg + pr.txt_mac[i];
      if (sums) sums[0] += csum_span_at(msg, pr.txt_mac[i], 17);
      if (!txt_mac(host, F.eth_src, p)) host.drop();
      if (sums) sums[1] += csum_span_at(msg, pr.txt_mac[i], 17);
    }
  if (pr.owner.present && pr.owner.data_len && c.owner_rules) {
    // The Owner option names the sending device by its MAC (and the MAC to
    // wake it with): the MACs take the rule of the packet's source MAC, so
    // they leave as the Ethernet header's does. The wake-up password goes
    // with them; an option of unknown layout is zeroed whole, as nothing in
    // it can be told apart from a MAC.
    const Owner& o = pr.owner;
    if (host.modifies(F.eth_src)) {
      if (sums) sums[0] += csum_span_at(msg, o.data_off, o.data_len);
      if (!o.n_macs) std::memset(msg + o.data_off, 0, o.data_len);
      for (unsigned i = 0; i < o.n_macs; ++i)
        if (!host.mac(F.eth_src, msg + o.mac_off[i])) host.drop();
      if (o.pw_len) std::memset(msg + o.pw_off, 0, o.pw_len);
      if (sums) sums[1] += csum_span_at(msg, o.data_off, o.data_len);
    }
  }
  return true;
}

// A consumer without its state (made before the plugin was registered)
// cannot tell what to rewrite: fail closed.
bool rewrite_udp(void* vs, void* vc, RewriteHost& host, uint8_t* payload, const uint8_t* orig, uint32_t len,
                 const ProtoRewrite& at) {
  if (!vc) return false;
  return rewrite_msg(*static_cast<State*>(vs), *static_cast<const Consumer*>(vc), host, payload, orig, len, 0, at);
}

bool rewrite_tcp(void* vs, void* vc, RewriteHost& host, uint8_t* payload, const uint8_t* orig, uint32_t,
                 const ProtoRewrite& at) {
  if (!vc) return false;
  State& s = *static_cast<State*>(vs);
  const Consumer& c = *static_cast<const Consumer*>(vc);
  const TcpSplit& sp = s.split;
  for (unsigned i = 0; i < sp.n; ++i)
    if (!rewrite_msg(s, c, host, payload + sp.msgs[i].off, orig + sp.msgs[i].off, sp.msgs[i].len, int(i), at) &&
        at.protects)
      return false;
  return true;
}

// Where DNS over TCP resumes after a capture gap, strictly: length-prefixed
// messages from the segment's first byte, each a query from the client or a
// response from the server (QR), a standard opcode, one question, each
// whole one ending where the next begins; the last may continue past the
// segment (its parse then waits for the rest).
bool message_start(const uint8_t* pl, uint32_t avail, bool from_init) {
  uint32_t off = 0;
  while (off + 8 <= avail) {
    const uint32_t len = uint32_t(pl[off]) << 8 | pl[off + 1];
    const uint8_t flags = pl[off + 4], opcode = uint8_t(flags >> 3 & 0xf);
    if (len < 12 || bool(flags & 0x80) == from_init || (opcode != 0 && opcode != 4 && opcode != 5) ||
        pl[off + 6] != 0 || pl[off + 7] != 1)
      return false;
    off += 2 + len;
  }
  return off >= avail && avail >= 8;
}

const ProtocolPlugin kUdp = {
    .name = "dns",
    .l4_proto = 17,
    .register_fields = register_dns_fields,
    .ports = {53, 5353, 5355},
    .probe = probe_udp,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_udp,
    .rewrite = rewrite_udp,
    .make_consumer = make_consumer,
    .free_consumer = free_consumer,
    .value = value,
    .numbered = true,
    .shortcut = true,
    .parse_datagram = parse_datagram,
    .values = values_udp,
};

// NBNS (UDP 137) is DNS's message format with NetBIOS names as one encoded
// label: its device names (USER-PC) follow the DNS name rules, and a
// message that does not parse fails closed like a DNS one. A plugin of its
// own (carrying dns's fields, so `proto in {dns}` still takes it) because
// its records are not DNS's (type 33 is NBSTAT, not SRV) and its addresses
// are the network's: parsed wherever a policy protects addresses.
const ProtocolPlugin kNbns = {
    .name = "nbns",
    .l4_proto = 17,
    .ports = {137},
    .role_addresses = true,
    .carries = "dns",
    .make_state = make_nbns_state,
    .free_state = free_state,
    .parse = parse_udp,
    .rewrite = rewrite_udp,
    .make_consumer = make_consumer,
    .free_consumer = free_consumer,
    .value = value,
    .numbered = true,
    .values = values_udp,
};

const ProtocolPlugin kTcp = {
    .name = "dns-tcp",
    .l4_proto = 6,
    .ports = {53, 5353, 5355},
    .holds = true,
    .carries = "dns",
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_tcp,
    .message_start = message_start,
    .rewrite = rewrite_tcp,
    .make_consumer = make_consumer,
    .free_consumer = free_consumer,
    .value = value,
    .numbered = true,
    .values = values_tcp,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kUdp; }
const ProtocolPlugin& tcp_protocol_plugin() { return kTcp; }
const ProtocolPlugin& nbns_protocol_plugin() { return kNbns; }

}  // namespace amon::dns
