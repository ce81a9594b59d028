// Signals, and reloads: a new generation of every policy staged off the
// packet path and published to the workers with rte_rcu_qsbr.
#include "engine_parts.h"

#include <systemd/sd-daemon.h>

#include <csignal>

#include "config.h"
#include "control.h"

namespace amon::engine {

namespace {

extern "C" void on_signal(int sig) {
  if (sig == SIGHUP) g_hup.store(1, std::memory_order_relaxed), pcap_request_reopen();
  else if (sig == SIGUSR1) g_usr1.store(1, std::memory_order_relaxed);
  else g_signal.store(sig, std::memory_order_relaxed);
}

std::string fmt_dt(uint64_t ns) { return dsl::format_duration(int64_t(ns)); }

// What a YAML change may not do without a restart: ports, workers, the
// consumer list and their outputs, table sizes, EAL. "" when none changed.
std::string needs_restart(const EngineConfig& a, const EngineConfig& b) {
  std::vector<std::string> what;
  auto ports_eq = [](const PortSpec& x, const PortSpec& y) { return x.kind == y.kind && x.spec == y.spec; };
  bool inputs = a.inputs.size() == b.inputs.size();
  for (size_t i = 0; inputs && i < a.inputs.size(); ++i) inputs = ports_eq(a.inputs[i], b.inputs[i]);
  if (!inputs) what.push_back("inputs");
  if (a.workers != b.workers) what.push_back("workers");
  bool cons = a.consumers.size() == b.consumers.size();
  for (size_t i = 0; cons && i < a.consumers.size(); ++i)
    cons = a.consumers[i].name == b.consumers[i].name && ports_eq(a.consumers[i].output, b.consumers[i].output);
  if (!cons) what.push_back("consumers (names, order or outputs)");
  if (a.flows_per_worker != b.flows_per_worker || a.flow_timeouts.tcp != b.flow_timeouts.tcp ||
      a.flow_timeouts.udp != b.flow_timeouts.udp || a.flow_timeouts.other != b.flow_timeouts.other ||
      a.flow_timeouts.closed != b.flow_timeouts.closed)
    what.push_back("flows");
  if (a.hold.enabled != b.hold.enabled || a.hold.streams != b.hold.streams || a.hold.bytes != b.hold.bytes ||
      a.hold.segments != b.hold.segments || a.hold.stream_segments != b.hold.stream_segments ||
      a.hold.timeout_ns != b.hold.timeout_ns || a.reorder_records != b.reorder_records ||
      a.reorder_window_ns != b.reorder_window_ns)
    what.push_back("reassembly");
  if (a.zanon_max_values != b.zanon_max_values) what.push_back("zanon");
  if (!share::same_settings(a.share, b.share)) what.push_back("zanon.share");
  if (a.mbufs != b.mbufs) what.push_back("mbufs");
  if (a.idle.busy_ns != b.idle.busy_ns || a.idle.max_sleep_ns != b.idle.max_sleep_ns) what.push_back("idle");
  if (a.eal_config != b.eal_config) what.push_back("eal");
  std::string r;
  for (auto& w : what) r += (r.empty() ? "" : ", ") + w;
  return r;
}

}  // namespace

std::atomic<int> g_signal{0};
std::atomic<int> g_hup{0};
std::atomic<int> g_usr1{0};

void install_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaction(s, &sa, nullptr);
}

