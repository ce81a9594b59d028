#include "cryptopan.h"

#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "cryptopan_vectors.inc"

using amon::CryptoPAn;
using amon::CryptoPAnCache;
using amon::CryptoPAnKey;

namespace {

CryptoPAnKey key_from_hex(const char* hex) {
    auto r = amon::parse_key_hex(hex);
    REQUIRE(r.ok());
    return r.key;
}

uint32_t v4(const char* s) {
    in_addr a{};
    REQUIRE(inet_pton(AF_INET, s, &a) == 1);
    return ntohl(a.s_addr);
}

std::string v4str(uint32_t host) {
    in_addr a{htonl(host)};
    char buf[INET_ADDRSTRLEN];
    return inet_ntop(AF_INET, &a, buf, sizeof buf);
}

std::array<uint8_t, 16> v6(const char* s) {
    std::array<uint8_t, 16> a{};
    REQUIRE(inet_pton(AF_INET6, s, a.data()) == 1);
    return a;
}

std::string v6str(const uint8_t* a) {
    char buf[INET6_ADDRSTRLEN];
    return inet_ntop(AF_INET6, a, buf, sizeof buf);
}

unsigned common_prefix32(uint32_t a, uint32_t b) { return a == b ? 32 : std::countl_zero(a ^ b); }

unsigned common_prefix128(const uint8_t* a, const uint8_t* b) {
    for (int i = 0; i < 16; ++i)
        if (a[i] != b[i]) return 8 * i + std::countl_zero(static_cast<uint8_t>(a[i] ^ b[i]));
    return 128;
}

const CryptoPAnKey kSampleKey = {21,  34,  23,  141, 51,  164, 207, 128, 19,  10, 91,
                                 22,  73,  144, 125, 16,  216, 152, 143, 131, 121, 121,
                                 101, 39,  98,  87,  76,  45,  42,  132, 34,  2};

}  // namespace

TEST_CASE("CryptoPAn matches every public vector set (144 pairs)", "[cryptopan]") {
    size_t checked = 0;
    for (const auto& set : kVectorSets) {
        INFO(set.name);
        CryptoPAn pan(key_from_hex(set.key_hex));
        for (const auto& p : set.v4) {
            INFO(p.in);
            CHECK(v4str(pan.anon_v4(v4(p.in))) == p.out);
            ++checked;
        }
        for (const auto& p : set.v6) {
            INFO(p.in);
            auto in = v6(p.in);
            uint8_t out[16];
            pan.anon_v6(in.data(), out);
            CHECK(v6str(out) == v6str(v6(p.out).data()));
            ++checked;
        }
    }
    CHECK(checked == 144);
}

// Pad bits 0..15 come from a table by the address's first 16 bits once any
// address under them was mapped, from an IPv4 or an IPv6 address alike: the
// vectors must hold whichever address filled an entry, and no entry may
// outlive a rekey.
TEST_CASE("CryptoPAn's table of first-16-bit pads gives the vectors whatever filled it", "[cryptopan]") {
    const CryptoPAnKey other = key_from_hex("d1c056a983786a38ca76a05cda240c7b86d7713693544000a0e6c4dd5b3dabdd");
    for (const auto& set : kVectorSets) {
        INFO(set.name);
        const CryptoPAnKey key = key_from_hex(set.key_hex);
        // Entries filled under another key first, then by IPv6 addresses
        // sharing each IPv4 input's first 16 bits (and IPv4 addresses sharing
        // each IPv6 input's), their other bits changed.
        CryptoPAn pan(other);
        for (const auto& p : set.v4) pan.anon_v4(v4(p.in));
        for (const auto& p : set.v6) pan.anon_v4(uint32_t{v6(p.in)[0]} << 24 | uint32_t{v6(p.in)[1]} << 16);
        pan.rekey(key);
        uint8_t out[16];
        for (const auto& p : set.v4) {
            std::array<uint8_t, 16> a{};
            const uint32_t x = v4(p.in);
            a[0] = uint8_t(x >> 24), a[1] = uint8_t(x >> 16), a[2] = uint8_t(~x >> 8);
            pan.anon_v6(a.data(), out);
        }
        for (const auto& p : set.v6) pan.anon_v4(uint32_t{v6(p.in)[0]} << 24 | uint32_t{v6(p.in)[1]} << 16 | 0xbeef);
        CryptoPAn moved(kSampleKey);
        moved = std::move(pan);
        for (auto it = set.v4.rbegin(); it != set.v4.rend(); ++it) {
            INFO(it->in);
            CHECK(v4str(moved.anon_v4(v4(it->in))) == it->out);
        }
        for (const auto& p : set.v6) {
            INFO(p.in);
            moved.anon_v6(v6(p.in).data(), out);
            CHECK(v6str(out) == v6str(v6(p.out).data()));
        }
    }
    // Every /16's first address against a fresh object's mapping of its last.
    CryptoPAn warm(kSampleKey);
    for (uint32_t top = 0; top < (1u << 16); top += 251) warm.anon_v4(top << 16);
    for (uint32_t top = 0; top < (1u << 16); top += 251) {
        CryptoPAn fresh(kSampleKey);
        const uint32_t a = top << 16 | 0xffff;
        REQUIRE(warm.anon_v4(a) == fresh.anon_v4(a));
    }
}

