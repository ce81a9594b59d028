// The NetBIOS datagram service (RFC 1002 4.4, UDP 138): Windows hosts
// announce themselves to their workgroup through it (SMB browser mailslot
// messages). Its header names the sending host and the destination (a host,
// a workgroup) in NetBIOS first-level encoding, and carries the sender's
// IP address; the user data (an SMB mailslot message: a browser
// announcement, election or backup list) repeats host and workgroup names
// and may carry a free-text comment.
#pragma once

#include <cstdint>

#include "protocol.h"

namespace amon::netbios_plugin {

inline constexpr uint16_t kPort = 138;
// A first-level encoded NetBIOS name: 16 bytes as 32 letters 'A'..'P'.
inline constexpr uint32_t kEncodedLen = 32;

// Where a datagram's values lie, in bytes from the payload's start.
struct Datagram {
  static constexpr unsigned kMaxValues = 64;
  uint32_t src_ip = 0;  // the header's source IP (4 bytes)
  // The encoded names (kEncodedLen letters each): the source name, the
  // destination name (absent from an error datagram).
  uint32_t name_off[2] = {}, n_names = 0;
  uint32_t data_off = 0, data_len = 0;  // the user data, to the payload's end
  // The user data's values: a browser message's host and workgroup names
  // (their characters, without the NULs that end or pad them), free-text
  // comments and what a name's fixed field holds after its NUL (`comment`:
  // text taking the rule on its bytes), in the order they come.
  struct Value {
    uint32_t off, len;
    bool comment;
  };
  Value values[kMaxValues];
  uint32_t n_values = 0;
};

// The parser, which knows nothing of the registry: false when the payload
// is no datagram of the service, one whose names carry a scope (text
// nothing here rewrites), a fragment of one (its user data cannot be read
// whole), or one whose user data is not a browser message (an SMB mailslot
// write to \MAILSLOT\BROWSE of a message [MS-BRWS] defines, nothing after
// it but zeros): any other mailslot message (NETLOGON's) may carry names
// and addresses nothing here locates.
bool parse_datagram(const uint8_t* payload, uint32_t len, Datagram& out);

// First-level encoding (RFC 1001 14.1): each half byte as 'A' + its value.
void decode_name(const uint8_t* encoded, uint8_t name[16]);
void encode_name(const uint8_t name[16], uint8_t* encoded);

// The descriptor Registry::add_protocol takes (plugin.cpp).
const ProtocolPlugin& protocol_plugin();

}  // namespace amon::netbios_plugin
