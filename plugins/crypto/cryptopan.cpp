#include "cryptopan.h"

#include "hkdf.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <emmintrin.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <type_traits>

namespace amon {

namespace {

static_assert(std::endian::native == std::endian::little || std::endian::native == std::endian::big);

inline uint64_t load_be64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
    return v;
}

inline void store_be64(uint8_t* p, uint64_t v) {
    if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
    std::memcpy(p, &v, 8);
}

// Mask of the first `p` bits of a 64-bit word, valid for p in [0, 64]. The
// explicit p == 0 case avoids the undefined full-width shift (dnscap #188).
inline uint64_t prefix_mask64(unsigned p) { return p == 0 ? 0 : ~uint64_t{0} << (64 - p); }

[[noreturn]] void openssl_fail(const char* what) {
    throw std::runtime_error(std::string("CryptoPAn: OpenSSL ") + what + " failed");
}

// Fetched once: EVP_aes_128_ecb() would make every EVP_EncryptInit_ex do an
// implicit provider lookup, which matters for per-epoch rekeying.
EVP_CIPHER* aes128_ecb() {
    static EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, "AES-128-ECB", nullptr);
    if (!cipher) openssl_fail("EVP_CIPHER_fetch(AES-128-ECB)");
    return cipher;
}

}  // namespace

CryptoPAn::CryptoPAn(std::span<const uint8_t, 32> key)
    : in_buf_(new uint8_t[128 * 16]), out_buf_(new uint8_t[128 * 16]),
      head_(new uint16_t[1 << 16]), head_filled_(new uint64_t[(1 << 16) / 64]()) {
    ctx_ = EVP_CIPHER_CTX_new();
    if (!ctx_) openssl_fail("EVP_CIPHER_CTX_new");
    rekey(key);
}

CryptoPAn::~CryptoPAn() {
    EVP_CIPHER_CTX_free(ctx_);
    // The input blocks are mostly pad bits, which are key-derived secrets.
    if (in_buf_) OPENSSL_cleanse(in_buf_.get(), 128 * 16);
    OPENSSL_cleanse(&pad_hi_, sizeof pad_hi_);
    OPENSSL_cleanse(&pad_lo_, sizeof pad_lo_);
    if (head_) forget_heads();
}

void CryptoPAn::forget_heads() {
    if (!head_used_) return;
    OPENSSL_cleanse(head_.get(), sizeof(uint16_t) << 16);
    std::memset(head_filled_.get(), 0, (1 << 16) / 8);
    head_used_ = false;
}

CryptoPAn::CryptoPAn(CryptoPAn&& o) noexcept
    : ctx_(o.ctx_), pad_hi_(o.pad_hi_), pad_lo_(o.pad_lo_),
      in_buf_(std::move(o.in_buf_)), out_buf_(std::move(o.out_buf_)),
      head_(std::move(o.head_)), head_filled_(std::move(o.head_filled_)), head_used_(o.head_used_) {
    o.ctx_ = nullptr;
}

CryptoPAn& CryptoPAn::operator=(CryptoPAn&& o) noexcept {
    if (this != &o) {
        EVP_CIPHER_CTX_free(ctx_);
        ctx_ = o.ctx_;
        o.ctx_ = nullptr;
        pad_hi_ = o.pad_hi_;
        pad_lo_ = o.pad_lo_;
        in_buf_ = std::move(o.in_buf_);
        out_buf_ = std::move(o.out_buf_);
        if (head_) forget_heads();
        head_ = std::move(o.head_);
        head_filled_ = std::move(o.head_filled_);
        head_used_ = o.head_used_;
    }
    return *this;
}

void CryptoPAn::rekey(std::span<const uint8_t, 32> key) {
    if (EVP_EncryptInit_ex2(ctx_, aes128_ecb(), key.data(), nullptr, nullptr) != 1)
        openssl_fail("EVP_EncryptInit_ex2");
    // ECB over whole blocks: padding would only add a block we never read.
    EVP_CIPHER_CTX_set_padding(ctx_, 0);
    uint8_t pad[16];
    encrypt_blocks(key.data() + 16, pad, 1);
    pad_hi_ = load_be64(pad);
    pad_lo_ = load_be64(pad + 8);
    // The second half of blocks 0..63 is the pad's in every address (IPv4
    // and IPv6 alike): written here once, not per address.
    for (unsigned p = 0; p < 64; ++p) store_be64(in_buf_.get() + 16 * p + 8, pad_lo_);
    forget_heads();
}

