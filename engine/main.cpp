// amon: command-line entry point.
#include <rte_version.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "audit.h"
#include "config.h"
#include "control.h"
#include "outputs.h"
#include "pcapio.h"
#include "engine.h"
#include "json.h"
#include "map.h"
#include "policy.h"
#include "registry.h"
#include "runtime.h"
#include "sizing.h"
#include "whatif.h"

#ifndef AMON_VERSION
#define AMON_VERSION "0.0.0"
#endif
#ifndef AMON_GIT_HASH
#define AMON_GIT_HASH "unknown"
#endif
#ifndef AMON_DPDK_DRIVERS
#define AMON_DPDK_DRIVERS ""
#endif

namespace {

const char* kUsage =
    "usage: amon <command> [options]\n"
    "\n"
    "commands:\n"
    "  pcap     anonymize a capture file offline (pcap or pcapng; Ethernet, Linux cooked v1/v2,\n"
    "           raw IPv4/IPv6, BSD NULL/loopback, PPP, Cisco HDLC; the output keeps the link type)\n"
    "             amon pcap --read IN.pcap --policy P.amon --write OUT.pcap\n"
    "             amon pcap --read IN.pcap --consumer NAME=POLICY:OUT.pcap [--consumer ...]\n"
    "           inputs: a file, a folder (read recursively; --glob PATTERN keeps matching names) or\n"
    "           - (standard input); gzip-compressed captures are read as they are; several --read\n"
    "           are read as one stream in time order. Outputs: a file, - (standard output; the\n"
    "           summary then goes to standard error), or, with several inputs, a folder (an existing\n"
    "           one or a name ending in /) that gets one output per input under the input's name\n"
    "           options: --workers N (default 1; output order follows input order with 1)\n"
    "                    --stats-json FILE\n"
    "                    --share-config FILE  share z-anonymity counts with other boxes (the YAML's\n"
    "                              zanon.share mapping on its own: url, stream, key, ...)\n"
    "                    --quiet   no summary and no progress line (the progress line shows on a\n"
    "                              terminal only, once a run takes more than a second)\n"
    "           sizes (default: planned from the input's size, so a small file stays small):\n"
    "                    --flows N          flow slots per worker; %zu bytes each, touched as flows arrive\n"
    "                    --zanon-values N   z-anonymity values tracked; about %zu bytes each at z=10,\n"
    "                                       touched only as values arrive; when full the least recently\n"
    "                                       seen are forgotten (hidden more, never released sooner)\n"
    "                    --mbufs N          packet buffers; %zu bytes each, written at start, in EAL memory\n"
    "  run      run on DPDK ports per a YAML configuration\n"
    "             amon run --config amon.yaml [--until-idle[=DURATION]] [--stats-json FILE] [--quiet] [-- EAL args]\n"
    "           sizes: flows.max_per_worker, zanon.max_values, mbufs in the YAML (same costs; flow\n"
    "           tables are written at start; live ports default to 262144 flows per worker and\n"
    "           1048576 values)\n"
    "           EAL args after -- are added to amon's defaults; signals: HUP reloads policies and keys,\n"
    "           USR1 writes a statistics line, INT/TERM stop cleanly\n"
    "  check    test a configuration without starting anything: amon check --config amon.yaml\n"
    "           (also amon run --check); exit 0 ok, 2 errors\n"
    "  whatif   what z-anonymity would hide on a capture, per z and dt (report only)\n"
    "             amon whatif --read IN.pcap --out DIR [--field F,..] [--z 2,5,10] [--dt 10m,1h,1d]\n"
    "  lint     check policy files: amon lint [--format text|json] [--strict] [--dump] FILE...\n"
    "  audit    check an anonymized capture against its original for values the policy protects\n"
    "             amon audit --policy P.amon --original IN.pcap --anonymized OUT.pcap [--format text|json]\n"
    "           exit 0 clean, 1 leaks found, 2 usage\n"
    "  map      what a consumer's Crypto-PAn makes of addresses and prefixes (a prefix maps to a\n"
    "           prefix), to translate IDS rules and HOME_NET:\n"
    "             amon map --key KEYFILE [--rotate 24h --at TIME] CIDR|ADDR ...\n"
    "             amon map --policy P.amon --consumer-key NAME [--rotate 24h --at TIME] CIDR|ADDR ...\n"
    "           TIME: seconds since 1970 or 2026-11-26T03:00:00Z (a time in the rotation period)\n"
    "  fields   list the fields policies can name: amon fields [--format text|json]\n"
    "  actions  list the actions policies can use: amon actions [--format text|json]\n"
    "  version  the version, the git commit built, the DPDK version and the drivers linked in:\n"
    "             amon version [--format text|json]\n"
    "\n"
    "exit status: 0 ok, 1 runtime failure, 2 bad usage, configuration or policy\n";

void print_usage(FILE* f) {
  std::fprintf(f, kUsage, amon::flow_slot_bytes(), amon::zanon_value_bytes(10), amon::mbuf_bytes());
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "amon: %s\n(run 'amon --help' for usage)\n", msg.c_str());
  return 2;
}

