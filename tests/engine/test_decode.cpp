// The L2-L4 decoder on crafted frames: every layer it knows, every way a
// frame can end early, and the lengths that cannot be.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "frames.h"
#include "l2l4.h"

using namespace amon;
using namespace amon_test;

namespace {

Decoded dec(const Bytes& f, uint32_t cap = UINT32_MAX, uint32_t wire = 0) {
  Decoded d;
  uint32_t c = cap == UINT32_MAX ? uint32_t(f.size()) : cap;
  decode(f.data(), c, wire ? wire : uint32_t(f.size()), d);
  return d;
}

const char* st(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::Ok: return "Ok";
    case DecodeStatus::NotIp: return "NotIp";
    case DecodeStatus::Truncated: return "Truncated";
    case DecodeStatus::Malformed: return "Malformed";
  }
  return "?";
}

// Cuts `f` at every byte count below `headers_end` (the first payload byte)
// and checks the decoder stops with Truncated and keeps exactly the
// complete layers it passed: good_until is the largest boundary <= cap.
void truncate_everywhere(const Bytes& f, std::vector<uint32_t> boundaries, uint32_t headers_end) {
  boundaries.push_back(0);
  for (uint32_t cap = 0; cap < headers_end; ++cap) {
    Decoded d = dec(f, cap, uint32_t(f.size()));
    uint32_t expect = 0;
    for (uint32_t b : boundaries)
      if (b <= cap && b > expect) expect = b;
    INFO("cap " << cap << " of " << f.size() << ": status " << st(d.status) << " good_until " << d.good_until);
    CHECK(d.status == DecodeStatus::Truncated);
    CHECK(d.good_until == expect);
    CHECK(d.good_until <= cap);
  }
  Decoded d = dec(f, headers_end, uint32_t(f.size()));
  INFO("cap at the end of the headers: status " << st(d.status));
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.good_until == headers_end);
}

}  // namespace

TEST_CASE("IPv4/TCP with options on both layers", "[decode]") {
  V4 h;
  h.opt_words = 2;
  Bytes f = cat({eth(0x0800), ipv4(h, cat({tcp_hdr(40000, 443, 0x02, 3), payload(33)}))});
  Decoded d = dec(f);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.ip_version == 4);
  CHECK(d.has_ip());
  CHECK(d.ethertype == 0x0800);
  CHECK(d.l3_off == 14);
  CHECK(d.l3_hdr_len == 28);
  CHECK(d.l3_len == 28 + 32 + 33);
  CHECK(d.l4_proto == kProtoTcp);
  CHECK(d.l4_off == 42);
  CHECK(d.l4_hdr_len == 32);
  CHECK(d.sport == 40000);
  CHECK(d.dport == 443);
  CHECK(d.tcp_flags == 0x02);
  CHECK(d.payload_off == 74);
  CHECK(d.payload_len == 33);
  CHECK(d.good_until == 74);
  CHECK(d.flags == kFlagAddrBody);  // IPv4 options: the runtime's address-body step reads them
  CHECK(d.src_off() == 26);
  CHECK(d.dst_off() == 30);
}

TEST_CASE("IPv4/UDP and Ethernet padding", "[decode]") {
  V4 h;
  h.proto = 17;
  Bytes f = cat({eth(0x0800), ipv4(h, cat({udp_hdr(5353, 53, 8 + 4), payload(4)}))});
  f.resize(60, 0);  // minimum frame: 14 bytes of padding after the datagram
  Decoded d = dec(f);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.l4_proto == kProtoUdp);
  CHECK(d.sport == 5353);
  CHECK(d.dport == 53);
  CHECK(d.l4_hdr_len == 8);
  CHECK(d.payload_off == 42);
  CHECK(d.payload_len == 4);  // the IP length, not the padding
}

TEST_CASE("IPv4/UDP shorter than the IP payload keeps the trailing bytes as payload", "[decode]") {
  // tcpdump's dns-zlip captures: UDP length 8, IP payload longer. The bytes
  // after the UDP datagram are still ours to protect.
  V4 h;
  h.proto = 17;
  Bytes f = cat({eth(0x0800), ipv4(h, cat({udp_hdr(53, 53, 8), payload(30)}))});
  Decoded d = dec(f);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.payload_off == 42);
  CHECK(d.payload_len == 30);
}

TEST_CASE("ICMP echo and ICMP errors", "[decode]") {
  V4 h;
  h.proto = 1;
  Bytes echo = cat({eth(0x0800), ipv4(h, cat({icmp_hdr(8, 0, 0x4242), payload(16)}))});
  Decoded d = dec(echo);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.l4_proto == kProtoIcmp);
  CHECK(d.sport == (8 << 8));
  CHECK(d.dport == 0x4242);
  CHECK_FALSE(d.flags & kFlagIcmpError);
  CHECK(d.payload_off == 42);

  V4 inner;
  inner.proto = 17;
  Bytes quote = ipv4(inner, udp_hdr(1, 2, 8));
  Bytes unreach = cat({eth(0x0800), ipv4(h, cat({icmp_hdr(3, 3, 0, 0), quote}))});
  d = dec(unreach);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.sport == (3 << 8 | 3));
  CHECK(d.flags & kFlagIcmpError);

  V6 h6;
  h6.nh = 58;
  Bytes v6err = cat({eth(0x86dd), ipv6(h6, {}, 58, cat({icmp_hdr(3, 0, 0, 0), payload(48)}))});
  d = dec(v6err);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.l4_proto == kProtoIcmpv6);
  CHECK(d.flags & kFlagIcmpError);
  Bytes v6echo = cat({eth(0x86dd), ipv6(h6, {}, 58, cat({icmp_hdr(128, 0), payload(8)}))});
  CHECK_FALSE(dec(v6echo).flags & kFlagIcmpError);
}

TEST_CASE("802.1Q, QinQ (0x88a8 + 0x8100) and the old 0x9100 tag", "[decode]") {
  V4 h;
  h.proto = 17;
  Bytes ip = ipv4(h, cat({udp_hdr(1000, 53, 12), payload(4)}));
  Bytes one = cat({eth(0x0800, {{0x8100, 100}}), ip});
  Decoded d = dec(one);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.n_vlan == 1);
  CHECK(d.l3_off == 18);
  CHECK(d.ethertype == 0x0800);
  CHECK(d.payload_off == 18 + 28);

  Bytes qinq = cat({eth(0x0800, {{0x88a8, 10}, {0x8100, 20}}), ip});
  d = dec(qinq);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.n_vlan == 2);
  CHECK(d.l3_off == 22);
  CHECK(d.src_off() == 22 + 12);

  Bytes old = cat({eth(0x86dd, {{0x9100, 1}, {0x8100, 2}}), ipv6(V6{}, {}, 17, cat({udp_hdr(1, 2, 8)}))});
  d = dec(old);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.n_vlan == 2);
  CHECK(d.ip_version == 6);

  Bytes five = cat({eth(0x0800, {{0x8100, 1}, {0x8100, 2}, {0x8100, 3}, {0x8100, 4}, {0x8100, 5}}), ip});
  CHECK(dec(five).status == DecodeStatus::Malformed);  // a tag stack no network builds
}

TEST_CASE("MPLS label stacks", "[decode]") {
  V4 h;
  Bytes ip = ipv4(h, cat({tcp_hdr(1, 2)}));
  Bytes labels;
  put32(labels, (100u << 12) | 64);           // label 100, not bottom
  put32(labels, (200u << 12) | 0x100 | 64);  // bottom of stack
  Bytes f = cat({eth(0x8847), labels, ip});
  Decoded d = dec(f);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.n_mpls == 2);
  CHECK(d.l3_off == 22);
  CHECK(d.ip_version == 4);
  CHECK(d.l4_off == 42);

  Bytes v6f = cat({eth(0x8847, {{0x8100, 7}}), Bytes{0, 1, 0x01, 64}, ipv6(V6{}, {}, 17, udp_hdr(1, 2, 8))});
  d = dec(v6f);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.ip_version == 6);
  CHECK(d.n_vlan == 1);
  CHECK(d.n_mpls == 1);
  CHECK(d.l3_off == 22);

  // Ethernet pseudowire (first nibble 0): not IP.
  Bytes pw = cat({eth(0x8847), Bytes{0, 1, 0x01, 64}, Bytes{0, 0, 0, 0}, eth(0x0800), ip});
  d = dec(pw);
  CHECK(d.status == DecodeStatus::NotIp);
  CHECK_FALSE(d.has_ip());

  truncate_everywhere(f, {14, 22, 42}, 42 + 20);
}

