#include "config.h"

#include <yaml.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "registry.h"

namespace amon {

bool parse_duration(const std::string& s, uint64_t& ns) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) v = v * 10 + uint64_t(s[i++] - '0');
  if (i == 0) return false;
  std::string unit = s.substr(i);
  uint64_t mul;
  if (unit == "ns") mul = 1;
  else if (unit == "us") mul = 1000;
  else if (unit == "ms") mul = 1000000;
  else if (unit == "s" || unit.empty()) mul = 1000000000ULL;
  else if (unit == "m") mul = 60000000000ULL;
  else if (unit == "h") mul = 3600000000000ULL;
  else return false;
  ns = v * mul;
  return true;
}

namespace {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A mistake already recorded (Doc::fail): it abandons the setting it is in,
// and the reading goes on with the next one, so one run reports them all.
struct Recorded {};

class Doc {
 public:
  Doc(const std::string& path) : path_(path) {}
  ~Doc() {
    if (loaded_) yaml_document_delete(&doc_);
  }
  void load() {
    FILE* f = std::fopen(path_.c_str(), "rb");
    if (!f) throw ConfigError(path_ + ": cannot open: " + std::strerror(errno));
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_file(&p, f);
    bool ok = yaml_parser_load(&p, &doc_);
    std::string err;
    if (!ok)
      err = path_ + ":" + std::to_string(p.problem_mark.line + 1) + ":" + std::to_string(p.problem_mark.column + 1) +
            ": " + (p.problem ? p.problem : "YAML error");
    yaml_parser_delete(&p);
    std::fclose(f);
    if (!ok) throw ConfigError(err);
    loaded_ = true;
  }
  yaml_node_t* root() { return yaml_document_get_root_node(&doc_); }
  yaml_node_t* node(int i) { return yaml_document_get_node(&doc_, i); }
  std::string where(const yaml_node_t* n) const {
    return path_ + ":" + std::to_string(n->start_mark.line + 1) + ":" + std::to_string(n->start_mark.column + 1);
  }
  [[noreturn]] void fail(yaml_node_t* n, const std::string& msg) {
    errors_.push_back(where(n) + ": " + msg);
    throw Recorded{};
  }
  // Runs one setting's reading; a mistake in it is recorded and the next
  // setting is read all the same.
  template <typename F>
  void attempt(F&& f) {
    try {
      f();
    } catch (const Recorded&) {
    }
  }
  // Every mistake recorded, one a line (empty: none).
  std::string errors() const {
    std::string e;
    for (const auto& x : errors_) e += (e.empty() ? "" : "\n") + x;
    return e;
  }
  std::string scalar(yaml_node_t* n, const char* what) {
    if (n->type != YAML_SCALAR_NODE) fail(n, std::string(what) + " must be a single value");
    return std::string(reinterpret_cast<char*>(n->data.scalar.value), n->data.scalar.length);
  }
  uint64_t number(yaml_node_t* n, const char* what) {
    std::string s = scalar(n, what);
    char* end;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end) fail(n, std::string(what) + " must be a whole number, not '" + s + "'");
    return v;
  }
  uint64_t duration(yaml_node_t* n, const char* what) {
    uint64_t v;
    if (!parse_duration(scalar(n, what), v)) fail(n, std::string(what) + " must be a duration like 30s or 500ms");
    return v;
  }
  template <typename F>
  void each_pair(yaml_node_t* map, const char* what, F&& f) {
    if (map->type != YAML_MAPPING_NODE) fail(map, std::string(what) + " must be a mapping");
    for (auto* p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; ++p)
      attempt([&] { f(scalar(node(p->key), "key"), node(p->key), node(p->value)); });
  }
  template <typename F>
  void each_item(yaml_node_t* seq, const char* what, F&& f) {
    if (seq->type != YAML_SEQUENCE_NODE) fail(seq, std::string(what) + " must be a list");
    for (auto* i = seq->data.sequence.items.start; i < seq->data.sequence.items.top; ++i) attempt([&] { f(node(*i)); });
  }

