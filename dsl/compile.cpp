// The checker: turns parsed statements into a Policy, resolving every name
// against the plugin registry. It keeps going after an error so one run
// reports everything wrong with a file.
#include <arpa/inet.h>
#include <hs/hs.h>
#include <pcap/pcap.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "ast.h"
#include "protocol.h"
#include "cryptopan.h"

namespace amon::dsl {

SourceLoc ParseCtx::where(const Loc& l) const {
  SourceLoc s{file, l.first_line, l.first_column, l.last_column};
  if (l.last_line != l.first_line || l.last_column <= l.first_column) {
    // A span that crosses lines is underlined to the end of its first line.
    size_t off = std::min<size_t>(static_cast<size_t>(std::max(0, l.first_off)), src.size());
    size_t e = src.find('\n', off);
    if (e == std::string_view::npos) e = src.size();
    s.end_col = l.first_column + static_cast<int>(e - off);
    if (s.end_col <= s.col) s.end_col = s.col + 1;
  }
  return s;
}

bool Cidr::contains(uint8_t fam, const uint8_t* a) const {
  if (fam != family) return false;
  int full = len / 8, rest = len % 8;
  if (std::memcmp(addr.data(), a, full) != 0) return false;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (addr[full] & mask) == (a[full] & mask);
}

std::string Cidr::to_string() const {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(family == 4 ? AF_INET : AF_INET6, addr.data(), buf, sizeof buf);
  return std::string(buf) + "/" + std::to_string(len);
}

namespace {

using Severity = Diagnostic::Severity;

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {};
  return path.substr(0, slash + 1);
}

std::string join_path(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return dir + p;
}

// Rejects inputs the scanner should never see: oversized files, NUL bytes,
// invalid UTF-8 and absurd lines. Reports the first problem of each kind.
bool check_source(std::string_view src, const std::string& file, const CompileOptions& opt, Diagnostics& d) {
  if (src.size() > opt.max_file_bytes) {
    d.error({file, 0, 0, 0},
            "policy is " + std::to_string(src.size()) + " bytes; the limit is " + std::to_string(opt.max_file_bytes) +
                " bytes (" + std::to_string(opt.max_file_bytes / 1024) + " KiB)",
            "split it with `include`, or look for a file that is not a policy");
    return false;
  }
  bool ok = true;
  bool nul = false, utf8 = false, longline = false;
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < src.size();) {
    unsigned char c = src[i];
    int col = static_cast<int>(i - line_start) + 1;
    if (c == '\n') {
      if (!longline && i - line_start > opt.max_line_bytes) {
        longline = true;
        ok = false;
        d.error({file, line, 1, 2},
                "line is " + std::to_string(i - line_start) + " bytes long; the limit is " +
                    std::to_string(opt.max_line_bytes),
                "");
      }
      ++line;
      line_start = ++i;
      continue;
    }
    if (c == 0) {
      if (!nul) d.error({file, line, col, col + 1}, "NUL byte in policy", "policies are UTF-8 text");
      nul = true;
      ok = false;
      ++i;
      continue;
    }
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool good = n != 0 && i + n <= src.size();
    uint32_t cp = n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; good && k < n; ++k) {
      unsigned char cc = src[i + k];
      if ((cc & 0xC0) != 0x80) good = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    if (good && ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
                 (cp >= 0xD800 && cp <= 0xDFFF)))
      good = false;
    if (!good) {
      if (!utf8) d.error({file, line, col, col + 1}, "invalid UTF-8 in policy", "policies are UTF-8 text");
      utf8 = true;
      ok = false;
      ++i;
      continue;
    }
    i += n;
  }
  if (!longline && src.size() - line_start > opt.max_line_bytes) {
    ok = false;
    d.error({file, line, 1, 2},
            "line is " + std::to_string(src.size() - line_start) + " bytes long; the limit is " +
                std::to_string(opt.max_line_bytes),
            "");
  }
  return ok;
}

