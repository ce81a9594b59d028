// The L2-L4 decoder on crafted frames: every layer it knows, every way a
// frame can end early, and the lengths that cannot be.
#include <catch2/catch.hpp>

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
  CHECK(d.flags == 0);
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
  CHECK_FALSE(d.flags & kFlagV6Routing);  // type 2 (mobility) carries the home address only
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

TEST_CASE("Tunnels are flagged", "[decode]") {
  V4 h;
  h.proto = 47;
  CHECK(dec(cat({eth(0x0800), ipv4(h, payload(40))})).flags & kFlagTunnel);
  h.proto = 41;
  CHECK(dec(cat({eth(0x0800), ipv4(h, payload(40))})).flags & kFlagTunnel);
  h.proto = 17;
  for (uint16_t port : {4789, 6081, 2152, 3544}) {
    Decoded d = dec(cat({eth(0x0800), ipv4(h, cat({udp_hdr(50000, port, 8 + 20), payload(20)}))}));
    INFO("port " << port);
    CHECK(d.flags & kFlagTunnel);
    CHECK(d.status == DecodeStatus::Ok);
  }
  CHECK_FALSE(dec(cat({eth(0x0800), ipv4(h, cat({udp_hdr(50000, 53, 8 + 20), payload(20)}))})).flags & kFlagTunnel);
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
