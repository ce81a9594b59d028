// Frame assembly for amon-gen: Ethernet (+802.1Q / QinQ), IPv4 / IPv6, TCP, UDP,
// ICMP, with every checksum computed here so the files are a clean oracle input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "rng.hpp"

namespace amon::gen {

// RFC 1071 sum folded to 16 bits (not inverted). Bytes are taken as big-endian
// words, an odd tail padded with zero.
uint32_t csum_add(const uint8_t* p, size_t n, uint32_t acc);
uint16_t csum_fold(uint32_t acc);

enum : uint8_t { kIcmp = 1, kTcp = 6, kUdp = 17, kIcmp6 = 58 };
enum : uint8_t { kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10 };

struct PktRef {
  uint64_t ts;  // ns, relative to the flow's start until the flow is scheduled
  uint32_t off, len;
};

// All frames of one flow, stored back to back so a flow costs two allocations.
struct FlowBuf {
  std::vector<uint8_t> bytes;
  std::vector<PktRef> pkts;
  void sort_by_time();
};

// Encapsulations amon-gen can wrap every frame in (--tunnel).
enum class Tunnel : uint8_t { None, GtpU, Vxlan, Geneve, Gre, IpIp };

// What stays fixed for both directions of a flow below L4.
struct Path {
  Tunnel tunnel = Tunnel::None;
  bool tunnel_csum = false;      // outer UDP checksum computed (else 0, as GTP-U and VXLAN senders mostly leave it)
  uint16_t tunnel_mtu = 0;       // outer datagrams longer than this are fragmented (0: never)
  uint16_t tunnel_ipid = 0;      // the outer IPv4 identification, per tunnel direction pair
  bool v6 = false;
  uint8_t cmac[6]{}, smac[6]{};  // client, and the router in front of the servers
  uint8_t ntags = 0;
  uint16_t tpid[2]{}, tci[2]{};
  uint8_t cip[16]{}, sip[16]{};
  uint8_t cttl = 64, sttl = 56;
  uint16_t cipid = 0, sipid = 0;
  uint32_t cflow = 0, sflow = 0;  // IPv6 flow labels, one per direction as stacks do
};

// Wraps the frame at fb.bytes[off, off+len) in p.tunnel, in place (the
// frame is the last one in fb). Both directions of a client's flows share
// one tunnel: the endpoints (an access node per client, one core node) and
// identifiers (VNI, GRE key; a TEID per direction) follow from the client.
void wrap_tunnel(FlowBuf& fb, size_t off, Path& p, bool c2s);

// Appends one frame carrying the L4 segment `l4` (its checksum field zero) and
// fills in lengths and checksums. Frames shorter than 60 bytes get zero padding,
// as they would arriving from a real NIC.
void emit(FlowBuf& fb, uint64_t ts, Path& p, bool c2s, uint8_t proto, const uint8_t* l4, size_t l4len);

// A TCP connection's sequence space: every segment it writes carries the right
// seq/ack, so tshark's analysis sees a plausible conversation.
struct Tcp {
  FlowBuf& fb;
  Path& p;
  uint16_t cport, sport;
  uint32_t cnxt, snxt;
  uint16_t cwin = 502, swin = 501;
  uint16_t mss;

  Tcp(FlowBuf& f, Path& path, Rng& r, uint16_t client_port, uint16_t server_port);
  void seg(uint64_t ts, bool c2s, uint8_t flags, const uint8_t* data = nullptr, size_t n = 0);
  void syn_exchange(uint64_t& t, uint64_t rtt, Rng& r);
  // Sends `data` in MSS-sized segments with slow-start bursts one RTT apart; the
  // receiver ACKs every second segment. Returns the time of the last packet.
  uint64_t transfer(uint64_t t, bool c2s, std::span<const uint8_t> data, uint64_t rtt, uint64_t ns_per_kbyte, Rng& r);
  void close(uint64_t& t, uint64_t rtt, Rng& r);

 private:
  void syn(uint64_t ts, bool c2s, uint8_t flags);
};

}  // namespace amon::gen
