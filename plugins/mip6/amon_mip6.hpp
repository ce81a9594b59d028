// Mobile IPv6's Mobility Header (RFC 6275; IP protocol 135, the last header
// of an IPv6 packet's chain): home, care-of, home agent and anchor
// addresses in its messages and mobility options, each an address of the
// network (its role's rule, as the same address in an IP header). The
// plugin parses the IP payload whole (ProtocolPlugin::l4_proto).
#pragma once

#include <cstdint>

#include "protocol.h"
#include "role_addrs.h"

namespace amon::mip6_plugin {

inline constexpr uint8_t kProto = 135;

enum class Result : uint8_t { Ok, Malformed };

struct Parsed {
  AddrSpans addrs;
  uint32_t len = 0;  // the Mobility Header's length (its header's)
  // Option data that names a node by something other than an address (a
  // link-layer address, an NAI, a host name, a public key, vendor data),
  // or an authenticator that would confirm a guess of the addresses it
  // covers: zeroed where addresses are protected.
  struct Span {
    uint32_t off, len;
  };
  static constexpr unsigned kMaxZero = 128;
  unsigned n_zero = 0;
  Span zero[kMaxZero];
};

// The parser, which knows nothing of the registry. `p`: the Mobility
// Header, `len` bytes captured. Addresses: a Binding Error's home address;
// a Home Agent Switch's home agents; in mobility options, an alternate
// care-of address (IPv6 or IPv4), a mobile network or home network prefix
// (a span of the bytes the prefix is stored in), a link-local address, an
// IPv4 home, care-of or default router address, an FMIPv6 address or
// prefix, a binding identifier's care-of address, a local mobility
// anchor's or a MAG's address, a redirect's LMA addresses. Malformed: a
// length past its container, a message type or mobility option of unknown
// layout, bytes after the header (its Payload Proto names no other: the
// chain ends with it, RFC 6275 6.1.1).
Result parse(const uint8_t* p, uint32_t len, Parsed& r);

const ProtocolPlugin& protocol_plugin();

}  // namespace amon::mip6_plugin
