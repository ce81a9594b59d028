// A flow's TCP stream state (stream.h): the order of the segments of a
// plugin whose messages are framed by counting bytes.
#include "stream.h"

namespace amon {

// Such a plugin (ProtocolPlugin::ordered: bodies of a known length, chunks,
// heads held until complete) follows its messages rightly only while the
// segments come in order. released_end is the sequence number the
// direction expects next. A repeated segment (a retransmission, or a
// capture that saw a packet twice) is outside the count (Repeat). A gap (a
// lost or unseen segment) that may have held the start of a head loses the
// message boundaries: the direction fails closed (stream_failed) until a
// segment begins with a message's first line (ProtocolPlugin::
// message_start), where the parse starts afresh (resume).
StreamTracker::Order StreamTracker::order(const ProtocolPlugin& pp, const uint8_t* pl, uint32_t avail, uint32_t seq,
                                          uint32_t len, bool from_init, StreamGapStats& gs) {
  if (fs_.released & bit_) {
    const int32_t delta = int32_t(seq - fs_.released_end[dir_]);
    if (delta < 0 && delta > -(1 << 30)) {
      // Bytes seen before; any new ones past them were not counted.
      if (int32_t(seq + len - fs_.released_end[dir_]) > 0) {
        fs_.stream_failed |= bit_;
        fs_.released_end[dir_] = seq + len;
        return Order::Closed;
      }
      return Order::Repeat;
    }
    if (delta > 0) {
      // Lost bytes inside a body of known length are body bytes: the count
      // goes on past them. Inside a body of unknown length only a message
      // start ends it, gap or not (analyze_l7). Anything else may have held
      // a head's start.
      if (fs_.body[dir_] >= uint32_t(delta)) fs_.body[dir_] -= uint32_t(delta);
      else if (!fs_.unbounded[dir_] && !(fs_.stream_failed & bit_)) fs_.stream_failed |= bit_, ++gs.gaps;
    } else if (delta != 0) {
      fs_.stream_failed |= bit_;
    }
  }
  fs_.released |= bit_;
  fs_.released_end[dir_] = seq + len;
  if (!(fs_.stream_failed & bit_)) return Order::InOrder;
  if (!pp.message_start(pl, avail, from_init)) {
    gs.closed(len);
    return Order::Closed;
  }
  resume(gs);
  return Order::InOrder;
}

bool StreamTracker::closed(const ProtocolPlugin* pp, const uint8_t* pl, uint32_t avail, uint32_t seq, uint32_t len,
                           bool from_init, StreamGapStats& gs) {
  // A retransmission of bytes rewritten from a held stream stays closed
  // even when it starts a message: its slice of that rewrite is gone.
  if (repeats_released(seq)) return true;
  if (!failed_before()) return false;
  if (!pp || !pp->message_start || !pp->message_start(pl, avail, from_init)) {
    gs.closed(len);
    return true;
  }
  resume(gs);
  return false;
}

// The counts of the messages before the gap say nothing of the bytes after
// it: the parse starts afresh at the message start.
void StreamTracker::resume(StreamGapStats& gs) {
  fs_.stream_failed &= uint8_t(~bit_);
  fs_.pending[dir_] = fs_.body[dir_] = 0;
  fs_.unbounded[dir_] = 0;
  fs_.names_done &= uint8_t(~bit_);
  ++gs.resyncs;
}

}  // namespace amon
