// Internet checksum (RFC 1071) helpers, incremental update (RFC 1624).
//
// Convention: every 16-bit value here is the NUMERIC value of big-endian
// 16-bit words, i.e. what rte_be_to_cpu_16() of the checksum field gives.
// Store results with rte_cpu_to_be_16() (or equivalent). "Sum" = the folded,
// not inverted, ones-complement sum; "checksum" = the value for the header field.
//
// Everything is inline: the packet path sums 4-, 16- and 20-byte spans,
// for which a call and the generic loop cost more than the sum itself.
//
// Why not DPDK's rte_raw_cksum: it accumulates 16-bit words in 32 bits (one
// add per 2 bytes, overflows past ~128 KiB); csum_sum adds 32-bit halves of
// 64-bit loads into 64-bit accumulators. Tests cross-check both; the
// benchmark prints both throughputs. rte_ipv4_phdr_cksum/rte_ipv6_phdr_cksum
// take the L4 length from the IP header, which is wrong with IPv6 extension
// headers and for IP fragments/trimmed payloads, so the pseudo-header sums
// below take the length explicitly.
#pragma once

#include <bit>
#include <cassert>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <span>

namespace amon {

// Ones-complement sum of `data` treated as big-endian 16-bit words; an odd
// trailing byte is padded with a zero low byte. `initial` is added in.
inline uint16_t csum_sum(std::span<const uint8_t> data, uint16_t initial = 0);

// Ones-complement addition of two sums.
inline uint16_t csum_add(uint16_t a, uint16_t b) {
    uint32_t s = uint32_t{a} + b;
    return static_cast<uint16_t>((s & 0xffff) + (s >> 16));
}

// Folds any 64-bit accumulation of 16-bit words down to a 16-bit sum.
// 64 -> 32 bits with the end-around carry (lo + hi < 2^33, so adding its
// carry back cannot carry again), then 32 -> 16 as x + rotr(x, 16), whose
// high half is hi + lo + the carry out of the low half: the same value as
// folding 16 bits at a time, zero only for zero.
inline uint16_t csum_fold(uint64_t acc) {
    const uint64_t t = (acc & 0xffffffffu) + (acc >> 32);
    const uint32_t x = static_cast<uint32_t>(t) + static_cast<uint32_t>(t >> 32);
    return static_cast<uint16_t>((x + std::rotr(x, 16)) >> 16);
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
inline uint16_t ipv4_header_checksum(std::span<const uint8_t> hdr);

// Pseudo-header sums. l4_len is the upper-layer length (TCP/UDP header +
// payload), not the IP payload length: they differ with IPv6 extension headers.
inline uint16_t pseudo_sum_v4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto, uint16_t l4_len);
inline uint16_t pseudo_sum_v6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                       uint32_t l4_len);

// Full TCP (6) / UDP (17) / ICMPv6 (58, v6 only) checksum: pseudo-header plus
// `l4` (header + payload) with the 2 bytes at csum_offset (TCP 16, UDP 6,
// ICMPv6 2) treated as zero. For UDP the 0 -> 0xFFFF rule is applied.
inline uint16_t l4_checksum_v4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto,
                        std::span<const uint8_t> l4, size_t csum_offset);
inline uint16_t l4_checksum_v6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                        std::span<const uint8_t> l4, size_t csum_offset);

// RFC 1624 eqn. 3 incremental update, HC' = ~(~HC + ~m + m'), for a field
// that changed from old_bytes to new_bytes (same length; 2, 4 and 16 bytes are
// the usual ports/addresses). field_offset is the field's byte offset in the
// checksummed region; only its parity matters.
inline uint16_t csum_replace(uint16_t old_csum, std::span<const uint8_t> old_bytes,
                      std::span<const uint8_t> new_bytes, size_t field_offset = 0);

// UDP variant: a checksum of 0 means the sender computed none (allowed over
// IPv4; over IPv6 only for tunnels, RFC 6935) and stays 0 - "updating" it would
// invent a checksum over data nobody summed. A result of 0 becomes 0xFFFF.
inline uint16_t csum_replace_udp(uint16_t old_csum, std::span<const uint8_t> old_bytes,
                          std::span<const uint8_t> new_bytes, size_t field_offset = 0);

// ---- definitions ----

