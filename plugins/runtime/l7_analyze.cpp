// The application analysis once per packet, before the consumers: detects
// the protocol, parses it, keeps the flow's stream state.
#include "runtime_impl.h"

namespace amon {

namespace {

// Follows the server's TLS records across segments and tells whether this
// segment carries handshake bytes sent before encryption starts: in TLS 1.2
// and earlier they hold the server's certificate chain, which names the
// server. A TLS 1.3 ServerHello (supported_versions 0x0304) ends the watch:
// everything after it is encrypted. Losing the record boundaries (a record
// header split over segments, a gap, garbage) keeps the watch on: fail closed.
bool tls_server_records(const uint8_t* pl, uint32_t avail, FlowState* fs) {
  if (!fs) return true;  // no flow: nothing says where records start
  if (fs->tls_srv == 1) return false;
  if (fs->tls_srv == 2) return true;
  bool hs = false;
  uint32_t off = 0;
  if (fs->tls_srv_left) {
    uint32_t k = std::min<uint32_t>(fs->tls_srv_left, avail);
    hs = fs->tls_srv_type == 22;
    fs->tls_srv_left = uint16_t(fs->tls_srv_left - k);
    off = k;
  }
  while (off < avail) {
    if (avail - off < 5) {
      fs->tls_srv = 2;
      return true;
    }
    const uint8_t type = pl[off];
    const uint32_t len = uint32_t(pl[off + 3]) << 8 | pl[off + 4];
    if (type < 20 || type > 24 || pl[off + 1] != 3 || len > 18432) {
      fs->tls_srv = 2;
      return true;
    }
    if (type == 23) {  // application data: the handshake is over
      fs->tls_srv = 1;
      fs->tls_srv_left = 0;
      return hs;
    }
    if (type == 22) {
      if (off + 5 + len <= avail && tls::server_hello_version(pl + off + 5, len) == 0x0304) {
        fs->tls_srv = 1;  // TLS 1.3: the certificate travels encrypted
        fs->tls_srv_left = 0;
        return hs;
      }
      hs = true;
    }
    const uint32_t take = std::min<uint32_t>(len, avail - off - 5);
    off += 5 + take;
    if (take < len) {
      fs->tls_srv_left = uint16_t(len - take);
      fs->tls_srv_type = type;
    }
  }
  return hs;
}

// The application parse of `avail` payload bytes, for one packet or for a
// stream reassembled from held segments. Keeps the flow's stream state and
// sets P.hold_hint when the bytes end inside a header that more bytes of
// this direction would complete.
L7State parse_app(const uint8_t* pl, uint32_t avail, bool cut_short, App app, bool from_init, FlowState* fs, int dir,
                  L7Parse& P) {
  switch (app) {
    case App::Dns:
      if (cut_short) return L7State::Incomplete;
      dns::parse(pl, avail, *P.dns);
      P.dns_msg = 0;
      return P.dns->status == dns::Status::Ok ? L7State::Parsed : L7State::Malformed;
    case App::DnsTcp: {
      dns::Status st = dns::split_tcp(pl, avail, *P.split);
      P.dns_msg = -1;
      if (st == dns::Status::Malformed || cut_short) return L7State::Malformed;
      if (st == dns::Status::Truncated) {
        if (fs && P.split->need) fs->pending[dir] = P.split->need - (avail - P.split->partial_off);
        P.hold_hint = true;
        return L7State::Incomplete;
      }
      return L7State::Parsed;
    }
    case App::Tls: {
      // Only the client's ClientHello carries names; later records are opaque.
      // After a HelloRetryRequest the second ClientHello may follow a
      // ChangeCipherSpec record in the same segment.
      if (!from_init) return L7State::None;  // the server's records: tls_server_records()
      uint32_t skip = 0;
      while (skip + 6 <= avail && pl[skip] == 0x14 && pl[skip + 1] == 0x03)
        skip += 5 + (uint32_t(pl[skip + 3]) << 8 | pl[skip + 4]);
      if (skip >= avail || pl[skip] != 0x16) return L7State::None;
      // Other client handshake messages (ClientKeyExchange, Finished, ...)
      // carry no names.
      if (skip + 5 < avail && pl[skip + 5] != 0x01) return L7State::None;
      P.tls_skip = skip;
      tls::Status st = tls::parse_client_hello(pl + skip, avail - skip, *P.tls);
      P.tls_state = 1;
      if (st == tls::Status::Ok) return L7State::Parsed;
      if (st != tls::Status::Truncated) return L7State::Malformed;
      if (fs && P.tls->need > avail - skip) fs->pending[dir] = P.tls->need - (avail - skip);
      // Most split hellos carry the SNI in their first segment: find it
      // there and the segments that follow can pass.
      if (fs && fs->pending[dir] && tls::find_sni_in_prefix(pl + skip, avail - skip, *P.prefix_sni)) {
        P.tls_prefix = true;
        fs->names_done |= uint8_t(1u << dir);
        return L7State::Parsed;
      }
      P.hold_hint = !cut_short;
      return L7State::Incomplete;
    }
    case App::Http: {
      http::Direction hd = P.http_udp ? http::Direction::Auto  // SSDP: either, either way
                           : from_init ? http::Direction::Request : http::Direction::Response;
      http::Status st = http::parse(pl, avail, hd, http_matcher(), *P.hscratch, *P.http);
      P.http_state = 1;
      const http::Result& H = *P.http;
      L7State r;
      if (st == http::Status::Ok) {
        r = L7State::Parsed;
      } else if (st == http::Status::Truncated && H.body_missing && !cut_short) {
        r = L7State::Parsed;  // heads complete; the body goes on in later segments
        if (fs) fs->body[dir] = uint32_t(std::min<uint64_t>(H.body_missing, UINT32_MAX));
      } else if (st == http::Status::Truncated) {
        r = L7State::Incomplete;
        P.hold_hint = !cut_short && !P.http_udp;
      } else {
        r = L7State::Malformed;
      }
      if (fs && H.n_msgs && H.msgs[H.n_msgs - 1].body_unbounded) fs->unbounded[dir] = 1;
      return r;
    }
    default:
      return L7State::None;
  }
}

// A protocol plugin whose content probe recognises this payload, among
// those some consumer protects (`apps`): its application, or Other.
App plugin_by_probe(const uint8_t* pl, uint32_t avail, uint8_t l4, uint32_t apps) {
  const auto& v = Registry::instance().protocols();
  for (size_t i = 0; i < v.size(); ++i)
    if ((apps >> (kFirstPluginApp + i) & 1) && v[i]->probe && v[i]->l4_proto == l4 && v[i]->probe(pl, avail))
      return App(kFirstPluginApp + i);
  return App::Other;
}

// A protocol plugin's parse of one packet into P.occs.
L7State parse_plugin(const ProtocolPlugin& pp, uint8_t app, const ProtoPacket& pkt, L7Parse& P) {
  P.occs->n = 0;
  switch (pp.parse(P.state_of(app), pkt, *P.occs)) {
    case ProtoStatus::None: return L7State::None;
    case ProtoStatus::Parsed: return L7State::Parsed;
    case ProtoStatus::Incomplete: return L7State::Incomplete;
    case ProtoStatus::Malformed: break;
  }
  return L7State::Malformed;
}

uint32_t tcp_seq(const uint8_t* p, const Decoded& d) {
  return uint32_t(p[d.l4_off + 4]) << 24 | uint32_t(p[d.l4_off + 5]) << 16 | uint32_t(p[d.l4_off + 6]) << 8 |
         p[d.l4_off + 7];
}

// A segment that begins with an HTTP/1 message's first line, whole: a
// status line from the server, a request line (method token, target,
// version) from the client. Strict on purpose: after a gap it is the only
// thing that puts the stream's parse back on a message boundary.
bool http_message_start(const uint8_t* pl, uint32_t avail, bool from_init) {
  if (!from_init)
    return avail >= 13 && std::memcmp(pl, "HTTP/1.", 7) == 0 && pl[8] == ' ' && pl[9] >= '1' && pl[9] <= '5';
  uint32_t i = 0;
  while (i < avail && i < 24 && pl[i] >= 'A' && pl[i] <= 'Z') ++i;
  if (i == 0 || i >= avail || pl[i] != ' ') return false;
  const uint32_t target = ++i;
  while (i < avail && pl[i] > ' ' && pl[i] < 0x7f) ++i;
  if (i == target || avail - i < 11 || std::memcmp(pl + i, " HTTP/1.", 8) != 0) return false;
  return pl[i + 9] == '\r' && pl[i + 10] == '\n';
}

// HTTP over TCP follows its messages by counting bytes (bodies of a known
// length, chunks, heads held until complete), which is only right while the
// segments come in order. released_end is the sequence number the direction
// expects next. A repeated segment (a retransmission, or a capture that saw
// a packet twice) is outside the count (Repeat). A gap (a lost or unseen segment) that may have held the
// start of a head loses the message boundaries: the direction fails closed
// (stream_failed) until a segment begins with a message's first line, where
// the parse starts afresh.
enum class HttpOrder : uint8_t { InOrder, Closed, Repeat };
HttpOrder http_in_order(const uint8_t* pl, uint32_t avail, const Decoded& d, const uint8_t* p, bool from_init,
                   FlowState* fs, int dir) {
  const uint8_t bit = uint8_t(1u << dir);
  const uint32_t seq = tcp_seq(p, d);
  if (fs->released & bit) {
    const int32_t delta = int32_t(seq - fs->released_end[dir]);
    if (delta < 0 && delta > -(1 << 30)) {
      // Bytes seen before; any new ones past them were not counted.
      if (int32_t(seq + d.payload_len - fs->released_end[dir]) > 0) {
        fs->stream_failed |= bit;
        fs->released_end[dir] = seq + d.payload_len;
        return HttpOrder::Closed;
      }
      return HttpOrder::Repeat;
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
  if (!(fs->stream_failed & bit)) return HttpOrder::InOrder;
  if (!http_message_start(pl, avail, from_init)) return HttpOrder::Closed;
  fs->stream_failed &= uint8_t(~bit);
  fs->pending[dir] = fs->body[dir] = 0;
  fs->unbounded[dir] = 0;
  return HttpOrder::InOrder;
}

}  // namespace

void analyze_l7(const uint8_t* p, const Decoded& d, PacketMeta& m, L7Parse& P) {
  m.parse = &P;
  m.l7 = L7State::None;
  if (d.status != DecodeStatus::Ok || !d.l4_hdr_len || (d.flags & kFlagLaterFragment)) return;
  FlowState* fs = m.flow;
  const bool from_init = m.initiator_is_src;
  const int dir = from_init ? 0 : 1;
  const uint32_t end = std::min<uint32_t>(d.cap_len, d.payload_off + d.payload_len);
  const uint32_t avail = end > d.payload_off ? end - d.payload_off : 0;
  // DNS over UDP on its ports (the bulk of a resolver link): what the steps
  // below conclude for it, without their questions. UDP flows never set the
  // stream fields (pending, body, released, stream_failed: TCP only), so only
  // the flow's DNS number and the parse remain.
  if (d.l4_proto == kProtoUdp && (is_dns_port(d.sport) || is_dns_port(d.dport))) {
    m.app = uint8_t(App::Dns);
    if (avail == 0) return;
    if (fs && !fs->dns_flow)
      if (!(fs->dns_flow = ++P.dns_flows)) fs->dns_flow = ++P.dns_flows;  // 0 means "none"
    if (d.payload_off + d.payload_len > d.cap_len) {
      m.l7 = L7State::Incomplete;  // cut short by the capture: cannot be parsed to its end
      return;
    }
    dns::parse(p + d.payload_off, avail, *P.dns);
    P.dns_msg = 0;
    m.l7 = P.dns->status == dns::Status::Ok ? L7State::Parsed : L7State::Malformed;
    return;
  }
  App app = fs && fs->app ? App(fs->app) : detect_app(p, d, from_init, P.probe_scratch);
  if (app == App::Other && P.probe_dns && d.l4_proto == kProtoUdp && avail >= 17) {
    const uint8_t* q = p + d.payload_off;
    uint16_t qd = uint16_t(q[4] << 8 | q[5]);
    // Standard query/response with a question or two, and a full parse.
    if (((q[2] >> 3) & 0xf) == 0 && qd >= 1 && qd <= 2 && dns::parse(q, avail, *P.dns) == dns::Status::Ok)
      app = App::Dns;
  }
  if (app == App::Other && P.probe_apps && avail)
    app = plugin_by_probe(p + d.payload_off, avail, d.l4_proto, P.probe_apps);
  if (fs && !fs->app && avail && d.l4_proto == kProtoTcp && app != App::Other) fs->app = uint8_t(app);
  m.app = uint8_t(app);
  if (avail == 0 || app == App::Other || app == App::Unknown) return;
  const uint8_t* pl = p + d.payload_off;
  // A payload the capture cut short cannot be parsed to its end.
  const bool cut_short = d.payload_off + d.payload_len > d.cap_len;
  if (fs && d.l4_proto == kProtoTcp && app == App::Http) {
    switch (http_in_order(pl, avail, d, p, from_init, fs, dir)) {
      case HttpOrder::InOrder: break;
      case HttpOrder::Closed: m.l7 = L7State::Incomplete; return;
      case HttpOrder::Repeat: {
        // A repeated segment that starts with a message is parsed as one,
        // whole within the segment, and leaves the stream's counts as they
        // were; any other repeat fails closed.
        m.l7 = L7State::Incomplete;
        if (!http_message_start(pl, avail, from_init)) return;
        const uint32_t pend = fs->pending[dir], body = fs->body[dir];
        const uint8_t unb = fs->unbounded[dir];
        fs->pending[dir] = fs->body[dir] = 0;
        fs->unbounded[dir] = 0;
        P.http_udp = false;
        if (parse_app(pl, avail, cut_short, app, from_init, fs, dir, P) == L7State::Parsed) m.l7 = L7State::Parsed;
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
  if (const ProtocolPlugin* pp = plugin_of(uint8_t(app))) {
    m.l7 = parse_plugin(*pp, uint8_t(app), {pl, avail, d.sport, d.dport, from_init, cut_short, fs ? fs->app_state : nullptr}, P);
    return;
  }
  if (fs && !fs->dns_flow && (app == App::Dns || app == App::DnsTcp))
    if (!(fs->dns_flow = ++P.dns_flows)) fs->dns_flow = ++P.dns_flows;  // 0 means "none"
  if (app == App::Quic) {
    // Decrypted once here; consumers that protect tls.sni rewrite their
    // copy (l7_rewrite). Datagrams that can hold no client name (1-RTT,
    // Handshake, 0-RTT, Retry, the server's Initials, ACK-only Initials)
    // pass; anything not understood fails closed.
    quic::FlowState qs;
    static_assert(sizeof(quic::FlowState) <= kAppStateBytes, "QUIC's flow state exceeds the per-flow budget");
    if (fs) std::memcpy(&qs, fs->app_state, sizeof qs);
    // One direction of the flow: keys its remembered DCID per worker.
    uint64_t fk = 0x9e3779b97f4a7c15ULL ^ (uint64_t(d.sport) << 16 | d.dport);
    if (d.has_ip() && d.dst_off() + d.addr_len() <= d.cap_len) {
      for (uint32_t i = 0; i < d.addr_len(); ++i) fk = (fk ^ p[d.src_off() + i]) * 0x100000001b3ULL;
      for (uint32_t i = 0; i < d.addr_len(); ++i) fk = (fk ^ p[d.dst_off() + i]) * 0x100000001b3ULL;
    }
    quic::Status st = quic::analyze(pl, avail, dir, fk | 1, *P.qcrypto, qs, *P.quic);
    if (fs) std::memcpy(fs->app_state, &qs, sizeof qs);
    P.quic_state = 1;
    switch (st) {
      case quic::Status::None: m.l7 = L7State::None; break;
      case quic::Status::Located: m.l7 = L7State::Parsed; break;
      case quic::Status::Incomplete: m.l7 = L7State::Incomplete; break;
      case quic::Status::Malformed: m.l7 = L7State::Malformed; break;
    }
    return;
  }
  if (app == App::Http && fs && fs->unbounded[dir]) {
    // Inside a body of unknown length: only a new message start ends it.
    bool starts = avail >= 8 && (std::memcmp(pl, "HTTP/1.", 7) == 0 || detect_app(p, d, from_init, P.probe_scratch) == App::Http);
    if (!starts || (std::memcmp(pl, "HTTP/1.", 7) != 0 && pl[0] < 'A')) return;
    fs->unbounded[dir] = 0;
  }
  P.http_udp = d.l4_proto == kProtoUdp;
  m.l7 = parse_app(pl, avail, cut_short, app, from_init, fs, dir, P);
  if (app == App::Tls && !from_init && d.l4_proto == kProtoTcp) m.tls_server_hs = tls_server_records(pl, avail, fs);
}

L7State analyze_stream(const uint8_t* b, uint32_t len, uint8_t app, bool from_initiator, FlowState* fs, L7Parse& P) {
  P.packet = ~0ULL;  // the next packet parses anew
  P.dns_msg = -1;
  P.tls_state = P.http_state = 0;
  P.tls_prefix = P.hold_hint = P.http_udp = false;
  const int dir = from_initiator ? 0 : 1;
  if (fs) fs->pending[dir] = 0, fs->names_done &= uint8_t(~(1u << dir));
  return parse_app(b, len, false, App(app), from_initiator, fs, dir, P);
}

}  // namespace amon
