// Addresses written as text in payload a policy keeps: FTP's PORT and
// PASV replies, SIP and SDP, an HTTP `Host:` naming its server by address,
// a syslog line, a fuzzed or unknown protocol. Where the policy maps a
// packet's own address, its text forms in the kept payload are the same
// address in clear; they take the same mapping, at the same length, so no
// length or sequence number moves.
#pragma once

#include <cstdint>

#include "protocol.h"

namespace amon {

struct AddrTextCount {
  unsigned mapped = 0;  // rewritten to the mapped address's text
  unsigned zeroed = 0;  // the mapped text did not fit in the original's length: the zero address
};

// Rewrites in p[0, n) every text form of the address `old_a` (4 or 16
// bytes, `alen`) into a text form of `new_a` of exactly the same length:
// IPv4 as a dotted quad (no leading zeros in what it looks for; octets of
// the replacement are padded with leading zeros where it is shorter);
// IPv6 in its RFC 5952 form (either case) and fully expanded. A
// replacement that cannot be that short is the zero address at that length.
// A match must stand alone (no digit, dot, hex digit or colon that would
// make it part of a longer number or address).
// `before_write(ctx)`, when given, runs once before the first byte changes
// (a caller that updates checksums takes the old sum there).
AddrTextCount map_addr_text(uint8_t* p, uint32_t n, const uint8_t* old_a, const uint8_t* new_a, unsigned alen,
                            void (*before_write)(void*) = nullptr, void* ctx = nullptr);

// map_addr_text for up to two addresses (a packet's source and
// destination) in one pass over the payload.
AddrTextCount map_addrs_text(uint8_t* p, uint32_t n, const uint8_t* const* olds, const uint8_t* const* news,
                             unsigned count, unsigned alen, void (*before_write)(void*) = nullptr,
                             void* ctx = nullptr);

// The same addresses in binary (4 or 16 bytes) in p[0, n), each rewritten
// to its mapping: an agent or a peer-to-peer login that writes its own
// address into an unparsed payload (Ares, a game's discovery, a NAT probe).
// Only the packet's own addresses are looked for, so four bytes match by
// chance about once in 2^31 bytes of random payload (two addresses); an
// IPv4 address with two zero bytes is not looked for (structured binary
// data is full of such runs).
// Returns the number rewritten.
unsigned map_addrs_binary(uint8_t* p, uint32_t n, const uint8_t* const* olds, const uint8_t* const* news,
                          unsigned count, unsigned alen, void (*before_write)(void*) = nullptr, void* ctx = nullptr);

// What one scan of a packet's payload found, for every consumer that maps
// its addresses: each consumer's rewrite is then a few copies instead of a
// scan (the scan is as costly as a copy of the payload, per consumer).
// Separate standalone texts of two different addresses never overlap (each
// ends where no digit, dot, hex digit or colon continues it), so what a scan
// for both addresses finds, restricted to the addresses one consumer
// changed, is what a scan for those alone finds.
struct AddrTextMatch {
  uint32_t from;  // offset in the scanned bytes
  uint8_t len;
  uint8_t who;  // bit 0: a form of the source address; bit 1: of the destination (both when they are equal)
};
struct AddrTextMemo {
  static constexpr unsigned kMax = 8;
  uint32_t scanned = UINT32_MAX;  // the length scanned; UINT32_MAX: not yet
  uint8_t count = 0;
  bool overflow = false;  // more than kMax: each consumer scans for itself
  AddrTextMatch m[kMax];
};

// Finds every text form of `src` and of `dst` in p[0, n) (p unchanged).
void find_addrs_text(const uint8_t* p, uint32_t n, const uint8_t* src, const uint8_t* dst, unsigned alen,
                     AddrTextMemo& out);
// map_addrs_text from what find_addrs_text found in these same bytes:
// `new_src`/`new_dst` are the mapped addresses, null for one the consumer
// left as it was. Needs !memo.overflow.
AddrTextCount apply_addrs_text(uint8_t* p, const AddrTextMemo& memo, const uint8_t* new_src, const uint8_t* new_dst,
                               unsigned alen, void (*before_write)(void*) = nullptr, void* ctx = nullptr);

// The same length of text for an IPv4 address `a` in `out[0, len)`, octets
// padded with leading zeros: false when its shortest form is longer.
bool fit_ipv4_text(const uint8_t* a, char* out, unsigned len);
// An IPv6 text form of `a` of exactly `len` characters (2..39): false when
// there is none.
bool fit_ipv6_text(const uint8_t* a, char* out, unsigned len);
// The text written in place of a `len`-character form of an address now
// `new_a` (4 or 16 bytes, `alen`): its form of that length, or (false) the
// zero address at that length.
bool fit_addr_text(const uint8_t* new_a, unsigned alen, unsigned len, char* text);
// The same for an address written in form f (ProtoOcc::form) by a plugin
// that located it: Text as fit_addr_text writes it; Decimal (an IPv4
// address as one number) padded with leading zeros, or all zeros (the
// zero address) when the number has more digits than `len`.
bool fit_addr_form(const uint8_t* new_a, unsigned alen, AddrForm f, unsigned len, char* text);
// p[from, to) stands alone as an address text: no digit, dot (IPv4), hex
// digit or colon (IPv6) around it makes it part of a longer one.
bool addr_text_alone(const uint8_t* p, uint32_t n, uint32_t from, uint32_t to, unsigned alen);
// The shortest text of an IPv4 address, and IPv6 in its RFC 5952 form
// (lower case): what the scans look for. Returns the length.
unsigned addr_text_of(const uint8_t* a, unsigned alen, char* out);

}  // namespace amon
