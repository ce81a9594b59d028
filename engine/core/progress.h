// The progress line of an offline run: packets, MB/s, share of the input
// read and the time left, redrawn in place on stderr. Only on a terminal,
// only once the run has taken a second (short runs stay silent), never with
// --quiet; cleared before the summary is printed.
#pragma once

#include <cstdint>
#include <cstdio>

namespace amon {

class Progress {
 public:
  // total_bytes: the inputs' size (0: unknown, no percentage or ETA).
  Progress(bool enabled, uint64_t total_bytes, FILE* out = stderr);
  // Whether update would draw now (one clock read), so callers can skip
  // gathering figures that cost a system call.
  bool due() const;
  void update(uint64_t packets, uint64_t bytes_read);
  void finish();
  // The line for these figures (what update draws), for tests and benchmarks.
  static int format(char* buf, size_t n, uint64_t packets, uint64_t bytes_read, uint64_t total_bytes,
                    double elapsed_s);

 private:
  bool enabled_;
  uint64_t total_;
  FILE* out_;
  uint64_t start_ns_ = 0, next_ns_ = 0;
  bool drawn_ = false;
};

}  // namespace amon
