// The sharing client: one thread per box between its z-anonymity store and
// a NATS JetStream stream. Why NATS and how the pieces fit: doc/zanon.md,
// "Several boxes".
#include "share.h"

#include <nats/nats.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "siphash.h"
#include "zanon.h"

namespace amon::share {

namespace {

// The wire: a message is a 16-byte header (magic, count, sender) and `count`
// records of 32 bytes, all little-endian: value hash (2 x 8), user hash,
// time (ns). Nothing else leaves the box.
constexpr uint32_t kMagic = 0x315a4d41;  // "AMZ1"
constexpr size_t kHeader = 16, kRecord = 32;
// Observations per message: batching is what makes publishing cheap (about
// 9 M/s at 64 a message on the development VM); 512 keeps a message at 16 KiB.
constexpr size_t kPerMessage = 512;
// Observations held while the server is unreachable, published on reconnect;
// more are dropped (the others then count fewer users: safe).
constexpr size_t kBacklog = size_t{1} << 20;
constexpr int kFetchBatch = 64;

uint64_t wall_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

std::string subject_of(const std::string& stream) { return "amon.zanon." + stream; }

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

std::string status_text(natsStatus s) { return natsStatus_GetText(s); }

// Reconnect backoff: 100 ms doubling to 5 s.
int64_t backoff(natsConnection*, int attempts, void*) {
  return std::min<int64_t>(5000, int64_t(100) << std::min(attempts, 6));
}

// The connection's state is polled (Impl::track_state), not pushed.
void on_connected(natsConnection*, void*) {}

// The client's options from the settings: servers, reconnect forever with
// backoff, retry a connection that fails at start, TLS and credentials.
natsStatus make_options(const Settings& s, natsOptions** out, bool retry) {
  natsOptions* o = nullptr;
  natsStatus st = natsOptions_Create(&o);
  // One server, or a cluster's (comma-separated): the library tries them
  // in turn and moves to another when one is lost.
  std::vector<std::string> urls;
  for (size_t i = 0; i <= s.url.size();) {
    size_t j = s.url.find(',', i);
    if (j == std::string::npos) j = s.url.size();
    if (j > i) urls.push_back(s.url.substr(i, j - i));
    i = j + 1;
  }
  std::vector<const char*> servers;
  for (const std::string& u : urls) servers.push_back(u.c_str());
  if (st == NATS_OK) st = natsOptions_SetServers(o, servers.data(), int(servers.size()));
  if (st == NATS_OK) st = natsOptions_SetName(o, "amon zanon share");
  if (st == NATS_OK) st = natsOptions_SetMaxReconnect(o, -1);
  if (st == NATS_OK) st = natsOptions_SetCustomReconnectDelay(o, backoff, nullptr);
  // With a callback the first connection is made in the background: a
  // server down at start-up must not hold the box (without one the call
  // retries synchronously, forever with MaxReconnect -1).
  if (st == NATS_OK && retry) st = natsOptions_SetRetryOnFailedConnect(o, true, on_connected, nullptr);
  if (st == NATS_OK && !s.tls_ca.empty()) {
    st = natsOptions_SetSecure(o, true);
    if (st == NATS_OK) st = natsOptions_LoadCATrustedCertificates(o, s.tls_ca.c_str());
  }
  if (st == NATS_OK && !s.tls_cert.empty()) st = natsOptions_LoadCertificatesChain(o, s.tls_cert.c_str(), s.tls_key.c_str());
  if (st == NATS_OK && !s.creds.empty()) st = natsOptions_SetUserCredentialsFromFiles(o, s.creds.c_str(), nullptr);
  if (st != NATS_OK) natsOptions_Destroy(o), o = nullptr;
  *out = o;
  return st;
}

}  // namespace

bool load_keys(const std::string& path, Keys& out, std::string& err) {
  struct stat sb {};
  if (stat(path.c_str(), &sb) != 0) return err = path + ": " + std::strerror(errno), false;
  // The key makes the hashes on the wire unguessable: readable by others, it
  // would let them test a name against the stream.
  if (sb.st_mode & 077) return err = path + ": readable by group or others (chmod 600)", false;
  std::ifstream f(path, std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // Hex text (as `openssl rand -hex 32` writes) or raw bytes.
  std::string t = raw;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  std::vector<uint8_t> k;
  const bool hex = !t.empty() && t.size() % 2 == 0 && std::all_of(t.begin(), t.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c));
  });
  if (hex) {
    for (size_t i = 0; i < t.size(); i += 2) k.push_back(uint8_t(std::stoi(t.substr(i, 2), nullptr, 16)));
  } else {
    k.assign(raw.begin(), raw.end());
  }
  if (k.size() < 32) return err = path + ": a share key needs at least 32 bytes (openssl rand -hex 32)", false;
  // Two keys from one secret, each a keyed hash of the rest under its label.
  auto derive = [&](uint64_t label, std::array<uint8_t, 16>& dst) {
    const zanon::Hash128 h = zanon::siphash128(k.data(), label, k.data() + 16, k.size() - 16);
    std::memcpy(dst.data(), &h.lo, 8);
    std::memcpy(dst.data() + 8, &h.hi, 8);
  };
  derive(0x65726f74732d7a61ULL, out.store);  // "az-store"
  derive(0x726573752d7a61ULL, out.user);     // "az-user"
  return true;
}

