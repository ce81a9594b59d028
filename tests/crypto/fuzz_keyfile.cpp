// libFuzzer target for the Crypto-PAn key text parser. Besides memory safety it
// checks the parser's contract: success iff the input is exactly 64 hex digits
// plus ASCII whitespace, and a failure never leaves key bytes behind.
#include "cryptopan.h"

#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto r = amon::parse_key_hex(text);

    size_t digits = 0;
    bool only_hex_space = true;
    for (char c : text) {
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')) ++digits;
        else if (!(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f')) only_hex_space = false;
    }
    const bool expect_ok = only_hex_space && digits == 64;
    if (r.ok() != expect_ok) std::abort();
    if (!r.ok()) {
        for (auto b : r.key)
            if (b != 0) std::abort();
    }
    return 0;
}
