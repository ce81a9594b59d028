#include "control.h"

#include <net/if.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "flow_table.h"
#include "outputs.h"
#include "policy.h"
#include "registry.h"
#include "runtime.h"
#include "sizing.h"

namespace amon {

namespace {

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) s += hex[md[i] >> 4], s += hex[md[i] & 15];
  return s;
}

std::string keys_blob(const dsl::Policy& p) {
  std::string k;
  for (auto& km : p.keys) {
    k += km->name;
    k += '\0';
    k.append(reinterpret_cast<const char*>(km->bytes.data()), km->bytes.size());
  }
  // Hashed on its own first: the digest logged for a policy is never a
  // one-step hash of raw key bytes next to known text.
  return sha256_hex("amon keys\n" + k);
}

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
  return buf;
}

// What a vdev's devargs name that can be checked before EAL starts: the
// form `driver[,key=value]...`, and the files and interfaces it reads.
std::vector<std::string> check_vdev(const std::string& spec) {
  std::vector<std::string> errs;
  if (spec.rfind("net_", 0) != 0) return errs;  // a PCI address: EAL finds it or not
  std::string name = spec.substr(0, spec.find(','));
  size_t pos = spec.find(',');
  while (pos != std::string::npos) {
    size_t next = spec.find(',', pos + 1);
    std::string kv = spec.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    auto eq = kv.find('=');
    if (kv.empty() || eq == std::string::npos || eq == 0) {
      errs.push_back("port " + name + ": devargs '" + kv + "' is not key=value");
    } else {
      std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
      if (k == "rx_pcap" && access(v.c_str(), R_OK) != 0)
        errs.push_back("port " + name + ": rx_pcap " + v + ": " + std::strerror(errno));
      if ((k == "iface" || k == "rx_iface" || k == "tx_iface" || k == "rx_iface_in") && if_nametoindex(v.c_str()) == 0)
        errs.push_back("port " + name + ": " + k + " " + v + ": no such network interface");
    }
    pos = next;
  }
  return errs;
}

}  // namespace

std::string policy_digest(const dsl::Policy& p) { return sha256_hex("amon policy\n" + dsl::dump(p) + keys_blob(p)); }

std::string keys_digest(const dsl::Policy& p) { return keys_blob(p); }

bool compile_all(const EngineConfig& cfg, std::vector<std::shared_ptr<const dsl::Policy>>& out, std::string& diags) {
  register_builtin_plugins();
  bool ok = true;
  out.clear();
  for (const auto& c : cfg.consumers) {
    dsl::Diagnostics d;
    auto p = dsl::compile_file(c.policy_path, d);
    if (!d.empty()) diags += d.render_text();
    if (!p) {
      ok = false;
      continue;
    }
    out.push_back(p);
  }
  if (!ok) out.clear();
  return ok;
}