TEST_CASE("PPPoE session over QinQ", "[decode]") {
  V4 h;
  h.proto = 17;
  Bytes ip = ipv4(h, cat({udp_hdr(1, 2, 8 + 5), payload(5)}));
  Bytes pppoe;
  put8(pppoe, 0x11), put8(pppoe, 0), put16(pppoe, 0x1234), put16(pppoe, unsigned(ip.size() + 2)), put16(pppoe, 0x0021);
  Bytes f = cat({eth(0x8864, {{0x88a8, 1}, {0x8100, 2}}), pppoe, ip});
  Decoded d = dec(f);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.pppoe_off == 22);
  CHECK(d.l3_off == 30);
  CHECK(d.ip_version == 4);
  CHECK(d.payload_off == 30 + 28);
  truncate_everywhere(f, {14, 18, 22, 30, 50}, 58);

  Bytes lcp = pppoe;
  lcp[6] = 0xc0, lcp[7] = 0x21;
  d = dec(cat({eth(0x8864), lcp, payload(20)}));
  CHECK(d.status == DecodeStatus::NotIp);
}

TEST_CASE("Non-IP frames", "[decode]") {
  Bytes arp = cat({eth(0x0806), payload(28)});
  Decoded d = dec(arp);
  CHECK(d.status == DecodeStatus::NotIp);
  CHECK_FALSE(d.has_ip());
  CHECK(d.ethertype == 0x0806);
  CHECK(d.l3_off == 14);
  Bytes lldp = cat({eth(0x88cc, {{0x8100, 3}}), payload(40)});
  d = dec(lldp);
  CHECK(d.status == DecodeStatus::NotIp);
  CHECK(d.l3_off == 18);
}

TEST_CASE("IPv6 with hop-by-hop, destination options, routing and fragment headers", "[decode]") {
  V6 h;
  h.nh = 0;
  Bytes ext = cat({v6ext(60, 1), v6ext(43, 2), v6ext(44, 3, /*routing type*/ 2), v6frag(6, 0, true)});
  Bytes l4 = cat({tcp_hdr(80, 5555, 0x10, 1), payload(10)});
  Bytes f = cat({eth(0x86dd), ipv6(h, ext, 6, l4)});
  Decoded d = dec(f);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.ip_version == 6);
  CHECK(d.l3_hdr_len == 40 + 8 + 16 + 24 + 8);
  CHECK(d.l4_proto == kProtoTcp);
  CHECK(d.l4_off == 14 + 96);
  CHECK(d.l4_hdr_len == 24);
  CHECK(d.payload_len == 10);
  CHECK(d.flags & kFlagFragment);
  CHECK_FALSE(d.flags & kFlagLaterFragment);
  // Mobile IPv6's type 2 holds the destination's home address: flagged, for the runtime to rewrite.
  CHECK(d.flags & kFlagV6Routing);
  CHECK(d.ipv6_rh_off == 14 + 40 + 8 + 16);
  CHECK(d.ipv6_hao_off == 0);
  CHECK(d.ipv6_frag_hdr_off == 14 + 40 + 8 + 16 + 24);
  // The extension chain is one step: good_until does not stop inside it.
  truncate_everywhere(f, {14, 14 + 96, 14 + 96 + 24}, 14 + 96 + 24);

  V6 r;
  r.nh = 43;
  Bytes t0 = cat({eth(0x86dd), ipv6(r, v6ext(17, 3, 0), 17, udp_hdr(1, 2, 8))});
  d = dec(t0);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.flags & kFlagV6Routing);
  CHECK(d.ipv6_rh_off == 54);
  Bytes srh = cat({eth(0x86dd), ipv6(r, v6ext(17, 3, 4), 17, udp_hdr(1, 2, 8))});
  CHECK(dec(srh).flags & kFlagV6Routing);
}

TEST_CASE("Mobile IPv6: the Home Address option, the Mobility Header as the upper layer", "[decode]") {
  const std::array<uint8_t, 16> home = v6("2001:db8:77::5");
  // Destination options: PadN to the option's 8n+6 alignment, the Home Address option.
  Bytes dopt = {6, 2, 1, 2, 0, 0, kOptHomeAddress, 16};
  dopt.insert(dopt.end(), home.begin(), home.end());
  V6 h;
  h.nh = 60;
  Bytes f = cat({eth(0x86dd), ipv6(h, dopt, 6, cat({tcp_hdr(1024, 80, 0x02, 1)}))});
  Decoded d = dec(f);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.l4_proto == kProtoTcp);
  CHECK(d.flags & kFlagV6Routing);
  CHECK(d.ipv6_rh_off == 0);
  REQUIRE(d.ipv6_hao_off == 14 + 40 + 8);
  CHECK(std::equal(home.begin(), home.end(), f.begin() + d.ipv6_hao_off));

  // A Home Address option of another length, a second one, options past their header: the packet is refused.
  Bytes bad = dopt;
  bad[7] = 8, bad[8 + 8] = 1, bad[8 + 9] = 6;  // 8 bytes, then a PadN of the rest
  CHECK(dec(cat({eth(0x86dd), ipv6(h, bad, 6, tcp_hdr(1024, 80, 0x02, 1))})).status == DecodeStatus::Malformed);
  Bytes two = {6, 5, 1, 2, 0, 0, kOptHomeAddress, 16};
  two.insert(two.end(), home.begin(), home.end());
  put(two, {1, 4, 0, 0, 0, 0, kOptHomeAddress, 16});
  two.insert(two.end(), home.begin(), home.end());
  CHECK(dec(cat({eth(0x86dd), ipv6(h, two, 6, tcp_hdr(1024, 80, 0x02, 1))})).status == DecodeStatus::Malformed);
  Bytes past = {6, 0, 1, 9, 0, 0, 0, 0};
  CHECK(dec(cat({eth(0x86dd), ipv6(h, past, 6, tcp_hdr(1024, 80, 0x02, 1))})).status == DecodeStatus::Malformed);

  // The Mobility Header ends the chain: the IP payload a plugin parses.
  V6 m;
  m.nh = kProtoMobility;
  const Bytes brr = {59, 0, 0, 0, 0, 0, 0, 0};
  d = dec(cat({eth(0x86dd), ipv6(m, {}, kProtoMobility, brr)}));
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.l4_proto == kProtoMobility);
  CHECK(d.l4_off == 14 + 40);
  CHECK(d.payload_off == 14 + 40);
  CHECK(d.payload_len == 8);
}

TEST_CASE("Later fragments carry no L4 header", "[decode]") {
  V4 h;
  h.proto = 17;
  h.frag = 0x2000 | 185;  // MF, offset 1480
  Bytes f = cat({eth(0x0800), ipv4(h, payload(100), false)});
  Decoded d = dec(f);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.flags & kFlagFragment);
  CHECK(d.flags & kFlagLaterFragment);
  CHECK_FALSE(d.has_l4_header());
  CHECK(d.payload_off == 34);
  CHECK(d.payload_len == 100);
  CHECK(d.good_until == 34);

  h.frag = 0x0000 | 10;  // last fragment
  CHECK(dec(cat({eth(0x0800), ipv4(h, payload(7), false)})).flags & kFlagLaterFragment);

  V6 h6;
  h6.nh = 0;
  Bytes ext = cat({v6ext(44, 1), v6frag(17, 185, false)});
  Bytes f6 = cat({eth(0x86dd), ipv6(h6, ext, 17, payload(64), false)});
  d = dec(f6);
  CHECK(d.status == DecodeStatus::Ok);
  CHECK(d.flags & kFlagLaterFragment);
  CHECK(d.l4_proto == kProtoUdp);
  CHECK_FALSE(d.has_l4_header());
  CHECK(d.payload_off == 14 + 40 + 16);
  CHECK(d.payload_len == 64);
}

