// amon map: the anonymized form of addresses and prefixes under a
// consumer's Crypto-PAn key (map.cpp).
#pragma once

namespace amon {

int map_main(int argc, char** argv);

}  // namespace amon
