// The populations amon-gen draws from: clients, named services and their
// servers, user agents. Built once from the seed, before any packet.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "rng.hpp"

namespace amon::gen {

using Addr = std::array<uint8_t, 16>;  // IPv4 in the first 4 bytes

struct Prefix {
  bool v6 = false;
  Addr base{};
  unsigned len = 0;
};
// "10.0.0.0/8" or "2001:db8:1::/48"; false on anything else.
bool parse_prefix(const std::string& s, Prefix& out);
std::string addr_str(const Addr& a, bool v6);

struct Service {
  std::string fqdn;         // what DNS, SNI and Host carry
  std::string registrable;  // its registrable domain (label + public suffix)
  std::vector<std::string> cnames;  // chain DNS answers walk before the addresses
  std::vector<Addr> v4;
  Addr v6{};
  uint32_t ttl = 300;
  uint32_t rtt_us = 20000;  // path RTT beyond the client's access link
};

struct Client {
  bool v6 = false;
  Addr ip{};
  uint8_t mac[6]{};
  uint16_t next_port = 0;
  uint32_t mbps = 100;
  uint32_t rtt_us = 2000;  // access-link share of the RTT
  uint32_t ua = 0;         // rank of the client's usual User-Agent
  uint8_t tls = 0;         // TlsProfile of its browser
};

// `n` distinct names in popularity-rank order (index 0 is the most popular).
std::vector<Service> make_services(Rng& r, size_t n);
std::vector<Client> make_clients(Rng& r, size_t n, double v6_fraction, const Prefix& p4, const Prefix& p6,
                                 size_t n_ua);
// About 50 User-Agent strings in popularity-rank order.
std::vector<std::string> make_user_agents(Rng& r);

}  // namespace amon::gen