TEST_CASE("First fragment of a UDP datagram: the UDP length covers the whole datagram", "[decode]") {
  // Seen in ipv4-fragments.pcap, dns-ipv6-fragmented.pcap: the first
  // fragment's UDP length is the reassembled length, larger than this
  // fragment. The header is complete and must be decoded (its checksum has
  // to follow any address rewrite), not called malformed.
  V4 h;
  h.proto = 17;
  h.frag = 0x2000;  // MF, offset 0
  Bytes f = cat({eth(0x0800), ipv4(h, cat({udp_hdr(2049, 789, 4000), payload(1472)}), false)});
  Decoded d = dec(f);
  CHECK(st(d.status) == std::string("Ok"));
  CHECK(d.flags & kFlagFragment);
  CHECK_FALSE(d.flags & kFlagLaterFragment);
  CHECK(d.l4_hdr_len == 8);
  CHECK(d.sport == 2049);

  V6 h6;
  h6.nh = 44;
  Bytes f6 = cat({eth(0x86dd), ipv6(h6, v6frag(17, 0, true), 17, cat({udp_hdr(53, 4000, 3000), payload(1000)}), false)});
  d = dec(f6);
  CHECK(st(d.status) == std::string("Ok"));
  CHECK(d.l4_hdr_len == 8);
}

TEST_CASE("Truncated at every header boundary", "[decode]") {
  SECTION("QinQ + IPv4 with options + TCP with options") {
    V4 h;
    h.opt_words = 1;
    Bytes f = cat({eth(0x0800, {{0x88a8, 1}, {0x8100, 2}}), ipv4(h, cat({tcp_hdr(1, 2, 0x10, 2), payload(20)}))});
    truncate_everywhere(f, {14, 18, 22, 46}, 46 + 28);
  }
  SECTION("IPv4 + UDP") {
    V4 h;
    h.proto = 17;
    Bytes f = cat({eth(0x0800), ipv4(h, cat({udp_hdr(1, 2, 18), payload(10)}))});
    truncate_everywhere(f, {14, 34}, 42);
  }
  SECTION("IPv6 + ICMPv6") {
    V6 h;
    h.nh = 58;
    Bytes f = cat({eth(0x86dd, {{0x8100, 9}}), ipv6(h, {}, 58, cat({icmp_hdr(128, 0), payload(10)}))});
    truncate_everywhere(f, {14, 18, 58}, 66);
  }
  SECTION("the wire length says more than was captured: still Truncated, not Malformed") {
    V4 h;
    Bytes f = cat({eth(0x0800), ipv4(h, cat({tcp_hdr(1, 2), payload(1000)}))});
    Decoded d = dec(f, 40, uint32_t(f.size()));
    CHECK(d.status == DecodeStatus::Truncated);
    CHECK(d.good_until == 34);
    d = dec(f, 68, uint32_t(f.size()));  // snaplen 68: headers whole, payload cut
    CHECK(d.status == DecodeStatus::Ok);
    CHECK(d.payload_len == 1000);
    CHECK(d.cap_len == 68);
    CHECK(d.wire_len == f.size());
  }
}

TEST_CASE("Malformed lengths", "[decode]") {
  V4 h;
  SECTION("IHL below 5") {
    h.ihl_words = 4;
    CHECK(dec(cat({eth(0x0800), ipv4(h, tcp_hdr(1, 2))})).status == DecodeStatus::Malformed);
  }
  SECTION("total length below the header length") {
    h.opt_words = 2;
    h.tot_len = 24;
    CHECK(dec(cat({eth(0x0800), ipv4(h, tcp_hdr(1, 2))})).status == DecodeStatus::Malformed);
  }
  SECTION("total length past the end of the frame") {
    h.tot_len = 1500;
    Decoded d = dec(cat({eth(0x0800), ipv4(h, tcp_hdr(1, 2))}));
    CHECK(d.status == DecodeStatus::Malformed);
    CHECK(d.ip_version == 4);
    // The header itself is whole (its addresses get anonymized and a cut
    // rewrites the total length), so it counts as decoded; the transport
    // header is located for checksum updates only.
    CHECK(d.good_until == 34);
    CHECK(d.l4_off == 34);
    CHECK(d.l4_hdr_len == 20);
  }
  SECTION("version nibble disagrees with the EtherType") {
    Bytes f = cat({eth(0x0800), ipv6(V6{}, {}, 17, udp_hdr(1, 2, 8))});
    CHECK(dec(f).status == DecodeStatus::Malformed);
  }
  SECTION("UDP length larger than the IP payload") {
    h.proto = 17;
    Decoded d = dec(cat({eth(0x0800), ipv4(h, cat({udp_hdr(1, 2, 100), payload(10)}))}));
    CHECK(d.status == DecodeStatus::Malformed);
    CHECK(d.good_until == 34);
  }
  SECTION("UDP length below its header") {
    h.proto = 17;
    CHECK(dec(cat({eth(0x0800), ipv4(h, cat({udp_hdr(1, 2, 7), payload(10)}))})).status == DecodeStatus::Malformed);
  }
  SECTION("TCP data offset below 5") {
    Bytes t = tcp_hdr(1, 2);
    t[12] = 0x40;
    CHECK(dec(cat({eth(0x0800), ipv4(h, t)})).status == DecodeStatus::Malformed);
  }
  SECTION("TCP header longer than the datagram") {
    Bytes t = tcp_hdr(1, 2);
    t[12] = 0xf0;  // 60 bytes claimed, 20 present, datagram ends
    CHECK(dec(cat({eth(0x0800), ipv4(h, t)})).status == DecodeStatus::Malformed);
  }
  SECTION("IPv6 extension header running past the payload length") {
    V6 h6;
    h6.nh = 0;
    h6.plen = 8;
    Bytes f = cat({eth(0x86dd), ipv6(h6, v6ext(17, 4), 17, udp_hdr(1, 2, 8), false)});
    CHECK(dec(f).status == DecodeStatus::Malformed);
  }
  SECTION("IPv6 payload length past the frame") {
    V6 h6;
    h6.plen = 2000;
    CHECK(dec(cat({eth(0x86dd), ipv6(h6, {}, 17, udp_hdr(1, 2, 8))})).status == DecodeStatus::Malformed);
  }
}