TEST_CASE("CryptoPAn quick anchors: the sample key and key bytes 0..31", "[cryptopan]") {
    CryptoPAn pan(kSampleKey);
    CHECK(v4str(pan.anon_v4(v4("24.5.0.80"))) == "100.9.15.210");
    CHECK(v4str(pan.anon_v4(v4("208.234.120.210"))) == "227.154.67.17");
    CHECK(v4str(pan.anon_v4(v4("64.14.118.196"))) == "0.255.183.58");
    uint8_t out[16];
    pan.anon_v6(v6("::1").data(), out);
    CHECK(v6str(out) == "78ff:f001:9fc0:20df:8380:b1f1:704:ed");
    pan.anon_v6(v6("2001:db8::1").data(), out);
    CHECK(v6str(out) == "4401:2bc:603f:d91d:27f:ff8e:e6f1:dc1e");

    CryptoPAnKey seq{};
    for (int i = 0; i < 32; ++i) seq[i] = static_cast<uint8_t>(i);
    CryptoPAn pan2(seq);
    CHECK(v4str(pan2.anon_v4(v4("192.0.2.1"))) == "2.90.93.17");
    pan2.anon_v6(v6("2001:db8::1").data(), out);
    CHECK(v6str(out) == "dd92:2c44:3fc0:ff1e:7ff9:c7f0:8180:7e00");
    // The research report flags 195.205.63.10 -> 255.186.223.5 as a mislabelled
    // vector (the real input is .100); make sure we agree it is wrong.
    CryptoPAn pan3(kSampleKey);
    CHECK(v4str(pan3.anon_v4(v4("195.205.63.10"))) != "255.186.223.5");
}

TEST_CASE("CryptoPAn anon_v6 works in place and rekey switches the mapping", "[cryptopan]") {
    CryptoPAn pan(kSampleKey);
    auto a = v6("2001:db8::2");
    pan.anon_v6(a.data(), a.data());
    CHECK(v6str(a.data()) == "4401:2bc:603f:d91d:27f:ff8e:e6f1:dc1c");

    pan.rekey(key_from_hex("d1c056a983786a38ca76a05cda240c7b86d7713693544000a0e6c4dd5b3dabdd"));
    CHECK(v4str(pan.anon_v4(v4("1.2.3.4"))) == "236.157.211.10");
    pan.rekey(kSampleKey);
    CHECK(v4str(pan.anon_v4(v4("24.5.0.80"))) == "100.9.15.210");

    CryptoPAn moved(std::move(pan));
    CHECK(v4str(moved.anon_v4(v4("24.5.0.80"))) == "100.9.15.210");
}

