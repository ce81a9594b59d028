// amon-gen's traffic model and its pcap writer.
#pragma once

#include <cstdint>
#include <string>

namespace amon::gen {

struct Options {
  std::string out;
  std::string names_out;
  uint64_t seed = 1;
  uint64_t packets = 0;  // stop starting activities once this many packets are planned
  uint64_t flows = 0;    // ... or once this many transport flows exist
  uint32_t clients = 2000;
  uint32_t names = 5000;
  double zipf = 1.0;
  double v6 = 0.25;
  double vlan = 0.10;
  double qinq = 0.10;    // share of the tagged flows that carry two tags (0x88a8 outer)
  double bulk = 0.02;    // share of activities that are bulk downloads
  double dhcp = 0;       // share of clients that lease their address by DHCP before their first activity
  double rate = 500;     // activities (visits, lookups, pings) started per second
  double duration = 0;   // if set, overrides rate so the file spans about this many seconds
  uint64_t start_sec = 1704067200;  // 2024-01-01T00:00:00Z
  std::string tunnel;       // "", gtpu, vxlan, geneve, gre, ipip: wrap every frame
  bool tunnel_csum = false; // outer UDP checksums computed
  unsigned tunnel_mtu = 0;  // outer datagrams above this are fragmented (0: never)
  bool small = false;
  bool micro = false;
  // Restrict the ordinary activities to one kind: dns, tls, http, small-http
  // (handshake, one short request with a Host, close), tcp (handshake and close,
  // no payload), icmp. Empty: the usual mix.
  std::string only;
  // A flood mixed into (or, at share 1, replacing) the ordinary traffic:
  // dns-rsub (random-subdomain queries under one domain from spoofed sources,
  // with the domain's popular name mixed in), syn (SYNs from spoofed sources),
  // udp (datagrams from spoofed sources and ports to random ports), sni (TLS
  // connections each naming a new host in its ClientHello), host (HTTP
  // connections each naming a new Host).
  std::string flood;
  double flood_share = 1.0;     // share of the file's packets that are the flood's
  double flood_rate = 200000;   // flood packets per second
  double flood_popular = 0.02;  // dns-rsub/sni/host: share that names the domain's popular name
  std::string flood_domain = "victim-shop.com";
  std::string client_net4 = "10.0.0.0/8";
  std::string client_net6 = "2001:db8:1::/48";
};

struct Summary {
  uint64_t packets = 0, bytes = 0, flows = 0, activities = 0;
  uint64_t names_seen = 0, clients_seen = 0;
  uint64_t tls = 0, http = 0, dns = 0, bulk = 0, icmp = 0, tcp_empty = 0, dhcp = 0;
  uint64_t flood = 0;  // packets of the flood
  uint64_t first_ns = 0, last_ns = 0;
};

// Throws std::runtime_error on bad options or I/O failure.
Summary generate(const Options& o);

}  // namespace amon::gen
