// TLS fields for test_fields: a ClientHello carrying each.
#include "field_samples.h"
#include "l7_build.hpp"

namespace {
const amon_test::SampleSource kTls([] {
  using amon_test::tcp4;
  return amon_test::Samples{
      {"tls.sni", {tcp4(amon::l7test::sample_client_hello("www.example.com"), 40000, 443), "www.example.com"}},
  };
});
}  // namespace
