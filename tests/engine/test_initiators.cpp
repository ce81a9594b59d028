// Who initiates flows, learnt in input order (engine/core/initiators.h): the
// evidence each kind of packet gives, what teaches nothing, and that the
// answer is a function of the input order alone.
#include <catch2/catch.hpp>

#include <cstdio>
#include <random>

#include "frames.h"
#include "initiators.h"

using namespace amon;
using namespace amon_test;

namespace {

struct Pkt {
  Bytes b;
  Decoded d;
};

Pkt ip4(const char* src, const char* dst, uint8_t proto, const Bytes& l4, uint16_t frag = 0x4000) {
  V4 h;
  h.src = v4(src), h.dst = v4(dst);
  h.proto = proto;
  h.frag = frag;
  Pkt p{cat({eth(0x0800), ipv4(h, l4)}), {}};
  decode(p.b.data(), uint32_t(p.b.size()), uint32_t(p.b.size()), p.d);
  return p;
}
Pkt tcp(const char* src, const char* dst, uint16_t sp, uint16_t dp, uint8_t flags) {
  return ip4(src, dst, 6, tcp_hdr(sp, dp, flags));
}
Pkt udp(const char* src, const char* dst, uint16_t sp, uint16_t dp) {
  return ip4(src, dst, 17, cat({udp_hdr(sp, dp, 16), payload(8)}));
}
uint8_t see(InitiatorLog& l, const Pkt& p) { return l.observe(p.b.data(), uint32_t(p.b.size()), p.d); }

constexpr uint8_t S = InitiatorLog::kSrc, D = InitiatorLog::kDst;

}  // namespace

TEST_CASE("initiators: a SYN's sender, a SYN-ACK's receiver", "[initiators]") {
  InitiatorLog l;
  CHECK(see(l, tcp("10.0.0.1", "192.0.2.1", 40000, 443, 0x02)) == S);
  CHECK(see(l, tcp("192.0.2.1", "10.0.0.1", 443, 40000, 0x12)) == D);
  // The host now accepts a connection: it stays known as an initiator.
  CHECK(see(l, tcp("198.51.100.7", "10.0.0.1", 51000, 6881, 0x02)) == (S | D));
  InitiatorLog m;
  CHECK(see(m, tcp("192.0.2.9", "10.0.0.2", 443, 40001, 0x12)) == D);
}

TEST_CASE("initiators: the first packet of a datagram flow, server ports", "[initiators]") {
  InitiatorLog l;
  // A DNS answer first (the capture began mid-way): the ephemeral end.
  CHECK(see(l, udp("192.0.2.53", "10.0.0.3", 53, 53001)) == D);
  // Ephemeral ports both ends: the first packet's sender.
  CHECK(see(l, udp("10.0.0.4", "198.51.100.4", 50001, 50002)) == S);
  // Not the first packet of its flow: nothing more is learnt.
  CHECK(see(l, udp("198.51.100.4", "10.0.0.4", 50002, 50001)) == D);
}

TEST_CASE("initiators: what teaches nothing", "[initiators]") {
  InitiatorLog l;
  // A TCP segment mid-way between two ephemeral ports.
  CHECK(see(l, tcp("10.0.0.5", "198.51.100.5", 40000, 50000, 0x10)) == 0);
  // An ICMP error.
  CHECK(see(l, ip4("192.0.2.1", "10.0.0.6", 1, cat({icmp_hdr(3, 1), payload(28)}))) == 0);
  // A later fragment.
  CHECK(see(l, ip4("10.0.0.7", "198.51.100.7", 17, payload(16), 0x0002)) == 0);
  // A TCP segment mid-way to a likely server port: its client.
  CHECK(see(l, tcp("10.0.0.8", "192.0.2.8", 40000, 443, 0x10)) == S);
  // An echo request's sender, an echo reply's receiver.
  CHECK(see(l, ip4("10.0.0.9", "192.0.2.9", 1, icmp_hdr(8, 0))) == S);
  InitiatorLog m;
  CHECK(see(m, ip4("192.0.2.9", "10.0.0.9", 1, icmp_hdr(0, 0))) == D);
}

TEST_CASE("initiators: bounded, and the same input order gives the same answers", "[initiators]") {
  InitiatorLog a, b;
  CHECK(a.memory_bytes() == (InitiatorLog::kFlows + InitiatorLog::kHosts) * sizeof(uint64_t));
  uint64_t differ = 0, learnt = 0;
  char src[32], dst[32];
  for (unsigned i = 0; i < 200000; ++i) {
    std::snprintf(src, sizeof src, "10.%u.%u.%u", (i >> 16) & 255, (i >> 8) & 255, i & 255);
    std::snprintf(dst, sizeof dst, "198.51.%u.%u", (i >> 8) & 255, i & 255);
    const Pkt p = tcp(src, dst, uint16_t(40000 + i % 1000), 443, 0x02);
    const uint8_t x = see(a, p), y = see(b, p);
    differ += x != y;
    learnt += x == S;
  }
  CHECK(differ == 0);
  CHECK(learnt == 200000);
  CHECK(a.memory_bytes() == (InitiatorLog::kFlows + InitiatorLog::kHosts) * sizeof(uint64_t));
}

TEST_CASE("initiators: hosts seen initiating several flows outlast a flood of one-off sources", "[initiators]") {
  InitiatorLog l;
  char src[32];
  // Users that each opened three connections.
  constexpr unsigned kUsers = 4096;
  for (unsigned f = 0; f < 3; ++f)
    for (unsigned i = 0; i < kUsers; ++i) {
      std::snprintf(src, sizeof src, "10.1.%u.%u", i >> 8, i & 255);
      see(l, tcp(src, "192.0.2.80", uint16_t(40000 + f), 443, 0x02));
    }
  // A million spoofed SYNs, each from a source seen once (none in 10/8),
  // sixteen times the log's hosts.
  std::mt19937 rng(7);
  for (unsigned i = 0; i < 1000000; ++i) {
    const uint32_t a = rng();
    std::snprintf(src, sizeof src, "%u.%u.%u.%u", 11 + (a >> 24) % 200, (a >> 16) & 255, (a >> 8) & 255, a & 255);
    see(l, tcp(src, "192.0.2.80", uint16_t(1024 + (a & 0x7fff)), 80, 0x02));
  }
  // A segment mid-way between ephemeral ports teaches nothing: it says
  // what the log still knows.
  unsigned forgotten = 0;
  for (unsigned i = 0; i < kUsers; ++i) {
    std::snprintf(src, sizeof src, "10.1.%u.%u", i >> 8, i & 255);
    forgotten += see(l, tcp(src, "198.51.100.1", 40000, 50000, 0x10)) != S;
  }
  CHECK(forgotten == 0);
}
