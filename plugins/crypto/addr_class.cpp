// Class-preserving Crypto-PAn: special-purpose addresses (IANA IPv4/IPv6
// Special-Purpose Address Registries, RFC 6890) keep their class, and no
// ordinary address gets a pseudonym inside one. See doc/cryptopan.md.
#include "cryptopan.h"

#include <array>
#include <cstring>

namespace amon {

namespace {

struct Range4 {
    uint32_t net;
    unsigned bits;
};

inline bool in4(uint32_t a, Range4 r) { return r.bits == 0 || (a >> (32 - r.bits)) == (r.net >> (32 - r.bits)); }

// Kept verbatim: they name no user. "This network" (0/8, with the
// unspecified 0.0.0.0), loopback, multicast (the group is the service, not
// a host) and the limited broadcast 255.255.255.255.
constexpr Range4 kKeep4[] = {{0x00000000, 8}, {0x7F000000, 8}, {0xE0000000, 4}, {0xFFFFFFFF, 32}};
// Kept in their class: the prefix stays, the host part is Crypto-PAn'd
// (bijective inside the range: the host bits of Crypto-PAn depend only on
// the bits above them, which the range fixes).
constexpr Range4 kInClass4[] = {
    {0xA9FE0000, 16},  // 169.254/16 link-local
    {0x64400000, 10},  // 100.64/10 shared address space (CGN)
    // The reserved 240/4: networks short of private space number hosts in
    // it, so a host there is a host (its pseudonym never the broadcast).
    {0xF0000000, 4},
};
// Documentation and benchmarking ranges (192.0.2/24, 198.51.100/24,
// 203.0.113/24, 198.18/15) are ordinary: generators and labs use them as
// real hosts, and a pseudonym kept inside a /24 would mostly be another
// host's real address.

template <size_t N>
const Range4* find4(uint32_t a, const Range4 (&rs)[N]) {
    for (const Range4& r : rs)
        if (in4(a, r)) return &r;
    return nullptr;
}

inline bool ordinary4(uint32_t a) { return !find4(a, kKeep4) && !find4(a, kInClass4); }

// The first octets of those ranges: an address of any other is ordinary
// without a look at each range (most addresses of a flood of spoofed
// sources, each new to the cache).
constexpr auto kSpecialOctet4 = [] {
    std::array<bool, 256> t{};
    auto mark = [&](const Range4& r) {
        const unsigned b = r.bits < 8 ? r.bits : 8;
        const unsigned first = (r.net >> 24) & (0xFFu << (8 - b)) & 0xFFu;
        for (unsigned i = 0; i < (1u << (8 - b)); ++i) t[first + i] = true;
    };
    for (const Range4& r : kKeep4) mark(r);
    for (const Range4& r : kInClass4) mark(r);
    return t;
}();

inline uint32_t host_mask(unsigned bits) { return bits == 0 ? ~0u : bits >= 32 ? 0u : ~0u >> bits; }

// IPv6 classes, by the first bits.
struct Range6 {
    uint8_t net[16];
    unsigned bits;
};

bool in6(const uint8_t* a, const Range6& r) {
    const unsigned whole = r.bits / 8, rest = r.bits % 8;
    if (std::memcmp(a, r.net, whole) != 0) return false;
    if (rest == 0) return true;
    const uint8_t m = uint8_t(0xff00 >> rest);
    return (a[whole] & m) == (r.net[whole] & m);
}

// Ranges whose pseudonyms keep the range (prefix kept, the rest Crypto-PAn'd).
const Range6 kInClass6[] = {
    {{0xfe, 0x80}, 64},                                               // link-local fe80::/10, its /64 is fe80::
    {{0xfe, 0x80}, 10},                                               // the rest of fe80::/10
    {{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff}, 104},          // solicited-node: low 24 bits of a unicast
    {{0x20, 0x01, 0x0d, 0xb8}, 32},                                   // documentation
    {{0x01, 0x00}, 64},                                               // discard-only 100::/64
    {{0x20, 0x01, 0, 0}, 23},                                         // IETF protocol assignments 2001::/23
};
// IPv4 inside IPv6: the embedded address takes the IPv4 rule, so one host
// has one pseudonym in both families.
const Range6 kEmbedded4[] = {
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96},  // IPv4-mapped
    {{0x00, 0x64, 0xff, 0x9b}, 96},                    // NAT64 well-known prefix
};
// Unicast that pseudonyms may take: global unicast 2000::/3 and unique
// local fc00::/7, minus the ranges above. Everything else is reserved by
// the IETF and maps inside the reserved space.
const Range6 kUnicast6[] = {{{0x20}, 3}, {{0xfc}, 7}};

template <size_t N>
const Range6* find6(const uint8_t* a, const Range6 (&rs)[N]) {
    for (const Range6& r : rs)
        if (in6(a, r)) return &r;
    return nullptr;
}

bool is_zero_or_loopback6(const uint8_t* a) {
    static const uint8_t zero[15] = {};
    return std::memcmp(a, zero, 15) == 0 && a[15] <= 1;
}

// 0: reserved (walk inside the reserved space), 1: unicast (walk inside it);
// called only for addresses none of the fixed rules claims.
int walk_class6(const uint8_t* a) {
    if (find6(a, kInClass6) || find6(a, kEmbedded4)) return -1;
    if (a[0] == 0xff || is_zero_or_loopback6(a)) return -1;
    return find6(a, kUnicast6) ? 1 : 0;
}

void keep_prefix6(const uint8_t* orig, const uint8_t* anon, unsigned bits, uint8_t* out) {
    uint8_t tmp[16];
    for (unsigned i = 0; i < 16; ++i) {
        const int keep = int(bits) - int(8 * i);
        const uint8_t m = keep >= 8 ? 0xff : keep <= 0 ? 0 : uint8_t(0xff00 >> keep);
        tmp[i] = uint8_t((orig[i] & m) | (anon[i] & ~m));
    }
    std::memcpy(out, tmp, 16);
}

}  // namespace

