// Several consumers on the worker path: the burst route that runs each
// header-only consumer's program on a whole burst (WorkerPath::
// deliver_burst_multi, with its bulk copies, header-only copies for kernels
// that cut, and the last consumer rewriting the original in place) against
// the packet-by-packet route (deliver) on the same packets. Every shared
// capture goes through both; each consumer must get the same frames, with
// the same lengths and wire lengths, and the same counters.
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "equiv_support.h"
#include "eal_env.h"
#include "flow_table.h"
#include "mbuf_meta.h"
#include "policy.h"
#include "registry.h"
#include "worker_path.h"

using namespace amon;
using amon::testing::for_each_record;
using amon::testing::key_file;
using amon::testing::shared_captures;

namespace {

rte_mempool* pool() {
  static rte_mempool* p = amon_test::start_eal("test_consumers", 8191);
  REQUIRE(p);
  return p;
}

struct Out {
  std::vector<uint8_t> bytes;
  uint32_t wire;
  uint64_t ts;
  bool operator==(const Out&) const = default;
};

struct Collect {
  std::vector<std::vector<Out>> per;  // by consumer
  static void sink(void* ctx, unsigned c, rte_mbuf* m) {
    auto& me = *static_cast<Collect*>(ctx);
    if (me.per.size() <= c) me.per.resize(c + 1);
    std::vector<uint8_t> b(rte_pktmbuf_pkt_len(m));
    const void* p = rte_pktmbuf_read(m, 0, uint32_t(b.size()), b.data());
    if (p != b.data()) std::memcpy(b.data(), p, b.size());
    me.per[c].push_back({std::move(b), mbuf_wire_len(m), mbuf_ts(m)});
    rte_pktmbuf_free(m);
  }
};

rte_mbuf* mbuf_of(const uint8_t* data, uint32_t cap, uint32_t wire, uint64_t ts) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool());
  REQUIRE(m);
  const uint32_t n = std::min<uint32_t>(cap, rte_pktmbuf_tailroom(m));
  std::memcpy(rte_pktmbuf_append(m, uint16_t(n)), data, n);
  mbuf_set_ts(m, ts);
  mbuf_set_wire_len(m, wire);
  mbuf_set_seq(m, 0);  // a recycled mbuf's number (and what it says of initiators) is gone, as in the engine
  return m;
}

// Consumer sets: all rewriting (the last one in place), with a sharer
// (every rewriting one copies), with kernels that cut (headers-only
// copies), by role and by position, with the flow's Crypto-PAn memo.
const std::vector<std::vector<std::string>> kSets = {
    {"eth.src, eth.dst : timestamp()\nip.src, ip.dst : cryptopan(key=k)\n",
     "eth.src, eth.dst : timestamp()\nip.src, ip.dst : cryptopan(key=k)\n",
     "eth.src, eth.dst : timestamp()\nip.src, ip.dst : cryptopan(key=k)\n",
     "eth.src, eth.dst : timestamp()\nip.src, ip.dst : cryptopan(key=k)\n"},
    {"ip.client : cryptopan(key=k)\nip.server : prefix(24)\npayload : cut()\n", "",
     "eth.src, eth.dst : zero()\nip.dst : prefix(20)\n"},
    {"ip.client : cryptopan(key=k)\nip.server : prefix(24, v6=48)\npayload : cut()\n",
     "ip.src : prefix(16)\nip.dst : cryptopan(key=k)\npayload : cut()\n",
     "eth.src, eth.dst : timestamp()\nip.client : cryptopan(key=k)\nip.server : prefix(24)\npayload : cut()\n"},
    {"eth.dst : timestamp()\npayload : zero()\n", "ip.client : hash(key=k)\nip.server : zero()\n",
     "ip.client : cryptopan(key=k)\nip.server : drop()\n"},
};

}  // namespace

TEST_CASE("several consumers: the burst route gives each the frames the per-packet route does") {
  rte_mempool* mp = pool();
  SharedServices svc{&amon::testing::store(), {}};
  uint64_t compared = 0;
  int set_no = 0;
  for (const auto& set : kSets) {
    ++set_no;
    // Each route has programs of its own: no program state must pass from
    // one route to the other, which see the same packets at different times.
    std::vector<std::unique_ptr<Program>> progs, progs_single;
    for (size_t i = 0; i < set.size(); ++i) {
      dsl::Diagnostics d;
      auto pol = dsl::compile_string("key k = file(\"" + key_file(0) + "\")\n" + set[i], "c.amon", d);
      INFO(d.render_text());
      REQUIRE(pol);
      progs.push_back(std::make_unique<Program>(pol, int(i), &svc));
      progs_single.push_back(std::make_unique<Program>(pol, int(i), &svc));
    }
    WorkerPath burst(progs, mp, std::make_unique<FlowTable>("cb" + std::to_string(set_no), 1u << 14, FlowTimeouts{}, 0));
    WorkerPath single(progs_single, mp, std::make_unique<FlowTable>("cs" + std::to_string(set_no), 1u << 14, FlowTimeouts{}, 0));
    // The burst route is taken only by header-only programs.
    for (size_t i = 0; i < set.size(); ++i) REQUIRE(burst.instance(i).header_fast_path());
    for (const std::string& cap : shared_captures()) {
      Collect a, b;
      std::vector<rte_mbuf*> pend;
      auto flush = [&] {
        if (!pend.empty()) burst.process_burst(pend.data(), unsigned(pend.size()), Collect::sink, &a);
        pend.clear();
      };
      // Bursts of 1 to 32 packets: the burst boundaries move through the capture.
      unsigned want = 1;
      for_each_record(cap, [&](const uint8_t* data, uint32_t caplen, uint32_t len, uint64_t ts) {
        if (caplen > RTE_MBUF_DEFAULT_DATAROOM) return;  // single-segment frames
        pend.push_back(mbuf_of(data, caplen, len, ts));
        rte_mbuf* m = mbuf_of(data, caplen, len, ts);
        single.process(m, Collect::sink, &b);
        if (pend.size() >= want) flush(), want = want % 32 + 1;
      });
      flush();
      INFO(cap << ", consumer set " << set_no);
      a.per.resize(set.size());
      b.per.resize(set.size());
      for (size_t c = 0; c < set.size(); ++c) {
        INFO("consumer " << c);
        REQUIRE(a.per[c].size() == b.per[c].size());
        for (size_t i = 0; i < a.per[c].size(); ++i) {
          const Out &x = a.per[c][i], &y = b.per[c][i];
          size_t at = 0;
          while (at < x.bytes.size() && at < y.bytes.size() && x.bytes[at] == y.bytes[at]) ++at;
          INFO("frame " << i << ": " << x.bytes.size() << " / " << y.bytes.size() << " bytes, first difference at "
                        << at << ", wire " << x.wire << " / " << y.wire);
          REQUIRE(x == y);
          ++compared;
        }
      }
    }
    for (size_t c = 0; c < set.size(); ++c) {
      const ConsumerCounters &x = burst.counters()[c], &y = single.counters()[c];
      CHECK(x.in == y.in);
      CHECK(x.out == y.out);
      CHECK(x.shared == y.shared);
      CHECK(x.copied == y.copied);
      CHECK(x.filtered == y.filtered);
      CHECK(x.dropped == y.dropped);
      CHECK(x.rule_hits == y.rule_hits);
    }
    CHECK(burst.stats().copy_failures == 0);
  }
  CHECK(compared > 10000);
  // Every mbuf went back to the pool.
  CHECK(rte_mempool_avail_count(mp) == 8191);
}
