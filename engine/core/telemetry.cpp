// DPDK telemetry commands (read with dpdk-telemetry.py). They run on
// DPDK's telemetry thread and read only the snapshot and the policy
// information, under snap_mu.
#include "engine_parts.h"

#include <rte_telemetry.h>

namespace amon::engine {

namespace {

Engine* g_tel_engine = nullptr;
std::mutex g_tel_mu;

void tel_counters(rte_tel_data* d, const ConsumerReport& c) {
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "in", c.counters.in);
  rte_tel_data_add_dict_u64(d, "out", c.counters.out);
  rte_tel_data_add_dict_u64(d, "dropped", c.counters.dropped);
  rte_tel_data_add_dict_u64(d, "filtered", c.counters.filtered);
  rte_tel_data_add_dict_u64(d, "written", c.written);
  rte_tel_data_add_dict_u64(d, "tx_dropped", c.tx_dropped);
  rte_tel_data_add_dict_u64(d, "out_of_order", c.out_of_order);
  rte_tel_data_add_dict_u64(d, "shared", c.counters.shared);
  rte_tel_data_add_dict_u64(d, "copied", c.counters.copied);
  rte_tel_data_add_dict_u64(d, "error_cut", c.counters.err_cut);
  rte_tel_data_add_dict_u64(d, "error_drop", c.counters.err_drop);
  rte_tel_data_add_dict_u64(d, "unknown_drop", c.counters.unknown_drop);
  rte_tel_data_add_dict_u64(d, "unknown_cut", c.counters.unknown_cut);
  rte_tel_data_add_dict_u64(d, "unknown_keep", c.counters.unknown_keep);
  rte_tel_data_add_dict_u64(d, "tunnel_cut", c.counters.tunnel_cut);
  rte_tel_data_add_dict_u64(d, "icmp_quote_cut", c.counters.icmp_quote_cut);
  rte_tel_data_add_dict_u64(d, "l7_cut", c.counters.l7_cut);
  rte_tel_data_add_dict_u64(d, "tls_server_cut", c.counters.tls_server_cut);
  rte_tel_data_add_dict_u64(d, "reverse_hidden", c.counters.reverse_hidden);
  rte_tel_data_add_dict_u64(d, "nd_zeroed", c.counters.nd_zeroed);
  rte_tel_data_add_dict_u64(d, "addr_text", c.counters.addr_text);
  rte_tel_data_add_dict_u64(d, "addr_text_zeroed", c.counters.addr_text_zeroed);
  rte_tel_data_add_dict_u64(d, "echoes", c.counters.echoes);
  rte_tel_data_add_dict_u64(d, "echoes_filled", c.counters.echoes_filled);
  rte_tel_data_add_dict_u64(d, "policy_drop", c.counters.policy_drop);
  rte_tel_data_add_dict_u64(d, "zanon_hidden", c.counters.zanon_hidden);
  rte_tel_data_add_dict_u64(d, "zanon_released", c.counters.zanon_released);
  // Per rule, keyed by its place in the policy: file:line (hits since the
  // policy generation was loaded).
  if (c.policy_ptr)
    for (auto& rule : c.policy_ptr->rules) {
      std::string f = rule.loc.file;
      if (auto sl = f.rfind('/'); sl != std::string::npos) f = f.substr(sl + 1);
      std::string key = "rule " + f + ":" + std::to_string(rule.loc.line);
      uint64_t hits = rule.index < c.counters.rule_hits.size() ? c.counters.rule_hits[rule.index] : 0;
      rte_tel_data_add_dict_u64(d, key.substr(0, RTE_TEL_MAX_STRING_LEN - 1).c_str(), hits);
    }
}

int tel_stats(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> g(g_tel_mu);
  if (!g_tel_engine) return -1;
  Engine& E = *g_tel_engine;
  std::lock_guard<std::mutex> s(E.snap_mu);
  const Report& r = E.snap;
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "elapsed_ms", r.elapsed_ns / 1000000);
  rte_tel_data_add_dict_u64(d, "rx", r.rx);
  rte_tel_data_add_dict_u64(d, "rx_dispatch_drops", r.rx_dispatch_drops);
  uint64_t in = 0, out = 0, dropped = 0;
  for (auto& c : r.consumers) in += c.counters.in, out += c.counters.out, dropped += c.counters.dropped;
  rte_tel_data_add_dict_u64(d, "consumers_in", in);
  rte_tel_data_add_dict_u64(d, "consumers_out", out);
  rte_tel_data_add_dict_u64(d, "consumers_dropped", dropped);
  rte_tel_data_add_dict_u64(d, "generation", r.generation);
  rte_tel_data_add_dict_u64(d, "reloads", r.reloads);
  rte_tel_data_add_dict_u64(d, "reloads_failed", r.reloads_failed);
  rte_tel_data_add_dict_u64(d, "flows_created", r.flows_created);
  // Loss by where it happened (stats.h, LossTotals); the share in parts per million.
  const LossTotals t = loss_totals(r);
  rte_tel_data_add_dict_u64(d, "offered", t.offered);
  rte_tel_data_add_dict_u64(d, "lost", t.lost);
  rte_tel_data_add_dict_u64(d, "lost_ppm", uint64_t(t.share * 1e6 + 0.5));
  rte_tel_data_add_dict_u64(d, "lost_kernel_ring", t.ports.kernel_ring);
  rte_tel_data_add_dict_u64(d, "lost_nic_missed", t.ports.missed);
  rte_tel_data_add_dict_u64(d, "lost_nic_errors", t.ports.errors);
  rte_tel_data_add_dict_u64(d, "lost_no_mbuf", t.ports.no_mbuf);
  rte_tel_data_add_dict_u64(d, "lost_dispatch", t.dispatch);
  rte_tel_data_add_dict_u64(d, "lost_output_queues", t.output_queues);
  rte_tel_data_add_dict_u64(d, "lost_tx", t.tx);
  return 0;
}

