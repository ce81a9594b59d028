// Lexer, parser and checker edge cases: exact error locations, limits on
// hostile input, the structure handed to the engine, and the CLI contract.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "policy.h"

namespace fs = std::filesystem;
using namespace amon::dsl;

namespace {

const char* kKeyHex = "1522178d33a4cf80130a5b1649907d10d8988f837979652762574c2d2a842202";

// A scratch directory with a 0600 key, removed afterwards.
struct Scratch {
  fs::path dir;
  fs::path old_cwd = fs::current_path();
  Scratch() {
    char tmpl[] = "/tmp/amon-dsl-test-XXXXXX";
    dir = mkdtemp(tmpl);
    fs::create_directories(dir / "keys");
    write("keys/k.key", std::string(kKeyHex) + "\n");
    chmod((dir / "keys/k.key").c_str(), 0600);
  }
  ~Scratch() {
    fs::current_path(old_cwd);
    fs::remove_all(dir);
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  }
};

std::shared_ptr<const Policy> compile(const std::string& src, Diagnostics& d, CompileOptions o = {}) {
  return compile_string(src, "t.amon", d, o);
}

const Diagnostic& first_error(const Diagnostics& d) {
  for (const auto& x : d.all())
    if (x.severity == Diagnostic::Severity::Error) return x;
  FAIL("no error in:\n" << d.render_text());
  return d.all().front();
}

const std::string kBase = "eth.src, eth.dst : timestamp()\nip.client : zero()\npayload : cut()\n";

}  // namespace

TEST_CASE("the brief's line parses verbatim", "[parser]") {
  Diagnostics d;
  auto p = compile("dns.qname: zanon(z=10, dt=1h, fallback=sld)\n" + kBase, d);
  INFO(d.render_text());
  REQUIRE(p);
  const Rule& r = p->rules.at(0);
  REQUIRE(r.fields.at(0)->name == "dns.qname");
  REQUIRE(r.action.desc->name == "zanon");
  CHECK(r.action.int_or("z", 0) == 10);
  CHECK(r.action.int_or("dt", 0) == 3'600'000'000'000);
  REQUIRE(r.action.arg("fallback"));
  CHECK(r.action.arg("fallback")->kind == amon::ParamKind::Ident);
  CHECK(r.action.arg("fallback")->s == "sld");
  CHECK(r.text == "dns.qname: zanon(z=10, dt=1h, fallback=sld)");
  CHECK(r.loc.line == 1);
}

