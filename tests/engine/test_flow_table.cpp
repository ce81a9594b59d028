// The per-worker flow table on crafted frames: one entry for both
// directions, roles, fragments, timeouts, eviction and bounded size. The
// table needs no EAL (its memory is plain anonymous memory).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <random>
#include <set>

#include "flow_table.h"
#include "frames.h"

using namespace amon;
using namespace amon_test;

namespace {

struct Pkt {
  Bytes b;
  Decoded d;
};

Pkt tcp4(const char* src, const char* dst, uint16_t sp, uint16_t dp, uint8_t flags = 0x10) {
  V4 h;
  h.src = v4(src), h.dst = v4(dst);
  Pkt p{cat({eth(0x0800), ipv4(h, tcp_hdr(sp, dp, flags))}), {}};
  decode(p.b.data(), uint32_t(p.b.size()), uint32_t(p.b.size()), p.d);
  return p;
}

Pkt udp4(uint32_t src, uint32_t dst, uint16_t sp, uint16_t dp, uint16_t frag = 0x4000) {
  V4 h;
  for (int i = 0; i < 4; ++i) h.src[i] = uint8_t(src >> (24 - 8 * i)), h.dst[i] = uint8_t(dst >> (24 - 8 * i));
  h.proto = 17;
  h.frag = frag;
  Pkt p{cat({eth(0x0800), ipv4(h, cat({udp_hdr(sp, dp, 16), payload(8)}))}), {}};
  decode(p.b.data(), uint32_t(p.b.size()), uint32_t(p.b.size()), p.d);
  return p;
}

PacketMeta look(FlowTable& t, const Pkt& p, uint64_t ts) {
  PacketMeta m;
  m.ts_ns = ts;
  t.lookup(p.b.data(), p.d, ts, m);
  return m;
}

constexpr uint64_t kSec = 1000000000ULL;

}  // namespace

TEST_CASE("flow table: both directions are one flow, roles from the SYN", "[flows]") {
  FlowTable t("t", 1024, FlowTimeouts{}, 0);
  Pkt syn = tcp4("10.0.0.1", "192.0.2.9", 40000, 443, 0x02);
  Pkt synack = tcp4("192.0.2.9", "10.0.0.1", 443, 40000, 0x12);
  PacketMeta a = look(t, syn, 1);
  CHECK(a.flow_first);
  CHECK(a.initiator_is_src);
  PacketMeta b = look(t, synack, 2);
  CHECK_FALSE(b.flow_first);
  CHECK_FALSE(b.initiator_is_src);
  CHECK(a.flow == b.flow);
  CHECK(t.size() == 1);

  SECTION("a SYN-ACK seen first makes its destination the initiator") {
    Pkt sa = tcp4("192.0.2.7", "10.0.0.2", 80, 50000, 0x12);
    PacketMeta m = look(t, sa, 3);
    CHECK(m.flow_first);
    CHECK_FALSE(m.initiator_is_src);
    CHECK(look(t, tcp4("10.0.0.2", "192.0.2.7", 50000, 80), 4).initiator_is_src);
  }
  SECTION("another port is another flow") {
    PacketMeta m = look(t, tcp4("10.0.0.1", "192.0.2.9", 40001, 443), 3);
    CHECK(m.flow_first);
    CHECK(m.flow != a.flow);
    CHECK(t.size() == 2);
  }
}

TEST_CASE("flow table: fragments share one entry keyed without ports", "[flows]") {
  FlowTable t("t", 1024, FlowTimeouts{}, 0);
  uint32_t a = 0x0a000001, b = 0xc0000209;
  // The unfragmented flow first (b asks a: b is the initiator), then a
  // fragmented reply from a: its first fragment takes the flow's roles.
  PacketMeta q = look(t, udp4(b, a, 5353, 53), 1);
  CHECK(q.initiator_is_src);
  PacketMeta f1 = look(t, udp4(a, b, 53, 5353, 0x2000), 2);      // MF, offset 0
  PacketMeta f2 = look(t, udp4(a, b, 0, 0, 0x0003), 3);          // last fragment, offset 24
  CHECK(f1.flow_first);
  CHECK_FALSE(f1.initiator_is_src);
  CHECK(f1.flow == f2.flow);
  CHECK_FALSE(f2.flow_first);
  CHECK(f1.flow != q.flow);
}