void CryptoPAn::encrypt_blocks(const uint8_t* in, uint8_t* out, size_t nblocks) {
    int outl = 0;
    const int inl = static_cast<int>(nblocks * 16);
    if (EVP_EncryptUpdate(ctx_, out, &outl, in, inl) != 1 || outl != inl)
        openssl_fail("EVP_EncryptUpdate");
}

namespace {
// The top bits of the first bytes of 16 blocks, the first block's as bit 15:
// one movemask instead of a shift and an or per block.
inline uint32_t first_bits16(const uint8_t* o) {
    const auto b = [o](int i) { return static_cast<char>(o[16 * i]); };
    return static_cast<uint32_t>(_mm_movemask_epi8(_mm_set_epi8(b(0), b(1), b(2), b(3), b(4), b(5), b(6), b(7), b(8),
                                                                b(9), b(10), b(11), b(12), b(13), b(14), b(15))));
}
}  // namespace

uint32_t CryptoPAn::anon_v4(uint32_t addr) {
    // Block p = first p address bits, then pad bits p..127. Only the top 32 bits
    // depend on the address, so the low 96 bits are the pad in every block.
    // Blocks 0..15 only when the table does not have their bits yet.
    const uint64_t a = uint64_t{addr} << 32;
    const int32_t head = known_head(addr >> 16);
    uint8_t* in = in_buf_.get();
    uint8_t* out = out_buf_.get();
    // Blocks p..31 of the address, and the bits their first bytes give, for
    // the two counts there are (16 blocks: a /16 seen before, the common
    // case; 32 otherwise).
    auto blocks = [&](auto from) {
        for (unsigned p = from; p < 32; ++p) {
            const uint64_t m = prefix_mask64(p);
            store_be64(in + 16 * p, (a & m) | (pad_hi_ & ~m));
        }
        encrypt_blocks(in + 16 * from, out + 16 * from, 32 - from);
        return first_bits16(out + 16 * 16) | (from == 0 ? first_bits16(out) << 16 : 0u);
    };
    if (head >= 0) return addr ^ (static_cast<uint32_t>(head) << 16 | blocks(std::integral_constant<unsigned, 16>{}));
    const uint32_t otp = blocks(std::integral_constant<unsigned, 0>{});
    note_head(addr >> 16, static_cast<uint16_t>(otp >> 16));
    return addr ^ otp;
}

void CryptoPAn::anon_v6(const uint8_t in_addr[16], uint8_t out_addr[16]) {
    const uint64_t a_hi = load_be64(in_addr);
    const uint64_t a_lo = load_be64(in_addr + 8);
    const int32_t head = known_head(static_cast<uint32_t>(a_hi >> 48));
    const unsigned from = head < 0 ? 0 : 16;
    uint8_t* in = in_buf_.get();
    for (unsigned p = from; p < 64; ++p) {
        const uint64_t m = prefix_mask64(p);
        store_be64(in + 16 * p, (a_hi & m) | (pad_hi_ & ~m));
    }
    for (unsigned p = 64; p < 128; ++p) {
        const uint64_t m = prefix_mask64(p - 64);
        store_be64(in + 16 * p, a_hi);
        store_be64(in + 16 * p + 8, (a_lo & m) | (pad_lo_ & ~m));
    }
    uint8_t* out = out_buf_.get();
    encrypt_blocks(in + 16 * from, out + 16 * from, 128 - from);
    uint64_t otp_hi = 0, otp_lo = 0;
    for (unsigned p = from; p < 64; ++p) otp_hi |= (uint64_t{out[16 * p]} >> 7) << (63 - p);
    for (unsigned p = 0; p < 64; ++p) otp_lo |= (uint64_t{out[16 * (64 + p)]} >> 7) << (63 - p);
    if (head < 0) note_head(static_cast<uint32_t>(a_hi >> 48), static_cast<uint16_t>(otp_hi >> 48));
    else otp_hi |= static_cast<uint64_t>(head) << 48;
    store_be64(out_addr, a_hi ^ otp_hi);
    store_be64(out_addr + 8, a_lo ^ otp_lo);
}

CryptoPAnKey CryptoPAn::derive_epoch_key(std::span<const uint8_t, 32> base_key, uint64_t epoch) {
    static constexpr char kLabel[] = "amon-cryptopan-epoch";
    uint8_t info[sizeof(kLabel) - 1 + 8];
    std::memcpy(info, kLabel, sizeof(kLabel) - 1);
    store_be64(info + sizeof(kLabel) - 1, epoch);

    CryptoPAnKey out{};
    hkdf_sha256(base_key, info, out);
    return out;
}

