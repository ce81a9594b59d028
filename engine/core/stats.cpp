#include "stats.h"

#include "json.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace amon {

void accumulate(ConsumerCounters& a, const ConsumerCounters& c) {
  a.in += c.in, a.out += c.out, a.dropped += c.dropped, a.filtered += c.filtered;
  a.shared += c.shared, a.copied += c.copied;
  a.err_cut += c.err_cut, a.err_drop += c.err_drop;
  a.unknown_drop += c.unknown_drop, a.unknown_cut += c.unknown_cut, a.unknown_keep += c.unknown_keep;
  a.tunnel_cut += c.tunnel_cut, a.icmp_quote_cut += c.icmp_quote_cut, a.policy_drop += c.policy_drop;
  a.zanon_hidden += c.zanon_hidden, a.zanon_released += c.zanon_released, a.l7_cut += c.l7_cut;
  a.tls_server_cut += c.tls_server_cut;
  a.reverse_hidden += c.reverse_hidden, a.nd_zeroed += c.nd_zeroed;
  a.addr_text += c.addr_text, a.addr_text_zeroed += c.addr_text_zeroed;
  a.echoes += c.echoes, a.echoes_filled += c.echoes_filled;
  if (a.rule_hits.size() < c.rule_hits.size()) a.rule_hits.resize(c.rule_hits.size());
  for (size_t i = 0; i < c.rule_hits.size(); ++i) a.rule_hits[i] += c.rule_hits[i];
}

LossTotals loss_totals(const Report& r) {
  LossTotals t;
  for (const auto& l : r.input_loss) {
    t.ports.kernel_ring += l.kernel_ring;
    t.ports.missed += l.missed;
    t.ports.errors += l.errors;
    t.ports.no_mbuf += l.no_mbuf;
  }
  t.dispatch = r.rx_dispatch_drops;
  // rx counts what amon took from the ports, dispatch drops included.
  t.offered = r.rx + t.ports.total();
  const uint64_t before = t.ports.total() + t.dispatch;
  t.lost = before;
  for (const auto& c : r.consumers) {
    t.output_queues += c.queue_dropped;
    t.tx += c.tx_dropped;
    t.lost = std::max(t.lost, before + c.queue_dropped + c.tx_dropped);
  }
  t.share = t.offered ? double(t.lost) / double(t.offered) : 0.0;
  return t;
}

namespace {

std::string json_str(const std::string& s) { return json_quote(s); }

const char* kStatus[4] = {"ok", "not_ip", "truncated", "malformed"};

// One list drives both renderings, so text and JSON never disagree.
std::vector<std::pair<const char*, uint64_t>> reasons(const ConsumerCounters& c) {
  return {{"in", c.in},
          {"out", c.out},
          {"dropped", c.dropped},
          {"filtered", c.filtered},
          {"shared", c.shared},
          {"copied", c.copied},
          {"error_cut", c.err_cut},
          {"error_drop", c.err_drop},
          {"unknown_drop", c.unknown_drop},
          {"unknown_cut", c.unknown_cut},
          {"unknown_keep", c.unknown_keep},
          {"tunnel_cut", c.tunnel_cut},
          {"icmp_quote_cut", c.icmp_quote_cut},
          {"policy_drop", c.policy_drop},
          {"l7_cut", c.l7_cut},
          {"tls_server_cut", c.tls_server_cut},
          {"reverse_hidden", c.reverse_hidden},
          {"nd_zeroed", c.nd_zeroed},
          {"addr_text", c.addr_text},
          {"addr_text_zeroed", c.addr_text_zeroed},
          {"echoes", c.echoes},
          {"echoes_filled", c.echoes_filled},
          {"zanon_hidden", c.zanon_hidden},
          {"zanon_released", c.zanon_released}};
}

}  // namespace

