// What the running engine tells its operator: log lines (with the journal's
// priorities under systemd), the counters report and its snapshot for
// telemetry, and the statistics lines.
#include "echo.h"
#include "engine_parts.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace amon::engine {

namespace {

// Under systemd (stderr goes to the journal), lines carry the syslog
// priority prefix the journal understands; elsewhere, plain text.
bool under_systemd() {
  static const bool yes = std::getenv("JOURNAL_STREAM") != nullptr || std::getenv("NOTIFY_SOCKET") != nullptr;
  return yes;
}

}  // namespace

__attribute__((format(printf, 2, 3))) void log_line(int prio, const char* fmt, ...) {
  char buf[16384];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  for (size_t n = std::strlen(buf); n && buf[n - 1] == '\n';) buf[--n] = 0;
  if (!under_systemd()) {
    std::fprintf(stderr, "amon: %s\n", buf);
  } else {
    // The journal takes each line on its own: each gets the priority.
    const char* p = buf;
    for (bool first = true; *p || first; first = false) {
      const char* nl = std::strchr(p, '\n');
      int n = nl ? int(nl - p) : int(std::strlen(p));
      std::fprintf(stderr, first ? "<%d>amon: %.*s\n" : "<%d>%.*s\n", prio, n, p);
      p += n + (nl ? 1 : 0);
    }
  }
  std::fflush(stderr);
}

uint64_t wall_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

// The counters as the exit report shows them. Main lcore only, never
// while a reload is being adopted (the workers swap their rule counts).
Report build_report(Engine& E) {
  const EngineConfig& cfg = E.cfg;
  Report rep;
  poll_loss(E);
  rep.elapsed_ns = wall_ns() - E.start_ns;
  rep.rx = E.rx_total;
  for (auto& w : E.workers) rep.rx += w->rx_direct.load();
  rep.rx_dispatch_drops = E.rx_dispatch_drops;
  rep.input_error = E.input_error;
  for (auto& in : E.inputs) {
    rep.inputs.push_back({in.spec.describe(), in.packets});
    rep.input_loss.push_back(in.loss);
  }
  for (size_t ci = 0; ci < E.programs.size(); ++ci) {
    ConsumerReport cr;
    cr.name = cfg.consumers[ci].name;
    cr.policy = cfg.consumers[ci].policy_path;
    cr.output = cfg.consumers[ci].output.describe();
    cr.counters.rule_hits.assign(E.programs[ci]->rule_count() + 1, 0);
    for (auto& w : E.workers) accumulate(cr.counters, w->path->counters()[ci]);
    if ((cr.learns_users = E.programs[ci]->learns_users()))
      for (auto& w : E.workers) {
        const UserTable& u = w->path->instance(ci).outside_users();
        cr.users += u.size(), cr.users_sets_saturated += u.saturated(), cr.users_sets += u.sets();
      }
    cr.learns_initiators = E.programs[ci]->learns_initiators();
    if (const UserTable* k = E.programs[ci]->known_users())
      cr.prepass_users = k->size(), cr.prepass_sets_saturated = k->saturated(), cr.prepass_sets = k->sets();
    if (const EchoPreload* p = E.programs[ci]->echo_preload()) {
      cr.echo_prepass = true, cr.echo_preloaded = p->size(), cr.echo_preload_over = p->over;
      cr.echo_split_whole = p->split_whole, cr.echo_split_unfinished = p->split_unfinished;
      cr.echo_split_refused = p->split_refused;
    }
    const Output& out = E.outputs[ci];
    cr.written = out.file ? out.file->written.load(std::memory_order_relaxed) : out.written;
    cr.tx_dropped = E.outputs[ci].tx_dropped;
    if (E.outputs[ci].direct_tx) {
      // Sent directly by the workers: written is what left, less what the port refused.
      uint64_t unsent = 0;
      for (auto& w : E.workers) unsent += w->tx_unsent[ci];
      cr.tx_dropped = unsent;
      cr.written = cr.counters.out - unsent;
    }
    cr.tx_truncated = E.outputs[ci].tx_truncated;
    for (auto& w : E.workers) cr.queue_dropped += w->out_full[ci];
    if (out.q) cr.out_of_order = out.q->out_of_order();
    cr.policy_ptr = E.policies[ci];
    rep.consumers.push_back(std::move(cr));
  }
  for (auto& w : E.workers) {
    const auto& fs = w->path->flows().stats();
    rep.flows_created += fs.created;
    rep.flows_evicted += fs.evicted;
    rep.flows_expired += fs.expired;
    rep.flows_closed += fs.closed;
    rep.roles_uncertain += fs.roles_uncertain;
    rep.flows_full += fs.full;
    rep.flows_evicted_two_way += fs.evicted_two_way;
    rep.roles_recalled += fs.roles_recalled;
    for (int s = 0; s < 4; ++s) rep.decode_status[s] += w->path->stats().decode_status[s];
    const WorkerPathStats& ws = w->path->stats();
    rep.copy_failures += ws.copy_failures;
    rep.streams_held += ws.streams_held;
    rep.streams_completed += ws.streams_completed;
    rep.streams_failed += ws.streams_failed;
    rep.partial_heads += ws.partial_heads;
    rep.partial_masked += ws.partial_masked;
    rep.hold_refused += ws.hold_refused;
    rep.segments_held += ws.segments_held;
    const StreamGapStats gs = w->path->gap_stats();
    rep.stream_gaps += gs.gaps;
    rep.stream_resyncs += gs.resyncs;
    rep.gap_closed_segments += gs.closed_segments;
    rep.gap_closed_bytes += gs.closed_bytes;
    const OuterFragStats& os = w->path->outer_frag_stats();
    rep.outer_fragments += os.fragments;
    rep.outer_datagrams += os.datagrams;
    rep.outer_failed += os.failed;
    rep.outer_cut += os.cut;
    rep.outer_timeout += os.timeout;
    rep.outer_overlap += os.overlap;
    rep.outer_limit += os.limit;
  }
  if (E.zstore) rep.zstats = E.zstore->stats(), rep.has_zstats = true;
  if (E.share) rep.share = E.share->status(), rep.has_share = true;
  rep.live = !cfg.config_path.empty();
  rep.generation = E.generation;
  rep.reloads = E.reloads;
  rep.reloads_failed = E.reloads_failed;
  return rep;
}

