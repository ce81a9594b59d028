// Declarations of the built-in actions: names, parameters, the value types
// each accepts and its ActionKind. The language and the linter read these;
// what each kind does to a value is engine/runtime/actions_rt.cpp's.
#include "actions.h"

#include <string>

namespace amon::actions {

namespace {
constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kDay = 86400 * kSecond;
}  // namespace

void register_actions(Registry& r) {
  using VT = ValueType;
  using K = ActionKind;
  // Each action's kind is what the runtime dispatches on (never its name).
  auto add = [&r](K k, ActionDesc d) {
    d.kind = k;
    d.uses_zstore = k == K::Zanon;
    r.add_action(std::move(d));
  };
  const std::vector<VT> all{VT::Mac, VT::Addr, VT::Port, VT::Bytes, VT::Name, VT::Text};
  add(K::Keep, {"keep", "leave the field as it is", all, {}, /*protects=*/false});
  add(K::Zero, {"zero", "overwrite with zero bytes (length kept)", all, {}});
  add(K::Drop, {"drop", "do not deliver the packet to this consumer", all, {}});
  add(K::Timestamp, {"timestamp",
                "write the packet's arrival time into the 12 MAC bytes (see doc/language.md for the layout)",
                {VT::Mac},
                {}});
  add(K::Hash, {"hash",
                "keyed hash (SipHash) of the value, length kept; MACs stay unicast/multicast and become "
                "locally administered; bytes (gtp.teid, gre.key) become letters and digits drawn from it",
                {VT::Mac, VT::Addr, VT::Name, VT::Text, VT::Bytes},
                {{"key", ParamKind::Key, true, 0, 0, 0, {}, "", "key declared with `key NAME = ...`"}}});
  add(K::CryptoPan, {"cryptopan",
                "prefix-preserving Crypto-PAn (AES-128) on IPv4 and IPv6",
                {VT::Addr},
                {{"key", ParamKind::Key, true, 0, 0, 0, {}, "", "32-byte key declared with `key NAME = ...`"},
                 {"rotate", ParamKind::Duration, false, -1, 60 * kSecond, 366 * kDay, {}, "none",
                  "derive a new key every period (HKDF over the epoch number, see doc/cryptopan.md)"}}});
  add(K::Prefix, {"prefix",
                "keep the first N bits of IPv4 addresses (v6=M for IPv6; of a 6to4 address at most 16 + N), "
                "zero the rest",
                {VT::Addr},
                {{"bits", ParamKind::Int, true, 0, 0, 32, {}, "", "IPv4 bits kept"},
                 {"v6", ParamKind::Int, false, -1, 0, 128, {}, "48", "IPv6 bits kept"}},
                true, false});
  add(K::Cut, {"cut", "remove the bytes and fix every length field", {VT::Bytes}, {}, true, true});
  add(K::Snap, {"snap",
                 "remove the bytes from the record but keep every length field and the record's original "
                 "length, as a capture with a snap length does (capture outputs)",
                 {VT::Bytes}, {}, true, false});
  add(K::Redact, {"redact", "replace with a fixed filler of the same length ('x', dots kept in names)",
                {VT::Name, VT::Text, VT::Bytes},
                {{"shape", ParamKind::Ident, false, -1, 0, 0, {"labels", "length"}, "labels",
                  "what a redacted name keeps: labels (each label's length, dots in place) or length (the "
                  "total length only: dots become 'x' in text names (TLS SNI, HTTP), DNS names are re-cut "
                  "into labels of a fixed layout unless other names point inside them)"}}});
  add(K::Zanon, {"zanon",
                "z-anonymity: hide the value unless at least z distinct users were seen with it in the last dt",
                {VT::Addr, VT::Name, VT::Text},
                {{"z", ParamKind::Int, true, 0, 2, 64, {}, "", "distinct users needed to release a value"},
                 {"dt", ParamKind::Duration, true, 1, kSecond, 7 * kDay, {}, "", "window"},
                 {"fallback", ParamKind::ActionOrIdent, false, 2, 0, 0, {"sld", "redact", "zero"}, "redact/zero",
                  "what a consumer sees when the value is hidden: sld, redact, zero, prefix(N), hash(key=K)"}}});
}

}  // namespace amon::actions
