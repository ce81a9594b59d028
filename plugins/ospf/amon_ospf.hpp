// OSPFv2 (RFC 2328) and OSPFv3 (RFC 5340), IP protocol 89: router IDs,
// interface addresses and prefixes in Hellos and link-state advertisements,
// each an address of the network (its role's rule, as the same address in
// an IP header). The plugin parses the IP payload whole
// (ProtocolPlugin::l4_proto).
#pragma once

#include <cstdint>

#include "protocol.h"
#include "role_addrs.h"

namespace amon::ospf_plugin {

inline constexpr uint8_t kProto = 89;

enum class Result : uint8_t { Ok, Malformed };

struct Parsed {
  AddrSpans addrs;
  uint8_t version = 0;
  uint32_t len = 0;  // the OSPF packet's length (its header's)
  // LSAs whose Fletcher checksum was right as they came, by offset.
  static constexpr unsigned kMaxLsas = 1024;
  unsigned n_lsa = 0;
  uint32_t lsa[kMaxLsas];
};

// The parser, which knows nothing of the registry. `p`: the OSPF packet.
// Addresses: the router ID; a Hello's DR, BDR and neighbours; the LSA
// headers' advertising routers (and OSPFv2's link state IDs, an address or
// a router ID in every type) in database descriptions, requests, updates
// and acknowledgements; in OSPFv2 LSAs, router links' IDs and data (not a
// stub's mask), networks' attached routers, external forwarding
// addresses; in OSPFv3 LSAs, neighbour router IDs, attached routers,
// destination and referenced routers, forwarding addresses, a Link-LSA's
// link-local address, and prefixes (a span of the bytes the prefix is
// stored in: fewer than 16 for a shorter prefix); in opaque LSAs (TE,
// grace, router information, extended prefix and link) and OSPFv3
// extended LSAs (RFC 8362), the addresses of their TLVs and sub-TLVs. Malformed: a length past its container, an LSA type or a
// TLV of unknown layout, another version.
Result parse(const uint8_t* p, uint32_t len, Parsed& r);

// The Fletcher checksum an LSA of `len` bytes at `lsa` holds when right
// (RFC 2328 12.1.7; RFC 905 annex B), its age and checksum not summed.
uint16_t lsa_checksum(const uint8_t* lsa, uint32_t len);

const ProtocolPlugin& protocol_plugin();

}  // namespace amon::ospf_plugin
