// Protocols amon knows only by their ports: each carries addresses in its
// payload, as text or binary, and no plugin rewrites them there.
#pragma once

#include "registry.h"

namespace amon::carriers {

// Declares their ports (Registry::add_addr_carrier). A plugin that comes to
// rewrite one of these protocols takes its line out of this list.
void register_ports(Registry& r);

}  // namespace amon::carriers
