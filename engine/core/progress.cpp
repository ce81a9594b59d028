#include "progress.h"

#include <ctime>

namespace amon {

namespace {

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

constexpr uint64_t kFirstAfter = 1000000000ULL, kEvery = 250000000ULL;

}  // namespace

Progress::Progress(bool enabled, uint64_t total_bytes, FILE* out) : enabled_(enabled), total_(total_bytes), out_(out) {
  start_ns_ = mono_ns();
  next_ns_ = start_ns_ + kFirstAfter;
}

int Progress::format(char* buf, size_t n, uint64_t packets, uint64_t bytes_read, uint64_t total_bytes,
                     double elapsed_s) {
  const double mbs = elapsed_s > 0 ? double(bytes_read) / 1e6 / elapsed_s : 0;
  if (!total_bytes || bytes_read > total_bytes)
    return std::snprintf(buf, n, "amon: %llu packets, %.1f MB/s", (unsigned long long)packets, mbs);
  const double frac = double(bytes_read) / double(total_bytes);
  const double eta = frac > 0 ? elapsed_s * (1 - frac) / frac : 0;
  return std::snprintf(buf, n, "amon: %llu packets, %.1f MB/s, %.0f %% of the input, %.0f s left",
                       (unsigned long long)packets, mbs, frac * 100, eta);
}

bool Progress::due() const { return enabled_ && mono_ns() >= next_ns_; }

void Progress::update(uint64_t packets, uint64_t bytes_read) {
  if (!enabled_) return;
  const uint64_t now = mono_ns();
  if (now < next_ns_) return;
  next_ns_ = now + kEvery;
  char line[160];
  format(line, sizeof line, packets, bytes_read, total_, double(now - start_ns_) / 1e9);
  // \r and erase to the end of the line: redrawn in place.
  std::fprintf(out_, "\r%s\x1b[K", line);
  std::fflush(out_);
  drawn_ = true;
}

void Progress::finish() {
  if (drawn_) {
    std::fputs("\r\x1b[K", out_);
    std::fflush(out_);
    drawn_ = false;
  }
}

}  // namespace amon
