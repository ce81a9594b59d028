/* Grammar of amon policy files (doc/language.md has the readable version).
 *
 * Field, action and setting names are plain identifiers here: the checker
 * resolves them against the plugin registry, so a new protocol never touches
 * the grammar. Statements end at a newline or ';', and error recovery skips to
 * the end of the statement, so one run reports every broken rule of a file.
 */
%code requires {
#include "ast.h"
typedef void* yyscan_t;
}

%code provides {
int amon_dsl_lex(AMON_DSL_STYPE* lval, AMON_DSL_LTYPE* lloc, yyscan_t scanner);
}

%code {
#include <string>

using namespace amon::dsl;

#define YYLLOC_DEFAULT(Cur, Rhs, N)                                   \
  do {                                                                \
    if (N) {                                                          \
      (Cur).first_line = YYRHSLOC(Rhs, 1).first_line;                 \
      (Cur).first_column = YYRHSLOC(Rhs, 1).first_column;            \
      (Cur).first_off = YYRHSLOC(Rhs, 1).first_off;                   \
      (Cur).last_line = YYRHSLOC(Rhs, N).last_line;                   \
      (Cur).last_column = YYRHSLOC(Rhs, N).last_column;               \
      (Cur).last_off = YYRHSLOC(Rhs, N).last_off;                     \
    } else {                                                          \
      (Cur).first_line = (Cur).last_line = YYRHSLOC(Rhs, 0).last_line; \
      (Cur).first_column = (Cur).last_column = YYRHSLOC(Rhs, 0).last_column; \
      (Cur).first_off = (Cur).last_off = YYRHSLOC(Rhs, 0).last_off;   \
    }                                                                 \
  } while (0)

static void yyerror(AMON_DSL_LTYPE* loc, yyscan_t, ParseCtx* ctx, const char* msg) {
  // Only reached for "memory exhausted" (parser stack); syntax errors go
  // through yyreport_syntax_error below.
  ctx->diags->error(ctx->where(*loc), std::string("policy too complex: ") + msg,
                    "split long conditions or reduce nesting");
}

static Stmt& add_stmt(ParseCtx* ctx, Stmt::Kind k, const AMON_DSL_LTYPE& loc) {
  ctx->stmts.emplace_back();
  ctx->stmts.back().kind = k;
  ctx->stmts.back().loc = loc;
  return ctx->stmts.back();
}

static CondNode* cond_node(ParseCtx* ctx, CondNode::Kind k, const AMON_DSL_LTYPE& loc) {
  ctx->conds.emplace_back();
  ctx->conds.back().kind = k;
  ctx->conds.back().loc = loc;
  return &ctx->conds.back();
}
}

%define api.pure full
%define api.prefix {amon_dsl_}
%define api.location.type {amon::dsl::Loc}
%define parse.error custom
%locations
%lex-param {yyscan_t scanner}
%parse-param {yyscan_t scanner} {amon::dsl::ParseCtx* ctx}

%union {
  std::string* s;
  amon::dsl::Value* v;
  amon::dsl::Call* call;
  amon::dsl::Arg* arg;
  amon::dsl::CondNode* cond;
  int op;
}

%token EOL "end of line"
%token <s> IDENT "identifier"
%token <v> INT "integer" DURATION "duration" STRING "string" ADDR "address" REGEX "regex"
%token KEY "key" INCLUDE "include" SELECT "select" WHEN "when"
%token AND "and" OR "or" NOT "not" IN "in" EQ "==" NE "!="
%token LEXERR "invalid token"

%type <v> value set set_items fields
%type <call> call arglist
%type <arg> arg
%type <cond> cond and_expr unary opt_when
%type <op> cmp

%%

file
  : %empty
  | file stmt
  ;

end
  : EOL
  | ';'
  ;

