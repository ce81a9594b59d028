#include "checksum.h"

#include <catch2/catch.hpp>

#include <rte_byteorder.h>
#include <rte_ip.h>

#include <cstring>
#include <random>
#include <vector>

using namespace amon;

namespace {

// Deliberately the textbook RFC 1071 loop: big-endian words, fold at the end.
uint16_t naive_sum(const uint8_t* p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i + 1 < n; i += 2) s += uint32_t{p[i]} << 8 | p[i + 1];
    if (n & 1) s += uint32_t{p[n - 1]} << 8;
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    return static_cast<uint16_t>(s);
}

void put16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}

std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
}

// An IPv4 packet (20-byte header) with a TCP or UDP segment of l4_len bytes.
struct V4Packet {
    alignas(8) uint8_t buf[2048];
    size_t l4_len;
    uint8_t proto;
    uint8_t* ip() { return buf; }
    uint8_t* l4() { return buf + 20; }
    size_t csum_off() const { return proto == 6 ? 16 : 6; }
};

void fill_v4(std::mt19937_64& rng, V4Packet& p, uint8_t proto, size_t l4_len) {
    for (auto& b : p.buf) b = static_cast<uint8_t>(rng());
    p.proto = proto;
    p.l4_len = l4_len;
    p.buf[0] = 0x45;
    put16(p.buf + 2, static_cast<uint16_t>(20 + l4_len));
    p.buf[9] = proto;
    if (proto == 17) put16(p.l4() + 4, static_cast<uint16_t>(l4_len));
}

}  // namespace

TEST_CASE("csum_sum equals the naive RFC 1071 sum and DPDK's rte_raw_cksum", "[checksum]") {
    std::mt19937_64 rng(1);
    for (int iter = 0; iter < 3000; ++iter) {
        const size_t len = iter < 80 ? static_cast<size_t>(iter) : static_cast<size_t>(rng() % 3000);
        const size_t misalign = rng() % 8;  // exercise unaligned starts
        auto buf = random_bytes(rng, len + misalign);
        const uint8_t* p = buf.data() + misalign;
        INFO("len " << len << " misalign " << misalign);
        const uint16_t s = csum_sum({p, len});
        REQUIRE(s == naive_sum(p, len));
        REQUIRE(s == rte_be_to_cpu_16(rte_raw_cksum(p, len)));
        const uint16_t init = static_cast<uint16_t>(rng());
        REQUIRE(csum_sum({p, len}, init) == csum_add(init, naive_sum(p, len)));
    }
    // All-0xff data exercises carries in every accumulator.
    std::vector<uint8_t> ff(65535 + 1, 0xff);
    CHECK(csum_sum(ff) == naive_sum(ff.data(), ff.size()));
    std::vector<uint8_t> zero(1001, 0);
    CHECK(csum_sum(zero) == 0);
}

TEST_CASE("Chunk sums combine at odd and even offsets", "[checksum]") {
    std::mt19937_64 rng(2);
    for (int iter = 0; iter < 2000; ++iter) {
        const size_t len = 1 + rng() % 1500;
        auto buf = random_bytes(rng, len);
        size_t a = rng() % (len + 1), b = rng() % (len + 1);
        if (a > b) std::swap(a, b);
        uint16_t total = csum_sum({buf.data(), a});
        total = csum_add_at(total, csum_sum({buf.data() + a, b - a}), a);
        total = csum_add_at(total, csum_sum({buf.data() + b, len - b}), b);
        REQUIRE(total == naive_sum(buf.data(), len));
    }
}

