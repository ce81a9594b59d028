// The worker's followers: consumers whose policy is another consumer's
// (worker_path.h, follow_) take references to that consumer's output and
// count what its program counted, instead of a copy and a run of their own.
#include <cstddef>
#include <cstring>

#include "stream.h"
#include "worker_path.h"

namespace amon {

void WorkerPath::mirror_counts(unsigned lead) {
  if (followers_[lead].empty()) return;
  const ConsumerCounters& now = counters_[lead];
  // Every counter before rule_hits is a uint64_t (packet.h).
  constexpr size_t kScalars = offsetof(ConsumerCounters, rule_hits) / sizeof(uint64_t);
  static_assert(offsetof(ConsumerCounters, rule_hits) % sizeof(uint64_t) == 0);
  const auto* a = reinterpret_cast<const uint64_t*>(&now);
  const auto* b = reinterpret_cast<const uint64_t*>(&before_);
  for (unsigned f : followers_[lead]) {
    auto* o = reinterpret_cast<uint64_t*>(&counters_[f]);
    for (size_t j = 0; j < kScalars; ++j) o[j] += a[j] - b[j];
    auto& rh = counters_[f].rule_hits;
    for (size_t j = 0; j < rh.size() && j < now.rule_hits.size() && j < before_.rule_hits.size(); ++j)
      rh[j] += now.rule_hits[j] - before_.rule_hits[j];
  }
}

// The followers of `lead` on the packet it just had: its output `out` (a
// reference each was taken for), or its verdict when it forwarded nothing.
void WorkerPath::follow_packet(unsigned lead, rte_mbuf* out, Verdict v, Sink sink, void* ctx) {
  for (unsigned f : followers_[lead]) {
    ConsumerCounters& c = counters_[f];
    ++c.in;
    if (!out) {
      if (v == Verdict::Forward) ++c.dropped;  // no copy to follow
      else count_verdict(c, v);
      continue;
    }
    ++c.copied;
    ++c.out;
    sink(ctx, f, out);
  }
}

void WorkerPath::follow_burst(unsigned f, unsigned k, unsigned nout, Sink sink, void* ctx) {
  ConsumerCounters& c = counters_[f];
  c.in += k;
  for (unsigned i = 0; i < k; ++i)
    if (verdicts_[i] != Verdict::Forward) [[unlikely]] count_verdict(c, verdicts_[i]);
  c.copied += nout;
  c.out += nout;
  if (sink_burst_) {
    if (!nout) return;
    // A sink may reorder or consume the array it is given: each follower its own.
    std::memcpy(out_, fout_, nout * sizeof *out_);
    sink_burst_(ctx, f, out_, nout);
  } else {
    for (unsigned i = 0; i < nout; ++i) sink(ctx, f, fout_[i]);
  }
}

}  // namespace amon