// The packet every tunnel below carries: TCP from a subscriber/tenant
// address to a server, with a few payload bytes.
Bytes inner4(bool reverse = false) {
  V4 h;
  h.src = v4("10.1.2.3"), h.dst = v4("203.0.113.9");
  if (reverse) std::swap(h.src, h.dst);
  return ipv4(h, cat({reverse ? tcp_hdr(443, 40000) : tcp_hdr(40000, 443), payload(30)}));
}
Bytes inner6() {
  V6 h;
  h.src = v6("2001::4136:e378:8000:63bf:3fff:fdd2"), h.dst = v6("2001:db8:5::1");
  return ipv6(h, {}, 6, cat({tcp_hdr(40001, 80), payload(12)}));
}
Bytes udp_in(uint16_t port, const Bytes& body, bool reverse = false) {
  V4 h;
  h.proto = 17;
  h.src = v4("172.16.0.1"), h.dst = v4("172.16.0.2");
  if (reverse) std::swap(h.src, h.dst);
  return ipv4(h, cat({udp_hdr(reverse ? port : 50000, reverse ? 50000 : port, uint16_t(8 + body.size())), body}));
}
Bytes gre_in(const Bytes& body, bool reverse = false) {
  V4 h;
  h.proto = 47;
  h.src = v4("172.16.0.1"), h.dst = v4("172.16.0.2");
  if (reverse) std::swap(h.src, h.dst);
  return ipv4(h, body);
}
TEST_CASE("Encapsulations are decoded through to the inner packet", "[decode][tunnel]") {
  const Bytes in = inner4();
  const Bytes in_eth = cat({eth(0x0800), in});
  struct Case {
    const char* name;
    Bytes frame;
    Encap kind;
    uint32_t id;
    bool inner_eth;
  };
  Bytes geneve_hdr;
  put8(geneve_hdr, 2), put8(geneve_hdr, 0), put16(geneve_hdr, 0x6558), put32(geneve_hdr, 0x00abcd00);
  put(geneve_hdr, payload(8));  // 8 bytes of options
  Bytes gpe_hdr;
  put32(gpe_hdr, 0x0c000001), put32(gpe_hdr, 77u << 8);
  Bytes gre_ks;  // key and sequence number
  put16(gre_ks, 0x3000), put16(gre_ks, 0x0800), put32(gre_ks, 0xdeadbeef), put32(gre_ks, 5);
  Bytes gre_csum;  // checksum present
  put16(gre_csum, 0x8000), put16(gre_csum, 0x0800), put32(gre_csum, 0);
  Bytes erspan2;
  put16(erspan2, 0x1000), put16(erspan2, 0x88be), put32(erspan2, 1);
  put16(erspan2, 0x1000 | 10), put16(erspan2, 0x0042), put32(erspan2, 0);
  Bytes erspan3;
  put16(erspan3, 0x1000), put16(erspan3, 0x22eb), put32(erspan3, 1);
  put16(erspan3, 0x2000), put16(erspan3, 0x0042), put32(erspan3, 12345), put16(erspan3, 0), put16(erspan3, 0x0001);
  put(erspan3, payload(8));  // platform subheader (O bit)
  Bytes erspan1;
  put16(erspan1, 0x0000), put16(erspan1, 0x88be);
  Bytes gre_teb;
  put16(gre_teb, 0x2000), put16(gre_teb, 0x6558), put32(gre_teb, 9);
  Bytes gre_mpls;
  put16(gre_mpls, 0), put16(gre_mpls, 0x8847), put32(gre_mpls, 100u << 12 | 1u << 8 | 64);
  Bytes teredo_oi;
  put16(teredo_oi, 0), put(teredo_oi, payload(6));
  // PPTP (GRE v1, key = payload length and call id, sequence and
  // acknowledgement numbers) carrying PPP: with address/control and a
  // two-byte protocol, and with both compressed away.
  auto pptp = [&](bool compressed) {
    Bytes h;
    const Bytes ppp = compressed ? Bytes{0x21} : Bytes{0xff, 0x03, 0x00, 0x21};
    put16(h, 0x3081), put16(h, 0x880b), put16(h, uint16_t(ppp.size() + in.size())), put16(h, 0x4242);
    put32(h, 7), put32(h, 6);
    return cat({h, ppp, in});
  };
  V4 ipip;
  ipip.proto = 4;
  V4 pim;  // a PIM Register (version 2, type 1), Null-Register bit clear: the multicast packet follows
  pim.proto = 103;
  const Bytes reg = {0x21, 0, 0, 0, 0, 0, 0, 0};
  V6 out6;
  out6.src = v6("2001:db8:ff::1"), out6.dst = v6("2001:db8:ff::2");
  std::vector<Case> cases = {
      {"gtp-u", cat({eth(0x0800), udp_in(2152, gtpu(0x01020304, in))}), Encap::GtpU, 0x01020304, false},
      {"gtp-u ext", cat({eth(0x0800), udp_in(2152, gtpu(7, in, true))}), Encap::GtpU, 7, false},
      {"vxlan", cat({eth(0x0800), udp_in(4789, vxlan(4242, in_eth))}), Encap::Vxlan, 4242, true},
      {"vxlan over vlan", cat({eth(0x0800, {{0x8100, 20}}), udp_in(4789, vxlan(1, in_eth))}), Encap::Vxlan, 1, true},
      {"vxlan-gpe ip", cat({eth(0x0800), udp_in(4790, cat({gpe_hdr, in}))}), Encap::VxlanGpe, 77, false},
      {"geneve options", cat({eth(0x0800), udp_in(6081, cat({geneve_hdr, in_eth}))}), Encap::Geneve, 0xabcd, true},
      {"gre key seq", cat({eth(0x0800), gre_in(cat({gre_ks, in}))}), Encap::Gre, 0xdeadbeef, false},
      {"gre checksum", cat({eth(0x0800), gre_in(cat({gre_csum, in}))}), Encap::Gre, 0, false},
      {"gre teb", cat({eth(0x0800), gre_in(cat({gre_teb, in_eth}))}), Encap::Gre, 9, true},
      {"gre mpls", cat({eth(0x0800), gre_in(cat({gre_mpls, in}))}), Encap::Gre, 0, false},
      {"pptp ppp", cat({eth(0x0800), gre_in(pptp(false))}), Encap::Gre, 0, false},
      {"pptp ppp compressed", cat({eth(0x0800), gre_in(pptp(true))}), Encap::Gre, 0, false},
      {"erspan I", cat({eth(0x0800), gre_in(cat({erspan1, in_eth}))}), Encap::Erspan, 0, true},
      {"erspan II", cat({eth(0x0800), gre_in(cat({erspan2, in_eth}))}), Encap::Erspan, 0, true},
      {"erspan III", cat({eth(0x0800), gre_in(cat({erspan3, in_eth}))}), Encap::Erspan, 0, true},
      {"ipv4 in ipv4", cat({eth(0x0800), ipv4(ipip, in)}), Encap::Ip, 0, false},
      {"ipv4 in ipv6", cat({eth(0x86dd), ipv6(out6, {}, 4, in)}), Encap::Ip, 0, false},
      {"pim register", cat({eth(0x0800), ipv4(pim, cat({reg, in}))}), Encap::PimRegister, 0, false},
      {"pppoe below", cat({eth(0x8864), Bytes{0x11, 0, 0, 1, uint8_t((udp_in(4789, vxlan(3, in_eth)).size() + 2) >> 8),
                                               uint8_t(udp_in(4789, vxlan(3, in_eth)).size() + 2), 0x00, 0x21},
                           udp_in(4789, vxlan(3, in_eth))}),
       Encap::Vxlan, 3, true},
  };
  for (auto& c : cases) {
    INFO(c.name);
    Decoded d = dec(c.frame);
    CHECK(d.status == DecodeStatus::Ok);
    CHECK(d.flags == kFlagEncap);
    REQUIRE(d.n_encap == 1);
    CHECK(d.encap[0].kind == c.kind);
    if (c.id) CHECK(d.encap[0].id == c.id);
    CHECK(d.ip_version == 4);
    CHECK(d.l3_off == c.frame.size() - in.size());
    CHECK(d.l4_proto == kProtoTcp);
    CHECK(d.sport == 40000);
    CHECK(d.dport == 443);
    CHECK(d.payload_len == 30);
    CHECK(d.good_until == d.payload_off);
    CHECK(d.tun_ctx != 0);
    CHECK((d.inner_eth_off != 0) == c.inner_eth);
    if (c.inner_eth) CHECK(d.inner_eth_off + 14 == d.l3_off);
    CHECK(std::string(encap_name(d.encap[0].kind)) != "none");
    // Every cut of the frame decodes without reading past it.
    for (uint32_t cap = 0; cap < c.frame.size(); ++cap) {
      Bytes cut(c.frame.begin(), c.frame.begin() + cap);
      Decoded t = dec(cut, cap, uint32_t(c.frame.size()));
      CHECK(t.good_until <= cap);
    }
  }

  SECTION("IPv6 inside: 6in4 and Teredo") {
    const Bytes i6 = inner6();
    V4 h;
    h.proto = 41;
    Decoded d = dec(cat({eth(0x0800), ipv4(h, i6)}));
    CHECK(d.flags == kFlagEncap);
    CHECK(d.ip_version == 6);
    CHECK(d.encap[0].kind == Encap::Ip);
    CHECK(d.sport == 40001);
    d = dec(cat({eth(0x0800), udp_in(3544, cat({teredo_oi, i6}))}));
    CHECK(d.flags == kFlagEncap);
    CHECK(d.encap[0].kind == Encap::Teredo);
    CHECK(d.ip_version == 6);
    CHECK(d.dport == 80);
    // Between two Teredo clients the peers use their NAT mappings, any
    // port: recognised by an IPv6 header naming a Teredo address, bubbles'
    // padding allowed.
    d = dec(cat({eth(0x0800), udp_in(49690, i6)}));
    CHECK(d.flags == kFlagEncap);
    CHECK(d.encap[0].kind == Encap::Teredo);
    CHECK(d.dport == 80);
    d = dec(cat({eth(0x0800), udp_in(55645, cat({i6, payload(12)}), true)}));
    CHECK(d.encap[0].kind == Encap::Teredo);
    // Not Teredo: no Teredo address, or an IPv6 header longer than the datagram.
    V6 o6;
    o6.src = v6("2001:db8::1"), o6.dst = v6("2001:db8:5::1");
    d = dec(cat({eth(0x0800), udp_in(49690, ipv6(o6, {}, 6, cat({tcp_hdr(40001, 80), payload(12)})))}));
    CHECK(d.flags == 0);
    CHECK(d.n_encap == 0);
    Bytes cut6(i6.begin(), i6.end() - 4);
    d = dec(cat({eth(0x0800), udp_in(49690, cut6)}));
    CHECK(d.n_encap == 0);
  }

  SECTION("PIM: a Register's packet over IPv6; a Null-Register, other messages and a Register of no packet") {
    V6 o6;
    o6.src = v6("2001:db8::1"), o6.dst = v6("2001:db8:5::1");
    Decoded d = dec(cat({eth(0x86dd), ipv6(o6, {}, 103, cat({reg, inner6()}))}));
    CHECK(d.flags == kFlagEncap);
    REQUIRE(d.n_encap == 1);
    CHECK(d.encap[0].kind == Encap::PimRegister);
    CHECK(d.encap[0].inner_off == 14 + 40 + 8);
    CHECK(d.ip_version == 6);
    CHECK(d.dport == 80);
    V4 h;
    h.proto = 103;
    Bytes null_reg = reg;
    null_reg[4] = 0x40;  // N: the dummy header is the PIM plugin's
    for (const Bytes& body : {cat({null_reg, in}), cat({Bytes{0x20, 0, 0, 0}, payload(20)}), reg}) {
      d = dec(cat({eth(0x0800), ipv4(h, body)}));
      CHECK(d.status == DecodeStatus::Ok);
      CHECK(d.flags == 0);
      CHECK(d.l4_proto == 103);
    }
    // Data that is no IP packet: a tunnel that cannot be decoded (opaque).
    d = dec(cat({eth(0x0800), ipv4(h, cat({reg, payload(24)}))}));
    CHECK(d.flags == kFlagTunnel);
    CHECK(d.n_encap == 0);
  }

  SECTION("AYIYA: forwarded packets decoded, heartbeats opaque, other datagrams on its port plain") {
    const Bytes i6 = inner6();
    // Identity of 2^4 bytes (an IPv6 address), a 5-word SHA-1 signature,
    // shared-secret authentication, opcode forward, next header IPv6.
    auto ayiya = [&](uint8_t op_auth, uint8_t nh, uint8_t idtype = 1) {
      Bytes h;
      put8(h, uint8_t(0x40 | idtype)), put8(h, 0x52), put8(h, op_auth), put8(h, nh), put32(h, 0x4af64bfd);
      put(h, Bytes(i6.begin() + 8, i6.begin() + 24));  // the sender's tunnel address
      put(h, payload(20));
      return h;
    };
    for (bool reverse : {false, true}) {  // to the PoP's port, and its answer from it
      const Bytes f = cat({eth(0x0800), udp_in(5072, cat({ayiya(0x11, 41), i6}), reverse)});
      Decoded d = dec(f);
      CHECK(d.flags == kFlagEncap);
      REQUIRE(d.n_encap == 1);
      CHECK(d.encap[0].kind == Encap::Ayiya);
      CHECK(d.encap[0].inner_off == 14 + 20 + 8 + 44);
      CHECK(d.ip_version == 6);
      CHECK(d.dport == 80);
      uint32_t at, n;
      REQUIRE(ayiya_identity(f.data(), uint32_t(f.size()), d.encap[0], at, n));
      CHECK(at == 14 + 20 + 8 + 8);
      CHECK(n == 16);
    }
    // A heartbeat (opcode nop, no next header) is AYIYA carrying no packet:
    // a tunnel left opaque.
    Decoded d = dec(cat({eth(0x0800), udp_in(5072, ayiya(0x10, 59))}));
    CHECK(d.flags == kFlagTunnel);
    CHECK(d.n_encap == 0);
    // Not AYIYA: an identity type, hash or opcode out of range, a next
    // header that is not what the packet is, a header beyond the datagram.
    const Bytes whole = ayiya(0x11, 41);
    for (const Bytes& b : {cat({ayiya(0x11, 41, 5), i6}), cat({ayiya(0x1c, 41), i6}), cat({ayiya(0x11, 4), i6}),
                           Bytes(whole.begin(), whole.begin() + 30)}) {
      d = dec(cat({eth(0x0800), udp_in(5072, b)}));
      CHECK(d.status == DecodeStatus::Ok);
      CHECK(d.flags == 0);
      CHECK(d.n_encap == 0);
    }
  }
  SECTION("both directions of an inner flow share the tunnel context; other tunnels do not") {
    // VXLAN goes to its port both ways (RFC 7348 5: the source port is the
    // sender's hash): the other direction only swaps the addresses.
    Bytes back = udp_in(4789, vxlan(4242, cat({eth(0x0800), inner4(true)})));
    for (int i = 0; i < 4; ++i) std::swap(back[12 + i], back[16 + i]);
    Decoded a = dec(cat({eth(0x0800), udp_in(4789, vxlan(4242, in_eth))}));
    Decoded b = dec(cat({eth(0x0800), back}));
    Decoded c = dec(cat({eth(0x0800), udp_in(4789, vxlan(4243, in_eth))}));
    CHECK(a.tun_ctx == b.tun_ctx);
    CHECK(a.tun_ctx != c.tun_ctx);
    // GTP-U: each direction of a bearer has its own TEID.
    Decoded u = dec(cat({eth(0x0800), udp_in(2152, gtpu(1, in))}));
    Decoded v = dec(cat({eth(0x0800), udp_in(2152, gtpu(2, inner4(true)), true)}));
    CHECK(u.tun_ctx == v.tun_ctx);
  }
  SECTION("nesting up to kMaxEncap; deeper stays opaque") {
    Bytes f = in;
    for (int depth = 1; depth <= kMaxEncap + 1; ++depth) {
      f = gre_in(cat({gre_ks, f}));
      Decoded d = dec(cat({eth(0x0800), f}));
      INFO("depth " << depth);
      CHECK(d.status == DecodeStatus::Ok);
      if (depth <= kMaxEncap) {
        CHECK(d.flags == kFlagEncap);
        CHECK(d.n_encap == depth);
        CHECK(d.sport == 40000);
      } else {
        CHECK(d.flags == (kFlagEncap | kFlagTunnel));
        CHECK(d.n_encap == kMaxEncap);
        CHECK(d.l4_proto == kProtoGre);
      }
    }
    // Mixed: GTP-U in GRE in VXLAN.
    Decoded d = dec(cat({eth(0x0800), udp_in(4789, vxlan(5, cat({eth(0x0800), gre_in(cat({gre_ks, udp_in(2152, gtpu(9, in))}))})))}));
    CHECK(d.flags == kFlagEncap);
    REQUIRE(d.n_encap == 3);
    CHECK(d.encap[0].kind == Encap::Vxlan);
    CHECK(d.encap[1].kind == Encap::Gre);
    CHECK(d.encap[2].kind == Encap::GtpU);
    CHECK(d.sport == 40000);
  }
  SECTION("what cannot be parsed stays opaque (kFlagTunnel)") {
    Bytes echo;  // GTP-U echo request: signalling, no user packet
    put8(echo, 0x32), put8(echo, 0x01), put16(echo, 4), put32(echo, 0), put32(echo, 0);
    Bytes gre_v1;  // PPTP's enhanced GRE carrying PPP's LCP (control, not a user packet)
    put16(gre_v1, 0x3001), put16(gre_v1, 0x880b), put16(gre_v1, 24), put16(gre_v1, 1), put32(gre_v1, 0);
    put16(gre_v1, 0xff03), put16(gre_v1, 0xc021);
    Bytes gre_unknown;
    put16(gre_unknown, 0), put16(gre_unknown, 0x1234);
    Bytes gpe_nsh;  // VXLAN-GPE carrying NSH (next protocol 4): a tunnel whose content is not decoded
    put32(gpe_nsh, 0x0c000004), put32(gpe_nsh, 9u << 8);
    for (const Bytes& f : {cat({eth(0x0800), udp_in(2152, echo)}), cat({eth(0x0800), gre_in(cat({gre_v1, payload(20)}))}),
                           cat({eth(0x0800), gre_in(cat({gre_unknown, payload(20)}))}),
                           cat({eth(0x0800), udp_in(4790, cat({gpe_nsh, payload(20)}))})}) {
      Decoded d = dec(f);
      CHECK(d.status == DecodeStatus::Ok);
      CHECK(d.flags == kFlagTunnel);
      CHECK(d.n_encap == 0);
    }
    // No tunnel header at all on the port: the plain UDP it is.
    for (const Bytes& f : {cat({eth(0x0800), udp_in(4789, payload(20))}), cat({eth(0x0800), udp_in(6081, payload(4))})})
      CHECK(dec(f).flags == 0);
    // A fragment of a tunnel datagram holds only part of the inner packet.
    V4 fr;
    fr.proto = 47;
    fr.frag = 0x2000;  // MF
    Decoded d = dec(cat({eth(0x0800), ipv4(fr, cat({gre_ks, in}))}));
    CHECK(d.flags == (kFlagTunnel | kFlagFragment));
    CHECK(d.n_encap == 0);
  }
  SECTION("an inner datagram longer than its carrier is malformed") {
    Bytes g = gtpu(1, in);
    g.resize(g.size() - 10);
    set16(&g[2], unsigned(g.size() - 8));
    Decoded d = dec(cat({eth(0x0800), udp_in(2152, g)}));
    CHECK(d.flags == kFlagEncap);
    CHECK(d.status == DecodeStatus::Malformed);
    CHECK(d.good_until <= d.l3_off + 20u);  // the header, as for a datagram arriving alone
  }
  SECTION("not a tunnel: UDP on another port") {
    Decoded d = dec(cat({eth(0x0800), udp_in(53, payload(20))}));
    CHECK(d.flags == 0);
  }
}

