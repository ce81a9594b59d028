// The compiled form of a policy file: what the engine runs and the linter checks.
//
// One compile function serves `amon lint`, start-up and reload, so a policy
// that lints clean is exactly a policy the engine accepts.
#pragma once

#include <array>
#include <cstring>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "registry.h"

namespace amon::dsl {

struct Diagnostic {
  enum class Severity { Error, Warning, Note } severity = Severity::Error;
  SourceLoc loc;
  std::string message, hint;
};

class Diagnostics {
 public:
  void error(const SourceLoc& loc, std::string msg, std::string hint = {});
  void warning(const SourceLoc& loc, std::string msg, std::string hint = {});
  void note(const SourceLoc& loc, std::string msg, std::string hint = {});
  void add(Diagnostic d);

  // Source text of every file read, so carets can be drawn after compilation.
  void add_source(const std::string& file, std::string text);
  const std::string* source(const std::string& file) const;

  const std::vector<Diagnostic>& all() const { return diags_; }
  size_t errors() const { return errors_; }
  size_t warnings() const { return warnings_; }
  bool empty() const { return diags_.empty(); }
  void clear();
  // Orders diagnostics [from, end) by file (in the order sources were added),
  // line and column; notes stay with the diagnostic they follow.
  void sort_by_location(size_t from = 0);

  // `file:line:col: error: msg`, the source line, ^~~~ under [col,end_col),
  // `hint: ...`. `lookup` overrides the stored sources (nullptr: use them).
  std::string render_text(const std::function<const std::string*(const std::string&)>& lookup = nullptr) const;
  // A JSON array, one object per diagnostic:
  // {"severity","file","line","col","end_col","message","hint"}.
  std::string render_json() const;

 private:
  std::vector<Diagnostic> diags_;
  std::map<std::string, std::string> sources_;
  std::vector<std::string> source_order_;
  size_t errors_ = 0, warnings_ = 0;
};

struct Cidr {
  uint8_t family = 4;  // 4 or 6
  std::array<uint8_t, 16> addr{};
  uint8_t len = 0;
  // `a` points at 4 (family 4) or 16 (family 6) bytes in network order.
  // Inline, as word compares: every packet asks it of both its ends for
  // each entry of each consumer's `clients`.
  bool contains(uint8_t fam, const uint8_t* a) const {
    if (fam != family) return false;
    if (family == 4) {
      uint32_t x, y;
      std::memcpy(&x, a, 4);
      std::memcpy(&y, addr.data(), 4);
      return ((__builtin_bswap32(x) ^ __builtin_bswap32(y)) & mask_bits(len)) == 0;
    }
    uint64_t x[2], y[2];
    std::memcpy(x, a, 16);
    std::memcpy(y, addr.data(), 16);
    const unsigned hi = len < 64 ? len : 64, lo = len > 64 ? len - 64u : 0u;
    return ((__builtin_bswap64(x[0]) ^ __builtin_bswap64(y[0])) & mask_bits64(hi)) == 0 &&
           ((__builtin_bswap64(x[1]) ^ __builtin_bswap64(y[1])) & mask_bits64(lo)) == 0;
  }
  std::string to_string() const;

 private:
  static uint32_t mask_bits(unsigned n) { return n == 0 ? 0 : n >= 32 ? ~0u : ~0u << (32 - n); }
  static uint64_t mask_bits64(unsigned n) { return n == 0 ? 0 : n >= 64 ? ~0ull : ~0ull << (64 - n); }
};

// Condition tree of `when` and `select`. And/Or hold two or more children,
// Not one. A FieldCmp holds exactly one kind of value list, chosen by the
// field's type: cidrs (Addr), macs (Mac), ints (Port), strings (Name, Text),
// regexes (op Match, any type but Mac/Addr/Port).
struct Cond {
  enum class Kind : uint8_t { And, Or, Not, ProtoIn, FieldCmp };
  enum class Op : uint8_t { Eq, Ne, In, Match };
  struct Regex {
    std::string source;  // as written between the slashes, `\/` unescaped
    std::string flags;   // as written: i, s, m
    unsigned hs_flags = 0;  // the matching Hyperscan HS_FLAG_* bits
  };

