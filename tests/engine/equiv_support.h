// What the engine's equivalence tests (test_hdr_fast, test_dns_fast) share:
// the shared captures (../shared/pcaps) read record by record, the test
// keys, a small z-anonymity store, and one side of a comparison (a
// consumer's program and its counters).
#pragma once

#include <pcap/pcap.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "runtime.h"
#include "scratch.h"
#include "zanon.h"

namespace amon::testing {

// Key file 0 or 1 (the Crypto-PAn reference key and another), written once
// per test program into a fresh directory, mode 0600.
inline std::string key_file(int which = 0) {
  static const std::string keys[] = {
      amon_test::scratch_key("k0.hex", "1522178d33a4cf80130a5b1649907d10d8988f837979652762574c2d2a842202"),
      amon_test::scratch_key("k1.hex", "0f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0")};
  return keys[which];
}

// One store for the test program: zmax 8, so a rule with z above 8 always hides.
inline zanon::Store& store() {
  static zanon::Store s{[] {
    zanon::Config c;
    c.max_values = 4096;
    c.zmax = 8;
    c.max_dt_ns = 3600ULL * 1000000000ULL;
    return c;
  }()};
  return s;
}

struct Side {
  std::unique_ptr<Program> prog;
  std::unique_ptr<ProgramInstance> inst;
  ConsumerCounters c;
};

inline std::vector<std::string> shared_captures() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(AMON_PCAPS_DIR, ec))
    if (e.path().extension() == ".pcap") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// fn(data, caplen, len, ts_ns) for each record of an Ethernet capture;
// false when the file cannot be read or is not Ethernet.
template <typename Fn>
bool for_each_record(const std::string& path, Fn&& fn) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* pc = pcap_open_offline(path.c_str(), err);
  if (!pc) return false;
  if (pcap_datalink(pc) != DLT_EN10MB) {
    pcap_close(pc);
    return false;
  }
  pcap_pkthdr* h;
  const u_char* data;
  while (pcap_next_ex(pc, &h, &data) == 1) {
    const uint64_t ts = uint64_t(h->ts.tv_sec) * 1000000000ULL + uint64_t(h->ts.tv_usec) * 1000ULL;
    fn(static_cast<const uint8_t*>(data), uint32_t(h->caplen), uint32_t(h->len), ts);
  }
  pcap_close(pc);
  return true;
}

}  // namespace amon::testing
