#include "outputs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>

#include "pcap_port.h"

namespace amon {

namespace {

std::string dir_of(const std::string& p) {
  auto sl = p.rfind('/');
  if (sl == std::string::npos) return ".";
  if (sl == 0) return "/";
  return p.substr(0, sl);
}

std::string base_of(const std::string& p) {
  auto sl = p.rfind('/');
  return sl == std::string::npos ? p : p.substr(sl + 1);
}

// What names one file: its inode when it exists (so hard links and
// symbolic links compare equal), else its resolved directory and name.
std::string identity(const std::string& p) {
  struct stat st;
  if (::stat(p.c_str(), &st) == 0) return "i:" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  char buf[PATH_MAX];
  if (::realpath(dir_of(p).c_str(), buf)) return "p:" + std::string(buf) + "/" + base_of(p);
  return "p:" + p;
}


// Why `p` cannot be written as a new file, or "".
std::string unwritable(const std::string& p) {
  if (p.empty()) return "an empty file name";
  std::string dir = dir_of(p);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return "directory " + dir + " does not exist";
  if (!S_ISDIR(st.st_mode)) return dir + " is not a directory";
  if (::stat(p.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return "it is a directory";
    if (::access(p.c_str(), W_OK) != 0) return std::string("not writable: ") + std::strerror(errno);
    return "";
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "directory " + dir + " is not writable: " + std::strerror(errno);
  return "";
}

}  // namespace

void vdev_files(const std::string& spec, std::vector<std::string>& reads, std::vector<std::string>& writes) {
  size_t pos = spec.find(',');
  while (pos != std::string::npos) {
    size_t next = spec.find(',', pos + 1);
    std::string kv = spec.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    auto eq = kv.find('=');
    if (eq != std::string::npos) {
      std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
      if (k == "rx_pcap") reads.push_back(v);
      else if (k == "tx_pcap") writes.push_back(v);
    }
    pos = next;
  }
}

std::vector<std::string> check_ports(const EngineConfig& cfg, std::vector<std::string>* where) {
  std::vector<std::string> errs;
  std::string at;  // the place of what is being checked
  auto fail = [&](const std::string& m) {
    errs.push_back(m);
    if (where) where->push_back(at);
  };
  // Everything read: pcap inputs and the files vdevs read.
  std::vector<std::pair<std::string, std::string>> reads;  // (path, what)
  for (auto& in : cfg.inputs) {
    if (in.kind == PortSpec::Kind::PcapFile) {
      for (const auto& f : in.files.empty() ? std::vector<std::string>{in.spec} : in.files) reads.push_back({f, "input " + f});
      continue;
    }
    std::vector<std::string> r, w;
    vdev_files(in.spec, r, w);
    for (auto& f : r) reads.push_back({f, "input port " + in.spec.substr(0, in.spec.find(','))});
  }
  std::map<std::string, std::string> out_ids;    // identity -> who writes it
  std::map<std::string, std::string> out_ports;  // ethdev name -> consumer
  auto writes_file = [&](const std::string& who, const std::string& path) {
    std::string why = unwritable(path);
    if (!why.empty()) fail(who + ": output " + path + ": " + why);
    std::string id = identity(path);
    for (auto& [rp, what] : reads)
      if (identity(rp) == id) fail(who + ": output " + path + " is " + what + " (it would be overwritten)");
    auto [it, fresh] = out_ids.emplace(id, who);
    if (!fresh) fail(who + ": output " + path + " is also written by " + it->second);
  };
  for (auto& c : cfg.consumers) {
    std::string who = "consumer '" + c.name + "'";
    at = c.output.at;
    if (c.output.kind == PortSpec::Kind::PcapFile) {
      if (c.output.files.empty()) {
        writes_file(who, c.output.spec);
        continue;
      }
      // A folder mirroring the inputs: its subfolders are made as needed.
      if (::access(c.output.spec.c_str(), W_OK | X_OK) != 0)
        fail(who + ": output folder " + c.output.spec + ": " + std::strerror(errno));
      for (const auto& p : pcap_output_paths(c.output)) {
        const std::string id = identity(p);
        for (auto& [rp, what] : reads)
          if (identity(rp) == id) fail(who + ": output " + p + " is " + what + " (it would be overwritten)");
      }
      continue;
    }
    std::string name = c.output.spec.substr(0, c.output.spec.find(','));
    auto [it, fresh] = out_ports.emplace(name, who);
    if (!fresh) fail(who + ": output port " + name + " is also the output of " + it->second);
    std::vector<std::string> r, w;
    vdev_files(c.output.spec, r, w);
    for (auto& f : w) writes_file(who, f);
  }
  return errs;
}

}  // namespace amon
