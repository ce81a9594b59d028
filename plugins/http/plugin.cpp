// HTTP/1.x as a protocol plugin (plugins/core/protocol.h): recognised by a
// request or status line at a stream's start (or the server ports 80, 8080,
// 8000), its heads parsed into the fields' occurrences, held while a head
// split over segments is incomplete, its bodies handed to the runtime as
// the payload field http.body (the spans between heads, the bytes of a body
// that continues in later segments), its stream followed by sequence
// number (ordered) since bodies are framed by counting bytes. SSDP (HTTP
// over UDP 1900) and BitTorrent Local Service Discovery (HTTP-like
// BT-SEARCH over UDP 6771, whose `cookie:` tells a client's own
// announcements apart) are a second descriptor carrying the same fields.
#include <algorithm>
#include <cstring>
#include <memory>

#include "amon_http.hpp"
#include "amon_names.hpp"
#include "protocol.h"

namespace amon::http {

namespace {

const Matcher& matcher() {
  static const Matcher m;
  return m;
}

struct State {
  explicit State(bool over_udp) : scratch(matcher()), udp(over_udp) {
    const Registry& r = Registry::instance();
    for (unsigned k = 0; k < kFieldKinds; ++k) {
      const char* n = registry_field(Field(k));
      kind_field[k] = n ? r.field(n)->id : kNoField;
      kind_name[k] = n && r.field(n)->type == ValueType::Name;
    }
    body = r.field("http.body")->id;
  }
  Scratch scratch;
  std::unique_ptr<Result> result = std::make_unique<Result>();
  // Over UDP (SSDP) a message may travel either way, and nothing holds.
  bool udp;
  // By occurrence kind: the field whose value it holds (kNoField: none),
  // and whether that field is a domain name (decided with the other names).
  FieldId kind_field[kFieldKinds];
  bool kind_name[kFieldKinds];
  FieldId body;
};

void* make_tcp_state() { return new State(false); }
void* make_udp_state() { return new State(true); }
void free_state(void* s) { delete static_cast<State*>(s); }

ProtoStatus parse_packet(void* vs, const ProtoPacket& pkt, ProtoOccs& out) {
  State& s = *static_cast<State*>(vs);
  const Direction dir = s.udp ? Direction::Auto : pkt.from_initiator ? Direction::Request : Direction::Response;
  const Result& H = *s.result;
  const Status st = parse(pkt.payload, pkt.len, dir, matcher(), s.scratch, *s.result, pkt.ends && !s.udp);
  ProtoStatus r;
  if (st == Status::Ok) {
    r = ProtoStatus::Parsed;
    out.mask_from = H.partial_from;
  } else if (st == Status::Truncated && H.body_missing && !pkt.cut_short) {
    r = ProtoStatus::Parsed;  // heads complete; the body goes on in later segments
    out.payload_left = uint32_t(std::min<uint64_t>(H.body_missing, UINT32_MAX));
  } else if (st == Status::Truncated) {
    r = ProtoStatus::Incomplete;
    out.hold = !pkt.cut_short && !s.udp;
  } else {
    r = ProtoStatus::Malformed;
  }
  if (H.n_msgs && H.msgs[H.n_msgs - 1].body_unbounded) out.payload_open = true;
  if (r != ProtoStatus::Parsed) return r;
  for (unsigned i = 0; i < H.n_occ; ++i) {
    const Occurrence& oc = H.occ[i];
    const FieldId f = s.kind_field[uint8_t(oc.kind)];
    if (f == kNoField || !is_field_value(H, i)) continue;
    ProtoOcc o;
    o.field = f, o.off = oc.span.off, o.len = oc.span.len, o.index = uint16_t(i);
    if (s.kind_name[uint8_t(oc.kind)]) {
      // Decided on the name as it came (the decision's own normalisation).
      o.kind = OccKind::Name;
      o.text = std::string_view(reinterpret_cast<const char*>(pkt.payload + oc.span.off), oc.span.len);
    }
    if (!out.add(o)) return ProtoStatus::Malformed;
  }
  // Everything no head holds is body: after the heads' fields, once.
  Span hs[16];
  const unsigned n = body_spans(H, 0, pkt.len, hs, 16);
  for (unsigned k = 0; k < n; ++k) {
    ProtoOcc o;
    o.field = s.body, o.kind = OccKind::Payload, o.off = hs[k].off, o.len = hs[k].len;
    if (!out.add(o)) return ProtoStatus::Malformed;
  }
  return ProtoStatus::Parsed;
}

void rewrite_name_occ(void*, uint8_t* payload, const ProtoOcc& o, const names::Decision& d) {
  names::apply_to_text(reinterpret_cast<char*>(payload + o.off), o.len, d);
}

// A segment that begins with an HTTP/1 message's first line, whole: a
// status line from the server, a request line (method token, target,
// version) from the client. Strict on purpose: after a gap it is the only
// thing that puts the stream's parse back on a message boundary.
bool message_start(const uint8_t* pl, uint32_t avail, bool from_init) {
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

// Inside a body of unknown length (chunked, or until the connection
// closes) only a new message start ends it: a status line, or what the
// runtime's detection takes for HTTP and starts with a letter.
bool payload_ends(const uint8_t* pl, uint32_t avail, bool recognised) {
  const bool status_line = avail >= 8 && std::memcmp(pl, "HTTP/1.", 7) == 0;
  if (status_line) return true;
  return avail >= 8 && recognised && pl[0] >= 'A';
}

// A request line anywhere (any method token: UPnP's SUBSCRIBE and NOTIFY,
// WebDAV, ...), a well-known method alone when the line continues in the
// next segment, a status line: a Host header is a Host header on any port.
const char* const kPatterns[] = {
    "^(GET|POST|HEAD|PUT|DELETE|OPTIONS|PATCH|CONNECT|TRACE) ",
    "^[A-Z][A-Z_\\-]{2,23} [^\\r\\n]+ HTTP/1\\.[0-9]\\r?\\n",
    "^HTTP/1\\.[0-9] ",
    nullptr,
};

const ProtocolPlugin kTcp = {
    .name = "http",
    .l4_proto = 6,
    .register_fields = register_fields,
    .patterns = kPatterns,
    .server_ports = {80, 8080, 8000},
    .holds = true,
    .locates = locates,
    .make_state = make_tcp_state,
    .free_state = free_state,
    .parse = parse_packet,
    .rewrite_name = rewrite_name_occ,
    .payload_field = "http.body",
    .ordered = true,
    .message_start = message_start,
    .payload_ends = payload_ends,
};

const ProtocolPlugin kSsdp = {
    .name = "ssdp",
    .l4_proto = 17,
    .ports = {1900, 6771},
    .carries = "http",
    .locates = locates,
    .make_state = make_udp_state,
    .free_state = free_state,
    .parse = parse_packet,
    .rewrite_name = rewrite_name_occ,
    .payload_field = "http.body",
    .payload_ends = payload_ends,
};

}  // namespace

const ProtocolPlugin& protocol_plugin() { return kTcp; }
const ProtocolPlugin& ssdp_plugin() { return kSsdp; }

}  // namespace amon::http
