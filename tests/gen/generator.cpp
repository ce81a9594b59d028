#include "generator.hpp"

#include <pcap/pcap.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <queue>
#include <stdexcept>
#include <unordered_set>

#include "catalog.hpp"
#include "protos.hpp"
#include "wire.hpp"

namespace amon::gen {
namespace {

constexpr uint64_t kUs = 1000, kMs = 1000000, kSec = 1000000000;

enum class Kind { Tls, Http, Dns, Bulk, Icmp, TcpEmpty, SmallHttp };
enum class Flood { None, DnsRsub, Syn, Udp, Sni, Host };

struct Flow {
  FlowBuf fb;
  uint64_t id = 0;
};

class World {
 public:
  explicit World(const Options& o) : o_(o), main_(substream(o.seed, 0)) {
    Prefix p4, p6;
    if (!parse_prefix(o.client_net4, p4) || p4.v6) throw std::runtime_error("bad --client-net4 " + o.client_net4);
    if (!parse_prefix(o.client_net6, p6) || !p6.v6) throw std::runtime_error("bad --client-net6 " + o.client_net6);
    Rng cat = substream(o.seed, 1);
    uas_ = make_user_agents(cat);
    services_ = make_services(cat, o.names);
    clients_ = make_clients(cat, o.clients, o.v6, p4, p6, uas_.size());
    name_zipf_ = Zipf(services_.size(), o.zipf);
    ua_zipf_ = Zipf(uas_.size(), 1.0);
    router_mac_[0] = 0x02, cat.fill(router_mac_ + 1, 5);
    name_visits_.assign(services_.size(), 0);
    client_active_.assign(clients_.size(), 0);
    if (!o.names_out.empty()) name_clients_.resize(services_.size());
    if (o.tunnel == "gtpu") tunnel_ = Tunnel::GtpU;
    else if (o.tunnel == "vxlan") tunnel_ = Tunnel::Vxlan;
    else if (o.tunnel == "geneve") tunnel_ = Tunnel::Geneve;
    else if (o.tunnel == "gre") tunnel_ = Tunnel::Gre;
    else if (o.tunnel == "ipip") tunnel_ = Tunnel::IpIp;
    else if (!o.tunnel.empty()) throw std::runtime_error("bad --tunnel " + o.tunnel + " (gtpu, vxlan, geneve, gre, ipip)");
    static const char* kOnly[] = {"dns", "tls", "http", "small-http", "tcp", "icmp"};
    static const Kind kOnlyKind[] = {Kind::Dns, Kind::Tls, Kind::Http, Kind::SmallHttp, Kind::TcpEmpty, Kind::Icmp};
    for (size_t i = 0; i < std::size(kOnly); ++i)
      if (o.only == kOnly[i]) only_ = kOnlyKind[i], has_only_ = true;
    if (!o.only.empty() && !has_only_)
      throw std::runtime_error("bad --only " + o.only + " (dns, tls, http, small-http, tcp, icmp)");
    static const char* kFlood[] = {"dns-rsub", "syn", "udp", "sni", "host"};
    for (size_t i = 0; i < std::size(kFlood); ++i)
      if (o.flood == kFlood[i]) flood_ = static_cast<Flood>(i + 1);
    if (!o.flood.empty() && flood_ == Flood::None)
      throw std::runtime_error("bad --flood " + o.flood + " (dns-rsub, syn, udp, sni, host)");
    cat.fill(upstream_mac_ + 1, 5);
    upstream_mac_[0] = 0x02;
  }

  // One flood connection (or datagram) starting at t.
  Flow* flood_flow(Rng& r, uint64_t t);

  // Builds one activity starting at t0; appends its flows to `out`.
  void activity(uint64_t t0, uint64_t index, uint64_t pkt_budget, uint64_t flow_budget, std::vector<Flow*>& out);

  const std::vector<Service>& services() const { return services_; }
  const std::vector<uint64_t>& name_visits() const { return name_visits_; }
  const std::vector<std::unordered_set<uint32_t>>& name_clients() const { return name_clients_; }
  uint64_t clients_seen() const {
    return static_cast<uint64_t>(std::count(client_active_.begin(), client_active_.end(), 1));
  }
  Summary s;

