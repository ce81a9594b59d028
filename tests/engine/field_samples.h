// Sample packets for test_fields: for each registered field, a frame carrying
// it and the field's value in that frame. A protocol's samples sit beside its
// tests (tests/plugins/<p>/field_samples.cpp, added to test_fields by
// amon_field_samples), so a new protocol brings its samples with it; a field
// accepted in conditions without a sample fails test_fields.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "frames.h"

namespace amon_test {

struct Sample {
  Bytes frame;
  std::string value;
  bool from_client = true;  // else a response: the client is the destination
};
using Samples = std::map<std::string, Sample>;

// Registers a function making one protocol's samples, at namespace scope:
//   const amon_test::SampleSource kDns([] { return amon_test::Samples{...}; });
// It runs when test_fields asks (all_samples), not at static initialisation.
struct SampleSource {
  explicit SampleSource(Samples (*make)());
};
// Every registered source's samples; a field two sources both give fails.
Samples all_samples();

// Ethernet + IPv4 frames between the same two hosts (192.0.2.1 the client,
// 198.51.100.2 the server). tcp4 from port 80 is the server's response.
Bytes text(const std::string& s);
Bytes tcp4(const Bytes& pl, uint16_t sport, uint16_t dport);
Bytes udp4(const Bytes& pl, uint16_t sport, uint16_t dport);

}  // namespace amon_test
