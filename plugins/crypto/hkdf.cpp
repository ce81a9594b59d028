#include "hkdf.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <stdexcept>
#include <string>

namespace amon {

void hkdf_sha256(std::span<const uint8_t> ikm, std::span<const uint8_t> info, std::span<uint8_t> out) {
    auto fail = [](const char* what) {
        throw std::runtime_error(std::string("HKDF: OpenSSL ") + what + " failed");
    };
    EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
    if (!kdf) fail("EVP_KDF_fetch(HKDF)");
    EVP_KDF_CTX* kctx = EVP_KDF_CTX_new(kdf);
    EVP_KDF_free(kdf);
    if (!kctx) fail("EVP_KDF_CTX_new");
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(ikm.data()), ikm.size()),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<uint8_t*>(info.data()), info.size()),
        OSSL_PARAM_construct_end(),
    };
    const int rc = EVP_KDF_derive(kctx, out.data(), out.size(), params);
    EVP_KDF_CTX_free(kctx);
    if (rc != 1) fail("EVP_KDF_derive");
}

}  // namespace amon