 private:
  Kind pick_kind(Rng& r);
  Path path(Rng& r, uint32_t ci, const Addr& server);
  Tunnel tunnel_ = Tunnel::None;
  const Addr& server_of(Rng& r, const Service& sv, bool v6) { return v6 ? sv.v6 : sv.v4[r.below(sv.v4.size())]; }
  void visited(uint32_t name, uint32_t client) {
    ++name_visits_[name];
    if (!name_clients_.empty()) name_clients_[name].insert(client);
  }
  Flow* dns_flow(Rng& r, uint64_t t, uint32_t ci, uint32_t ni, bool small, uint64_t& answered_at);
  Flow* tls_flow(Rng& r, uint64_t t, uint32_t ci, uint32_t ni, size_t bulk_bytes);
  Flow* http_flow(Rng& r, uint64_t t, uint32_t ci, uint32_t ni, size_t bulk_bytes);
  Flow* icmp_flow(Rng& r, uint64_t t, uint32_t ci, uint32_t ni);
  Flow* dhcp_flow(Rng& r, uint64_t& t, uint32_t ci);
  Flow* tcp_empty_flow(Rng& r, uint64_t t, uint32_t ci, uint32_t ni, bool with_http);
  std::string http_path(Rng& r, bool bulk);
  uint16_t eport(uint32_t ci) {
    uint16_t& p = clients_[ci].next_port;
    uint16_t v = p;
    p = p >= 60999 ? 32768 : static_cast<uint16_t>(p + 1);
    return v;
  }
  uint64_t ns_per_kb(uint32_t ci) const { return 8000000ULL / clients_[ci].mbps; }
  uint64_t rtt(Rng& r, uint32_t ci, uint32_t ni) const {
    return (clients_[ci].rtt_us + services_[ni].rtt_us) * kUs + r.below(2 * kMs);
  }
  Flow* new_flow() {
    auto* f = new Flow;
    f->id = next_flow_id_++;
    ++s.flows;
    return f;
  }

  const Options& o_;
  Rng main_;
  std::vector<std::string> uas_;
  std::vector<Service> services_;
  std::vector<Client> clients_;
  Zipf name_zipf_, ua_zipf_;
  uint8_t router_mac_[6]{};
  std::vector<uint64_t> name_visits_;
  std::vector<uint8_t> client_active_;
  std::vector<std::unordered_set<uint32_t>> name_clients_;
  uint64_t next_flow_id_ = 0;
  Kind only_ = Kind::Dns;
  bool has_only_ = false;
  Flood flood_ = Flood::None;
  uint8_t upstream_mac_[6]{};
};

Kind World::pick_kind(Rng& r) {
  if (has_only_) return only_;
  if (o_.small) {
    static const unsigned w[] = {45, 30, 15, 10};
    static const Kind k[] = {Kind::Dns, Kind::TcpEmpty, Kind::SmallHttp, Kind::Icmp};
    return k[r.weighted(w, 4)];
  }
  if (r.chance(o_.bulk)) return Kind::Bulk;
  static const unsigned w[] = {52, 26, 17, 5};
  static const Kind k[] = {Kind::Tls, Kind::Http, Kind::Dns, Kind::Icmp};
  return k[r.weighted(w, 4)];
}

Path World::path(Rng& r, uint32_t ci, const Addr& server) {
  const Client& c = clients_[ci];
  Path p;
  p.tunnel = tunnel_;
  p.tunnel_csum = o_.tunnel_csum;
  p.tunnel_mtu = uint16_t(o_.tunnel_mtu);
  p.v6 = c.v6;
  std::memcpy(p.cmac, c.mac, 6);
  std::memcpy(p.smac, router_mac_, 6);
  std::memcpy(p.cip, c.ip.data(), 16);
  std::memcpy(p.sip, server.data(), 16);
  if (r.chance(o_.vlan)) {
    // The tag follows the client's access VLAN; QinQ adds a provider tag outside it.
    const uint16_t vid = static_cast<uint16_t>(10 + ci % 8 * 10);
    if (r.chance(o_.qinq)) {
      p.ntags = 2;
      p.tpid[0] = 0x88a8, p.tci[0] = static_cast<uint16_t>(100 + ci % 4);
      p.tpid[1] = 0x8100, p.tci[1] = vid;
    } else {
      p.ntags = 1;
      p.tpid[0] = 0x8100, p.tci[0] = vid;
    }
  }
  static const uint8_t kServerTtl[] = {47, 50, 52, 54, 56, 58, 116, 118, 120, 243};
  p.cttl = c.v6 ? 64 : (c.tls == 2 ? 64 : (ci % 3 == 0 ? 128 : 64));
  p.sttl = r.pick(kServerTtl);
  p.cipid = static_cast<uint16_t>(r.next());
  p.sipid = static_cast<uint16_t>(r.next());
  // Not drawn from r: the untunnelled traffic of a seed stays the same.
  p.tunnel_ipid = static_cast<uint16_t>(p.cipid * 40503u ^ p.sipid);
  p.cflow = static_cast<uint32_t>(r.next()) & 0xfffff;
  p.sflow = static_cast<uint32_t>(r.next()) & 0xfffff;
  return p;
}

static void put_udp(Bytes& seg, uint16_t sp, uint16_t dp, const Bytes& payload) {
  seg.resize(8 + payload.size());
  seg[0] = static_cast<uint8_t>(sp >> 8), seg[1] = static_cast<uint8_t>(sp);
  seg[2] = static_cast<uint8_t>(dp >> 8), seg[3] = static_cast<uint8_t>(dp);
  seg[4] = static_cast<uint8_t>(seg.size() >> 8), seg[5] = static_cast<uint8_t>(seg.size());
  seg[6] = seg[7] = 0;
  std::memcpy(seg.data() + 8, payload.data(), payload.size());
}

Flow* World::dns_flow(Rng& r, uint64_t t, uint32_t ci, uint32_t ni, bool small, uint64_t& answered_at) {
  const Client& c = clients_[ci];
  const Service& sv = services_[ni];
  Addr resolver{};
  if (c.v6) resolver = Addr{0x20, 0x01, 0x0d, 0xb8, 0x00, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x53};
  else resolver = Addr{192, 0, 2, 53};
  Flow* f = new_flow();
  Path p = path(r, ci, resolver);
  const uint16_t port = eport(ci);
  // Stub resolvers ask for A and AAAA together from one socket; the family the
  // client then connects with decides which answer it uses.
  std::vector<uint16_t> types{c.v6 ? kTypeAAAA : kTypeA};
  if (!small && r.chance(0.4)) types.push_back(c.v6 ? kTypeA : kTypeAAAA);
  const bool edns = !small && r.chance(0.6);
  const uint64_t rtt = c.rtt_us * kUs + r.range(200 * kUs, 30 * kMs);
  uint64_t tq = t;
  answered_at = t;
  Bytes seg;
  for (uint16_t qt : types) {
    const uint16_t id = static_cast<uint16_t>(r.next());
    put_udp(seg, port, 53, dns_query(id, sv.fqdn, qt, edns));
    emit(f->fb, tq, p, true, kUdp, seg.data(), seg.size());
    std::vector<Addr> addrs;
    if (qt == kTypeA) {
      size_t n = small ? 1 : sv.v4.size();
      addrs.assign(sv.v4.begin(), sv.v4.begin() + n);
    } else {
      addrs.push_back(sv.v6);
    }
    const auto& cn = small ? std::vector<std::string>{} : sv.cnames;
    const uint64_t ta = tq + rtt + r.below(500 * kUs);
    put_udp(seg, 53, port, dns_response(id, sv.fqdn, qt, edns, cn, addrs, sv.ttl));
    emit(f->fb, ta, p, false, kUdp, seg.data(), seg.size());
    answered_at = std::max(answered_at, ta);
    tq += r.range(20 * kUs, 150 * kUs);
  }
  visited(ni, ci);
  ++s.dns;
  return f;
}

std::string World::http_path(Rng& r, bool bulk) {
  static const char* kW[] = {"news", "sport", "travel", "photos", "weather", "video", "products", "blog", "help",
                             "about", "search", "account", "cart", "music", "events", "jobs"};
  static const char* kBulk[] = {"/downloads/debian-12.5.0-amd64-netinst.iso", "/files/backup-2024.zip",
                                "/pub/dataset-part1.bin", "/releases/app-4.2.1-setup.bin",
                                "/media/archive/videos.zip"};
  if (bulk) return r.pick(kBulk);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r.next()));
  switch (r.below(9)) {
    case 0: case 1: return "/";
    case 2: return "/index.html";
    case 3: return std::string("/") + r.pick(kW) + "/" + r.pick(kW) + "-" + std::to_string(r.range(1000, 99999)) + ".html";
    case 4: return std::string("/static/js/app.") + std::string(hex, 8) + ".js";
    case 5: return std::string("/css/site.") + std::string(hex, 6) + ".css";
    case 6: return std::string("/api/v1/") + r.pick(kW) + "?id=" + std::to_string(r.range(1, 999999));
    case 7: return std::string("/search?q=") + r.pick(kW) + "+" + r.pick(kW);
    default: return std::string("/") + r.pick(kW) + "/";
  }
}

