// Registrable domain ("sld" fallback) lookup via the public suffix list.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace amon::zanon {

// The registrable domain of a host name, lowercased, without a trailing dot:
// "a.b.Example.CO.uk." -> "example.co.uk". Empty when there is none (a public
// suffix itself such as "co.uk", an IPv4 literal, an empty or over-long name,
// a name with an empty label or a NUL byte).
//
// This form writes into `scratch` (>= name.size() + 1 bytes; 256 covers any
// DNS name) and returns a view into it: no allocation, for the packet path.
// The result is always a suffix of the lowercased name, so the caller can mask
// exactly the labels left of it.
std::string_view registrable_domain(std::string_view name, std::span<char> scratch) noexcept;

std::string registrable_domain(std::string_view name);

}  // namespace amon::zanon