TEST_CASE("durations, positional arguments and nested actions", "[parser]") {
  Diagnostics d;
  auto p = compile("ip.server : zanon(10, 90s, prefix(24, v6=40))\n"
                   "dns.qname : zanon(z=2, dt=2d)\n" + kBase, d);
  INFO(d.render_text());
  REQUIRE(p);
  const amon::ActionCall& a = p->rules[0].action;
  CHECK(a.int_or("z", 0) == 10);
  CHECK(a.int_or("dt", 0) == 90'000'000'000);
  const amon::ArgValue* fb = a.arg("fallback");
  REQUIRE(fb);
  REQUIRE(fb->kind == amon::ParamKind::Action);
  CHECK(fb->action->desc->name == "prefix");
  CHECK(fb->action->int_or("bits", 0) == 24);
  CHECK(fb->action->int_or("v6", 0) == 40);
  CHECK(p->rules[1].action.int_or("dt", 0) == 2 * 86'400'000'000'000);
  CHECK(to_string(a) == "zanon(z=10, dt=90s, fallback=prefix(bits=24, v6=40))");
}

TEST_CASE("syntax error locations are exact", "[parser][loc]") {
  Diagnostics d;
  compile("ip.client : zero()\nip.server : prefix(24 16)\n", d);
  const Diagnostic& e = first_error(d);
  CHECK(e.loc.file == "t.amon");
  CHECK(e.loc.line == 2);
  CHECK(e.loc.col == 23);
  CHECK(e.loc.end_col == 25);
  CHECK(e.message == "syntax error: unexpected integer '16'");
}

TEST_CASE("unknown names point at the name and suggest", "[checker][loc]") {
  Diagnostics d;
  auto p = compile("eth.src, eth.dst : timestamp()\n  ip.clinet : zero()\n", d);
  CHECK_FALSE(p);
  const Diagnostic& e = first_error(d);
  CHECK(e.loc.line == 2);
  CHECK(e.loc.col == 3);
  CHECK(e.loc.end_col == 12);
  CHECK(e.message == "unknown field 'ip.clinet'");
  CHECK(e.hint == "did you mean 'ip.client'?");
}

TEST_CASE("a missing ')' is reported on its own line and the next rule is still checked", "[parser][recovery]") {
  Diagnostics d;
  compile("ip.client : prefix(24\nip.server : cryptopn()\npayload : cut() when\n", d);
  REQUIRE(d.errors() == 3);
  CHECK(d.all()[0].loc.line == 1);
  CHECK(d.all()[0].message == "syntax error: unexpected end of line");
  CHECK(d.all()[1].loc.line == 2);
  CHECK(d.all()[1].message == "unknown action 'cryptopn'");
  // `when` continues the statement, so the file ends inside it.
  CHECK(d.all()[2].loc.line == 4);
  CHECK(d.all()[2].message == "syntax error: unexpected end of file");
}

TEST_CASE("every error of a file is reported in one run", "[parser][recovery]") {
  Diagnostics d;
  compile("ip.client : zero(\nip.server : prefix(99)\nbogus : keep()\neth.src : keep() ) \nfoo = 1\n", d);
  CHECK(d.errors() == 5);
}

TEST_CASE("statement words are not reserved as parameter names", "[lexer]") {
  Scratch s;
  fs::current_path(s.dir);
  Diagnostics d;
  auto p = compile("key key = file(\"keys/k.key\")\nip.client : cryptopan(key=key)\n" + kBase.substr(kBase.find("payload")) +
                       "eth.src, eth.dst : zero()\n",
                   d);
  INFO(d.render_text());
  REQUIRE(p);
  CHECK(p->keys.at(0)->name == "key");
  CHECK(p->keys.at(0)->bytes.size() == 32);
  CHECK(p->keys.at(0)->bytes[0] == 0x15);
}

TEST_CASE("Cidr::contains: every prefix length of both families, against a bit-by-bit reference", "[lexer]") {
  // The reference compares the first `len` bits one at a time.
  auto ref = [](const Cidr& c, uint8_t fam, const uint8_t* a) {
    if (fam != c.family) return false;
    for (unsigned i = 0; i < c.len; ++i)
      if ((c.addr[i / 8] >> (7 - i % 8) & 1) != (a[i / 8] >> (7 - i % 8) & 1)) return false;
    return true;
  };
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto rnd = [&] { return uint8_t((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56); };
  unsigned inside = 0, checked = 0;
  for (uint8_t fam : {4, 6}) {
    const unsigned n = fam == 4 ? 4 : 16;
    for (unsigned len = 0; len <= 8 * n; ++len)
      for (int round = 0; round < 40; ++round) {
        Cidr c;
        c.family = fam;
        c.len = uint8_t(len);
        for (unsigned i = 0; i < n; ++i) c.addr[i] = rnd();
        uint8_t a[16];
        // Half the probes share the prefix and differ only after it (or in
        // its last bit): the boundary is where a mask goes wrong.
        for (unsigned i = 0; i < n; ++i) a[i] = round % 2 ? c.addr[i] : rnd();
        if (round % 4 == 1 && len > 0) a[(len - 1) / 8] ^= uint8_t(0x80 >> ((len - 1) % 8));
        if (round % 4 == 3 && len < 8 * n) a[len / 8] ^= uint8_t(0x80 >> (len % 8));
        INFO("family " << int(fam) << ", /" << len << ", round " << round);
        CHECK(c.contains(fam, a) == ref(c, fam, a));
        CHECK_FALSE(c.contains(fam == 4 ? 6 : 4, a));
        inside += ref(c, fam, a), ++checked;
      }
  }
  CHECK(inside > checked / 4);
}

TEST_CASE("addresses: IPv4, IPv6, CIDRs, MACs", "[lexer]") {
  Diagnostics d;
  auto p = compile("clients = { 10.0.0.0/8, 2001:db8::/32, ::1, ::ffff:192.0.2.1 }\n"
                   "ip.server : keep() when ip.server in { 2001:db8:0:1::/64 } or eth.src == 02:AA:bb:00:00:01\n"
                   "ip.server : prefix(24)\n" + kBase, d);
  INFO(d.render_text());
  REQUIRE(p);
  REQUIRE(p->clients.size() == 4);
  CHECK(p->clients[0].family == 4);
  CHECK(p->clients[1].family == 6);
  CHECK(p->clients[1].len == 32);
  CHECK(p->clients[2].len == 128);
  const uint8_t in[4] = {10, 200, 0, 1}, out[4] = {11, 0, 0, 1};
  CHECK(p->clients[0].contains(4, in));
  CHECK_FALSE(p->clients[0].contains(4, out));
  CHECK_FALSE(p->clients[1].contains(4, in));
  const Cond& c = *p->rules[0].when;
  REQUIRE(c.kind == Cond::Kind::Or);
  REQUIRE(c.children.size() == 2);
  CHECK(c.children[0]->cidrs.at(0).to_string() == "2001:db8:0:1::/64");
  CHECK(c.children[1]->macs.at(0) == std::array<uint8_t, 6>{0x02, 0xaa, 0xbb, 0, 0, 1});
}

TEST_CASE("conditions: precedence, flattening, negated protocol tests", "[parser]") {
  Diagnostics d;
  auto p = compile("payload : cut() when proto == dns or proto == tls or not proto in { http } and proto != udp\n" + kBase.substr(0, kBase.find("payload")), d);
  INFO(d.render_text());
  REQUIRE(p);
  const Cond& c = *p->rules[0].when;
  REQUIRE(c.kind == Cond::Kind::Or);
  REQUIRE(c.children.size() == 3);  // a or b or (c and d): one flat Or
  CHECK(c.children[2]->kind == Cond::Kind::And);
  CHECK(c.children[2]->children[0]->kind == Cond::Kind::Not);
  CHECK(c.children[2]->children[1]->kind == Cond::Kind::Not);  // != is not(in)
  CHECK(c.children[2]->children[1]->children[0]->protocols == std::vector<std::string>{"udp"});
  CHECK(to_string(c) == "proto in { dns } or proto in { tls } or (not proto in { http } and not proto in { udp })");
}

TEST_CASE("regexes are compiled with Hyperscan and keep their flags", "[checker]") {
  Diagnostics d;
  auto p = compile("http.host : redact() when http.host ~ /^a\\/b\\.example$/i\nhttp.host : keep()\n" + kBase, d);
  INFO(d.render_text());
  REQUIRE(p);
  const Cond& c = *p->rules[0].when;
  REQUIRE(c.regexes.size() == 1);
  CHECK(c.regexes[0].source == "^a/b\\.example$");
  CHECK(c.regexes[0].flags == "i");
  CHECK(c.regexes[0].hs_flags != 0);

  Diagnostics bad;
  CHECK_FALSE(compile("http.host : redact() when http.host ~ /a{2,1}/\n", bad));
  const Diagnostic& e = first_error(bad);
  CHECK(e.loc.col == 39);
  CHECK(e.message.rfind("Hyperscan rejects this regex: ", 0) == 0);
}

TEST_CASE("a BPF select is checked by libpcap", "[checker]") {
  Diagnostics ok;
  auto p = compile("select \"vlan and tcp port 443\"\n" + kBase, ok);
  INFO(ok.render_text());
  REQUIRE(p);
  CHECK(p->select_bpf == "vlan and tcp port 443");
  CHECK(p->select_loc.line == 1);
  Diagnostics bad;
  CHECK_FALSE(compile("select \"tcp prot 80\"\n" + kBase, bad));
  CHECK(first_error(bad).message.rfind("invalid BPF expression: ", 0) == 0);
  CHECK(first_error(bad).loc.col == 8);
}

TEST_CASE("rules on one field: conflicts are errors, shadowed rules warnings", "[checker]") {
  Diagnostics d;
  CHECK_FALSE(compile("ip.server : prefix(24)\n" + kBase + "ip.server : zero()\n", d));
  REQUIRE(d.all().size() == 2);
  CHECK(d.all()[0].loc.line == 5);
  CHECK(d.all()[1].severity == Diagnostic::Severity::Note);
  CHECK(d.all()[1].loc.line == 1);

  Diagnostics w;
  // `clients` set, so the privacy checks of roles have nothing to say.
  auto p = compile("clients = { 10.0.0.0/8 }\n" + kBase + "ip.server : prefix(24)\nip.server : keep() when proto == dns\n", w);
  REQUIRE(p);  // warnings do not stop compilation
  CHECK(w.warnings() == 1);
  CHECK(w.all()[0].message == "rule for 'ip.server' can never match");
}

TEST_CASE("protected addresses with the payload of address carriers delivered: a warning", "[checker]") {
  const std::string head = "clients = { 10.0.0.0/8 }\neth.src, eth.dst : timestamp()\nip.client : zero()\n";
  auto carrier_warnings = [](const Diagnostics& d) {
    std::vector<unsigned> lines;
    for (const auto& x : d.all())
      if (x.severity == Diagnostic::Severity::Warning && x.message.find("addr_carrier") != std::string::npos)
        lines.push_back(x.loc.line);
    return lines;
  };
  struct Case {
    std::string payload_rules;
    std::vector<unsigned> lines;  // where the warning points (none: no warning)
  };
  const Case cases[] = {
      {"payload : keep()\n", {4}},                                                // kept for every packet
      {"", {2}},  // no payload rule: kept (the warning points at the first protecting rule)
      {"payload : cut() when proto in { addr_carrier }\npayload : keep()\n", {}},  // handled
      {"payload : cut()\n", {}},
      {"payload : cut() when not proto in { dns, tls }\npayload : keep()\n", {}},
      {"payload : zero() when proto == udp\npayload : keep()\n", {5}},  // TCP carriers pass
      {"payload : keep() when proto in { dns }\npayload : cut()\n", {}},
      {"payload : keep() when ip.server in { 192.0.2.0/24 }\npayload : cut()\n", {4}},  // may keep one
  };
  for (const auto& c : cases) {
    Diagnostics d;
    INFO(c.payload_rules);
    REQUIRE(compile(head + c.payload_rules, d));
    CHECK(carrier_warnings(d) == c.lines);
  }
  // A select that admits none of them (libpcap tries the BPF on carrier
  // packets), and one that admits some.
  for (auto [sel, want] : {std::pair<std::string, size_t>{"select \"udp port 53 or tcp port 53\"\n", 0},
                           {"select \"tcp\"\n", 1},
                           {"select proto in { dns }\n", 0},
                           {"select proto == tcp\n", 1}}) {
    Diagnostics d;
    INFO(sel);
    REQUIRE(compile(sel + head + "payload : keep()\n", d));
    CHECK(carrier_warnings(d).size() == want);
  }
  // No address protected: nothing to warn about.
  Diagnostics d;
  REQUIRE(compile("eth.src, eth.dst : timestamp()\npayload : keep()\n", d));
  CHECK(carrier_warnings(d).empty());
}

TEST_CASE("hostile input is rejected with a clear message", "[limits]") {
  SECTION("1 MB policy") {
    Diagnostics d;
    std::string big(1 << 20, '#');
    CHECK_FALSE(compile(big, d));
    REQUIRE(d.errors() == 1);
    CHECK(d.all()[0].message == "policy is 1048576 bytes; the limit is 262144 bytes (256 KiB)");
  }
  SECTION("64 KB line") {
    Diagnostics d;
    CHECK_FALSE(compile("payload : cut()\n# " + std::string(65536, 'x') + "\n", d));
    REQUIRE(d.errors() == 1);
    CHECK(d.all()[0].loc.line == 2);
    CHECK(d.all()[0].message == "line is 65538 bytes long; the limit is 4096");
  }
  SECTION("deep brackets") {
    Diagnostics d;
    CHECK_FALSE(compile("ip.client : keep() when " + std::string(100, '(') + "proto == dns" + std::string(100, ')') + "\n", d));
    CHECK(d.errors() == 1);
    CHECK(d.all()[0].message == "nesting deeper than 32 levels");
  }
  SECTION("long not chains") {
    Diagnostics d;
    std::string nots;
    for (int i = 0; i < 20000; ++i) nots += "not ";
    CHECK_FALSE(compile("ip.client : keep() when " + nots + "proto == dns\n", d));
    CHECK(d.errors() == 1);
  }
  SECTION("long flat conditions are fine") {
    Diagnostics d;
    std::string c = "proto == dns";
    for (int i = 0; i < 2000; ++i) c += " or\nproto == tls";
    auto p = compile("payload : cut() when " + c + "\n" + kBase.substr(0, kBase.find("payload")), d);
    INFO(d.render_text());
    REQUIRE(p);
    CHECK(p->rules[0].when->children.size() == 2001);
  }
  SECTION("NUL byte") {
    Diagnostics d;
    CHECK_FALSE(compile(std::string("payload : cut()\npay\0load : cut()\n", 33), d));
    REQUIRE(d.errors() == 1);
    CHECK(d.all()[0].message == "NUL byte in policy");
    CHECK(d.all()[0].loc.line == 2);
    CHECK(d.all()[0].loc.col == 4);
  }
  SECTION("invalid UTF-8, including overlong forms and surrogates") {
    for (std::string bad : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82"}) {
      Diagnostics d;
      CHECK_FALSE(compile("# ok\n# " + bad + "\n", d));
      REQUIRE(d.errors() == 1);
      CHECK(d.all()[0].message == "invalid UTF-8 in policy");
      CHECK(d.all()[0].loc.line == 2);
      CHECK(d.all()[0].loc.col == 3);
    }
    Diagnostics good;
    CHECK(compile("# caf\xc3\xa9 \xf0\x9f\x94\x92\n" + kBase, good));
  }
  SECTION("huge integers") {
    Diagnostics d;
    CHECK_FALSE(compile("ip.server : prefix(99999999999999999999999)\n", d));
    CHECK(first_error(d).message == "integer '99999999999999999999999' is too large");
    Diagnostics d2;
    CHECK_FALSE(compile("dns.qname : zanon(z=10, dt=9999999999999999d)\n", d2));
    CHECK(first_error(d2).message == "duration '9999999999999999d' is too large");
  }
}

TEST_CASE("includes expand in place and cycles show the chain", "[include]") {
  Scratch s;
  s.write("a.amon", "ip.client : zero()\ninclude \"sub/b.amon\"\npayload : cut()\n");
  fs::create_directories(s.dir / "sub");
  s.write("sub/b.amon", "eth.src, eth.dst : zero()\n");
  s.write("sub/c.amon", "include \"d.amon\"\n");
  s.write("sub/d.amon", "include \"c.amon\"\n");
  fs::current_path(s.dir);
  Diagnostics d;
  auto p = compile_file("a.amon", d);
  INFO(d.render_text());
  REQUIRE(p);
  REQUIRE(p->rules.size() == 3);
  CHECK(p->rules[1].loc.file == "sub/b.amon");
  CHECK(p->rules[1].index == 1);
  CHECK(p->rules[2].fields[0]->name == "payload");

  Diagnostics c;
  CHECK_FALSE(compile_string("include \"sub/c.amon\"\n", "main.amon", c));
  CHECK(first_error(c).message == "include cycle: sub/c.amon -> sub/d.amon -> sub/c.amon");
  CHECK(first_error(c).loc.file == "sub/d.amon");
}

TEST_CASE("key files: permissions are checked unless the option relaxes them", "[keys]") {
  Scratch s;
  fs::current_path(s.dir);
  chmod("keys/k.key", 0640);
  const std::string src = "key k = file(\"keys/k.key\")\nip.client : cryptopan(key=k)\n" + kBase.substr(0, kBase.find("ip.client")) + "payload : cut()\n";
  Diagnostics d;
  CHECK_FALSE(compile(src, d));
  CHECK(first_error(d).message == "key file 'keys/k.key' is readable or writable by group or others (mode 0640)");
  CHECK(first_error(d).hint == "chmod 600 keys/k.key");
  CompileOptions relaxed;
  relaxed.check_key_permissions = false;
  Diagnostics r;
  auto p = compile(src, r, relaxed);
  INFO(r.render_text());
  REQUIRE(p);
  CHECK(p->keys[0]->origin == "file keys/k.key");
}

TEST_CASE("rendering: caret under the span, JSON fields", "[diagnostics]") {
  Diagnostics d;
  compile("ip.client :\tcryptopn(key=k)\n", d);
  CHECK(d.render_text() ==
        "t.amon:1:13: error: unknown action 'cryptopn'\n"
        "ip.client :\tcryptopn(key=k)\n"
        "           \t^~~~~~~~\n"
        "hint: did you mean 'cryptopan'?\n");
  CHECK(d.render_json() ==
        "[\n  {\"severity\": \"error\", \"file\": \"t.amon\", \"line\": 1, \"col\": 13, \"end_col\": 21, "
        "\"message\": \"unknown action 'cryptopn'\", \"hint\": \"did you mean 'cryptopan'?\"}\n]\n");
}

TEST_CASE("amon lint exit status: 0 clean, 1 warnings with --strict, 2 errors", "[cli]") {
  Scratch s;
  std::string clean = s.write("clean.amon", kBase);
  std::string warn = s.write("warn.amon", kBase + "ip.server : prefix(24)\nip.server : keep() when proto == dns\n");
  std::string bad = s.write("bad.amon", "ip.client : nope()\n");
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return lint_main(static_cast<int>(argv.size()), argv.data());
  };
  CHECK(run({clean}) == 0);
  CHECK(run({"--strict", clean}) == 0);
  CHECK(run({warn}) == 0);
  CHECK(run({"--strict", warn}) == 1);
  CHECK(run({"--format", "json", "--strict", clean, warn}) == 1);
  CHECK(run({clean, bad}) == 2);
  CHECK(run({"--format", "yaml", clean}) == 2);
  CHECK(run({}) == 2);
}

TEST_CASE("doc drift is detected and --update repairs it", "[doc]") {
  Scratch s;
  std::string md = s.write("lang.md",
                           "# x\n<!-- BEGIN GENERATED REGISTRY TABLES: do not edit, run `amon-dsl doc-sync --update` -->\n"
                           "stale\n<!-- END GENERATED REGISTRY TABLES -->\ntail\n");
  std::string msg;
  CHECK(doc_sync(md, false, msg) == 1);
  CHECK(doc_sync(md, true, msg) == 0);
  CHECK(doc_sync(md, false, msg) == 0);
  std::ifstream f(md);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(all.find("| `dns.qname` |") != std::string::npos);
  CHECK(all.substr(all.size() - 5) == "tail\n");
}
