// Several amon boxes share one z-anonymity view through a NATS JetStream
// stream (doc/zanon.md, "Several boxes"). Each box publishes the
// observations that changed its store (keyed value hash, keyed user hash,
// time) and counts every other box's into its own exact store; the stream
// keeps the largest dt in use, so a box started late or restarted replays
// it and decides as before.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace amon::zanon {
class Store;
}

namespace amon::share {

// `zanon: { share: { ... } }` in the YAML, or `amon pcap --share-config FILE`.
struct Settings {
  std::string url;       // nats://[user:pass@]host:port, several comma-separated (a cluster)
  std::string stream;    // JetStream stream name (created if missing)
  std::string key_file;  // the deployment's shared secret (>= 32 bytes, mode 0600)
  // Before the ports start, replay the stream's last dt (default), or start
  // at once on the box's own counts and catch up in the background.
  bool replay_at_start = true;
  uint64_t replay_timeout_ns = 30ULL * 1000000000ULL;  // start anyway (safe) after this
  uint32_t replicas = 1;  // of a stream this box creates (3 on a three-node cluster)
  // The client's own authentication and TLS (doc/operations.md).
  std::string creds;                     // NATS .creds file (JWT + nkey)
  std::string tls_ca, tls_cert, tls_key;  // tls_ca alone: server verified; cert+key: client certificate
  bool enabled() const { return !url.empty(); }
};

// The keys the deployment's key file gives every box alike: the store's
// (value hashes) and the user hash's.
struct Keys {
  std::array<uint8_t, 16> store{}, user{};
};
// Reads and checks the key file; false with `err` set when it cannot be used.
bool load_keys(const std::string& path, Keys& out, std::string& err);

// Whether two settings are the same connection (a reload cannot change it).
bool same_settings(const Settings& a, const Settings& b);

// Checks settings without connecting (amon check): the key file, the names.
bool check_settings(const Settings& s, std::string& err);
// Whether a server answers at s.url within timeout_ms (amon check's warning).
bool reachable(const Settings& s, int timeout_ms, std::string& err);

struct Status {
  bool connected = false;
  bool replayed = false;        // the start-up (or background) replay is done
  uint64_t published = 0;       // observations sent to the stream
  uint64_t received = 0;        // other boxes' observations taken from the stream
  uint64_t own_skipped = 0;     // this box's own, seen again on the stream
  uint64_t dropped = 0;         // not shared: full queues (safe, fewer counts)
  uint64_t outages = 0;         // times the connection was lost (or never made at start)
  uint64_t publish_errors = 0;  // publishes the server did not acknowledge
  uint64_t lag_msgs = 0;        // messages of the stream not yet read
  uint64_t lag_ns = 0;          // age of the newest message read, while behind
};

// The end-of-run report's line and the stats JSON's object.
std::string to_text(const Status& s);
std::string to_json(const Status& s);

using LogFn = std::function<void(bool error, const std::string& msg)>;

class Client {
 public:
  // max_dt_ns: the largest dt in use (the stream's retention and the replay).
  // live: packet times are the wall clock (amon run): received observations
  // older than now count at once rather than waiting for a packet to pass
  // them.
  Client(const Settings& s, zanon::Store& store, uint64_t max_dt_ns, bool live, LogFn log);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Connects (a server down is not an error: the box runs on its own counts
  // and keeps trying), replays when the settings say so, then runs on its
  // own thread. Throws only for settings that cannot work.
  void start();
  // Publishes what is queued, waits up to timeout_ms for the server's
  // acknowledgements, stops the thread.
  void stop(int timeout_ms = 2000);
  Status status() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace amon::share