 private:
  std::string path_;
  std::vector<std::string> errors_;
  yaml_document_t doc_{};
  bool loaded_ = false;
};

// "; did you mean 'x'?" for a misspelt key, or "".
std::string did_you_mean(const std::string& k, std::initializer_list<const char*> known) {
  const char* best = nullptr;
  size_t bd = 3;
  for (const char* c : known) {
    size_t dd = edit_distance(k, c);
    if (dd < bd) bd = dd, best = c;
  }
  return best ? std::string("; did you mean '") + best + "'?" : std::string();
}

std::string rel(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p[0] == '/' || base_dir.empty()) return p;
  return base_dir + "/" + p;
}

// A byte count: 1048576, 500MB, 1GiB (K/M/G/T, decimal with B, binary with iB).
bool parse_size(const std::string& s, uint64_t& out) {
  char* end;
  const unsigned long long n = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return false;
  const std::string u = end;
  const char* units = "KMGT";
  uint64_t mul = 1;
  if (!u.empty() && u != "B") {
    const char* at = std::strchr(units, std::toupper(static_cast<unsigned char>(u[0])));
    if (!at || !*at) return false;
    const std::string rest = u.substr(1);
    const uint64_t base = rest == "iB" ? 1024 : (rest == "B" || rest.empty()) ? 1000 : 0;
    if (!base) return false;
    for (const char* p = units; p <= at; ++p) mul *= base;
  }
  out = uint64_t(n) * mul;
  return true;
}

// A share: 0.5%, or 0.005.
bool parse_share(const std::string& s, double& out) {
  char* end;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return false;
  if (*end == '%') v /= 100, ++end;
  if (*end || !(v >= 0 && v <= 1)) return false;
  out = v;
  return true;
}

// `loss: { warn: 0.1%, fail: 5% }`.
void loss_settings(Doc& d, yaml_node_t* n, EngineConfig& cfg) {
  d.each_pair(n, "loss", [&](const std::string& k, yaml_node_t* kn, yaml_node_t* v) {
    double* to = k == "warn" ? &cfg.loss_warn : k == "fail" ? &cfg.loss_fail : nullptr;
    if (!to) d.fail(kn, "unknown key '" + k + "' in loss (expected warn, fail)" + did_you_mean(k, {"warn", "fail"}));
    if (!parse_share(d.scalar(v, "share"), *to)) d.fail(v, "loss " + k + " takes a share from 0 to 100%, like 0.1%");
  });
}

// `idle: { busy: 100us, max_sleep: 50us }`.
void idle_settings(Doc& d, yaml_node_t* n, EngineConfig& cfg) {
  d.each_pair(n, "idle", [&](const std::string& k, yaml_node_t* kn, yaml_node_t* v) {
    if (k == "busy") cfg.idle.busy_ns = d.duration(v, "idle.busy");
    else if (k == "max_sleep") {
      cfg.idle.max_sleep_ns = d.duration(v, "idle.max_sleep");
      if (cfg.idle.max_sleep_ns > 100000000ULL) d.fail(v, "idle.max_sleep: at most 100ms");
    } else
      d.fail(kn, "unknown key '" + k + "' in idle (expected busy, max_sleep)" + did_you_mean(k, {"busy", "max_sleep"}));
  });
}

