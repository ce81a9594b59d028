// HKDF-SHA256 (RFC 5869) through OpenSSL's EVP_KDF, empty salt. Used to derive
// per-epoch Crypto-PAn keys and per-purpose hash keys from one key file so no
// two uses share raw key material.
#pragma once

#include <cstdint>
#include <span>

namespace amon {

// Throws std::runtime_error if OpenSSL's HKDF is unavailable or fails.
void hkdf_sha256(std::span<const uint8_t> ikm, std::span<const uint8_t> info, std::span<uint8_t> out);

}  // namespace amon
