// End-of-run report: per consumer packets in/out/dropped and why, per-rule
// hit counts, flow and z-anonymity figures; human-readable and JSON.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime.h"
#include "share.h"
#include "zanon.h"

namespace amon {

struct ConsumerReport {
  std::string name, policy, output;
  ConsumerCounters counters;
  uint64_t written = 0, tx_dropped = 0, tx_truncated = 0;
  uint64_t queue_dropped = 0;  // live: its output ring was full (also in counters.dropped)
  // Records written after a later input packet's record (held TCP segments
  // or IP fragments released late; doc/architecture.md, "Time order").
  uint64_t out_of_order = 0;
  // Users outside `clients` (a policy that learns them, users.h): held one
  // by one, and sets turned wildcard, of the workers' tables (summed) and of
  // the offline pre-pass's; without `clients` (learns_initiators), the hosts
  // the pre-pass saw initiating flows. A saturated set makes every address
  // hashing to it a user: more servers pseudonymized, never a leak.
  bool learns_users = false, learns_initiators = false;
  uint64_t users = 0, users_sets_saturated = 0, users_sets = 0;
  uint64_t prepass_users = 0, prepass_sets_saturated = 0, prepass_sets = 0;
  // Offline, the values the pre-pass preloaded into its echo tables
  // (EchoPreload), and those past the cap (EchoPreload::kMax), not held.
  bool echo_prepass = false;
  uint64_t echo_preloaded = 0, echo_preload_over = 0;
  // ... and the heads split over TCP segments it read: whole, as far as
  // they were whole (never completed), not followed for lack of room.
  uint64_t echo_split_whole = 0, echo_split_unfinished = 0, echo_split_refused = 0;
  std::shared_ptr<const dsl::Policy> policy_ptr;
};

// What a live input lost before amon could read it, as its port (or the
// kernel beneath it) counts it. Zero for capture files.
struct InputLoss {
  uint64_t kernel_ring = 0;  // net_af_packet: the socket's ring was full (PACKET_STATISTICS tp_drops)
  uint64_t missed = 0;       // rte_eth_stats imissed: the NIC's (or the driver's) receive queue was full
  uint64_t errors = 0;       // ierrors: frames the port refused
  uint64_t no_mbuf = 0;      // rx_nombuf: no packet buffer to receive into
  uint64_t total() const { return kernel_ring + missed + errors + no_mbuf; }
};

// Every place a live run loses packets, summed over inputs; `lost` is the
// worst consumer's (what it never got: every input-side loss, and its own
// output ring and port), `share` that over what the ports were offered.
struct LossTotals {
  InputLoss ports;
  uint64_t dispatch = 0, output_queues = 0, tx = 0;  // output_queues, tx: summed over consumers
  uint64_t offered = 0, lost = 0;
  double share = 0;
};

struct Report {
  uint64_t elapsed_ns = 0;
  uint64_t rx = 0, rx_dispatch_drops = 0;
  std::vector<std::pair<std::string, uint64_t>> inputs;
  std::vector<InputLoss> input_loss;  // one per input, in the same order
  std::vector<ConsumerReport> consumers;
  uint64_t flows_created = 0, flows_evicted = 0, flows_expired = 0, flows_closed = 0;
  uint64_t roles_uncertain = 0;  // flows with no evidence of which end is the client
  // Flow-table pressure: new flows that found the table full, answered flows
  // among the evicted, flows created again that took their evicted roles.
  uint64_t flows_full = 0, flows_evicted_two_way = 0, roles_recalled = 0;
  uint64_t decode_status[4] = {};
  uint64_t copy_failures = 0;
  // TCP stream holding: headers completed from held segments / not completed (fail closed) / holds refused (full).
  uint64_t streams_held = 0, streams_completed = 0, streams_failed = 0, hold_refused = 0, segments_held = 0;
  uint64_t partial_heads = 0, partial_masked = 0;  // failed headers released with their cut part masked
  // TCP capture gaps: holes that lost a direction's message boundaries, resumptions at a plugin's message start,
  // and the segments / payload bytes in between left unparsed (cut where a policy protects the protocol).
  uint64_t stream_gaps = 0, stream_resyncs = 0, gap_closed_segments = 0, gap_closed_bytes = 0;
  // IP datagrams the link fragmented: fragments collected, datagrams made
  // whole, given up (fail closed; of them: timed out, conflicting bytes,
  // past a limit), output fragments a shortening rewrite left out.
  uint64_t outer_fragments = 0, outer_datagrams = 0, outer_failed = 0, outer_cut = 0;
  uint64_t outer_timeout = 0, outer_overlap = 0, outer_limit = 0;
  bool has_zstats = false;
  zanon::Stats zstats;
  bool has_share = false;  // zanon.share configured
  share::Status share;
  std::string input_error;
  // `amon run`: policy generation (1 at start-up, +1 per reload applied)
  // and reloads applied / refused.
  bool live = false;
  uint64_t generation = 1, reloads = 0, reloads_failed = 0;
};

void accumulate(ConsumerCounters& into, const ConsumerCounters& c);
LossTotals loss_totals(const Report& r);
std::string render_report_text(const Report& r);
std::string render_report_json(const Report& r);

}  // namespace amon
