// What a live run loses before a consumer sees a packet, counted where it
// happens: below amon (a NIC's or a driver's receive queue, the kernel's
// ring of an AF_PACKET socket), at dispatch (a worker's ring full) and at
// the outputs (workers.cpp, ports.cpp). The report adds them up
// (stats.cpp, loss_totals) and the exit warns above `loss.warn`.
#include "engine_parts.h"

#include <dirent.h>
#include <linux/if_packet.h>
#include <linux/if_xdp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>

namespace amon::engine {

namespace {

// The process's sockets of a family (SO_DOMAIN), by descriptor.
std::set<int> sockets_of(int family) {
  std::set<int> fds;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return fds;
  const int own = dirfd(d);
  while (dirent* e = readdir(d)) {
    char* end;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end || end == e->d_name || fd == own) continue;
    int domain = 0;
    socklen_t len = sizeof domain;
    if (getsockopt(int(fd), SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == family) fds.insert(int(fd));
  }
  closedir(d);
  return fds;
}

// The process's AF_PACKET sockets bound to an interface and not yet
// claimed by another port. DPDK's net_af_packet (22.11) opens one per queue
// pair at probe time, bound to its interface, and never reads the kernel's
// PACKET_STATISTICS: its imissed stays 0 however full the ring ran, and
// the driver keeps the sockets to itself. Only drivers open such sockets
// in amon.
std::vector<int> find_packet_sockets(unsigned ifindex, const std::set<int>& taken) {
  std::vector<int> fds;
  for (int fd : sockets_of(AF_PACKET)) {
    sockaddr_ll sll{};
    socklen_t len = sizeof sll;
    if (taken.count(fd) || getsockname(fd, reinterpret_cast<sockaddr*>(&sll), &len) != 0 ||
        unsigned(sll.sll_ifindex) != ifindex)
      continue;
    fds.push_back(fd);
  }
  return fds;
}

}  // namespace

// AF_XDP sockets have no address to find them by (and this kernel may
// lack their sock_diag): net_af_xdp makes them as its queues are set up,
// so the ones that appear while a port is set up are that port's.
std::set<int> xdp_sockets() { return sockets_of(AF_XDP); }

void claim_xdp_sockets(Engine& E, uint16_t port, const std::set<int>& before) {
  for (auto& in : E.inputs)
    if (in.port == port)
      for (int fd : xdp_sockets())
        if (!before.count(fd)) in.xdp_sockets.push_back(fd);
}

bool file_backed_vdev(const std::string& spec) {
  if (spec.rfind("net_pcap", 0) != 0) return false;
  for (size_t at = spec.find(','); at != std::string::npos; at = spec.find(',', at + 1))
    if (spec.compare(at + 1, 8, "rx_pcap=") == 0) return true;
  return false;
}

// After the ports started: the sockets whose kernel drops amon reads itself.
void open_loss_counters(Engine& E) {
  std::set<int> taken;
  for (auto& in : E.inputs) {
    if (in.port == UINT16_MAX) continue;
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(in.port, &info) != 0 || !info.driver_name) continue;
    if (std::strcmp(info.driver_name, "net_af_packet") != 0) continue;
    in.packet_sockets = info.if_index ? find_packet_sockets(info.if_index, taken) : std::vector<int>{};
    taken.insert(in.packet_sockets.begin(), in.packet_sockets.end());
    if (in.packet_sockets.empty())
      log_line(kWarn, "%s: its AF_PACKET sockets were not found: packets the kernel drops when their ring is full "
                      "will not be counted",
               in.spec.describe().c_str());
  }
}

// Main lcore (build_report). The kernel's socket counters reset when read,
// so they are added up here; the ports' counters are totals since start.
void poll_loss(Engine& E) {
  for (auto& in : E.inputs) {
    if (in.port == UINT16_MAX) continue;
    // Frames dropped because the socket's Rx ring was full: totals since
    // the socket was made, never reset. DPDK 22.11's net_af_xdp reports
    // the socket's rx_dropped as imissed, but not rx_ring_full, where a
    // reader that falls behind loses its frames.
    if (!in.xdp_sockets.empty()) {
      uint64_t full = 0;
      for (int fd : in.xdp_sockets) {
        xdp_statistics st{};
        socklen_t len = sizeof st;
        if (getsockopt(fd, SOL_XDP, XDP_STATISTICS, &st, &len) == 0 && len >= sizeof st) full += st.rx_ring_full;
      }
      in.loss.kernel_ring = full;
    }
    for (int fd : in.packet_sockets) {
      tpacket_stats st{};
      socklen_t len = sizeof st;
      if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) in.loss.kernel_ring += st.tp_drops;
    }
    rte_eth_stats es{};
    if (rte_eth_stats_get(in.port, &es) == 0) {
      in.loss.missed = es.imissed;
      in.loss.errors = es.ierrors;
      in.loss.no_mbuf = es.rx_nombuf;
    }
  }
}

}  // namespace amon::engine