TEST_CASE("Frames shorter than an Ethernet header", "[decode]") {
  Bytes f = eth(0x0800);
  for (uint32_t cap = 0; cap < 14; ++cap) {
    Decoded d = dec(f, cap, 60);
    CHECK(d.status == DecodeStatus::Truncated);
    CHECK(d.good_until == 0);
    CHECK_FALSE(d.has_ip());
  }
}

// decode() takes a fast path for plain Ethernet/IPv4|IPv6/TCP|UDP frames and
// the full decoder for the rest; both must give the same Decoded, field by
// field, on every input: real captures, the same frames mutated and cut, and
// random frames built around the fast path's boundaries.
namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    s += 0x9e3779b97f4a7c15ULL;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return n ? uint32_t(next() % n) : 0; }
};

// Returns false (and counts) when the fast and the full decoder differ.
struct Compare {
  uint64_t frames = 0, differ = 0;
  std::string first;
  void operator()(const uint8_t* p, uint32_t cap, uint32_t wire, const char* what) {
    Decoded a, b;
    // Garbage in both first: every field must be written, not inherited.
    std::memset(static_cast<void*>(&a), 0x5a, sizeof a);
    std::memset(static_cast<void*>(&b), 0xa5, sizeof b);
    decode(p, cap, wire, a);
    decode_full(p, cap, wire, b);
    ++frames;
    if (a == b) return;
    if (!differ++) first = std::string(what) + " cap " + std::to_string(cap) + " wire " + std::to_string(wire);
  }
};

