// The application analysis once per packet, before the consumers: detects
// the protocol, parses it, keeps the flow's stream state.
#include "runtime_impl.h"

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
  if (fs && pp.l4_proto == kProtoTcp) {
    if (O.need) fs->pending[dir] = O.need;
    if (st == ProtoStatus::Parsed && O.rest_clear && fs->pending[dir]) fs->names_done |= uint8_t(1u << dir);
  }
  if (fs && O.done) fs->app_done |= 1u << dir;
  if (fs && O.payload_left) fs->body[dir] = O.payload_left;
  if (fs && O.payload_open) fs->unbounded[dir] = 1;
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

uint32_t tcp_seq(const uint8_t* p, const Decoded& d) {
  return uint32_t(p[d.l4_off + 4]) << 24 | uint32_t(p[d.l4_off + 5]) << 16 | uint32_t(p[d.l4_off + 6]) << 8 |
         p[d.l4_off + 7];
}

// A plugin whose messages are framed by counting bytes (ProtocolPlugin::
// ordered: bodies of a known length, chunks, heads held until complete)
// follows them rightly only while the segments come in order. released_end is the sequence number the direction
// expects next. A repeated segment (a retransmission, or a capture that saw
// a packet twice) is outside the count (Repeat). A gap (a lost or unseen segment) that may have held the
// start of a head loses the message boundaries: the direction fails closed
// (stream_failed) until a segment begins with a message's first line
// (ProtocolPlugin::message_start), where the parse starts afresh.
enum class Order : uint8_t { InOrder, Closed, Repeat };
Order in_order(const ProtocolPlugin& pp, const uint8_t* pl, uint32_t avail, const Decoded& d, const uint8_t* p,
               bool from_init, FlowState* fs, int dir) {
  const uint8_t bit = uint8_t(1u << dir);
  const uint32_t seq = tcp_seq(p, d);
  if (fs->released & bit) {
    const int32_t delta = int32_t(seq - fs->released_end[dir]);
    if (delta < 0 && delta > -(1 << 30)) {
      // Bytes seen before; any new ones past them were not counted.
      if (int32_t(seq + d.payload_len - fs->released_end[dir]) > 0) {
        fs->stream_failed |= bit;
        fs->released_end[dir] = seq + d.payload_len;
        return Order::Closed;
      }
      return Order::Repeat;
    }
    if (delta > 0) {
      // Lost bytes inside a body of known length are body bytes: the count
      // goes on past them. Inside a body of unknown length only a message
      // start ends it, gap or not (analyze_l7). Anything else may have held
      // a head's start.
      if (fs->body[dir] >= uint32_t(delta)) fs->body[dir] -= uint32_t(delta);
      else if (!fs->unbounded[dir]) fs->stream_failed |= bit;
    } else if (delta != 0) {
      fs->stream_failed |= bit;
    }
  }
  fs->released |= bit;
  fs->released_end[dir] = seq + d.payload_len;
  if (!(fs->stream_failed & bit)) return Order::InOrder;
  if (!pp.message_start(pl, avail, from_init)) return Order::Closed;
  fs->stream_failed &= uint8_t(~bit);
  fs->pending[dir] = fs->body[dir] = 0;
  fs->unbounded[dir] = 0;
  return Order::InOrder;
}

}  // namespace

void analyze_l7(const uint8_t* p, const Decoded& d, PacketMeta& m, L7Parse& P) {
  m.parse = &P;
  m.l7 = L7State::None;
  if (d.status != DecodeStatus::Ok || !d.l4_hdr_len || (d.flags & kFlagLaterFragment)) return;
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
  if (fs && d.l4_proto == kProtoTcp && pp && pp->ordered) {
    switch (in_order(*pp, pl, avail, d, p, from_init, fs, dir)) {
      case Order::InOrder: break;
      case Order::Closed: m.l7 = L7State::Incomplete; return;
      case Order::Repeat: {
        // A repeated segment that starts with a message is parsed as one,
        // whole within the segment, and leaves the stream's counts as they
        // were; any other repeat fails closed.
        m.l7 = L7State::Incomplete;
        if (!pp->message_start(pl, avail, from_init)) return;
        const uint32_t pend = fs->pending[dir], body = fs->body[dir];
        const uint8_t unb = fs->unbounded[dir];
        fs->pending[dir] = fs->body[dir] = 0;
        fs->unbounded[dir] = 0;
        if (parse_plugin(*pp, uint8_t(app), plugin_packet(p, d, avail, from_init, fs, *pp, P), fs, dir, P) == L7State::Parsed) m.l7 = L7State::Parsed;
        P.hold_hint = false;
        fs->pending[dir] = pend, fs->body[dir] = body, fs->unbounded[dir] = unb;
        return;
      }
    }
  } else if (fs && d.l4_proto == kProtoTcp) {
    // A header of this direction could not be completed: what follows may
    // be its rest, and nothing marks where it ends.
    if (fs->stream_failed & (1u << dir)) {
      m.l7 = L7State::Incomplete;
      return;
    }
    // A retransmission of bytes rewritten from a held stream: its slice of
    // that rewrite is gone, so it cannot be rewritten the same way.
    if (fs->released & (1u << dir)) {
      int32_t delta = int32_t(tcp_seq(p, d) - fs->released_end[dir]);
      if (delta < 0 && delta > -(1 << 30)) {
        m.l7 = L7State::Incomplete;
        return;
      }
    }
  }
  if (fs && fs->pending[dir]) {
    fs->pending[dir] -= std::min<uint32_t>(fs->pending[dir], d.payload_len);
    // The rest of a ClientHello whose SNI was already found and rewritten
    // holds no name (one server_name extension per hello, RFC 8446 4.2).
    m.l7 = (fs->names_done & (1u << dir)) ? L7State::None : L7State::Incomplete;
    if (!fs->pending[dir]) fs->names_done &= uint8_t(~(1u << dir));
    return;
  }
  if (fs && fs->body[dir]) {  // body bytes of a known length: nothing to parse
    uint64_t used = std::min<uint64_t>(fs->body[dir], d.payload_len);
    fs->body[dir] -= used;
    if (used == d.payload_len) return;
    m.l7 = L7State::Incomplete;  // a new head starts inside this segment: not located
    return;
  }
  if (pp) {
    if (fs && (fs->app_done >> dir & 1)) return;  // nothing more of its own in this direction
    if (fs && fs->unbounded[dir]) {
      // Inside a payload of unknown length: only a new message ends it.
      if (!pp->payload_ends(pl, avail, detect_app(p, d, from_init, P.probe_scratch) == app)) return;
      fs->unbounded[dir] = 0;
    }
    m.l7 = parse_plugin(*pp, uint8_t(app), plugin_packet(p, d, avail, from_init, fs, *pp, P), fs, dir, P);
    m.names_echo = P.occs->echo;
    return;
  }
}

L7State analyze_stream(const uint8_t* b, uint32_t len, uint8_t app, bool from_initiator, FlowState* fs, L7Parse& P) {
  P.packet = ~0ULL;  // the next packet parses anew
  P.hold_hint = false;
  const int dir = from_initiator ? 0 : 1;
  if (fs) fs->pending[dir] = 0, fs->names_done &= uint8_t(~(1u << dir));
  if (const ProtocolPlugin* pp = plugin_of(app))
    return parse_plugin(
        *pp, app,
        {b, len, 0, 0, nullptr, nullptr, 0, from_initiator, false, fs ? fs->app_state : nullptr, fs ? fs->flow_no : 0},
        fs, dir, P);
  return L7State::None;
}

}  // namespace amon
