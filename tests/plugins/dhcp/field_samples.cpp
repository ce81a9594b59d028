// DHCP fields for test_fields: a DHCPREQUEST naming its host and vendor
// class (RFC 2132 options 12, 60).
#include "dhcp_build.hpp"
#include "field_samples.h"

namespace {
const amon_test::SampleSource kDhcp([] {
  namespace b = amon::l7test::dhcpb;
  amon_test::Bytes m = b::v4_header(1, b::bytes({0x00, 0x1b, 0x21, 0x3a, 0x4f, 0x5d}));
  b::cookie(m);
  b::opt(m, 53, b::bytes({3}));
  b::opt(m, 12, b::str("myhost"));
  b::opt(m, 60, b::str("MSFT 5.0"));
  m.push_back(255);
  const amon_test::Bytes dhcp = amon_test::udp4(m, 68, 67);
  return amon_test::Samples{
      {"dhcp.hostname", {dhcp, "myhost"}},
      {"dhcp.vendor_class", {dhcp, "MSFT 5.0"}},
  };
});
}  // namespace