std::string render_report_text(const Report& r) {
  std::ostringstream o;
  double secs = double(r.elapsed_ns) / 1e9;
  o << "amon: " << r.rx << " packets in " << secs << " s";
  if (secs > 0) o << " (" << double(r.rx) / secs / 1e6 << " Mpps)";
  o << "\n";
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    o << "  input " << r.inputs[i].first << ": " << r.inputs[i].second << " packets";
    if (i < r.input_loss.size() && r.input_loss[i].total()) {
      const InputLoss& l = r.input_loss[i];
      o << ", lost before amon read them: kernel_ring=" << l.kernel_ring << " missed=" << l.missed
        << " errors=" << l.errors << " no_mbuf=" << l.no_mbuf;
    }
    o << "\n";
  }
  if (r.live) {
    const LossTotals t = loss_totals(r);
    char share[32];
    std::snprintf(share, sizeof share, "%.3f%%", 100.0 * t.share);
    o << "  lost: " << t.lost << " of " << t.offered << " (" << share << "): kernel_ring=" << t.ports.kernel_ring
      << " nic_missed=" << t.ports.missed << " nic_errors=" << t.ports.errors << " no_mbuf=" << t.ports.no_mbuf
      << " dispatch=" << t.dispatch << " output_queues=" << t.output_queues << " tx=" << t.tx << "\n";
  }
  if (r.live)
    o << "  policies: generation " << r.generation << " (" << r.reloads << " reloads applied, " << r.reloads_failed
      << " refused)\n";
  o << "  decode: ";
  for (int s = 0; s < 4; ++s) o << kStatus[s] << "=" << r.decode_status[s] << (s < 3 ? " " : "\n");
  o << "  flows: created=" << r.flows_created << " expired=" << r.flows_expired << " (after close "
    << r.flows_closed << ") evicted=" << r.flows_evicted << " roles_uncertain=" << r.roles_uncertain;
  if (r.flows_full)
    o << " table_full=" << r.flows_full << " evicted_answered=" << r.flows_evicted_two_way
      << " roles_recalled=" << r.roles_recalled;
  o << "\n";
  if (r.streams_held || r.hold_refused)
    o << "  split headers held: " << r.streams_held << " (" << r.segments_held << " segments) completed="
      << r.streams_completed << " failed=" << r.streams_failed << " (released partly: " << r.partial_heads << ", "
      << r.partial_masked << " bytes masked) refused=" << r.hold_refused << "\n";
  if (r.stream_gaps || r.gap_closed_segments)
    o << "  stream gaps: " << r.stream_gaps << " resynced=" << r.stream_resyncs << " closed after a gap: "
      << r.gap_closed_segments << " segments (" << r.gap_closed_bytes << " payload bytes)\n";
  if (r.outer_fragments || r.outer_failed)
    o << "  fragmented datagrams: " << r.outer_datagrams << " made whole (" << r.outer_fragments
      << " fragments) failed=" << r.outer_failed << " (timeout=" << r.outer_timeout << " overlap=" << r.outer_overlap
      << " limit=" << r.outer_limit << ") fragments_cut=" << r.outer_cut << "\n";
  if (r.rx_dispatch_drops) o << "  dropped at dispatch (workers behind): " << r.rx_dispatch_drops << "\n";
  for (auto& c : r.consumers) {
    o << "consumer " << c.name << " (" << c.policy << " -> " << c.output << ")\n";
    o << "  packets: in=" << c.counters.in << " out=" << c.counters.out << " dropped=" << c.counters.dropped
      << " written=" << c.written;
    if (c.tx_dropped) o << " tx_dropped=" << c.tx_dropped;
    if (c.queue_dropped) o << " queue_dropped=" << c.queue_dropped << " (output ring full)";
    if (c.out_of_order) o << " out_of_order=" << c.out_of_order << " (held packets written late)";
    if (c.tx_truncated) o << " tx_truncated=" << c.tx_truncated << " (frames the output port cut)";
    o << "\n  ";
    int k = 0;
    for (auto& [n, v] : reasons(c.counters)) {
      if (k++ < 3 || v == 0) continue;
      o << n << "=" << v << " ";
    }
    o << "\n";
    if (c.learns_users) {
      o << "  users outside clients: " << c.users << " (" << c.users_sets_saturated << " of " << c.users_sets
        << " sets saturated)";
      if (c.prepass_sets)
        o << ", before the first record: " << c.prepass_users << " (" << c.prepass_sets_saturated << " of "
          << c.prepass_sets << " sets saturated)";
      o << "\n";
    } else if (c.learns_initiators && c.prepass_sets) {
      o << "  hosts initiating flows, before the first record: " << c.prepass_users << " ("
        << c.prepass_sets_saturated << " of " << c.prepass_sets << " sets saturated)\n";
    }
    if (c.echo_prepass)
      o << "  echoed values before the first record: " << c.echo_preloaded << " (" << c.echo_preload_over
        << " past the cap; heads split over TCP segments: " << c.echo_split_whole << " read whole, "
        << c.echo_split_unfinished << " as far as whole, " << c.echo_split_refused << " not followed)\n";
    if (c.policy_ptr) {
      for (auto& rule : c.policy_ptr->rules) {
        uint64_t hits = rule.index < c.counters.rule_hits.size() ? c.counters.rule_hits[rule.index] : 0;
        char line[32];
        std::snprintf(line, sizeof line, "%12llu", static_cast<unsigned long long>(hits));
        o << "  " << line << "  " << rule.loc.file << ":" << rule.loc.line << "  " << rule.text << "\n";
      }
    }
  }
  if (r.has_zstats) {
    o << "z-anonymity store: values=" << r.zstats.values_tracked << " bytes/value=" << r.zstats.bytes_per_entry
      << " observations=" << r.zstats.observations << " released=" << r.zstats.released
      << " hidden=" << r.zstats.hidden << " evictions=" << r.zstats.evictions << " refused=" << r.zstats.refused
      << "\n";
  }
  if (r.has_share) o << "z-anonymity sharing: " << share::to_text(r.share) << "\n";
  return o.str();
}