TEST_CASE("CryptoPAn is prefix-preserving on random pairs (v4 and v6)", "[cryptopan][property]") {
    std::mt19937_64 rng(0xC0FFEE);
    CryptoPAnKey key;
    for (auto& b : key) b = static_cast<uint8_t>(rng());
    CryptoPAn pan(key);

    for (int i = 0; i < 4000; ++i) {
        const uint32_t a = static_cast<uint32_t>(rng());
        // Force every shared-prefix length to occur, not just the ~1-bit ones
        // two random addresses have.
        const unsigned want = static_cast<unsigned>(rng() % 33);
        uint32_t b = a;
        if (want < 32) {
            const uint32_t low = want == 31 ? 0 : static_cast<uint32_t>(rng()) & (0xffffffffu >> (want + 1));
            b = (a & ~(0xffffffffu >> want)) | (~a & (0x80000000u >> want)) | low;
        }
        REQUIRE(common_prefix32(a, b) == want);
        CHECK(common_prefix32(pan.anon_v4(a), pan.anon_v4(b)) == want);
    }

    for (int i = 0; i < 1500; ++i) {
        uint8_t a[16], b[16];
        for (auto& x : a) x = static_cast<uint8_t>(rng());
        const unsigned want = static_cast<unsigned>(rng() % 129);
        std::memcpy(b, a, 16);
        if (want < 128) {
            b[want / 8] ^= static_cast<uint8_t>(0x80u >> (want % 8));
            for (unsigned bit = want + 1; bit < 128; ++bit)
                if (rng() & 1) b[bit / 8] ^= static_cast<uint8_t>(0x80u >> (bit % 8));
        }
        REQUIRE(common_prefix128(a, b) == want);
        uint8_t oa[16], ob[16];
        pan.anon_v6(a, oa);
        pan.anon_v6(b, ob);
        CHECK(common_prefix128(oa, ob) == want);
    }
}

TEST_CASE("CryptoPAn IPv4 is a bijection on a /16 (no two inputs share an output)", "[cryptopan][property]") {
    CryptoPAn pan(kSampleKey);
    std::vector<uint32_t> outs;
    outs.reserve(65536);
    for (uint32_t i = 0; i < 65536; ++i) outs.push_back(pan.anon_v4(0x0a000000u | i));
    std::sort(outs.begin(), outs.end());
    CHECK(std::adjacent_find(outs.begin(), outs.end()) == outs.end());
    // Prefix preservation maps the /16 onto one /16.
    CHECK((outs.front() >> 16) == (outs.back() >> 16));
}

TEST_CASE("CryptoPAnCache returns the uncached mapping under a colliding stream", "[cryptopan][cache]") {
    // 64 v4 / 32 v6 entries against a working set of ~1000 addresses: most
    // lookups evict, many hit; every answer must still equal the reference.
    CryptoPAnCache cache(kSampleKey, 64, 32);
    CryptoPAn ref(kSampleKey);
    std::mt19937_64 rng(42);
    std::vector<uint32_t> pool4;
    std::vector<std::array<uint8_t, 16>> pool6;
    for (int i = 0; i < 1000; ++i) pool4.push_back(static_cast<uint32_t>(rng()));
    pool4.push_back(0);  // 0.0.0.0 must not look like an empty slot
    for (int i = 0; i < 300; ++i) {
        std::array<uint8_t, 16> a{};
        for (auto& x : a) x = static_cast<uint8_t>(rng());
        pool6.push_back(a);
    }
    pool6.push_back({});  // ::
    for (int i = 0; i < 40000; ++i) {
        // Skewed choice (cube of a uniform) so a hot subset produces hits.
        const double u = std::uniform_real_distribution<double>(0, 1)(rng);
        const size_t i4 = static_cast<size_t>(u * u * u * pool4.size());
        const uint32_t a = pool4[i4];
        REQUIRE(cache.anon_v4_cached(a) == ref.anon_v4(a));
        const auto& b = pool6[static_cast<size_t>(u * u * u * pool6.size())];
        uint8_t o1[16], o2[16];
        cache.anon_v6_cached(b.data(), o1);
        ref.anon_v6(b.data(), o2);
        REQUIRE(std::memcmp(o1, o2, 16) == 0);
    }
    CHECK(cache.hits() + cache.misses() == 80000);
    CHECK(cache.hits() > 10000);
    CHECK(cache.misses() > 10000);
    CHECK(cache.uncached().anon_v4(0) == ref.anon_v4(0));

    // In-place v6 on both the miss and the hit path.
    for (int pass = 0; pass < 2; ++pass) {
        auto x = v6("2001:db8::1");
        cache.anon_v6_cached(x.data(), x.data());
        CHECK(v6str(x.data()) == "4401:2bc:603f:d91d:27f:ff8e:e6f1:dc1e");
    }

    // Rekey must not serve entries computed with the old key.
    const uint32_t probe = v4("1.2.3.4");
    cache.anon_v4_cached(probe);
    cache.rekey(key_from_hex("d1c056a983786a38ca76a05cda240c7b86d7713693544000a0e6c4dd5b3dabdd"));
    CHECK(v4str(cache.anon_v4_cached(probe)) == "236.157.211.10");
}

