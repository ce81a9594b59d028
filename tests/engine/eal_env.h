// DPDK as the engine tests run it: no hugepages, no PCI, one lcore, the
// mbuf metadata field and the built-in plugins registered, and one mbuf
// pool. EAL can be initialised once per process, so each test binary calls
// this once (from a function-local static).
#pragma once

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdio>
#include <cstdlib>

#include "mbuf_meta.h"
#include "registry.h"

namespace amon_test {

// `name`: the program name EAL logs and the pool's name prefix; `mbufs`:
// the pool's size (2^n - 1 is what the mempool sizes best); `mem_mb`: EAL's
// --no-huge memory.
inline rte_mempool* start_eal(const char* name, unsigned mbufs, const char* mem_mb = "128") {
  const char* eal[] = {name, "--no-huge", "--no-pci", "--no-shconf", "-m", mem_mb, "--lcores=0",
                       "--log-level=*:error", "--no-telemetry"};
  if (rte_eal_init(int(sizeof eal / sizeof *eal), const_cast<char**>(eal)) < 0) {
    std::fprintf(stderr, "EAL: %s\n", rte_strerror(rte_errno));
    std::abort();
  }
  if (!amon::mbuf_meta_register()) {
    std::fprintf(stderr, "%s: mbuf dynamic fields: %s\n", name, rte_strerror(rte_errno));
    std::abort();
  }
  amon::register_builtin_plugins();
  char pool_name[RTE_MEMPOOL_NAMESIZE];
  std::snprintf(pool_name, sizeof pool_name, "%.20s_pool", name);
  rte_mempool* p = rte_pktmbuf_pool_create(pool_name, mbufs, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, int(rte_socket_id()));
  if (!p) {
    std::fprintf(stderr, "%s: mbuf pool: %s\n", name, rte_strerror(rte_errno));
    std::abort();
  }
  return p;
}

}  // namespace amon_test
