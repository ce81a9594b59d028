// Fragmented outer tunnel datagrams on the worker path, on DPDK mbufs: a
// GTP-U datagram cut in fragments comes out as the same fragments with the
// inner client anonymized; one that cannot be made whole (overlap, a
// missing fragment at the timeout or the end, too many pieces) fails closed
// and is counted; a consumer that changes nothing gets every fragment as it
// comes.
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "flow_table.h"
#include "eal_env.h"
#include "frames.h"
#include "mbuf_meta.h"
#include "policy.h"
#include "registry.h"
#include "worker_path.h"

using namespace amon;
using namespace amon_test;

namespace {

struct Env {
  rte_mempool* pool = nullptr;
  SharedServices svc;
  Env() { pool = start_eal("test_outer_frag", 2047); }
};

Env& env() {
  static Env e;
  return e;
}

std::unique_ptr<Program> program(const std::string& text) {
  dsl::Diagnostics d;
  auto pol = dsl::compile_string(text, "frag.amon", d);
  INFO(d.render_text());
  REQUIRE(pol);
  return std::make_unique<Program>(pol, 0, &env().svc);
}

struct Out {
  unsigned consumer;
  Bytes bytes;
};
struct Run {
  std::vector<Out> out;
  static void sink(void* ctx, unsigned c, rte_mbuf* m) {
    const uint8_t* p = rte_pktmbuf_mtod(m, const uint8_t*);
    static_cast<Run*>(ctx)->out.push_back({c, Bytes(p, p + rte_pktmbuf_data_len(m))});
    rte_pktmbuf_free(m);
  }
  void send(WorkerPath& path, const Bytes& frame, uint64_t ts) {
    rte_mbuf* m = rte_pktmbuf_alloc(env().pool);
    REQUIRE(m);
    std::memcpy(rte_pktmbuf_append(m, uint16_t(frame.size())), frame.data(), frame.size());
    mbuf_set_ts(m, ts);
    mbuf_set_wire_len(m, uint32_t(frame.size()));
    mbuf_set_seq(m, 0);  // a recycled mbuf's number (and what it says of initiators) is gone, as in the engine
    path.process_burst(&m, 1, sink, this);
  }
  std::vector<Bytes> of(unsigned c) const {
    std::vector<Bytes> v;
    for (auto& o : out)
      if (o.consumer == c) v.push_back(o.bytes);
    return v;
  }
};

// A GTP-U datagram between two tunnel endpoints carrying a TCP packet from
// client 10.1.2.3 with `n` payload bytes, as one unfragmented frame.
Bytes gtp_datagram(size_t n, uint32_t teid = 7) {
  V4 in;
  in.src = v4("10.1.2.3"), in.dst = v4("203.0.113.9");
  Bytes tcp = tcp_hdr(40000, 80, 0x10);
  put(tcp, payload(n, 3));
  const Bytes inner = ipv4(in, tcp);
  const Bytes g = gtpu(teid, inner);
  Bytes udp = udp_hdr(2152, 2152, uint16_t(8 + g.size()));
  put(udp, g);
  V4 out;
  out.src = v4("100.64.0.1"), out.dst = v4("100.127.0.1"), out.proto = 17, out.frag = 0;
  return cat({eth(0x0800), ipv4(out, udp, false)});
}

// The datagram's IPv4 data cut at the given offsets (multiples of 8), each
// piece a frame of its own with identification `id`.
std::vector<Bytes> fragments(const Bytes& whole, std::vector<size_t> cuts, uint16_t id = 0x4242) {
  const uint8_t* ip = whole.data() + 14;
  const size_t total = get16(ip + 2) - 20;
  cuts.push_back(total);
  std::vector<Bytes> out;
  size_t at = 0;
  for (size_t c : cuts) {
    Bytes f(whole.begin(), whole.begin() + 34);
    f.insert(f.end(), whole.begin() + 34 + at, whole.begin() + 34 + c);
    uint8_t* h = f.data() + 14;
    set16(h + 2, unsigned(20 + c - at));
    set16(h + 4, id);
    set16(h + 6, unsigned((c < total ? 0x2000 : 0) | at / 8));
    set16(h + 10, 0);
    set16(h + 10, ref_ipv4_hdr_checksum(h, 20));
    out.push_back(f);
    at = c;
  }
  return out;
}

// The same GTP-U datagram over IPv6, cut at `cuts` (multiples of 8): each
// fragment repeats the unfragmentable part, here a hop-by-hop and a
// destination options header before the fragment header (RFC 8200 4.5).
std::vector<Bytes> v6_fragments(size_t n, std::vector<size_t> cuts, uint32_t id = 0x4243) {
  V4 in;
  in.src = v4("10.1.2.3"), in.dst = v4("203.0.113.9");
  Bytes tcp = tcp_hdr(40000, 80, 0x10);
  put(tcp, payload(n, 3));
  const Bytes g = gtpu(7, ipv4(in, tcp));
  Bytes udp = udp_hdr(2152, 2152, uint16_t(8 + g.size()));  // checksum 0 (RFC 6935)
  put(udp, g);
  cuts.push_back(udp.size());
  std::vector<Bytes> out;
  size_t at = 0;
  for (size_t c : cuts) {
    V6 h;
    h.src = v6("2001:db8:a::1"), h.dst = v6("2001:db8:b::1"), h.nh = 0;
    const Bytes ext = cat({v6ext(60, 1), v6ext(44, 1), v6frag(17, uint16_t(at / 8), c < udp.size(), id)});
    const Bytes data(udp.begin() + long(at), udp.begin() + long(c));
    out.push_back(cat({eth(0x86dd), ipv6(h, ext, 17, data, false)}));
    at = c;
  }
  return out;
}

bool has(const Bytes& f, const std::array<uint8_t, 4>& a) {
  return std::search(f.begin(), f.end(), a.begin(), a.end()) != f.end();
}

const char* kPolicy = "clients = { 10.0.0.0/8 }\nip.client : prefix(8)\nip.server : keep()\n";

}  // namespace