// One command's part of the usage text (its lines, from "  CMD " to the
// next command), so `amon CMD --help` and `amon --help` never disagree.
std::string command_help(const std::string& cmd) {
  char buf[8192];
  std::snprintf(buf, sizeof buf, kUsage, amon::flow_slot_bytes(), amon::zanon_value_bytes(10), amon::mbuf_bytes());
  std::string all = buf, out;
  bool in = false;
  for (size_t at = 0, nl; at < all.size(); at = nl + 1) {
    nl = all.find('\n', at);
    if (nl == std::string::npos) nl = all.size();
    const std::string line = all.substr(at, nl - at);
    const bool starts = line.size() > 2 && line[0] == ' ' && line[1] == ' ' && line[2] != ' ';
    if (starts) in = line.compare(2, cmd.size() + 1, cmd + " ") == 0;
    else if (line.empty()) in = false;
    if (in) out += line + "\n";
  }
  return out;
}

// Whether the arguments ask for help (before a `--` that starts EAL's).
bool wants_help(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") return false;
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

int print_help(const std::string& cmd) {
  std::printf("usage: amon %s [options]\n\n%s\nexit status: 0 ok, 1 runtime failure, 2 bad usage, configuration or policy\n",
              cmd.c_str(), command_help(cmd).c_str());
  return 0;
}

// `--format text|json` (or --help) and nothing else: a listing's options.
// Returns -1 to go on, else the exit status.
int listing_options(const std::string& cmd, int argc, char** argv, bool& json) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "--format" && i + 1 < argc) v = argv[++i];
    else if (a.rfind("--format=", 0) == 0) v = a.substr(9);
    else return usage_error("unknown or incomplete option '" + a + "' for " + cmd);
    if (v != "json" && v != "text") return usage_error("--format takes text or json, not '" + v + "'");
    json = v == "json";
  }
  return -1;
}

std::string json_list(const std::vector<std::string>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? "," : "") + amon::json_quote(v[i]);
  return o + "]";
}

int fields_json() {
  std::string o = "[";
  bool first = true;
  for (const auto& f : amon::Registry::instance().fields()) {
    o += std::string(first ? "" : ",") + "\n{\"name\":" + amon::json_quote(f.name) +
         ",\"type\":" + amon::json_quote(std::string(amon::to_string(f.type))) +
         ",\"role\":" + amon::json_quote(std::string(amon::to_string(f.role))) +
         ",\"protocol\":" + amon::json_quote(f.protocol) + ",\"value_class\":" + amon::json_quote(f.value_class) +
         ",\"related\":" + json_list(f.related) + ",\"doc\":" + amon::json_quote(f.doc) + "}";
    first = false;
  }
  std::printf("%s\n]\n", o.c_str());
  return 0;
}

int actions_json() {
  std::string o = "[";
  bool first = true;
  for (const auto& a : amon::Registry::instance().actions()) {
    std::vector<std::string> types;
    for (auto t : a.applies_to) types.emplace_back(amon::to_string(t));
    std::string ps = "[";
    for (size_t i = 0; i < a.params.size(); ++i) {
      const auto& p = a.params[i];
      ps += std::string(i ? "," : "") + "{\"name\":" + amon::json_quote(p.name) +
            ",\"kind\":" + amon::json_quote(std::string(amon::to_string(p.kind))) +
            ",\"required\":" + (p.required ? "true" : "false") + ",\"positional\":" + std::to_string(p.positional) +
            ",\"choices\":" + json_list(p.choices) + ",\"default\":" + amon::json_quote(p.default_text) +
            ",\"doc\":" + amon::json_quote(p.doc) + "}";
    }
    o += std::string(first ? "" : ",") + "\n{\"name\":" + amon::json_quote(a.name) + ",\"applies_to\":" + json_list(types) +
         ",\"params\":" + ps + "],\"protects\":" + (a.protects ? "true" : "false") + ",\"doc\":" + amon::json_quote(a.doc) + "}";
    first = false;
  }
  std::printf("%s\n]\n", o.c_str());
  return 0;
}