bool same_settings(const Settings& a, const Settings& b) {
  return a.url == b.url && a.stream == b.stream && a.key_file == b.key_file && a.replay_at_start == b.replay_at_start &&
         a.replay_timeout_ns == b.replay_timeout_ns && a.replicas == b.replicas && a.creds == b.creds &&
         a.tls_ca == b.tls_ca && a.tls_cert == b.tls_cert && a.tls_key == b.tls_key;
}

bool check_settings(const Settings& s, std::string& err) {
  if (s.url.empty()) return err = "zanon.share.url is missing", false;
  if (s.url.rfind("nats://", 0) != 0 && s.url.rfind("tls://", 0) != 0)
    return err = "zanon.share.url: expected nats://HOST:PORT or tls://HOST:PORT, got '" + s.url + "'", false;
  if (!valid_name(s.stream)) return err = "zanon.share.stream: letters, digits, - and _ only (1..64), got '" + s.stream + "'", false;
  if (s.key_file.empty()) return err = "zanon.share.key is missing (a file with the deployment's secret)", false;
  if (s.replicas < 1 || s.replicas > 5) return err = "zanon.share.replicas: 1 to 5", false;
  if (s.tls_cert.empty() != s.tls_key.empty()) return err = "zanon.share: tls_cert and tls_key go together", false;
  Keys k;
  return load_keys(s.key_file, k, err);
}

bool reachable(const Settings& s, int timeout_ms, std::string& err) {
  natsOptions* o = nullptr;
  natsStatus st = make_options(s, &o, false);
  if (st == NATS_OK) st = natsOptions_SetTimeout(o, timeout_ms);
  if (st == NATS_OK) st = natsOptions_SetMaxReconnect(o, 0);
  natsConnection* nc = nullptr;
  if (st == NATS_OK) st = natsConnection_Connect(&nc, o);
  if (st == NATS_OK) {
    jsCtx* js = nullptr;
    jsStreamInfo* si = nullptr;
    jsErrCode je = jsErrCode(0);
    st = natsConnection_JetStream(&js, nc, nullptr);
    // A stream not there yet is fine (the first box creates it); JetStream
    // off on the server is not.
    if (st == NATS_OK) {
      jsAccountInfo* ai = nullptr;
      st = js_GetAccountInfo(&ai, js, nullptr, &je);
      if (ai) jsAccountInfo_Destroy(ai);
    }
    if (si) jsStreamInfo_Destroy(si);
    if (js) jsCtx_Destroy(js);
  }
  if (st != NATS_OK) err = s.url + ": " + status_text(st) + " (" + nats_GetLastError(nullptr) + ")";
  if (nc) natsConnection_Destroy(nc);
  if (o) natsOptions_Destroy(o);
  return st == NATS_OK;
}

struct Client::Impl {
  Settings s;
  zanon::Store& store;
  uint64_t max_dt;
  bool live;
  LogFn log;
  std::string subject;
  uint64_t me = 0;  // this process on the wire: its own messages are skipped

