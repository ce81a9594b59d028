// The application analysis once per packet, before the consumers: detects
// the protocol, parses it, and tells the flow's stream state (StreamTracker) what the parse found.
#include "runtime_impl.h"
#include "stream.h"

namespace amon {

namespace {

// A protocol plugin whose content probe recognises this payload, among
// those some consumer protects (`apps`) and not already probed by
// detect_app (probe_always): its application, or Other.
App plugin_by_probe(const uint8_t* pl, uint32_t avail, const Decoded& d, uint32_t apps) {
  const auto& v = Registry::instance().protocols();
  for (size_t i = 0; i < v.size(); ++i)
    if ((apps >> (kFirstPluginApp + i) & 1) && v[i]->probe && !v[i]->probe_always && v[i]->l4_proto == d.l4_proto &&
        v[i]->probe(pl, avail, d.sport, d.dport))
      return App(kFirstPluginApp + i);
  return App::Other;
}

// A protocol plugin's parse of one packet (or of a stream reassembled from
// held segments) into P.occs. What it says of the bytes that follow drives
// the flow's stream state, as the runtime's own TCP parses do: bytes still
// to come (pending), those of them that carry no field (names_done), the
// payload that follows the message (body, unbounded), and whether holding
// the segment would complete it (hold_hint).
// Inlined: the datagram shortcut takes it for every packet.
inline __attribute__((always_inline)) L7State parse_plugin(const ProtocolPlugin& pp, uint8_t app,
                                                           const ProtoPacket& pkt, FlowState* fs, int dir,
                                                           L7Parse& P) {
  ProtoOccs& O = *P.occs;
  O.clear();
  const ProtoStatus st = pp.parse(P.state_of(app), pkt, O);
  if (fs) {
    if (O.done) fs->app_done |= 1u << dir;
    StreamTracker(*fs, dir).after_parse(O, st == ProtoStatus::Parsed, pp.l4_proto == kProtoTcp);
  }
  P.hold_hint = O.hold && st == ProtoStatus::Incomplete && pp.holds;
  switch (st) {
    case ProtoStatus::None: return L7State::None;
    case ProtoStatus::Parsed: return L7State::Parsed;
    case ProtoStatus::Incomplete: return L7State::Incomplete;
    case ProtoStatus::Malformed: break;
  }
  return L7State::Malformed;
}

// A packet's payload as a plugin's parse sees it. A flow of a plugin that
// numbers its flows gets its number at its first message.
inline __attribute__((always_inline)) ProtoPacket plugin_packet(const uint8_t* p, const Decoded& d, uint32_t avail,
                                                                bool from_init, FlowState* fs,
                                                                const ProtocolPlugin& pp, L7Parse& P) {
  ProtoPacket pkt{p + d.payload_off, avail, d.sport, d.dport, nullptr, nullptr, 0, from_init,
                  d.payload_off + d.payload_len > d.cap_len, fs ? fs->app_state : nullptr};
  if (d.has_ip() && d.dst_off() + d.addr_len() <= d.cap_len)
    pkt.src = p + d.src_off(), pkt.dst = p + d.dst_off(), pkt.addr_len = uint8_t(d.addr_len());
  if (fs && pp.numbered) {
    if (!fs->flow_no && !(fs->flow_no = ++P.flow_numbers)) fs->flow_no = ++P.flow_numbers;  // 0 means "none"
    pkt.flow_no = fs->flow_no;
  }
  return pkt;
}

}  // namespace

void analyze_l7(const uint8_t* p, const Decoded& d, PacketMeta& m, L7Parse& P) {
  m.parse = &P;
  m.l7 = L7State::None;
  if (d.status != DecodeStatus::Ok || (d.flags & kFlagLaterFragment)) return;
  if (!d.l4_hdr_len && !ip_message_app(d)) return;
  FlowState* fs = m.flow;
  const uint32_t end = std::min<uint32_t>(d.cap_len, d.payload_off + d.payload_len);
  const uint32_t avail = end > d.payload_off ? end - d.payload_off : 0;
  // A datagram on the ports of the plugin with the shortcut (DNS over UDP:
  // the bulk of a resolver link): what the steps below conclude for it,
  // without their questions. UDP flows never set the stream fields
  // (pending, body, released, stream_failed: TCP only), so only the flow's
  // number and the parse remain.
  const Shortcut& S = P.shortcut;
  if (d.l4_proto == kProtoUdp && S.port(d.sport, d.dport)) {
    m.app = S.app;
    if (avail == 0) return;
    if (const auto pd = S.parse_datagram) {
      // parse_plugin's steps that a datagram without occurrences reaches
      // (hold_hint is false already: the packet's L7Parse::reset).
      if (fs && S.numbered && !fs->flow_no && !(fs->flow_no = ++P.flow_numbers)) fs->flow_no = ++P.flow_numbers;
      if (S.clear_occs) P.occs->clear();
      if (d.payload_off + d.payload_len > d.cap_len) m.l7 = L7State::Incomplete;  // cut short by the capture
      else m.l7 = pd(P.shortcut_state, p + d.payload_off, avail) ? L7State::Parsed : L7State::Malformed;
      return;
    }
    const bool from_init = m.initiator_is_src;
    m.l7 = parse_plugin(*S.pp, S.app, plugin_packet(p, d, avail, from_init, fs, *S.pp, P), fs, from_init ? 0 : 1, P);
    return;
  }
  const bool from_init = m.initiator_is_src;
  const int dir = from_init ? 0 : 1;
  App app = fs && fs->app ? App(fs->app) : detect_app(p, d, from_init, P.probe_scratch);
  if (app == App::Other && P.probe_apps && avail)
    app = plugin_by_probe(p + d.payload_off, avail, d, P.probe_apps);
  if (fs && !fs->app && avail && d.l4_proto == kProtoTcp && app != App::Other) fs->app = uint8_t(app);
  m.app = uint8_t(app);
  if (avail == 0 || app == App::Other || app == App::Unknown) return;
  const uint8_t* pl = p + d.payload_off;
  const ProtocolPlugin* pp = plugin_of(uint8_t(app));
  if (fs && d.l4_proto == kProtoTcp) {
    StreamTracker st(*fs, dir);
    if (pp && pp->ordered) {
      switch (st.order(*pp, pl, avail, tcp_seq(p, d), d.payload_len, from_init, P.gaps)) {
        case StreamTracker::Order::InOrder: break;
        case StreamTracker::Order::Closed: m.l7 = L7State::Incomplete; return;
        case StreamTracker::Order::Repeat: {
          // A repeated segment that starts with a message is parsed as one,
          // whole within the segment, and leaves the stream's counts as they
          // were; any other repeat fails closed.
          m.l7 = L7State::Incomplete;
          if (!pp->message_start(pl, avail, from_init)) return;
          const StreamTracker::Counts counts = st.set_aside();
          if (parse_plugin(*pp, uint8_t(app), plugin_packet(p, d, avail, from_init, fs, *pp, P), fs, dir, P) ==
              L7State::Parsed)
            m.l7 = L7State::Parsed;
          P.hold_hint = false;
          st.restore(counts);
          return;
        }
      }
    } else if (st.closed(pp, pl, avail, tcp_seq(p, d), d.payload_len, from_init, P.gaps)) {
      m.l7 = L7State::Incomplete;
      return;
    }
  }
  if (fs && StreamTracker(*fs, dir).continues(d.payload_len, m.l7)) return;
  if (pp) {
    if (fs && (fs->app_done >> dir & 1)) return;  // nothing more of its own in this direction
    if (fs && StreamTracker(*fs, dir).unbounded()) {
      // Inside a payload of unknown length: only a new message ends it.
      if (!pp->payload_ends(pl, avail, detect_app(p, d, from_init, P.probe_scratch) == app)) return;
      StreamTracker(*fs, dir).end_unbounded();
    }
    m.l7 = parse_plugin(*pp, uint8_t(app), plugin_packet(p, d, avail, from_init, fs, *pp, P), fs, dir, P);
    m.names_echo = P.occs->echo;
    return;
  }
}

L7State analyze_stream(const uint8_t* b, uint32_t len, uint8_t app, bool from_initiator, FlowState* fs, L7Parse& P,
                       bool ends) {
  P.packet = ~0ULL;  // the next packet parses anew
  P.hold_hint = false;
  const int dir = from_initiator ? 0 : 1;
  if (fs) StreamTracker(*fs, dir).stream_parse();
  if (const ProtocolPlugin* pp = plugin_of(app))
    return parse_plugin(*pp, app,
                        {b, len, 0, 0, nullptr, nullptr, 0, from_initiator, false, fs ? fs->app_state : nullptr,
                         fs ? fs->flow_no : 0, ends},
                        fs, dir, P);
  return L7State::None;
}

}  // namespace amon
