// Test-only packet walker: Ethernet / 802.1Q / QinQ / IPv4 / IPv6 (+ext
// headers) / UDP / TCP, plus a naive per-flow TCP reassembler. The engine has
// its own decoder; this exists so L7 tests can feed real captured payloads.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace amon::l7test {

struct Pkt {
  uint64_t frame;          // 1-based, like tshark's frame.number
  bool tcp;
  uint16_t sport, dport;
  std::string src, dst;    // raw address bytes
  uint32_t seq;
  uint8_t tcp_flags;
  const uint8_t* payload;  // transport payload (bounded by caplen)
  uint32_t len;
  uint32_t ip_payload_after_udp;  // UDP: bytes after the UDP header per the IP length (ignores the UDP length)
  bool truncated;          // caplen cut the payload
  bool fragment;           // IPv4/IPv6 fragment (payload not complete): only reported for offset 0
};

// Calls fn for every non-fragment UDP/TCP packet. Returns false if the file
// cannot be opened.
bool walk(const std::string& path, const std::function<void(const Pkt&)>& fn);

// Byte streams per TCP direction, in sequence order (retransmits and overlaps
// dropped, gaps end the stream). Key: "src:sport>dst:dport".
struct Stream { std::vector<uint8_t> data; uint16_t sport = 0, dport = 0; bool have_isn = false; uint32_t next = 0;
                std::map<uint32_t, std::vector<uint8_t>> pending; uint64_t first_frame = 0; };
std::map<std::string, Stream> tcp_streams(const std::string& path, size_t cap = 1 << 20);

// Run a shell command, return stdout lines (empty vector if it failed).
std::vector<std::string> run_lines(const std::string& cmd);
bool have_tshark();
std::string pcap_path(const std::string& name);

}  // namespace amon::l7test