TEST_CASE("outer fragments: made whole, anonymized, sent as the same fragments") {
  std::vector<std::unique_ptr<Program>> progs;
  progs.push_back(program(kPolicy));
  progs.push_back(program("ip.src, ip.dst : keep()\n"));
  WorkerPath path(progs, env().pool, std::make_unique<FlowTable>("frag_flows1", 1024, FlowTimeouts{}, 0));
  Run r;
  const Bytes whole = gtp_datagram(900);
  const auto fr = fragments(whole, {400, 800});
  REQUIRE(fr.size() == 3);
  uint64_t t = 1000000000ULL;
  r.send(path, fr[0], t += 1000);
  r.send(path, fr[1], t += 1000);
  // The consumer that changes nothing had each fragment as it came; the
  // rewriting one has nothing before the datagram is whole.
  CHECK(r.of(1) == std::vector<Bytes>{fr[0], fr[1]});
  CHECK(r.of(0).empty());
  CHECK(path.held_segments() == 2);
  r.send(path, fr[2], t += 1000);
  CHECK(path.held_segments() == 0);
  CHECK(r.of(1) == fr);
  const auto out = r.of(0);
  REQUIRE(out.size() == 3);
  const auto client = v4("10.1.2.3");
  for (size_t i = 0; i < 3; ++i) {
    INFO("fragment " << i);
    REQUIRE(out[i].size() == fr[i].size());
    const uint8_t* a = fr[i].data() + 14;
    const uint8_t* b = out[i].data() + 14;
    CHECK(std::memcmp(a, b, 10) == 0);  // version .. protocol: lengths, identification, fragment field
    CHECK(get16(b + 10) == ref_ipv4_hdr_checksum(b, 20));
    CHECK(std::memcmp(a + 12, b + 12, 8) == 0);  // the tunnel endpoints: ip.server's keep
    CHECK_FALSE(has(out[i], client));
  }
  // The first fragment carries the inner header: the client became 10.0.0.0.
  const uint8_t* inner = out[0].data() + 14 + 20 + 8 + 8;
  CHECK(str4(inner + 12) == "10.0.0.0");
  const auto& st = path.outer_frag_stats();
  CHECK(st.datagrams == 1);
  CHECK(st.fragments == 3);
  CHECK(st.failed == 0);
  const auto& c = path.counters();
  CHECK(c[0].in == 3);
  CHECK(c[0].out == 3);
  CHECK(c[1].in == 3);
  CHECK(c[1].out == 3);
}

TEST_CASE("outer fragments: IPv6 with extension headers before the fragment header") {
  std::vector<std::unique_ptr<Program>> progs;
  progs.push_back(program(kPolicy));
  progs.push_back(program("ip.src, ip.dst : keep()\n"));
  WorkerPath path(progs, env().pool, std::make_unique<FlowTable>("frag_flows3", 1024, FlowTimeouts{}, 0));
  Run r;
  const auto fr = v6_fragments(900, {400, 800});
  REQUIRE(fr.size() == 3);
  uint64_t t = 1000000000ULL;
  for (const Bytes& f : fr) r.send(path, f, t += 1000);
  CHECK(path.held_segments() == 0);
  CHECK(r.of(1) == fr);
  const auto out = r.of(0);
  REQUIRE(out.size() == 3);
  const auto client = v4("10.1.2.3");
  constexpr size_t kIp = 14, kData = 14 + 40 + 8 + 8 + 8;  // fixed header, hop-by-hop, destination options, fragment
  for (size_t i = 0; i < 3; ++i) {
    INFO("fragment " << i);
    REQUIRE(out[i].size() == fr[i].size());
    // The fixed header (lengths, the tunnel endpoints: ip.server's keep), the
    // extension headers and the fragment header as they came.
    CHECK(std::memcmp(out[i].data() + kIp, fr[i].data() + kIp, kData - kIp) == 0);
    CHECK_FALSE(has(out[i], client));
  }
  // The first fragment carries the inner header: the client became 10.0.0.0.
  CHECK(str4(out[0].data() + kData + 8 + 8 + 12) == "10.0.0.0");
  const auto& st = path.outer_frag_stats();
  CHECK(st.datagrams == 1);
  CHECK(st.fragments == 3);
  CHECK(st.failed == 0);
  const auto& c = path.counters();
  CHECK(c[0].out == 3);
  CHECK(c[0].dropped == 0);
}