stmt
  : end
  | IDENT '=' value end {
      Stmt& s = add_stmt(ctx, Stmt::Setting, @$);
      s.name = {*$1, @1};
      s.value = $3;
    }
  | KEY IDENT '=' call end {
      Stmt& s = add_stmt(ctx, Stmt::Key, @$);
      s.name = {*$2, @2};
      s.action = $4;
    }
  | INCLUDE STRING end {
      Stmt& s = add_stmt(ctx, Stmt::Include, @$);
      s.name = {$2->text, @2};
    }
  | SELECT STRING end {
      Stmt& s = add_stmt(ctx, Stmt::SelectBpf, @$);
      s.name = {$2->text, @2};
    }
  | SELECT cond end {
      Stmt& s = add_stmt(ctx, Stmt::SelectCond, @$);
      s.cond = $2;
    }
  | fields ':' call opt_when end {
      Stmt& s = add_stmt(ctx, Stmt::Rule, @$);
      for (Value* f : $1->items) s.fields.push_back({f->text, f->loc});
      s.action = $3;
      s.cond = $4;
      s.loc.last_line = ($4 ? @4 : @3).last_line;
      s.loc.last_column = ($4 ? @4 : @3).last_column;
      s.loc.last_off = ($4 ? @4 : @3).last_off;
    }
  | error end { yyerrok; }
  ;

fields
  : IDENT {
      $$ = ctx->value(Value::Set, @$);
      Value* f = ctx->value(Value::Ident, @1);
      f->text = *$1;
      $$->items.push_back(f);
    }
  | fields ',' IDENT {
      $$ = $1;
      $$->loc = @$;
      Value* f = ctx->value(Value::Ident, @3);
      f->text = *$3;
      $$->items.push_back(f);
    }
  ;

opt_when
  : %empty { $$ = nullptr; }
  | WHEN cond { $$ = $2; }
  ;

call
  : IDENT '(' ')' {
      ctx->calls.emplace_back();
      $$ = &ctx->calls.back();
      $$->name = *$1; $$->name_loc = @1; $$->loc = @$;
    }
  | IDENT '(' arglist ')' {
      $$ = $3; $$->name = *$1; $$->name_loc = @1; $$->loc = @$;
    }
  | IDENT '(' arglist ',' ')' {
      $$ = $3; $$->name = *$1; $$->name_loc = @1; $$->loc = @$;
    }
  ;

arglist
  : arg {
      ctx->calls.emplace_back();
      $$ = &ctx->calls.back();
      $$->args.push_back($1);
    }
  | arglist ',' arg { $$ = $1; $$->args.push_back($3); }
  ;

arg
  : value {
      ctx->args.emplace_back();
      $$ = &ctx->args.back();
      $$->value = $1; $$->loc = @$;
    }
  | IDENT '=' value {
      ctx->args.emplace_back();
      $$ = &ctx->args.back();
      $$->name = *$1; $$->name_loc = @1; $$->value = $3; $$->loc = @$;
    }
  ;

value
  : INT
  | DURATION
  | STRING
  | ADDR
  | REGEX
  | IDENT { $$ = ctx->value(Value::Ident, @$); $$->text = *$1; }
  | IDENT '/' INT { $$ = ctx->value(Value::IdentPrefix, @$); $$->text = *$1; $$->i = $3->i; }
  | set
  | call { $$ = ctx->value(Value::CallV, @$); $$->call = $1; }
  ;

set
  : '{' '}' { $$ = ctx->value(Value::Set, @$); }
  | '{' set_items '}' { $$ = $2; $$->loc = @$; }
  | '{' set_items ',' '}' { $$ = $2; $$->loc = @$; }
  ;

set_items
  : value { $$ = ctx->value(Value::Set, @$); $$->items.push_back($1); }
  | set_items ',' value { $$ = $1; $$->items.push_back($3); }
  ;