TEST_CASE("flow table: a UDP datagram whose header cannot be read takes no roles from its own new entry", "[flows]") {
  // Its key has no ports, as the fragments' key has: the fragments' roles it
  // looks for are those of the entry just made for it, not yet decided.
  for (uint32_t lo_first : {1u, 0u}) {
    FlowTable t("t", 1024, FlowTimeouts{}, 0);
    const uint32_t a = lo_first ? 0x0a000001 : 0xc0000209, b = lo_first ? 0xc0000209 : 0x0a000001;
    V4 h;
    for (int i = 0; i < 4; ++i) h.src[i] = uint8_t(a >> (24 - 8 * i)), h.dst[i] = uint8_t(b >> (24 - 8 * i));
    h.proto = 17;
    Pkt p{cat({eth(0x0800), ipv4(h, cat({udp_hdr(2715, 53, 0x4034), payload(8)}))}), {}};
    decode(p.b.data(), uint32_t(p.b.size()), uint32_t(p.b.size()), p.d);
    REQUIRE(p.d.l4_hdr_len == 0);
    PacketMeta m = look(t, p, 1 + lo_first);
    CHECK(m.flow_first);
    CHECK(m.roles_uncertain);
    CHECK(m.initiator_is_src);
  }
}

TEST_CASE("flow table: idle flows expire, closed TCP flows sooner", "[flows]") {
  FlowTimeouts to;
  // Committed up front (live) or grown by use (offline): the same table.
  const bool commit = GENERATE(true, false);
  FlowTable t("t", 1024, to, 0, commit);
  look(t, udp4(1, 2, 1000, 53), 0);
  look(t, tcp4("10.0.0.1", "10.0.0.2", 1, 2, 0x02), 0);
  look(t, tcp4("10.0.0.1", "10.0.0.2", 1, 2, 0x11), 1);   // FIN from the client
  look(t, tcp4("10.0.0.2", "10.0.0.1", 2, 1, 0x11), 1);   // and from the server
  CHECK(t.size() == 2);
  t.expire(to.closed + 2, 1u << 20);
  CHECK(t.size() == 1);  // the closed TCP flow
  CHECK(t.stats().closed == 1);
  t.expire(to.udp - 1, 1u << 20);
  CHECK(t.size() == 1);  // not idle long enough yet
  t.expire(to.udp + 1, 1u << 20);
  CHECK(t.size() == 0);
  CHECK(t.stats().expired == 2);
  // A flow seen again after expiry starts anew.
  CHECK(look(t, udp4(1, 2, 1000, 53), to.udp + 3 * kSec).flow_first);
}

TEST_CASE("flow table: a full table stays bounded and still gives every packet a flow", "[flows]") {
  const uint32_t cap = 512;
  const bool commit = GENERATE(true, false);
  FlowTable t("t", cap, FlowTimeouts{}, 0, commit);
  std::mt19937 rng(7);
  for (uint32_t i = 0; i < 20 * cap; ++i) {
    PacketMeta m = look(t, udp4(rng(), rng(), uint16_t(rng()), 53), 1 + i);
    REQUIRE(m.flow != nullptr);
    CHECK(m.flow_first);
    REQUIRE(t.size() <= cap);
  }
  CHECK(t.size() == cap);
  CHECK(t.stats().evicted >= 19 * cap);
  CHECK(t.stats().created == 20 * cap);
}