namespace csum_detail {

inline uint16_t bswap16(uint16_t v) { return static_cast<uint16_t>(v << 8 | v >> 8); }

// Sum in native word order: the ones-complement sum commutes with byte
// swapping (RFC 1071 section 2(B)), so one swap at the end replaces a swap per
// word on little-endian hosts.
inline uint64_t native_acc(const uint8_t* p, size_t n) {
    // Four accumulators keep four independent add chains in flight. Each adds
    // at most 2^33 per 32 bytes, so 64 bits cannot overflow for any span.
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    while (n >= 32) {
        uint64_t w[4];
        std::memcpy(w, p, 32);
        a0 += (w[0] & 0xffffffffu) + (w[0] >> 32);
        a1 += (w[1] & 0xffffffffu) + (w[1] >> 32);
        a2 += (w[2] & 0xffffffffu) + (w[2] >> 32);
        a3 += (w[3] & 0xffffffffu) + (w[3] >> 32);
        p += 32;
        n -= 32;
    }
    uint64_t acc = a0 + a1 + a2 + a3;
    while (n >= 4) {
        uint32_t w;
        std::memcpy(&w, p, 4);
        acc += w;
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        uint16_t w;
        std::memcpy(&w, p, 2);
        acc += w;
        p += 2;
        n -= 2;
    }
    if (n) {
        // The odd byte is the first (high, in network order) byte of a word
        // whose second byte is zero padding; in native order that is where
        // the byte lands when stored at the word's address.
        uint16_t w = 0;
        std::memcpy(&w, p, 1);
        acc += w;
    }
    return acc;
}

inline uint16_t to_numeric(uint16_t native_sum) {
    if constexpr (std::endian::native == std::endian::little) return bswap16(native_sum);
    return native_sum;
}

}  // namespace csum_detail

inline uint16_t csum_sum(std::span<const uint8_t> data, uint16_t initial) {
    uint64_t acc;
    // Addresses (4 and 16 bytes) are what the packet path sums most: no loop for them.
    if (data.size() == 4) {
        uint32_t w;
        std::memcpy(&w, data.data(), 4);
        acc = w;
    } else if (data.size() == 16) {
        uint64_t w[2];
        std::memcpy(w, data.data(), 16);
        acc = (w[0] & 0xffffffffu) + (w[0] >> 32) + (w[1] & 0xffffffffu) + (w[1] >> 32);
    } else {
        acc = csum_detail::native_acc(data.data(), data.size());
    }
    return csum_add(initial, csum_detail::to_numeric(csum_fold(acc)));
}

inline uint16_t ipv4_header_checksum(std::span<const uint8_t> hdr) {
    assert(hdr.size() >= 20);
    // One accumulation with the checksum field masked out: the same sum as
    // adding the two sides of the field separately (a ones-complement sum
    // does not depend on where it is folded).
    // Masked in a register, not zeroed in a copy: bytes stored and then
    // reloaded as part of a wider word stall store forwarding.
    uint32_t w[5];
    std::memcpy(w, hdr.data(), 20);
    constexpr uint8_t keep[4] = {0xff, 0xff, 0, 0};  // bytes 8-11: keep 8-9, drop the field at 10-11
    uint32_t mask;
    std::memcpy(&mask, keep, 4);
    uint64_t acc = uint64_t(w[0]) + w[1] + (w[2] & mask) + w[3] + w[4] +
                   csum_detail::native_acc(hdr.data() + 20, hdr.size() - 20);
    return csum_finish(csum_detail::to_numeric(csum_fold(acc)));
}

// The same for the usual 20-byte header, without the options' loop; with
// new_total_len >= 0, as if bytes 2-3 (total length) held that value.
//
// The header is read in the widths it was just written in: the first 12
// bytes as 8 + 4, each address as 4 (a rewrite stores addresses as 4-byte
// words). One 16-byte load over a freshly stored address cannot take the
// stored value from the store buffer and waits for it to retire (perf: 6 %
// of the header kernel's samples sat on that load).
[[gnu::always_inline]] inline uint16_t ipv4_header_checksum20(const uint8_t* hdr, int32_t new_total_len = -1) {
    uint64_t w01;
    uint32_t w2, w3, w4;
    std::memcpy(&w01, hdr, 8);
    std::memcpy(&w2, hdr + 8, 4);
    std::memcpy(&w3, hdr + 12, 4);
    std::memcpy(&w4, hdr + 16, 4);
    // Ordered against the loads above so that they stay separate loads.
    asm("" : "+r"(w3), "+r"(w4));
    uint32_t w0 = uint32_t(w01), w1 = uint32_t(w01 >> 32);
    if (new_total_len >= 0) {
        uint8_t b[4] = {hdr[0], hdr[1], static_cast<uint8_t>(new_total_len >> 8), static_cast<uint8_t>(new_total_len)};
        std::memcpy(&w0, b, 4);
    }
    constexpr uint8_t keep[4] = {0xff, 0xff, 0, 0};
    uint32_t mask;
    std::memcpy(&mask, keep, 4);
    const uint64_t acc = uint64_t(w0) + w1 + (w2 & mask) + w3 + w4;
    return csum_finish(csum_detail::to_numeric(csum_fold(acc)));
}

