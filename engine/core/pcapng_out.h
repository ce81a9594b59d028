// The blocks of a pcapng output (pcap outputs named .pcapng): one section
// header, an interface description per link type the file carries, and an
// enhanced packet block per record. Nothing else is written: no comment,
// name, hardware or OS description, name resolution or statistics block,
// whatever the input carried (the metadata rule of doc/operations.md).
#pragma once

#include <cstdint>
#include <vector>

namespace amon::pcapng {

// A section header block (host byte order, length unknown).
void section_header(std::vector<uint8_t>& out);
// An interface description of link type `dlt`, its timestamps in
// nanoseconds (if_tsresol 9) or pcapng's default microseconds.
void interface(std::vector<uint8_t>& out, int dlt, uint32_t snaplen, bool nano);

// An enhanced packet block's fixed part, before the packet's bytes; after
// them come 0-3 bytes of padding and the block's length again (Trailer).
struct EpbHead {
  uint32_t type, total, iface, ts_hi, ts_lo, caplen, len;
};
struct Trailer {
  uint8_t pad[4];
  uint32_t total;
};
// Fills the head and trailer of a record of `caplen` bytes; returns the
// bytes of the trailer to write (padding and length), from &t.pad[4 - pad].
unsigned packet(EpbHead& h, Trailer& t, uint32_t iface, uint64_t ts_units, uint32_t caplen, uint32_t len);

}  // namespace amon::pcapng