void mutate_and_cut(Compare& cmp, Rng& r, const std::vector<uint8_t>& f, const char* what) {
  const uint32_t n = uint32_t(f.size());
  cmp(f.data(), n, n, what);
  cmp(f.data(), n, n + 1 + r.below(64), what);  // snaplen-cut record
  if (n) cmp(f.data(), r.below(n), n, what);
  std::vector<uint8_t> m(f);
  static const uint8_t interesting[] = {0x00, 0x01, 0x06, 0x08, 0x11, 0x2c, 0x3a, 0x40, 0x45, 0x46, 0x4f,
                                        0x50, 0x60, 0x81, 0x86, 0xdd, 0xf0, 0xff};
  for (int k = 0; k < 8 && n; ++k) {
    m = f;
    for (int j = 0, e = 1 + int(r.below(3)); j < e; ++j) {
      uint32_t at = r.below(n < 80 ? n : 80);
      m[at] = r.below(2) ? interesting[r.below(sizeof interesting)] : uint8_t(r.next());
    }
    uint32_t cap = r.below(4) ? n : r.below(n + 1);
    cmp(m.data(), cap, n - r.below(3) + r.below(3), what);
  }
}

std::vector<std::vector<uint8_t>> read_pcap(const std::string& path) {
  std::vector<std::vector<uint8_t>> out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  std::vector<uint8_t> b;
  uint8_t buf[65536];
  for (size_t k; (k = std::fread(buf, 1, sizeof buf, f)) > 0;) b.insert(b.end(), buf, buf + k);
  std::fclose(f);
  if (b.size() < 24) return out;
  uint32_t magic;
  std::memcpy(&magic, b.data(), 4);
  const bool swap = magic == 0xd4c3b2a1 || magic == 0x4d3cb2a1;
  if (!swap && magic != 0xa1b2c3d4 && magic != 0xa1b23c4d) return out;  // not classic pcap
  auto rd = [&](size_t o) {
    uint32_t v;
    std::memcpy(&v, b.data() + o, 4);
    return swap ? __builtin_bswap32(v) : v;
  };
  for (size_t off = 24; off + 16 <= b.size();) {
    uint32_t cl = rd(off + 8);
    if (off + 16 + cl > b.size()) break;
    out.emplace_back(b.begin() + long(off + 16), b.begin() + long(off + 16 + cl));
    off += 16 + cl;
  }
  return out;
}

}  // namespace

