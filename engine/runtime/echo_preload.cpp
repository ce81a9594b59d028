#include "echo_preload.h"

#include <cstring>

#include "actions_rt.h"
#include "protocol.h"

namespace amon {

EchoCollector::EchoCollector(const Program& p) : addrs_(p.echo_preload_addrs()) {
  const dsl::Policy& pol = p.policy();
  rule_.assign(Registry::instance().fields().size(), -1);
  named_.assign(rule_.size(), 0);
  name_dec_.resize(rule_.size());
  act_.resize(pol.rules.size());
  if (const FieldDesc* h = Registry::instance().field("dhcp.hostname")) host_ = p.echo_preload_name(h->id, host_dec_);
  for (FieldId f = 0; f < rule_.size(); ++f) {
    named_[f] = p.has_rules(f);
    if (p.echo_preload_name(f, name_dec_[f])) {
      named_[f] = 2, wants_ = true;
      continue;
    }
    const int ri = p.echo_preload_rule(f);
    if (ri < 0) continue;
    rule_[f] = ri;
    // The actions it takes use no shared service (no z-store).
    if (!act_[ri]) act_[ri] = make_rt_action(pol.rules[ri].action, pol, nullptr, nullptr);
    wants_ = true;
  }
}

EchoCollector::~EchoCollector() = default;

void EchoCollector::occurrences(const ProtoOccs& O, const uint8_t* pl, uint32_t avail) {
  for (uint32_t i = 0; i < O.n; ++i) {
    const ProtoOcc& o = O.occ[i];
    if (o.kind == OccKind::Name && o.field < named_.size() && named_[o.field] == 2)
      name(o.text, o.shown, name_dec_[o.field]);
    if (o.kind != OccKind::Bytes || o.field >= rule_.size() || rule_[o.field] < 0) continue;
    if (o.len < EchoScan::kMinBytes || o.off > avail || o.len > avail - o.off) continue;
    if (o.coded && (o.key > avail || o.len > avail - o.key)) continue;
    old_.assign(reinterpret_cast<const char*>(pl + o.off), o.len);
    if (o.coded)
      for (uint32_t k = 0; k < o.len; ++k) old_[k] = char(old_[k] ^ pl[o.key + k]);
    // As ProgramInstance::apply_text rewrites it: the action on the whole
    // value (a hash is of all of it), cut() clearing it.
    new_ = old_;
    ApplyCtx ctx;
    ctx.field = o.field;
    const ActResult r = act_[rule_[o.field]]->bytes(reinterpret_cast<uint8_t*>(new_.data()), o.len, ctx);
    if (r == ActResult::Drop) continue;
    if (r == ActResult::Cut) std::memset(new_.data(), 0, new_.size());
    const uint32_t keep = std::min<uint32_t>(o.len, EchoScan::kMaxValue);
    out_->add(std::string_view(old_).substr(0, keep), std::string_view(new_).substr(0, keep));
  }
}

void EchoCollector::name(std::string_view text, std::string_view shown, const names::Decision& d) {
  out_->add_name(text, d);
  if (!shown.empty()) out_->add_name(shown, d);
}

void EchoCollector::nbns_name(const ProtoOcc& o) {
  if (o.kind != OccKind::Name || o.field >= named_.size()) return;
  const names::Decision* d = named_[o.field] == 2 ? &name_dec_[o.field] : !named_[o.field] && host_ ? &host_dec_ : nullptr;
  if (!d) return;
  char plain[15];
  name(o.text, std::string_view(plain, names::netbios_plain(o.text, plain)), *d);
}

}  // namespace amon
