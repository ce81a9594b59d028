#include "values.h"

#include <cstring>
#include <iterator>

namespace amon {

PayloadValues::PayloadValues(Datagrams d) : datagrams_(d) {
  for (const ProtocolPlugin* p : Registry::instance().protocols()) {
    if (!p->parse) continue;
    readers_.push_back({p, p->make_state ? p->make_state() : nullptr, std::make_unique<ProtoOccs>()});
  }
}

PayloadValues::~PayloadValues() {
  for (Reader& r : readers_)
    if (r.plugin->free_state) r.plugin->free_state(r.state);
}

bool PayloadValues::wants(const Reader& r, uint8_t l4, const uint8_t* payload, uint32_t len, uint16_t sport,
                          uint16_t dport) const {
  const ProtocolPlugin& p = *r.plugin;
  if (p.l4_proto != l4 || !len) return false;
  if (l4 != 17 || datagrams_ == Datagrams::Every) return true;
  for (uint16_t port : p.ports) {
    if (!port) break;
    if (port == sport || port == dport) return true;
  }
  return p.probe && p.probe(payload, len, sport, dport);
}

bool PayloadValues::split_head(const uint8_t* payload, uint32_t len, uint16_t sport, uint16_t dport,
                               bool from_initiator) {
  if (!len) return false;
  // Whose the segment is, as the engine tells it: a plugin whose port is at
  // either end first (a ClientHello on 443 is TLS's, although its first
  // bytes also pass DNS's message_start); on other ports, one whose strict
  // message start it passes. A plugin's parse alone takes most bytes for
  // the start of a longer message (a DNS length prefix), and a flow
  // followed for nothing costs a copy of each of its segments up to the
  // bound.
  auto on = [&](const ProtocolPlugin& p) {
    for (const uint16_t* ports : {p.ports, p.server_ports})
      for (unsigned i = 0; i < (ports == p.ports ? std::size(p.ports) : std::size(p.server_ports)); ++i)
        if (ports[i] && (ports[i] == sport || ports[i] == dport)) return true;
    return false;
  };
  bool by_port = false;
  for (const Reader& r : readers_) by_port = by_port || (r.plugin->l4_proto == 6 && on(*r.plugin));
  for (Reader& r : readers_) {
    const ProtocolPlugin& p = *r.plugin;
    if (p.l4_proto != 6 || !p.holds) continue;
    if (by_port ? !on(p) : !(p.message_start && p.message_start(payload, len, from_initiator))) continue;
    uint8_t flow_state[kAppStateBytes];
    std::memset(flow_state, 0, sizeof flow_state);
    ProtoPacket pkt{payload, len, sport, dport, nullptr, nullptr, 0, from_initiator, false, flow_state};
    ProtoOccs& out = *r.occs;
    out.clear();
    if (p.parse(r.state, pkt, out) == ProtoStatus::Incomplete && out.hold) return true;
  }
  return false;
}

void PayloadValues::parse(Reader& r, const uint8_t* payload, uint32_t len, uint16_t sport, uint16_t dport,
                          bool from_initiator, void* ctx, Sink sink, bool ends) {
  const ProtocolPlugin& p = *r.plugin;
  // A flow's state as at its start, so that a plugin reads the payload as
  // it would a flow's first (a hello split over segments is read from its
  // first part, as the packet path does).
  uint8_t flow_state[kAppStateBytes];
  std::memset(flow_state, 0, sizeof flow_state);
  ProtoPacket pkt{payload, len, sport, dport, nullptr, nullptr, 0, from_initiator, false, flow_state};
  pkt.ends = ends;
  ProtoOccs& out = *r.occs;
  out.clear();
  if (p.parse(r.state, pkt, out) != ProtoStatus::Parsed) return;
  if (p.values) {
    struct Ctx {
      const ProtocolPlugin& p;
      void* ctx;
      Sink sink;
    } c{p, ctx, sink};
    p.values(r.state, payload, len, [](void* v, const ProtoOcc& o) {
      auto& c = *static_cast<Ctx*>(v);
      c.sink(c.ctx, c.p, o);
    }, &c);
    return;
  }
  for (uint32_t i = 0; i < out.n; ++i)
    if (out.occ[i].kind != OccKind::Payload) sink(ctx, p, out.occ[i]);
}

}  // namespace amon