// ---------------------------------------------------------------- key files

namespace {

inline bool is_key_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

inline int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

KeyParseResult parse_key_hex(std::string_view text) {
    KeyParseResult r;
    size_t digits = 0;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (is_key_space(c)) continue;
        const int v = hex_value(c);
        if (v < 0) {
            // The offending byte is not a key digit, so reporting it leaks nothing.
            char buf[96];
            std::snprintf(buf, sizeof buf, "invalid character 0x%02x at offset %zu (expected hex digit)",
                          static_cast<unsigned char>(c), i);
            r.error = buf;
            r.key = {};
            return r;
        }
        if (digits < 64) {
            uint8_t& b = r.key[digits / 2];
            b = static_cast<uint8_t>(digits % 2 == 0 ? v << 4 : b | v);
        }
        ++digits;
    }
    if (digits != 64) {
        r.error = "key has " + std::to_string(digits) + " hex digits, expected 64";
        r.key = {};
    }
    return r;
}

KeyParseResult read_key_file(const std::string& path) {
    constexpr size_t kMax = 4096;
    KeyParseResult r;
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        r.error = "cannot open key file '" + path + "'";
        return r;
    }
    std::string text(kMax + 1, '\0');
    f.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (f.bad()) {
        r.error = "cannot read key file '" + path + "'";
        return r;
    }
    text.resize(static_cast<size_t>(f.gcount()));
    if (text.size() > kMax) {
        r.error = "key file '" + path + "' is larger than 4096 bytes";
        return r;
    }
    r = parse_key_hex(text);
    if (!r.ok()) r.error = "key file '" + path + "': " + r.error;
    return r;
}

// ---------------------------------------------------------------- cache

namespace {

size_t checked_sets(size_t entries, const char* what) {
    if (entries < 2 || (entries & (entries - 1)) != 0)
        throw std::invalid_argument(std::string("CryptoPAnCache: ") + what +
                                    " entries must be a power of two >= 2");
    return entries / 2;
}

}  // namespace

CryptoPAnCache::CryptoPAnCache(std::span<const uint8_t, 32> key, size_t v4_entries, size_t v6_entries,
                               bool keep_classes)
    : pan_(key), keep_classes_(keep_classes) {
    const size_t n4 = checked_sets(v4_entries, "v4");
    const size_t n6 = checked_sets(v6_entries, "v6");
    v4_store_.reset(new Set4[n4]);
    v6_store_.reset(new Set6[n6]);
    v4_sets_ = {v4_store_.get(), n4};
    v6_sets_ = {v6_store_.get(), n6};
    clear();
}

void CryptoPAnCache::clear() {
    for (auto& s : v4_sets_) s = Set4{};
    for (auto& s : v6_sets_) s = Set6{};
}

bool CryptoPAnCache::take_entries(CryptoPAnCache& from) {
    if (from.v4_sets_.size() != v4_sets_.size() || from.v6_sets_.size() != v6_sets_.size()) return false;
    std::swap(v4_store_, from.v4_store_);
    std::swap(v6_store_, from.v6_store_);
    std::swap(v4_sets_, from.v4_sets_);
    std::swap(v6_sets_, from.v6_sets_);
    return true;
}

void CryptoPAnCache::rekey(std::span<const uint8_t, 32> key) {
    pan_.rekey(key);
    clear();
}

uint32_t CryptoPAnCache::anon_v4_miss(Set4& s, uint32_t addr) {
    ++misses_;
    const unsigned w = s.victim;
    const uint32_t anon = keep_classes_ ? pan_.anon_v4_classes(addr) : pan_.anon_v4(addr);
    s.addr[w] = addr;
    s.anon[w] = anon;
    s.valid |= static_cast<uint8_t>(1u << w);
    s.victim = static_cast<uint8_t>(w ^ 1);
    return anon;
}

void CryptoPAnCache::anon_v6_miss(Set6& s, const uint8_t in[16], uint8_t out[16]) {
    ++misses_;
    const unsigned w = s.victim;
    // Copy the input first: the caller may pass the same buffer as in and out.
    std::memcpy(s.addr[w], in, 16);
    if (keep_classes_) pan_.anon_v6_classes(s.addr[w], s.anon[w]);
    else pan_.anon_v6(s.addr[w], s.anon[w]);
    s.valid |= static_cast<uint8_t>(1u << w);
    s.victim = static_cast<uint8_t>(w ^ 1);
    std::memcpy(out, s.anon[w], 16);
}

}  // namespace amon
