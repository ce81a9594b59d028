// A link layer's own values (l2l4.h, LinkLayer: 802.11 addresses, SSIDs,
// element contents), located in the consumer's copy before anything else
// of the packet is rewritten, and the frames of that layer that carry no IP.
//
// Without a rule of their own the values are protected as a privacy officer
// expects of a capture of people's radios: an address takes eth.src's rule
// (else eth.dst's), the MAC rules the policy wrote, so a station keeps one
// pseudonym over wire and air; a policy without MAC rules that protects
// anything zeroes them, as it does names (an SSID a phone probes for names
// a place its owner has been) and element contents (WPS device names,
// serial numbers). Group addresses name no station and stay.
#include "runtime_impl.h"

namespace amon {

bool ProgramInstance::link_rules(GenPacket& g, Eval& e) {
  const LinkLayer* L = link_layer();
  const int dlt = link_stand_in_dlt(g.buf, g.cap);
  if (!L || !dlt) return true;
  const Program& P = prog_;
  const auto& F = l2l4::g_fields;
  if (!link_occs_) link_occs_ = std::make_unique<LinkOccs>();
  LinkOccs& O = *link_occs_;
  L->locate(dlt, g.buf, g.cap, 14, O);
  const bool protects = P.protects_anything_;
  const FieldId mac_rule = !P.field_rules_[F.eth_src].empty()   ? F.eth_src
                           : !P.field_rules_[F.eth_dst].empty() ? F.eth_dst
                                                                : kNoField;
  auto ruled = [&](FieldId f) { return f < P.field_rules_.size() && !P.field_rules_[f].empty(); };
  for (uint32_t i = 0; i < O.n; ++i) {
    const ProtoOcc& o = O.occ[i];
    uint8_t* v = g.buf + o.off;
    if (o.off + o.len > g.cap) break;  // never: locate stops at the capture's end
    bool ok = true;
    switch (o.kind) {
      case OccKind::Mac: {
        if (v[0] & 1) break;
        const FieldId f = ruled(o.field) ? o.field : mac_rule;
        if (f != kNoField) ok = apply_mac_occ(f, v, e);
        else if (protects) std::memset(v, 0, 6);
        break;
      }
      case OccKind::Name:
        if (ruled(o.field)) {
          const names::Decision dec = decide_name(o.field, o.text, e);
          if (dec.action != names::Action::Keep) L->rewrite_name(g.buf, o, dec);
        } else if (protects) {
          std::memset(v, 0, o.len);
        }
        break;
      case OccKind::Bytes:
        if (ruled(o.field)) ok = apply_text(o.field, v, o.len, e);
        else if (protects) std::memset(v, 0, o.len);
        break;
      case OccKind::Addr4:
      case OccKind::Addr6:
      case OccKind::Payload:
        break;  // no link layer locates these
    }
    if (!ok || e.drop) return ++g.c.policy_drop, false;
  }
  return true;
}

// A frame with no IP: every byte located (management and control frames,
// null data); encrypted (a protected data frame), which the payload rule
// decides as it decides any payload: kept, cut, snapped, zeroed; or
// another protocol.
template <bool kL7Only>
Verdict ProgramInstance::link_body(GenPacket& g, Eval& e, ApplyCtx& ctx) {
  const Program& P = prog_;
  const Decoded& d = g.d;
  const uint32_t off = std::min<uint32_t>(d.l3_off, g.cap);
  if (d.link_body == uint8_t(LinkBody::Unknown)) {
    // Another protocol (an A-MSDU's subframes with their own addresses,
    // EAPOL, ARP): on_unknown as the policy set it; by default what
    // follows the link header is cut when the policy protects anything
    // (a frame whose fields were protected does not go out with its body
    // unread).
    if (P.policy_->on_unknown != dsl::Policy::OnUnknown::Default || !P.protects_anything_) return undecoded(g);
    ++g.c.unknown_cut;
    g.cap = g.wire = std::max<uint32_t>(off, 14);
    return Verdict::Forward;
  }
  if (d.link_body == uint8_t(LinkBody::Located)) {
    // Nothing the walk did not read leaves when anything is protected.
    if (P.protects_anything_ && d.good_until < g.cap) g.cap = g.wire = std::max<uint32_t>(d.good_until, 14);
    return Verdict::Forward;
  }
  if (d.link_body != uint8_t(LinkBody::Opaque) || kL7Only) return Verdict::Forward;
  const auto& F = l2l4::g_fields;
  int prule = pick(F.payload, e);
  if (prule < 0) prule = P.payload_default_plan_;
  if (prule < 0 || !actions_[prule]->modifies || off >= g.cap) return Verdict::Forward;
  RtAction& a = *actions_[prule];
  ctx.field = F.payload;
  const ActResult r = a.bytes(g.buf + off, g.cap - off, ctx);
  if (r == ActResult::Drop) return ++g.c.policy_drop, Verdict::Drop;
  if (r == ActResult::Cut) g.cap = g.wire = off;
  else if (a.snaps) snap_at_ = std::min(snap_at_, off);
  return Verdict::Forward;
}

template Verdict ProgramInstance::link_body<true>(GenPacket&, Eval&, ApplyCtx&);
template Verdict ProgramInstance::link_body<false>(GenPacket&, Eval&, ApplyCtx&);

}  // namespace amon
