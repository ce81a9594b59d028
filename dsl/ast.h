// Syntax tree of one policy file, as the Bison parser builds it. Internal to
// the DSL: the engine sees only policy.h.
//
// Nodes live in deques owned by ParseCtx and refer to each other by raw
// pointer, so Bison's error recovery can throw away half-built statements
// without leaking or needing %destructor bookkeeping.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "policy.h"

namespace amon::dsl {

// Bison location type (first/last line and column, 1-based, last exclusive),
// plus byte offsets so a rule's source text can be recovered.
struct Loc {
  int first_line = 1, first_column = 1, last_line = 1, last_column = 1;
  int first_off = 0, last_off = 0;  // [first_off, last_off)
};

struct Call;

struct Value {
  enum Kind { Int, Duration, String, Addr, Ident, IdentPrefix, Regex, Set, CallV } kind = Int;
  Loc loc;
  int64_t i = 0;          // Int, Duration (ns), IdentPrefix length
  std::string text;       // String (unescaped), Addr, Ident, IdentPrefix name, Regex source
  std::string flags;      // Regex
  std::vector<Value*> items;  // Set
  Call* call = nullptr;       // CallV
};

struct Arg {
  std::string name;  // empty: positional
  Loc name_loc;
  Value* value = nullptr;
  Loc loc;
};

struct Call {
  std::string name;
  Loc name_loc;
  Loc loc;  // name through ')'
  std::vector<Arg*> args;
};

struct CondNode {
  enum Kind { And, Or, Not, Test } kind = Test;
  enum Op { Eq, Ne, In, Match } op = Eq;
  Loc loc;
  std::vector<CondNode*> kids;
  std::string lhs;
  Loc lhs_loc, op_loc;
  Value* rhs = nullptr;
};

struct Name {
  std::string text;
  Loc loc;
};

struct Stmt {
  enum Kind { Setting, Key, Include, SelectBpf, SelectCond, Rule } kind = Rule;
  Loc loc;
  Name name;                  // Setting/Key name; Include/SelectBpf string in name.text
  Value* value = nullptr;     // Setting value
  Name key_source;            // Key: file | env
  Name key_arg;               // Key: the path or variable
  std::vector<Name> fields;   // Rule
  Call* action = nullptr;     // Rule
  CondNode* cond = nullptr;   // Rule `when`, SelectCond
};

struct ParseCtx {
  std::string file;        // as shown in diagnostics
  std::string_view src;
  Diagnostics* diags = nullptr;
  int max_nesting = 32;

  // Scanner state (reentrant: everything lives here, nothing is global).
  int depth = 0;           // open ( and { in the current statement
  int last_token = 0;      // for newline continuation and regex-vs-slash
  bool at_eof_eol = false; // a final EOL has been sent for a file without one
  bool nesting_reported = false;
  int offset = 0;          // byte offset of the next character
  int line = 1, col = 1;
  int not_depth = 0;
  bool recovering = false;  // set on a syntax error until the next end of line

  std::deque<Value> values;
  std::deque<Arg> args;
  std::deque<Call> calls;
  std::deque<CondNode> conds;
  std::deque<std::string> strings;
  std::vector<Stmt> stmts;

  SourceLoc where(const Loc& l) const;
  Value* value(Value::Kind k, const Loc& l) {
    values.emplace_back();
    values.back().kind = k;
    values.back().loc = l;
    return &values.back();
  }
  std::string* str(std::string s) {
    strings.push_back(std::move(s));
    return &strings.back();
  }
};

// Parses ctx.src into ctx.stmts, reporting syntax errors to ctx.diags.
void parse(ParseCtx& ctx);

}  // namespace amon::dsl
