// One amon per DPDK file prefix, and no two on the same pinned CPUs.
//
// DPDK keeps a process's runtime files (the telemetry socket, with shared
// configuration its memory maps and IPC socket) in a folder named after its
// file prefix. With --no-shconf, as amon's defaults run, nothing stops a
// second process from taking the same prefix: its telemetry then answers
// for the first one's, or not at all. amon holds an flock on that folder
// for its lifetime (an flock dies with its process, so a crash leaves no
// stale claim), names itself in it (amon.pid: its pid, then the CPUs its
// pinned lcores run on), refuses to start where another amon holds it or
// any of those CPUs, and removes the folder at exit, as rte_eal_cleanup
// does not.
#include "engine_parts.h"

#include <dirent.h>
#include <fcntl.h>
#include <rte_lcore.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace amon::engine {

namespace {

// DPDK's choice (eal_create_runtime_dir): /var/run/dpdk for root, else
// $XDG_RUNTIME_DIR/dpdk or /tmp/dpdk.
std::string dpdk_run_base() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  return std::string(getuid() == 0 ? "/var/run" : xdg ? xdg : "/tmp") + "/dpdk";
}

std::string file_prefix(const std::vector<std::string>& eal) {
  std::string p = "rte";
  for (size_t i = 0; i < eal.size(); ++i) {
    if (eal[i].rfind("--file-prefix=", 0) == 0) p = eal[i].substr(14);
    else if (eal[i] == "--file-prefix" && i + 1 < eal.size()) p = eal[i + 1];
  }
  return p;
}

std::string list_cpus(const std::set<unsigned>& cpus) {
  std::string s;
  for (unsigned c : cpus) s += (s.empty() ? "" : ",") + std::to_string(c);
  return s;
}

// amon.pid of a folder: the pid, and the pinned CPUs once known.
void read_claim(const std::string& dir, long& pid, std::set<unsigned>& cpus) {
  std::ifstream f(dir + "/amon.pid");
  std::string cpu_line;
  f >> pid;
  f >> cpu_line;
  std::stringstream ss(cpu_line);
  for (std::string c; std::getline(ss, c, ',');)
    if (!c.empty()) cpus.insert(unsigned(std::strtoul(c.c_str(), nullptr, 10)));
}

}  // namespace

bool claim_runtime_dir(const std::vector<std::string>& eal, RuntimeDir& rd, std::string& err) {
  rd.prefix = file_prefix(eal);
  const std::string base = dpdk_run_base();
  rd.path = base + "/" + rd.prefix;
  if (mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) {
    err = base + ": " + std::strerror(errno);
    return false;
  }
  // The folder locked must be the one at the path: an amon leaving removes
  // its folder after others may have opened it.
  bool locked = false;
  for (int tries = 0; tries < 3; ++tries) {
    if (mkdir(rd.path.c_str(), 0700) != 0 && errno != EEXIST) {
      err = rd.path + ": " + std::strerror(errno);
      return false;
    }
    rd.fd = open(rd.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rd.fd < 0) {
      err = rd.path + ": " + std::strerror(errno);
      return false;
    }
    if (flock(rd.fd, LOCK_EX | LOCK_NB) != 0) break;  // another amon holds it
    struct stat held, now;
    if (fstat(rd.fd, &held) == 0 && stat(rd.path.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
        held.st_dev == now.st_dev) {
      locked = true;
      break;
    }
    close(rd.fd);
    rd.fd = -1;
  }
  if (!locked && rd.fd < 0) {
    err = rd.path + ": removed and made again while this amon started; try again";
    return false;
  }
  if (!locked) {
    long pid = 0;
    std::set<unsigned> cpus;
    read_claim(rd.path, pid, cpus);
    err = "another amon" + (pid ? " (pid " + std::to_string(pid) + ")" : std::string()) +
          " runs with the DPDK file prefix '" + rd.prefix + "' (" + rd.path +
          "); give this one its own: `eal: [..., --file-prefix=NAME]` in the YAML or `amon run ... -- "
          "--file-prefix=NAME`";
    close(rd.fd);
    rd.fd = -1;
    return false;
  }
  std::ofstream(rd.path + "/amon.pid") << getpid() << "\n";
  return true;
}

bool check_lcores(RuntimeDir& rd, unsigned workers, std::string& err) {
  // The CPUs of lcores pinned to fewer than all CPUs: the default lcores
  // float over the machine and share it through the scheduler.
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  std::set<unsigned> mine;
  unsigned lc = rte_get_main_lcore();
  for (unsigned i = 0; i <= workers && lc < RTE_MAX_LCORE; ++i, lc = rte_get_next_lcore(lc, 1, 0)) {
    rte_cpuset_t set = rte_lcore_cpuset(lc);
    if (CPU_COUNT(&set) >= ncpu) continue;
    for (unsigned c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) mine.insert(c);
  }
  if (mine.empty()) return true;
  std::ofstream(rd.path + "/amon.pid") << getpid() << "\n" << list_cpus(mine) << "\n";
  const std::string base = dpdk_run_base();
  DIR* d = opendir(base.c_str());
  if (!d) return true;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || name == rd.prefix) continue;
    const std::string dir = base + "/" + name;
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    // A folder whose lock we can take belongs to no running amon.
    const bool held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    if (!held) continue;
    long pid = 0;
    std::set<unsigned> theirs, both;
    read_claim(dir, pid, theirs);
    for (unsigned c : mine)
      if (theirs.count(c)) both.insert(c);
    if (both.empty()) continue;
    err = "the lcores run on CPUs " + list_cpus(both) + ", which amon (pid " + std::to_string(pid) +
          ", file prefix '" + name + "') has pinned lcores on; give this one other CPUs (`-l`/`--lcores` in `eal`)";
    closedir(d);
    return false;
  }
  closedir(d);
  return true;
}

// After rte_eal_cleanup: DPDK's files and the folder go (whatever DPDK
// left there is this process's: the folder was held all along).
void release_runtime_dir(RuntimeDir& rd) {
  if (rd.fd < 0) return;
  if (DIR* d = opendir(rd.path.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") unlink((rd.path + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(rd.path.c_str());
  close(rd.fd);
  rd.fd = -1;
}

}  // namespace amon::engine
