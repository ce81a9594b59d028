// The runtime's own application (HTTP: its fields are declared in
// plugins/http/fields.cpp); every other protocol is a plugin and gets its
// name from Registry::add_protocol.
#include "registry.h"

namespace amon {

void register_l7_fields(Registry& r) { r.add_proto_name("http"); }

}  // namespace amon