static size_t body_size(Rng& r) {
  switch (r.below(10)) {
    case 0: case 1: case 2: case 3: return r.range(200, 2000);
    case 4: case 5: case 6: case 7: return r.range(2000, 20000);
    default: return r.range(20000, 200000);
  }
}

Flow* World::tls_flow(Rng& r, uint64_t t, uint32_t ci, uint32_t ni, size_t bulk_bytes) {
  const Client& c = clients_[ci];
  const Service& sv = services_[ni];
  Flow* f = new_flow();
  Path p = path(r, ci, server_of(r, sv, c.v6));
  Tcp tcp(f->fb, p, r, eport(ci), 443);
  const uint64_t rt = rtt(r, ci, ni), kb = ns_per_kb(ci);
  tcp.syn_exchange(t, rt, r);
  const TlsHello ch = tls_client_hello(r, sv.fqdn, static_cast<TlsProfile>(c.tls));
  t = tcp.transfer(t + r.range(30 * kUs, 300 * kUs), true, ch.record, rt, kb, r);
  t = tcp.transfer(t + rt + r.range(100 * kUs, 3 * kMs), false, tls_server_flight(r, ch), rt, kb, r);
  t = tcp.transfer(t + r.range(200 * kUs, 2 * kMs), true, tls_client_finish(r, ch, r.range(180, 900)), rt, kb, r);
  const unsigned exchanges = bulk_bytes ? 1 : static_cast<unsigned>(r.range(1, 4));
  for (unsigned i = 0; i < exchanges; ++i) {
    if (i) {
      t += r.range(1 * kMs, 800 * kMs);
      t = tcp.transfer(t, true, tls_app_data(r, r.range(120, 900)), rt, kb, r);
    }
    const size_t n = bulk_bytes ? bulk_bytes : body_size(r);
    t = tcp.transfer(t + rt + r.range(200 * kUs, 20 * kMs), false, tls_app_data(r, n), rt, kb, r);
  }
  t += r.range(5 * kMs, 2 * kSec);
  tcp.close(t, rt, r);
  visited(ni, ci);
  return f;
}

