// EAL as amon links it: the TSC frequency EAL adopts at start-up (in a static
// build, engine/core/dpdk_tsc.c's short measurement) against a slow
// measurement of our own, and the drivers and mempool handlers the engine
// finds by name.
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "sizing.h"

namespace {

void eal() {
  static bool done = false;
  if (done) return;
  const char* args[] = {"test_eal_start", "--no-huge", "--no-pci", "--no-shconf", "-m", "64", "--lcores=0",
                        "--log-level=*:error", "--no-telemetry"};
  if (rte_eal_init(int(sizeof args / sizeof *args), const_cast<char**>(args)) < 0) {
    std::fprintf(stderr, "EAL: %s\n", rte_strerror(rte_errno));
    std::abort();
  }
  done = true;
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

}  // namespace

TEST_CASE("EAL's TSC frequency agrees with a 300 ms measurement") {
  eal();
  const double hz = double(rte_get_tsc_hz());
  REQUIRE(hz > 1e8);
  // The best of three tries, so one preempted window does not fail the run.
  double best_err = 1.0;
  for (int i = 0; i < 3 && best_err > 0.0002; ++i) {
    uint64_t n0 = now_ns(), t0 = rte_rdtsc();
    timespec sl{0, 300 * 1000 * 1000};
    nanosleep(&sl, nullptr);
    uint64_t n1 = now_ns(), t1 = rte_rdtsc();
    double measured = double(t1 - t0) * 1e9 / double(n1 - n0);
    best_err = std::min(best_err, std::abs(measured - hz) / measured);
    INFO("EAL " << hz << " Hz, measured " << measured << " Hz");
  }
  // EAL's own measurement rounds to 10 MHz (up to 0.2 % off at 2.6 GHz); the
  // static build's is within a few parts per million.
#if AMON_DPDK_STATIC
  CHECK(best_err < 0.0005);
#else
  CHECK(best_err < 0.003);
#endif
}

TEST_CASE("the drivers and the mempool handlers amon uses are linked in") {
  eal();
  const std::string pcap_args = std::string("net_pcap0,rx_pcap=") + AMON_PCAPS_DIR "/dns-tcp-simple.pcap";
  // Each vdev probed, found as a port, and removed again (the driver frees
  // what it opened: the pcap file, the socket).
  for (const std::string& args : {std::string("net_null0"), std::string("net_ring0"), pcap_args,
                                 std::string("net_af_packet0,iface=lo")}) {
    INFO(args);
    REQUIRE(rte_dev_probe(args.c_str()) == 0);
    const std::string name = args.substr(0, args.find(','));
    uint16_t port;
    REQUIRE(rte_eth_dev_get_port_by_name(name.c_str(), &port) == 0);
    rte_eth_dev_info info;
    REQUIRE(rte_eth_dev_info_get(port, &info) == 0);
    rte_device* dev = info.device;
    CHECK(rte_eth_dev_close(port) == 0);
    CHECK(rte_dev_remove(dev) == 0);
  }
  rte_mempool* mp = rte_pktmbuf_pool_create("eal_start", 255, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, int(rte_socket_id()));
  REQUIRE(mp != nullptr);
  CHECK(std::string(rte_mempool_get_ops(mp->ops_index)->name) == "ring_mp_mc");
  rte_mempool_free(mp);
  // The offline pools' handler hands back the mbuf freed last (a ring would
  // hand out the oldest free one). No per-lcore cache, so the handler
  // itself answers.
  mp = rte_pktmbuf_pool_create_by_ops("eal_start_offline", 63, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, int(rte_socket_id()),
                                      amon::kOfflinePoolOps);
  REQUIRE(mp != nullptr);
  CHECK(std::string(rte_mempool_get_ops(mp->ops_index)->name) == amon::kOfflinePoolOps);
  rte_mbuf* m[3];
  REQUIRE(rte_pktmbuf_alloc_bulk(mp, m, 3) == 0);
  rte_pktmbuf_free(m[0]);
  rte_pktmbuf_free(m[2]);
  rte_pktmbuf_free(m[1]);
  CHECK(rte_pktmbuf_alloc(mp) == m[1]);
  CHECK(rte_pktmbuf_alloc(mp) == m[2]);
  rte_mempool_free(mp);
}