TEST_CASE("flow table: entries stay findable through inserts and removals", "[flows]") {
  // A small table filled completely: buckets overflow into their
  // neighbours; every flow must still be found, and removal must not lose
  // the flows that spilled past the removed one.
  const uint32_t cap = 256;
  const bool commit = GENERATE(true, false);
  FlowTable t("t", cap, FlowTimeouts{}, 0, commit);
  std::vector<Pkt> flows;
  for (uint32_t i = 0; i < cap; ++i) flows.push_back(udp4(0x0a000000 + i, 0xc0000201, uint16_t(1000 + i), 53));
  for (uint32_t i = 0; i < cap; ++i) CHECK(look(t, flows[i], 1).flow_first);
  CHECK(t.size() == cap);
  std::set<FlowState*> states;
  for (uint32_t i = 0; i < cap; ++i) {
    PacketMeta m = look(t, flows[i], 2);
    CHECK_FALSE(m.flow_first);
    states.insert(m.flow);
  }
  CHECK(states.size() == cap);
  // Refresh every other flow, expire the rest, and look all up again.
  FlowTimeouts to;
  for (uint32_t i = 0; i < cap; i += 2) look(t, flows[i], to.udp);
  t.expire(to.udp + 3, 1u << 20);
  CHECK(t.size() == cap / 2);
  for (uint32_t i = 0; i < cap; ++i) CHECK(look(t, flows[i], to.udp + 4).flow_first == (i % 2 == 1));
  CHECK(t.size() == cap);
}

TEST_CASE("flow table: a burst finds the flow an earlier packet of it created", "[flows]") {
  FlowTable t("t", 1024, FlowTimeouts{}, 0);
  Pkt p[3] = {tcp4("10.0.0.1", "192.0.2.9", 40000, 443, 0x02), tcp4("192.0.2.9", "10.0.0.1", 443, 40000, 0x12),
              tcp4("10.0.0.3", "192.0.2.9", 40000, 443, 0x02)};
  const uint8_t* data[3] = {p[0].b.data(), p[1].b.data(), p[2].b.data()};
  Decoded ds[3] = {p[0].d, p[1].d, p[2].d};
  bool want[3] = {true, true, true};
  PacketMeta m[3];
  t.lookup_burst(data, ds, want, 3, m);
  CHECK(m[0].flow_first);
  CHECK_FALSE(m[1].flow_first);
  CHECK(m[0].flow == m[1].flow);
  CHECK_FALSE(m[1].initiator_is_src);
  CHECK(m[2].flow_first);
  CHECK(t.size() == 2);
}

