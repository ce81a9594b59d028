// STUN and TURN (RFC 5389/8489, RFC 5766/8656, RFC 5780, and the classic
// STUN of RFC 3489): the attributes that carry a transport address
// (MAPPED-ADDRESS, XOR-MAPPED-ADDRESS, XOR-PEER-ADDRESS,
// XOR-RELAYED-ADDRESS, RESPONSE-ORIGIN, OTHER-ADDRESS, ALTERNATE-SERVER,
// and RFC 3489's RESPONSE-, SOURCE-, CHANGED-ADDRESS and REFLECTED-FROM)
// and USERNAME. A message is recognised on any port by its magic cookie;
// on the STUN port a classic message without one is read too.
#pragma once

#include <cstdint>

#include "protocol.h"

namespace amon::stun_plugin {

inline constexpr uint16_t kPort = 3478;
inline constexpr uint32_t kCookie = 0x2112a442;

// Where a value lies, in bytes from the payload's start.
struct Span {
  uint32_t off = 0, len = 0;
};

// What the messages of one payload hold.
struct Parsed {
  static constexpr unsigned kMax = 64;
  // An address attribute's address (4 or 16 bytes); `coded`: XOR-ed with
  // the magic cookie and, for IPv6, the transaction ID that follows it
  // (RFC 8489 14.2): with as many bytes from `key`, the message's cookie.
  struct Addr {
    Span at;
    bool coded = false;
    uint32_t key = 0;
  };
  Addr addr[kMax];
  unsigned n_addr = 0;
  Span user[kMax];
  unsigned n_user = 0;
  // FINGERPRINT attributes that verify (RFC 8489 14.7): where their
  // message starts, where the attribute starts (the CRC covers what lies
  // between). A rewrite must compute them again: a CRC over the message
  // is linear in it, so one left as it came gives back 32 bits of what
  // was rewritten (a whole IPv4 address).
  struct Finger {
    uint32_t msg = 0, attr = 0;
  };
  Finger finger[kMax];
  unsigned n_finger = 0;
};

enum class Result : uint8_t { Ok, NotStun, Incomplete, Malformed };

// A STUN message header with the magic cookie at the payload's start: the
// first two bits zero, a length in whole words, the cookie.
bool has_cookie(const uint8_t* p, uint32_t len);

// The messages of a datagram (one message, the whole payload: `classic`
// allows one without the cookie) or of a TCP segment (messages and TURN
// ChannelData frames back to back; the last message may continue in the
// next segment: Incomplete).
Result parse(const uint8_t* p, uint32_t len, bool stream, bool classic, Parsed& out);

// A FINGERPRINT's value for the message bytes [msg, attr).
uint32_t fingerprint(const uint8_t* p, uint32_t msg, uint32_t attr);

// The descriptors Registry::add_protocol takes (plugin.cpp): over UDP and over TCP.
const ProtocolPlugin& protocol_plugin();
const ProtocolPlugin& tcp_protocol_plugin();

}  // namespace amon::stun_plugin