Flow* World::http_flow(Rng& r, uint64_t t, uint32_t ci, uint32_t ni, size_t bulk_bytes) {
  const Client& c = clients_[ci];
  const Service& sv = services_[ni];
  Flow* f = new_flow();
  Path p = path(r, ci, server_of(r, sv, c.v6));
  Tcp tcp(f->fb, p, r, eport(ci), 80);
  const uint64_t rt = rtt(r, ci, ni), kb = ns_per_kb(ci);
  tcp.syn_exchange(t, rt, r);
  HttpReq q;
  q.host = sv.fqdn;
  // A user keeps one browser; apps and tools on the same host show up now and then.
  q.ua = r.chance(0.85) ? uas_[c.ua] : uas_[ua_zipf_.sample(r)];
  if (r.chance(0.4)) {
    char sid[40];
    std::snprintf(sid, sizeof sid, "sid=%016llx%08x", static_cast<unsigned long long>(substream(o_.seed, 0x5eed0000000ULL + ci * 1000003ULL + ni).next()), ci);
    q.cookie = sid;
    if (r.chance(0.3)) q.cookie += "; lang=en; consent=1";
  }
  const unsigned reqs = bulk_bytes ? 1 : static_cast<unsigned>(r.range(1, 3));
  t += r.range(30 * kUs, 300 * kUs);
  for (unsigned i = 0; i < reqs; ++i) {
    if (i) t += r.range(1 * kMs, 500 * kMs);
    q.path = http_path(r, bulk_bytes != 0);
    q.referer = r.chance(0.3) ? "http://" + services_[name_zipf_.sample(r)].fqdn + "/" : std::string();
    const std::string req = http_request(q, r);
    t = tcp.transfer(t, true, {reinterpret_cast<const uint8_t*>(req.data()), req.size()}, rt, kb, r);
    static const unsigned sw[] = {85, 5, 3, 5, 2};
    static const int st[] = {200, 304, 301, 404, 204};
    const int status = bulk_bytes ? 200 : st[r.weighted(sw, 5)];
    const size_t n = bulk_bytes ? bulk_bytes : status == 200 ? body_size(r) : r.range(0, 400);
    t = tcp.transfer(t + rt + r.range(200 * kUs, 30 * kMs), false, http_response(r, status, n, q.path), rt, kb, r);
  }
  t += r.range(5 * kMs, 2 * kSec);
  tcp.close(t, rt, r);
  visited(ni, ci);
  return f;
}

Flow* World::icmp_flow(Rng& r, uint64_t t, uint32_t ci, uint32_t ni) {
  const Client& c = clients_[ci];
  Flow* f = new_flow();
  Path p = path(r, ci, server_of(r, services_[ni], c.v6));
  const uint64_t rt = rtt(r, ci, ni);
  const uint16_t id = static_cast<uint16_t>(r.next());
  const unsigned count = static_cast<unsigned>(r.range(1, 4));
  const size_t plen = o_.small ? r.range(8, 32) : 56;  // 56: ping's default
  uint8_t m[8 + 64]{};
  for (unsigned seq = 1; seq <= count; ++seq) {
    m[0] = c.v6 ? 128 : 8;
    m[1] = 0, m[2] = m[3] = 0;
    m[4] = static_cast<uint8_t>(id >> 8), m[5] = static_cast<uint8_t>(id);
    m[6] = static_cast<uint8_t>(seq >> 8), m[7] = static_cast<uint8_t>(seq);
    r.fill(m + 8, 8);  // ping puts its send time here
    for (size_t i = 8; i < plen; ++i) m[8 + i] = static_cast<uint8_t>(i);
    emit(f->fb, t, p, true, c.v6 ? kIcmp6 : kIcmp, m, 8 + plen);
    m[0] = c.v6 ? 129 : 0;
    m[2] = m[3] = 0;
    emit(f->fb, t + rt, p, false, c.v6 ? kIcmp6 : kIcmp, m, 8 + plen);
    t += kSec + r.below(2 * kMs);
  }
  ++s.icmp;
  return f;
}