  natsOptions* opts = nullptr;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  natsSubscription* sub = nullptr;
  bool stream_ok = false, stream_err_logged = false;
  uint64_t next_seq = 0;  // the stream sequence to resume reading at (0: by time)
  // Fetches that found nothing in a row: a consumer lost with a cluster
  // node answers nothing too, so now and then its existence is checked.
  unsigned idle_fetches = 0;

  std::thread th;
  std::atomic<bool> stop{false};
  std::vector<zanon::Obs> backlog;
  std::vector<uint8_t> msg;

  std::atomic<bool> connected{false}, replayed{false};
  std::atomic<uint64_t> published{0}, received{0}, own_skipped{0}, dropped{0}, outages{0}, publish_errors{0},
      lag_msgs{0}, lag_ns{0};
  bool was_connected = false, logged_state = false;

  Impl(const Settings& st, zanon::Store& z, uint64_t dt, bool lv, LogFn lg)
      : s(st), store(z), max_dt(dt), live(lv), log(std::move(lg)), subject(subject_of(st.stream)) {
    if (getrandom(&me, sizeof me, 0) != ssize_t(sizeof me)) throw std::runtime_error("share: getrandom failed");
  }

  static void on_pub_error(jsCtx*, jsPubAckErr*, void* self) {
    static_cast<Impl*>(self)->publish_errors.fetch_add(1, std::memory_order_relaxed);
  }

  // Logs a change of the connection's state once, and counts losses.
  void track_state() {
    const bool now = nc && natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED;
    connected.store(now, std::memory_order_relaxed);
    if (logged_state && now == was_connected) return;
    if (now) {
      log(false, "zanon share: connected to " + s.url + ", stream " + s.stream);
    } else {
      outages.fetch_add(1, std::memory_order_relaxed);
      log(true, "zanon share: " + s.url + " unreachable; deciding on this box's own counts (hides more) "
                "and retrying");
    }
    was_connected = now;
    logged_state = true;
  }

  // The stream (created when missing, retention the largest dt) and a pull
  // consumer without acknowledgements (acknowledging each message made a
  // replay hundreds of times slower), from the stream's last dt or from
  // where reading stopped.
  bool setup() {
    jsErrCode je = jsErrCode(0);
    if (!stream_ok) {
      jsStreamInfo* si = nullptr;
      natsStatus st = js_GetStreamInfo(&si, js, s.stream.c_str(), nullptr, &je);
      if (st == NATS_NOT_FOUND) {
        jsStreamConfig sc;
        jsStreamConfig_Init(&sc);
        const char* subj[] = {subject.c_str()};
        sc.Name = s.stream.c_str();
        sc.Subjects = subj;
        sc.SubjectsLen = 1;
        sc.Storage = js_FileStorage;
        sc.MaxAge = int64_t(std::max<uint64_t>(max_dt, 1000000000ULL));
        sc.Replicas = s.replicas;
        st = js_AddStream(&si, js, &sc, nullptr, &je);
        // Another box may have created it in between.
        if (st != NATS_OK && je == JSStreamNameExistErr) st = js_GetStreamInfo(&si, js, s.stream.c_str(), nullptr, &je);
      }
      if (st == NATS_OK && si && si->Config && uint64_t(si->Config->MaxAge) && uint64_t(si->Config->MaxAge) < max_dt)
        log(true, "zanon share: stream " + s.stream + " keeps less than the largest dt: a replay cannot restore "
                  "everything (raise its max age)");
      if (si) jsStreamInfo_Destroy(si);
      if (st != NATS_OK) {
        // Once until it works (a cluster electing a leader refuses a while).
        if (!stream_err_logged)
          log(true, "zanon share: stream " + s.stream + ": " + status_text(st) + "; retrying");
        stream_err_logged = true;
        return false;
      }
      stream_err_logged = false;
      stream_ok = true;
    }
    if (!sub) {
      jsSubOptions so;
      jsSubOptions_Init(&so);
      so.Stream = s.stream.c_str();
      so.Config.AckPolicy = js_AckNone;
      so.Config.InactiveThreshold = int64_t(60) * 1000000000;
      if (next_seq) {
        so.Config.DeliverPolicy = js_DeliverByStartSequence;
        so.Config.OptStartSeq = next_seq;
      } else {
        so.Config.DeliverPolicy = js_DeliverByStartTime;
        so.Config.OptStartTime = int64_t(wall_ns() - std::min(max_dt, wall_ns()));
      }
      natsStatus st = js_PullSubscribe(&sub, js, subject.c_str(), nullptr, nullptr, &so, &je);
      if (st != NATS_OK) {
        sub = nullptr;
        return false;
      }
    }
    return true;
  }