TEST_CASE("flow table: burst lookups give what single lookups give, through collisions, inserts and evictions",
          "[flows]") {
  // Two tables fed the same packets, one packet at a time and in random
  // bursts. Same operations in the same order use the same entries, so the
  // two tables' FlowState pointers differ by one constant. Small tables:
  // many packets of a burst share a home bucket, new flows land in buckets
  // later packets of the burst look at, and (the first size) the table is
  // full, so inserts evict and expire.
  const bool commit = GENERATE(true, false);
  for (uint32_t cap : {64u, 1024u}) {
    for (uint32_t pool : {cap * 3, cap / 2}) {
      // A third table takes the bursts through stage() and lookup_staged(),
      // as the worker does.
      FlowTable one("one", cap, FlowTimeouts{}, 0, commit), burst("burst", cap, FlowTimeouts{}, 0, commit),
          staged("staged", cap, FlowTimeouts{}, 0, commit);
      std::mt19937 rng(cap + pool);
      std::vector<Pkt> flows;
      for (uint32_t i = 0; i < pool; ++i) {
        uint32_t a = 0x0a000000 | (rng() & 0xff), b = 0xc0000200 | (rng() & 0x3);
        uint16_t sp = uint16_t(1024 + rng() % 8), dp = uint16_t(rng() % 2 ? 53 : 443);
        if (rng() % 2) flows.push_back(udp4(a, b, sp, dp));
        else flows.push_back(tcp4(("10.0.0." + std::to_string(a & 0xff)).c_str(), "192.0.2.1", sp, dp, 0x02));
      }
      intptr_t delta = 0, sdelta = 0;
      bool have_delta = false, have_sdelta = false;
      uint64_t ts = 1;
      for (int round = 0; round < 400; ++round) {
        const unsigned n = 1 + rng() % FlowTable::kBurstMax;
        std::vector<Pkt> ps;
        for (unsigned i = 0; i < n; ++i) {
          Pkt p = flows[rng() % flows.size()];
          if (rng() % 2) {  // the other direction
            std::swap_ranges(p.b.begin() + 26, p.b.begin() + 30, p.b.begin() + 30);
            std::swap_ranges(p.b.begin() + 34, p.b.begin() + 36, p.b.begin() + 36);
            decode(p.b.data(), uint32_t(p.b.size()), uint32_t(p.b.size()), p.d);
          }
          ps.push_back(p);
        }
        const uint8_t* data[FlowTable::kBurstMax];
        Decoded ds[FlowTable::kBurstMax];
        bool want[FlowTable::kBurstMax];
        PacketMeta mb[FlowTable::kBurstMax];
        for (unsigned i = 0; i < n; ++i) {
          data[i] = ps[i].b.data(), ds[i] = ps[i].d, want[i] = rng() % 8 != 0;
          mb[i].ts_ns = ts + i * 7 * kSec;  // long enough apart that flows expire now and then
        }
        burst.lookup_burst(data, ds, want, n, mb);
        PacketMeta ms[FlowTable::kBurstMax];
        for (unsigned i = 0; i < n; ++i) {
          ms[i].ts_ns = mb[i].ts_ns;
          if (want[i]) staged.stage(i, data[i], ds[i]);
        }
        staged.lookup_staged(data, ds, want, n, ms);
        for (unsigned i = 0; i < n; ++i) {
          if (!want[i]) continue;
          PacketMeta m1 = look(one, ps[i], mb[i].ts_ns);
          INFO("cap " << cap << " pool " << pool << " round " << round << " packet " << i);
          REQUIRE(m1.flow_first == mb[i].flow_first);
          REQUIRE(m1.initiator_is_src == mb[i].initiator_is_src);
          REQUIRE((m1.flow == nullptr) == (mb[i].flow == nullptr));
          REQUIRE(m1.flow_first == ms[i].flow_first);
          REQUIRE(m1.initiator_is_src == ms[i].initiator_is_src);
          REQUIRE((m1.flow == nullptr) == (ms[i].flow == nullptr));
          if (!m1.flow) continue;
          intptr_t dd = reinterpret_cast<intptr_t>(mb[i].flow) - reinterpret_cast<intptr_t>(m1.flow);
          if (!have_delta) delta = dd, have_delta = true;
          REQUIRE(dd == delta);
          intptr_t sd = reinterpret_cast<intptr_t>(ms[i].flow) - reinterpret_cast<intptr_t>(m1.flow);
          if (!have_sdelta) sdelta = sd, have_sdelta = true;
          REQUIRE(sd == sdelta);
        }
        ts += n * 7 * kSec;
      }
      CHECK(one.size() == burst.size());
      CHECK(one.size() == staged.size());
      CHECK(one.stats().created == staged.stats().created);
      CHECK(one.stats().lookups == staged.stats().lookups);
      CHECK(one.stats().created == burst.stats().created);
      CHECK(one.stats().evicted == burst.stats().evicted);
      CHECK(one.stats().expired == burst.stats().expired);
    }
  }
}

TEST_CASE("flow table: a SYN flood from spoofed sources evicts half-open flows, never the answered ones", "[flows]") {
  FlowTable t("t", 1024, FlowTimeouts{}, 0, false);
  uint64_t ts = 1;
  std::vector<std::pair<Pkt, Pkt>> est;
  for (int i = 0; i < 300; ++i) {
    char c[32];
    std::snprintf(c, sizeof c, "10.0.%d.%d", i / 200, i % 200 + 1);
    Pkt syn = tcp4(c, "192.0.2.9", uint16_t(40000 + i), 443, 0x02);
    Pkt synack = tcp4("192.0.2.9", c, 443, uint16_t(40000 + i), 0x12);
    look(t, syn, ts++);
    look(t, synack, ts++);
    est.push_back({tcp4(c, "192.0.2.9", uint16_t(40000 + i), 443, 0x10), synack});
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 50000; ++i) {
    const uint32_t src = uint32_t(rng()) | 0x01000000u;
    Pkt syn = tcp4("0.0.0.0", "198.51.100.80", uint16_t(1024 + rng() % 60000), 80, 0x02);
    std::memcpy(syn.b.data() + 14 + 12, &src, 4);
    decode(syn.b.data(), uint32_t(syn.b.size()), uint32_t(syn.b.size()), syn.d);
    look(t, syn, ts++);
  }
  CHECK(t.stats().full > 40000);
  CHECK(t.stats().evicted > 40000);
  CHECK(t.stats().evicted_two_way == 0);
  INFO("evicted " << t.stats().evicted << " answered " << t.stats().evicted_two_way << " expired "
                  << t.stats().expired << " size " << t.size());
  for (auto& [ack, synack] : est) {
    const PacketMeta m = look(t, ack, ts++);
    CHECK_FALSE(m.flow_first);
    CHECK(m.initiator_is_src);
  }
}

