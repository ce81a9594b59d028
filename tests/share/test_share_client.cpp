// The sharing client against a real nats-server (tests/share/README.md).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "share.h"
#include "zanon.h"

using namespace amon;
using namespace std::chrono_literals;

namespace {

bool have_server() { return std::system("command -v nats-server >/dev/null 2>&1") == 0; }

int free_port() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  close(s);
  return ntohs(a.sin_port);
}

bool port_open(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(s);
  return ok;
}

// nats-server -js on a loopback port, its store in `dir`; with `cluster`
// (its own route port and the routes of all nodes) one node of a cluster.
struct Server {
  int port;
  std::string dir;
  std::string name = "n1";
  std::vector<std::string> cluster;  // --cluster_name ... -cluster URL -routes URLS
  pid_t pid = -1;
  void start() {
    pid = fork();
    if (pid == 0) {
      freopen("/dev/null", "w", stdout);
      freopen((dir + "/nats-" + name + ".log").c_str(), "a", stderr);
      const std::string p = std::to_string(port), sd = dir + "/js-" + name;
      std::vector<std::string> args{"nats-server", "-js", "-n", name, "-a", "127.0.0.1", "-p", p, "-sd", sd};
      args.insert(args.end(), cluster.begin(), cluster.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("nats-server", argv.data());
      _exit(127);
    }
    for (int i = 0; i < 200 && !port_open(port); ++i) std::this_thread::sleep_for(50ms);
  }
  void kill_now() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    pid = -1;
  }
  ~Server() { kill_now(); }
};

bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return cond();
}

zanon::Config shared_config(const share::Keys& k) {
  zanon::Config c;
  c.max_values = 4096;
  c.zmax = 10;
  c.max_dt_ns = 60ULL * 1000000000ULL;
  c.shared = true;
  c.key = k.store;
  return c;
}

constexpr uint64_t kS = 1000000000ULL;

