// The NetBIOS datagram service (RFC 1002 4.4, UDP 138): Windows hosts
// announce themselves to their workgroup through it (SMB browser mailslot
// messages). Its header names the sending host and the destination (a host,
// a workgroup) in NetBIOS first-level encoding, and carries the sender's
// IP address; the user data (a mailslot message) repeats the host name and
// a free-text comment.
#pragma once

#include <cstdint>

#include "protocol.h"

namespace amon::netbios_plugin {

inline constexpr uint16_t kPort = 138;
// A first-level encoded NetBIOS name: 16 bytes as 32 letters 'A'..'P'.
inline constexpr uint32_t kEncodedLen = 32;

// Where a datagram's values lie, in bytes from the payload's start.
struct Datagram {
  uint32_t src_ip = 0;  // the header's source IP (4 bytes)
  // The encoded names (kEncodedLen letters each): the source name, the
  // destination name (absent from an error datagram).
  uint32_t name_off[2] = {}, n_names = 0;
  uint32_t data_off = 0, data_len = 0;  // the user data, to the payload's end
};

// The parser, which knows nothing of the registry: false when the payload
// is no datagram of the service (or one whose names carry a scope, which
// nothing here rewrites).
bool parse_datagram(const uint8_t* payload, uint32_t len, Datagram& out);

// First-level encoding (RFC 1001 14.1): each half byte as 'A' + its value.
void decode_name(const uint8_t* encoded, uint8_t name[16]);
void encode_name(const uint8_t name[16], uint8_t* encoded);

// The descriptor Registry::add_protocol takes (plugin.cpp).
const ProtocolPlugin& protocol_plugin();

}  // namespace amon::netbios_plugin