// The client's lease before its first activity: the address it then uses is
// the one DHCP gave it (yiaddr, or the IA_NA address), as on a real network.
Flow* World::dhcp_flow(Rng& r, uint64_t& t, uint32_t ci) {
  const Client& c = clients_[ci];
  DhcpLease l;
  std::memcpy(l.mac, c.mac, 6);
  std::memcpy(l.server_mac, router_mac_, 6);
  l.addr = c.ip;
  l.server = c.ip;
  if (c.v6) {
    std::memset(l.server.data() + 8, 0, 8);
    l.server[15] = 1;
  } else {
    l.server[3] = 1;
  }
  l.xid = static_cast<uint32_t>(r.next());
  l.domain = "home.arpa";
  // Host names and vendor classes as the common client stacks send them.
  static const char* kPeople[] = {"Alices", "Bobs", "Carols", "Daves", "Erins", "Franks", "Graces", "Heidis"};
  static const char* kApple[] = {"iPhone", "iPad", "MacBook-Pro", "MacBook-Air"};
  static const char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  char buf[64];
  switch (static_cast<TlsProfile>(c.tls)) {
    case TlsProfile::Safari:
      l.host = std::string(r.pick(kPeople)) + "-" + r.pick(kApple);
      l.vendor = "dhcpcd-5.5.6";
      break;
    case TlsProfile::Legacy12:
      std::snprintf(buf, sizeof buf, "android-%016llx", static_cast<unsigned long long>(r.next()));
      l.host = buf;
      l.vendor = "android-dhcp-13";
      break;
    case TlsProfile::Curl:
      std::snprintf(buf, sizeof buf, "srv-%02x%02x%02x", c.mac[3], c.mac[4], c.mac[5]);
      l.host = buf;
      l.vendor = "dhcpcd-9.4.1:Linux-6.1.0-18-amd64:x86_64:GenuineIntel";
      break;
    default:
      l.host = "DESKTOP-";
      for (int i = 0; i < 7; ++i) l.host += kAlnum[r.below(sizeof kAlnum - 1)];
      l.vendor = "MSFT 5.0";
  }
  Flow* f = new_flow();
  // Client frames go to everyone (broadcast, or All_DHCP_Relay_Agents_and_Servers);
  // the server answers the client's MAC from its own address.
  Path pc = path(r, ci, l.server), ps = pc;
  if (c.v6) {
    static const uint8_t kLinkLocal[8] = {0xfe, 0x80};
    std::memcpy(pc.cip, kLinkLocal, 8);
    pc.cip[8] = c.mac[0] ^ 0x02, pc.cip[9] = c.mac[1], pc.cip[10] = c.mac[2];  // EUI-64
    pc.cip[11] = 0xff, pc.cip[12] = 0xfe;
    pc.cip[13] = c.mac[3], pc.cip[14] = c.mac[4], pc.cip[15] = c.mac[5];
    static const uint8_t kAllServers[16] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2};
    std::memcpy(pc.sip, kAllServers, 16);
    static const uint8_t kMcastMac[6] = {0x33, 0x33, 0, 1, 0, 2};
    std::memcpy(pc.smac, kMcastMac, 6);
    std::memcpy(ps.cip, pc.cip, 16);
    std::memcpy(ps.sip, kLinkLocal, 8);
    std::memset(ps.sip + 8, 0, 8);
    ps.sip[15] = 1;
    pc.cttl = 1;  // link-scoped multicast: the stacks send it with hop limit 1
    ps.sttl = 64;
  } else {
    std::memset(pc.cip, 0, 16);
    std::memset(pc.sip, 0xff, 4);
    std::memset(pc.smac, 0xff, 6);
    std::memcpy(ps.cip, c.ip.data(), 4);
    std::memcpy(ps.sip, l.server.data(), 4);
    pc.cttl = 64, ps.sttl = 64;
  }
  const uint16_t cport = c.v6 ? 546 : 68, sport = c.v6 ? 547 : 67;
  // Discover/Offer/Request/ACK, or Solicit/Advertise/Request/Reply.
  static const uint8_t kV4[4] = {1, 2, 3, 5}, kV6[4] = {1, 2, 3, 7};
  Bytes seg;
  for (unsigned i = 0; i < 4; ++i) {
    const uint8_t type = c.v6 ? kV6[i] : kV4[i];
    const bool from_client = i % 2 == 0;
    const Bytes msg = c.v6 ? dhcp6_message(type, l) : dhcp4_message(type, l);
    put_udp(seg, from_client ? cport : sport, from_client ? sport : cport, msg);
    emit(f->fb, t, from_client ? pc : ps, from_client, kUdp, seg.data(), seg.size());
    t += from_client ? r.range(500 * kUs, 5 * kMs) : r.range(50 * kUs, 400 * kUs);
  }
  ++s.dhcp;
  return f;
}

