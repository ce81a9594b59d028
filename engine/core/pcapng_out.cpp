#include "pcapng_out.h"

#include <cstring>

namespace amon::pcapng {

namespace {
void put32(std::vector<uint8_t>& o, uint32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  o.insert(o.end(), b, b + 4);
}
void put16(std::vector<uint8_t>& o, uint16_t v) {
  uint8_t b[2];
  std::memcpy(b, &v, 2);
  o.insert(o.end(), b, b + 2);
}
}  // namespace

void section_header(std::vector<uint8_t>& out) {
  put32(out, 0x0A0D0D0A);
  put32(out, 28);
  put32(out, 0x1A2B3C4D);  // byte-order magic
  put16(out, 1);
  put16(out, 0);
  put32(out, 0xffffffff);  // section length: not given (-1)
  put32(out, 0xffffffff);
  put32(out, 28);
}

void interface(std::vector<uint8_t>& out, int dlt, uint32_t snaplen, bool nano) {
  const uint32_t total = 20 + (nano ? 12 : 0);
  put32(out, 1);
  put32(out, total);
  // The file's LINKTYPE_ value: libpcap's DLT_RAW (12 on Linux) is
  // LINKTYPE_RAW (101), the one the reader maps the other way (pcapio).
  put16(out, uint16_t(dlt == 12 ? 101 : dlt));
  put16(out, 0);
  put32(out, snaplen);
  if (nano) {
    put16(out, 9);  // if_tsresol: 10^-9
    put16(out, 1);
    put32(out, 9);  // the value's byte and three of padding
    put32(out, 0);  // opt_endofopt
  }
  put32(out, total);
}

unsigned packet(EpbHead& h, Trailer& t, uint32_t iface, uint64_t ts_units, uint32_t caplen, uint32_t len) {
  const unsigned pad = (4 - caplen % 4) % 4;
  h.type = 6;
  h.total = uint32_t(sizeof(EpbHead)) + caplen + pad + 4;
  h.iface = iface;
  h.ts_hi = uint32_t(ts_units >> 32);
  h.ts_lo = uint32_t(ts_units);
  h.caplen = caplen;
  h.len = len;
  std::memset(t.pad, 0, sizeof t.pad);
  t.total = h.total;
  return pad + 4;
}

}  // namespace amon::pcapng