// A scratch folder with the deployment's key file (mode 0600); skips the
// test (exit 77) without nats-server.
struct Scratch {
  std::string dir, keyf;
  share::Keys keys;
  Scratch(const char* tag, const char* hex) {
    if (!have_server()) {
      WARN("nats-server is not installed (scripts/setup): skipped");
      std::exit(77);
    }
    dir = std::filesystem::temp_directory_path() / (std::string(tag) + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    keyf = dir + "/share.key";
    std::ofstream(keyf) << hex << "\n";
    chmod(keyf.c_str(), 0600);
    std::string err;
    REQUIRE(share::load_keys(keyf, keys, err));
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
};

}  // namespace

TEST_CASE("two boxes share observations, replay, and survive the server's loss") {
  Scratch sc("amon-share-", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  const std::string& dir = sc.dir;
  const std::string& keyf = sc.keyf;
  const share::Keys& keys = sc.keys;
  std::string err;

  Server srv{free_port(), dir};
  srv.start();
  REQUIRE(port_open(srv.port));
  share::Settings s;
  s.url = "nats://127.0.0.1:" + std::to_string(srv.port);
  s.stream = "AMON_TEST";
  s.key_file = keyf;
  s.replay_timeout_ns = 5 * kS;
  REQUIRE(share::check_settings(s, err));
  REQUIRE(share::reachable(s, 2000, err));

  std::string logs;
  auto log = [&logs](bool, const std::string& m) { logs += m + "\n"; };
  zanon::Store a(shared_config(keys)), b(shared_config(keys));
  const zanon::Scope sa{a.class_id("domain"), a.kind_id("ip.client")};
  const zanon::Scope sb{b.class_id("domain"), b.kind_id("ip.client")};
  const zanon::ZParams zp{3, 60 * kS};
  share::Client ca(s, a, 60 * kS, false, log), cb(s, b, 60 * kS, false, log);
  ca.start();
  cb.start();
  CHECK(ca.status().connected);
  CHECK(ca.status().replayed);

  // Box A sees two users of example.org, box B a third: B releases at once
  // once A's two have reached it, as one box seeing all three would.
  const zanon::Key ka = a.key(sa, "example.org"), kb = b.key(sb, "example.org");
  CHECK(ka.h.lo == kb.h.lo);
  CHECK_FALSE(a.observe(ka, 1, 10 * kS, zp));
  CHECK_FALSE(a.observe(ka, 2, 11 * kS, zp));
  REQUIRE(wait_for([&] { return cb.status().received >= 2; }));
  CHECK(b.observe(kb, 3, 12 * kS, zp));
  CHECK(ca.status().published == 2);
  // B's publication is asynchronous: once A has it, the stream holds it.
  REQUIRE(wait_for([&] { return ca.status().received >= 1; }));

  // A third box started now replays what A and B published.
  zanon::Store c(shared_config(keys));
  share::Client cc(s, c, 60 * kS, false, log);
  cc.start();
  CHECK(cc.status().replayed);
  CHECK(cc.status().received >= 3);
  const zanon::Key kc = c.key(zanon::Scope{c.class_id("domain"), c.kind_id("ip.client")}, "example.org");
  c.apply_due(13 * kS);
  CHECK(c.count_recent(kc, 13 * kS, 60 * kS) == 3);

  // The server killed mid-run: no crash, the outage counted and logged,
  // the observations made meanwhile held and delivered once it is back.
  srv.kill_now();
  REQUIRE(wait_for([&] { return !ca.status().connected && !cb.status().connected; }));
  CHECK(ca.status().outages >= 1);
  CHECK(logs.find("unreachable") != std::string::npos);
  const zanon::Key ka2 = a.key(sa, "other.example");
  for (uint64_t u = 10; u < 15; ++u) a.observe(ka2, u, 20 * kS + u, zp);
  std::this_thread::sleep_for(300ms);
  srv.start();
  REQUIRE(wait_for([&] { return ca.status().connected && cb.status().connected; }, 20s));
  REQUIRE(wait_for([&] { return cb.status().received >= 7; }, 20s));
  const zanon::Key kb2 = b.key(sb, "other.example");
  b.apply_due(40 * kS);
  CHECK(b.count_recent(kb2, 40 * kS, 60 * kS) == 5);
  CHECK(cb.status().dropped == 0);
  INFO(logs);
  ca.stop();
  cb.stop();
  cc.stop();
  srv.kill_now();
}

TEST_CASE("a three-node cluster loses a node mid-run: no crash, the sync resumes") {
  Scratch sc("amon-share-c-", "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100");
  const std::string& dir = sc.dir;
  const std::string& keyf = sc.keyf;
  const share::Keys& keys = sc.keys;

  std::vector<int> ports, routes;
  for (int i = 0; i < 3; ++i) ports.push_back(free_port()), routes.push_back(free_port());
  std::string route_list, url;
  for (int i = 0; i < 3; ++i) {
    route_list += (i ? "," : "") + std::string("nats://127.0.0.1:") + std::to_string(routes[size_t(i)]);
    url += (i ? "," : "") + std::string("nats://127.0.0.1:") + std::to_string(ports[size_t(i)]);
  }
  std::vector<std::unique_ptr<Server>> nodes;
  for (int i = 0; i < 3; ++i) {
    auto n = std::make_unique<Server>(Server{ports[size_t(i)], dir, "n" + std::to_string(i + 1), {}});
    n->cluster = {"--cluster_name", "amon", "-cluster", "nats://127.0.0.1:" + std::to_string(routes[size_t(i)]),
                  "-routes", route_list};
    n->start();
    nodes.push_back(std::move(n));
  }
  share::Settings s;
  s.url = url;
  s.stream = "AMON_CLUSTER";
  s.key_file = keyf;
  s.replicas = 3;
  s.replay_timeout_ns = 15 * kS;
  std::string logs;
  auto log = [&logs](bool, const std::string& m) { logs += m + "\n"; };
  zanon::Store a(shared_config(keys)), b(shared_config(keys));
  const zanon::Scope sa{a.class_id("domain"), a.kind_id("ip.client")};
  const zanon::Scope sb{b.class_id("domain"), b.kind_id("ip.client")};
  const zanon::ZParams zp{3, 60 * kS};
  share::Client ca(s, a, 60 * kS, false, log), cb(s, b, 60 * kS, false, log);
  ca.start();
  cb.start();
  INFO(logs);
  REQUIRE(ca.status().replayed);
  REQUIRE(cb.status().replayed);
  const zanon::Key ka = a.key(sa, "cluster.example");
  a.observe(ka, 1, 10 * kS, zp);
  a.observe(ka, 2, 11 * kS, zp);
  REQUIRE(wait_for([&] { return cb.status().received >= 2; }, 20s));

  // One node killed (whichever the clients use): they move to the others,
  // the stream (three replicas) keeps its messages and elects a new leader.
  // Observations published while it does may be refused (counted as
  // publish errors: the other box then counts fewer users, safe); the sync
  // must resume: new users keep coming until B counts three of them.
  nodes[0]->kill_now();
  const zanon::Key ka2 = a.key(sa, "after.example");
  const zanon::Key kb2 = b.key(sb, "after.example");
  uint64_t u = 100;
  const bool resumed = wait_for(
      [&] {
        a.observe(ka2, u, 30 * kS + u, zp);
        ++u;
        b.apply_due(30 * kS + u);
        return b.count_recent(kb2, 30 * kS + u, 60 * kS) >= 3;
      },
      40s);
  INFO("after the loss: A published " << ca.status().published << ", errors " << ca.status().publish_errors
                                      << "; B received " << cb.status().received << "; users tried " << u - 100);
  CHECK(resumed);
  // What was replicated before the loss is still there: a box started now
  // reads it from the surviving nodes (at start-up, or catching up just
  // after when the cluster is still settling).
  zanon::Store c(shared_config(keys));
  share::Client cc(s, c, 60 * kS, false, log);
  cc.start();
  const zanon::Key kc = c.key(zanon::Scope{c.class_id("domain"), c.kind_id("ip.client")}, "cluster.example");
  CHECK(wait_for(
      [&] {
        c.apply_due(UINT64_MAX / 2);
        return c.count_recent(kc, 60 * kS, 60 * kS) == 2;
      },
      15s));
  cc.stop();
  ca.stop();
  cb.stop();
  for (auto& n : nodes) n->kill_now();
}
