// TLS as a protocol plugin (plugins/core/protocol.h): recognised by its
// handshake record at a stream's start (or the server port 443), the
// client's ClientHello parsed into tls.sni occurrences, held while a hello
// split over segments is incomplete, and the server's records watched
// until encryption starts (a TLS 1.2 certificate names the server again).
#include <cstring>

#include "amon_tls.hpp"
#include "protocol.h"

namespace amon::tls {

namespace {

struct State {
  ClientHello ch;
  PrefixSni prefix;
  bool in_prefix = false;  // the names come from a hello that continues in later segments
  uint32_t skip = 0;       // bytes of records before the ClientHello (ChangeCipherSpec)
  uint32_t len = 0;        // bytes parsed (the rewrite works on a copy of them)
  FieldId sni = kNoField;
};

// The server's side of a flow, kept in its per-flow state.
struct ServerWatch {
  uint8_t state;  // 0 handshake, 1 past it (encrypted from here), 2 record sync lost
  uint8_t type;   // content type of the record that continues in later segments
  uint16_t left;  // bytes of that record still to come
};
static_assert(sizeof(ServerWatch) <= kAppStateBytes, "TLS's flow state exceeds the per-flow budget");

void register_tls_fields(Registry& r) {
  r.add_field({"tls.sni", ValueType::Name, "tls", FieldRole::QuasiIdentifier, "domain",
               "TLS ClientHello server_name (over TCP, and in QUIC Initials)", {"dns.qname", "http.host"}, kNoField,
               kCondAll});
}

void* make_state() {
  auto* s = new State;
  s->sni = Registry::instance().field("tls.sni")->id;
  return s;
}
void free_state(void* s) { delete static_cast<State*>(s); }

// Follows the server's TLS records across segments and tells whether this
// segment carries handshake bytes sent before encryption starts: in TLS 1.2
// and earlier they hold the server's certificate chain, which names the
// server. A TLS 1.3 ServerHello (supported_versions 0x0304) ends the watch:
// everything after it is encrypted. Losing the record boundaries (a record
// header split over segments, a gap, garbage) keeps the watch on: fail closed.
bool server_records(const uint8_t* pl, uint32_t avail, ServerWatch* fs) {
  if (!fs) return true;  // no flow: nothing says where records start
  if (fs->state == 1) return false;
  if (fs->state == 2) return true;
  bool hs = false;
  uint32_t off = 0;
  if (fs->left) {
    uint32_t k = std::min<uint32_t>(fs->left, avail);
    hs = fs->type == 22;
    fs->left = uint16_t(fs->left - k);
    off = k;
  }
  while (off < avail) {
    if (avail - off < 5) {
      fs->state = 2;
      return true;
    }
    const uint8_t type = pl[off];
    const uint32_t len = uint32_t(pl[off + 3]) << 8 | pl[off + 4];
    if (type < 20 || type > 24 || pl[off + 1] != 3 || len > 18432) {
      fs->state = 2;
      return true;
    }
    if (type == 23) {  // application data: the handshake is over
      fs->state = 1;
      fs->left = 0;
      return hs;
    }
    if (type == 22) {
      if (off + 5 + len <= avail && server_hello_version(pl + off + 5, len) == 0x0304) {
        fs->state = 1;  // TLS 1.3: the certificate travels encrypted
        fs->left = 0;
        return hs;
      }
      hs = true;
    }
    const uint32_t take = std::min<uint32_t>(len, avail - off - 5);
    off += 5 + take;
    if (take < len) {
      fs->left = uint16_t(len - take);
      fs->type = type;
    }
  }
  return hs;
}

ProtoStatus parse_packet(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  const uint8_t* pl = pkt.payload;
  const uint32_t avail = pkt.len;
  if (!pkt.from_initiator) {
    // Only the client's ClientHello carries names; the server's records
    // are watched until encryption starts.
    ServerWatch w{};
    if (pkt.flow_state) std::memcpy(&w, pkt.flow_state, sizeof w);
    out.echo = server_records(pl, avail, pkt.flow_state ? &w : nullptr);
    if (pkt.flow_state) std::memcpy(pkt.flow_state, &w, sizeof w);
    // Encrypted from here on: the server's later records need no look.
    out.done = pkt.flow_state && w.state == 1;
    return ProtoStatus::None;
  }
  // After a HelloRetryRequest the second ClientHello may follow a
  // ChangeCipherSpec record in the same segment.
  uint32_t skip = 0;
  while (skip + 6 <= avail && pl[skip] == 0x14 && pl[skip + 1] == 0x03)
    skip += 5 + (uint32_t(pl[skip + 3]) << 8 | pl[skip + 4]);
  if (skip >= avail || pl[skip] != 0x16) return ProtoStatus::None;
  // Other client handshake messages (ClientKeyExchange, Finished, ...)
  // carry no names.
  if (skip + 5 < avail && pl[skip + 5] != 0x01) return ProtoStatus::None;
  s.skip = skip, s.len = avail, s.in_prefix = false;
  const Status st = parse_client_hello(pl + skip, avail - skip, s.ch);
  auto add = [&](unsigned i, std::string_view text, const Span& sp) {
    ProtoOcc o;
    o.field = s.sni, o.kind = OccKind::Name, o.index = uint16_t(i), o.text = text;
    o.off = skip + sp.off, o.len = sp.len;
    return out.add(o);
  };
  if (st == Status::Ok) {
    for (unsigned i = 0; i < s.ch.n_sni; ++i)
      if (!add(i, s.ch.sni_text(i), s.ch.sni[i].span)) return ProtoStatus::Malformed;
    return ProtoStatus::Parsed;
  }
  if (st != Status::Truncated) return ProtoStatus::Malformed;
  if (pkt.flow_state && s.ch.need > avail - skip) out.need = s.ch.need - (avail - skip);
  // Most split hellos carry the SNI in their first segment: find it there
  // and the segments that follow can pass.
  if (out.need && find_sni_in_prefix(pl + skip, avail - skip, s.prefix)) {
    s.in_prefix = true;
    out.rest_clear = true;
    for (unsigned i = 0; i < s.prefix.n; ++i)
      if (!add(i, std::string_view(s.prefix.text[i], s.prefix.text_len[i]), s.prefix.span[i]))
        return ProtoStatus::Malformed;
    return ProtoStatus::Parsed;
  }
  out.hold = !pkt.cut_short;
  return ProtoStatus::Incomplete;
}

void rewrite_name_occ(void* vs, uint8_t* payload, const ProtoOcc& o, const names::Decision& d) {
  const State& s = *static_cast<const State*>(vs);
  if (s.in_prefix) {
    const Span& sp = s.prefix.span[o.index];
    names::apply_to_text(reinterpret_cast<char*>(payload + s.skip + sp.off), sp.len, d);
  } else {
    // A name may straddle records: rewrite_sni gathers and scatters it.
    rewrite_sni(payload + s.skip, s.len - s.skip, s.ch, o.index, d);
  }
}

// Where a client's or a server's records resume after a capture gap, strictly:
// a ClientHello's record from the client (its handshake length agreeing with
// the record's), or record headers (content type 20-23, version 3.x, a
// length within the limit) whose lengths tile the segment to its last byte.
// Five bytes of a hello's rest can pass for a header; a chain of them ending
// exactly at the segment's end does not, by chance.
bool message_start(const uint8_t* pl, uint32_t avail, bool from_init) {
  auto header = [&](uint32_t off) {
    const uint32_t len = uint32_t(pl[off + 3]) << 8 | pl[off + 4];
    return pl[off] >= 20 && pl[off] <= 23 && pl[off + 1] == 3 && pl[off + 2] <= 4 && len && len <= 18432;
  };
  if (avail < 5 || !header(0)) return false;
  if (from_init && avail >= 11 && pl[0] == 22 && pl[5] == 1 && pl[9] == 3 && pl[10] <= 4) {
    const uint32_t rec = uint32_t(pl[3]) << 8 | pl[4];
    const uint32_t hs = uint32_t(pl[6]) << 16 | uint32_t(pl[7]) << 8 | pl[8];
    if (hs + 4 == rec || (hs + 4 > rec && rec == 16384)) return true;
  }
  uint32_t off = 0;
  while (off + 5 <= avail && header(off)) off += 5 + (uint32_t(pl[off + 3]) << 8 | pl[off + 4]);
  return off == avail;
}

// A handshake record at the stream's start, after a ChangeCipherSpec.
const char* const kPatterns[] = {"^(\\x14\\x03[\\x00-\\x04]\\x00\\x01\\x01)?\\x16\\x03[\\x00-\\x04]", nullptr};

const ProtocolPlugin kPlugin = {
    .name = "tls",
    .l4_proto = 6,
    .register_fields = register_tls_fields,
    .patterns = kPatterns,
    .server_ports = {443},
    .holds = true,
    .make_state = make_state,
    .free_state = free_state,
    .parse = parse_packet,
    .rewrite_name = rewrite_name_occ,
    .message_start = message_start,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kPlugin; }

}  // namespace amon::tls