TEST_CASE("IPv4 header checksum", "[checksum]") {
    // Well-known example header, checksum b861.
    const uint8_t hdr[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                             0x12, 0x34, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
    CHECK(ipv4_header_checksum(hdr) == 0xb861);

    std::mt19937_64 rng(3);
    for (int iter = 0; iter < 2000; ++iter) {
        const unsigned ihl = 5 + static_cast<unsigned>(rng() % 11);
        alignas(8) uint8_t h[60];
        for (auto& b : h) b = static_cast<uint8_t>(rng());
        h[0] = static_cast<uint8_t>(0x40 | ihl);
        const uint16_t c = ipv4_header_checksum({h, ihl * 4});
        put16(h + 10, c);
        // A receiver summing the whole header gets 0xffff.
        REQUIRE(naive_sum(h, ihl * 4) == 0xffff);
        put16(h + 10, 0);
        REQUIRE(c == rte_be_to_cpu_16(rte_ipv4_cksum(reinterpret_cast<const rte_ipv4_hdr*>(h))));
    }
}

TEST_CASE("Pseudo-header sums agree with DPDK", "[checksum]") {
    std::mt19937_64 rng(4);
    for (int iter = 0; iter < 1000; ++iter) {
        V4Packet p;
        fill_v4(rng, p, (rng() & 1) ? 6 : 17, 8 + rng() % 1400);
        const uint16_t mine = pseudo_sum_v4(p.ip() + 12, p.ip() + 16, p.proto, static_cast<uint16_t>(p.l4_len));
        const uint16_t dpdk =
            rte_be_to_cpu_16(rte_ipv4_phdr_cksum(reinterpret_cast<const rte_ipv4_hdr*>(p.ip()), 0));
        REQUIRE(mine == dpdk);

        alignas(8) uint8_t v6[40];
        for (auto& b : v6) b = static_cast<uint8_t>(rng());
        v6[0] = 0x60;
        const uint16_t plen = static_cast<uint16_t>(rng());
        put16(v6 + 4, plen);
        v6[6] = (rng() & 1) ? 6 : 17;
        REQUIRE(pseudo_sum_v6(v6 + 8, v6 + 24, v6[6], plen) ==
                rte_be_to_cpu_16(rte_ipv6_phdr_cksum(reinterpret_cast<const rte_ipv6_hdr*>(v6), 0)));
    }
    // Jumbogram lengths (> 16 bits) must enter as two words (RFC 8200 8.1).
    uint8_t z[16] = {};
    CHECK(pseudo_sum_v6(z, z, 17, 0x12345678) == csum_add(csum_add(0x1234, 0x5678), 17));
}

TEST_CASE("Full L4 checksums verify and match DPDK", "[checksum]") {
    std::mt19937_64 rng(5);
    for (int iter = 0; iter < 2000; ++iter) {
        V4Packet p;
        const uint8_t proto = (rng() & 1) ? 6 : 17;
        fill_v4(rng, p, proto, 8 + rng() % 1400 + (proto == 6 ? 12 : 0));
        const uint16_t c = l4_checksum_v4(p.ip() + 12, p.ip() + 16, p.proto, {p.l4(), p.l4_len}, p.csum_off());
        put16(p.l4() + p.csum_off(), c);
        // Receiver's view: pseudo header + segment (checksum included) sums to 0xffff.
        uint8_t ph[12] = {};
        std::memcpy(ph, p.ip() + 12, 8);
        ph[9] = p.proto;
        put16(ph + 10, static_cast<uint16_t>(p.l4_len));
        REQUIRE(csum_add(naive_sum(ph, 12), naive_sum(p.l4(), p.l4_len)) == 0xffff);
        put16(p.l4() + p.csum_off(), 0);
        REQUIRE(c == rte_be_to_cpu_16(rte_ipv4_udptcp_cksum(reinterpret_cast<const rte_ipv4_hdr*>(p.ip()), p.l4())));
    }
    for (int iter = 0; iter < 1000; ++iter) {
        alignas(8) uint8_t pkt[40 + 1500];
        for (auto& b : pkt) b = static_cast<uint8_t>(rng());
        const size_t l4_len = 8 + rng() % (1500 - 8 + 1);
        const uint8_t nh = std::array<uint8_t, 3>{6, 17, 58}[rng() % 3];
        pkt[0] = 0x60;
        put16(pkt + 4, static_cast<uint16_t>(l4_len));
        pkt[6] = nh;
        const size_t off = nh == 6 ? 16 : nh == 17 ? 6 : 2;
        if (nh == 6 && l4_len < 20) continue;
        const uint16_t c = l4_checksum_v6(pkt + 8, pkt + 24, nh, {pkt + 40, l4_len}, off);
        put16(pkt + 40 + off, c);
        const uint16_t verify = csum_sum({pkt + 40, l4_len}, pseudo_sum_v6(pkt + 8, pkt + 24, nh, static_cast<uint32_t>(l4_len)));
        REQUIRE(verify == 0xffff);
    }
}

TEST_CASE("UDP: computed zero is sent as 0xFFFF, TCP keeps 0x0000", "[checksum][udp]") {
    std::mt19937_64 rng(6);
    for (int iter = 0; iter < 200; ++iter) {
        V4Packet p;
        fill_v4(rng, p, 17, 40 + rng() % 100);
        // Choose the last aligned payload word so the data sums to exactly 0xffff.
        const size_t fix = (p.l4_len - 2) & ~size_t{1};
        put16(p.l4() + fix, 0);
        put16(p.l4() + 6, 0);
        const uint16_t rest = csum_sum({p.l4(), p.l4_len}, pseudo_sum_v4(p.ip() + 12, p.ip() + 16, 17, static_cast<uint16_t>(p.l4_len)));
        put16(p.l4() + fix, static_cast<uint16_t>(0xffff - rest));
        CHECK(l4_checksum_v4(p.ip() + 12, p.ip() + 16, 17, {p.l4(), p.l4_len}, 6) == 0xffff);
        // TCP has no "no checksum" value and keeps the plain complement.
        CHECK(csum_finish(csum_add(rest, static_cast<uint16_t>(0xffff - rest))) == 0x0000);
    }
    const uint8_t o[2] = {0x12, 0x34}, n[2] = {0xab, 0xcd};
    CHECK(csum_replace_udp(0, o, n) == 0);
}

TEST_CASE("RFC 1624 incremental update equals full recompute", "[checksum][incremental]") {
    std::mt19937_64 rng(8);
    for (int iter = 0; iter < 20000; ++iter) {
        V4Packet p;
        const uint8_t proto = (iter & 1) ? 6 : 17;
        fill_v4(rng, p, proto, 20 + rng() % 600);
        const size_t off = p.csum_off();
        auto full = [&] { return l4_checksum_v4(p.ip() + 12, p.ip() + 16, proto, {p.l4(), p.l4_len}, off); };
        uint16_t csum = full();
        put16(p.l4() + off, csum);

        // Rewrite src address (4 bytes, pseudo header), then a port (2 bytes).
        uint8_t old_addr[4], new_addr[4];
        std::memcpy(old_addr, p.ip() + 12, 4);
        for (auto& b : new_addr) b = static_cast<uint8_t>(rng());
        if (iter % 97 == 0) std::memcpy(new_addr, old_addr, 4);  // no-op change
        std::memcpy(p.ip() + 12, new_addr, 4);
        csum = proto == 17 ? csum_replace_udp(csum, old_addr, new_addr) : csum_replace(csum, old_addr, new_addr);
        REQUIRE(csum == full());

        uint8_t old_port[2], new_port[2];
        std::memcpy(old_port, p.l4() + 2, 2);
        put16(new_port, static_cast<uint16_t>(rng()));
        std::memcpy(p.l4() + 2, new_port, 2);
        csum = proto == 17 ? csum_replace_udp(csum, old_port, new_port) : csum_replace(csum, old_port, new_port);
        REQUIRE(csum == full());

        // IPv4 header checksum after the address change.
        const uint16_t ip_old = ipv4_header_checksum({p.ip(), 20});
        put16(p.ip() + 10, ip_old);
        std::memcpy(old_addr, p.ip() + 16, 4);
        for (auto& b : new_addr) b = static_cast<uint8_t>(rng());
        std::memcpy(p.ip() + 16, new_addr, 4);
        REQUIRE(csum_replace(ip_old, old_addr, new_addr) == ipv4_header_checksum({p.ip(), 20}));
    }

    // IPv6 addresses (16 bytes) under UDP and ICMPv6.
    for (int iter = 0; iter < 5000; ++iter) {
        alignas(8) uint8_t pkt[40 + 600];
        for (auto& b : pkt) b = static_cast<uint8_t>(rng());
        const size_t l4_len = 8 + rng() % (600 - 8 + 1);
        const uint8_t nh = (iter & 1) ? 17 : 58;
        const size_t off = nh == 17 ? 6 : 2;
        auto full = [&] { return l4_checksum_v6(pkt + 8, pkt + 24, nh, {pkt + 40, l4_len}, off); };
        const uint16_t c0 = full();
        uint8_t old_a[16], new_a[16];
        std::memcpy(old_a, pkt + 24, 16);
        for (auto& b : new_a) b = static_cast<uint8_t>(rng());
        std::memcpy(pkt + 24, new_a, 16);
        const uint16_t c1 = nh == 17 ? csum_replace_udp(c0, old_a, new_a) : csum_replace(c0, old_a, new_a);
        REQUIRE(c1 == full());
    }
}

TEST_CASE("Incremental update of a field at an odd offset", "[checksum][incremental]") {
    std::mt19937_64 rng(9);
    for (int iter = 0; iter < 5000; ++iter) {
        auto buf = random_bytes(rng, 64 + rng() % 200);
        const size_t flen = std::array<size_t, 4>{1, 2, 4, 16}[rng() % 4];
        const size_t off = rng() % (buf.size() - flen);
        const uint16_t before = csum_finish(csum_sum(buf));
        std::vector<uint8_t> old_f(buf.begin() + off, buf.begin() + off + flen);
        auto new_f = random_bytes(rng, flen);
        std::memcpy(buf.data() + off, new_f.data(), flen);
        INFO("offset " << off << " len " << flen);
        REQUIRE(csum_replace(before, old_f, new_f, off) == csum_finish(csum_sum(buf)));
    }
}

TEST_CASE("Unrolled helpers of the header path equal the general functions", "[checksum][fast]") {
    std::mt19937_64 rng(7);
    SECTION("ipv4_header_checksum20") {
        for (int i = 0; i < 20000; ++i) {
            auto h = random_bytes(rng, 20);
            CHECK(ipv4_header_checksum20(h.data()) == ipv4_header_checksum({h.data(), 20}));
            // With a new total length: as if it had been stored first.
            const uint16_t len = static_cast<uint16_t>(rng());
            auto g = h;
            put16(g.data() + 2, len);
            CHECK(ipv4_header_checksum20(h.data(), len) == ipv4_header_checksum({g.data(), 20}));
        }
    }
    SECTION("csum_replace_addr, including checksums 0x0000 and 0xffff") {
        for (int i = 0; i < 40000; ++i) {
            const bool v4 = i & 1;
            const size_t n = v4 ? 4 : 16;
            auto o = random_bytes(rng, n), w = random_bytes(rng, n);
            if (i % 7 == 0) std::fill(w.begin(), w.end(), 0);
            if (i % 11 == 0) w = o;
            const uint16_t ck = i % 5 == 0 ? 0 : i % 5 == 1 ? 0xffff : static_cast<uint16_t>(rng());
            CHECK(csum_replace_addr(ck, o.data(), w.data(), v4) == csum_replace(ck, {o.data(), n}, {w.data(), n}));
        }
    }
    SECTION("l4_checksum_short, every length and field offset the header path uses") {
        for (int i = 0; i < 40000; ++i) {
            const uint8_t protos[] = {6, 17, 58};
            const uint8_t proto = protos[i % 3];
            const size_t off = proto == 6 ? 16 : proto == 17 ? 6 : 2;
            const size_t len = off + 2 + rng() % 48;  // odd lengths too
            auto l4 = random_bytes(rng, len);
            auto a = random_bytes(rng, 32);
            if (i % 13 == 0) std::fill(l4.begin(), l4.end(), 0);  // a segment of zeros: only the pseudo-header sums
            const bool v4 = i % 2;
            const uint16_t want = v4 ? l4_checksum_v4(a.data(), a.data() + 4, proto, {l4.data(), len}, off)
                                     : l4_checksum_v6(a.data(), a.data() + 16, proto, {l4.data(), len}, off);
            CHECK(l4_checksum_short(a.data(), a.data() + (v4 ? 4 : 16), v4, proto, l4.data(), len, off) == want);
            if (proto == 17) {  // a new UDP length, as if stored first
                const uint16_t ulen = static_cast<uint16_t>(i % 17 == 0 ? 0 : rng());
                auto m = l4;
                put16(m.data() + 4, ulen);
                const uint16_t want2 = v4 ? l4_checksum_v4(a.data(), a.data() + 4, proto, {m.data(), len}, off)
                                          : l4_checksum_v6(a.data(), a.data() + 16, proto, {m.data(), len}, off);
                CHECK(l4_checksum_short(a.data(), a.data() + (v4 ? 4 : 16), v4, proto, l4.data(), len, off, ulen) ==
                      want2);
            }
        }
    }
}

TEST_CASE("csum_fold equals folding 16 bits at a time", "[checksum][fold]") {
    auto slow = [](uint64_t acc) {
        while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
        return static_cast<uint16_t>(acc);
    };
    std::mt19937_64 rng(11);
    const uint64_t edges[] = {0, 1, 0xffff, 0x10000, 0x1fffe, 0xffffffff, 0x100000000ull, 0xffff0001ull,
                              0x1ffffffffull, 0xffffffffffffffffull, 0xffffffff00000001ull};
    for (uint64_t e : edges) CHECK(csum_fold(e) == slow(e));
    for (int i = 0; i < 200000; ++i) {
        uint64_t x = rng();
        if (i & 1) x >>= rng() % 64;
        CHECK(csum_fold(x) == slow(x));
    }
}