uint32_t CryptoPAn::anon_v4_classes(uint32_t addr) {
    if (!kSpecialOctet4[addr >> 24]) {
        uint32_t y = anon_v4(addr);
        while (kSpecialOctet4[y >> 24] && !ordinary4(y)) y = anon_v4(y);
        return y;
    }
    if (find4(addr, kKeep4)) return addr;
    if (const Range4* r = find4(addr, kInClass4)) {
        const uint32_t hm = host_mask(r->bits);
        // Walked past the limited broadcast (kept as itself) inside the
        // range: still a permutation of the range's other addresses.
        uint32_t y = (addr & ~hm) | (anon_v4(addr) & hm);
        while (y == 0xFFFFFFFFu) y = (y & ~hm) | (anon_v4(y) & hm);
        return y;
    }
    // Cycle-walking: Crypto-PAn is a permutation of all addresses, so
    // following it from an ordinary address until the next ordinary one is
    // a permutation of the ordinary addresses. The walk ends (the cycle comes
    // back to `addr` at the latest) and is short: prefix preservation makes
    // it a walk among the few special /8s first.
    uint32_t y = anon_v4(addr);
    while (!ordinary4(y)) y = anon_v4(y);
    return y;
}

void CryptoPAn::anon_v6_classes(const uint8_t in[16], uint8_t out[16]) {
    uint8_t a[16];
    std::memcpy(a, in, 16);
    if (is_zero_or_loopback6(a)) return (void)std::memmove(out, in, 16);
    if (const Range6* r = find6(a, kEmbedded4)) {
        uint32_t v = uint32_t(a[12]) << 24 | uint32_t(a[13]) << 16 | uint32_t(a[14]) << 8 | a[15];
        v = anon_v4_classes(v);
        std::memcpy(out, a, 12);
        out[12] = uint8_t(v >> 24), out[13] = uint8_t(v >> 16), out[14] = uint8_t(v >> 8), out[15] = uint8_t(v);
        (void)r;
        return;
    }
    uint8_t y[16];
    if (const Range6* r = find6(a, kInClass6)) {
        anon_v6(a, y);
        return keep_prefix6(a, y, r->bits, out);
    }
    if (a[0] == 0xff) return (void)std::memmove(out, in, 16);  // other multicast: the group is kept
    const int cls = walk_class6(a);
    anon_v6(a, y);
    while (walk_class6(y) != cls) anon_v6(y, y);
    std::memcpy(out, y, 16);
}

}  // namespace amon
