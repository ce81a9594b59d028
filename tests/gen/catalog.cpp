#include "catalog.hpp"

#include <arpa/inet.h>

#include <cstdio>
#include <stdexcept>
#include <unordered_set>

namespace amon::gen {

bool parse_prefix(const std::string& s, Prefix& out) {
  const auto slash = s.find('/');
  if (slash == std::string::npos) return false;
  const std::string a = s.substr(0, slash);
  char* end = nullptr;
  const unsigned long len = std::strtoul(s.c_str() + slash + 1, &end, 10);
  if (!end || *end) return false;
  out = Prefix{};
  if (inet_pton(AF_INET, a.c_str(), out.base.data()) == 1 && len <= 32) {
    out.v6 = false;
  } else if (inet_pton(AF_INET6, a.c_str(), out.base.data()) == 1 && len <= 128) {
    out.v6 = true;
  } else {
    return false;
  }
  out.len = static_cast<unsigned>(len);
  return true;
}

std::string addr_str(const Addr& a, bool v6) {
  char buf[64];
  inet_ntop(v6 ? AF_INET6 : AF_INET, a.data(), buf, sizeof buf);
  return buf;
}

// Host bits drawn at random, prefix bits kept.
static Addr random_in(Rng& r, const Prefix& p) {
  const unsigned bytes = p.v6 ? 16 : 4;
  Addr a = p.base;
  uint8_t rnd[16];
  r.fill(rnd, bytes);
  for (unsigned i = 0; i < bytes; ++i) {
    const unsigned bit0 = i * 8;
    uint8_t keep = 0;
    if (bit0 + 8 <= p.len) keep = 0xff;
    else if (bit0 < p.len) keep = static_cast<uint8_t>(0xff << (8 - (p.len - bit0)));
    a[i] = static_cast<uint8_t>((a[i] & keep) | (rnd[i] & ~keep));
  }
  return a;
}

static bool usable_host(const Addr& a, bool v6) {
  if (v6) return true;
  return a[3] != 0 && a[3] != 255;  // skip network/broadcast-looking hosts
}

// ------------------------------------------------------------------ names

static const char* kWords[] = {
    "cloud", "shop", "news", "mail", "photo", "bank", "travel", "game", "data", "media", "stream", "music", "book",
    "home", "green", "blue", "fast", "smart", "open", "city", "sport", "health", "food", "tech", "net", "star",
    "river", "stone", "north", "sun", "light", "box", "hub", "lab", "works", "point", "line", "wave", "byte",
    "pixel", "market", "trade", "school", "learn", "car", "bike", "rail", "air", "energy", "solar", "garden",
    "pet", "kids", "style", "deal", "buy", "ticket", "radio", "video", "chat", "social", "forum", "wiki", "map",
    "weather", "daily", "press", "post", "times", "insight", "value", "prime", "metro", "global", "local",
    "secure", "pay", "wallet", "code", "dev", "ops", "store", "cart", "film", "tv", "art", "craft", "wood"};
static const char* kSyl[] = {"ka", "ro", "vi", "na", "lo", "te", "mi", "sa", "du", "ber", "lin", "tor", "van",
                             "zen", "qui", "mar", "pol", "ex", "or", "ia", "bo", "ne", "ta", "ri", "go", "fi",
                             "lu", "de", "nor", "sk", "ly", "al", "con", "tri", "ve", "ox", "um", "ak", "el", "is"};
struct Suffix { const char* s; unsigned w; };
static const Suffix kSuffix[] = {
    {"com", 40}, {"org", 7}, {"net", 7}, {"io", 4}, {"de", 6}, {"co.uk", 5}, {"com.au", 3}, {"fr", 3},
    {"it", 3}, {"nl", 2}, {"co.jp", 2}, {"com.br", 2}, {"ca", 2}, {"info", 2}, {"eu", 1}, {"ch", 1},
    {"se", 1}, {"es", 1}, {"pl", 1}, {"org.uk", 1}, {"co", 1}, {"app", 1}, {"dev", 1}, {"tv", 1}};
struct Sub { const char* s; unsigned w; };
static const Sub kSub[] = {
    {"", 16}, {"www.", 26}, {"api.", 6}, {"cdn.", 5}, {"static.", 4}, {"img.", 3}, {"m.", 3}, {"mail.", 2},
    {"login.", 2}, {"app.", 3}, {"assets.", 2}, {"media.", 2}, {"blog.", 2}, {"shop.", 2}, {"docs.", 1},
    {"eu.api.", 1}, {"img1.cdn.", 1}, {"s3.eu-west-1.", 1}, {"a.b.", 1}, {"edge.static.", 1}, {"ws.", 1},
    {"update.", 1}, {"telemetry.", 1}, {"auth.", 1}};
static const char* kCdn[] = {"fastedge-cdn.net", "globalcache.net", "edgeworks-cdn.com", "cloudlayer-cdn.net",
                             "akadns-edge.net"};

static std::string make_label(Rng& r) {
  std::string s;
  switch (r.below(10)) {
    case 0: case 1: case 2: case 3: case 4:
      s = std::string(r.pick(kWords)) + r.pick(kWords);
      break;
    case 5: case 6: case 7:
      for (uint64_t i = 0, n = r.range(2, 4); i < n; ++i) s += r.pick(kSyl);
      break;
    case 8:
      s = std::string(r.pick(kWords)) + "-" + r.pick(kWords);
      break;
    default:
      s = std::string(r.pick(kWords)) + std::to_string(r.range(1, 365));
  }
  return s;
}

std::vector<Service> make_services(Rng& r, size_t n) {
  unsigned sw[std::size(kSuffix)], bw[std::size(kSub)];
  for (size_t i = 0; i < std::size(kSuffix); ++i) sw[i] = kSuffix[i].w;
  for (size_t i = 0; i < std::size(kSub); ++i) bw[i] = kSub[i].w;

  struct Domain { std::string name; std::vector<Addr> v4; Addr v6; uint32_t rtt_us; };
  std::vector<Domain> domains;
  std::unordered_set<std::string> seen_dom, seen_name;
  // Servers sit in documentation space only: TEST-NET-2/3/1 and 2001:db8:ff::/48
  // (192.0.2.53 is left to the resolver).
  static const uint8_t kNets[3][3] = {{198, 51, 100}, {203, 0, 113}, {192, 0, 2}};
  auto server4 = [&] {
    Addr a{};
    const auto& net = kNets[r.below(3)];
    a[0] = net[0], a[1] = net[1], a[2] = net[2];
    do a[3] = static_cast<uint8_t>(r.range(1, 254)); while (a[2] == 2 && a[3] == 53);
    return a;
  };
  auto server6 = [&] {
    Addr a{0x20, 0x01, 0x0d, 0xb8, 0x00, 0xff};
    r.fill(a.data() + 6, 10);
    return a;
  };
  auto new_domain = [&]() -> Domain& {
    for (;;) {
      std::string d = make_label(r) + "." + kSuffix[r.weighted(sw, std::size(sw))].s;
      if (!seen_dom.insert(d).second) continue;
      Domain dom{d, {}, server6(), static_cast<uint32_t>(r.range(2000, 150000))};
      for (uint64_t i = 0, k = r.range(1, 3); i < k; ++i) dom.v4.push_back(server4());
      domains.push_back(std::move(dom));
      return domains.back();
    }
  };

  std::vector<Service> out;
  out.reserve(n);
  while (out.size() < n) {
    // About two names per registrable domain, so an `sld` fallback groups them.
    Domain* d = (domains.empty() || r.chance(0.5)) ? &new_domain() : &domains[r.below(domains.size())];
    std::string fqdn = kSub[r.weighted(bw, std::size(bw))].s + d->name;
    if (!seen_name.insert(fqdn).second) continue;
    Service s;
    s.fqdn = std::move(fqdn);
    s.registrable = d->name;
    s.v4 = d->v4;
    s.v6 = d->v6;
    s.rtt_us = d->rtt_us;
    static const uint32_t kTtl[] = {30, 60, 120, 300, 300, 600, 3600, 86400};
    s.ttl = r.pick(kTtl);
    if (r.chance(0.15)) {
      // CDN-hosted: one or two CNAME hops, then the CDN's own edge addresses.
      std::string label = s.fqdn.substr(0, s.fqdn.find('.'));
      const char* cdn = r.pick(kCdn);
      s.cnames.push_back(s.fqdn + "." + cdn);
      if (r.chance(0.5)) s.cnames.push_back("e" + std::to_string(r.range(100, 99999)) + ".a." + cdn);
      s.v4.clear();
      for (uint64_t i = 0, k = r.range(1, 4); i < k; ++i) s.v4.push_back(server4());
      s.v6 = server6();
      s.ttl = 20;
      s.rtt_us = static_cast<uint32_t>(r.range(1000, 15000));
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Client> make_clients(Rng& r, size_t n, double v6_fraction, const Prefix& p4, const Prefix& p6,
                                 size_t n_ua) {
  std::vector<Client> out;
  out.reserve(n);
  std::unordered_set<std::string> seen;
  size_t count[2] = {0, 0};
  Zipf ua(n_ua, 1.0);
  static const unsigned kTlsW[] = {55, 12, 15, 8, 10};  // Chrome, Firefox, Safari, legacy 1.2, curl
  static const uint32_t kMbps[] = {20, 50, 100, 100, 300, 1000};
  const auto cap = [](const Prefix& p) {
    const unsigned host = (p.v6 ? 128 : 32) - p.len;
    return host >= 40 ? (1ULL << 40) : (1ULL << host) - 2;
  };
  for (size_t i = 0; i < n; ++i) {
    Client c;
    c.v6 = r.chance(v6_fraction);
    const Prefix& p = c.v6 ? p6 : p4;
    if (++count[c.v6] > cap(p) / 2) throw std::runtime_error("client prefix too small for --clients");
    do c.ip = random_in(r, p);
    while (!usable_host(c.ip, c.v6) || !seen.insert(std::string(c.ip.begin(), c.ip.end()) + (c.v6 ? "6" : "4")).second);
    c.mac[0] = 0x02;  // locally administered, unicast
    r.fill(c.mac + 1, 5);
    c.next_port = static_cast<uint16_t>(r.range(32768, 60999));
    c.mbps = r.pick(kMbps);
    c.rtt_us = static_cast<uint32_t>(r.range(300, 20000));
    c.ua = static_cast<uint32_t>(ua.sample(r));
    c.tls = static_cast<uint8_t>(r.weighted(kTlsW, 5));
    out.push_back(c);
  }
  return out;
}

std::vector<std::string> make_user_agents(Rng& r) {
  std::vector<std::string> v;
  const std::string win = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/";
  for (int ver = 125; ver >= 116; --ver) v.push_back(win + std::to_string(ver) + ".0.0.0 Safari/537.36");
  for (int ver = 123; ver >= 118; --ver)
    v.push_back("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/" +
                std::to_string(ver) + ".0.0.0 Safari/537.36");
  for (const char* dev : {"SM-S918B", "Pixel 7", "M2101K6G"})
    for (int ver : {122, 120})
      v.push_back(std::string("Mozilla/5.0 (Linux; Android 13; ") + dev +
                  ") AppleWebKit/537.36 (KHTML, like Gecko) Chrome/" + std::to_string(ver) +
                  ".0.0.0 Mobile Safari/537.36");
  for (int ver : {123, 122, 121, 120, 118, 115})
    v.push_back("Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:" + std::to_string(ver) + ".0) Gecko/20100101 Firefox/" +
                std::to_string(ver) + ".0");
  for (int ver : {123, 121, 115})
    v.push_back("Mozilla/5.0 (X11; Linux x86_64; rv:" + std::to_string(ver) + ".0) Gecko/20100101 Firefox/" +
                std::to_string(ver) + ".0");
  for (const char* ver : {"17.3", "17.2", "17.0", "16.6"})
    v.push_back(std::string("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
                            "Version/") + ver + " Safari/605.1.15");
  for (const char* ver : {"17_3", "17_2", "17_1", "16_6"})
    v.push_back(std::string("Mozilla/5.0 (iPhone; CPU iPhone OS ") + ver +
                " like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/" +
                std::string(ver).replace(2, 1, ".") + " Mobile/15E148 Safari/604.1");
  for (int ver : {122, 121, 120})
    v.push_back(win + std::to_string(ver) + ".0.0.0 Safari/537.36 Edg/" + std::to_string(ver) + ".0.0.0");
  for (const char* s : {"curl/7.88.1", "curl/8.5.0", "Wget/1.21.3", "python-requests/2.31.0", "okhttp/4.12.0",
                        "Go-http-client/1.1", "Debian APT-HTTP/1.3 (2.6.1)", "Microsoft-CryptoAPI/10.0"})
    v.push_back(s);
  // Popularity order is part of the seeded world, not of the list above.
  r.shuffle(v.data(), v.size());
  return v;
}

}  // namespace amon::gen
