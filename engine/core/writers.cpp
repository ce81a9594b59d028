// A writer thread per pcap output file.
#include "engine_parts.h"

#include <pthread.h>
#include <unistd.h>

namespace amon::engine {

void file_writer_main(FileWriter* fw) {
  // The thread inherits the main lcore's single-core affinity; it may run
  // on any core the process may (the kernel places it next to whoever is
  // idle). Registered as a non-EAL lcore so mbufs go back through a
  // mempool cache rather than one ring operation each.
  cpu_set_t all;
  CPU_ZERO(&all);
  for (long c = 0, n = sysconf(_SC_NPROCESSORS_ONLN); c < n && c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  pthread_setaffinity_np(pthread_self(), sizeof(all), &all);
  const bool registered = rte_thread_register() == 0;
  // Named for top -H and perf, beside DPDK's rte-worker-N.
  pthread_setname_np(pthread_self(), "amon-write");
  // Records leave in batches of up to kWriteBatch (one writev each) but
  // never more than the ring holds: the pool is sized for a ring's worth in
  // each writer's hands.
  const unsigned batch = std::min<unsigned>(kWriteBatch, fw->q->capacity());
  std::vector<rte_mbuf*> pkts(batch);
  unsigned have = 0;
  bool waited = false;
  // A file never needs the latency a NIC does: yield and sleep when idle,
  // live or offline, so a writer never takes a core from a worker.
  Idle idle(true);
  for (;;) {
    const unsigned n = fw->q->dequeue(pkts.data() + have, batch - have);
    have += n;
    // stop is set after the last enqueue; the ring is read again after it.
    const bool last = n == 0 && fw->stop.load(std::memory_order_acquire) && fw->q->drained();
    // Write a full batch, or what there is once the ring stayed empty over
    // a wait (the workers are slower than the file: no reason to hold it).
    if (have == batch || (have && n == 0 && (waited || last))) {
      // After a failed write the rest is freed unwritten (workers must not
      // block on a dead file); the run stops reading and exits non-zero.
      if (!fw->failed.load(std::memory_order_relaxed)) {
        fw->pcap->write_burst(pkts.data(), have);
        if (fw->pcap->failed()) {
          fw->error = fw->pcap->failure();
          fw->failed.store(true, std::memory_order_release);
        } else {
          fw->written.store(fw->written.load(std::memory_order_relaxed) + have, std::memory_order_relaxed);
        }
      }
      rte_pktmbuf_free_bulk(pkts.data(), have);
      have = 0;
      waited = false;
      idle.reset();
      continue;
    }
    if (last) break;
    if (n == 0) {
      idle.wait();
      waited = true;
    } else {
      waited = false;
    }
  }
  std::string e = fw->pcap->close();
  if (fw->error.empty() && !e.empty()) {
    fw->error = e;
    fw->failed.store(true, std::memory_order_release);
  }
  if (registered) rte_thread_unregister();
}

bool output_failed(const Engine& E) {
  for (auto& o : E.outputs)
    if (o.file && o.file->failed.load(std::memory_order_acquire)) return true;
  return false;
}

// Lets every file writer drain its ring and close its file; returns false
// if any write failed (each reported). Only once no worker enqueues.
bool finish_writers(Engine& E) {
  bool ok = true;
  for (auto& o : E.outputs) {
    if (!o.file || !o.file->th.joinable()) continue;
    o.file->stop.store(true, std::memory_order_release);
    o.file->th.join();
    o.written = o.file->written.load(std::memory_order_relaxed);
    if (o.file->failed.load(std::memory_order_acquire)) {
      log_line(kErr, "consumer '%s': output %s", o.name.c_str(), o.file->error.c_str());
      ok = false;
    }
  }
  return ok;
}

}  // namespace amon::engine