// `rotate: { size: 1GiB, every: 1h, keep: 48 }` of a pcap output.
void rotation(Doc& d, yaml_node_t* n, PortSpec& s) {
  d.each_pair(n, "rotate", [&](const std::string& k, yaml_node_t* kn, yaml_node_t* v) {
    if (k == "size") {
      if (!parse_size(d.scalar(v, "size"), s.rotate_size) || s.rotate_size < 4096)
        d.fail(v, "rotate size takes a size of at least 4096 bytes, like 1GiB or 500MB");
    } else if (k == "every") {
      if (!parse_duration(d.scalar(v, "every"), s.rotate_every_ns) || s.rotate_every_ns < 1000000000ULL)
        d.fail(v, "rotate every takes a duration of at least 1s, like 1h");
    } else if (k == "keep") {
      const uint64_t x = d.number(v, "keep");
      if (x < 1 || x > 1e6) d.fail(v, "rotate keep takes a count of files >= 1");
      s.rotate_keep = unsigned(x);
    } else {
      d.fail(kn, "unknown key '" + k + "' in rotate (expected size, every, keep)" + did_you_mean(k, {"size", "every", "keep"}));
    }
  });
  if (!s.rotate_size && !s.rotate_every_ns) d.fail(n, "rotate needs size or every");
}

// `pcap: file` or `port: devargs` (a vdev spec or a PCI address).
PortSpec port_spec(Doc& d, yaml_node_t* n, const std::string& dir, const char* what) {
  PortSpec s;
  s.at = d.where(n);
  bool set = false;
  bool rotate = false;
  d.each_pair(n, what, [&](const std::string& k, yaml_node_t* kn, yaml_node_t* v) {
    if (k == "rotate" && std::string(what) == "output") {
      rotate = true;
      rotation(d, v, s);
      return;
    }
    if (set) d.fail(kn, std::string(what) + " takes one of pcap or port");
    if (k == "pcap") s.kind = PortSpec::Kind::PcapFile, s.spec = rel(dir, d.scalar(v, "pcap"));
    else if (k == "port") s.kind = PortSpec::Kind::Ethdev, s.spec = d.scalar(v, "port");
    else d.fail(kn, "unknown key '" + k + "' in " + what + " (expected pcap or port)");
    set = true;
  });
  if (!set) d.fail(n, std::string(what) + " needs pcap or port");
  if (rotate && s.kind != PortSpec::Kind::PcapFile) d.fail(n, "rotate applies to pcap outputs only");
  return s;
}

// `zanon.share` (or the whole of an `amon pcap --share-config` file).
void share_settings(Doc& d, yaml_node_t* n, const std::string& dir, share::Settings& s) {
  d.each_pair(n, "zanon.share", [&](const std::string& k, yaml_node_t* kn, yaml_node_t* v) {
    if (k == "url") s.url = d.scalar(v, "url");
    else if (k == "stream") s.stream = d.scalar(v, "stream");
    else if (k == "key") s.key_file = rel(dir, d.scalar(v, "key"));
    else if (k == "replay") {
      const std::string r = d.scalar(v, "replay");
      if (r == "start") s.replay_at_start = true;
      else if (r == "background") s.replay_at_start = false;
      else d.fail(v, "zanon.share.replay: expected start or background, got '" + r + "'");
    } else if (k == "replay_timeout") s.replay_timeout_ns = d.duration(v, "replay_timeout");
    else if (k == "replicas") s.replicas = uint32_t(d.number(v, "replicas"));
    else if (k == "creds") s.creds = rel(dir, d.scalar(v, "creds"));
    else if (k == "tls_ca") s.tls_ca = rel(dir, d.scalar(v, "tls_ca"));
    else if (k == "tls_cert") s.tls_cert = rel(dir, d.scalar(v, "tls_cert"));
    else if (k == "tls_key") s.tls_key = rel(dir, d.scalar(v, "tls_key"));
    else
      d.fail(kn, "unknown key '" + k + "' in zanon.share (expected url, stream, key, replay, replay_timeout, replicas, "
                 "creds, tls_ca, tls_cert, tls_key)" +
                     did_you_mean(k, {"url", "stream", "key", "replay", "replay_timeout", "replicas", "creds", "tls_ca",
                                      "tls_cert", "tls_key"}));
  });
  std::string err;
  if (!share::check_settings(s, err)) d.fail(n, err);
}

}  // namespace