namespace {
// An Ethernet frame (f, len bytes and 8 of slack) around the fast path's
// boundaries: 0 to 3 VLAN tags, IPv4 or IPv6, TCP, UDP, ICMP or another
// protocol, lengths right or a little off. o: where its IP header starts.
std::vector<uint8_t> random_frame(Rng& r, uint32_t& len, uint32_t& o) {
  const bool v6 = r.below(2);
  // 0 to 3 tags (the fast path takes up to two), of every tag type.
  static const uint16_t tags[] = {0x8100, 0x88a8, 0x9100};
  const uint32_t nv = r.below(3) ? 0 : r.below(4);
  o = 14 + 4 * nv;
  const uint32_t l4 = o + (v6 ? 40 : 20);
  static const uint8_t protos[] = {kProtoTcp, kProtoUdp, kProtoIcmp, kProtoIcmpv6};
  const uint8_t proto = r.below(8) ? protos[r.below(4)] : uint8_t(r.next());
  const uint32_t hl = proto == kProtoTcp ? 4 * r.below(16) : 8;
  const uint32_t pay = r.below(4) ? r.below(40) : r.below(1500);
  len = l4 + (hl < 20 ? 20 : hl) + pay;
  std::vector<uint8_t> f(len + 8);
  for (auto& x : f) x = uint8_t(r.next());
  for (uint32_t t = 0; t < nv; ++t) {
    const uint16_t et = tags[r.below(3)];
    f[12 + 4 * t] = uint8_t(et >> 8), f[13 + 4 * t] = uint8_t(et);
  }
  f[o - 2] = v6 ? 0x86 : 0x08;
  f[o - 1] = v6 ? 0xdd : 0x00;
  uint32_t l3 = len - o + (r.below(4) ? 0 : r.below(9)) - (r.below(4) ? 0 : r.below(9));
  if (v6) {
    f[o] = r.below(8) ? 0x60 : uint8_t(r.next());
    f[o + 4] = uint8_t((l3 - 40) >> 8), f[o + 5] = uint8_t(l3 - 40);
    f[o + 6] = proto;
  } else {
    f[o] = r.below(8) ? 0x45 : uint8_t(0x40 | r.below(16));
    f[o + 2] = uint8_t(l3 >> 8), f[o + 3] = uint8_t(l3);
    if (r.below(4)) f[o + 6] = uint8_t(f[o + 6] & (r.below(2) ? 0x40 : 0x80)), f[o + 7] = 0;  // DF, evil bit, or none
    f[o + 9] = proto;
  }
  if (proto == kProtoTcp) f[l4 + 12] = uint8_t(hl << 2 | (f[l4 + 12] & 0xf));
  if (proto == kProtoIcmp || proto == kProtoIcmpv6) {  // errors and queries of both kinds
    static const uint8_t types[] = {0, 3, 4, 5, 8, 11, 12, 1, 2, 127, 128, 129, 135};
    f[l4] = types[r.below(sizeof types)];
  }
  if (proto == kProtoUdp) {
    uint32_t ul = l3 - (l4 - o) + (r.below(4) ? 0 : r.below(9)) - (r.below(4) ? 0 : r.below(9));
    f[l4 + 4] = uint8_t(ul >> 8), f[l4 + 5] = uint8_t(ul);
    if (!r.below(8)) {  // a tunnel's port on either side
      static const uint16_t tun[] = {4789, 4790, 6081, 2152, 3544};
      const uint16_t t = tun[r.below(5)];
      const uint32_t at = l4 + 2 * r.below(2);
      f[at] = uint8_t(t >> 8), f[at + 1] = uint8_t(t);
    }
  }
  return f;
}
}  // namespace

TEST_CASE("Fast path equals the full decoder on random frames around its boundaries", "[decode]") {
  Compare cmp;
  Rng r{1};
  for (int i = 0; i < 400000; ++i) {
    uint32_t len, o;
    std::vector<uint8_t> f = random_frame(r, len, o);
    uint32_t cap = r.below(4) ? len : r.below(len + 9);
    uint32_t wire = r.below(4) ? cap : r.below(len + 9);
    cmp(f.data(), cap, wire, "random");
  }
  INFO("first difference: " << cmp.first);
  CHECK(cmp.differ == 0);
}

// The fast path for one GTP-U or VXLAN layer (decode_fast_tunnel): random
// inner frames in outer frames around its boundaries (tags, IPv4 options,
// either port, GTP-U extension headers and signalling, VXLAN without its
// I flag, outer lengths right or a little off).
TEST_CASE("Fast path equals the full decoder on random GTP-U and VXLAN frames", "[decode]") {
  Compare cmp;
  Rng r{3};
  uint64_t tunnelled_ok = 0;
  for (int i = 0; i < 200000; ++i) {
    uint32_t ilen, io;
    std::vector<uint8_t> in = random_frame(r, ilen, io);
    const bool gtp = r.below(2);
    std::vector<uint8_t> hdr;  // the tunnel header
    if (gtp) {
      const uint8_t fl = r.below(4) ? 0x30 : r.below(2) ? uint8_t(0x30 | (1u << r.below(3))) : uint8_t(r.next());
      hdr = {fl, uint8_t(r.below(8) ? 0xff : r.next()), 0, 0};
      for (int k = 0; k < 4; ++k) hdr.push_back(uint8_t(r.next()));  // TEID
      if (fl & 0x07) {
        const bool ext = (fl & 0x04) && r.below(2);
        hdr.insert(hdr.end(), {uint8_t(r.next()), uint8_t(r.next()), uint8_t(r.next()), uint8_t(ext ? 0x85 : 0)});
        if (ext) hdr.insert(hdr.end(), {1, uint8_t(r.next()), uint8_t(r.next()), uint8_t(r.below(4) ? 0 : r.next())});
      }
    } else {
      hdr = {uint8_t(r.below(8) ? 0x08 : r.next()), 0, 0, 0, uint8_t(r.next()), uint8_t(r.next()),
             uint8_t(r.next()), 0};
    }
    // GTP-U carries the inner IP datagram, VXLAN the whole inner frame.
    const uint32_t from = gtp && r.below(8) ? io : 0;
    const std::vector<uint8_t> payload(in.begin() + from, in.begin() + ilen);
    if (gtp) {
      const uint32_t gl = uint32_t(hdr.size() - 8 + payload.size()) + (r.below(4) ? 0 : r.below(5)) -
                          (r.below(4) ? 0 : r.below(5));
      hdr[2] = uint8_t(gl >> 8), hdr[3] = uint8_t(gl);
    }
    const bool v6 = r.below(3) == 0;
    const uint32_t nv = r.below(3) ? 0 : r.below(4);
    const uint32_t ihl = v6 ? 40 : (r.below(8) ? 20 : 24);
    const uint32_t o = 14 + 4 * nv, l4 = o + ihl;
    std::vector<uint8_t> f(l4 + 8);
    for (auto& x : f) x = uint8_t(r.next());
    for (uint32_t t = 0; t < nv; ++t) f[12 + 4 * t] = 0x81, f[13 + 4 * t] = 0x00;
    f[o - 2] = v6 ? 0x86 : 0x08;
    f[o - 1] = v6 ? 0xdd : 0x00;
    f.insert(f.end(), hdr.begin(), hdr.end());
    f.insert(f.end(), payload.begin(), payload.end());
    const uint32_t len = uint32_t(f.size());
    const uint32_t l3 = len - o + (r.below(4) ? 0 : r.below(5)) - (r.below(4) ? 0 : r.below(5));
    if (v6) {
      f[o] = 0x60;
      f[o + 4] = uint8_t((l3 - 40) >> 8), f[o + 5] = uint8_t(l3 - 40);
      f[o + 6] = kProtoUdp;
    } else {
      f[o] = uint8_t(0x40 | ihl / 4);
      f[o + 2] = uint8_t(l3 >> 8), f[o + 3] = uint8_t(l3);
      f[o + 6] = r.below(8) ? 0x40 : uint8_t(r.next()), f[o + 7] = r.below(8) ? 0 : uint8_t(r.next());
      f[o + 9] = kProtoUdp;
    }
    const uint32_t ul = len - l4 + (r.below(4) ? 0 : r.below(5)) - (r.below(4) ? 0 : r.below(5));
    f[l4 + 4] = uint8_t(ul >> 8), f[l4 + 5] = uint8_t(ul);
    static const uint16_t other[] = {4789, 2152, 4790, 6081, 53, 3544};
    const uint16_t port = gtp ? 2152 : 4789, peer = r.below(2) ? uint16_t(r.next()) : other[r.below(6)];
    const bool src = r.below(2);
    f[l4 + (src ? 0 : 2)] = uint8_t(port >> 8), f[l4 + (src ? 1 : 3)] = uint8_t(port);
    f[l4 + (src ? 2 : 0)] = uint8_t(peer >> 8), f[l4 + (src ? 3 : 1)] = uint8_t(peer);
    f.resize(len + 8);
    const uint32_t cap = r.below(4) ? len : r.below(len + 9);
    const uint32_t wire = r.below(4) ? cap : r.below(len + 9);
    cmp(f.data(), cap, wire, gtp ? "gtp-u" : "vxlan");
    Decoded d;
    decode(f.data(), cap, wire, d);
    tunnelled_ok += d.n_encap == 1 && d.status == DecodeStatus::Ok;
  }
  INFO("first difference: " << cmp.first);
  CHECK(cmp.differ == 0);
  // The frames exercise the tunnel itself, not only its rejection.
  CHECK(tunnelled_ok > 20000);
}