  Kind kind = Kind::And;
  SourceLoc loc;
  std::vector<std::shared_ptr<const Cond>> children;  // And, Or, Not
  std::vector<std::string> protocols;                 // ProtoIn: any of these is present
  const FieldDesc* field = nullptr;                   // FieldCmp
  Op op = Op::Eq;                                     // FieldCmp: Eq/Ne one value, In a set, Match regexes
  std::vector<Cidr> cidrs;
  std::vector<std::array<uint8_t, 6>> macs;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Regex> regexes;
};

struct Rule {
  std::vector<const FieldDesc*> fields;
  ActionCall action;
  std::shared_ptr<const Cond> when;  // null: unconditional
  SourceLoc loc;
  std::string text;  // the rule as written (one line, whitespace collapsed)
  uint32_t index = 0;
};

struct Policy {
  std::string path;
  const FieldDesc* identifier = nullptr;  // default ip.client
  int identifier_prefix = -1;             // ip.client/64 -> 64
  std::vector<Cidr> clients;
  enum class OnError { Drop, Cut, Snap } on_error = OnError::Cut;
  enum class OnUnknown { Default, Drop, Keep, Cut } on_unknown = OnUnknown::Default;
  std::optional<ActionCall> payload_default;
  enum class AddrText { Map, Keep } addr_text = AddrText::Map;
  // `echoes`: kept payload searched for the values the policy rewrote (map) or not (keep).
  enum class Echoes { Map, Keep } echoes = Echoes::Map;
  std::vector<std::shared_ptr<const KeyMaterial>> keys;
  std::vector<Rule> rules;  // source order, includes expanded in place
  std::string select_bpf;
  std::shared_ptr<const Cond> select_cond;
  SourceLoc select_loc;  // select_bpf and select_cond empty: every packet
};

struct CompileOptions {
  // Only tests relax this: git cannot store a key file's 0600 mode.
  bool check_key_permissions = true;
  size_t max_file_bytes = 256 * 1024;
  size_t max_line_bytes = 4096;
  int max_nesting = 32;        // brackets and `not` in one statement
  int max_include_depth = 16;
  // Environment lookup for `env("VAR")`; null: getenv.
  std::function<const char*(const char*)> getenv;
};

std::shared_ptr<const Policy> compile_file(const std::string& path, Diagnostics& diags,
                                           const CompileOptions& opts = {});
// Includes and key files are resolved relative to the current directory.
std::shared_ptr<const Policy> compile_string(std::string_view src, const std::string& name, Diagnostics& diags,
                                             const CompileOptions& opts = {});

// Privacy checks of how rules relate (lint_privacy.cpp): the server side
// weaker than the client side, or tunnel endpoints inheriting it, with no
// `clients`; a name protected in DNS but in clear in TLS SNI (QUIC too) or
// the HTTP Host, or the reverse. `in_clear`: the field leaves in clear.
void lint_privacy(const Policy& pol, const Registry& reg, Diagnostics& d,
                  const std::function<bool(const FieldDesc&)>& in_clear);

std::string dump(const Policy& p);
std::string to_string(const ActionCall& c);  // canonical `zanon(z=10, dt=1h, fallback=sld)`
// Warns of each field split from a catch-all that takes a catch-all rule
// of `pol` because no rule names it (lint_catch_all.cpp).
void lint_catch_alls(const Policy& pol, const Registry& reg, Diagnostics& d);
std::string to_string(const Cond& c);
std::string format_duration(int64_t ns);

// CLI entry points; argv excludes the subcommand word.
int lint_main(int argc, char** argv);    // amon lint [--format text|json] [--strict] [--dump] FILE...
int fields_main(int argc, char** argv);  // amon fields
int actions_main(int argc, char** argv); // amon actions
std::string registry_markdown();
// Checks (update=false) or rewrites (update=true) the generated block of a
// markdown file; returns 0 when in sync or rewritten, 1 on drift, 2 on failure.
int doc_sync(const std::string& markdown_path, bool update, std::string& message);

}  // namespace amon::dsl
