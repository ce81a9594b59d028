// PIM version 2 (RFC 7761 sparse mode, RFC 3973 dense mode, RFC 5059
// bootstrap), IP protocol 103: the encoded unicast, group and source
// addresses of its messages, each an address of the network (its role's
// rule, as the same address in an IP header). The plugin parses the IP
// payload whole (ProtocolPlugin::l4_proto).
#pragma once

#include <cstdint>

#include "protocol.h"
#include "role_addrs.h"

namespace amon::pim_plugin {

inline constexpr uint8_t kProto = 103;

enum class Result : uint8_t { Ok, Malformed };

struct Parsed {
  AddrSpans addrs;
  uint32_t summed = 0;  // the bytes the PIM checksum covers (a Register: its first 8)
  uint32_t inner = 0;   // a Register's inner IPv4 header length (0: none)
};

// The parser, which knows nothing of the registry. `p`: the PIM message.
// Addresses: a Hello's address list option; a Null-Register's dummy IP
// header (a Register carrying a data packet is the decoder's tunnel, which
// the plugin never sees; bytes after a header here are malformed); Register-Stop, Join/Prune,
// Graft, Graft-Ack, Assert and State Refresh's encoded addresses; a
// Bootstrap's BSR and RPs and their groups; a Candidate-RP-Advertisement's
// RP and groups. Malformed: an address family other than IPv4 and IPv6, a
// length past the message, another version or message type.
Result parse(const uint8_t* p, uint32_t len, Parsed& r);

const ProtocolPlugin& protocol_plugin();

}  // namespace amon::pim_plugin