// The sum of a 4- or 16-byte address, unrolled and inlined.
[[gnu::always_inline]] inline uint16_t csum_addr_sum(const uint8_t* addr, bool v4) {
    uint64_t o;
    if (v4) {
        uint32_t a;
        std::memcpy(&a, addr, 4);
        o = a;
    } else {
        uint64_t a[2];
        std::memcpy(a, addr, 16);
        o = (a[0] & 0xffffffffu) + (a[0] >> 32) + (a[1] & 0xffffffffu) + (a[1] >> 32);
    }
    return csum_detail::to_numeric(csum_fold(o));
}

// csum_replace for a field whose sums before and after are known.
[[gnu::always_inline]] inline uint16_t csum_replace_sums(uint16_t old_csum, uint16_t old_sum, uint16_t new_sum) {
    const uint16_t delta = csum_add(static_cast<uint16_t>(~old_sum), new_sum);
    return static_cast<uint16_t>(~csum_add(static_cast<uint16_t>(~old_csum), delta));
}

// csum_replace for a 4- or 16-byte field (an address) at an even offset:
// the same arithmetic, with the sums unrolled and inlined.
[[gnu::always_inline]] inline uint16_t csum_replace_addr(uint16_t old_csum, const uint8_t* old_bytes, const uint8_t* new_bytes, bool v4) {
    return csum_replace_sums(old_csum, csum_addr_sum(old_bytes, v4), csum_addr_sum(new_bytes, v4));
}

namespace csum_detail {

// Native-order sum of a short span (an L4 header): 8-byte loads.
[[gnu::always_inline]] inline uint64_t short_acc(const uint8_t* p, size_t n) {
    uint64_t acc = 0;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        acc += (w & 0xffffffffu) + (w >> 32);
    }
    if (n >= 4) {
        uint32_t w;
        std::memcpy(&w, p, 4);
        acc += w;
        p += 4, n -= 4;
    }
    if (n >= 2) {
        uint16_t w;
        std::memcpy(&w, p, 2);
        acc += w;
        p += 2, n -= 2;
    }
    if (n) {  // the odd byte, as native_acc adds it
        uint16_t w = 0;
        std::memcpy(&w, p, 1);
        acc += w;
    }
    return acc;
}

}  // namespace csum_detail

// The sum of the n bytes at `off` of a region summed as big-endian words,
// as a number to add into a 64-bit accumulation of that region's words (a
// span at an odd offset has its bytes in the other halves of the words):
// a rewrite that changes scattered spans adds their sums before and after,
// and the checksum moves by the difference. 8-byte loads: the spans are
// short (labels, addresses).
[[gnu::always_inline]] inline uint64_t csum_span_at(const uint8_t* region, size_t off, size_t n) {
    const uint16_t s = csum_detail::to_numeric(csum_fold(csum_detail::short_acc(region + off, n)));
    return (off & 1) ? csum_detail::bswap16(s) : s;
}

// l4_checksum_v4/v6 over a short L4 segment (a header left by a cut) whose
// checksum field is at an even offset, for TCP, UDP and ICMPv6: the field is
// summed with its complement (f + ~f = 0xffff, a ones-complement zero). That
// equals leaving it out whenever the rest sums to non-zero, which the
// pseudo-header's protocol number guarantees.
// With new_udp_len >= 0, as if bytes 4-5 (the UDP length) held that value
// (f + ~f as for the checksum field: the rest never sums to zero).
[[gnu::always_inline]] inline uint16_t l4_checksum_short(const uint8_t* ip_src, const uint8_t* ip_dst, bool v4, uint8_t proto,
                                  const uint8_t* l4, size_t len, size_t csum_offset, int32_t new_udp_len = -1) {
    uint64_t acc = 0;
    if (v4) {
        uint32_t a, b;
        std::memcpy(&a, ip_src, 4);
        std::memcpy(&b, ip_dst, 4);
        acc = uint64_t{a} + b + csum_detail::to_numeric(static_cast<uint16_t>(len));
    } else {
        uint64_t w[4];
        std::memcpy(w, ip_src, 16);
        std::memcpy(w + 2, ip_dst, 16);
        for (uint64_t x : w) acc += (x & 0xffffffffu) + (x >> 32);
        acc += csum_detail::to_numeric(static_cast<uint16_t>(len >> 16)) +
               csum_detail::to_numeric(static_cast<uint16_t>(len));
    }
    acc += csum_detail::to_numeric(proto);
    uint16_t f;
    std::memcpy(&f, l4 + csum_offset, 2);
    acc += csum_detail::short_acc(l4, len) + static_cast<uint16_t>(~f);
    if (new_udp_len >= 0) {
        uint16_t u;
        std::memcpy(&u, l4 + 4, 2);
        acc += static_cast<uint16_t>(~u) + csum_detail::to_numeric(static_cast<uint16_t>(new_udp_len));
    }
    const uint16_t s = csum_detail::to_numeric(csum_fold(acc));
    return proto == 17 ? csum_finish_udp(s) : csum_finish(s);
}