cond
  : and_expr
  | cond OR and_expr {
      if ($1->kind == CondNode::Or && $1->lhs.empty()) {
        $$ = $1;  // flatten a or b or c: depth stays constant however long the chain
      } else {
        $$ = cond_node(ctx, CondNode::Or, @$);
        $$->kids.push_back($1);
      }
      $$->kids.push_back($3);
      $$->loc = @$;
    }
  ;

and_expr
  : unary
  | and_expr AND unary {
      if ($1->kind == CondNode::And && $1->lhs.empty()) {
        $$ = $1;
      } else {
        $$ = cond_node(ctx, CondNode::And, @$);
        $$->kids.push_back($1);
      }
      $$->kids.push_back($3);
      $$->loc = @$;
    }
  ;

unary
  : NOT unary {
      $$ = cond_node(ctx, CondNode::Not, @$);
      $$->kids.push_back($2);
    }
  | '(' cond ')' {
      // Parentheses end flattening: (a or b) or c keeps its grouping visible
      // to `--dump`, and the marker lhs stops the flatten check above.
      $$ = $2;
      if ($$->kind == CondNode::And || $$->kind == CondNode::Or) $$->lhs = "()";
      $$->loc = @$;
    }
  | IDENT cmp value {
      $$ = cond_node(ctx, CondNode::Test, @$);
      $$->lhs = *$1; $$->lhs_loc = @1;
      $$->op = static_cast<CondNode::Op>($2); $$->op_loc = @2;
      $$->rhs = $3;
    }
  ;

cmp
  : EQ { $$ = CondNode::Eq; }
  | NE { $$ = CondNode::Ne; }
  | IN { $$ = CondNode::In; }
  | '~' { $$ = CondNode::Match; }
  ;

%%

static std::string token_text(ParseCtx* ctx, const AMON_DSL_LTYPE& l) {
  if (l.first_off < 0 || l.last_off <= l.first_off || static_cast<size_t>(l.last_off) > ctx->src.size()) return {};
  std::string t(ctx->src.substr(l.first_off, l.last_off - l.first_off));
  if (t.size() > 40) t = t.substr(0, 37) + "...";
  return t;
}

static std::string symbol_name(yysymbol_kind_t s) {
  std::string n = yysymbol_name(s);
  if (n.size() >= 2 && n.front() == '"' && n.back() == '"') n = n.substr(1, n.size() - 2);
  return n;
}

static int yyreport_syntax_error(const yypcontext_t* pc, yyscan_t, ParseCtx* ctx) {
  yysymbol_kind_t la = yypcontext_token(pc);
  ctx->recovering = la != YYSYMBOL_EOL;
  // The scanner has already explained a bad character or literal.
  if (la == YYSYMBOL_LEXERR) return 0;
  const AMON_DSL_LTYPE& loc = *yypcontext_location(pc);
  std::string what;
  switch (la) {
    case YYSYMBOL_EOL:
      what = static_cast<size_t>(loc.first_off) >= ctx->src.size() ? "end of file" : "end of line";
      break;
    case YYSYMBOL_YYEOF: what = "end of file"; break;
    case YYSYMBOL_IDENT: what = "'" + token_text(ctx, loc) + "'"; break;
    default: {
      std::string t = token_text(ctx, loc);
      std::string n = symbol_name(la);
      if (n.front() == '\'' || n == t) what = "'" + t + "'";
      else what = t.empty() ? n : n + " '" + t + "'";
    }
  }
  yysymbol_kind_t expected[8];
  int n = yypcontext_expected_tokens(pc, expected, 8);
  std::string hint;
  if (n > 0) {
    hint = "expected ";
    for (int i = 0; i < n; ++i) {
      if (i) hint += (i + 1 == n) ? " or " : ", ";
      hint += symbol_name(expected[i]);
    }
  }
  amon::SourceLoc sl = ctx->where(loc);
  if (la == YYSYMBOL_EOL || la == YYSYMBOL_YYEOF) sl.end_col = sl.col + 1;
  ctx->diags->error(sl, "syntax error: unexpected " + what, hint);
  return 0;
}
