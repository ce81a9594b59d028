// Internet checksum (RFC 1071) helpers, incremental update (RFC 1624).
//
// Convention: every 16-bit value here is the NUMERIC value of big-endian
// 16-bit words, i.e. what rte_be_to_cpu_16() of the checksum field gives.
// Store results with rte_cpu_to_be_16() (or equivalent). "Sum" = the folded,
// not inverted, ones-complement sum; "checksum" = the value for the header field.
//
// Why not DPDK's rte_raw_cksum: it accumulates 16-bit words in 32 bits (one
// add per 2 bytes, overflows past ~128 KiB); csum_sum adds 32-bit halves of
// 64-bit loads into 64-bit accumulators. Tests cross-check both; the
// benchmark prints both throughputs. rte_ipv4_phdr_cksum/rte_ipv6_phdr_cksum
// take the L4 length from the IP header, which is wrong with IPv6 extension
// headers and for IP fragments/trimmed payloads, so the pseudo-header sums
// below take the length explicitly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace amon {

// Ones-complement sum of `data` treated as big-endian 16-bit words; an odd
// trailing byte is padded with a zero low byte. `initial` is added in.
uint16_t csum_sum(std::span<const uint8_t> data, uint16_t initial = 0);

// Ones-complement addition of two sums.
inline uint16_t csum_add(uint16_t a, uint16_t b) {
    uint32_t s = uint32_t{a} + b;
    return static_cast<uint16_t>((s & 0xffff) + (s >> 16));
}

// Folds any 64-bit accumulation of 16-bit words down to a 16-bit sum.
inline uint16_t csum_fold(uint64_t acc) {
    acc = (acc & 0xffffffffu) + (acc >> 32);
    acc = (acc & 0xffffu) + (acc >> 16);
    acc = (acc & 0xffffu) + (acc >> 16);
    acc = (acc & 0xffffu) + (acc >> 16);
    return static_cast<uint16_t>(acc);
}

// Adds the sum of a chunk that starts `offset` bytes into the checksummed
// region (chunked or scattered data): a chunk at an odd offset has its bytes
// in the opposite halves of every word, hence the byte swap.
inline uint16_t csum_add_at(uint16_t total, uint16_t chunk_sum, size_t offset) {
    if (offset & 1) chunk_sum = static_cast<uint16_t>(chunk_sum << 8 | chunk_sum >> 8);
    return csum_add(total, chunk_sum);
}

// Checksum field value from a sum (TCP, ICMP, ICMPv6, IPv4 header).
inline uint16_t csum_finish(uint16_t sum) { return static_cast<uint16_t>(~sum); }

// UDP: a computed 0 is transmitted as 0xFFFF, because 0 means "no checksum"
// (RFC 768; RFC 8200 section 8.1 for IPv6).
inline uint16_t csum_finish_udp(uint16_t sum) {
    const uint16_t c = static_cast<uint16_t>(~sum);
    return c == 0 ? 0xffff : c;
}

// IPv4 header checksum over the whole header (IHL*4 bytes, options included);
// the current checksum field (bytes 10-11) is ignored. hdr.size() >= 20.
uint16_t ipv4_header_checksum(std::span<const uint8_t> hdr);

// Pseudo-header sums. l4_len is the upper-layer length (TCP/UDP header +
// payload), not the IP payload length: they differ with IPv6 extension headers.
uint16_t pseudo_sum_v4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto, uint16_t l4_len);
uint16_t pseudo_sum_v6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                       uint32_t l4_len);

// Full TCP (6) / UDP (17) / ICMPv6 (58, v6 only) checksum: pseudo-header plus
// `l4` (header + payload) with the 2 bytes at csum_offset (TCP 16, UDP 6,
// ICMPv6 2) treated as zero. For UDP the 0 -> 0xFFFF rule is applied.
uint16_t l4_checksum_v4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto,
                        std::span<const uint8_t> l4, size_t csum_offset);
uint16_t l4_checksum_v6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                        std::span<const uint8_t> l4, size_t csum_offset);

// RFC 1624 eqn. 3 incremental update, HC' = ~(~HC + ~m + m'), for a field
// that changed from old_bytes to new_bytes (same length; 2, 4 and 16 bytes are
// the usual ports/addresses). field_offset is the field's byte offset in the
// checksummed region; only its parity matters.
uint16_t csum_replace(uint16_t old_csum, std::span<const uint8_t> old_bytes,
                      std::span<const uint8_t> new_bytes, size_t field_offset = 0);

// UDP variant: a checksum of 0 means the sender computed none (allowed over
// IPv4; over IPv6 only for tunnels, RFC 6935) and stays 0 - "updating" it would
// invent a checksum over data nobody summed. A result of 0 becomes 0xFFFF.
uint16_t csum_replace_udp(uint16_t old_csum, std::span<const uint8_t> old_bytes,
                          std::span<const uint8_t> new_bytes, size_t field_offset = 0);

}  // namespace amon
