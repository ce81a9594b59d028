// BGP-4 (RFC 4271) over TCP 179: the BGP identifier of an OPEN, the
// next hops, aggregators, originator, cluster list and IPv4-address-specific
// extended communities of an UPDATE, and its IPv4 and IPv6 (unicast and
// multicast) prefixes, each an address of the network (its role's rule, as
// the same address in an IP header). Messages are framed by their length:
// several share a segment, and one may run on into the next segments.
#pragma once

#include <cstdint>

#include "protocol.h"
#include "role_addrs.h"

namespace amon::bgp_plugin {

inline constexpr uint16_t kPort = 179;

enum class Result : uint8_t {
  Ok,         // every message whole and understood
  Cut,        // those before `end` are; the one at `end` runs on past the bytes given
  Malformed,  // a message not understood: a type, attribute, family or length not known to hold only what is parsed
};

// ADD-PATH (RFC 7911): whether the NLRI of one direction's UPDATEs carry a
// path identifier before each prefix, per family (family_index: IPv4 and
// IPv6, unicast and multicast), 2 bits each in one byte.
enum class PathIds : uint8_t { Unknown = 0, Without = 1, With = 2 };
// 0..3 for AFI 1/2 and SAFI 1/2; -1 for any other family.
inline int family_index(uint16_t afi, uint8_t safi) {
  return (afi == 1 || afi == 2) && (safi == 1 || safi == 2) ? (afi - 1) * 2 + (safi - 1) : -1;
}
inline PathIds path_ids(uint8_t modes, int fam) { return PathIds(modes >> (2 * fam) & 3); }
inline void set_path_ids(uint8_t& modes, int fam, PathIds m) {
  modes = uint8_t((modes & ~(3u << (2 * fam))) | unsigned(m) << (2 * fam));
}
// What two OPENs negotiated for the UPDATEs one speaker sends: path
// identifiers where it may send them and its peer receive them (RFC 7911
// section 5); caps as Parsed::addpath.
uint8_t negotiated(uint8_t sender_caps, uint8_t receiver_caps);

struct Parsed {
  AddrSpans addrs;
  // By span: a prefix's length in bits (its bits past it are kept zero), 0
  // for an address.
  uint8_t bits[AddrSpans::kMax];
  uint32_t end = 0;   // Cut: where the message that runs on starts
  uint32_t need = 0;  // Cut: bytes still to come before it ends (0: its header is cut, unknown)
  bool open = false;  // an OPEN was parsed: `addpath` is its speaker's
  // The OPEN's ADD-PATH capability: per family, bit 2i receive, 2i+1 send.
  uint8_t addpath = 0;
};

// The parser, which knows nothing of the registry. `p`: a TCP payload
// starting at a message. `modes`: the direction's PathIds per family, in
// and out: a family still unknown is settled by an UPDATE whose prefixes
// parse one way only (one that parses both ways is Malformed). Addresses:
// an OPEN's BGP identifier; an UPDATE's withdrawn routes and NLRI, NEXT_HOP,
// AGGREGATOR and AS4_AGGREGATOR's address, ORIGINATOR_ID, CLUSTER_LIST,
// the address of an IPv4-address-specific extended community, and
// MP_REACH_NLRI / MP_UNREACH_NLRI of IPv4 and IPv6 unicast and multicast:
// next hops (an IPv6 global and link-local pair too) and prefixes (a span
// of the bytes a prefix is stored in, none for a zero-length one).
Result parse(const uint8_t* p, uint32_t len, uint8_t& modes, Parsed& r);

// A segment that begins with a message header: the marker, a length of a
// header at least, a known type.
bool message_start(const uint8_t* p, uint32_t len);

const ProtocolPlugin& protocol_plugin();

}  // namespace amon::bgp_plugin
