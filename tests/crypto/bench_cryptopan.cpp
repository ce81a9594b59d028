// Throughput of the crypto primitives on one core. Figures quoted in
// doc/cryptopan.md come from: bench_cryptopan --count 2000000
#include "checksum.h"
#include "cryptopan.h"
#include "keyed_hash.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <rte_ip.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
volatile uint64_t g_sink;

template <class F>
double seconds(F&& f) {
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Zipf(s = 1) over n ranks by inverse CDF on the harmonic numbers: a few
// heavy hitters and a long tail, like client/server addresses on a link.
std::vector<uint32_t> zipf_stream(std::mt19937_64& rng, size_t n_ranks, size_t len) {
    std::vector<double> cdf(n_ranks);
    double h = 0;
    for (size_t i = 0; i < n_ranks; ++i) cdf[i] = (h += 1.0 / double(i + 1));
    std::uniform_real_distribution<double> u(0, h);
    std::vector<uint32_t> out(len);
    for (auto& r : out) r = static_cast<uint32_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    size_t count = 2'000'000;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--count" && i + 1 < argc) count = std::strtoull(argv[++i], nullptr, 10);
        else {
            std::fprintf(stderr, "usage: %s [--count N]\n", argv[0]);
            return 2;
        }
    }
    if (count < 100) count = 100;
    std::mt19937_64 rng(12345);
    amon::CryptoPAnKey key;
    for (auto& b : key) b = static_cast<uint8_t>(rng());

    std::vector<uint32_t> v4(count);
    for (auto& a : v4) a = static_cast<uint32_t>(rng());
    const size_t n6 = count / 4;
    std::vector<uint8_t> v6(n6 * 16);
    for (auto& b : v6) b = static_cast<uint8_t>(rng());

    amon::CryptoPAn pan(key);
    uint64_t acc = 0;
    double t = seconds([&] { for (uint32_t a : v4) acc += pan.anon_v4(a); });
    std::printf("cryptopan uncached ipv4   : %8.2f M addr/s  (%.0f ns/addr)\n", count / t / 1e6, t / count * 1e9);
    t = seconds([&] {
        uint8_t out[16];
        for (size_t i = 0; i < n6; ++i) {
            pan.anon_v6(&v6[16 * i], out);
            acc += out[15];
        }
    });
    std::printf("cryptopan uncached ipv6   : %8.2f M addr/s  (%.0f ns/addr)\n", n6 / t / 1e6, t / n6 * 1e9);

    {
        // 2^16-entry cache, Zipf over 1M addresses.
        const auto ranks = zipf_stream(rng, 1'000'000, count);
        std::vector<uint32_t> ids(1'000'000);
        for (auto& a : ids) a = static_cast<uint32_t>(rng());
        amon::CryptoPAnCache cache(key, 1 << 16, 1 << 12);
        t = seconds([&] { for (uint32_t r : ranks) acc += cache.anon_v4_cached(ids[r]); });
        std::printf("cryptopan cached ipv4     : %8.2f M addr/s  (64Ki entries, Zipf s=1 over 1M addrs, miss %.2f%%)\n",
                    count / t / 1e6, 100.0 * cache.misses() / double(cache.hits() + cache.misses()));

        // 1 % misses: 99 % of lookups from a 10k hot set, 1 % fresh addresses.
        std::vector<uint32_t> hot(10'000);
        for (auto& a : hot) a = static_cast<uint32_t>(rng());
        std::vector<uint32_t> s(count);
        for (auto& a : s) a = (rng() % 100 == 0) ? static_cast<uint32_t>(rng()) : hot[rng() % hot.size()];
        amon::CryptoPAnCache c2(key, 1 << 16, 1 << 12);
        for (uint32_t a : hot) c2.anon_v4_cached(a);
        const uint64_t m0 = c2.misses(), h0 = c2.hits();
        t = seconds([&] { for (uint32_t a : s) acc += c2.anon_v4_cached(a); });
        std::printf("cryptopan cached ipv4     : %8.2f M addr/s  (64Ki entries, 10k hot + 1%% fresh, miss %.2f%%)\n",
                    count / t / 1e6, 100.0 * (c2.misses() - m0) / double(c2.hits() - h0 + c2.misses() - m0));

        std::vector<uint8_t> hot6(1000 * 16);
        for (auto& b : hot6) b = static_cast<uint8_t>(rng());
        amon::CryptoPAnCache c3(key, 2, 1 << 12);
        const uint64_t m1 = c3.misses();
        t = seconds([&] {
            uint8_t out[16];
            for (size_t i = 0; i < count; ++i) {
                c3.anon_v6_cached(&hot6[16 * (rng() % 1000)], out);
                acc += out[0];
            }
        });
        std::printf("cryptopan cached ipv6     : %8.2f M addr/s  (4Ki entries, 1k hot, misses %llu)\n", count / t / 1e6,
                    static_cast<unsigned long long>(c3.misses() - m1));
    }

    {
        std::array<uint8_t, 16> k16;
        std::memcpy(k16.data(), key.data(), 16);
        amon::KeyedHash kh(k16);
        const size_t n = count;
        for (size_t len : {4, 16, 64}) {
            std::vector<uint8_t> msg(len, 0x5a);
            t = seconds([&] {
                for (size_t i = 0; i < n; ++i) {
                    msg[0] = static_cast<uint8_t>(i);
                    acc += kh.hash64(msg);
                }
            });
            std::printf("keyed hash (SipHash) %2zu B : %8.1f ns/op\n", len, t / n * 1e9);
        }
        t = seconds([&] {
            uint8_t mac[6] = {0, 0x1b, 0x21, 1, 2, 3};
            for (size_t i = 0; i < n; ++i) {
                mac[5] = static_cast<uint8_t>(i);
                kh.anon_mac(mac, mac);
            }
            acc += mac[0];
        });
        std::printf("mac pseudonym             : %8.1f ns/op\n", t / n * 1e9);

        // The naive pattern this class avoids: fetch + new + init per call.
        const size_t nn = std::max<size_t>(n / 10, 100);
        size_t sz = 8;
        uint8_t msg[16] = {};
        t = seconds([&] {
            for (size_t i = 0; i < nn; ++i) {
                EVP_MAC* m = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
                EVP_MAC_CTX* c = EVP_MAC_CTX_new(m);
                OSSL_PARAM p[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &sz), OSSL_PARAM_construct_end()};
                uint8_t out[8];
                size_t ol = 0;
                msg[0] = static_cast<uint8_t>(i);
                EVP_MAC_init(c, k16.data(), 16, p);
                EVP_MAC_update(c, msg, 16);
                EVP_MAC_final(c, out, &ol, sizeof out);
                acc += out[0];
                EVP_MAC_CTX_free(c);
                EVP_MAC_free(m);
            }
        });
        std::printf("  (naive EVP_MAC per call) : %8.1f ns/op, 16 B\n", t / nn * 1e9);
    }

    {
        for (size_t len : {1500, 65536}) {
            std::vector<uint8_t> buf(len + 1);
            for (auto& b : buf) b = static_cast<uint8_t>(rng());
            const size_t reps = std::max<size_t>(count * 1500 / len / 4, 10);
            t = seconds([&] {
                for (size_t i = 0; i < reps; ++i) {
                    buf[0] = static_cast<uint8_t>(i);
                    acc += amon::csum_sum({buf.data() + 1, len});  // odd address on purpose
                }
            });
            std::printf("checksum csum_sum %5zu B  : %8.2f GB/s\n", len, double(reps) * len / t / 1e9);
            t = seconds([&] {
                for (size_t i = 0; i < reps; ++i) {
                    buf[0] = static_cast<uint8_t>(i);
                    acc += rte_raw_cksum(buf.data() + 1, len);
                }
            });
            std::printf("  (DPDK rte_raw_cksum)     : %8.2f GB/s\n", double(reps) * len / t / 1e9);
        }
    }
    g_sink = acc;
    return 0;
}
