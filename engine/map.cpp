// amon map: what a consumer's Crypto-PAn makes of addresses and prefixes,
// so that IDS rules and HOME_NET can be written in the anonymized space.
// The mapping is the runtime's own: the same class-preserving Crypto-PAn
// (special-purpose addresses keep their class, doc/cryptopan.md) and, for a
// rotating key, the same epoch key derivation (epoch = time / period).
#include "map.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "config.h"
#include "cryptopan.h"
#include "policy.h"

namespace amon {

namespace {

int map_error(const std::string& m) {
  std::fprintf(stderr, "amon map: %s\n(run 'amon map --help' for usage)\n", m.c_str());
  return 2;
}

// Seconds since the epoch, or an ISO 8601 UTC time (2026-11-26T03:00:00Z).
bool parse_time(const std::string& s, uint64_t& ns) {
  char* end;
  const unsigned long long secs = std::strtoull(s.c_str(), &end, 10);
  if (!s.empty() && *end == 0) {
    ns = secs * 1000000000ULL;
    return true;
  }
  std::tm tm{};
  const char* rest = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!rest || !(*rest == 0 || (rest[0] == 'Z' && rest[1] == 0))) return false;
  const time_t t = timegm(&tm);
  if (t < 0) return false;
  ns = uint64_t(t) * 1000000000ULL;
  return true;
}

// Keeps the first `bits` bits of `a` (n bytes), zeroes the rest.
void mask(uint8_t* a, int n, int bits) {
  for (int i = 0; i < n; ++i) {
    const int keep = std::min(8, std::max(0, bits - 8 * i));
    a[i] &= uint8_t(0xff00 >> keep);
  }
}

std::string map_one(CryptoPAn& cp, const std::string& arg, std::string& err) {
  std::string addr = arg;
  int bits = -1;
  if (auto sl = arg.find('/'); sl != std::string::npos) {
    addr = arg.substr(0, sl);
    char* end;
    const long b = std::strtol(arg.c_str() + sl + 1, &end, 10);
    if (sl + 1 == arg.size() || *end || b < 0) {
      err = "'" + arg + "' is not an address or a prefix";
      return "";
    }
    bits = int(b);
  }
  uint8_t a[16];
  char out[INET6_ADDRSTRLEN];
  if (inet_pton(AF_INET, addr.c_str(), a) == 1) {
    if (bits > 32) {
      err = "'" + arg + "': an IPv4 prefix has at most 32 bits";
      return "";
    }
    uint32_t v;
    std::memcpy(&v, a, 4);
    v = htonl(cp.anon_v4_classes(ntohl(v)));
    std::memcpy(a, &v, 4);
    // A prefix maps to a prefix: the output's first n bits depend on the
    // input's first n bits only.
    if (bits >= 0) mask(a, 4, bits);
    inet_ntop(AF_INET, a, out, sizeof out);
  } else if (inet_pton(AF_INET6, addr.c_str(), a) == 1) {
    if (bits > 128) {
      err = "'" + arg + "': an IPv6 prefix has at most 128 bits";
      return "";
    }
    cp.anon_v6_classes(a, a);
    if (bits >= 0) mask(a, 16, bits);
    inet_ntop(AF_INET6, a, out, sizeof out);
  } else {
    err = "'" + arg + "' is not an address or a prefix";
    return "";
  }
  return std::string(out) + (bits >= 0 ? "/" + std::to_string(bits) : "");
}

}  // namespace

int map_main(int argc, char** argv) {
  std::string key_file, policy, consumer_key, rotate, at;
  std::vector<std::string> addrs;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](std::string& v) {
      if (i + 1 >= argc) return false;
      v = argv[++i];
      return true;
    };
    if (a == "--key") {
      if (!val(key_file)) return map_error("--key takes a key file");
    } else if (a == "--policy") {
      if (!val(policy)) return map_error("--policy takes a policy file");
    } else if (a == "--consumer-key") {
      if (!val(consumer_key)) return map_error("--consumer-key takes the name of a key in the policy");
    } else if (a == "--rotate") {
      if (!val(rotate)) return map_error("--rotate takes a duration");
    } else if (a == "--at") {
      if (!val(at)) return map_error("--at takes a time");
    } else if (a.size() > 1 && a[0] == '-') {
      return map_error("unknown or incomplete option '" + a + "'");
    } else {
      addrs.push_back(a);
    }
  }
  if (key_file.empty() == policy.empty()) return map_error("give --key FILE, or --policy P with --consumer-key NAME");
  if (!policy.empty() && consumer_key.empty()) return map_error("--policy needs --consumer-key NAME");
  if (rotate.empty() != at.empty()) return map_error("--rotate and --at go together (the period and a time in it)");
  if (addrs.empty()) return map_error("name at least one address or prefix");

  CryptoPAnKey key{};
  if (!key_file.empty()) {
    KeyParseResult k = read_key_file(key_file);
    if (!k.ok()) return map_error(key_file + ": " + k.error);
    key = k.key;
  } else {
    dsl::Diagnostics d;
    auto p = dsl::compile_file(policy, d);
    if (!p) {
      std::fputs(d.render_text().c_str(), stderr);
      return 2;
    }
    const KeyMaterial* km = nullptr;
    for (const auto& k : p->keys)
      if (k && k->name == consumer_key) km = k.get();
    if (!km) return map_error(policy + " declares no key '" + consumer_key + "'");
    if (km->bytes.size() != key.size()) return map_error("key '" + consumer_key + "' is not 32 bytes");
    std::memcpy(key.data(), km->bytes.data(), key.size());
  }
  if (!rotate.empty()) {
    uint64_t period = 0, t = 0;
    if (!parse_duration(rotate, period) || period == 0) return map_error("--rotate takes a duration like 24h");
    if (!parse_time(at, t)) return map_error("--at takes seconds since 1970 or a UTC time like 2026-11-26T03:00:00Z");
    key = CryptoPAn::derive_epoch_key(key, t / period);
  }
  CryptoPAn cp(key);
  int rc = 0;
  for (const auto& a : addrs) {
    std::string err;
    const std::string m = map_one(cp, a, err);
    if (m.empty()) {
      std::fprintf(stderr, "amon map: %s\n", err.c_str());
      rc = 2;
      continue;
    }
    std::printf("%s %s\n", a.c_str(), m.c_str());
  }
  return rc;
}

}  // namespace amon