// What this binary is: its version, the commit it was built from, the DPDK
// it carries and the drivers linked in (a static DPDK has no others).
int cmd_version(int argc, char** argv) {
  bool json = false;
  if (int rc = listing_options("version", argc, argv, json); rc >= 0) return rc;
  const std::string drivers = AMON_DPDK_DRIVERS;
  std::vector<std::string> dv;
  for (size_t at = 0; at <= drivers.size() && !drivers.empty();) {
    const size_t sc = drivers.find(',', at);
    dv.push_back(drivers.substr(at, sc == std::string::npos ? std::string::npos : sc - at));
    if (sc == std::string::npos) break;
    at = sc + 1;
  }
  if (json) {
    std::printf("{\"version\":%s,\"git\":%s,\"dpdk\":%s,\"dpdk_static\":%s,\"drivers\":%s}\n",
                amon::json_quote(AMON_VERSION).c_str(), amon::json_quote(AMON_GIT_HASH).c_str(),
                amon::json_quote(rte_version()).c_str(), dv.empty() ? "false" : "true", json_list(dv).c_str());
    return 0;
  }
  std::string dl;
  for (auto& d : dv) dl += (dl.empty() ? "" : " ") + d;
  std::printf("amon %s\ngit %s\ndpdk %s\ndrivers %s\n", AMON_VERSION, AMON_GIT_HASH, rte_version(),
              dv.empty() ? "(DPDK's shared drivers, loaded at start-up)" : dl.c_str());
  return 0;
}

// EAL arguments for runs that need no NIC: no hugepages, no PCI scan, no
// shared config files, and one lcore per worker plus the main one, free to
// float over the machine's CPUs. Memory is what the run's plan needs
// (sizing.h): EAL commits all of it at start.
std::vector<std::string> offline_eal(const amon::EngineConfig& cfg) {
  unsigned ncpu = std::max(1u, std::thread::hardware_concurrency());
  std::string lcores = "(0-" + std::to_string(cfg.workers) + ")@(0-" + std::to_string(ncpu - 1) + ")";
  const unsigned mb = amon::plan_sizes(cfg).eal_mb;
  return {"--no-huge", "--no-pci", "--no-shconf", "-m", std::to_string(mb), "--lcores=" + lcores,
          "--log-level=*:error", "--no-telemetry"};
}

// Outputs and inputs checked before anything starts (outputs.h).
bool ports_ok(const amon::EngineConfig& cfg) {
  auto errs = amon::check_ports(cfg);
  for (auto& e : errs) std::fprintf(stderr, "amon: %s\n", e.c_str());
  return errs.empty();
}

// The captures named by --read (files, folders, "-") and --glob, each
// checked: one that is no capture is bad input (2); files of a folder that
// are not captures are reported and skipped, never silently.
int capture_set(const std::vector<std::string>& reads, const std::string& glob,
                std::vector<amon::pcapio::InputFile>& files) {
  std::vector<std::string> skipped;
  try {
    files = amon::pcapio::expand_inputs(reads, glob, skipped);
    for (auto& f : files)
      if (f.path != "-") amon::pcapio::Capture check(f.path);
  } catch (const amon::pcapio::BadInput& e) {
    for (auto& s : skipped) std::fprintf(stderr, "amon: skipped %s\n", s.c_str());
    std::fprintf(stderr, "amon: %s\n", e.what());
    return 2;
  }
  for (auto& s : skipped) std::fprintf(stderr, "amon: skipped %s\n", s.c_str());
  if (!skipped.empty()) std::fprintf(stderr, "amon: %zu files skipped: not captures\n", skipped.size());
  if (std::count_if(files.begin(), files.end(), [](auto& f) { return f.path == "-"; }) > 1)
    return usage_error("standard input can be read once");
  if (files.empty()) {
    std::fprintf(stderr, "amon: no captures found in the inputs given\n");
    return 2;
  }
  return 0;
}

