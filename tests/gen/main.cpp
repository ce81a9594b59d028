// amon-gen: deterministic synthetic traffic for amon's quickstart and benchmarks.
// See doc/generator.md.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "generator.hpp"

namespace {

void usage(FILE* f) {
  std::fputs(
      "usage: amon-gen --out FILE [options]\n"
      "  --seed N            world and traffic seed (default 1); same args => same bytes\n"
      "  --packets N         stop starting activities at N planned packets (default 10000)\n"
      "  --flows N           ... or at N transport flows (exact)\n"
      "  --clients N         client hosts (default 2000)\n"
      "  --names N           names in the catalogue (default 5000)\n"
      "  --zipf S            popularity exponent of names (default 1.0)\n"
      "  --v6 FRACTION       share of IPv6 clients (default 0.25)\n"
      "  --vlan FRACTION     share of flows with an 802.1Q tag (default 0.10)\n"
      "  --qinq FRACTION     share of tagged flows that are QinQ 0x88a8 (default 0.10)\n"
      "  --bulk FRACTION     share of activities that are bulk downloads (default 0.02)\n"
      "  --dhcp FRACTION     share of clients that lease their address by DHCP first (default 0)\n"
      "  --rate N            activities started per second (default 500)\n"
      "  --duration SEC      spread the file over about SEC seconds (overrides --rate)\n"
      "  --start EPOCH       time of the first packet, Unix seconds (default 1704067200)\n"
      "  --client-net4 P     IPv4 client prefix (default 10.0.0.0/8)\n"
      "  --client-net6 P     IPv6 client prefix (default 2001:db8:1::/48)\n"
      "  --tunnel KIND       wrap every frame: gtpu, vxlan, geneve, gre, ipip (IPv4/IPv6 in IPv4)\n"
      "  --tunnel-csum       compute the outer UDP checksums (default 0, as GTP-U/VXLAN senders do)\n"
      "  --tunnel-mtu N      fragment outer IPv4 datagrams longer than N bytes (576..9000), as a link\n"
      "                      with that MTU in front of the tunnel does\n"
      "  --small             header-heavy mix of 60-130 byte frames for packet-rate benchmarks\n"
      "  --only KIND         ordinary activities of one kind: dns, tls, http, small-http, tcp, icmp\n"
      "  --flood KIND        add a flood: dns-rsub, syn, udp, sni, host (doc/generator.md)\n"
      "  --flood-share F     share of the packets that are the flood's (default 1: flood only)\n"
      "  --flood-rate N      flood packets per second (default 200000)\n"
      "  --flood-popular F   share of dns-rsub/sni/host packets naming the popular name (default 0.02)\n"
      "  --flood-domain D    the attacked domain (default victim-shop.com)\n"
      "  --micro             microsecond pcap instead of nanosecond\n"
      "  --names-out FILE    write the catalogue with visits and distinct clients per name\n"
      "  --quiet             no summary line\n",
      f);
}

[[noreturn]] void bad(const std::string& msg) {
  std::fprintf(stderr, "amon-gen: %s\n", msg.c_str());
  usage(stderr);
  std::exit(2);
}

uint64_t num(const char* opt, const char* v) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (!*v || *end || errno || v[0] == '-') bad(std::string("bad number for ") + opt + ": " + v);
  return x;
}