// Re-reads the YAML and every policy with its includes and keys, builds
// the programs and one set of instances per worker. Runs on a thread of its
// own, so the main lcore keeps reading inputs and writing outputs; touches
// nothing the engine is using (its inputs are copies, and the shared
// services are only referenced).
std::unique_ptr<StagedReload> stage_reload(EngineConfig old_cfg, SharedServices* services, uint32_t zmax,
                                           uint64_t zmax_dt, bool have_store, unsigned nworkers) {
  auto st = std::make_unique<StagedReload>();
  st->t0 = wall_ns();
  std::string err;
  EngineConfig& ncfg = st->cfg;
  if (!load_config(old_cfg.config_path, ncfg, err)) {
    st->error = err;
    return st;
  }
  ncfg.config_path = old_cfg.config_path;
  ncfg.eal_config = ncfg.eal_args;
  std::string restart = needs_restart(old_cfg, ncfg);
  if (!restart.empty()) {
    st->error = old_cfg.config_path + ": changes to " + restart +
                " need a restart; nothing was reloaded (the running policies stay)";
    return st;
  }
  if (!compile_all(ncfg, st->policies, st->error)) return st;
  // The z-anonymity store was sized at start-up for the largest z and dt.
  for (size_t i = 0; i < st->policies.size(); ++i)
    for (auto& r : st->policies[i]->rules)
      if (r.action.desc->uses_zstore) {
        uint64_t z = uint64_t(r.action.int_or("z", 10)), dt = uint64_t(r.action.int_or("dt", 0));
        std::string where = r.loc.file + ":" + std::to_string(r.loc.line) + ":" + std::to_string(r.loc.col);
        if (!have_store) {
          st->error = where + ": error: zanon needs the z-anonymity store, which is made at start-up only when a "
                              "policy uses zanon; restart to add the first zanon rule";
          return st;
        }
        if (z > zmax || dt > zmax_dt) {
          st->error = where + ": error: z=" + std::to_string(z) + ", dt=" + fmt_dt(dt) +
                      " exceed the store's sizing at start-up (z " + std::to_string(zmax) + ", dt " + fmt_dt(zmax_dt) +
                      "); restart to raise them";
          return st;
        }
      }
  try {
    for (size_t i = 0; i < st->policies.size(); ++i)
      st->programs.push_back(std::make_unique<Program>(st->policies[i], int(i), services));
    for (unsigned w = 0; w < nworkers; ++w) {
      auto set = std::make_unique<ProgramSet>();
      for (auto& p : st->programs) {
        set->progs.push_back(p->instantiate());
        set->rule_hits.emplace_back(p->rule_count() + 1, 0);
      }
      st->sets.push_back(std::move(set));
    }
  } catch (const std::exception& ex) {
    st->error = std::string("policy cannot run: ") + ex.what();
    return st;
  }
  for (size_t i = 0; i < st->policies.size(); ++i)
    st->pinfo.push_back({ncfg.consumers[i].policy_path, policy_digest(*st->policies[i]),
                         keys_digest(*st->policies[i]), st->policies[i]->rules.size(), wall_ns()});
  st->t1 = wall_ns();
  st->ok = true;
  return st;
}

// The settings a reload may change, and the result telemetry shows.
static void take_settings(Engine& E, const StagedReload& st) {
  for (size_t i = 0; i < E.cfg.consumers.size(); ++i) E.cfg.consumers[i].policy_path = st.cfg.consumers[i].policy_path;
  E.cfg.stats_interval_ns = st.cfg.stats_interval_ns;
  E.cfg.stats_lines = st.cfg.stats_lines;
  E.cfg.loss_warn = st.cfg.loss_warn;
  E.cfg.loss_fail = st.cfg.loss_fail;
  E.last_result = "ok";
  E.last_error.clear();
}

// Publishes a staged generation: one pointer per worker; the previous
// generation is freed once every worker has taken the new one and reported
// a quiescent state since (rte_rcu_qsbr). Outputs keep being drained while
// waiting, so a worker blocked on a full output ring can get there.
uint64_t publish(Engine& E, StagedReload& st) {
  for (size_t i = 0; i < E.workers.size(); ++i) E.workers[i]->next.store(st.sets[i].get(), std::memory_order_release);
  uint64_t token = rte_rcu_qsbr_start(E.qs);
  for (;;) {
    bool taken = true;
    for (auto& w : E.workers) taken = taken && w->next.load(std::memory_order_acquire) == nullptr;
    if (taken && rte_rcu_qsbr_check(E.qs, token, false) == 1) break;
    drain_outputs(E);
    rte_pause();
  }
  const uint64_t taken = wall_ns();
  // The sets now hold the previous generation's instances: free them
  // before the programs they point to.
  st.sets.clear();
  E.programs.swap(st.programs);
  E.policies.swap(st.policies);
  st.programs.clear();
  return taken;
}