TEST_CASE("CryptoPAnCache rejects sizes that are not powers of two", "[cryptopan][cache]") {
    CHECK_THROWS_AS(CryptoPAnCache(kSampleKey, 0, 2), std::invalid_argument);
    CHECK_THROWS_AS(CryptoPAnCache(kSampleKey, 1, 2), std::invalid_argument);
    CHECK_THROWS_AS(CryptoPAnCache(kSampleKey, 96, 2), std::invalid_argument);
    CHECK_THROWS_AS(CryptoPAnCache(kSampleKey, 2, 3), std::invalid_argument);
    CryptoPAnCache ok(kSampleKey, 1 << 16, 1 << 10);
    CHECK(ok.v4_entries() == (1u << 16));
    CHECK(ok.v6_entries() == (1u << 10));
}

TEST_CASE("Key hex parser", "[cryptopan][keyfile]") {
    const std::string good = "1522178d33a4cf80130a5b1649907d10d8988f837979652762574c2d2a842202";
    SECTION("exact 64 hex digits") {
        auto r = amon::parse_key_hex(good);
        REQUIRE(r.ok());
        CHECK(r.key == kSampleKey);
    }
    SECTION("upper case, wrapped, trailing newline, CRLF and tabs") {
        std::string t = "  15 22 17 8D 33A4CF80130A5B1649907D10\r\n\td8988f837979652762574c2d2a842202\n";
        auto r = amon::parse_key_hex(t);
        REQUIRE(r.ok());
        CHECK(r.key == kSampleKey);
    }
    SECTION("too short") {
        auto r = amon::parse_key_hex(good.substr(0, 62));
        CHECK_FALSE(r.ok());
        CHECK(r.error.find("62 hex digits") != std::string::npos);
        CHECK(r.key == CryptoPAnKey{});
    }
    SECTION("odd count (one digit short)") {
        auto r = amon::parse_key_hex(good.substr(0, 63));
        CHECK_FALSE(r.ok());
        CHECK(r.error.find("63") != std::string::npos);
    }
    SECTION("too long") {
        auto r = amon::parse_key_hex(good + "00");
        CHECK_FALSE(r.ok());
        CHECK(r.error.find("66 hex digits") != std::string::npos);
        CHECK(r.key == CryptoPAnKey{});
    }
    SECTION("empty and whitespace only") {
        CHECK_FALSE(amon::parse_key_hex("").ok());
        CHECK_FALSE(amon::parse_key_hex(" \n\t").ok());
    }
    SECTION("non-hex characters") {
        for (const std::string& bad : {"0x" + good.substr(2), good.substr(0, 63) + "g",
                                      good.substr(0, 32) + "#" + good.substr(32),
                                      good + "\n# comment", std::string("32-char-str-for-AES-key-and-pad."),
                                      good.substr(0, 10) + std::string(1, '\0') + good.substr(10)}) {
            auto r = amon::parse_key_hex(bad);
            INFO(bad);
            CHECK_FALSE(r.ok());
            CHECK(r.error.find("invalid character") != std::string::npos);
            CHECK(r.key == CryptoPAnKey{});
        }
        auto r = amon::parse_key_hex(good.substr(0, 5) + "z" + good.substr(6));
        CHECK(r.error.find("0x7a at offset 5") != std::string::npos);
    }
}

TEST_CASE("Key file reader", "[cryptopan][keyfile]") {
    char path[] = "/tmp/amon_keyXXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    {
        std::ofstream(path) << "1522178d33a4cf80130a5b1649907d10\nd8988f837979652762574c2d2a842202\n";
        auto r = amon::read_key_file(path);
        REQUIRE(r.ok());
        CHECK(r.key == kSampleKey);
    }
    {
        std::ofstream(path) << "1522178d33a4cf80130a5b1649907d10\n";
        auto r = amon::read_key_file(path);
        CHECK_FALSE(r.ok());
        CHECK(r.error.find(path) != std::string::npos);
    }
    {
        std::ofstream(path) << std::string(5000, ' ');
        CHECK(amon::read_key_file(path).error.find("larger than") != std::string::npos);
    }
    std::remove(path);
    CHECK(amon::read_key_file(path).error.find("cannot open") != std::string::npos);
}