TEST_CASE("flow table: an answered flow evicted under pressure comes back with its roles", "[flows]") {
  FlowTable t("t", 64, FlowTimeouts{}, 0, false);
  uint64_t ts = 1;
  // The client's port looks like a server's and the server's like a
  // client's: without the eviction memory the roles would come out swapped.
  auto flow = [&](int i) {
    char c[32];
    std::snprintf(c, sizeof c, "10.1.%d.%d", i / 200, i % 200 + 1);
    look(t, tcp4(c, "192.0.2.9", 5060, uint16_t(40000 + i), 0x02), ts++);
    look(t, tcp4("192.0.2.9", c, uint16_t(40000 + i), 5060, 0x12), ts++);
    return tcp4("192.0.2.9", c, uint16_t(40000 + i), 5060, 0x10);
  };
  const Pkt first = flow(0);
  for (int i = 1; i < 200; ++i) flow(i);
  REQUIRE(t.stats().evicted_two_way > 0);
  const PacketMeta m = look(t, first, ts++);
  CHECK(m.flow_first);  // it was evicted
  CHECK(t.stats().roles_recalled == 1);
  CHECK_FALSE(m.roles_uncertain);
  CHECK_FALSE(m.initiator_is_src);  // the server sent it
}

TEST_CASE("flow table: a full table gives up its oldest one-way flows first, in the order they came", "[flows]") {
  FlowTable t("t", 256, FlowTimeouts{}, 0, false);
  uint64_t ts = 1;
  auto syn = [](int i) {
    char c[32];
    std::snprintf(c, sizeof c, "10.2.%d.%d", i / 200, i % 200 + 1);
    return tcp4(c, "198.51.100.80", uint16_t(1024 + i), 80, 0x02);
  };
  for (int i = 0; i < 256; ++i) look(t, syn(i), ts++);
  REQUIRE(t.size() == 256);
  // 100 more: the first 100 go, the other 156 stay.
  for (int i = 256; i < 356; ++i) look(t, syn(i), ts++);
  CHECK(t.stats().evicted == 100);
  for (int i = 100; i < 356; ++i) CHECK_FALSE(look(t, syn(i), ts++).flow_first);
  CHECK(look(t, syn(0), ts++).flow_first);
}

TEST_CASE("flow table: likely server ports are the system range and the listed registered services", "[flows]") {
  CHECK_FALSE(likely_server_port(0));
  CHECK(likely_server_port(1));
  CHECK(likely_server_port(53));
  CHECK(likely_server_port(1023));
  CHECK_FALSE(likely_server_port(1024));
  for (uint16_t p : {1080, 1194, 1433, 1521, 1701, 1723, 1812, 1813, 1900, 2049, 3128, 3306, 3389, 3478, 3479,
                     4433, 4500, 5060, 5061, 5222, 5223, 5228, 5349, 5353, 5355, 5432, 5900, 6379, 6443, 6667,
                     6697, 8000, 8008, 8080, 8081, 8443, 8883, 8888, 9000, 9090, 9092, 9200, 9418, 11211, 27017})
    CHECK(likely_server_port(p));
  // Nothing else: ephemeral ports (and neighbours of the listed ones) are clients'.
  unsigned n = 0;
  for (uint32_t p = 0; p < 65536; ++p) n += likely_server_port(uint16_t(p));
  CHECK(n == 1023 + 45);
  for (uint16_t p : {1081, 3307, 8079, 8082, 27016, 27018, 49152, 65535}) CHECK_FALSE(likely_server_port(p));
}
