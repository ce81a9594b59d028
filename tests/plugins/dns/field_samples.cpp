// DNS fields for test_fields: a query carrying each.
#include "field_samples.h"
#include "l7_build.hpp"

namespace {
const amon_test::SampleSource kDns([] {
  using amon_test::udp4;
  return amon_test::Samples{
      {"dns.qname", {udp4(amon::l7test::dns_query("q.example.com"), 40000, 53), "q.example.com"}},
  };
});
}  // namespace
