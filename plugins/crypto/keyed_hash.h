// Keyed hashing for hash(key=K) actions, z-anonymity user ids and MAC pseudonyms.
//
// SipHash-2-4 (64-bit output). HMAC-SHA256 costs several hundred ns per short
// input; SipHash is a PRF designed for short inputs. hash64 computes it
// inline (the EVP_MAC path costs ~10x the hash itself in call overhead);
// hash64_openssl is the same function through OpenSSL 3's EVP_MAC "SIPHASH",
// kept as the tests' independent reference.
//
// Threading: not thread-safe (the context is mutated per call); one object per
// worker thread and key.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

struct evp_mac_ctx_st;

namespace amon {

class KeyedHash {
public:
    explicit KeyedHash(std::span<const uint8_t, 16> key);
    ~KeyedHash();
    KeyedHash(const KeyedHash&) = delete;
    KeyedHash& operator=(const KeyedHash&) = delete;
    KeyedHash(KeyedHash&&) noexcept;
    KeyedHash& operator=(KeyedHash&&) noexcept;

    // A 16-byte hash key for `purpose` from a 32-byte key file (the format
    // parse_key_hex reads): HKDF-SHA256, empty salt, info = "amon-keyed-hash:"
    // || purpose. Using different purposes (e.g. "zanon-user", "mac") keeps
    // pseudonyms of different uses unlinkable even when one key file is shared.
    static std::array<uint8_t, 16> derive_key(std::span<const uint8_t, 32> key_file_bytes,
                                              std::string_view purpose);

    // SipHash-2-4(key, data) as the standard little-endian 64-bit value
    // (key 00..0f, data 00..0e -> 0xa129ca6149be45e5).
    uint64_t hash64(std::span<const uint8_t> data);
    // The same through OpenSSL's EVP_MAC "SIPHASH" (the tests' oracle for hash64).
    uint64_t hash64_openssl(std::span<const uint8_t> data);

    // Length-preserving MAC pseudonym: 6 bytes of the keyed hash of the 6 input
    // bytes, with the I/G bit (bit 0 of octet 0) copied from the input so
    // unicast stays unicast and group stays group, and the U/L bit (bit 1 of
    // octet 0) forced to 1 so a pseudonym is always "locally administered" and
    // can never be mistaken for, or collide with, a vendor-assigned (OUI) MAC.
    // in and out may alias.
    void anon_mac(const uint8_t in[6], uint8_t out[6]);

private:
    std::array<uint8_t, 16> key_{};
    evp_mac_ctx_st* ctx_ = nullptr;
};

}  // namespace amon