TEST_CASE("Epoch keys: HKDF-SHA256 with the documented info string", "[cryptopan][rotation]") {
    // Expected values from Python's `cryptography` HKDF (independent of OpenSSL's
    // EVP_KDF plumbing): HKDF(SHA256, salt=None, info=b"amon-cryptopan-epoch" + epoch.to_bytes(8, "big")).
    auto hex = [](const CryptoPAnKey& k) {
        std::string s;
        char b[3];
        for (auto x : k) {
            std::snprintf(b, sizeof b, "%02x", x);
            s += b;
        }
        return s;
    };
    CHECK(hex(CryptoPAn::derive_epoch_key(kSampleKey, 0)) ==
          "9e3c5debbad90a1db779530d0c6381b6b3060c417b4ea966eed7664ba7b541a2");
    CHECK(hex(CryptoPAn::derive_epoch_key(kSampleKey, 1)) ==
          "917f7394ffd71998aaac001fc3ac2e9df1555eabb442540014631b099c6c0adb");
    CHECK(hex(CryptoPAn::derive_epoch_key(kSampleKey, (uint64_t{1} << 40) + 5)) ==
          "804d404c6d68998cef9994aad42e28293a06ebccf6a42f598fccf3732f8c1402");

    // Different epochs give different mappings of the same address.
    CryptoPAn e0(CryptoPAn::derive_epoch_key(kSampleKey, 0));
    CryptoPAn e1(CryptoPAn::derive_epoch_key(kSampleKey, 1));
    CHECK(e0.anon_v4(v4("24.5.0.80")) != e1.anon_v4(v4("24.5.0.80")));
}

namespace {

bool special_v4(uint32_t a) {
    const uint8_t top = uint8_t(a >> 24);
    return top == 0 || top == 127 || top >= 224 || (a >> 16) == 0xA9FE || (a >> 22) == (0x64400000u >> 22);
}

}  // namespace