int tel_consumers(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> g(g_tel_mu);
  if (!g_tel_engine) return -1;
  Engine& E = *g_tel_engine;
  std::lock_guard<std::mutex> s(E.snap_mu);
  rte_tel_data_start_dict(d);
  for (auto& c : E.snap.consumers) {
    rte_tel_data* sub = rte_tel_data_alloc();
    if (!sub) return -1;
    tel_counters(sub, c);
    rte_tel_data_add_dict_container(d, c.name.c_str(), sub, 0);
  }
  return 0;
}

int tel_policies(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> g(g_tel_mu);
  if (!g_tel_engine) return -1;
  Engine& E = *g_tel_engine;
  std::lock_guard<std::mutex> s(E.snap_mu);
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "generation", E.snap.generation);
  rte_tel_data_add_dict_u64(d, "reloads", E.snap.reloads);
  rte_tel_data_add_dict_u64(d, "reloads_failed", E.snap.reloads_failed);
  rte_tel_data_add_dict_string(d, "last_result", E.last_result.substr(0, RTE_TEL_MAX_STRING_LEN - 1).c_str());
  // A dict value holds at most RTE_TEL_MAX_STRING_LEN bytes: the first
  // diagnostic line (file:line:col: error: ...) is what fits.
  std::string first = E.last_error.substr(0, E.last_error.find('\n'));
  rte_tel_data_add_dict_string(d, "last_error", first.substr(0, RTE_TEL_MAX_STRING_LEN - 1).c_str());
  for (size_t i = 0; i < E.pinfo.size() && i < E.cfg.consumers.size(); ++i) {
    rte_tel_data* sub = rte_tel_data_alloc();
    if (!sub) return -1;
    rte_tel_data_start_dict(sub);
    const PolicyInfo& p = E.pinfo[i];
    std::string path = p.path.size() < RTE_TEL_MAX_STRING_LEN ? p.path : "..." + p.path.substr(p.path.size() - 120);
    rte_tel_data_add_dict_string(sub, "path", path.c_str());
    rte_tel_data_add_dict_string(sub, "sha256", p.sha256.c_str());
    rte_tel_data_add_dict_u64(sub, "rules", p.rules);
    rte_tel_data_add_dict_u64(sub, "loaded_at_unix_ms", p.loaded_at_ns / 1000000);
    rte_tel_data_add_dict_container(d, E.cfg.consumers[i].name.c_str(), sub, 0);
  }
  return 0;
}

