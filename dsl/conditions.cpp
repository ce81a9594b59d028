// Conditions (`when`, `select`): protocol tests and field tests, with the
// address, MAC and regex literals they compare with.
#include "compiler.h"

#include <arpa/inet.h>
#include <hs/hs.h>

#include <cstdlib>
#include <cstring>

namespace amon::dsl {

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

  if (n.lhs == "proto") return compile_proto_test(ctx, n, items, c);
  return compile_field_test(ctx, n, items, c);
}

// `proto == p`, `proto != p`, `proto in { ... }`.
std::shared_ptr<Cond> Compiler::compile_proto_test(ParseCtx& ctx, const CondNode& n,
                                                  const std::vector<const Value*>& items, std::shared_ptr<Cond> c) {
  SourceLoc op_at = ctx.where(n.op_loc);
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

// A field compared with values of its type, or matched with a regex.
std::shared_ptr<Cond> Compiler::compile_field_test(ParseCtx& ctx, const CondNode& n,
                                                  const std::vector<const Value*>& items, std::shared_ptr<Cond> c) {
  const Value& v = *n.rhs;
  SourceLoc vat = ctx.where(v.loc);
  SourceLoc op_at = ctx.where(n.op_loc);
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

}  // namespace amon::dsl