TEST_CASE("Class-preserving Crypto-PAn: special addresses keep their class", "[cryptopan][classes]") {
    CryptoPAn pan(kSampleKey);
    for (const char* s : {"0.0.0.0", "255.255.255.255", "127.0.0.1", "127.5.6.7", "224.0.0.251", "239.255.255.250"}) {
        INFO(s);
        CHECK(v4str(pan.anon_v4_classes(v4(s))) == s);
    }
    // Link-local stays link-local, with the host part anonymized bijectively.
    std::vector<uint32_t> seen;
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint32_t o = pan.anon_v4_classes(0xA9FE0000u | h);
        REQUIRE((o >> 16) == 0xA9FEu);
        seen.push_back(o);
    }
    std::sort(seen.begin(), seen.end());
    CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
    CHECK(pan.anon_v4_classes(v4("169.254.1.2")) != v4("169.254.1.2"));
    // The reserved 240/4 numbers hosts in some networks: it stays reserved,
    // its host bits anonymized, bijectively and never onto the limited
    // broadcast (which stays itself).
    seen.clear();
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint32_t o = pan.anon_v4_classes(0xFFFF0000u | h);
        REQUIRE((o >> 28) == 0xFu);
        if (h != 0xFFFF) REQUIRE(o != 0xFFFFFFFFu);
        seen.push_back(o);
    }
    std::sort(seen.begin(), seen.end());
    CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
    CHECK(pan.anon_v4_classes(v4("240.1.2.3")) != v4("240.1.2.3"));
    CHECK(pan.anon_v4_classes(v4("247.111.83.65")) != v4("247.111.83.65"));
    // The issue's cases: pure Crypto-PAn put these into multicast and 240/4.
    for (const char* s : {"10.0.0.6", "192.168.1.1"}) {
        INFO(s);
        const uint32_t o = pan.anon_v4_classes(v4(s));
        CHECK_FALSE(special_v4(o));
        CHECK(o != v4(s));
    }

    uint8_t out[16];
    for (const char* s : {"::", "::1", "ff02::1", "ff05::1:3"}) {
        INFO(s);
        pan.anon_v6_classes(v6(s).data(), out);
        CHECK(v6str(out) == s);
    }
    pan.anon_v6_classes(v6("fe80::1c2d:3e4f:5a6b:7c8d").data(), out);
    CHECK(v6str(out).rfind("fe80::", 0) == 0);
    CHECK(v6str(out) != "fe80::1c2d:3e4f:5a6b:7c8d");
    // Solicited-node groups carry 24 bits of a unicast address: anonymized, group kept.
    pan.anon_v6_classes(v6("ff02::1:ff6b:7c8d").data(), out);
    CHECK(v6str(out).rfind("ff02::1:ff", 0) == 0);
    CHECK(v6str(out) != "ff02::1:ff6b:7c8d");
    // IPv4-mapped: the IPv4 rule on the embedded address.
    pan.anon_v6_classes(v6("::ffff:10.0.0.6").data(), out);
    CHECK(v6str(out) == "::ffff:" + v4str(pan.anon_v4_classes(v4("10.0.0.6"))));
    // Global unicast stays global unicast (or unique local), out of 2001:db8::/32.
    std::mt19937_64 rng(7);
    for (int i = 0; i < 2000; ++i) {
        uint8_t a[16];
        for (auto& b : a) b = uint8_t(rng());
        a[0] = uint8_t(0x20 | (a[0] & 0x1f));
        if (a[0] == 0x20 && a[1] == 0x01) a[1] = 0x02;
        pan.anon_v6_classes(a, out);
        INFO(v6str(a));
        CHECK(((out[0] & 0xe0) == 0x20 || (out[0] & 0xfe) == 0xfc));
        CHECK_FALSE((out[0] == 0x20 && out[1] == 0x01 && out[2] == 0x0d && out[3] == 0xb8));
    }
}

TEST_CASE("Class-preserving Crypto-PAn is a bijection on ordinary addresses and equals Crypto-PAn where it does not remap",
          "[cryptopan][classes][property]") {
    std::mt19937_64 rng(0xBEEF);
    CryptoPAn pan(kSampleKey);
    size_t walked = 0;
    for (int i = 0; i < 200000; ++i) {
        const uint32_t a = uint32_t(rng());
        const uint32_t o = pan.anon_v4_classes(a);
        if (special_v4(a)) continue;
        REQUIRE_FALSE(special_v4(o));
        if (special_v4(pan.anon_v4(a))) ++walked;
        else REQUIRE(o == pan.anon_v4(a));
    }
    CHECK(walked > 0);
    // A whole ordinary /16 whose pure pseudonyms partly land in special space
    // still maps one-to-one.
    std::vector<uint32_t> outs;
    for (uint32_t h = 0; h < 65536; ++h) outs.push_back(pan.anon_v4_classes(0x0A000000u | h));
    std::sort(outs.begin(), outs.end());
    CHECK(std::adjacent_find(outs.begin(), outs.end()) == outs.end());

    size_t same = 0;
    for (const auto& set : kVectorSets) {
        CryptoPAn p(key_from_hex(set.key_hex));
        for (const auto& v : set.v4) {
            const uint32_t in = v4(v.in), ref = v4(v.out);
            if (special_v4(in) || special_v4(ref)) continue;
            CHECK(v4str(p.anon_v4_classes(in)) == v.out);
            ++same;
        }
    }
    CHECK(same == 37);  // the sample key maps 192/8 into 240/4: most pairs there are walked
}

TEST_CASE("CryptoPAnCache with keep_classes serves the class-preserving mapping", "[cryptopan][classes][cache]") {
    CryptoPAnCache c(kSampleKey, 64, 32, true);
    CryptoPAn pan(kSampleKey);
    CHECK(c.anon_v4_cached(v4("127.0.0.1")) == v4("127.0.0.1"));
    CHECK(c.anon_v4_cached(v4("10.0.0.6")) == pan.anon_v4_classes(v4("10.0.0.6")));
    uint8_t out[16];
    c.anon_v6_cached(v6("::").data(), out);
    CHECK(v6str(out) == "::");
}