Flow* World::tcp_empty_flow(Rng& r, uint64_t t, uint32_t ci, uint32_t ni, bool with_http) {
  const Client& c = clients_[ci];
  const Service& sv = services_[ni];
  Flow* f = new_flow();
  Path p = path(r, ci, server_of(r, sv, c.v6));
  Tcp tcp(f->fb, p, r, eport(ci), with_http ? 80 : (r.chance(0.7) ? 443 : 80));
  const uint64_t rt = rtt(r, ci, ni), kb = ns_per_kb(ci);
  tcp.syn_exchange(t, rt, r);
  if (with_http) {
    // The smallest request a client may send, and a bodiless answer: frames stay
    // near 100 bytes while still carrying a Host.
    const std::string req = "GET / HTTP/1.1\r\nHost: " + sv.fqdn + "\r\n\r\n";
    t = tcp.transfer(t + r.range(30 * kUs, 300 * kUs), true, {reinterpret_cast<const uint8_t*>(req.data()), req.size()}, rt, kb, r);
    static const char resp[] = "HTTP/1.1 204 No Content\r\n\r\n";
    t = tcp.transfer(t + rt, false, {reinterpret_cast<const uint8_t*>(resp), sizeof resp - 1}, rt, kb, r);
    visited(ni, ci);
    ++s.http;
  } else {
    ++s.tcp_empty;
  }
  t += r.range(1 * kMs, 300 * kMs);
  if (!with_http && r.chance(0.3)) {
    tcp.seg(t, true, kRst | kAck);
  } else {
    tcp.close(t, rt, r);
  }
  return f;
}

// Floods come from many sources: spoofed at random for what needs no answer
// (queries, SYNs, datagrams), a botnet's spread of real addresses for what
// needs a handshake (the TLS and HTTP floods). Every source is a new user to
// the anonymizer, every random label a new value.
Flow* World::flood_flow(Rng& r, uint64_t t) {
  static const Addr kResolver{192, 0, 2, 53}, kVictim{198, 51, 100, 80};
  Flow* f = new_flow();
  Path p;
  p.tunnel = tunnel_;
  p.tunnel_csum = o_.tunnel_csum;
  p.tunnel_mtu = uint16_t(o_.tunnel_mtu);
  std::memcpy(p.cmac, upstream_mac_, 6);
  std::memcpy(p.smac, router_mac_, 6);
  // Any unicast IPv4 address outside 0/8, 10/8 and 127/8.
  const uint32_t a = static_cast<uint32_t>(r.next());
  p.cip[0] = static_cast<uint8_t>(1 + (a >> 24) % 223);
  if (p.cip[0] == 10 || p.cip[0] == 127) ++p.cip[0];
  p.cip[1] = static_cast<uint8_t>(a >> 16), p.cip[2] = static_cast<uint8_t>(a >> 8), p.cip[3] = static_cast<uint8_t>(a);
  std::memcpy(p.sip, (flood_ == Flood::DnsRsub ? kResolver : kVictim).data(), 4);
  static const uint8_t kTtl[] = {44, 51, 57, 64, 113, 116, 128, 238};
  p.cttl = r.pick(kTtl);
  p.sttl = 64;
  p.cipid = static_cast<uint16_t>(r.next());
  p.sipid = static_cast<uint16_t>(r.next());
  p.tunnel_ipid = static_cast<uint16_t>(p.cipid * 40503u ^ p.sipid);
  const uint16_t sport = static_cast<uint16_t>(r.range(1024, 65535));
  // A fresh 12-letter label under the attacked domain, or its popular name.
  auto name = [&] {
    if (r.chance(o_.flood_popular)) return "www." + o_.flood_domain;
    std::string l(12, 'a');
    for (char& c : l) c = static_cast<char>('a' + r.below(26));
    return l + "." + o_.flood_domain;
  };
  Bytes seg;
  switch (flood_) {
    case Flood::DnsRsub:
      put_udp(seg, sport, 53, dns_query(static_cast<uint16_t>(r.next()), name(), kTypeA, r.chance(0.5)));
      emit(f->fb, t, p, true, kUdp, seg.data(), seg.size());
      break;
    case Flood::Syn: {
      Tcp tcp(f->fb, p, r, sport, r.chance(0.5) ? 80 : 443);
      tcp.seg(t, true, kSyn);
      break;
    }
    case Flood::Udp: {
      Bytes pl(r.range(16, 120));
      r.fill(pl.data(), pl.size());
      put_udp(seg, sport, static_cast<uint16_t>(r.range(1, 65535)), pl);
      emit(f->fb, t, p, true, kUdp, seg.data(), seg.size());
      break;
    }
    case Flood::Sni: {
      Tcp tcp(f->fb, p, r, sport, 443);
      const uint64_t rt = r.range(5 * kMs, 80 * kMs);
      tcp.syn_exchange(t, rt, r);
      const TlsHello ch = tls_client_hello(r, name(), static_cast<TlsProfile>(r.below(5)));
      t = tcp.transfer(t + r.range(30 * kUs, 300 * kUs), true, ch.record, rt, 80, r);
      tcp.seg(t + rt, false, kRst | kAck);
      break;
    }
    case Flood::Host: {
      Tcp tcp(f->fb, p, r, sport, 80);
      const uint64_t rt = r.range(5 * kMs, 80 * kMs);
      tcp.syn_exchange(t, rt, r);
      const std::string req = "GET / HTTP/1.1\r\nHost: " + name() + "\r\n\r\n";
      t = tcp.transfer(t + r.range(30 * kUs, 300 * kUs), true, {reinterpret_cast<const uint8_t*>(req.data()), req.size()}, rt, 80, r);
      static const char resp[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
      t = tcp.transfer(t + rt, false, {reinterpret_cast<const uint8_t*>(resp), sizeof resp - 1}, rt, 80, r);
      tcp.close(t, rt, r);
      break;
    }
    case Flood::None: break;
  }
  f->fb.sort_by_time();
  s.flood += f->fb.pkts.size();
  return f;
}

void World::activity(uint64_t t0, uint64_t index, uint64_t pkt_budget, uint64_t flow_budget, std::vector<Flow*>& out) {
  Rng r = substream(o_.seed, index + 2);
  const Kind k = pick_kind(main_);
  const uint32_t ci = static_cast<uint32_t>(main_.below(clients_.size()));
  const uint32_t ni = static_cast<uint32_t>(name_zipf_.sample(main_));
  const bool first = !client_active_[ci];
  client_active_[ci] = 1;
  ++s.activities;
  const bool tcp_visit = k == Kind::Tls || k == Kind::Http || k == Kind::Bulk;
  uint64_t t = t0;
  // Without --dhcp nothing below draws from r, so files stay byte-identical.
  // An activity makes at most two flows: the lease needs a third.
  if (o_.dhcp > 0 && first && (flow_budget == 0 || flow_budget > 2) && r.chance(o_.dhcp)) {
    out.push_back(dhcp_flow(r, t, ci));
    if (flow_budget) --flow_budget;
    t += r.range(1 * kMs, 50 * kMs);
  }
  // Browsers answer most lookups from their cache; the rest go to the resolver
  // first, and the connection waits for its answer.
  if (k == Kind::Dns || (!has_only_ && tcp_visit && flow_budget != 1 && r.chance(0.6))) {
    uint64_t answered;
    out.push_back(dns_flow(r, t, ci, ni, o_.small, answered));
    t = answered + r.range(100 * kUs, 3 * kMs);
  }
  switch (k) {
    case Kind::Tls: out.push_back(tls_flow(r, t, ci, ni, 0)), ++s.tls; break;
    case Kind::Http: out.push_back(http_flow(r, t, ci, ni, 0)), ++s.http; break;
    case Kind::Bulk: {
      // Bulk is what fills links: 0.2-4 MB in full-size segments. Under a packet
      // budget, shrink it (about 1.5 packets per 1448 bytes with the ACKs).
      size_t n = r.range(200000, 4000000);
      if (pkt_budget) n = std::min<size_t>(n, std::max<uint64_t>(pkt_budget * 950, 64000));
      out.push_back(r.chance(0.5) ? tls_flow(r, t, ci, ni, n) : http_flow(r, t, ci, ni, n));
      ++s.bulk;
      break;
    }
    case Kind::Icmp: out.push_back(icmp_flow(r, t, ci, ni)); break;
    case Kind::TcpEmpty: out.push_back(tcp_empty_flow(r, t, ci, ni, false)); break;
    case Kind::SmallHttp: out.push_back(tcp_empty_flow(r, t, ci, ni, true)); break;
    case Kind::Dns: break;
  }
  for (Flow* f : out) f->fb.sort_by_time();
}

struct HeapItem {
  uint64_t ts;
  uint64_t id;
  Flow* f;
  size_t idx;
  bool operator>(const HeapItem& b) const { return ts != b.ts ? ts > b.ts : id > b.id; }
};

}  // namespace

