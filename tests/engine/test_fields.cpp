// Every registered field against the runtime: each operator a condition
// accepts on it, with the field present and absent, agrees with a reference
// evaluation written here (not amon's); and the registry is complete
// (every field located, every action implemented for its value types).
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "frames.h"
#include "actions_rt.h"
#include "cryptopan.h"
#include "l2l4.h"
#include "l7.h"
#include "field_samples.h"
#include "l7_build.hpp"
#include "policy.h"
#include "registry.h"
#include "runtime.h"
#include "scratch.h"

using namespace amon;
using namespace amon_test;

namespace amon_test {

namespace {
std::vector<Samples (*)()>& sources() {
  static std::vector<Samples (*)()> v;
  return v;
}
}  // namespace

SampleSource::SampleSource(Samples (*make)()) { sources().push_back(make); }

Samples all_samples() {
  Samples all;
  for (auto make : sources())
    for (auto& [name, sample] : make())
      if (!all.emplace(name, sample).second) throw std::logic_error("two samples for field " + name);
  return all;
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

Bytes tcp4(const Bytes& pl, uint16_t sport, uint16_t dport) {
  V4 h;
  if (sport == 80) std::swap(h.src, h.dst);  // a server's response
  return cat({eth(0x0800), ipv4(h, cat({tcp_hdr(sport, dport), pl}))});
}
Bytes udp4(const Bytes& pl, uint16_t sport, uint16_t dport) {
  V4 h;
  h.proto = 17;
  return cat({eth(0x0800), ipv4(h, cat({udp_hdr(sport, dport, uint16_t(8 + pl.size())), pl}))});
}

}  // namespace amon_test

namespace {

// The decoder's own fields (eth, ip, payload), on the HTTP request sample;
// every other field's sample comes from its protocol's test folder.
Samples samples() {
  Samples s = all_samples();
  const Sample& req = s.at("http.host");
  const std::string pl(req.frame.begin() + 14 + 20 + 20, req.frame.end());
  s.insert({
      {"eth.src", {req.frame, "02:00:00:00:00:02"}},
      {"eth.dst", {req.frame, "02:00:00:00:00:01"}},
      {"ip.src", {req.frame, "192.0.2.1"}},
      {"ip.dst", {req.frame, "198.51.100.2"}},
      {"ip.client", {req.frame, "192.0.2.1"}},
      {"ip.server", {req.frame, "198.51.100.2"}},
      {"payload", {req.frame, pl}},
  });
  return s;
}
// The HTTP samples' request and response, for the tests on HTTP fields below.
const Sample& http_request() {
  static const Sample s = all_samples().at("http.host");
  return s;
}
const Sample& http_response() {
  static const Sample s = all_samples().at("http.server");
  return s;
}

// A packet of another protocol (ICMP echo): no application field in it.
Bytes absent_frame() {
  V4 h;
  h.proto = 1;
  return cat({eth(0x0800), ipv4(h, cat({icmp_hdr(8, 0), payload(8)}))});
}

struct Run {
  std::string errors;  // the compiler's diagnostics
  ConsumerCounters c;
  SharedServices svc;
  std::shared_ptr<const dsl::Policy> policy;
  std::unique_ptr<Program> prog;
  std::unique_ptr<ProgramInstance> inst;

