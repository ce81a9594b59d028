// Crypto-PAn prefix-preserving address anonymization (Fan, Xu, Ammar, Moon 2004).
//
// IPv4 output is bit-identical to the reference "Crypto-PAn 1.0" (sample.cpp);
// IPv6 is the "natural" 128-bit extension shared by yacryptopan, Yawning/cryptopan,
// node-cryptopan, libanon and others (see doc/cryptopan.md), NOT the per-word
// variants of alpha-MON, nfdump or libtrace.
//
// Threading: CryptoPAn and CryptoPAnCache own an OpenSSL cipher context and
// scratch buffers and are NOT thread-safe. Create one object per worker thread
// (all objects built from the same key produce the same mapping).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>

// Forward declarations keep OpenSSL headers out of every plugin that anonymizes.
struct evp_cipher_ctx_st;

namespace amon {

using CryptoPAnKey = std::array<uint8_t, 32>;

// A prefetch the compiler keeps: GCC deletes a loop whose only effect is
// __builtin_prefetch (a loop without side effects), which is what a burst's
// look-ahead pass is.
inline void fetch_line(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
    asm volatile("prefetcht0 %0" : : "m"(*static_cast<const volatile char*>(p)));
#else
    __builtin_prefetch(p);
#endif
}

class CryptoPAn {
public:
    // key[0..16) is the AES-128 key, key[16..32) is encrypted once to form the pad.
    explicit CryptoPAn(std::span<const uint8_t, 32> key);
    ~CryptoPAn();
    CryptoPAn(const CryptoPAn&) = delete;
    CryptoPAn& operator=(const CryptoPAn&) = delete;
    CryptoPAn(CryptoPAn&&) noexcept;
    CryptoPAn& operator=(CryptoPAn&&) noexcept;

    // Re-keys in place (key rotation) without reallocating the context.
    void rekey(std::span<const uint8_t, 32> key);

    // Address and result in host byte order (192.0.2.1 == 0xC0000201).
    uint32_t anon_v4(uint32_t host_order_addr);
    // Fetches the line of the pad table anon_v4(addr) will read.
    void prefetch_v4(uint32_t host_order_addr) const { fetch_line(&head_[host_order_addr >> 16]); }
    // Network byte order, 16 bytes each; in and out may alias.
    void anon_v6(const uint8_t in[16], uint8_t out[16]);
    // Class-preserving variants (addr_class.cpp, doc/cryptopan.md): special-
    // purpose addresses keep their class (unspecified, loopback, multicast and
    // broadcast verbatim; link-local, documentation and the like keep their
    // prefix), and an ordinary address never maps into a special range. Equal
    // to anon_v4/anon_v6 for every address neither rule touches.
    uint32_t anon_v4_classes(uint32_t host_order_addr);
    void anon_v6_classes(const uint8_t in[16], uint8_t out[16]);

    // Derives the key for rotation epoch `epoch` from a base key with
    // HKDF-SHA256 (RFC 5869, empty salt, info = "amon-cryptopan-epoch" ||
    // big-endian uint64 epoch, 32 bytes out). Throws std::runtime_error if
    // OpenSSL's KDF is unavailable.
    static CryptoPAnKey derive_epoch_key(std::span<const uint8_t, 32> base_key, uint64_t epoch);

private:
    void encrypt_blocks(const uint8_t* in, uint8_t* out, size_t nblocks);

    // Pad bits 0..15 of addresses whose first 16 bits are `top` (IPv4 and
    // IPv6 alike: both put the address in the block's first bits), or -1
    // while not yet computed.
    int32_t known_head(uint32_t top) const {
        return (head_filled_[top >> 6] >> (top & 63) & 1) ? int32_t{head_[top]} : -1;
    }
    void note_head(uint32_t top, uint16_t bits) {
        head_[top] = bits;
        head_filled_[top >> 6] |= uint64_t{1} << (top & 63);
        head_used_ = true;
    }
    void forget_heads();

    evp_cipher_ctx_st* ctx_ = nullptr;
    // Pad as two big-endian 64-bit halves: blocks are built with word operations.
    uint64_t pad_hi_ = 0, pad_lo_ = 0;
    // 128 blocks in and out: one EVP_EncryptUpdate per address lets AES-NI
    // pipeline the independent blocks instead of paying a call per bit.
    std::unique_ptr<uint8_t[]> in_buf_, out_buf_;
    // Pad bits for prefix lengths 0..15 depend on an address's first 16 bits
    // only: a table of them by those bits (128 KiB, filled on first use, a
    // bit each in head_filled_) halves the AES work of a new IPv4 address,
    // which under a flood of spoofed sources is nearly every packet. Key-
    // derived secrets: cleansed with the key.
    std::unique_ptr<uint16_t[]> head_;
    std::unique_ptr<uint64_t[]> head_filled_;
    bool head_used_ = false;
};

// Key text: exactly 64 hex digits (either case); ASCII whitespace anywhere is
// ignored so a key can be wrapped or end with a newline. Anything else
// ("0x" prefix, comments, base64, a 32-char passphrase) is rejected: a key
// that silently parsed into something else would anonymize with the wrong key.
struct KeyParseResult {
    CryptoPAnKey key{};
    std::string error;  // empty on success
    bool ok() const { return error.empty(); }
};
KeyParseResult parse_key_hex(std::string_view text);
// Reads and parses a key file; files larger than 4 KiB are rejected unread.
KeyParseResult read_key_file(const std::string& path);

// Fixed-size 2-way set-associative cache in front of a CryptoPAn. Memory is
// allocated once in the constructor; lookups never allocate. A slot's validity
// is an explicit flag, so 0.0.0.0 and :: are cacheable like any other address.
class CryptoPAnCache {
public:
    // v4_entries / v6_entries: total entries, powers of two >= 2 (std::invalid_argument otherwise).
    // keep_classes: the cache serves anon_v4_classes/anon_v6_classes.
    CryptoPAnCache(std::span<const uint8_t, 32> key, size_t v4_entries, size_t v6_entries,
                   bool keep_classes = false);