  void drop_sub() {
    if (sub) natsSubscription_Destroy(sub);
    sub = nullptr;
  }

  // Reads what is there (up to `rounds` fetches); returns messages read.
  // Fetch errors other than "nothing new" drop the consumer: it is made
  // again from the next sequence once the server is back.
  size_t consume(int rounds, int64_t wait_ms) {
    size_t n = 0;
    for (int r = 0; r < rounds && sub; ++r) {
      natsMsgList list{};
      jsErrCode je = jsErrCode(0);
      // libnats before 3.10 (Debian 12 has 3.4.1) writes past its own array
      // when a fetch starts with more than half its batch already pending
      // (messages of an earlier pull that came after its timeout; fixed
      // upstream by nats.c#749): ask for at least twice what is pending.
      int pending = 0;
      if (natsSubscription_GetPending(sub, &pending, nullptr) != NATS_OK) pending = 0;
      const int batch = kFetchBatch + 2 * std::max(pending, 0);
      natsStatus st = natsSubscription_Fetch(&list, sub, batch, wait_ms, &je);
      if (st == NATS_TIMEOUT) {
        lag_msgs.store(0, std::memory_order_relaxed);
        lag_ns.store(0, std::memory_order_relaxed);
        if (++idle_fetches % 32 == 0) {
          jsConsumerInfo* ci = nullptr;
          if (natsSubscription_GetConsumerInfo(&ci, sub, nullptr, &je) != NATS_OK) drop_sub();
          if (ci) jsConsumerInfo_Destroy(ci);
        }
        return n;
      }
      idle_fetches = 0;
      if (st != NATS_OK) {
        drop_sub();
        return n;
      }
      for (int i = 0; i < list.Count; ++i) take(list.Msgs[i]);
      n += size_t(list.Count);
      const int got = list.Count;
      natsMsgList_Destroy(&list);
      if (got < batch) return n;
    }
    return n;
  }

  void take(natsMsg* m) {
    jsMsgMetaData* meta = nullptr;
    if (natsMsg_GetMetaData(&meta, m) == NATS_OK && meta) {
      next_seq = meta->Sequence.Stream + 1;
      lag_msgs.store(meta->NumPending, std::memory_order_relaxed);
      const uint64_t now = wall_ns();
      lag_ns.store(meta->NumPending && uint64_t(meta->Timestamp) < now ? now - uint64_t(meta->Timestamp) : 0,
                   std::memory_order_relaxed);
      jsMsgMetaData_Destroy(meta);
    }
    const auto* p = reinterpret_cast<const uint8_t*>(natsMsg_GetData(m));
    const size_t len = size_t(natsMsg_GetDataLength(m));
    // Malformed messages are skipped whole: nothing of them is counted.
    if (len < kHeader || uint32_t(get64(p)) != kMagic) return;
    const uint32_t count = uint32_t(get64(p) >> 32);
    if (count > kPerMessage || len != kHeader + size_t(count) * kRecord) return;
    if (get64(p + 8) == me) {
      own_skipped.fetch_add(count, std::memory_order_relaxed);
      return;
    }
    zanon::Obs buf[kPerMessage];
    for (uint32_t i = 0; i < count; ++i) {
      const uint8_t* r = p + kHeader + size_t(i) * kRecord;
      buf[i] = zanon::Obs{get64(r), get64(r + 8), get64(r + 16), get64(r + 24)};
    }
    store.receive(std::span<const zanon::Obs>(buf, count));
    received.fetch_add(count, std::memory_order_relaxed);
  }

