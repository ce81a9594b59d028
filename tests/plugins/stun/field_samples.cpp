// STUN fields for test_fields: a Binding request with a USERNAME (ICE's
// fragments), on the STUN port.
#include "field_samples.h"

namespace {
const amon_test::SampleSource kStun([] {
  amon_test::Bytes m;
  const std::string user = "alice:bob1";  // 10 bytes: padded to 12
  amon_test::put16(m, 0x0001), amon_test::put16(m, 16), amon_test::put32(m, 0x2112a442);
  for (int i = 0; i < 12; ++i) amon_test::put8(m, uint8_t(0x30 + i));
  amon_test::put16(m, 0x0006), amon_test::put16(m, uint16_t(user.size()));
  amon_test::put(m, amon_test::text(user));
  amon_test::put16(m, 0);
  return amon_test::Samples{{"stun.username", {amon_test::udp4(m, 50000, 3478), user}}};
});
}  // namespace