  explicit Run(const std::string& src) {
    dsl::Diagnostics diags;
    policy = dsl::compile_string(src, "test.amon", diags);
    errors = diags.render_text();
    if (!policy || diags.errors()) return;
    prog = std::make_unique<Program>(policy, 0, &svc);
    inst = prog->instantiate();
  }
  // The frame through the analysis and the consumer, as the engine runs it.
  Bytes run(const Bytes& f, bool from_client = true) {
    Decoded d;
    decode(f.data(), uint32_t(f.size()), uint32_t(f.size()), d);
    static uint64_t id = 0;
    L7Parse parse;
    FlowState flow;
    PacketMeta m;
    m.initiator_is_src = from_client;
    m.ts_ns = 1700000000000000000ULL;
    m.flow = &flow;
    m.orig = f.data();
    parse.reset(++id);
    analyze_l7(f.data(), d, m, parse);
    Bytes g = f;
    uint32_t cap = uint32_t(g.size()), wire = cap;
    inst->process(g.data(), cap, wire, d, m, c);
    g.resize(cap);
    return g;
  }
};

}  // namespace

TEST_CASE("every operator on every field a condition accepts agrees with a reference evaluation",
          "[fields][conditions]") {
  register_builtin_plugins();
  const auto S = samples();
  const auto& reg = Registry::instance();
  unsigned tested = 0;
  for (const FieldDesc& f : reg.fields()) {
    if (!f.cond_ops) continue;
    INFO("field " << f.name);
    auto it = S.find(f.name);
    REQUIRE(it != S.end());  // a field accepted in conditions needs its sample packet here
    const Sample& s = it->second;
    // The literal each operator compares with: the field's value (a match)
    // and another value (no match). Addresses and MACs as written.
    const bool is_addr = f.type == ValueType::Addr;
    const std::string same = is_addr ? s.value + "/32" : f.type == ValueType::Mac ? s.value : "\"" + s.value + "\"";
    const std::string other = is_addr ? "10.9.9.9/32" : f.type == ValueType::Mac ? "02:aa:aa:aa:aa:aa" : "\"zzz.invalid\"";
    struct Case {
      uint8_t op;
      std::string cond;
      bool want_present;
    };
    std::vector<Case> cases;
    // == and != on an address take the address itself (in takes prefixes).
    const std::string same1 = is_addr ? s.value : same, other1 = is_addr ? "10.9.9.9" : other;
    if (f.cond_ops & kCondEq) {
      cases.push_back({kCondEq, f.name + " == " + same1, true});
      cases.push_back({kCondEq, f.name + " == " + other1, false});
    }
    if (f.cond_ops & kCondNe) {
      cases.push_back({kCondNe, f.name + " != " + same1, false});
      cases.push_back({kCondNe, f.name + " != " + other1, true});
    }
    if (f.cond_ops & kCondIn) {
      cases.push_back({kCondIn, f.name + " in { " + other + ", " + same + " }", true});
      cases.push_back({kCondIn, f.name + " in { " + other + " }", false});
    }
    if (f.cond_ops & kCondMatch) {
      // A regex on a piece of the value; the reference is std::regex.
      std::string piece = s.value.substr(0, std::min<size_t>(s.value.size(), 5));
      std::string esc;
      for (char ch : piece) esc += std::isalnum(uint8_t(ch)) ? std::string(1, ch) : std::string("\\") + ch;
      cases.push_back({kCondMatch, f.name + " ~ /" + esc + "/", std::regex_search(s.value, std::regex(esc))});
      cases.push_back({kCondMatch, f.name + " ~ /^zzz-never/", false});
    }
    for (const Case& c : cases) {
      INFO("condition " << c.cond);
      // The rule's effect is seen on the client address: zeroed when the
      // condition holds.
      Run r("ip.client : zero() when " + c.cond + "\n");
      INFO(r.errors);
      REQUIRE(r.inst);
      for (int present = 1; present >= 0; --present) {
        const Bytes in = present ? s.frame : absent_frame();
        // Absent: == and in and ~ are false, != is true (the reference:
        // a field that is not there equals nothing).
        bool want = present ? c.want_present : c.op == kCondNe;
        // Fields every IP packet has are present in the ICMP frame too,
        // with the same values (same addresses and MACs).
        if (!present && (f.protocol == "eth" || f.protocol == "ip")) want = c.want_present;
        if (!present && f.name == "payload") want = c.op == kCondMatch ? false : want;
        const bool fc = !present || s.from_client;
        const Bytes out = r.run(in, fc);
        const size_t at = 14 + (fc ? 12 : 16);  // the client's address
        const bool zeroed = out[at] == 0 && out[at + 1] == 0 && out[at + 2] == 0 && out[at + 3] == 0;
        INFO((present ? "present" : "absent"));
        CHECK(zeroed == want);
        ++tested;
      }
    }
  }
  CHECK(tested > 100);
}

TEST_CASE("a condition on a field the runtime cannot evaluate is refused with its location", "[fields][conditions]") {
  register_builtin_plugins();
  for (const FieldDesc& f : Registry::instance().fields()) {
    if (f.cond_ops == kCondAll) continue;
    INFO("field " << f.name);
    // An operator it does not accept: a compile error at the field, never a
    // condition that is silently false.
    const char* cond = !(f.cond_ops & kCondMatch) ? " ~ /x/" : " == \"x\"";
    Run r("ip.client : zero() when " + f.name + cond + "\n");
    CHECK(!r.inst);
    CHECK(r.errors.find("test.amon:1:") != std::string::npos);
  }
}

TEST_CASE("http.cookie in a condition selects the rule (it used to be silently false)", "[fields][conditions]") {
  register_builtin_plugins();
  const Bytes req = http_request().frame;
  Run r("http.uri : redact() when http.cookie ~ /session/\n");
  REQUIRE(r.inst);
  const Bytes out = r.run(req);
  const std::string s(out.begin() + 14 + 20 + 20, out.end());
  CHECK(s.find("/path/x?q=1") == std::string::npos);
  CHECK(s.find("GET xxxxxxxxxxx HTTP/1.1") != std::string::npos);
  CHECK(r.c.rule_hits.size() >= 1);
  CHECK(r.c.rule_hits[0] == 1);
}

TEST_CASE("http.from, declared in plugins/http only, is rewritten by its rule and nothing else is",
          "[fields][http]") {
  register_builtin_plugins();
  const Bytes req = http_request().frame;
  Run r("http.from : redact()\n");
  REQUIRE(r.inst);
  const Bytes out = r.run(req);
  const std::string s(out.begin() + 14 + 20 + 20, out.end());
  CHECK(s.find("user@mail.example") == std::string::npos);
  CHECK(s.find("From: xxxxxxxxxxxxxxxxx\r\n") != std::string::npos);
  CHECK(s.find("X-Real-IP: 198.51.100.77\r\n") != std::string::npos);
  CHECK(s.size() == http_request().frame.size() - 14 - 20 - 20);
}

TEST_CASE("SSDP (HTTP over UDP 1900) carries HTTP's fields: its rules and proto in { http } apply",
          "[fields][http]") {
  register_builtin_plugins();
  const std::string notify =
      "NOTIFY * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nLOCATION: http://192.168.1.5:80/desc.xml\r\n"
      "NT: upnp:rootdevice\r\nUSN: uuid:abcd-1234::upnp:rootdevice\r\nNTS: ssdp:alive\r\n\r\n";
  const Bytes in = udp4(text(notify), 40000, 1900);
  Run r("http.location : redact()\nhttp.other_headers : redact() when proto in { http }\n");
  REQUIRE(r.inst);
  const Bytes out = r.run(in);
  const std::string s(out.begin() + 14 + 20 + 8, out.end());
  CHECK(s.size() == notify.size());
  CHECK(s.find("desc.xml") == std::string::npos);
  CHECK(s.find("uuid:abcd") == std::string::npos);
  CHECK(s.find("NOTIFY * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nLOCATION: xxxx") == 0);
  // Another port: not SSDP, nothing of HTTP's applies to a datagram. A
  // consumer of its own: this one would find the values it redacted above
  // in the datagram's kept payload (echoes).
  Run r2("http.location : redact()\nhttp.other_headers : redact() when proto in { http }\n");
  REQUIRE(r2.inst);
  const Bytes other = udp4(text(notify), 40000, 1901);
  const Bytes out2 = r2.run(other);
  CHECK(out2 == other);
}

TEST_CASE("BitTorrent Local Service Discovery (HTTP-like over UDP 6771) carries HTTP's fields", "[fields][http]") {
  register_builtin_plugins();
  const std::string search =
      "BT-SEARCH * HTTP/1.1\r\nHost: 239.192.152.143:6771\r\nPort: 6881\r\n"
      "Infohash: 0123456789abcdef0123456789abcdef01234567\r\ncookie: lsd-cookie-5f3a9c\r\n\r\n\r\n";
  Run r("http.cookie : redact()\nhttp.other_headers : redact()\n");
  REQUIRE(r.inst);
  const Bytes out = r.run(udp4(text(search), 6771, 6771));
  const std::string s(out.begin() + 14 + 20 + 8, out.end());
  CHECK(s.size() == search.size());
  CHECK(s.find("lsd-cookie") == std::string::npos);
  CHECK(s.find("0123456789abcdef") == std::string::npos);
  CHECK(s.find("BT-SEARCH * HTTP/1.1\r\n") == 0);
}

TEST_CASE("payload ~ /re/ in a condition reads the original payload", "[fields][conditions]") {
  register_builtin_plugins();
  Run r("payload : cut() when payload ~ /Cookie: session/\n");
  REQUIRE(r.inst);
  CHECK(r.run(http_request().frame).size() == 14 + 20 + 20u);
  CHECK(r.run(http_response().frame, false).size() > 14 + 20 + 20u);
}

TEST_CASE("the registry is complete: every field located, applied by every action, evaluated", "[fields][completeness]") {
  register_builtin_plugins();
  const auto problems = check_completeness(Registry::instance());
  for (const auto& p : problems) INFO(p);
  CHECK(problems.empty());
}

TEST_CASE("a deliberately incomplete field and action are refused, naming what is missing", "[fields][completeness]") {
  register_builtin_plugins();
  Registry r = Registry::instance();  // a copy: the process's registry stays as registered
  FieldDesc f{"test.token", ValueType::Text, "test", FieldRole::Identifier, "", "a field no plugin locates", {}};
  f.cond_ops = kCondAll;
  r.add_field(f);
  r.add_action({"scramble", "an action with no runtime", {ValueType::Text, ValueType::Addr}, {}});
  const auto problems = check_completeness(r);
  auto has = [&](const std::string& s) {
    for (const auto& p : problems)
      if (p.find(s) != std::string::npos) return true;
    return false;
  };
  CHECK(has("test.token: no plugin locates it"));
  CHECK(has("test.token: conditions may test it but the runtime has no evaluator"));
  CHECK(has("http.cookie: scramble() is accepted on text fields but has no applier for text"));
  CHECK(has("ip.client: scramble() is accepted on addr fields but has no applier for addr"));
}

namespace {
// The runtime's table with one applier removed: redact() on text.
uint32_t without_redact_text(const ActionDesc& a) {
  const uint32_t t = rt_action_types(a);
  return a.kind == ActionKind::Redact ? t & ~(1u << unsigned(ValueType::Text)) : t;
}
}  // namespace

TEST_CASE("mutation: an applier removed from the runtime is caught by the check, not left as a leak",
          "[fields][completeness]") {
  register_builtin_plugins();
  const auto problems = check_completeness(Registry::instance(), without_redact_text);
  bool cookie = false;
  for (const auto& p : problems) cookie = cookie || p == "http.cookie: redact() is accepted on text fields but has no applier for text";
  CHECK(cookie);
  // And were it to run anyway, the action's missing method drops the
  // packet instead of forwarding the field: the base class fails closed.
  struct Bare final : RtAction {};
  Bare b;
  ApplyCtx ctx;
  uint8_t x[4] = {1, 2, 3, 4};
  CHECK(b.bytes(x, 4, ctx) == ActResult::Drop);
  CHECK(b.addr(x, ctx) == ActResult::Drop);
  CHECK(b.mac(x, ctx) == ActResult::Drop);
  CHECK(rt_types<Bare>() == 0);
}

namespace {

// A query with an EDNS Client Subnet option: family 1 (IPv4), the source
// prefix and the ceil(prefix/8) subnet bytes RFC 7871 asks for.
Bytes ecs_query(uint8_t source_bits, const Bytes& subnet) {
  using l7test::dns_header, l7test::dns_name, l7test::dns_rr_fixed;
  auto put16 = [](Bytes& x, uint16_t v) { l7test::put16(x, v); };
  Bytes b = dns_header(0x4242, 0x0100, 1, 0, 0, 1);
  dns_name(b, "q.example.com");
  put16(b, 1), put16(b, 1);
  b.push_back(0);  // OPT
  dns_rr_fixed(b, 41, 4096, 0, uint16_t(4 + 4 + subnet.size()));
  put16(b, 8), put16(b, uint16_t(4 + subnet.size())), put16(b, 1);
  b.push_back(source_bits), b.push_back(0);
  b.insert(b.end(), subnet.begin(), subnet.end());
  return b;
}

const char* kEcsKey = "1522178d33a4cf80130a5b1649907d10d8988f837979652762574c2d2a842202";

std::string ecs_key_file() {
  static const std::string path = amon_test::scratch_key("ecs.hex", kEcsKey);
  return path;
}

}  // namespace

TEST_CASE("dns.ecs: every action the checker accepts does what it says on the subnet", "[fields][ecs]") {
  register_builtin_plugins();
  const std::string key = "key k = file(\"" + ecs_key_file() + "\")\n";
  // 198.51.100.0/24 and 198.51.100.0/20 (the /20 sent as 198.51.96, its
  // bits past the prefix zero).
  const Bytes s24{198, 51, 100}, s20{198, 51, 96};
  const Bytes q24 = udp4(ecs_query(24, s24), 40000, 53), q20 = udp4(ecs_query(20, s20), 40000, 53);
  auto ecs = [](const Bytes& out) { return Bytes(out.end() - 3, out.end()); };
  auto run = [&](const std::string& action, const Bytes& q) {
    Run r(key + "dns.ecs : " + action + "\n");
    INFO(r.errors);
    REQUIRE(r.inst);
    const Bytes out = r.run(q);
    REQUIRE(out.size() == q.size());  // the option keeps its lengths
    // Only the subnet changes, and the UDP checksum (at 14 + 20 + 6) with it.
    CHECK(Bytes(out.begin(), out.begin() + 40) == Bytes(q.begin(), q.begin() + 40));
    CHECK(Bytes(out.begin() + 42, out.end() - 3) == Bytes(q.begin() + 42, q.end() - 3));
    const uint16_t sum = uint16_t(out[40] << 8 | out[41]);
    CHECK(sum == ref_l4_checksum(&out[14 + 12], &out[14 + 16], false, 17, &out[34], out.size() - 34, 6));
    return ecs(out);
  };
  CHECK(run("keep()", q24) == s24);
  CHECK(run("zero()", q24) == Bytes{0, 0, 0});
  // prefix(n) keeps n bits of the subnet, no more, no less.
  CHECK(run("prefix(16)", q24) == Bytes{198, 51, 0});
  CHECK(run("prefix(20)", q24) == Bytes{198, 51, 96});
  CHECK(run("prefix(32)", q24) == s24);
  // cryptopan(): the subnet's network as Crypto-PAn maps the whole address
  // (prefix-preserving, so its leading bytes depend on the subnet only; the
  // class-preserving mapping cryptopan() applies), cut back to the source prefix.
  std::array<uint8_t, 32> k{};
  for (size_t i = 0; i < 32; ++i) k[i] = uint8_t(std::stoi(std::string(kEcsKey + 2 * i, 2), nullptr, 16));
  CryptoPAn cp(k);
  const uint32_t m24 = cp.anon_v4_classes(0xC6336400), m20 = cp.anon_v4_classes(0xC6336000);
  CHECK(run("cryptopan(key=k)", q24) == Bytes{uint8_t(m24 >> 24), uint8_t(m24 >> 16), uint8_t(m24 >> 8)});
  CHECK(run("cryptopan(key=k)", q20) == Bytes{uint8_t(m20 >> 24), uint8_t(m20 >> 16), uint8_t(m20 >> 8 & 0xf0)});
  CHECK(uint8_t(m20 >> 24) == uint8_t(m24 >> 24));  // one /16, one mapped /16
  // hash(): a keyed value, the same for the same subnet, another for another.
  const Bytes h = run("hash(key=k)", q24);
  CHECK(h != s24);
  CHECK(run("hash(key=k)", q24) == h);
  // drop(): the packet is not delivered.
  {
    Run r("dns.ecs : drop()\n");
    REQUIRE(r.inst);
    r.run(q24);
    CHECK(r.c.policy_drop == 1);
  }
  // Every action the checker accepts on dns.ecs is one of the above (a new
  // one must come with its case here).
  const FieldDesc* f = Registry::instance().field("dns.ecs");
  for (const ActionDesc& a : Registry::instance().actions()) {
    if (std::find(a.applies_to.begin(), a.applies_to.end(), f->type) == a.applies_to.end()) continue;
    INFO(a.name);
    CHECK((a.kind == ActionKind::Keep || a.kind == ActionKind::Zero || a.kind == ActionKind::Prefix ||
           a.kind == ActionKind::CryptoPan || a.kind == ActionKind::Hash || a.kind == ActionKind::Drop ||
           a.kind == ActionKind::Zanon));
  }
  // zanon counts users per value class; dns.ecs has none: refused.
  Run z("dns.ecs : zanon(z=2, dt=1h)\n");
  CHECK(!z.inst);
  CHECK(z.errors.find("test.amon:1:") != std::string::npos);
}
