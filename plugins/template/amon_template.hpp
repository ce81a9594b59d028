// The template protocol: UDP datagrams on port 40404 that read
// `HELLO <host>` (a line end optional), a client announcing its host name.
// One field, template.host, the announced name.
#pragma once

#include <cstdint>

#include "protocol.h"

namespace amon::template_plugin {

inline constexpr uint16_t kPort = 40404;

// Where a message's host name lies, in bytes from the payload's start.
struct Span {
  uint32_t off = 0, len = 0;
};

// The parser, which knows nothing of the registry: false when the datagram
// is no message of the protocol.
bool find_host(const uint8_t* payload, uint32_t len, Span& host);

// The descriptor Registry::add_protocol takes (plugin.cpp).
const ProtocolPlugin& protocol_plugin();

}  // namespace amon::template_plugin
