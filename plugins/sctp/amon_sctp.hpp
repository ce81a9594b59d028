// SCTP (RFC 9260, IP protocol 132): the addresses an association's peers
// tell each other in their chunks, each an address of the network (its
// role's rule, as the same address in an IP header). The plugin parses the
// IP payload whole (ProtocolPlugin::l4_proto).
#pragma once

#include <cstdint>

#include "protocol.h"
#include "role_addrs.h"

namespace amon::sctp_plugin {

inline constexpr uint8_t kProto = 132;

enum class Result : uint8_t { Ok, Malformed };

struct Parsed {
  AddrSpans addrs;
};

// The parser, which knows nothing of the registry. `p`: the SCTP packet,
// common header first. Addresses in the INIT and INIT ACK address
// parameters (IPv4 5, IPv6 6), in ASCONF's add, delete and set-primary
// parameters (RFC 5061) and the address an ASCONF names itself by; in
// what is opaque to the receiver and copied from an INIT (a State Cookie,
// a COOKIE ECHO, error causes) or from the sender's socket (HEARTBEAT
// information): embedded address parameters, and the
// packet's own header addresses (`src`, `dst`, `alen` bytes each; null
// when unknown) wherever they lie. Malformed: a chunk or parameter whose
// length runs past its container, or a Host Name Address parameter (a name
// no address rule maps). `cut`: the capture cut the packet at `len`; a
// chunk it cut is parsed as far as captured when it carries no address.
Result parse(const uint8_t* p, uint32_t len, const uint8_t* src, const uint8_t* dst, uint8_t alen, Parsed& r,
             bool cut = false);

// The packet's CRC32c (RFC 9260 appendix A) with its checksum field taken
// as zero, as the value that field holds when right (bytes 8-11, least
// significant first).
uint32_t checksum(const uint8_t* p, uint32_t len);

const ProtocolPlugin& protocol_plugin();

}  // namespace amon::sctp_plugin