  // Sends the backlog in messages of up to kPerMessage observations.
  void publish() {
    size_t off = 0;
    while (off < backlog.size()) {
      const size_t n = std::min(kPerMessage, backlog.size() - off);
      msg.resize(kHeader + n * kRecord);
      put64(msg.data(), uint64_t(kMagic) | uint64_t(n) << 32);
      put64(msg.data() + 8, me);
      for (size_t i = 0; i < n; ++i) {
        const zanon::Obs& o = backlog[off + i];
        uint8_t* r = msg.data() + kHeader + i * kRecord;
        put64(r, o.h_lo), put64(r + 8, o.h_hi), put64(r + 16, o.user), put64(r + 24, o.t_ns);
      }
      if (js_PublishAsync(js, subject.c_str(), msg.data(), int(msg.size()), nullptr) != NATS_OK) break;
      published.fetch_add(n, std::memory_order_relaxed);
      off += n;
    }
    backlog.erase(backlog.begin(), backlog.begin() + ptrdiff_t(off));
  }

  // The store's queued observations into the backlog (bounded).
  void collect() {
    std::vector<zanon::Obs> got;
    store.take_outbox(got, SIZE_MAX);
    const size_t room = kBacklog > backlog.size() ? kBacklog - backlog.size() : 0;
    if (got.size() > room) dropped.fetch_add(got.size() - room, std::memory_order_relaxed);
    backlog.insert(backlog.end(), got.begin(), got.begin() + ptrdiff_t(std::min(room, got.size())));
  }

  // The stream's last sequence now (0: empty), or -1 when it cannot say.
  int64_t last_seq() {
    jsStreamInfo* si = nullptr;
    jsErrCode je = jsErrCode(0);
    int64_t r = -1;
    if (js_GetStreamInfo(&si, js, s.stream.c_str(), nullptr, &je) == NATS_OK && si) r = int64_t(si->State.LastSeq);
    if (si) jsStreamInfo_Destroy(si);
    return r;
  }

