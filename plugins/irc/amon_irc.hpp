// IRC (RFC 1459/2812 lines over TCP 6667): the addresses its CTCP DCC
// requests carry. `DCC SEND|CHAT|XMIT|... <argument> <address> <port> ...`
// names the sender's address for the peer to connect to, as a decimal
// 32-bit number (IPv4), IPv6 text or, from some clients, a dotted quad;
// `DCC RESUME|ACCEPT <file> <port> <position>` names none. The parser
// locates each address; the plugin hands them to the runtime as role
// addresses written as text (ProtoOcc::form).
//
// Addresses written elsewhere in a line (a prefix's `nick!user@1.2.3.4`,
// RPL_WELCOME, USERHOST and WHO/WHOIS replies) are dotted text the
// runtime's search of kept payload rewrites where they are the packet's own
// or known to the consumer (addr_text.h, echo.h); a host *name* there (a
// reverse-DNS result) is no address and stays as it came.
#pragma once

#include <cstdint>

#include "protocol.h"

namespace amon::irc {

inline constexpr uint16_t kPort = 6667;
// The longest line read: 512 bytes of message (RFC 2812 2.3) and 8191 of
// IRCv3 message tags. A CTCP DCC request longer than the message part is no
// request.
inline constexpr uint32_t kMaxLine = 8191 + 512;
inline constexpr uint32_t kMaxDcc = 512;

struct Addr {
  uint32_t off, len;
  uint8_t family;  // 4 or 6
  AddrForm form;   // Decimal or Text
};

struct Parsed {
  static constexpr unsigned kMax = 512;
  unsigned n = 0;
  Addr addr[kMax];
  // Incomplete: where the line the segment cut begins; its DCC request
  // starts at `open_dcc`.
  uint32_t cut_line = 0, open_dcc = 0;
  unsigned lines = 0;  // whole lines read
};

enum class Result : uint8_t {
  Ok,          // every line whole, or the last one cut where no DCC request is open
  Incomplete,  // the segment ends inside a DCC request (or what may start one)
  Malformed,   // a DCC request that cannot be read, a NUL, a line too long
};

// Parses p[0, len), a TCP segment's bytes from a line's start or from the
// middle of a line the previous segment began (the first line is then that
// line's rest). Lines end at CR or LF. A line that ends without its line
// end is whole up to the segment's end unless a DCC request is open there.
Result parse(const uint8_t* p, uint32_t len, Parsed& out);

// Whether p[0, len) begins with the start of an IRC line: message tags
// (`@`), a prefix (`:name `) followed by a command, or a command known to
// clients and servers (a word of RFC 2812 and IRCv3, or three digits)
// followed by a space or the line's end. Strict: after a gap, the
// direction resumes only at a segment for which this holds.
bool line_start(const uint8_t* p, uint32_t len);

// The descriptor Registry::add_protocol takes (plugin.cpp).
const ProtocolPlugin& protocol_plugin();

}  // namespace amon::irc
