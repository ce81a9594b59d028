#pragma once
#include "registry.h"

namespace amon::actions {
void register_actions(Registry& r);
}