Summary generate(const Options& o) {
  if (o.clients == 0 || o.names == 0) throw std::runtime_error("--clients and --names must be positive");
  World w(o);

  pcap_t* dead = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, 65535,
                                                      o.micro ? PCAP_TSTAMP_PRECISION_MICRO : PCAP_TSTAMP_PRECISION_NANO);
  if (!dead) throw std::runtime_error("pcap_open_dead failed");
  FILE* fp = std::fopen(o.out.c_str(), "wb");
  if (!fp) {
    pcap_close(dead);
    throw std::runtime_error("cannot open " + o.out + ": " + std::strerror(errno));
  }
  static char iobuf[1 << 20];
  std::setvbuf(fp, iobuf, _IOFBF, sizeof iobuf);
  pcap_dumper_t* dump = pcap_dump_fopen(dead, fp);
  if (!dump) {
    std::fclose(fp);
    pcap_close(dead);
    throw std::runtime_error(std::string("pcap_dump_fopen: ") + pcap_geterr(dead));
  }

  const uint64_t target_pkts = (o.packets == 0 && o.flows == 0) ? 10000 : o.packets;
  std::priority_queue<HeapItem, std::vector<HeapItem>, std::greater<HeapItem>> heap;
  Rng sched = substream(o.seed, 0x7157);
  uint64_t next_act = o.start_sec * kSec, planned = 0, acts = 0;
  uint64_t last_out = 0;
  std::vector<Flow*> fresh;
  Summary& s = w.s;
  s.first_ns = next_act;
  // The flood runs on its own clock and its own random streams, so the
  // ordinary traffic of a seed is the same with or without it.
  const bool flooding = !o.flood.empty() && o.flood_share > 0;
  const bool ordinary = !flooding || o.flood_share < 1;
  Rng flood_sched = substream(o.seed, 0xf100d);
  uint64_t next_flood = next_act, floods = 0;

  while (true) {
    const uint64_t all = planned + s.flood;
    const bool more = target_pkts ? all < target_pkts : s.flows < o.flows;
    if (more && flooding && (!ordinary || next_flood < next_act) && (heap.empty() || next_flood <= heap.top().ts)) {
      Rng r = substream(o.seed, 0xf100d00000000ULL + floods++);
      Flow* f = w.flood_flow(r, next_flood);
      heap.push({f->fb.pkts[0].ts, f->id, f, 0});
      // At a share below 1 the flood keeps that share of the ordinary
      // traffic's packet rate so far; alone it runs at --flood-rate.
      double pps = o.flood_rate;
      if (ordinary) {
        const double secs = std::max(1e-3, static_cast<double>(next_act - s.first_ns) / 1e9);
        pps = std::max(1.0, static_cast<double>(planned) / secs * o.flood_share / (1 - o.flood_share));
      }
      const uint64_t mean = std::max<uint64_t>(1, static_cast<uint64_t>(1e9 * f->fb.pkts.size() / pps));
      next_flood += flood_sched.below(2 * mean + 1);
      continue;
    }
    if (more && ordinary && (heap.empty() || next_act <= heap.top().ts)) {
      fresh.clear();
      const uint64_t pb = target_pkts ? target_pkts - std::min(planned + s.flood, target_pkts) : 0;
      const uint64_t fb = o.flows ? o.flows - s.flows : 0;
      w.activity(next_act, acts++, pb, fb, fresh);
      for (Flow* f : fresh) {
        planned += f->fb.pkts.size();
        heap.push({f->fb.pkts[0].ts, f->id, f, 0});
      }
      // Mean gap between activity starts; under --duration it follows what the
      // activities so far cost, so the file ends near the requested span.
      double gap_ns = 1e9 / o.rate;
      if (o.duration > 0) {
        const double per_act = target_pkts ? static_cast<double>(planned) / static_cast<double>(acts)
                                           : static_cast<double>(s.flows) / static_cast<double>(acts);
        const double total = target_pkts ? static_cast<double>(target_pkts) : static_cast<double>(o.flows);
        gap_ns = o.duration * 1e9 * per_act / total;
      }
      const uint64_t mean = std::max<uint64_t>(1, static_cast<uint64_t>(gap_ns));
      next_act += sched.below(2 * mean + 1);
      continue;
    }
    if (heap.empty()) break;
    HeapItem it = heap.top();
    heap.pop();
    const PktRef& pr = it.f->fb.pkts[it.idx];
    // Capture files promise non-decreasing time; a strict step keeps tools that
    // compute rates from dividing by zero.
    uint64_t ts = o.micro ? pr.ts / 1000 : pr.ts;
    if (s.packets && ts <= last_out) ts = last_out + 1;
    last_out = ts;
    pcap_pkthdr h{};
    const uint64_t unit = o.micro ? 1000000 : 1000000000;
    h.ts.tv_sec = static_cast<time_t>(ts / unit);
    h.ts.tv_usec = static_cast<suseconds_t>(ts % unit);
    h.caplen = h.len = pr.len;
    pcap_dump(reinterpret_cast<u_char*>(dump), &h, it.f->fb.bytes.data() + pr.off);
    ++s.packets;
    s.bytes += pr.len;
    if (++it.idx < it.f->fb.pkts.size()) {
      it.ts = it.f->fb.pkts[it.idx].ts;
      heap.push(it);
    } else {
      delete it.f;
    }
  }
  s.last_ns = o.micro ? last_out * 1000 : last_out;
  const bool write_err = pcap_dump_flush(dump) != 0 || std::ferror(fp);
  pcap_dump_close(dump);
  pcap_close(dead);
  if (write_err) throw std::runtime_error("write error on " + o.out);

  for (uint64_t v : w.name_visits()) s.names_seen += v != 0;
  s.clients_seen = w.clients_seen();

  if (!o.names_out.empty()) {
    FILE* nf = std::fopen(o.names_out.c_str(), "w");
    if (!nf) throw std::runtime_error("cannot open " + o.names_out);
    std::fprintf(nf, "# rank\tname\tregistrable\tvisits\tdistinct_clients\n");
    const auto& sv = w.services();
    for (size_t i = 0; i < sv.size(); ++i)
      std::fprintf(nf, "%zu\t%s\t%s\t%llu\t%zu\n", i + 1, sv[i].fqdn.c_str(), sv[i].registrable.c_str(),
                   static_cast<unsigned long long>(w.name_visits()[i]), w.name_clients()[i].size());
    if (std::fclose(nf) != 0) throw std::runtime_error("write error on " + o.names_out);
  }
  return s;
}

}  // namespace amon::gen