std::string render_report_json(const Report& r) {
  std::ostringstream o;
  o << "{\"elapsed_ns\":" << r.elapsed_ns << ",\"rx\":" << r.rx << ",\"rx_dispatch_drops\":" << r.rx_dispatch_drops;
  if (r.live)
    o << ",\"generation\":" << r.generation << ",\"reloads\":" << r.reloads << ",\"reloads_failed\":" << r.reloads_failed;
  o << ",\"inputs\":[";
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    o << (i ? "," : "") << "{\"name\":" << json_str(r.inputs[i].first) << ",\"packets\":" << r.inputs[i].second;
    if (i < r.input_loss.size()) {
      const InputLoss& l = r.input_loss[i];
      o << ",\"kernel_ring_dropped\":" << l.kernel_ring << ",\"imissed\":" << l.missed << ",\"ierrors\":" << l.errors
        << ",\"rx_nombuf\":" << l.no_mbuf;
    }
    o << "}";
  }
  o << "],\"decode\":{";
  for (int s = 0; s < 4; ++s) o << (s ? "," : "") << "\"" << kStatus[s] << "\":" << r.decode_status[s];
  o << "},\"flows\":{\"created\":" << r.flows_created << ",\"expired\":" << r.flows_expired
    << ",\"evicted\":" << r.flows_evicted << ",\"closed\":" << r.flows_closed << ",\"roles_uncertain\":" << r.roles_uncertain
    << ",\"table_full\":" << r.flows_full << ",\"evicted_answered\":" << r.flows_evicted_two_way
    << ",\"roles_recalled\":" << r.roles_recalled << "}";
  o << ",\"reassembly\":{\"held\":" << r.streams_held << ",\"segments\":" << r.segments_held
    << ",\"completed\":" << r.streams_completed << ",\"failed\":" << r.streams_failed
    << ",\"partial_heads\":" << r.partial_heads << ",\"partial_masked_bytes\":" << r.partial_masked
    << ",\"refused\":" << r.hold_refused << ",\"gaps\":" << r.stream_gaps << ",\"resyncs\":" << r.stream_resyncs
    << ",\"gap_closed_segments\":" << r.gap_closed_segments << ",\"gap_closed_bytes\":" << r.gap_closed_bytes << "}";
  o << ",\"outer_fragments\":{\"fragments\":" << r.outer_fragments << ",\"datagrams\":" << r.outer_datagrams
        << ",\"failed\":" << r.outer_failed << ",\"timeout\":" << r.outer_timeout << ",\"overlap\":" << r.outer_overlap
    << ",\"limit\":" << r.outer_limit << ",\"cut\":" << r.outer_cut << "}";
  {
    const LossTotals t = loss_totals(r);
    char share[32];
    std::snprintf(share, sizeof share, "%.6f", t.share);
    o << ",\"loss\":{\"offered\":" << t.offered << ",\"lost\":" << t.lost << ",\"share\":" << share
      << ",\"kernel_ring\":" << t.ports.kernel_ring << ",\"nic_missed\":" << t.ports.missed
      << ",\"nic_errors\":" << t.ports.errors << ",\"no_mbuf\":" << t.ports.no_mbuf << ",\"dispatch\":" << t.dispatch
      << ",\"output_queues\":" << t.output_queues << ",\"tx\":" << t.tx << "}";
  }
  o << ",\"consumers\":[";
  for (size_t i = 0; i < r.consumers.size(); ++i) {
    auto& c = r.consumers[i];
    o << (i ? "," : "") << "{\"name\":" << json_str(c.name) << ",\"policy\":" << json_str(c.policy)
      << ",\"output\":" << json_str(c.output) << ",\"written\":" << c.written << ",\"tx_dropped\":" << c.tx_dropped
      << ",\"tx_truncated\":" << c.tx_truncated << ",\"queue_dropped\":" << c.queue_dropped
      << ",\"out_of_order\":" << c.out_of_order;
    for (auto& [n, v] : reasons(c.counters)) o << ",\"" << n << "\":" << v;
    if (c.learns_users || c.learns_initiators)
      o << ",\"users\":{\"learnt\":" << c.users << ",\"sets\":" << c.users_sets
        << ",\"sets_saturated\":" << c.users_sets_saturated << ",\"prepass_learnt\":" << c.prepass_users
        << ",\"prepass_sets\":" << c.prepass_sets << ",\"prepass_sets_saturated\":" << c.prepass_sets_saturated
        << "}";
    if (c.echo_prepass)
      o << ",\"echo_prepass\":{\"preloaded\":" << c.echo_preloaded << ",\"over_cap\":" << c.echo_preload_over
        << ",\"split_heads\":{\"whole\":" << c.echo_split_whole << ",\"unfinished\":" << c.echo_split_unfinished
        << ",\"refused\":" << c.echo_split_refused << "}}";
    o << ",\"rules\":[";
    if (c.policy_ptr) {
      bool first = true;
      for (auto& rule : c.policy_ptr->rules) {
        uint64_t hits = rule.index < c.counters.rule_hits.size() ? c.counters.rule_hits[rule.index] : 0;
        o << (first ? "" : ",") << "{\"file\":" << json_str(rule.loc.file) << ",\"line\":" << rule.loc.line
          << ",\"rule\":" << json_str(rule.text) << ",\"hits\":" << hits << "}";
        first = false;
      }
    }
    o << "]}";
  }
  o << "]";
  if (r.has_zstats) {
    const auto& z = r.zstats;
    o << ",\"zanon\":{\"values\":" << z.values_tracked << ",\"capacity\":" << z.capacity
      << ",\"table_bytes\":" << z.table_bytes << ",\"bytes_per_entry\":" << z.bytes_per_entry
      << ",\"observations\":" << z.observations << ",\"released\":" << z.released << ",\"hidden\":" << z.hidden
      << ",\"evictions\":" << z.evictions << ",\"refused\":" << z.refused << ",\"expirations\":" << z.expirations << ",\"sweeps\":" << z.sweeps
      << "}";
  }
  if (r.has_share) o << ",\"zanon_share\":" << share::to_json(r.share);
  if (!r.input_error.empty()) o << ",\"input_error\":" << json_str(r.input_error);
  o << "}\n";
  return o.str();
}

}  // namespace amon
