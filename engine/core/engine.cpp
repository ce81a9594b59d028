// run_engine: the engine's phases in order (policies, EAL, memory, z-store,
// programs, inputs, outputs, ports, workers, launch, the main lcore's loop,
// the report, teardown); the parts it drives live beside it
// (engine_parts.h).
#include "engine.h"

#include <openssl/rand.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <systemd/sd-daemon.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <future>
#include <stdexcept>
#include <vector>

#include "control.h"
#include "engine_parts.h"
#include "progress.h"

namespace amon {

using namespace engine;

namespace {

// Every consumer's policy compiled (diagnostics on stderr, as `amon lint`
// prints them) and named by its digest. 0, or the exit code.
int load_policies(Engine& E) {
  const EngineConfig& cfg = E.cfg;
  std::string diags;
  const bool ok = compile_all(cfg, E.policies, diags);
  if (!diags.empty()) std::fputs(diags.c_str(), stderr);
  if (!ok) return 2;
  for (size_t i = 0; i < E.policies.size(); ++i)
    E.pinfo.push_back({cfg.consumers[i].policy_path, policy_digest(*E.policies[i]), keys_digest(*E.policies[i]),
                       E.policies[i]->rules.size(), wall_ns()});
  if (cfg.consumers.empty()) {
    std::fprintf(stderr, "amon: no consumer configured\n");
    return 2;
  }
  if (cfg.consumers.size() > size_t(kMaxConsumers)) {
    std::fprintf(stderr, "amon: at most %d consumers\n", kMaxConsumers);
    return 2;
  }
  return 0;
}

bool start_eal(const EngineConfig& cfg) {
  std::vector<std::string> args{"amon"};
  args.insert(args.end(), cfg.eal_args.begin(), cfg.eal_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int rc = rte_eal_init(int(argv.size()), argv.data());
  if (rc < 0) {
    log_line(kErr, "EAL initialisation failed: %s", rte_strerror(rte_errno));
    return false;
  }
  return true;
}

// The lcores the workers need, the mbuf dynamic fields, the clocks, the
// sizes planned from the input and the mbuf pool.
void start_memory(Engine& E) {
  const EngineConfig& cfg = E.cfg;
  if (rte_lcore_count() < cfg.workers + 1)
    throw std::runtime_error("need " + std::to_string(cfg.workers + 1) + " lcores for " +
                             std::to_string(cfg.workers) + " workers, EAL gave " +
                             std::to_string(rte_lcore_count()));
  if (!mbuf_meta_register()) throw std::runtime_error(std::string("mbuf dynfield: ") + rte_strerror(rte_errno));
  E.tsc_hz = rte_get_tsc_hz();
  E.tsc0 = rte_rdtsc();
  E.wall0 = wall_ns();
  E.sizes = plan_sizes(cfg);
  E.pool = create_pool(E);
  if (!E.pool) throw std::runtime_error(std::string("mbuf pool: ") + rte_strerror(rte_errno));
}

// The z-anonymity store, sized for the largest z and dt any policy uses
// (none when no policy uses it).
void start_zstore(Engine& E) {
  const EngineConfig& cfg = E.cfg;
  uint32_t zmax = 0;
  uint64_t max_dt = 0;
  for (auto& p : E.policies)
    for (auto& r : p->rules)
      if (r.action.desc->uses_zstore) {
        zmax = std::max<uint32_t>(zmax, uint32_t(r.action.int_or("z", 10)));
        max_dt = std::max<uint64_t>(max_dt, uint64_t(r.action.int_or("dt", 0)));
      }
  E.zmax = zmax;
  E.zmax_dt = max_dt;
  if (cfg.share.enabled() && !zmax) log_line(kWarn, "zanon.share: no policy uses zanon, so nothing is shared");
  if (zmax) {
    zanon::Config zc;
    zc.max_values = E.sizes.zanon_values;
    zc.zmax = zmax;
    zc.max_dt_ns = max_dt;
    // Offline the table is sized for the most values the input could
    // hold and stays mostly empty: with huge pages each value landing in
    // a new 2 MiB region made the kernel zero all of it mid-run (most of
    // the meter's memory and system time on a large capture).
    bool files_only = cfg.offline && !cfg.zanon_max_values;
    for (const auto& in : cfg.inputs) files_only = files_only && in.kind == PortSpec::Kind::PcapFile;
    zc.huge_pages = !files_only;
    share::Keys sk;
    if (cfg.share.enabled()) zc.shared = load_share_keys(cfg.share, sk), zc.key = sk.store;
    E.zstore = std::make_unique<zanon::Store>(zc);
    E.services.zstore = E.zstore.get();
  }
}

// The shared services' key and one Program per consumer.
void start_programs(Engine& E, EngineResult& result) {
  if (RAND_bytes(E.services.user_hash_key.data(), 16) != 1) throw std::runtime_error("RAND_bytes failed");
  // Boxes sharing a store must name each user alike: the deployment's key.
  if (E.zstore && E.zstore->config().shared) E.services.user_hash_key = share_user_key(E.cfg.share);
  for (size_t i = 0; i < E.policies.size(); ++i) {
    try {
      E.programs.push_back(std::make_unique<Program>(E.policies[i], int(i), &E.services));
    } catch (const std::exception& ex) {
      // A policy the engine cannot run is a policy error (exit 2), not a runtime failure.
      std::fprintf(stderr, "amon: %s: %s\n", E.cfg.consumers[i].policy_path.c_str(), ex.what());
      result.exit_code = 2;
      throw;
    }
  }
}

void open_inputs(Engine& E, EngineResult& result) {
  for (auto& in : E.cfg.inputs) {
    Input i;
    i.spec = in;
    if (in.kind == PortSpec::Kind::PcapFile) {
      try {
        i.pcap = std::make_unique<PcapReader>(in, E.pool);
      } catch (const pcapio::BadInput& e) {  // bad input, as a missing file is: exit 2
        std::fprintf(stderr, "amon: %s\n", e.what());
        result.exit_code = 2;
        throw;
      }
      if (!link_type_supported(i.pcap->linktype()))
        throw std::runtime_error(in.spec + ": link type " + link_type_name(i.pcap->linktype()) +
                                 " is not supported (Ethernet, Linux cooked v1/v2, raw IPv4/IPv6, "
                                 "BSD NULL/loopback, PPP, Cisco HDLC, 802.11 with radiotap, PPI or "
                                 "no capture header are)");
    } else {
      i.port = attach_port(in.spec);
      i.file_backed = file_backed_vdev(in.spec);
    }
    E.inputs.push_back(std::move(i));
  }
  E.lossless_out = E.cfg.offline;
  if (!E.lossless_out) {
    E.lossless_out = true;
    for (auto& i : E.inputs) E.lossless_out = E.lossless_out && (i.pcap || i.file_backed);
  }
}

// One ring per consumer; a pcap file output gets its writer (its thread
// starts at launch), an ethdev output its port.
void open_outputs(Engine& E) {
  // Pcap outputs keep the timestamp precision of pcap inputs.
  bool nano_out = false;
  int snaplen = 0;
  for (auto& i : E.inputs) {
    nano_out = nano_out || !i.pcap || i.pcap->nanosecond_file();
    snaplen = std::max(snaplen, i.pcap ? i.pcap->snaplen() : 262144);
  }

  for (auto& c : E.cfg.consumers) {
    Output o;
    o.name = c.name;
    o.spec = c.output;
    o.q = std::make_unique<OutQueue>("out_" + std::to_string(E.outputs.size()), E.sizes.ring, E.cfg.workers,
                                     ReorderLimits{E.sizes.reorder_records, E.sizes.reorder_window_ns});
    if (c.output.kind == PortSpec::Kind::PcapFile) {
      o.file = std::make_unique<FileWriter>();
      try {
        o.file->pcap = std::make_unique<PcapWriter>(c.output, nano_out, snaplen, output_link_type(E));
      } catch (const std::runtime_error& e) {  // the file header could not be written: name the consumer
        throw std::runtime_error("consumer '" + c.name + "': output " + e.what());
      }
      o.file->q = o.q.get();
    } else {
      o.port = attach_port(c.output.spec);
      if (c.output.spec.rfind("net_pcap", 0) == 0) o.tx_cap = RTE_ETHER_MAX_JUMBO_FRAME_LEN;
    }
    E.outputs.push_back(std::move(o));
  }
}

// The file writers' threads and the workers start; live, telemetry
// registers and the start is logged and told to systemd. Whether the run is
// live (`amon run`, with reloads and telemetry).
bool launch(Engine& E) {
  const EngineConfig& cfg = E.cfg;
  if (E.zstore && E.zstore->config().shared)
    E.share = start_share(cfg, *E.zstore, E.zmax_dt,
                          [](bool warn, const std::string& m) { log_line(warn ? kWarn : kInfo, "%s", m.c_str()); });
  E.start_ns = wall_ns();
  for (auto& o : E.outputs)
    if (o.file) o.file->th = std::thread(file_writer_main, o.file.get());
  for (auto& w : E.workers) rte_eal_remote_launch(worker_main, w.get(), w->lcore);
  const bool live = !cfg.config_path.empty();
  refresh_snapshot(E);
  E.stats_line_prev = E.snap;
  if (live) {
    register_telemetry(E);
    std::string eal, ports, cons;
    for (auto& a : cfg.eal_args) eal += (eal.empty() ? "" : " ") + a;
    for (auto& in : cfg.inputs) ports += (ports.empty() ? "" : ", ") + in.describe();
    for (size_t i = 0; i < cfg.consumers.size(); ++i)
      cons += "; " + cfg.consumers[i].name + " " + E.pinfo[i].path + " sha256 " + E.pinfo[i].sha256 + " " +
              std::to_string(E.pinfo[i].rules) + " rules -> " + cfg.consumers[i].output.describe();
    log_line(kInfo, "started: version %s, %u workers, EAL [%s], inputs [%s]%s", AMON_VERSION, cfg.workers, eal.c_str(),
             ports.c_str(), cons.c_str());
    sd_notify(0, "READY=1\nSTATUS=generation 1 running");
  }
  return live;
}

// One burst from each input the main lcore reads (files, and ethdev ports
// the workers do not poll themselves), dispatched to the workers. Whether
// any packet came.
bool read_inputs(Engine& E, rte_mbuf** pkts) {
  bool got = false;
  for (auto& in : E.inputs) {
    if (in.done || in.direct) continue;
    unsigned n;
    if (in.pcap) {
      n = in.pcap->read_burst(pkts, kBurst);
      if (n == 0 && in.pcap->eof()) {
        in.done = true;
        if (!in.pcap->error().empty()) E.input_error = in.pcap->error();
      }
    } else {
      n = rte_eth_rx_burst(in.port, 0, pkts, kBurst);
      stamp_rx(E, pkts, n);
    }
    if (n) {
      got = true;
      in.packets += n;
      E.rx_total += n;
      dispatch(E, pkts, n, E.cfg.offline || in.pcap || in.file_backed);
    }
  }
  return got;
}

// Reclaim by packet time (the store's clock), the oldest any worker is at,
// so no worker can still observe what is reclaimed.
void sweep_zstore(Engine& E) {
  uint64_t t = UINT64_MAX;
  for (auto& w : E.workers) {
    uint64_t wt = w->last_ts.load(std::memory_order_relaxed);
    if (wt) t = std::min(t, wt);
  }
  if (t != UINT64_MAX) E.zstore->sweep(t, 4096);
}

// Whether the run is over: every input finished (a live port: silent for
// the idle time with until_idle) or a stop asked for, every worker caught
// up; then held segments are released, and it is over once none is held
// and the output rings are empty.
bool run_over(Engine& E, bool stopping, bool ports_idle) {
  bool inputs_finished = true;
  for (auto& in : E.inputs) {
    if (in.pcap && !in.done) inputs_finished = false;
    if (!in.pcap && !(E.cfg.until_idle && ports_idle)) inputs_finished = false;
  }
  if ((stopping || inputs_finished) && all_workers_caught_up(E)) {
    E.flush_holds.store(true, std::memory_order_release);
    bool held = false;
    for (auto& w : E.workers) held = held || w->held.load(std::memory_order_acquire);
    if (!held && outputs_empty(E)) return true;
  }
  return false;
}

// The control plane's turn of a live run's main loop.
struct LiveControl {
  std::future<std::unique_ptr<StagedReload>> reload_job;
  uint64_t last_snap = 0;

  void turn(Engine& E, bool stopping, uint64_t now_tsc) {
    // Reloads: compiled on a thread of their own, published here. A
    // SIGHUP during a reload queues one more, never two at once.
    if (reload_job.valid()) {
      if (reload_job.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        auto st = reload_job.get();
        apply_reload(E, *st);
        refresh_snapshot(E);
      }
    } else if (!stopping && g_hup.exchange(0, std::memory_order_relaxed)) {
      sd_notifyf(0, "RELOADING=1\nSTATUS=reloading (generation %llu running)", (unsigned long long)E.generation);
      reload_job = std::async(std::launch::async, stage_reload, E.cfg, &E.services, E.zmax, E.zmax_dt,
                              E.zstore != nullptr, unsigned(E.workers.size()));
    }
    if (now_tsc - last_snap > E.tsc_hz / 10) {
      last_snap = now_tsc;
      refresh_snapshot(E);
      note_pressure(E, E.snap);
    }
    bool line_due = E.cfg.stats_interval_ns &&
                    now_tsc - E.stats_line_tsc > E.cfg.stats_interval_ns / 1000000 * (E.tsc_hz / 1000);
    if (g_usr1.exchange(0, std::memory_order_relaxed) || line_due) {
      E.stats_line_tsc = now_tsc;
      write_stats_line(E);
    }
  }
};

// The main lcore from launch to the end of the run: inputs, port outputs,
// the z-store's sweep, termination, and (live) the control plane.
void main_lcore_loop(Engine& E, bool live) {
  const EngineConfig& cfg = E.cfg;
  LiveControl control;
  control.last_snap = rte_rdtsc();
  E.stats_line_tsc = control.last_snap;
  rte_mbuf* pkts[kBurst];
  uint64_t last_rx_tsc = rte_rdtsc();
  const uint64_t idle_tsc = cfg.idle_ns * E.tsc_hz / 1000000000ULL;
  uint64_t last_sweep = 0;
  Idle main_idle(cfg.offline, cfg.idle, E.tsc_hz);
  Progress progress(!cfg.quiet && E.sizes.input_bytes && isatty(STDERR_FILENO), E.sizes.input_bytes);
  bool told_stop = false;
  for (;;) {
    // A failed output stops the reading as a signal does.
    const int sig = g_signal.load(std::memory_order_relaxed);
    bool stopping = sig != 0 || output_failed(E);
    if (sig && !told_stop) {
      told_stop = true;
      progress.finish();
      log_line(kInfo, "stopping on %s: no more input is read; held segments and queued records are written out",
               sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal");
    }
    const bool got = !stopping && read_inputs(E, pkts);
    const bool wrote = drain_outputs(E) != 0;
    // ftell is an lseek: asked for only when the line is redrawn.
    if (got && progress.due()) progress.update(E.rx_total, pcap_bytes_read(E));
    uint64_t now_tsc = rte_rdtsc();
    if (got) last_rx_tsc = now_tsc;
    if (E.zstore && now_tsc - last_sweep > E.tsc_hz / 10) {
      last_sweep = now_tsc;
      sweep_zstore(E);
    }
    for (auto& w : E.workers) last_rx_tsc = std::max(last_rx_tsc, w->last_rx_tsc.load(std::memory_order_relaxed));
    if (run_over(E, stopping, now_tsc - last_rx_tsc > idle_tsc)) break;
    if (live) control.turn(E, stopping, now_tsc);
    // Offline too, a SIGUSR1 is answered with the statistics line.
    else if (g_usr1.exchange(0, std::memory_order_relaxed)) write_stats_line(E);
    if (got || wrote) main_idle.reset();
    else main_idle.wait();
  }
  progress.finish();
  if (live) sd_notify(0, "STOPPING=1");
  if (control.reload_job.valid()) control.reload_job.get();  // a reload still compiling is dropped
}

// A live run's loss at exit: a warning above `loss.warn` (by default any
// loss), exit status 3 above `loss.fail` (when set and nothing worse
// happened).
void judge_loss(const EngineConfig& cfg, const Report& rep, EngineResult& result) {
  const LossTotals t = loss_totals(rep);
  if (!t.lost) return;
  const bool fail = cfg.loss_fail >= 0 && t.share > cfg.loss_fail;
  if (!fail && t.share <= cfg.loss_warn) return;
  log_line(fail ? kErr : kWarn,
           "lost %llu of %llu packets (%.3f%%, above loss.%s %.3f%%): kernel_ring=%llu nic_missed=%llu "
           "nic_errors=%llu no_mbuf=%llu dispatch=%llu output_queues=%llu tx=%llu",
           (unsigned long long)t.lost, (unsigned long long)t.offered, 100.0 * t.share, fail ? "fail" : "warn",
           100.0 * (fail ? cfg.loss_fail : cfg.loss_warn), (unsigned long long)t.ports.kernel_ring,
           (unsigned long long)t.ports.missed, (unsigned long long)t.ports.errors,
           (unsigned long long)t.ports.no_mbuf, (unsigned long long)t.dispatch, (unsigned long long)t.output_queues,
           (unsigned long long)t.tx);
  if (fail && result.exit_code == 0) result.exit_code = 3;
}

// The exit report (stdout, the stats JSON file) and the exit code of a run
// whose input stopped early or whose output failed.
void report(Engine& E, bool outputs_ok, EngineResult& result) {
  const EngineConfig& cfg = E.cfg;
  Report rep = build_report(E);
  if (E.zstore && rep.zstats.evictions + rep.zstats.refused && !cfg.zanon_max_values)
    std::fprintf(stderr,
                 "amon: warning: the z-anonymity store (sized %zu values from the input) was full and forgot %llu "
                 "values and refused %llu new ones, which were then hidden more than needed; raise it with "
                 "--zanon-values or zanon.max_values\n",
                 E.sizes.zanon_values, (unsigned long long)rep.zstats.evictions,
                 (unsigned long long)rep.zstats.refused);
  if (!cfg.quiet) std::fputs(render_report_text(rep).c_str(), stdout);
  // Outputs are merged in input order, but a packet a worker holds leaves
  // when it is released: a reader of the output must know its file is not
  // sorted (doc/architecture.md, "Time order").
  for (auto& c : rep.consumers)
    if (c.out_of_order)
      log_line(kWarn,
               "consumer '%s': %llu records written after a later input packet's record (TCP segments held for "
               "a split message head, IP fragments held until their datagram is whole); sort the output by time "
               "where order matters",
               c.name.c_str(), (unsigned long long)c.out_of_order);
  if (!cfg.stats_json.empty()) {
    FILE* f = std::fopen(cfg.stats_json.c_str(), "w");
    if (!f) throw std::runtime_error(cfg.stats_json + ": " + std::strerror(errno));
    std::string j = render_report_json(rep);
    std::fwrite(j.data(), 1, j.size(), f);
    std::fclose(f);
  }
  if (!E.input_error.empty()) {
    log_line(kErr, "input stopped early: %s", E.input_error.c_str());
    result.exit_code = 1;
  }
  if (!outputs_ok) result.exit_code = 1;
  if (rep.live) judge_loss(cfg, rep, result);
}

// Releases everything that holds mbufs before the pool goes, stops the
// ports, and ends the EAL.
void teardown(Engine& E) {
  for (auto& w : E.workers)
    for (size_t ci = 0; ci < w->txb.size(); ++ci)
      if (w->txb[ci]) {
        rte_eth_tx_buffer_flush(E.outputs[ci].port, uint16_t(w->id), w->txb[ci]);
        rte_free(w->txb[ci]);
      }
  E.workers.clear();
  // Closed, not only stopped: a driver frees what it holds (an AF_XDP
  // socket and its UMEM, a pcap file) on close, and DPDK 22.11's
  // rte_eal_cleanup does not close ports. A port may serve both ways.
  std::vector<uint16_t> ports;
  for (auto& o : E.outputs) {
    o.q.reset();  // its records and rings, while the EAL still holds their memory
    if (o.port != UINT16_MAX) {
      rte_eth_dev_stop(o.port);
      ports.push_back(o.port);
    }
    o.file.reset();
  }
  for (auto& i : E.inputs)
    if (i.port != UINT16_MAX) {
      rte_eth_dev_stop(i.port);
      ports.push_back(i.port);
    }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  for (uint16_t p : ports) rte_eth_dev_close(p);
  unregister_telemetry();
  if (E.qs) rte_free(E.qs);
  rte_eal_cleanup();
}

}  // namespace

EngineResult run_engine(const EngineConfig& cfg_in) {
  Engine E;
  E.cfg = cfg_in;
  // Before anything else: a SIGHUP during start-up queues a reload rather
  // than ending the process.
  install_signals();
  if (int rc = load_policies(E)) return {rc};
  RuntimeDir rundir;
  std::string clash;
  if (!claim_runtime_dir(E.cfg.eal_args, rundir, clash)) {
    log_line(kErr, "%s", clash.c_str());
    return {2};
  }
  if (!start_eal(E.cfg)) {
    release_runtime_dir(rundir);
    return {1};
  }
  if (!check_lcores(rundir, E.cfg.workers, clash)) {
    log_line(kErr, "%s", clash.c_str());
    rte_eal_cleanup();
    release_runtime_dir(rundir);
    return {2};
  }
  EngineResult result;
  try {
    start_memory(E);
    start_zstore(E);
    start_programs(E, result);
    note_initiators(E);
    open_inputs(E, result);
    learn_users_offline(E);
    open_outputs(E);
    start_ports(E);
    open_loss_counters(E);
    start_workers(E);
    const bool live = launch(E);
    main_lcore_loop(E, live);
    E.stop_workers.store(true, std::memory_order_release);
    rte_eal_mp_wait_lcore();
    if (E.share) E.share->stop();
    drain_outputs(E);
    const bool outputs_ok = finish_writers(E);
    report(E, outputs_ok, result);
  } catch (const std::exception& e) {
    if (result.exit_code != 2) {
      log_line(kErr, "%s", e.what());
      result.exit_code = 1;
    }
    E.stop_workers.store(true);
    rte_eal_mp_wait_lcore();
    finish_writers(E);
  }
  teardown(E);
  release_runtime_dir(rundir);
  return result;
}

}  // namespace amon