TEST_CASE("outer fragments: what cannot be made whole fails closed and is counted") {
  std::vector<std::unique_ptr<Program>> progs;
  progs.push_back(program(kPolicy));
  WorkerPath path(progs, env().pool, std::make_unique<FlowTable>("frag_flows2", 1024, FlowTimeouts{}, 0));
  Run r;
  const auto client = v4("10.1.2.3");
  uint64_t t = 1000000000ULL;
  auto check_closed = [&](size_t sent) {
    // Every fragment left through the per-fragment path: dropped (a tunnel
    // fragment's data cannot be located), none with the client in clear.
    const auto& c = path.counters()[0];
    CHECK(c.in == c.out + c.dropped);
    CHECK(c.in == sent);
    for (const Bytes& o : r.of(0)) CHECK_FALSE(has(o, client));
    CHECK(path.held_segments() == 0);
  };
  size_t sent = 0;

  SECTION("overlapping fragments") {
    auto a = fragments(gtp_datagram(900), {400, 800}, 1);
    auto b = fragments(gtp_datagram(900), {200, 800}, 1);
    b[1][14 + 20 + 10] ^= 0xff;  // data 200..800 overlaps 0..400, with other bytes
    r.send(path, a[0], t += 1000);
    r.send(path, b[1], t += 1000);
    sent = 2;
    CHECK(path.outer_frag_stats().failed == 1);
    CHECK(path.outer_frag_stats().overlap == 1);
    check_closed(sent);
  }
  SECTION("fragments given twice with the same bytes are kept, each as it came") {
    auto a = fragments(gtp_datagram(900), {400, 800}, 5);
    auto b = fragments(gtp_datagram(900), {200, 800}, 5);
    for (const Bytes& f : {a[0], a[0], b[1], a[1], a[2], a[2]}) r.send(path, f, t += 1000);
    CHECK(path.outer_frag_stats().failed == 0);
    CHECK(path.outer_frag_stats().datagrams == 1);
    // The last one came after the datagram was made whole: it leaves as its twin.
    const auto& c = path.counters()[0];
    CHECK(c.in == 6);
    CHECK(c.out == 6);
    const auto out = r.of(0);
    REQUIRE(out.size() == 6);
    CHECK(out[4] == out[5]);
    CHECK(out[0] == out[1]);
    for (const Bytes& o : out) CHECK_FALSE(has(o, client));
    CHECK(path.held_segments() == 0);
    sent = 6;
  }
  SECTION("a missing fragment at the timeout, by packet time") {
    auto a = fragments(gtp_datagram(900), {400, 800}, 2);
    r.send(path, a[0], t += 1000);
    r.send(path, a[2], t += 1000);
    CHECK(path.held_segments() == 2);
    // A packet 2 s later: the datagram is given up before it is processed.
    r.send(path, gtp_datagram(10), t += 2000000000ULL);
    sent = 3;
    CHECK(path.outer_frag_stats().failed == 1);
    check_closed(sent);
  }
  SECTION("a missing fragment at the end of input") {
    auto a = fragments(gtp_datagram(900), {400}, 3);
    r.send(path, a[0], t += 1000);
    path.flush_held(Run::sink, &r);
    sent = 1;
    CHECK(path.outer_frag_stats().failed == 1);
    check_closed(sent);
  }
  SECTION("more pieces than a datagram may have") {
    std::vector<size_t> cuts;
    for (size_t at = 8; at < 8 * 70; at += 8) cuts.push_back(at);
    auto a = fragments(gtp_datagram(900), cuts, 4);
    for (const Bytes& f : a) {
      r.send(path, f, t += 1000);
      ++sent;
    }
    CHECK(path.outer_frag_stats().failed >= 1);
    CHECK(path.outer_frag_stats().datagrams == 0);
    path.flush_held(Run::sink, &r);
    check_closed(sent);
  }
}
