// LISP control messages (RFC 9301, UDP 4342): the EIDs and locators of
// Map-Request, Map-Reply, Map-Register, Map-Notify and Map-Notify-Ack, each
// an address of the network (its role's rule, as the same address in an IP
// header: an EID is a host's address, a locator a router's).
#pragma once

#include <cstdint>

#include "protocol.h"
#include "role_addrs.h"

namespace amon::lisp_plugin {

inline constexpr uint16_t kPort = 4342;

enum class Result : uint8_t { Ok, Malformed };

struct Parsed {
  AddrSpans addrs;
};

// The parser, which knows nothing of the registry. `p`: the UDP payload.
// A Map-Request's source EID, ITR-RLOCs, requested EID prefixes and the
// record it may carry; the records of a Map-Reply, Map-Register, Map-Notify
// or Map-Notify-Ack (EID prefix, locators). Malformed: an address family
// other than IPv4, IPv6 and none (LCAF may nest anything, a MAC among it),
// an Encapsulated Control Message (an inner packet), another message type,
// a length past the payload, bytes after the last field.
Result parse(const uint8_t* p, uint32_t len, Parsed& r);

const ProtocolPlugin& protocol_plugin();

}  // namespace amon::lisp_plugin
