// A flow's TCP stream state, per direction (0: from the initiator): where
// the direction's messages stand (FlowState::pending, names_done, body,
// unbounded), whether the worker holds a split header of it (hold), how far
// it was rewritten from a held stream or followed in order (released,
// released_end), and whether it lost its message boundaries
// (stream_failed). StreamTracker is the one writer of these fields: the L7
// analysis (l7_analyze.cpp) and the worker's holding of split headers
// (engine/core/worker_path.cpp) both go through it. Also the one
// tcp_seq, and count_verdict for what the worker delivers.
#pragma once

#include <cstdint>

#include "bytes.h"
#include "l2l4.h"
#include "packet.h"
#include "protocol.h"

namespace amon {

// n packets that got verdict v (not Forward), counted: filtered or dropped.
// Every route of the worker that delivers a stream's or a packet's
// segments counts through it.
inline void count_verdict(ConsumerCounters& c, Verdict v, uint64_t n = 1) {
  (v == Verdict::Filtered ? c.filtered : c.dropped) += n;
}

// What capture gaps cost a worker's TCP streams: holes that lost a
// direction's message boundaries (gaps), directions that resumed at a
// message start a plugin recognised (resyncs), and the segments and payload
// bytes left unparsed in between (closed_*: cut by every consumer that
// protects the protocol's fields). Written only through StreamTracker.
struct StreamGapStats {
  uint64_t gaps = 0, resyncs = 0, closed_segments = 0, closed_bytes = 0;
  void closed(uint32_t payload_len) { ++closed_segments, closed_bytes += payload_len; }
};

// A TCP segment's sequence number (d decoded through its TCP header).
inline uint32_t tcp_seq(const uint8_t* p, const Decoded& d) { return rd32(p + d.l4_off + 4); }

class StreamTracker {
 public:
  StreamTracker(FlowState& fs, int dir) : fs_(fs), dir_(dir), bit_(uint8_t(1u << dir)) {}

  // --- Held headers (the worker) ---
  uint16_t held() const { return fs_.hold[dir_]; }  // 1 + the worker's hold index, 0: none
  // A split header is held from here: the stream takes over from the byte
  // counts the first parse left.
  void hold_started(uint16_t idx) {
    fs_.hold[dir_] = uint16_t(idx + 1);
    fs_.pending[dir_] = 0;
    fs_.names_done &= uint8_t(~bit_);
  }
  void hold_ended() { fs_.hold[dir_] = 0; }
  // The held header was rewritten as one, up to sequence number end_seq.
  void completed(uint32_t end_seq) {
    fs_.released |= bit_;
    fs_.released_end[dir_] = end_seq;
  }
  // The held header could not be completed: the rest stays closed.
  void failed() { fs_.stream_failed |= bit_; }
  // A segment `off` bytes past the start of the held header, which is whole
  // for its first `contiguous` bytes: past a hole, a segment that starts a
  // message (ProtocolPlugin::message_start) cannot continue the held
  // header, and the stream resumes there (the held header then leaves
  // failed, cut). A hole that a late segment might still fill is otherwise
  // waited for, as before.
  static bool resumes_past_hold(const ProtocolPlugin* pp, int64_t off, uint32_t contiguous, const uint8_t* pl,
                                uint32_t avail, bool from_init, StreamGapStats& gs) {
    if (off <= int64_t(contiguous) || !pp || !pp->message_start || !pp->message_start(pl, avail, from_init))
      return false;
    ++gs.gaps;
    return true;
  }