namespace csum_detail {

// The pseudo-headers in native word order (see native_acc): the addresses
// as loaded, the numeric words byte-swapped into the same order.
inline uint64_t pseudo_acc_v4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto, uint16_t l4_len) {
    uint32_t a, b;
    std::memcpy(&a, src, 4);
    std::memcpy(&b, dst, 4);
    return uint64_t{a} + b + to_numeric(proto) + to_numeric(l4_len);
}

inline uint64_t pseudo_acc_v6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header, uint32_t l4_len) {
    uint64_t w[4];
    std::memcpy(w, src, 16);
    std::memcpy(w + 2, dst, 16);
    uint64_t acc = 0;
    for (uint64_t x : w) acc += (x & 0xffffffffu) + (x >> 32);
    return acc + to_numeric(static_cast<uint16_t>(l4_len >> 16)) + to_numeric(static_cast<uint16_t>(l4_len)) +
           to_numeric(next_header);
}

// The L4 bytes without the (even-offset) checksum field, added to a
// pseudo-header's accumulation: one fold for all of it.
inline uint16_t l4_sum_skipping_acc(uint64_t acc, std::span<const uint8_t> l4, size_t csum_offset) {
    assert(csum_offset % 2 == 0 && csum_offset + 2 <= l4.size());
    acc += native_acc(l4.data(), csum_offset) + native_acc(l4.data() + csum_offset + 2, l4.size() - csum_offset - 2);
    return to_numeric(csum_fold(acc));
}

}  // namespace csum_detail

inline uint16_t pseudo_sum_v4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto, uint16_t l4_len) {
    return csum_detail::to_numeric(csum_fold(csum_detail::pseudo_acc_v4(src, dst, proto, l4_len)));
}

inline uint16_t pseudo_sum_v6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                       uint32_t l4_len) {
    return csum_detail::to_numeric(csum_fold(csum_detail::pseudo_acc_v6(src, dst, next_header, l4_len)));
}

inline uint16_t l4_checksum_v4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto,
                        std::span<const uint8_t> l4, size_t csum_offset) {
    const uint16_t s = csum_detail::l4_sum_skipping_acc(
        csum_detail::pseudo_acc_v4(src, dst, proto, static_cast<uint16_t>(l4.size())), l4, csum_offset);
    return proto == 17 ? csum_finish_udp(s) : csum_finish(s);
}

inline uint16_t l4_checksum_v6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                        std::span<const uint8_t> l4, size_t csum_offset) {
    const uint16_t s = csum_detail::l4_sum_skipping_acc(
        csum_detail::pseudo_acc_v6(src, dst, next_header, static_cast<uint32_t>(l4.size())), l4, csum_offset);
    return next_header == 17 ? csum_finish_udp(s) : csum_finish(s);
}

inline uint16_t csum_replace(uint16_t old_csum, std::span<const uint8_t> old_bytes,
                      std::span<const uint8_t> new_bytes, size_t field_offset) {
    assert(old_bytes.size() == new_bytes.size());
    // ~m + m' as one sum: the old field's sum enters complemented.
    uint16_t delta = csum_add(static_cast<uint16_t>(~csum_sum(old_bytes)), csum_sum(new_bytes));
    const uint16_t s = csum_add_at(static_cast<uint16_t>(~old_csum), delta, field_offset);
    return static_cast<uint16_t>(~s);
}

inline uint16_t csum_replace_udp(uint16_t old_csum, std::span<const uint8_t> old_bytes,
                          std::span<const uint8_t> new_bytes, size_t field_offset) {
    if (old_csum == 0) return 0;
    const uint16_t c = csum_replace(old_csum, old_bytes, new_bytes, field_offset);
    return c == 0 ? 0xffff : c;
}

// An Internet checksum at `ck` over bytes whose sum went from old_sum to
// the sum of [p, p + len) now, updated (RFC 1624 eqn. 3): one that was
// right stays right, one that was wrong stays wrong by as much.
inline void csum_update_field(uint8_t* ck, uint16_t old_sum, const uint8_t* p, uint32_t len) {
  const uint16_t now = csum_sum({p, len});
  if (now == old_sum) return;
  const uint16_t c = uint16_t(ck[0] << 8 | ck[1]);
  const uint16_t n = csum_finish(csum_add(csum_add(uint16_t(~c), uint16_t(~old_sum)), now));
  ck[0] = uint8_t(n >> 8), ck[1] = uint8_t(n);
}

}  // namespace amon