// Standard output as a capture stream ("-" or a path that is standard
// output): the capture goes to a descriptor of its own and descriptor 1
// becomes standard error, so that nothing else (the summary, DPDK's log,
// which goes to stdout) can ever land among its bytes.
std::string claim_stdout() {
  static int fd = -1;
  if (fd < 0) {
    std::fflush(stdout);
    fd = ::dup(STDOUT_FILENO);
    if (fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) return "";
  }
  return "/dev/fd/" + std::to_string(fd);
}

bool is_stdout(const std::string& path) {
  if (path == "-") return true;
  struct stat a, b;
  return ::stat(path.c_str(), &a) == 0 && ::fstat(STDOUT_FILENO, &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino && !S_ISDIR(a.st_mode) && (S_ISFIFO(a.st_mode) || S_ISREG(a.st_mode) || S_ISSOCK(a.st_mode));
}

// An output of several inputs is one file of the merged stream, or, named
// as a folder (an existing one, or a name ending in '/'), a folder that
// mirrors the inputs: each input's packets in a file of its name there.
int capture_output(amon::PortSpec& out, const std::vector<amon::pcapio::InputFile>& files) {
  if (out.kind != amon::PortSpec::Kind::PcapFile) return 0;
  if (is_stdout(out.spec)) {
    out.spec = claim_stdout();
    if (out.spec.empty()) return usage_error("standard output cannot be written");
    return 0;
  }
  struct stat st;
  const bool dir = (::stat(out.spec.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) || out.spec.back() == '/';
  if (!dir) return 0;
  if (files.size() < 2) return usage_error("--write " + out.spec + " is a folder: name a file for one input");
  while (out.spec.size() > 1 && out.spec.back() == '/') out.spec.pop_back();
  if (::mkdir(out.spec.c_str(), 0777) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "amon: %s: %s\n", out.spec.c_str(), std::strerror(errno));
    return 2;
  }
  std::set<std::string> seen;
  for (auto& f : files) {
    if (f.path == "-") return usage_error("standard input has no name to mirror in " + out.spec);
    if (!seen.insert(f.rel).second) return usage_error("two inputs are named " + f.rel + " in the folder " + out.spec);
    out.files.push_back(f.rel);
  }
  return 0;
}

bool parse_uint(const char* s, unsigned& v) {
  char* end;
  unsigned long x = std::strtoul(s, &end, 10);
  if (!*s || *end) return false;
  v = unsigned(x);
  return true;
}

int cmd_pcap(int argc, char** argv) {
  amon::EngineConfig cfg;
  std::vector<std::string> reads;
  std::string policy, write, glob;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* what) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)what;
      return argv[++i];
    };
    const char* v = nullptr;
    // Given twice, one of them would be silently ignored (a lost output).
    if ((a == "--policy" && !policy.empty()) || (a == "--write" && !write.empty()) || (a == "--glob" && !glob.empty()))
      return usage_error(a + " given twice");
    if (a == "--read" && (v = val("--read"))) reads.push_back(v);
    else if (a == "--glob" && (v = val("--glob"))) glob = v;
    else if (a == "--policy" && (v = val("--policy"))) policy = v;
    else if (a == "--write" && (v = val("--write"))) write = v;
    else if (a == "--stats-json" && (v = val("--stats-json"))) cfg.stats_json = v;
    else if (a == "--share-config" && (v = val("--share-config"))) {
      std::string err;
      if (!amon::load_share_config(v, cfg.share, err)) return usage_error(err);
    } else if (a == "--quiet") cfg.quiet = true;
    else if (a == "--flows" && (v = val("--flows"))) {
      if (!parse_uint(v, cfg.flows_per_worker) || cfg.flows_per_worker < 1) return usage_error("--flows takes a count >= 1");
    } else if (a == "--zanon-values" && (v = val("--zanon-values"))) {
      unsigned n;
      if (!parse_uint(v, n) || n < 1) return usage_error("--zanon-values takes a count >= 1");
      cfg.zanon_max_values = n;
    } else if (a == "--mbufs" && (v = val("--mbufs"))) {
      if (!parse_uint(v, cfg.mbufs) || cfg.mbufs < 256) return usage_error("--mbufs takes a count >= 256");
    } else if (a == "--workers" && (v = val("--workers"))) {
      if (!parse_uint(v, cfg.workers) || cfg.workers < 1 || cfg.workers > 64) return usage_error("--workers takes 1 to 64");
    } else if (a == "--consumer" && (v = val("--consumer"))) {
      std::string s = v;
      auto eq = s.find('='), colon = s.rfind(':');
      if (eq == std::string::npos || colon == std::string::npos || colon < eq || eq == 0)
        return usage_error("--consumer takes NAME=POLICY:OUT.pcap, not '" + s + "'");
      amon::ConsumerSpec c{s.substr(0, eq), s.substr(eq + 1, colon - eq - 1),
                           {amon::PortSpec::Kind::PcapFile, s.substr(colon + 1)}};
      for (auto& o : cfg.consumers)
        if (o.name == c.name) return usage_error("consumer '" + c.name + "' given twice");
      cfg.consumers.push_back(c);
    } else {
      return usage_error("unknown or incomplete option '" + a + "' for pcap");
    }
  }
  if (reads.empty()) return usage_error("pcap needs --read IN.pcap");
  if (!policy.empty() || !write.empty()) {
    if (policy.empty() || write.empty()) return usage_error("--policy and --write go together");
    cfg.consumers.insert(cfg.consumers.begin(), {"default", policy, {amon::PortSpec::Kind::PcapFile, write}});
  }
  if (cfg.consumers.empty()) return usage_error("pcap needs --policy/--write or at least one --consumer");
  std::vector<amon::pcapio::InputFile> files;
  if (int rc = capture_set(reads, glob, files); rc) return rc;
  amon::PortSpec in{amon::PortSpec::Kind::PcapFile, files[0].path, {}};
  if (files.size() > 1) {
    in.spec = reads[0] + (reads.size() > 1 ? ",..." : "");
    for (auto& f : files) in.files.push_back(f.path);
  }
  cfg.inputs.push_back(in);
  for (auto& c : cfg.consumers)
    if (int rc = capture_output(c.output, files); rc) return rc;
  if (!ports_ok(cfg)) return 2;
  cfg.offline = true;
  cfg.until_idle = true;
  cfg.eal_args = offline_eal(cfg);
  // Offline runs never clash: each has a file prefix of its own (and no
  // telemetry anyone would connect to).
  cfg.eal_args.push_back("--file-prefix=amon-pcap-" + std::to_string(getpid()));
  return amon::run_engine(cfg).exit_code;
}

