// Link types other than Ethernet as the packet path reads them. A record is
// split into its link header and the rest: the rest rides behind a stand-in
// Ethernet header (its EtherType, and a Linux cooked capture's address as
// eth.src, so the policy's MAC rules apply to it), and what the writer
// needs to put the original header back is kept aside (LinkHeader).
// Ethernet, raw IP, Linux cooked v1/v2, BSD loopback, PPP and Cisco HDLC.
// The engine's capture reader and writer use it, and amon audit reads
// captures through it so that it sees the frames the engine saw.
#pragma once

#include <cstdint>

namespace amon::pcapio {

constexpr uint32_t kStandInLen = 14;
// LinkHeader::len flag: the bytes are the whole (cut) header, written back as they are.
constexpr uint8_t kLinkRaw = 0x80;

// The original link header of a non-Ethernet capture record, less what moved
// into the stand-in Ethernet header (the Linux cooked address).
struct LinkHeader {
  uint8_t len;  // bytes used; kLinkRaw flags a cut header
  uint8_t bytes[15];
};

// Fills the stand-in Ethernet header `eth` (kStandInLen bytes) and `lh`
// for a record of link type `dlt`; returns the link header's length in the
// record (at most `cap`). An unknown link type gives EtherType 0.
uint32_t link_to_ethernet(int dlt, const uint8_t* p, uint32_t cap, uint8_t* eth, LinkHeader& lh);
// The inverse: the original link header for a packet whose first
// kStandInLen bytes are the (possibly rewritten) stand-in header, into
// `out` (32 bytes). Returns its length.
uint32_t ethernet_to_link(int dlt, const uint8_t* eth, const LinkHeader& lh, uint8_t* out);

}  // namespace amon::pcapio