  // --- Messages (the L7 analysis) ---
  // What a plugin's parse says of the bytes that follow (parse_plugin):
  // bytes still to come (need), whether they hold no field (rest_clear of a
  // parsed message), the payload after the message (payload_left,
  // payload_open). need and rest_clear: TCP only.
  void after_parse(const ProtoOccs& o, bool parsed, bool tcp) {
    if (tcp) {
      if (o.need) fs_.pending[dir_] = o.need;
      if (parsed && o.rest_clear && fs_.pending[dir_]) fs_.names_done |= bit_;
    }
    if (o.payload_left) fs_.body[dir_] = o.payload_left;
    if (o.payload_open) fs_.unbounded[dir_] = 1;
  }
  // A parse of a whole held stream starts afresh.
  void stream_parse() {
    fs_.pending[dir_] = 0;
    fs_.names_done &= uint8_t(~bit_);
  }
  // For a plugin whose messages are framed by counting bytes
  // (ProtocolPlugin::ordered): where a segment of `len` payload bytes at
  // sequence number `seq` stands in the direction (stream.cpp).
  enum class Order : uint8_t { InOrder, Closed, Repeat };
  Order order(const ProtocolPlugin& pp, const uint8_t* pl, uint32_t avail, uint32_t seq, uint32_t len,
              bool from_init, StreamGapStats& gs);
  // For any other plugin: a direction closed by a header that could not be
  // completed stays closed (true: this segment of `len` payload bytes is
  // not parsed) until a segment starts a message (message_start, where the
  // plugin has one): the parse starts afresh there.
  bool closed(const ProtocolPlugin* pp, const uint8_t* pl, uint32_t avail, uint32_t seq, uint32_t len,
              bool from_init, StreamGapStats& gs);
  // A repeated segment parsed on its own leaves the counts as they were.
  struct Counts {
    uint32_t pending, body;
    uint8_t unbounded;
  };
  Counts set_aside() {
    const Counts c{fs_.pending[dir_], fs_.body[dir_], fs_.unbounded[dir_]};
    fs_.pending[dir_] = fs_.body[dir_] = 0;
    fs_.unbounded[dir_] = 0;
    return c;
  }
  void restore(const Counts& c) {
    fs_.pending[dir_] = c.pending, fs_.body[dir_] = c.body, fs_.unbounded[dir_] = c.unbounded;
  }
  // A header of this direction could not be completed: what follows may be
  // its rest, and nothing marks where it ends.
  bool failed_before() const { return fs_.stream_failed & bit_; }
  // A retransmission of bytes rewritten from a held stream: its slice of
  // that rewrite is gone, so it cannot be rewritten the same way.
  bool repeats_released(uint32_t seq) const {
    if (!(fs_.released & bit_)) return false;
    const int32_t delta = int32_t(seq - fs_.released_end[dir_]);
    return delta < 0 && delta > -(1 << 30);
  }
  // A segment of `len` payload bytes continuing a message counted before
  // (the rest of a header, or body bytes of a known length): true, with
  // `st` what the segment holds; false: it starts a message.
  bool continues(uint32_t len, L7State& st) {
    if (fs_.pending[dir_]) {
      fs_.pending[dir_] -= std::min<uint32_t>(fs_.pending[dir_], len);
      // The rest of a ClientHello whose SNI was already found and rewritten
      // holds no name (one server_name extension per hello, RFC 8446 4.2).
      st = (fs_.names_done & bit_) ? L7State::None : L7State::Incomplete;
      if (!fs_.pending[dir_]) fs_.names_done &= uint8_t(~bit_);
      return true;
    }
    if (fs_.body[dir_]) {  // body bytes of a known length: nothing to parse
      const uint64_t used = std::min<uint64_t>(fs_.body[dir_], len);
      fs_.body[dir_] -= uint32_t(used);
      // A new head starting inside this segment is not located.
      st = used == len ? L7State::None : L7State::Incomplete;
      return true;
    }
    return false;
  }
  // Inside a payload of unknown length: only a new message ends it.
  bool unbounded() const { return fs_.unbounded[dir_]; }
  void end_unbounded() { fs_.unbounded[dir_] = 0; }

 private:
  void resume(StreamGapStats& gs);
  FlowState& fs_;
  const int dir_;
  const uint8_t bit_;
};

}  // namespace amon