bool parse_ip(const std::string& text, Cidr& out, bool* host_bits, std::string& err) {
  std::string a = text;
  int len = -1;
  size_t slash = a.find('/');
  if (slash != std::string::npos) {
    std::string l = a.substr(slash + 1);
    a = a.substr(0, slash);
    if (l.empty() || l.size() > 3) {
      err = "invalid prefix length";
      return false;
    }
    len = std::atoi(l.c_str());
  }
  out = {};
  if (inet_pton(AF_INET, a.c_str(), out.addr.data()) == 1) {
    out.family = 4;
    if (len > 32) {
      err = "prefix length " + std::to_string(len) + " is longer than an IPv4 address (32 bits)";
      return false;
    }
    out.len = static_cast<uint8_t>(len < 0 ? 32 : len);
  } else if (inet_pton(AF_INET6, a.c_str(), out.addr.data()) == 1) {
    out.family = 6;
    if (len > 128) {
      err = "prefix length " + std::to_string(len) + " is longer than an IPv6 address (128 bits)";
      return false;
    }
    out.len = static_cast<uint8_t>(len < 0 ? 128 : len);
  } else {
    err = "invalid IP address '" + a + "'";
    return false;
  }
  bool hb = false;
  int bytes = out.family == 4 ? 4 : 16;
  for (int bit = out.len; bit < bytes * 8; ++bit)
    if (out.addr[bit / 8] & (0x80 >> (bit % 8))) hb = true;
  if (hb) {
    for (int bit = out.len; bit < bytes * 8; ++bit) out.addr[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  }
  if (host_bits) *host_bits = hb;
  return true;
}

bool parse_mac(const std::string& t, std::array<uint8_t, 6>& m) {
  unsigned v[6];
  char tail;
  if (std::sscanf(t.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
    return false;
  if (t.size() != 17) return false;
  for (int i = 0; i < 6; ++i) m[i] = static_cast<uint8_t>(v[i]);
  return true;
}

const char* value_desc(Value::Kind k) {
  switch (k) {
    case Value::Int: return "an integer";
    case Value::Duration: return "a duration";
    case Value::String: return "a string";
    case Value::Addr: return "an address";
    case Value::Ident: return "an identifier";
    case Value::IdentPrefix: return "a name with a prefix length";
    case Value::Regex: return "a regex";
    case Value::Set: return "a set";
    case Value::CallV: return "an action call";
  }
  return "a value";
}

std::string kind_desc(ParamKind k, const ParamDesc& p) {
  switch (k) {
    case ParamKind::Int: return "an integer";
    case ParamKind::Duration: return "a duration (500ms 30s 15m 1h 2d)";
    case ParamKind::String: return "a string";
    case ParamKind::Key: return "a key name";
    case ParamKind::Action: return "an action call";
    case ParamKind::Ident: return "one of " + [&] {
      std::string s;
      for (const auto& c : p.choices) s += (s.empty() ? "" : ", ") + c;
      return s.empty() ? std::string("an identifier") : s;
    }();
    case ParamKind::Regex: return "a regex /.../";
    case ParamKind::ActionOrIdent: {
      std::string s;
      for (const auto& c : p.choices) s += c + ", ";
      return s + "or an action call";
    }
  }
  return "a value";
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string signature(const ActionDesc& a) {
  std::string s = a.name + "(";
  bool first = true;
  for (const auto& p : a.params) {
    if (!first) s += ", ";
    first = false;
    std::string k = p.kind == ParamKind::Int ? "N" : p.kind == ParamKind::Duration ? "DURATION" : p.kind == ParamKind::Key ? "KEY" : p.kind == ParamKind::String ? "\"...\"" : p.kind == ParamKind::Regex ? "/.../" : "...";
    s += p.required ? p.name + "=" + k : "[" + p.name + "=" + k + "]";
  }
  return s + ")";
}

std::string actions_for(ValueType t) {
  std::vector<std::string> v;
  for (const auto& a : Registry::instance().actions())
    if (std::find(a.applies_to.begin(), a.applies_to.end(), t) != a.applies_to.end()) v.push_back(a.name);
  return join(v);
}

std::string example_protection(const FieldDesc& f) {
  switch (f.type) {
    case ValueType::Addr: return f.name + " : cryptopan(key=K)";
    case ValueType::Mac: return f.name + " : timestamp()";
    case ValueType::Bytes: return f.name + (f.trailing ? " : cut()" : " : hash(key=K)");
    case ValueType::Name: return f.name + " : zanon(z=10, dt=1h, fallback=sld)";
    default: return f.name + " : redact()";
  }
}

// Fields below the application layer (their plugin says so); everything
// else is parsed out of the payload, so cutting the payload removes it.
bool below_payload(const FieldDesc& f) { return f.header; }

struct Unit {
  std::unique_ptr<ParseCtx> ctx;
  std::string dir;  // base directory for includes and key files
};

struct StmtRef {
  ParseCtx* ctx;
  const Stmt* stmt;
  std::string dir;
};

struct KeyDecl {
  std::shared_ptr<KeyMaterial> km;
  SourceLoc loc;
  bool ok = false;
};

class Compiler {
 public:
  Compiler(Diagnostics& d, const CompileOptions& o) : d_(d), opt_(o), reg_(Registry::instance()) {}

  std::shared_ptr<const Policy> run(std::string_view src, const std::string& name, const std::string& dir);

 private:
  void load(std::string src, const std::string& display, const std::string& dir, const std::string& canon,
            int depth);
  void do_include(ParseCtx& ctx, const Stmt& s, const std::string& dir, int depth);
  void do_key(const StmtRef& r);
  void do_setting(const StmtRef& r);
  void do_rule(const StmtRef& r);
  void do_select(const StmtRef& r);
  void analyze();

  std::optional<ActionCall> check_call(ParseCtx& ctx, const Call& c, const std::vector<const FieldDesc*>& fields,
                                       bool nested);
  bool convert_arg(ParseCtx& ctx, const Call& c, const ActionDesc& a, const ParamDesc& p, const Value& v,
                   const std::vector<const FieldDesc*>& fields, ArgValue& out);
  std::shared_ptr<Cond> compile_cond(ParseCtx& ctx, const CondNode& n);
  bool check_regex(ParseCtx& ctx, const Value& v, Cond::Regex& out);

  Diagnostics& d_;
  const CompileOptions& opt_;
  Registry& reg_;
  std::shared_ptr<Policy> pol_ = std::make_shared<Policy>();
  std::deque<Unit> units_;
  std::vector<StmtRef> stmts_;
  std::vector<std::pair<std::string, std::string>> include_stack_;  // canonical, display
  std::map<std::string, KeyDecl> keys_;
  std::map<std::string, SourceLoc> settings_seen_;
  std::optional<SourceLoc> select_seen_;
  // Per rule: where each field is named, for conflict diagnostics.
  std::vector<std::vector<SourceLoc>> rule_field_locs_;
  std::set<std::string> protocols_;
};

void Compiler::load(std::string src, const std::string& display, const std::string& dir, const std::string& canon,
                    int depth) {
  d_.add_source(display, src);
  if (!check_source(src, display, opt_, d_)) return;
  units_.push_back({std::make_unique<ParseCtx>(), dir});
  ParseCtx& ctx = *units_.back().ctx;
  ctx.file = display;
  // The text lives in Diagnostics for the caret lines; parse from that copy.
  ctx.src = *d_.source(display);
  ctx.diags = &d_;
  ctx.max_nesting = opt_.max_nesting;
  parse(ctx);
  include_stack_.push_back({canon, display});
  for (const Stmt& s : ctx.stmts) {
    if (s.kind == Stmt::Include) {
      do_include(ctx, s, dir, depth);
    } else {
      stmts_.push_back({&ctx, &s, dir});
    }
  }
  include_stack_.pop_back();
}

void Compiler::do_include(ParseCtx& ctx, const Stmt& s, const std::string& dir, int depth) {
  SourceLoc at = ctx.where(s.name.loc);
  std::string path = join_path(dir, s.name.text);
  if (depth + 1 > opt_.max_include_depth) {
    d_.error(at, "includes nested deeper than " + std::to_string(opt_.max_include_depth) + " files", "");
    return;
  }
  char real[PATH_MAX];
  if (s.name.text.empty() || !realpath(path.c_str(), real)) {
    d_.error(at, "cannot include " + quote(path) + ": " + std::strerror(errno),
             "include paths are relative to the including file's directory");
    return;
  }
  std::string canon = real;
  for (size_t i = 0; i < include_stack_.size(); ++i) {
    if (include_stack_[i].first == canon) {
      std::string chain;
      for (size_t j = i; j < include_stack_.size(); ++j) chain += include_stack_[j].second + " -> ";
      chain += path;
      d_.error(at, "include cycle: " + chain, "remove one of the includes; shared rules belong in a file that includes nothing back");
      return;
    }
  }
  struct stat st;
  if (stat(real, &st) != 0 || !S_ISREG(st.st_mode)) {
    d_.error(at, "cannot include " + quote(path) + ": not a regular file", "");
    return;
  }
  if (static_cast<size_t>(st.st_size) > opt_.max_file_bytes) {
    d_.error(at, "included file " + quote(path) + " is " + std::to_string(st.st_size) + " bytes; the limit is " +
                     std::to_string(opt_.max_file_bytes) + " bytes (" + std::to_string(opt_.max_file_bytes / 1024) + " KiB)",
             "");
    return;
  }
  // stat() sizes lie for /proc and friends: never read past the limit.
  std::ifstream f(real, std::ios::binary);
  std::string text(opt_.max_file_bytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (f.bad()) {
    d_.error(at, "cannot read " + quote(path), "");
    return;
  }
  text.resize(static_cast<size_t>(f.gcount()));
  if (text.size() > opt_.max_file_bytes) {
    d_.error(at, "included file " + quote(path) + " is larger than the limit of " +
                     std::to_string(opt_.max_file_bytes) + " bytes", "");
    return;
  }
  load(std::move(text), path, dir_of(path), canon, depth + 1);
}

std::shared_ptr<const Policy> Compiler::run(std::string_view src, const std::string& name, const std::string& dir) {
  size_t first_diag = d_.all().size();
  pol_->path = name;
  pol_->identifier = reg_.field("ip.client");
  for (const auto& p : reg_.proto_names()) protocols_.insert(p);
  char real[PATH_MAX];
  std::string canon = realpath(name.c_str(), real) ? std::string(real) : name;
  load(std::string(src), name, dir, canon, 0);

  // Keys and settings first, so rules may use keys declared further down or
  // in an included file.
  for (const auto& r : stmts_)
    if (r.stmt->kind == Stmt::Key) do_key(r);
  for (const auto& r : stmts_)
    if (r.stmt->kind == Stmt::Setting) do_setting(r);
  for (const auto& r : stmts_) {
    if (r.stmt->kind == Stmt::Rule) do_rule(r);
    if (r.stmt->kind == Stmt::SelectBpf || r.stmt->kind == Stmt::SelectCond) do_select(r);
  }
  for (const auto& [n, k] : keys_)
    if (k.ok) pol_->keys.push_back(k.km);
  std::sort(pol_->keys.begin(), pol_->keys.end(), [](const auto& a, const auto& b) { return a->name < b->name; });
  if (d_.errors() == 0) analyze();
  d_.sort_by_location(first_diag);
  if (d_.errors() != 0) return nullptr;
  return pol_;
}

void Compiler::do_key(const StmtRef& r) {
  ParseCtx& ctx = *r.ctx;
  const Stmt& s = *r.stmt;
  SourceLoc at = ctx.where(s.name.loc);
  if (auto it = keys_.find(s.name.text); it != keys_.end()) {
    d_.error(at, "key " + quote(s.name.text) + " declared twice", "give each key its own name");
    d_.note(it->second.loc, "first declared here");
    return;
  }
  KeyDecl& kd = keys_[s.name.text];
  kd.loc = at;
  kd.km = std::make_shared<KeyMaterial>();
  kd.km->name = s.name.text;
  const Call& c = *s.action;
  SourceLoc call_at = ctx.where(c.name_loc);
  if (c.name != "file" && c.name != "env") {
    std::string sug = closest(c.name, {"file", "env"});
    d_.error(call_at, "unknown key source " + quote(c.name),
             sug.empty() ? "write file(\"path\") or env(\"VAR\")" : "did you mean " + quote(sug) + "?");
    return;
  }
  if (c.args.size() != 1 || !c.args[0]->name.empty() || c.args[0]->value->kind != Value::String) {
    d_.error(ctx.where(c.loc), c.name + "() takes one string", c.name == "file" ? "key k = file(\"keys/k.key\")" : "key k = env(\"AMON_KEY\")");
    return;
  }
  const std::string& arg = c.args[0]->value->text;
  SourceLoc arg_at = ctx.where(c.args[0]->value->loc);
  KeyParseResult res;
  if (c.name == "file") {
    std::string path = join_path(r.dir, arg);
    kd.km->origin = "file " + arg;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      d_.error(arg_at, "key file " + quote(path) + ": " + std::strerror(errno),
               "create one: openssl rand -hex 32 > " + path + " && chmod 600 " + path);
      return;
    }
    if (!S_ISREG(st.st_mode)) {
      d_.error(arg_at, "key file " + quote(path) + " is not a regular file", "");
      return;
    }
    if (opt_.check_key_permissions && (st.st_mode & 077)) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      d_.error(arg_at, "key file " + quote(path) + " is readable or writable by group or others (mode " + mode + ")",
               "chmod 600 " + path);
      return;
    }
    res = read_key_file(path);
  } else {
    kd.km->origin = "env " + arg;
    const char* v = opt_.getenv ? opt_.getenv(arg.c_str()) : std::getenv(arg.c_str());
    if (!v) {
      d_.error(arg_at, "environment variable " + quote(arg) + " is not set",
               "export " + arg + "=$(cat keys/" + s.name.text + ".key) before starting amon");
      return;
    }
    res = parse_key_hex(v);
    if (!res.ok()) res.error = "environment variable " + quote(arg) + ": " + res.error;
  }
  if (!res.ok()) {
    d_.error(arg_at, res.error, "a key is 64 hex digits (32 bytes): openssl rand -hex 32");
    return;
  }
  kd.km->bytes.assign(res.key.begin(), res.key.end());
  kd.ok = true;
}

void Compiler::do_setting(const StmtRef& r) {
  ParseCtx& ctx = *r.ctx;
  const Stmt& s = *r.stmt;
  const std::string& name = s.name.text;
  SourceLoc at = ctx.where(s.name.loc);
  const SettingDesc* sd = reg_.setting(name);
  if (!sd) {
    std::string hint;
    if (reg_.field(name)) hint = "rules use ':' — " + name + " : ACTION(...)";
    else if (std::string sug = reg_.suggest_setting(name); !sug.empty()) hint = "did you mean " + quote(sug) + "?";
    d_.error(at, "unknown setting " + quote(name), hint);
    return;
  }
  if (auto it = settings_seen_.find(name); it != settings_seen_.end()) {
    d_.error(at, "setting " + quote(name) + " given twice", "keep one");
    d_.note(it->second, "first given here");
    return;
  }
  settings_seen_[name] = at;
  const Value& v = *s.value;
  SourceLoc vat = ctx.where(v.loc);
  auto choice = [&](const std::vector<std::string>& choices) -> std::string {
    if (v.kind == Value::Ident && std::find(choices.begin(), choices.end(), v.text) != choices.end()) return v.text;
    std::vector<std::string_view> cs(choices.begin(), choices.end());
    std::string sug = v.kind == Value::Ident ? closest(v.text, cs) : "";
    d_.error(vat, "setting " + quote(name) + " takes one of: " + join(choices, " | "),
             sug.empty() ? "" : "did you mean " + quote(sug) + "?");
    return {};
  };
  if (name == "identifier") {
    if (v.kind != Value::Ident && v.kind != Value::IdentPrefix) {
      d_.error(vat, "setting 'identifier' takes a field name, optionally with a prefix length", "identifier = ip.client/64");
      return;
    }
    if (!sd->choices.empty() && std::find(sd->choices.begin(), sd->choices.end(), v.text) == sd->choices.end()) {
      std::vector<std::string_view> cs(sd->choices.begin(), sd->choices.end());
      std::string sug = closest(v.text, cs);
      d_.error(vat, quote(v.text) + " cannot identify users; 'identifier' takes one of: " + join(sd->choices, " | "),
               sug.empty() ? "" : "did you mean " + quote(sug) + "?");
      return;
    }
    const FieldDesc* f = reg_.field(v.text);
    if (!f) {
      d_.error(vat, "unknown field " + quote(v.text), "");
      return;
    }
    pol_->identifier = f;
    if (v.kind == Value::IdentPrefix) {
      if (f->type != ValueType::Addr) {
        d_.error(vat, "a prefix length only applies to address fields, not " + f->name, "");
        return;
      }
      if (v.i < 1 || v.i > 128) {
        d_.error(vat, "identifier prefix must be between 1 and 128 (got " + std::to_string(v.i) + ")",
                 "IPv4 clients use min(prefix, 32) bits");
        return;
      }
      pol_->identifier_prefix = static_cast<int>(v.i);
    }
  } else if (name == "clients") {
    std::vector<const Value*> items;
    if (v.kind == Value::Set) items.assign(v.items.begin(), v.items.end());
    else items.push_back(&v);
    if (items.empty()) {
      d_.error(vat, "'clients' is empty", "list the users' address ranges: clients = { 10.0.0.0/8, 2001:db8::/32 }");
      return;
    }
    for (const Value* it : items) {
      SourceLoc iat = ctx.where(it->loc);
      if (it->kind != Value::Addr) {
        d_.error(iat, "'clients' takes address ranges, not " + std::string(value_desc(it->kind)), "clients = { 10.0.0.0/8 }");
        continue;
      }
      Cidr c;
      bool hb = false;
      std::string err;
      if (!parse_ip(it->text, c, &hb, err)) {
        d_.error(iat, err, "");
        continue;
      }
      if (hb)
        d_.warning(iat, quote(it->text) + " has host bits set; it means " + c.to_string(),
                   "write " + c.to_string());
      pol_->clients.push_back(c);
    }
  } else if (name == "on_error") {
    // The settings' words, mapped by table: they are the settings' own
    // keywords, not the actions of the same names.
    static const std::map<std::string, Policy::OnError> kOnError{{"drop", Policy::OnError::Drop},
                                                                 {"cut", Policy::OnError::Cut},
                                                                 {"snap", Policy::OnError::Snap}};
    std::string c = choice(sd->choices.empty() ? std::vector<std::string>{"drop", "cut", "snap"} : sd->choices);
    if (auto it = kOnError.find(c); it != kOnError.end()) pol_->on_error = it->second;
  } else if (name == "on_unknown") {
    static const std::map<std::string, Policy::OnUnknown> kOnUnknown{
        {"drop", Policy::OnUnknown::Drop}, {"keep", Policy::OnUnknown::Keep}, {"cut", Policy::OnUnknown::Cut}};
    std::string c = choice(sd->choices.empty() ? std::vector<std::string>{"drop", "keep", "cut"} : sd->choices);
    if (auto it = kOnUnknown.find(c); it != kOnUnknown.end()) pol_->on_unknown = it->second;
  } else if (name == "addr_text") {
    static const std::map<std::string, Policy::AddrText> kAddrText{{"map", Policy::AddrText::Map},
                                                                   {"keep", Policy::AddrText::Keep}};
    std::string c = choice(sd->choices.empty() ? std::vector<std::string>{"map", "keep"} : sd->choices);
    if (auto it = kAddrText.find(c); it != kAddrText.end()) pol_->addr_text = it->second;
  } else if (name == "payload_default") {
    const FieldDesc* payload = reg_.field("payload");
    if (v.kind != Value::CallV) {
      d_.error(vat, "'payload_default' takes an action call", "payload_default = cut()");
      return;
    }
    if (!payload) {
      d_.error(at, "no 'payload' field is registered", "");
      return;
    }
    auto call = check_call(ctx, *v.call, {payload}, false);
    if (call) pol_->payload_default = *call;
  } else {
    d_.error(at, "setting " + quote(name) + " is registered but this version of the policy language cannot apply it", "");
  }
}

std::optional<ActionCall> Compiler::check_call(ParseCtx& ctx, const Call& c, const std::vector<const FieldDesc*>& fields,
                                               bool nested) {
  SourceLoc name_at = ctx.where(c.name_loc);
  const ActionDesc* a = reg_.action(c.name);
  if (!a) {
    std::string hint;
    if (std::string sug = reg_.suggest_action(c.name); !sug.empty()) hint = "did you mean " + quote(sug) + "?";
    else if (reg_.field(c.name)) hint = quote(c.name) + " is a field; actions are: " + join([&] {
      std::vector<std::string> v;
      for (const auto& x : reg_.actions()) v.push_back(x.name);
      return v;
    }());
    d_.error(name_at, "unknown action " + quote(c.name), hint);
    return std::nullopt;
  }
  bool ok = true;
  for (const FieldDesc* f : fields) {
    if (std::find(a->applies_to.begin(), a->applies_to.end(), f->type) == a->applies_to.end()) {
      d_.error(name_at,
               std::string(nested ? "fallback " : "") + "action " + quote(a->name) + " does not apply to " + f->name +
                   " (" + std::string(to_string(f->type)) + ")",
               "actions for " + std::string(to_string(f->type)) + " fields: " + actions_for(f->type));
      ok = false;
    }
  }
  // Removing bytes is only possible at the end of a packet: inside a
  // header or a message the value would have to become another action.
  if (a->changes_length) {
    for (const FieldDesc* f : fields) {
      if (f->trailing || !ok) continue;
      std::vector<std::string> v;
      for (const auto& x : reg_.actions())
        if (x.protects && !x.changes_length &&
            std::find(x.applies_to.begin(), x.applies_to.end(), f->type) != x.applies_to.end())
          v.push_back(x.name + "()");
      d_.error(name_at,
               std::string(nested ? "fallback " : "") + "action " + quote(a->name) +
                   " removes bytes, which only the packet's trailing content (payload) allows; " + f->name +
                   " sits inside its header or message",
               "protect it with " + join(v, " or "));
      ok = false;
    }
  }
  // z-anonymity counts users per value class; a field without one has no
  // shared store to count in.
  if (a->uses_zstore) {
    for (const FieldDesc* f : fields) {
      if (f->value_class.empty() && ok) {
        d_.error(name_at, "zanon does not apply to " + f->name + ": it has no z-anonymity value class",
                 "protect it with " + [&] {
                   std::vector<std::string> v;
                   for (const auto& x : reg_.actions())
                     if (x.protects && &x != a &&
                         std::find(x.applies_to.begin(), x.applies_to.end(), f->type) != x.applies_to.end())
                       v.push_back(x.name + "()");
                   return join(v, " or ");
                 }());
        ok = false;
      }
    }
  }
  ActionCall out;
  out.desc = a;
  out.loc = ctx.where(c.loc);
  std::map<std::string, SourceLoc> given;
  int positional = 0;
  bool named_seen = false;
  for (const Arg* arg : c.args) {
    SourceLoc arg_at = ctx.where(arg->loc);
    const ParamDesc* p = nullptr;
    if (arg->name.empty()) {
      if (named_seen) {
        d_.error(arg_at, "positional argument after a named one", "name it: " + signature(*a));
        ok = false;
        continue;
      }
      for (const auto& pd : a->params)
        if (pd.positional == positional) p = &pd;
      ++positional;
      if (!p) {
        d_.error(arg_at,
                 a->params.empty() ? a->name + "() takes no arguments"
                                   : "too many positional arguments for " + quote(a->name),
                 "usage: " + signature(*a));
        ok = false;
        continue;
      }
    } else {
      named_seen = true;
      for (const auto& pd : a->params)
        if (pd.name == arg->name) p = &pd;
      if (!p) {
        std::vector<std::string_view> names;
        for (const auto& pd : a->params) names.push_back(pd.name);
        std::string sug = closest(arg->name, names);
        d_.error(ctx.where(arg->name_loc), "unknown parameter " + quote(arg->name) + " of " + quote(a->name),
                 sug.empty() ? "usage: " + signature(*a) : "did you mean " + quote(sug) + "?");
        ok = false;
        continue;
      }
    }
    if (auto it = given.find(p->name); it != given.end()) {
      d_.error(arg_at, "parameter " + quote(p->name) + " of " + quote(a->name) + " given twice", "keep one");
      d_.note(it->second, "first given here");
      ok = false;
      continue;
    }
    given[p->name] = arg_at;
    ArgValue av;
    if (!convert_arg(ctx, c, *a, *p, *arg->value, fields, av)) {
      ok = false;
      continue;
    }
    out.args.emplace_back(p->name, std::move(av));
  }
  for (const auto& pd : a->params) {
    if (pd.required && !given.count(pd.name)) {
      d_.error(ctx.where(c.loc), "missing parameter " + quote(pd.name) + " of " + quote(a->name),
               "usage: " + signature(*a));
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  if (a->validate) {
    for (const FieldDesc* f : fields) {
      std::string msg = a->validate(out, *f);
      if (!msg.empty()) {
        d_.error(ctx.where(c.loc), msg, "usage: " + signature(*a));
        return std::nullopt;
      }
    }
  }
  return out;
}

bool Compiler::convert_arg(ParseCtx& ctx, const Call& c, const ActionDesc& a, const ParamDesc& p, const Value& v,
                           const std::vector<const FieldDesc*>& fields, ArgValue& out) {
  SourceLoc at = ctx.where(v.loc);
  out.kind = p.kind;
  auto mismatch = [&] {
    std::string hint;
    if (p.kind == ParamKind::Duration && v.kind == Value::Int) hint = "add a unit: 500ms 30s 15m 1h 2d";
    else if (p.kind == ParamKind::Key && v.kind == Value::String) hint = "name a declared key, without quotes";
    d_.error(at, "parameter " + quote(p.name) + " of " + quote(a.name) + " takes " + kind_desc(p.kind, p) + ", not " +
                     value_desc(v.kind),
             hint);
    return false;
  };
  auto range = [&](int64_t x, bool dur) {
    if (x >= p.min && x <= p.max) return true;
    auto f = [&](int64_t y) { return dur ? format_duration(y) : std::to_string(y); };
    std::string allowed = p.min == INT64_MIN ? "at most " + f(p.max)
                          : p.max == INT64_MAX ? "at least " + f(p.min)
                                               : "between " + f(p.min) + " and " + f(p.max);
    d_.error(at, "parameter " + quote(p.name) + " of " + quote(a.name) + " must be " + allowed + " (got " + f(x) + ")",
             p.doc.empty() ? "" : p.name + ": " + p.doc);
    return false;
  };
  switch (p.kind) {
    case ParamKind::Int:
      if (v.kind != Value::Int) return mismatch();
      out.i = v.i;
      return range(v.i, false);
    case ParamKind::Duration:
      if (v.kind != Value::Duration) return mismatch();
      out.i = v.i;
      return range(v.i, true);
    case ParamKind::String:
      if (v.kind != Value::String) return mismatch();
      out.s = v.text;
      return true;
    case ParamKind::Key: {
      if (v.kind != Value::Ident) return mismatch();
      auto it = keys_.find(v.text);
      if (it == keys_.end()) {
        std::vector<std::string_view> names;
        for (const auto& [n, k] : keys_) names.push_back(n);
        std::string sug = closest(v.text, names);
        d_.error(at, "unknown key " + quote(v.text),
                 sug.empty() ? "declare it: key " + v.text + " = file(\"keys/" + v.text + ".key\")"
                             : "did you mean " + quote(sug) + "?");
        return false;
      }
      out.s = v.text;
      out.key = it->second.km;
      // A key that failed to load has its own error already.
      return it->second.ok;
    }
    case ParamKind::Regex: {
      if (v.kind != Value::Regex) return mismatch();
      Cond::Regex rx;
      if (!check_regex(ctx, v, rx)) return false;
      out.s = rx.source;
      out.regex_flags = rx.flags;
      return true;
    }
    case ParamKind::Ident:
    case ParamKind::ActionOrIdent:
    case ParamKind::Action: {
      if (v.kind == Value::CallV && p.kind != ParamKind::Ident) {
        auto nested = check_call(ctx, *v.call, fields, true);
        if (!nested) return false;
        out.kind = ParamKind::Action;
        out.action = std::make_shared<ActionCall>(std::move(*nested));
        return true;
      }
      if (v.kind != Value::Ident || p.kind == ParamKind::Action) return mismatch();
      if (!p.choices.empty() && std::find(p.choices.begin(), p.choices.end(), v.text) == p.choices.end()) {
        std::vector<std::string_view> cs(p.choices.begin(), p.choices.end());
        std::string sug = closest(v.text, cs);
        std::string hint = sug.empty() ? "" : "did you mean " + quote(sug) + "?";
        if (hint.empty() && p.kind == ParamKind::ActionOrIdent && reg_.action(v.text))
          hint = quote(v.text) + " is an action: write " + v.text + "(...)";
        d_.error(at, "parameter " + quote(p.name) + " of " + quote(a.name) + " takes " + kind_desc(p.kind, p) +
                         ", not " + quote(v.text),
                 hint);
        return false;
      }
      // The registrable domain is a part of a name only: a user agent or an
      // address has none to fall back to.
      if (a.uses_zstore && p.name == "fallback" && v.text == "sld") {
        for (const FieldDesc* f : fields)
          if (f->type != ValueType::Name) {
            d_.error(at, "fallback 'sld' applies to domain names only; " + f->name + " is " +
                             std::string(to_string(f->type)),
                     f->type == ValueType::Addr ? "fallback=zero, prefix(N) or hash(key=K)"
                                                : "fallback=redact, zero or hash(key=K)");
            return false;
          }
      }
      out.kind = ParamKind::Ident;
      out.s = v.text;
      // A word naming an action (fallback=redact) is that action, checked on
      // the fields as its call form is: the runtime then reads the action,
      // never the word, and a word it would have to reinterpret (redact on
      // an address) is refused here.
      if (p.kind == ParamKind::ActionOrIdent && reg_.action(v.text)) {
        Call bare;
        bare.name = v.text;
        bare.name_loc = bare.loc = v.loc;
        auto nested = check_call(ctx, bare, fields, true);
        if (!nested) return false;
        out.action = std::make_shared<ActionCall>(std::move(*nested));
      }
      return true;
    }
  }
  return mismatch();
}

bool Compiler::check_regex(ParseCtx& ctx, const Value& v, Cond::Regex& out) {
  SourceLoc at = ctx.where(v.loc);
  out.source = v.text;
  out.flags = v.flags;
  out.hs_flags = 0;
  for (char f : v.flags) {
    if (f == 'i') out.hs_flags |= HS_FLAG_CASELESS;
    else if (f == 's') out.hs_flags |= HS_FLAG_DOTALL;
    else if (f == 'm') out.hs_flags |= HS_FLAG_MULTILINE;
    else {
      d_.error(at, std::string("unknown regex flag '") + f + "'",
               "flags: i (ignore case), s (dot matches newline), m (multi-line)");
      return false;
    }
  }
  hs_database_t* db = nullptr;
  hs_compile_error_t* err = nullptr;
  if (hs_compile(out.source.c_str(), out.hs_flags, HS_MODE_BLOCK, nullptr, &db, &err) != HS_SUCCESS) {
    std::string msg = err && err->message ? err->message : "unknown error";
    hs_free_compile_error(err);
    d_.error(at, "Hyperscan rejects this regex: " + msg, "Hyperscan supports PCRE syntax without backreferences and lookaround");
    return false;
  }
  hs_free_database(db);
  return true;
}

std::shared_ptr<Cond> Compiler::compile_cond(ParseCtx& ctx, const CondNode& n) {
  auto c = std::make_shared<Cond>();
  c->loc = ctx.where(n.loc);
  if (n.kind != CondNode::Test) {
    c->kind = n.kind == CondNode::And ? Cond::Kind::And : n.kind == CondNode::Or ? Cond::Kind::Or : Cond::Kind::Not;
    bool ok = true;
    for (const CondNode* k : n.kids) {
      auto kc = compile_cond(ctx, *k);
      if (!kc) ok = false;
      else c->children.push_back(kc);
    }
    return ok ? c : nullptr;
  }
  const Value& v = *n.rhs;
  SourceLoc vat = ctx.where(v.loc);
  SourceLoc op_at = ctx.where(n.op_loc);
  std::vector<const Value*> items;
  if (n.op == CondNode::In) {
    if (v.kind != Value::Set) {
      d_.error(vat, "'in' takes a set { a, b }", "write == for a single value");
      return nullptr;
    }
    if (v.items.empty()) {
      d_.error(vat, "empty set: this test is never true", "");
      return nullptr;
    }
    items.assign(v.items.begin(), v.items.end());
  } else {
    if (v.kind == Value::Set) {
      d_.error(op_at, "compare with a set using 'in'", "");
      return nullptr;
    }
    items.push_back(&v);
  }

  if (n.lhs == "proto") {
    if (n.op == CondNode::Match) {
      d_.error(op_at, "'proto' is compared with == != or in, not ~", "proto in { dns, tls }");
      return nullptr;
    }
    c->kind = Cond::Kind::ProtoIn;
    bool ok = true;
    for (const Value* it : items) {
      SourceLoc iat = ctx.where(it->loc);
      if (it->kind != Value::Ident) {
        d_.error(iat, "protocol names are identifiers, not " + std::string(value_desc(it->kind)), "proto in { dns, tls }");
        ok = false;
        continue;
      }
      if (!protocols_.count(it->text)) {
        std::vector<std::string_view> names(protocols_.begin(), protocols_.end());
        std::string sug = closest(it->text, names);
        d_.error(iat, "unknown protocol " + quote(it->text),
                 sug.empty() ? "known: " + join(std::vector<std::string>(protocols_.begin(), protocols_.end()))
                             : "did you mean " + quote(sug) + "?");
        ok = false;
        continue;
      }
      c->protocols.push_back(it->text);
    }
    if (!ok) return nullptr;
    if (n.op == CondNode::Ne) {
      auto neg = std::make_shared<Cond>();
      neg->kind = Cond::Kind::Not;
      neg->loc = c->loc;
      neg->children.push_back(c);
      return neg;
    }
    return c;
  }

  const FieldDesc* f = reg_.field(n.lhs);
  if (!f) {
    std::string sug = reg_.suggest_field(n.lhs);
    d_.error(ctx.where(n.lhs_loc), "unknown field " + quote(n.lhs),
             sug.empty() ? (closest(n.lhs, {"proto"}).empty() ? "" : "did you mean 'proto'?") : "did you mean " + quote(sug) + "?");
    return nullptr;
  }
  c->kind = Cond::Kind::FieldCmp;
  c->field = f;
  c->op = n.op == CondNode::Eq ? Cond::Op::Eq : n.op == CondNode::Ne ? Cond::Op::Ne : n.op == CondNode::In ? Cond::Op::In : Cond::Op::Match;
  std::string tname(to_string(f->type));
  const uint8_t op_bit = c->op == Cond::Op::Eq ? kCondEq : c->op == Cond::Op::Ne ? kCondNe
                         : c->op == Cond::Op::In ? kCondIn : kCondMatch;
  // Type mismatches get their own messages below.
  const bool type_error = c->op == Cond::Op::Match ? (f->type == ValueType::Addr || f->type == ValueType::Mac ||
                                                      f->type == ValueType::Port)
                                                   : f->type == ValueType::Bytes;
  if (!type_error && !(f->cond_ops & op_bit)) {
    // The runtime has no evaluator for it: accepting it would make the
    // condition silently false (the rule never applies).
    d_.error(ctx.where(n.lhs_loc),
             f->cond_ops ? "a condition cannot test " + f->name + " with this operator"
                         : "a condition cannot test " + f->name + " (no evaluator for it)",
             f->cond_ops ? std::string((f->cond_ops & kCondMatch) ? "use ~ /regex/" : "use ==, != or in") : "");
    return nullptr;
  }
  if (c->op == Cond::Op::Match) {
    if (f->type == ValueType::Addr || f->type == ValueType::Mac || f->type == ValueType::Port) {
      d_.error(op_at, "'~' matches text; " + f->name + " is " + tname, f->type == ValueType::Addr ? "use: " + f->name + " in { 192.0.2.0/24 }" : "");
      return nullptr;
    }
    if (v.kind != Value::Regex) {
      d_.error(vat, "'~' takes a regex /.../, not " + std::string(value_desc(v.kind)), "");
      return nullptr;
    }
    Cond::Regex rx;
    if (!check_regex(ctx, v, rx)) return nullptr;
    c->regexes.push_back(rx);
    return c;
  }
  bool ok = true;
  for (const Value* it : items) {
    SourceLoc iat = ctx.where(it->loc);
    auto bad = [&](const char* want) {
      d_.error(iat, f->name + " (" + tname + ") is compared with " + want + ", not " + value_desc(it->kind), "");
      ok = false;
    };
    switch (f->type) {
      case ValueType::Addr: {
        if (it->kind != Value::Addr) { bad("addresses or prefixes"); break; }
        Cidr cidr;
        bool hb = false;
        std::string err;
        if (!parse_ip(it->text, cidr, &hb, err)) {
          d_.error(iat, err, "");
          ok = false;
          break;
        }
        if (hb) d_.warning(iat, quote(it->text) + " has host bits set; it means " + cidr.to_string(), "write " + cidr.to_string());
        c->cidrs.push_back(cidr);
        break;
      }
      case ValueType::Mac: {
        std::array<uint8_t, 6> m;
        if (it->kind != Value::Addr || !parse_mac(it->text, m)) { bad("MAC addresses aa:bb:cc:dd:ee:ff"); break; }
        c->macs.push_back(m);
        break;
      }
      case ValueType::Port:
        if (it->kind != Value::Int) { bad("port numbers"); break; }
        if (it->i > 65535) {
          d_.error(iat, "port " + std::to_string(it->i) + " is out of range (0..65535)", "");
          ok = false;
          break;
        }
        c->ints.push_back(it->i);
        break;
      case ValueType::Name:
      case ValueType::Text:
        if (it->kind != Value::String) { bad("strings"); break; }
        c->strings.push_back(it->text);
        break;
      case ValueType::Bytes:
        d_.error(op_at, f->name + " is raw bytes; test it with ~ /regex/", "");
        return nullptr;
    }
  }
  return ok ? c : nullptr;
}

std::string collapse(std::string_view s) {
  std::string o;
  bool space = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    if (ch == '#') {  // a comment inside a multi-line rule
      while (i < s.size() && s[i] != '\n') ++i;
      space = true;
      continue;
    }
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
      space = true;
      continue;
    }
    if (space && !o.empty()) o += ' ';
    space = false;
    o += ch;
  }
  return o;
}

void Compiler::do_rule(const StmtRef& r) {
  ParseCtx& ctx = *r.ctx;
  const Stmt& s = *r.stmt;
  Rule rule;
  std::vector<SourceLoc> locs;
  bool ok = true;
  for (const Name& n : s.fields) {
    SourceLoc at = ctx.where(n.loc);
    const FieldDesc* f = reg_.field(n.text);
    if (!f) {
      std::string hint;
      if (std::string sug = reg_.suggest_field(n.text); !sug.empty()) hint = "did you mean " + quote(sug) + "?";
      else if (reg_.setting(n.text)) hint = quote(n.text) + " is a setting: " + n.text + " = ...";
      else if (reg_.action(n.text)) hint = quote(n.text) + " is an action; a rule is FIELD : ACTION(...)";
      d_.error(at, "unknown field " + quote(n.text), hint);
      ok = false;
      continue;
    }
    if (std::find(rule.fields.begin(), rule.fields.end(), f) != rule.fields.end()) {
      d_.error(at, "field " + quote(n.text) + " listed twice in one rule", "");
      ok = false;
      continue;
    }
    rule.fields.push_back(f);
    locs.push_back(at);
  }
  std::optional<ActionCall> call;
  if (!rule.fields.empty() || s.fields.empty()) call = check_call(ctx, *s.action, rule.fields, false);
  else check_call(ctx, *s.action, {}, false);  // still report unknown actions and bad parameters
  std::shared_ptr<Cond> when;
  if (s.cond) {
    when = compile_cond(ctx, *s.cond);
    if (!when) ok = false;
  }
  if (!ok || !call) return;
  rule.action = std::move(*call);
  rule.when = when;
  rule.loc = ctx.where(s.loc);
  rule.text = collapse(ctx.src.substr(s.loc.first_off, s.loc.last_off - s.loc.first_off));
  rule.index = static_cast<uint32_t>(pol_->rules.size());
  pol_->rules.push_back(std::move(rule));
  rule_field_locs_.push_back(std::move(locs));
}

void Compiler::do_select(const StmtRef& r) {
  ParseCtx& ctx = *r.ctx;
  const Stmt& s = *r.stmt;
  SourceLoc at = ctx.where(s.loc);
  if (select_seen_) {
    d_.error(at, "'select' given twice", "combine them with and/or in one select");
    d_.note(*select_seen_, "first given here");
    return;
  }
  select_seen_ = at;
  pol_->select_loc = at;
  if (s.kind == Stmt::SelectBpf) {
    SourceLoc sat = ctx.where(s.name.loc);
    if (s.name.text.empty()) {
      d_.error(sat, "empty BPF expression", "remove the select to receive every packet");
      return;
    }
    pcap_t* p = pcap_open_dead(DLT_EN10MB, 65535);
    if (!p) {
      d_.error(sat, "libpcap could not open a dead handle to check the BPF expression", "");
      return;
    }
    bpf_program prog{};
    if (pcap_compile(p, &prog, s.name.text.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0) {
      d_.error(sat, std::string("invalid BPF expression: ") + pcap_geterr(p), "the syntax is tcpdump's: man pcap-filter");
    } else {
      pcap_freecode(&prog);
      pol_->select_bpf = s.name.text;
    }
    pcap_close(p);
    return;
  }
  pol_->select_cond = compile_cond(ctx, *s.cond);
}

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
  lint_privacy(*pol_, reg_, d_, in_clear);
}

std::string read_file(const std::string& path, std::string& err, size_t limit) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    err = std::strerror(errno);
    return {};
  }
  if (!S_ISREG(st.st_mode)) {
    err = "not a regular file";
    return {};
  }
  if (static_cast<size_t>(st.st_size) > limit) {
    err = "file is " + std::to_string(st.st_size) + " bytes; the limit is " + std::to_string(limit) + " bytes (" +
          std::to_string(limit / 1024) + " KiB)";
    return {};
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    err = std::strerror(errno);
    return {};
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::shared_ptr<const Policy> compile_file(const std::string& path, Diagnostics& diags, const CompileOptions& opts) {
  register_builtin_plugins();
  std::string err;
  std::string src = read_file(path, err, opts.max_file_bytes);
  if (!err.empty()) {
    diags.error({path, 0, 0, 0}, "cannot read policy: " + err, "");
    return nullptr;
  }
  Compiler c(diags, opts);
  return c.run(src, path, dir_of(path));
}

std::shared_ptr<const Policy> compile_string(std::string_view src, const std::string& name, Diagnostics& diags,
                                             const CompileOptions& opts) {
  register_builtin_plugins();
  Compiler c(diags, opts);
  return c.run(src, name, "");
}

}  // namespace amon::dsl