    // Inline: a hit is a multiply, a compare or two, and every packet of a
    // Crypto-PAn policy takes one; a miss goes out of line.
    uint32_t anon_v4_cached(uint32_t host_order_addr) {
        Set4& s = v4_sets_[set_index4(host_order_addr, v4_sets_.size())];
        for (unsigned w = 0; w < 2; ++w) {
            if ((s.valid >> w & 1) && s.addr[w] == host_order_addr) {
                ++hits_;
                s.victim = static_cast<uint8_t>(w ^ 1);
                return s.anon[w];
            }
        }
        return anon_v4_miss(s, host_order_addr);
    }
    void anon_v6_cached(const uint8_t in[16], uint8_t out[16]) {
        uint64_t a[2];
        std::memcpy(a, in, 16);
        Set6& s = v6_sets_[set_index6(a[0], a[1], v6_sets_.size())];
        for (unsigned w = 0; w < 2; ++w) {
            uint64_t b[2];
            std::memcpy(b, s.addr[w], 16);
            if ((s.valid >> w & 1) && ((a[0] ^ b[0]) | (a[1] ^ b[1])) == 0) {
                ++hits_;
                s.victim = static_cast<uint8_t>(w ^ 1);
                std::memcpy(out, s.anon[w], 16);  // in may be out: read in (above) before this
                return;
            }
        }
        anon_v6_miss(s, in, out);
    }

    // Fetches the set anon_v4_cached(addr) will read. A burst's lookups
    // issued ahead overlap their misses: under a flood of spoofed sources
    // every lookup is of an address the cache lost long ago.
    void prefetch_v4(uint32_t host_order_addr) const {
        fetch_line(&v4_sets_[set_index4(host_order_addr, v4_sets_.size())]);
        pan_.prefetch_v4(host_order_addr);
    }

    // Key rotation: new key, every entry invalidated, counters kept.
    void rekey(std::span<const uint8_t, 32> key);
    // Takes `from`'s entries, giving it this cache's (a policy reload whose
    // key did not change keeps what the previous generation computed).
    // Both must be keyed alike and sized alike; returns false, changing
    // nothing, when they are not sized alike.
    bool take_entries(CryptoPAnCache& from);
    void clear();

    uint64_t hits() const { return hits_; }
    uint64_t misses() const { return misses_; }
    size_t v4_entries() const { return v4_sets_.size() * 2; }
    size_t v6_entries() const { return v6_sets_.size() * 2; }
    // Bypasses the cache for one-off lookups; rekey through the cache, not
    // through this, or stale entries would be served.
    CryptoPAn& uncached() { return pan_; }

    // Fibonacci hashing: the multiply spreads addresses that differ only in low
    // bits (one subnet) across sets; nsets is a power of two.
    static size_t set_index4(uint32_t addr, size_t nsets) {
        return static_cast<size_t>((uint64_t{addr} * 0x9E3779B97F4A7C15ull) >> 32) & (nsets - 1);
    }

    static size_t set_index6(uint64_t hi, uint64_t lo, size_t nsets) {
        const uint64_t h = (hi * 0x9E3779B97F4A7C15ull) ^ (lo * 0xC2B2AE3D27D4EB4Full);
        return static_cast<size_t>(h ^ (h >> 29)) & (nsets - 1);
    }

private:
    struct Set4 {
        uint32_t addr[2];
        uint32_t anon[2];
        uint8_t valid;  // bit i: way i holds an entry
        uint8_t victim; // way to replace next (the least recently used one)
    };
    struct Set6 {
        uint8_t addr[2][16];
        uint8_t anon[2][16];
        uint8_t valid;
        uint8_t victim;
    };

    uint32_t anon_v4_miss(Set4& s, uint32_t addr);
    void anon_v6_miss(Set6& s, const uint8_t in[16], uint8_t out[16]);

    CryptoPAn pan_;
    std::unique_ptr<Set4[]> v4_store_;
    std::unique_ptr<Set6[]> v6_store_;
    std::span<Set4> v4_sets_;
    std::span<Set6> v6_sets_;
    uint64_t hits_ = 0, misses_ = 0;
    bool keep_classes_ = false;
};

}  // namespace amon
