// The checker: turns parsed statements into a Policy, resolving every name
// against the plugin registry. It keeps going after an error so one run
// reports everything wrong with a file.
#include "compiler.h"

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
#include <fstream>
#include <sstream>

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

std::string Cidr::to_string() const {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(family == 4 ? AF_INET : AF_INET6, addr.data(), buf, sizeof buf);
  return std::string(buf) + "/" + std::to_string(len);
}

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

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

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
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

namespace {

using Severity = Diagnostic::Severity;

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

}  // namespace

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
  analyze();
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
  } else if (name == "echoes") {
    static const std::map<std::string, Policy::Echoes> kEchoes{{"map", Policy::Echoes::Map},
                                                               {"keep", Policy::Echoes::Keep}};
    std::string c = choice(sd->choices.empty() ? std::vector<std::string>{"map", "keep"} : sd->choices);
    if (auto it = kEchoes.find(c); it != kEchoes.end()) pol_->echoes = it->second;
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