double real(const char* opt, const char* v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (!*v || *end || !(x >= lo && x <= hi)) bad(std::string("bad value for ") + opt + ": " + v);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  amon::gen::Options o;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) bad("missing value for " + a);
      return argv[++i];
    };
    if (a == "--out") o.out = val();
    else if (a == "--seed") o.seed = num("--seed", val());
    else if (a == "--packets") o.packets = num("--packets", val());
    else if (a == "--flows") o.flows = num("--flows", val());
    else if (a == "--clients") o.clients = static_cast<uint32_t>(num("--clients", val()));
    else if (a == "--names") o.names = static_cast<uint32_t>(num("--names", val()));
    else if (a == "--zipf") o.zipf = real("--zipf", val(), 0, 5);
    else if (a == "--v6") o.v6 = real("--v6", val(), 0, 1);
    else if (a == "--vlan") o.vlan = real("--vlan", val(), 0, 1);
    else if (a == "--qinq") o.qinq = real("--qinq", val(), 0, 1);
    else if (a == "--bulk") o.bulk = real("--bulk", val(), 0, 1);
    else if (a == "--dhcp") o.dhcp = real("--dhcp", val(), 0, 1);
    else if (a == "--rate") o.rate = real("--rate", val(), 1e-3, 1e9);
    else if (a == "--duration") o.duration = real("--duration", val(), 1e-6, 1e7);
    else if (a == "--start") o.start_sec = num("--start", val());
    else if (a == "--client-net4") o.client_net4 = val();
    else if (a == "--client-net6") o.client_net6 = val();
    else if (a == "--tunnel") o.tunnel = val();
    else if (a == "--tunnel-csum") o.tunnel_csum = true;
    else if (a == "--tunnel-mtu") {
      o.tunnel_mtu = unsigned(num("--tunnel-mtu", val()));
      if (o.tunnel_mtu < 576 || o.tunnel_mtu > 9000) throw std::runtime_error("--tunnel-mtu: 576..9000");
    }
    else if (a == "--small") o.small = true;
    else if (a == "--micro") o.micro = true;
    else if (a == "--only") o.only = val();
    else if (a == "--flood") o.flood = val();
    else if (a == "--flood-share") o.flood_share = real("--flood-share", val(), 0, 1);
    else if (a == "--flood-rate") o.flood_rate = real("--flood-rate", val(), 1, 1e9);
    else if (a == "--flood-popular") o.flood_popular = real("--flood-popular", val(), 0, 1);
    else if (a == "--flood-domain") o.flood_domain = val();
    else if (a == "--names-out") o.names_out = val();
    else if (a == "--quiet") quiet = true;
    else if (a == "-h" || a == "--help") { usage(stdout); return 0; }
    else bad("unknown option " + a);
  }
  if (o.out.empty()) bad("--out is required");
  if (o.packets && o.flows) bad("give --packets or --flows, not both");
  if (o.clients > 10000000 || o.names > 10000000) bad("--clients/--names above 10M");

  const auto t0 = std::chrono::steady_clock::now();
  amon::gen::Summary s;
  try {
    s = amon::gen::generate(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "amon-gen: %s\n", e.what());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet)
    std::fprintf(stderr,
                 "amon-gen: %llu packets, %llu bytes, %llu flows (tls %llu, http %llu, dns %llu, bulk %llu, icmp %llu, "
                 "tcp-only %llu), %llu distinct names, %llu clients, %.3f s of traffic -> %s (%.2fs, %.2f Mpps)\n",
                 (unsigned long long)s.packets, (unsigned long long)s.bytes, (unsigned long long)s.flows,
                 (unsigned long long)s.tls, (unsigned long long)s.http, (unsigned long long)s.dns,
                 (unsigned long long)s.bulk, (unsigned long long)s.icmp, (unsigned long long)s.tcp_empty,
                 (unsigned long long)s.names_seen, (unsigned long long)s.clients_seen,
                 (double)(s.last_ns - s.first_ns) / 1e9, o.out.c_str(), secs, secs > 0 ? s.packets / secs / 1e6 : 0.0);
  if (!quiet && !o.flood.empty())
    std::fprintf(stderr, "amon-gen: %llu packets of the %s flood\n", (unsigned long long)s.flood, o.flood.c_str());
  if (!quiet && o.dhcp > 0)
    std::fprintf(stderr, "amon-gen: %llu DHCP lease exchanges\n", (unsigned long long)s.dhcp);
  return 0;
}