int cmd_run(int argc, char** argv) {
  amon::EngineConfig cfg;
  std::string config, stats_json;
  std::vector<std::string> eal_extra;
  bool until_idle = false, check = false;
  uint64_t idle_ns = 1000000000ULL;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) eal_extra.push_back(argv[i]);
      break;
    }
    if (a == "--config" && i + 1 < argc) config = argv[++i];
    else if (a == "--stats-json" && i + 1 < argc) stats_json = argv[++i];
    else if (a == "--until-idle") until_idle = true;
    else if (a == "--quiet") cfg.quiet = true;
    else if (a == "--check") check = true;
    else if (a.rfind("--until-idle=", 0) == 0) {
      until_idle = true;
      if (!amon::parse_duration(a.substr(13), idle_ns)) return usage_error("--until-idle takes a duration like 500ms");
    } else {
      return usage_error("unknown or incomplete option '" + a + "' for run");
    }
  }
  if (config.empty()) return usage_error("run needs --config FILE");
  std::string err;
  if (!amon::load_config(config, cfg, err)) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 2;
  }
  if (!stats_json.empty()) cfg.stats_json = stats_json;
  if (check) return amon::check_config(cfg, config);
  if (!ports_ok(cfg)) return 2;
  cfg.config_path = config;
  cfg.eal_config = cfg.eal_args;
  cfg.until_idle = until_idle;
  cfg.idle_ns = idle_ns;
  cfg.offline = false;
  bool any_ethdev = false;
  for (auto& i : cfg.inputs) any_ethdev = any_ethdev || i.kind == amon::PortSpec::Kind::Ethdev;
  // Pcap files in and out with no ethdev: the offline guarantees hold.
  bool any_eth_out = false;
  for (auto& c : cfg.consumers) any_eth_out = any_eth_out || c.output.kind == amon::PortSpec::Kind::Ethdev;
  cfg.offline = !any_ethdev && !any_eth_out;
  // EAL: the YAML's `eal` list, else the no-NIC defaults with DPDK telemetry
  // on; arguments after `--` are added to either, never replace them.
  std::vector<std::string> eal = cfg.eal_args;
  if (eal.empty()) {
    for (auto& a : offline_eal(cfg))
      if (a != "--no-telemetry") eal.push_back(a);
  } else {
    bool has_lcores = false;
    for (auto& a : eal) has_lcores = has_lcores || a == "-l" || a.rfind("--lcores", 0) == 0 || a == "-c";
    if (!has_lcores)
      for (auto& a : offline_eal(cfg))
        if (a.rfind("--lcores", 0) == 0) eal.push_back(a);
  }
  bool extra_lcores = false;
  for (auto& a : eal_extra) extra_lcores = extra_lcores || a == "-l" || a.rfind("--lcores", 0) == 0 || a == "-c";
  if (extra_lcores && cfg.eal_args.empty())
    std::erase_if(eal, [](const std::string& a) { return a.rfind("--lcores", 0) == 0; });
  eal.insert(eal.end(), eal_extra.begin(), eal_extra.end());
  // Virtual devices named in the configuration are created for it.
  auto add_vdev = [&](const amon::PortSpec& p) {
    if (p.kind != amon::PortSpec::Kind::Ethdev || p.spec.rfind("net_", 0) != 0) return;
    std::string name = p.spec.substr(0, p.spec.find(','));
    for (auto& a : eal)
      if (a.rfind(name, 0) == 0) return;
    eal.push_back("--vdev=" + p.spec);
  };
  for (auto& i : cfg.inputs) add_vdev(i);
  for (auto& c : cfg.consumers) add_vdev(c.output);
  cfg.eal_args = eal;
  return amon::run_engine(cfg).exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    print_usage(stdout);
    return 0;
  }
  // (lint and whatif answer --help themselves, at more length.)
  const std::vector<std::string> known = {"pcap", "audit", "check", "run", "fields", "actions", "version", "map"};
  if (std::find(known.begin(), known.end(), cmd) != known.end() && wants_help(argc - 2, argv + 2)) return print_help(cmd);
  if (cmd == "--version") return cmd_version(0, nullptr);
  if (cmd == "version") return cmd_version(argc - 2, argv + 2);
  amon::register_builtin_plugins();
  if (cmd == "fields" || cmd == "actions") {
    bool json = false;
    if (int rc = listing_options(cmd, argc - 2, argv + 2, json); rc >= 0) return rc;
    if (json) return cmd == "fields" ? fields_json() : actions_json();
  }
  if (cmd == "pcap") return cmd_pcap(argc - 2, argv + 2);
  if (cmd == "run") return cmd_run(argc - 2, argv + 2);
  if (cmd == "whatif") return amon::whatif_main(argc - 2, argv + 2);
  if (cmd == "check") {
    std::string config;
    for (int i = 2; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--config" && i + 1 < argc) config = argv[++i];
      else return usage_error("unknown or incomplete option '" + a + "' for check");
    }
    if (config.empty()) return usage_error("check needs --config FILE");
    amon::EngineConfig cfg;
    std::string err;
    if (!amon::load_config(config, cfg, err)) {
      std::fprintf(stderr, "%s\n", err.c_str());
      return 2;
    }
    return amon::check_config(cfg, config);
  }
  if (cmd == "lint") {
    // The policy language does not know the runtime; the binary that runs
    // policies refuses to pass one while its registry is incomplete (`amon
    // check` does the same in check_config).
    if (std::string m = amon::registry_problems(); !m.empty()) {
      std::fprintf(stderr, "amon: error: %s\n", m.c_str());
      return 2;
    }
  }
  if (cmd == "lint") return amon::dsl::lint_main(argc - 2, argv + 2);
  if (cmd == "audit") return amon::audit::audit_main(argc - 2, argv + 2);
  if (cmd == "fields") return amon::dsl::fields_main(argc - 2, argv + 2);
  if (cmd == "actions") return amon::dsl::actions_main(argc - 2, argv + 2);
  if (cmd == "map") return amon::map_main(argc - 2, argv + 2);
  return usage_error("unknown command '" + cmd + "'");
}