  // The start-up replay: read up to the stream's last sequence at the
  // start (what the others had published then), or until the deadline.
  // Returns whether it completed.
  bool replay(uint64_t deadline_wall) {
    int64_t target = -1;
    while (!stop.load(std::memory_order_relaxed) && wall_ns() < deadline_wall) {
      // Live, what the stream holds is older than now: it counts at once.
      // Left waiting for the first packet it would fill the wait heap, which
      // drops what does not fit: a restart of a busy box would forget most
      // of its last dt.
      if (live) store.apply_due(wall_ns() - std::min<uint64_t>(wall_ns(), 1000000000ULL));
      track_state();
      if (!connected.load(std::memory_order_relaxed) || !setup()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (target < 0) target = last_seq();
      if (target == 0) return true;
      consume(1000, 200);
      // Messages older than the replayed window are gone from the stream
      // (MaxAge) and never read: nothing pending means done as well.
      if (target > 0 && (next_seq > uint64_t(target) ||
                         (next_seq && lag_msgs.load(std::memory_order_relaxed) == 0)))
        return true;
    }
    return false;
  }

  void mark_replayed(bool ok, uint64_t t0) {
    replayed.store(true, std::memory_order_relaxed);
    const double secs = double(wall_ns() - t0) / 1e9;
    char b[160];
    std::snprintf(b, sizeof b, "zanon share: replay %s: %llu observations of other boxes in %.2f s",
                  ok ? "done" : "stopped at the time limit (deciding on what it has)",
                  (unsigned long long)received.load(), secs);
    log(!ok, b);
  }

  void loop(bool replay_first) {
    const uint64_t t0 = wall_ns();
    if (replay_first) mark_replayed(replay(t0 + s.replay_timeout_ns), t0);
    while (!stop.load(std::memory_order_relaxed)) {
      track_state();
      collect();
      size_t n = 0;
      if (connected.load(std::memory_order_relaxed) && setup()) {
        if (!backlog.empty()) publish();
        n = consume(8, 20);
        if (!replayed.load(std::memory_order_relaxed) && lag_msgs.load(std::memory_order_relaxed) == 0)
          mark_replayed(true, t0);
      } else {
        drop_sub();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      // Live, packet times are the wall clock: what is older than now counts
      // at once instead of waiting for a packet to pass it.
      if (live) store.apply_due(wall_ns() - std::min<uint64_t>(wall_ns(), 1000000000ULL));
      if (!n && backlog.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
};

Client::Client(const Settings& s, zanon::Store& store, uint64_t max_dt_ns, bool live, LogFn log)
    : impl_(std::make_unique<Impl>(s, store, max_dt_ns, live, std::move(log))) {}

Client::~Client() { stop(0); }

void Client::start() {
  Impl& m = *impl_;
  natsStatus st = make_options(m.s, &m.opts, true);
  if (st != NATS_OK) throw std::runtime_error("zanon share: client options: " + status_text(st) + " (" +
                                              nats_GetLastError(nullptr) + ")");
  st = natsConnection_Connect(&m.nc, m.opts);
  // Not yet connected is fine: the client keeps trying in the background.
  if (st != NATS_OK && st != NATS_NOT_YET_CONNECTED)
    throw std::runtime_error("zanon share: " + m.s.url + ": " + status_text(st));
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.PublishAsync.MaxPending = 256;
  jo.PublishAsync.ErrHandler = Impl::on_pub_error;
  jo.PublishAsync.ErrHandlerClosure = &m;
  st = natsConnection_JetStream(&m.js, m.nc, &jo);
  if (st != NATS_OK) throw std::runtime_error("zanon share: JetStream context: " + status_text(st));
  if (m.s.replay_at_start) {
    const uint64_t t0 = wall_ns();
    m.mark_replayed(m.replay(t0 + m.s.replay_timeout_ns), t0);
    m.th = std::thread([&m] { m.loop(false); });
  } else {
    m.th = std::thread([&m] { m.loop(true); });
  }
}

void Client::stop(int timeout_ms) {
  Impl& m = *impl_;
  if (!m.th.joinable()) return;
  // The last observations out before the thread goes.
  m.stop.store(true);
  m.th.join();
  m.collect();
  if (m.connected.load() && m.js) {
    m.publish();
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = timeout_ms;
    js_PublishAsyncComplete(m.js, &po);
  }
  m.drop_sub();
  if (m.js) jsCtx_Destroy(m.js), m.js = nullptr;
  if (m.nc) natsConnection_Destroy(m.nc), m.nc = nullptr;
  if (m.opts) natsOptions_Destroy(m.opts), m.opts = nullptr;
}

std::string to_text(const Status& s) {
  std::ostringstream o;
  o << (s.connected ? "connected" : "disconnected") << (s.replayed ? "" : " (replaying)") << " published=" << s.published
    << " received=" << s.received << " dropped=" << s.dropped << " outages=" << s.outages
    << " publish_errors=" << s.publish_errors << " lag_msgs=" << s.lag_msgs << " lag_ms=" << s.lag_ns / 1000000;
  return o.str();
}

std::string to_json(const Status& s) {
  std::ostringstream o;
  o << "{\"connected\":" << (s.connected ? "true" : "false") << ",\"replayed\":" << (s.replayed ? "true" : "false")
    << ",\"published\":" << s.published << ",\"received\":" << s.received << ",\"own_skipped\":" << s.own_skipped
    << ",\"dropped\":" << s.dropped << ",\"outages\":" << s.outages << ",\"publish_errors\":" << s.publish_errors
    << ",\"lag_msgs\":" << s.lag_msgs << ",\"lag_ns\":" << s.lag_ns << "}";
  return o.str();
}

Status Client::status() const {
  const Impl& m = *impl_;
  Status s;
  s.connected = m.connected.load(std::memory_order_relaxed);
  s.replayed = m.replayed.load(std::memory_order_relaxed);
  s.published = m.published.load(std::memory_order_relaxed);
  s.received = m.received.load(std::memory_order_relaxed);
  s.own_skipped = m.own_skipped.load(std::memory_order_relaxed);
  const zanon::Stats z = m.store.stats();
  s.dropped = m.dropped.load(std::memory_order_relaxed) + z.outbox_dropped + z.received_dropped;
  s.outages = m.outages.load(std::memory_order_relaxed);
  s.publish_errors = m.publish_errors.load(std::memory_order_relaxed);
  s.lag_msgs = m.lag_msgs.load(std::memory_order_relaxed);
  s.lag_ns = m.lag_ns.load(std::memory_order_relaxed);
  return s;
}

}  // namespace amon::share