void refresh_snapshot(Engine& E) {
  Report r = build_report(E);
  std::lock_guard<std::mutex> g(E.snap_mu);
  E.snap = std::move(r);
}

// A flood being absorbed says so, at most once a minute: how many new flows
// found the flow table full (and how many answered flows had to go), how
// many new values the z-store refused or evicted for others. Each of these
// only hides more or forgets flow state with its roles kept; none releases.
void note_pressure(Engine& E, const Report& r) {
  constexpr uint64_t kEvery = 60ULL * 1000000000ULL;
  const uint64_t cur[4] = {r.flows_full, r.flows_evicted_two_way, r.zstats.refused, r.zstats.evictions};
  uint64_t d[4];
  for (int i = 0; i < 4; ++i) d[i] = cur[i] - E.pressure_prev[i];
  if (!(d[0] | d[2] | d[3])) return;
  const uint64_t now = wall_ns();
  if (E.pressure_ns && now - E.pressure_ns < kEvery) return;  // counted into the next line
  log_line(kWarn,
           "absorbing a flood (since %s): %llu new flows found the flow table full (%llu answered flows evicted), "
           "the z-anonymity store refused %llu new values and evicted %llu (hidden, never released)",
           E.pressure_ns ? "the last such line" : "the start", (unsigned long long)d[0], (unsigned long long)d[1],
           (unsigned long long)d[2], (unsigned long long)d[3]);
  E.pressure_ns = now;
  std::memcpy(E.pressure_prev, cur, sizeof cur);
}

// One JSON line: the totals, and the rates since the previous line.
void write_stats_line(Engine& E) {
  Report r = build_report(E);
  double secs = double(r.elapsed_ns - E.stats_line_prev.elapsed_ns) / 1e9;
  auto rate = [&](uint64_t now, uint64_t before) { return secs > 0 ? double(now - before) / secs : 0.0; };
  std::string line = "{\"time_ns\":" + std::to_string(wall_ns()) + ",\"interval_s\":" + std::to_string(secs) +
                     ",\"rx_pps\":" + std::to_string(rate(r.rx, E.stats_line_prev.rx)) + ",\"consumer_pps\":{";
  for (size_t i = 0; i < r.consumers.size(); ++i) {
    const auto& c = r.consumers[i].counters;
    uint64_t in0 = 0, out0 = 0, dr0 = 0;
    if (i < E.stats_line_prev.consumers.size()) {
      in0 = E.stats_line_prev.consumers[i].counters.in;
      out0 = E.stats_line_prev.consumers[i].counters.out;
      dr0 = E.stats_line_prev.consumers[i].counters.dropped;
    }
    line += (i ? ",\"" : "\"") + r.consumers[i].name + "\":{\"in\":" + std::to_string(rate(c.in, in0)) +
            ",\"out\":" + std::to_string(rate(c.out, out0)) + ",\"dropped\":" + std::to_string(rate(c.dropped, dr0)) + "}";
  }
  std::string totals = render_report_json(r);
  while (!totals.empty() && (totals.back() == '\n' || totals.back() == ' ')) totals.pop_back();
  line += "},\"totals\":" + totals + "}\n";
  // Without a stats file the line goes where the log goes: a SIGUSR1 is
  // always answered.
  if (E.cfg.stats_lines.empty()) {
    log_line(kInfo, "stats %s", line.c_str());
  } else if (FILE* f = std::fopen(E.cfg.stats_lines.c_str(), "a")) {
    std::fwrite(line.data(), 1, line.size(), f);
    std::fclose(f);
  } else {
    log_line(kWarn, "stats.json %s: %s", E.cfg.stats_lines.c_str(), std::strerror(errno));
  }
  E.stats_line_prev = std::move(r);
}

}  // namespace amon::engine