bool load_share_config(const std::string& path, share::Settings& s, std::string& err) {
  try {
    Doc d(path);
    d.load();
    std::string dir;
    if (auto sl = path.rfind('/'); sl != std::string::npos) dir = path.substr(0, sl);
    if (!d.root()) throw ConfigError(path + ": empty");
    d.attempt([&] { share_settings(d, d.root(), dir, s); });
    err = d.errors();
  } catch (const ConfigError& e) {
    err = e.what();
  }
  return err.empty();
}

bool load_config(const std::string& path, EngineConfig& cfg, std::string& err) {
  std::string dir;
  if (auto sl = path.rfind('/'); sl != std::string::npos) dir = path.substr(0, sl);
  try {
    Doc d(path);
    d.load();
    yaml_node_t* root = d.root();
    if (!root) throw ConfigError(path + ": empty configuration");
    d.attempt([&] { d.each_pair(root, "the configuration", [&](const std::string& k, yaml_node_t* kn, yaml_node_t* v) {
      if (k == "workers") {
        cfg.workers = unsigned(d.number(v, "workers"));
        if (cfg.workers < 1 || cfg.workers > 64) d.fail(v, "workers must be 1 to 64");
      } else if (k == "inputs") {
        d.each_item(v, "inputs", [&](yaml_node_t* it) { cfg.inputs.push_back(port_spec(d, it, dir, "input")); });
      } else if (k == "consumers") {
        d.each_item(v, "consumers", [&](yaml_node_t* it) {
          ConsumerSpec c;
          bool has_out = false;
          d.each_pair(it, "consumer", [&](const std::string& ck, yaml_node_t* ckn, yaml_node_t* cv) {
            if (ck == "name") c.name = d.scalar(cv, "name");
            else if (ck == "policy") c.policy_path = rel(dir, d.scalar(cv, "policy"));
            else if (ck == "output") c.output = port_spec(d, cv, dir, "output"), has_out = true;
            else d.fail(ckn, "unknown key '" + ck + "' in consumer (expected name, policy, output)" +
                                  did_you_mean(ck, {"name", "policy", "output"}));
          });
          if (c.name.empty() || c.policy_path.empty() || !has_out) d.fail(it, "a consumer needs name, policy and output");
          for (auto& o : cfg.consumers)
            if (o.name == c.name) d.fail(it, "consumer '" + c.name + "' defined twice");
          cfg.consumers.push_back(c);
        });
      } else if (k == "eal") {
        d.each_item(v, "eal", [&](yaml_node_t* it) { cfg.eal_args.push_back(d.scalar(it, "EAL argument")); });
      } else if (k == "flows") {
        d.each_pair(v, "flows", [&](const std::string& fk, yaml_node_t* fkn, yaml_node_t* fv) {
          auto& t = cfg.flow_timeouts;
          if (fk == "max_per_worker") cfg.flows_per_worker = uint32_t(d.number(fv, "max_per_worker"));
          else if (fk == "idle_timeout") t.tcp = t.udp = t.other = d.duration(fv, "idle_timeout");
          else if (fk == "tcp_timeout") t.tcp = d.duration(fv, "tcp_timeout");
          else if (fk == "udp_timeout") t.udp = d.duration(fv, "udp_timeout");
          else if (fk == "other_timeout") t.other = d.duration(fv, "other_timeout");
          else if (fk == "closed_timeout") t.closed = d.duration(fv, "closed_timeout");
          else d.fail(fkn, "unknown key '" + fk + "' in flows (expected max_per_worker, idle_timeout, tcp_timeout, "
                           "udp_timeout, other_timeout, closed_timeout)" +
                           did_you_mean(fk, {"max_per_worker", "idle_timeout", "tcp_timeout", "udp_timeout",
                                             "other_timeout", "closed_timeout"}));
        });
      } else if (k == "reassembly") {
        d.each_pair(v, "reassembly", [&](const std::string& rk, yaml_node_t* rkn, yaml_node_t* rv) {
          auto& h = cfg.hold;
          if (rk == "enabled") {
            std::string b = d.scalar(rv, "enabled");
            if (b == "true" || b == "yes" || b == "on") h.enabled = true;
            else if (b == "false" || b == "no" || b == "off") h.enabled = false;
            else d.fail(rv, "reassembly.enabled: expected true or false, got '" + b + "'");
          } else if (rk == "streams") {
            h.streams = uint32_t(d.number(rv, "streams"));
            if (h.streams > 65535) d.fail(rv, "reassembly.streams: at most 65535 per worker");
          } else if (rk == "bytes") h.bytes = uint32_t(d.number(rv, "bytes"));
          else if (rk == "segments") h.segments = uint32_t(d.number(rv, "segments"));
          else if (rk == "stream_segments") h.stream_segments = uint32_t(d.number(rv, "stream_segments"));
          else if (rk == "timeout") h.timeout_ns = d.duration(rv, "timeout");
          else if (rk == "reorder_records") {
            cfg.reorder_records = uint32_t(d.number(rv, "reorder_records"));
            if (cfg.reorder_records && cfg.reorder_records < 64) d.fail(rv, "reassembly.reorder_records: 0 or at least 64");
          } else if (rk == "reorder_window") cfg.reorder_window_ns = d.duration(rv, "reorder_window");
          else d.fail(rkn, "unknown key '" + rk + "' in reassembly (expected enabled, streams, bytes, segments, "
                           "stream_segments, timeout, reorder_records, reorder_window)" +
                           did_you_mean(rk, {"enabled", "streams", "bytes", "segments", "stream_segments", "timeout",
                                             "reorder_records", "reorder_window"}));
        });
      } else if (k == "zanon") {
        d.each_pair(v, "zanon", [&](const std::string& zk, yaml_node_t* zkn, yaml_node_t* zv) {
          if (zk == "max_values") cfg.zanon_max_values = size_t(d.number(zv, "max_values"));
          else if (zk == "share") share_settings(d, zv, dir, cfg.share);
          else d.fail(zkn, "unknown key '" + zk + "' in zanon (expected max_values, share)");
        });
      } else if (k == "stats") {
        d.each_pair(v, "stats", [&](const std::string& sk, yaml_node_t* skn, yaml_node_t* sv) {
          if (sk == "interval") cfg.stats_interval_ns = d.duration(sv, "stats.interval");
          else if (sk == "json") cfg.stats_lines = rel(dir, d.scalar(sv, "stats.json"));
          else d.fail(skn, "unknown key '" + sk + "' in stats (expected interval, json)" + did_you_mean(sk, {"interval", "json"}));
        });
      } else if (k == "stats_json") {
        cfg.stats_json = rel(dir, d.scalar(v, "stats_json"));
      } else if (k == "mbufs") {
        cfg.mbufs = uint32_t(d.number(v, "mbufs"));
      } else if (k == "loss") {
        loss_settings(d, v, cfg);
      } else if (k == "idle") {
        idle_settings(d, v, cfg);
      } else {
        d.fail(kn, "unknown key '" + k + "' (expected workers, inputs, consumers, eal, flows, reassembly, zanon, stats, stats_json, mbufs, loss, idle)" +
                        did_you_mean(k, {"workers", "inputs", "consumers", "eal", "flows", "reassembly", "zanon", "stats",
                                         "stats_json", "mbufs", "loss", "idle"}));
      }
    }); });
    err = d.errors();
    // Not said again when a mistake in them already was.
    if (err.empty() && cfg.inputs.empty()) err = path + ": no inputs";
    if (err.empty() && cfg.consumers.empty()) err = path + ": no consumers";
  } catch (const ConfigError& e) {
    err = e.what();
  }
  return err.empty();
}

}  // namespace amon