void apply_reload(Engine& E, StagedReload& st) {
  // Telemetry reads what is set here (policy information, results).
  std::unique_lock<std::mutex> lock(E.snap_mu);
  if (!st.ok) {
    ++E.reloads_failed;
    E.last_result = "failed";
    // The errors, without the warnings a policy may also carry: a
    // diagnostic runs from its `file:line:col: severity:` line to the next.
    E.last_error.clear();
    bool keep = true;
    size_t pos = 0;
    while (pos < st.error.size()) {
      size_t nl = st.error.find('\n', pos);
      if (nl == std::string::npos) nl = st.error.size();
      std::string ln = st.error.substr(pos, nl - pos);
      pos = nl + 1;
      if (ln.find(": warning: ") != std::string::npos) keep = false;
      else if (ln.find(": error: ") != std::string::npos || ln.find(": note: ") != std::string::npos) keep = true;
      if (keep) E.last_error += ln + "\n";
    }
    while (!E.last_error.empty() && E.last_error.back() == '\n') E.last_error.pop_back();
    log_line(kErr, "reload refused (generation %llu keeps running, %llu refused so far):\n%s",
             (unsigned long long)E.generation, (unsigned long long)E.reloads_failed, st.error.c_str());
    sd_notifyf(0, "READY=1\nSTATUS=generation %llu running; last reload refused", (unsigned long long)E.generation);
    return;
  }
  // Every policy as it runs (same text, includes and keys): the running
  // generation stays, with its per-rule counters; only the settings a
  // reload may change are taken.
  bool same = st.pinfo.size() == E.pinfo.size();
  for (size_t i = 0; same && i < st.pinfo.size(); ++i)
    same = st.pinfo[i].path == E.pinfo[i].path && st.pinfo[i].sha256 == E.pinfo[i].sha256;
  if (same) {
    take_settings(E, st);
    log_line(kInfo, "reload: generation %llu unchanged: no policy changed, its per-rule counters kept (compile %.1f ms)",
             (unsigned long long)E.generation, double(st.t1 - st.t0) / 1e6);
    sd_notifyf(0, "READY=1\nSTATUS=generation %llu running", (unsigned long long)E.generation);
    return;
  }
  lock.unlock();  // publishing waits on the workers, not on telemetry
  const uint64_t t_pub = wall_ns();
  const uint64_t t_taken = publish(E, st);
  note_initiators(E);
  const uint64_t t2 = wall_ns();
  lock.lock();
  ++E.generation;
  ++E.reloads;
  std::string line;
  for (size_t i = 0; i < st.pinfo.size(); ++i) {
    const PolicyInfo& n = st.pinfo[i];
    const PolicyInfo* o = i < E.pinfo.size() ? &E.pinfo[i] : nullptr;
    std::string changed;
    if (!o || o->path != n.path) changed = "new file";
    else if (o->sha256 == n.sha256) changed = "unchanged";
    else if (o->keys_sha256 != n.keys_sha256) changed = "keys changed";
    else changed = "policy changed";
    line += "; " + E.cfg.consumers[i].name + " " + n.path + " sha256 " + n.sha256 + " " + std::to_string(n.rules) +
            " rules (" + changed + ")";
  }
  E.pinfo = st.pinfo;
  take_settings(E, st);
  // compile: YAML, policies, keys, programs and per-worker instances (on
  // the staging thread); publish: from the staged set's hand-over to every
  // worker running it (taken) and the previous set freed.
  log_line(kInfo, "reload: generation %llu%s; compile %.1f ms, publish %.3f ms (taken by every worker after %.3f ms)",
           (unsigned long long)E.generation, line.c_str(), double(st.t1 - st.t0) / 1e6, double(t2 - st.t1) / 1e6,
           double(t_taken - t_pub) / 1e6);
  sd_notifyf(0, "READY=1\nSTATUS=generation %llu running", (unsigned long long)E.generation);
}

}  // namespace amon::engine