int tel_zanon(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> g(g_tel_mu);
  if (!g_tel_engine) return -1;
  Engine& E = *g_tel_engine;
  std::lock_guard<std::mutex> s(E.snap_mu);
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "enabled", E.snap.has_zstats);
  if (E.snap.has_zstats) {
    const zanon::Stats& z = E.snap.zstats;
    rte_tel_data_add_dict_u64(d, "values_tracked", z.values_tracked);
    rte_tel_data_add_dict_u64(d, "capacity", z.capacity);
    rte_tel_data_add_dict_u64(d, "table_bytes", z.table_bytes);
    rte_tel_data_add_dict_u64(d, "observations", z.observations);
    rte_tel_data_add_dict_u64(d, "released", z.released);
    rte_tel_data_add_dict_u64(d, "hidden", z.hidden);
    rte_tel_data_add_dict_u64(d, "evictions", z.evictions);
    rte_tel_data_add_dict_u64(d, "refused", z.refused);
    rte_tel_data_add_dict_u64(d, "expirations", z.expirations);
  }
  if (E.snap.has_share) add_share_telemetry(E.snap.share, d);
  return 0;
}

int tel_flows(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> g(g_tel_mu);
  if (!g_tel_engine) return -1;
  Engine& E = *g_tel_engine;
  std::lock_guard<std::mutex> s(E.snap_mu);
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "created", E.snap.flows_created);
  rte_tel_data_add_dict_u64(d, "expired", E.snap.flows_expired);
  rte_tel_data_add_dict_u64(d, "evicted", E.snap.flows_evicted);
  rte_tel_data_add_dict_u64(d, "closed", E.snap.flows_closed);
  // Pressure, live: new flows that found the table full, answered ones evicted.
  rte_tel_data_add_dict_u64(d, "table_full", E.snap.flows_full);
  rte_tel_data_add_dict_u64(d, "evicted_answered", E.snap.flows_evicted_two_way);
  rte_tel_data_add_dict_u64(d, "streams_held", E.snap.streams_held);
  rte_tel_data_add_dict_u64(d, "streams_failed", E.snap.streams_failed);
  rte_tel_data_add_dict_u64(d, "partial_heads", E.snap.partial_heads);
  rte_tel_data_add_dict_u64(d, "partial_masked_bytes", E.snap.partial_masked);
  rte_tel_data_add_dict_u64(d, "stream_gaps", E.snap.stream_gaps);
  rte_tel_data_add_dict_u64(d, "stream_resyncs", E.snap.stream_resyncs);
  rte_tel_data_add_dict_u64(d, "gap_closed_bytes", E.snap.gap_closed_bytes);
  return 0;
}

int tel_reload(const char*, const char*, rte_tel_data* d) {
  g_hup.store(1, std::memory_order_relaxed);
  rte_tel_data_string(d, "reload queued");
  return 0;
}

// logrotate's postrotate without a reload: every pcap output reopens its
// file before its next record.
int tel_reopen(const char*, const char*, rte_tel_data* d) {
  pcap_request_reopen();
  rte_tel_data_string(d, "reopen queued");
  return 0;
}

}  // namespace

void register_telemetry(Engine& E) {
  {
    std::lock_guard<std::mutex> g(g_tel_mu);
    g_tel_engine = &E;
  }
  static bool registered = false;
  if (registered) return;
  registered = true;
  rte_telemetry_register_cmd("/amon/stats", tel_stats, "amon totals: packets in, out, dropped; policy generation");
  rte_telemetry_register_cmd("/amon/consumers", tel_consumers, "Per consumer: the exit report's counters and per-rule hits");
  rte_telemetry_register_cmd("/amon/policies", tel_policies,
                             "Policy generation, per consumer path, SHA-256, loaded-at; last reload result and error");
  rte_telemetry_register_cmd("/amon/zanon", tel_zanon, "z-anonymity store: values, bytes, observations, evictions");
  rte_telemetry_register_cmd("/amon/flows", tel_flows, "Flow table totals over all workers");
  rte_telemetry_register_cmd("/amon/reload", tel_reload, "Reload policies and keys, as SIGHUP does");
  rte_telemetry_register_cmd("/amon/reopen", tel_reopen, "Reopen every pcap output file (after logrotate moved it)");
}

void unregister_telemetry() {
  std::lock_guard<std::mutex> g(g_tel_mu);
  g_tel_engine = nullptr;
}

}  // namespace amon::engine
