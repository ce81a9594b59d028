// The checker's internals, shared by the files that do its jobs:
// compile.cpp (reading files and includes, keys, settings, rules, select),
// calls.cpp (an action call and its arguments against the registry),
// conditions.cpp (`when` and `select` conditions, address and MAC literals)
// and lint.cpp (the checks of a whole policy once it compiled). Internal to
// dsl/: the public interface is policy.h.
#pragma once

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ast.h"
#include "protocol.h"

namespace amon::dsl {

// compile.cpp
std::string quote(std::string_view s);
const char* value_desc(Value::Kind k);
std::string join(const std::vector<std::string>& v, const char* sep = ", ");
std::string example_protection(const FieldDesc& f);
// Fields below the application layer (their plugin says so); everything
// else is parsed out of the payload, so cutting the payload removes it.
inline bool below_payload(const FieldDesc& f) { return f.header; }

// conditions.cpp
bool parse_ip(const std::string& text, Cidr& out, bool* host_bits, std::string& err);
bool parse_mac(const std::string& t, std::array<uint8_t, 6>& m);

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
  std::shared_ptr<Cond> compile_proto_test(ParseCtx& ctx, const CondNode& n, const std::vector<const Value*>& items,
                                           std::shared_ptr<Cond> c);
  std::shared_ptr<Cond> compile_field_test(ParseCtx& ctx, const CondNode& n, const std::vector<const Value*>& items,
                                           std::shared_ptr<Cond> c);
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

}  // namespace amon::dsl
