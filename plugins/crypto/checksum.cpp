#include "checksum.h"

#include <bit>
#include <cassert>
#include <cstring>

namespace amon {

namespace {

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

}  // namespace

uint16_t csum_sum(std::span<const uint8_t> data, uint16_t initial) {
    return csum_add(initial, to_numeric(csum_fold(native_acc(data.data(), data.size()))));
}

uint16_t ipv4_header_checksum(std::span<const uint8_t> hdr) {
    assert(hdr.size() >= 20);
    const uint16_t s = csum_sum(hdr.subspan(12), csum_sum(hdr.first(10)));
    return csum_finish(s);
}

uint16_t pseudo_sum_v4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto, uint16_t l4_len) {
    uint64_t acc = 0;
    for (int i = 0; i < 4; i += 2) {
        acc += uint32_t{src[i]} << 8 | src[i + 1];
        acc += uint32_t{dst[i]} << 8 | dst[i + 1];
    }
    acc += proto;
    acc += l4_len;
    return csum_fold(acc);
}

uint16_t pseudo_sum_v6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                       uint32_t l4_len) {
    uint64_t acc = 0;
    for (int i = 0; i < 16; i += 2) {
        acc += uint32_t{src[i]} << 8 | src[i + 1];
        acc += uint32_t{dst[i]} << 8 | dst[i + 1];
    }
    acc += l4_len >> 16;
    acc += l4_len & 0xffff;
    acc += next_header;
    return csum_fold(acc);
}

namespace {

uint16_t l4_sum_skipping(uint16_t pseudo, std::span<const uint8_t> l4, size_t csum_offset) {
    assert(csum_offset % 2 == 0 && csum_offset + 2 <= l4.size());
    const uint16_t head = csum_sum(l4.first(csum_offset), pseudo);
    return csum_sum(l4.subspan(csum_offset + 2), head);
}

}  // namespace

uint16_t l4_checksum_v4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto,
                        std::span<const uint8_t> l4, size_t csum_offset) {
    const uint16_t s =
        l4_sum_skipping(pseudo_sum_v4(src, dst, proto, static_cast<uint16_t>(l4.size())), l4, csum_offset);
    return proto == 17 ? csum_finish_udp(s) : csum_finish(s);
}

uint16_t l4_checksum_v6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                        std::span<const uint8_t> l4, size_t csum_offset) {
    const uint16_t s = l4_sum_skipping(
        pseudo_sum_v6(src, dst, next_header, static_cast<uint32_t>(l4.size())), l4, csum_offset);
    return next_header == 17 ? csum_finish_udp(s) : csum_finish(s);
}

uint16_t csum_replace(uint16_t old_csum, std::span<const uint8_t> old_bytes,
                      std::span<const uint8_t> new_bytes, size_t field_offset) {
    assert(old_bytes.size() == new_bytes.size());
    // ~m + m' as one sum: the old field's sum enters complemented.
    uint16_t delta = csum_add(static_cast<uint16_t>(~csum_sum(old_bytes)), csum_sum(new_bytes));
    const uint16_t s = csum_add_at(static_cast<uint16_t>(~old_csum), delta, field_offset);
    return static_cast<uint16_t>(~s);
}

uint16_t csum_replace_udp(uint16_t old_csum, std::span<const uint8_t> old_bytes,
                          std::span<const uint8_t> new_bytes, size_t field_offset) {
    if (old_csum == 0) return 0;
    const uint16_t c = csum_replace(old_csum, old_bytes, new_bytes, field_offset);
    return c == 0 ? 0xffff : c;
}

}  // namespace amon