// A GTP-U packet whose inner UDP datagram is peer-to-peer Teredo (any
// port, recognised by content): it nests, so the one-layer fast path
// leaves it to the full decoder.
TEST_CASE("Fast path leaves an inner peer-to-peer Teredo datagram to the full decoder", "[decode]") {
  V6 t;
  t.src = v6("2001:0:4136:e378:8000:63bf:3fff:fdd2"), t.dst = v6("2001:db8::9");
  const Bytes in6 = ipv6(t, {}, 17, cat({udp_hdr(5000, 53, 8 + 12), payload(12)}));
  Bytes udp = udp_hdr(40000, 40001, uint16_t(8 + in6.size()));
  put(udp, in6);
  V4 in;
  in.proto = 17;
  const Bytes g = gtpu(9, ipv4(in, udp));
  Bytes outer_udp = udp_hdr(2152, 2152, uint16_t(8 + g.size()));
  put(outer_udp, g);
  V4 out;
  out.proto = 17;
  const Bytes f = cat({eth(0x0800), ipv4(out, outer_udp, false)});
  Decoded a, b;
  decode(f.data(), uint32_t(f.size()), uint32_t(f.size()), a);
  decode_full(f.data(), uint32_t(f.size()), uint32_t(f.size()), b);
  CHECK(a == b);
  CHECK(b.n_encap == 2);
  CHECK(b.encap[1].kind == Encap::Teredo);
}

#ifdef AMON_PCAPS_DIR
TEST_CASE("Fast path equals the full decoder on every shared capture, mutated and cut", "[decode]") {
  Compare cmp;
  Rng r{2};
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(AMON_PCAPS_DIR)) {
    if (e.path().extension() != ".pcap") continue;
    ++files;
    for (const auto& f : read_pcap(e.path().string())) mutate_and_cut(cmp, r, f, e.path().filename().c_str());
  }
  if (files == 0) WARN("no captures in " AMON_PCAPS_DIR);
  INFO("files " << files << ", frames " << cmp.frames << ", first difference: " << cmp.first);
  CHECK(cmp.differ == 0);
}
#endif

// Windows and NAT gateways use the tunnels' ports as ephemeral ports: a DNS
// query, a QUIC Initial or any other datagram from one of them, and the
// answer to it, are the UDP they are. VXLAN, VXLAN-GPE and Geneve are known
// by their destination port, GTP-U, Teredo and AYIYA by either, and each only
// when the datagram holds its header.
TEST_CASE("Plain UDP from or to a tunnel's port stays plain UDP", "[decode]") {
  Bytes query;  // a DNS query for www.example.com, A; its ID reads as GTP-U flags and a G-PDU, and as VXLAN's I flag
  put16(query, 0x3aff), put16(query, 0x0100), put16(query, 1), put16(query, 0), put16(query, 0), put16(query, 0);
  for (std::string l : {"www", "example", "com"}) {
    put8(query, uint8_t(l.size()));
    for (char ch : l) put8(query, uint8_t(ch));
  }
  put8(query, 0), put16(query, 1), put16(query, 1);
  Bytes answer = query;  // NXDOMAIN: no records, so the bytes VXLAN reserves are zero
  answer[2] = 0x81, answer[3] = 0x83;
  Bytes quic;  // the start of a QUIC v1 Initial, padded as clients pad it
  put8(quic, 0xc3), put32(quic, 1), put8(quic, 8);
  for (int i = 0; i < 8; ++i) put8(quic, uint8_t(0x11 * i));
  quic = cat({quic, Bytes{0, 0}, payload(1180)});
  const Bytes other = payload(64);
  struct Case {
    const char* what;
    const Bytes& body;
    uint16_t server;
  };
  int n = 0;
  for (uint16_t port : {4789, 4790, 6081, 2152, 3544, 5072})
    for (const Case& c : {Case{"dns query", query, 53}, Case{"dns answer", answer, 53}, Case{"quic", quic, 443},
                          Case{"other", other, 5000}})
      for (bool from_port : {true, false})
        for (bool v6 : {false, true}) {
          const uint16_t sp = from_port ? port : c.server, dp = from_port ? c.server : port;
          const Bytes udp = cat({udp_hdr(sp, dp, uint16_t(8 + c.body.size())), c.body});
          Bytes f;
          if (v6) {
            V6 h;
            f = cat({eth(0x86dd), ipv6(h, {}, 17, udp)});
          } else {
            V4 h;
            h.proto = 17;
            f = cat({eth(0x0800), ipv4(h, udp)});
          }
          INFO(c.what << (from_port ? " from port " : " to port ") << port << (v6 ? " over IPv6" : ""));
          const Decoded d = dec(f);
          CHECK(d.status == DecodeStatus::Ok);
          CHECK(d.flags == 0);
          CHECK(d.n_encap == 0);
          CHECK(d.sport == sp);
          CHECK(d.dport == dp);
          CHECK(d.payload_len == c.body.size());
          Decoded full;
          decode_full(f.data(), uint32_t(f.size()), uint32_t(f.size()), full);
          CHECK(full == d);
          ++n;
        }
  CHECK(n == 96);
  // The tunnels themselves: to the port (and GTP-U from it too).
  Bytes in = cat({eth(0x0800), inner4(false)});
  CHECK(dec(cat({eth(0x0800), udp_in(4789, vxlan(7, in))})).n_encap == 1);
  CHECK(dec(cat({eth(0x0800), udp_in(4789, vxlan(7, in), true)})).n_encap == 0);  // from 4789: not VXLAN
  CHECK(dec(cat({eth(0x0800), udp_in(2152, gtpu(7, inner4(false)), true)})).n_encap == 1);
}

TEST_CASE("an MPTCP ADD_ADDR in a tunnelled TCP header is flagged on the fast and the full way alike") {
  // ADD_ADDR v1, IPv4, address 10.1.2.3, 8-byte HMAC, then four NOPs: 20 option bytes.
  Bytes tcp = tcp_hdr(40000, 443, 0x10, 5);
  const Bytes opt = {30, 16, 0x30, 1, 10, 1, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8, 1, 1, 1, 1};
  std::copy(opt.begin(), opt.end(), tcp.begin() + 20);
  V4 h;
  h.src = v4("10.1.2.3"), h.dst = v4("203.0.113.9");
  const Bytes in = ipv4(h, tcp);
  for (const Bytes& f : {cat({eth(0x0800), in}), cat({eth(0x0800), udp_in(2152, gtpu(7, in))}),
                         cat({eth(0x0800), udp_in(4789, vxlan(7, cat({eth(0x0800), in})))})}) {
    const Decoded d = dec(f);
    Decoded full;
    decode_full(f.data(), uint32_t(f.size()), uint32_t(f.size()), full);
    CHECK(d.status == DecodeStatus::Ok);
    CHECK((d.flags & kFlagAddrBody) != 0);
    CHECK(full == d);
  }
}
