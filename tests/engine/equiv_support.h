// The shared captures (../shared/pcaps) as the engine's equivalence tests
// read them: every Ethernet capture in name order, each record with its
// captured and wire lengths and its time in nanoseconds.
#pragma once

#include <pcap/pcap.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace amon::testing {

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