int check_config(const EngineConfig& cfg, const std::string& config_path) {
  std::vector<std::shared_ptr<const dsl::Policy>> policies;
  std::string diags;
  bool ok = compile_all(cfg, policies, diags);
  if (!diags.empty()) std::fputs(diags.c_str(), stderr);
  // Each error beside where the configuration says what it is about.
  std::vector<std::string> where;
  std::vector<std::string> errs = check_ports(cfg, &where);
  auto fail = [&](const std::string& at, const std::string& m) {
    errs.push_back(m);
    where.push_back(at);
  };
  if (std::string m = registry_problems(); !m.empty()) fail("", m);
  for (auto& in : cfg.inputs) {
    if (in.kind == PortSpec::Kind::PcapFile) {
      if (access(in.spec.c_str(), R_OK) != 0) fail(in.at, "input " + in.spec + ": " + std::strerror(errno));
    } else {
      for (auto& e : check_vdev(in.spec)) fail(in.at, e);
    }
  }
  for (auto& c : cfg.consumers)
    if (c.output.kind == PortSpec::Kind::Ethdev)
      for (auto& e : check_vdev(c.output.spec)) fail(c.output.at, "consumer '" + c.name + "': " + e);
  if (cfg.consumers.size() > size_t(kMaxConsumers))
    fail("", "at most " + std::to_string(kMaxConsumers) + " consumers");
  // Each policy as start-up builds it for its consumer (Program): what only
  // that step finds (more per-flow zanon rules on ip.* fields than a
  // consumer has slots for, a regex Hyperscan or a BPF select libpcap
  // refuses) is reported here too, not first when the engine starts.
  if (ok && errs.empty()) {
    SharedServices services;
    for (size_t i = 0; i < policies.size() && i < cfg.consumers.size(); ++i) try {
        Program program(policies[i], int(i), &services);
      } catch (const std::exception& e) {
        fail("", "consumer '" + cfg.consumers[i].name + "': " + e.what());
      }
  }
  for (size_t i = 0; i < errs.size(); ++i)
    std::fprintf(stderr, "%s: error: %s\n", (where[i].empty() ? config_path : where[i]).c_str(), errs[i].c_str());
  ok = ok && errs.empty();
  // The sharing server down is a warning: amon runs on its own counts then.
  if (cfg.share.enabled()) {
    std::string why;
    if (!share::reachable(cfg.share, 2000, why))
      std::fprintf(stderr, "%s: warning: zanon.share: %s; amon would start on its own counts and keep trying\n",
                   config_path.c_str(), why.c_str());
  }

  std::printf("%s: %s\n", config_path.c_str(), ok ? "ok" : "errors (nothing was started)");
  std::printf("workers: %u\n", cfg.workers);
  for (auto& in : cfg.inputs) std::printf("input: %s\n", in.describe().c_str());
  for (size_t i = 0; i < cfg.consumers.size(); ++i) {
    const auto& c = cfg.consumers[i];
    std::printf("consumer %s: policy %s", c.name.c_str(), c.policy_path.c_str());
    if (ok) std::printf(" (%zu rules, sha256 %s)", policies[i]->rules.size(), policy_digest(*policies[i]).c_str());
    std::printf(", output %s\n", c.output.describe().c_str());
  }
  // The flow table's layout (FlowTable): a 64-byte bucket per 4 flows and
  // one entry per flow, committed at start-up.
  // Sizes left unset are planned from the input files' size (sizing.h).
  const Sizes sz = plan_sizes(cfg);
  size_t flow_bytes = size_t(sz.flows_per_worker) * sizeof(FlowEntry) + size_t((sz.flows_per_worker + 3) / 4) * 64;
  std::printf("flows: %u per worker, %s per worker, %s in all\n", sz.flows_per_worker, human_bytes(double(flow_bytes)).c_str(),
              human_bytes(double(flow_bytes) * cfg.workers).c_str());
  std::printf("reassembly: %s, %u streams and %u segments per worker\n", cfg.hold.enabled ? "on" : "off",
              cfg.hold.streams, cfg.hold.segments);
  // The store is sized for the largest z any policy uses (as at start-up).
  uint32_t zmax = 0;
  if (ok)
    for (auto& p : policies)
      for (auto& r : p->rules)
        if (r.action.desc->uses_zstore) zmax = std::max<uint32_t>(zmax, uint32_t(r.action.int_or("z", 10)));
  if (cfg.share.enabled())
    std::printf("zanon share: %s stream %s, replay %s\n", cfg.share.url.c_str(), cfg.share.stream.c_str(),
                cfg.share.replay_at_start ? "before the ports start" : "in the background");
  if (zmax)
    std::printf("zanon: at most %zu values (z up to %u), %s\n", sz.zanon_values, zmax,
                human_bytes(double(sz.zanon_values) * double(zanon_value_bytes(zmax))).c_str());
  else if (ok)
    std::printf("zanon: no policy uses it (at most %zu values if one does)\n", sz.zanon_values);
  else
    std::printf("zanon: at most %zu values\n", sz.zanon_values);
  std::printf("mbufs: %u, %s\n", sz.mbufs, human_bytes(double(sz.mbufs) * double(mbuf_bytes())).c_str());
  return ok ? 0 : 2;
}

}  // namespace amon
