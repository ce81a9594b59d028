// amon whatif: the share of names a z-anonymity rule would hide on a
// capture, for several z and Δt, through the real store (doc/zanon.md).
#pragma once

namespace amon {

// argv holds the options after "whatif". Exit status as amon's: 0 ok,
// 1 runtime failure, 2 bad usage.
int whatif_main(int argc, char** argv);

}  // namespace amon
