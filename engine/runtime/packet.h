// What the engine and the runtime know about a packet and its flow besides
// its bytes: the per-flow state kept in every flow-table entry, the packet's
// metadata and application parse state, the per-consumer counters and the
// verdict. Shared by the engine's paths and the runtime's.
#pragma once

#include <cstdint>
#include <vector>

#include "l2l4.h"
#include "protocol.h"

namespace amon {

inline constexpr int kMaxConsumers = 16;
// z-anonymity decisions are cached per flow in one 64-bit mask: consumer
// index * kZSlotsPerConsumer + slot.
inline constexpr int kZSlotsPerConsumer = 4;

// Per-flow state the engine's flow table keeps for the runtime.
// Fields are ordered by size so the struct has no padding: it lives in every
// flow-table entry (bytes per flow).
struct FlowState {
  // What a header kernel's Crypto-PAn made of this flow's IPv4 client
  // address, for the consumer memo_owner - 1 (0: none). FlowState's first
  // bytes share the flow entry's first cache line with the key the lookup
  // has just read, where the Crypto-PAn cache's set is a miss of its own.
  // It rests on a FlowState belonging to one flow (one address pair, roles
  // fixed at its first packet) from its creation (FlowEntry{}) to its end.
  uint32_t memo = 0;
  uint8_t memo_owner = 0;
  uint8_t app = 0;              // App, once known from a payload
  uint8_t names_done = 0;       // bit per direction: the pending bytes hold no name (SNI already handled)
  uint8_t frag_tunnel : 1 = 0;    // fragments of this address pair carried a tunnel
  // Bit per direction: a header could not be completed, or (a plugin whose
  // messages are framed by counting bytes: ProtocolPlugin::ordered) a gap
  // lost the message boundaries; the rest stays closed (ordered: until a
  // segment starts with a message's first line).
  uint8_t stream_failed : 2 = 0;
  uint8_t released : 2 = 0;       // bit per direction: released_end is valid
  uint8_t app_done : 2 = 0;       // bit per direction: the plugin said nothing more comes (ProtoOccs::done)
  uint64_t zdecided = 0;  // bit set once the slot's decision was taken for this flow
  uint64_t zreleased = 0; // bit set when the value was released (not z-private)
  // Application-layer stream state, per direction (0: from the initiator).
  // pending, body, names_done, unbounded, released, released_end,
  // stream_failed and hold are written only through StreamTracker (stream.h).
  uint32_t pending[2] = {};     // bytes still belonging to an incomplete header/message
  uint32_t body[2] = {};        // bytes of a known-length payload still to come (ProtoOccs::payload_left; not parsed; capped at 4 GiB)
  // TCP stream holding (engine/core/worker_path.cpp): a header split over
  // segments is held until complete, then rewritten as one.
  // TCP sequence number after the last header rewritten from a held stream;
  // for an ordered plugin, after the last segment seen in order (stream.cpp).
  uint32_t released_end[2] = {};
  // This flow's number in its worker, for a plugin that numbers its flows
  // (ProtocolPlugin::numbered; 0 until its first message). The exchange
  // memory of each ProgramInstance keys on it rather than on the entry's
  // address, so a flow that reuses an evicted flow's entry never picks up
  // that flow's exchanges.
  uint32_t flow_no = 0;
  uint16_t hold[2] = {};        // 1 + index of the worker's held stream for this direction, 0 when none
  // A later packet may repeat what the flow's names hid (PacketMeta::
  // names_echo: the server's TLS handshake names the server too, in a TLS
  // 1.2 Certificate): consumers whose decision hid a name get it without
  // payload.
  uint16_t sni_clear = 0;       // bit per consumer: its decisions on this flow's names left them all in clear
  // The flow's application keeps its own state here, within this budget
  // (protocol.h, ProtoPacket::flow_state): QUIC its progress through a
  // ClientHello spread over several Initials, TLS where the server's
  // records stand. Zero at the flow's start.
  uint8_t app_state[kAppStateBytes] = {};
  uint8_t unbounded[2] = {};    // inside a payload of unknown length (ProtoOccs::payload_open: HTTP chunked / until close)
};
static_assert(sizeof(FlowState) == 72, "FlowState: keep it without padding (it is in every flow entry)");

enum class L7State : uint8_t {
  None,        // nothing application-level to rewrite in this packet
  Parsed,      // parsed in full: fields located
  Incomplete,  // a header or message that continues in other segments: fields cannot be located
  Malformed,   // unparseable: fields cannot be located
  Stream,      // one segment of a header reassembled from held segments: its bytes come from PacketMeta::stream
};

// A header reassembled from several TCP segments, rewritten once per
// consumer (ProgramInstance::rewrite_stream); each segment then takes its
// slice of the consumer's rewritten bytes.
struct StreamView {
  const uint8_t* orig = nullptr;  // the reassembled original bytes
  uint32_t len = 0;
  uint32_t seg_off = 0;           // this segment's first payload byte, as an offset into the stream
  enum Result : uint8_t { Unchanged = 0, Rewritten, Failed, Drop };
  const uint8_t* bytes[kMaxConsumers] = {};  // per consumer index: the rewritten stream (valid when Rewritten)
  uint8_t result[kMaxConsumers] = {};
};

// What the engine knows about a packet besides its bytes.
struct PacketMeta {
  uint64_t ts_ns = 0;
  bool initiator_is_src = true;  // the flow's client by evidence (SYN sender, server port, ...) is this packet's source
  // No evidence said which end is the client (engine/core/flow_table.cpp):
  // both ends then take the client's rules (fail closed).
  bool roles_uncertain = false;
  bool flow_first = false;       // first packet of the flow in this worker
  // PPTP's GRE (enhanced GRE) around the packet: bit 0, its outer source is
  // the client of the PPTP control connection (TCP 1723) between the two
  // ends; bit 1, its outer destination is. Such an endpoint takes the
  // client's rule, as it does in the control connection.
  uint8_t pptp_client = 0;
  FlowState* flow = nullptr;     // null for non-IP frames
  const uint8_t* orig = nullptr; // the packet's original bytes (conditions read these)
  // A datagram made whole from IP fragments: its checksum is written back in
  // the first fragment, and a cut recomputes it (no input error is kept).
  bool whole_datagram = false;
  uint8_t app = 0;               // App (l7.h)
  L7State l7 = L7State::None;
  struct L7Parse* parse = nullptr;  // the worker's parse of this packet
  const StreamView* stream = nullptr;  // when l7 == Stream
  // The packet may repeat, where nothing locates it, what the flow's
  // names hid (ProtoOccs::echo: the server's side of a TLS handshake
  // before encryption, whose certificates name the server): cut for
  // consumers whose decision on those names hid them.
  bool names_echo = false;
  // Application-field offsets of `parse` are relative to this (null: the
  // packet's own payload in orig).
  const uint8_t* l7_base = nullptr;
  // Where the consumers' header paths share one scan of the payload for the
  // addresses' text forms (addr_text.h), reset per packet by the worker;
  // null: each consumer scans for itself.
  struct AddrTextMemo* text = nullptr;
  // Whether the packet's source (bit 0) and destination (bit 1) were seen
  // initiating a flow, as of the packet's place in the input: learnt in
  // input order for every worker (engine/core/initiators.h) while a program
  // needs it (Program::learns_initiators), else 0.
  uint8_t initiating = 0;
};

struct L7Parse;
// Once per packet, before the consumers: detects the application protocol,
// parses it, and keeps the flow's stream state. Needs meta.flow, orig.
void analyze_l7(const uint8_t* p, const Decoded& d, PacketMeta& m, L7Parse& parse);
// Parses `len` reassembled bytes of one direction of a TCP stream as the
// payload of one packet would be (same flow-state updates, relative to the
// stream's end). Returns Parsed, Incomplete (more bytes needed) or Malformed.
// `ends`: no more bytes will come (ProtoPacket::ends): Parsed may then leave
// a cut rest to mask (ProtoOccs::mask_from).
L7State analyze_stream(const uint8_t* b, uint32_t len, uint8_t app, bool from_initiator, FlowState* fs, L7Parse& parse,
                       bool ends = false);

// Counters of one consumer in one worker; the engine sums them.
struct ConsumerCounters {
  uint64_t in = 0, out = 0, dropped = 0, filtered = 0;
  uint64_t shared = 0, copied = 0;       // zero-copy deliveries vs rewritten copies
  uint64_t err_cut = 0, err_drop = 0;    // fail-closed: decode errors cut/dropped
  uint64_t unknown_drop = 0, unknown_cut = 0, unknown_keep = 0;
  uint64_t tunnel_cut = 0, icmp_quote_cut = 0;
  uint64_t policy_drop = 0;              // drop() rules
  uint64_t zanon_hidden = 0, zanon_released = 0;
  uint64_t l7_cut = 0;                   // fail-closed: application fields that could not be located
  uint64_t tls_server_cut = 0;           // server TLS handshake cut: it names a server whose SNI was hidden
  uint64_t reverse_hidden = 0;           // reverse-DNS names whose address labels were masked (a protected address)
  uint64_t nd_zeroed = 0;                // neighbour discovery addresses/MACs zeroed: no rule could map them
  uint64_t addr_text = 0;                // mapped addresses written as text in kept payload, rewritten to their mapping
  uint64_t addr_text_zeroed = 0;         // the same, where the mapping's text is longer: zero address at that length
  uint64_t echoes = 0;                   // values the consumer rewrote, found again in kept payload and rewritten so (echo.h)
  uint64_t echoes_filled = 0;            // the same, where no same-length form fits: the zero address, or 'x'
  std::vector<uint64_t> rule_hits;       // by Rule::index
};

enum class Verdict : uint8_t { Forward, Drop, Filtered };

}  // namespace amon
