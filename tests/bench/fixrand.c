/* LD_PRELOAD library for benchmarks, output comparisons and the audit
 * suite only: every random secret (hidden names' masks, the store's and the
 * user hash's keys, the DNS query memory's secret) comes out the same in
 * every run, so callgrind counts repeat to the instruction, two builds'
 * `amon pcap` outputs can be compared with cmp, and the audit suite audits
 * the same bytes on every run. Never link it into amon. */
#include <stddef.h>
#include <sys/types.h>

static void fill(unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)(0x5a ^ (i * 37));
}
int RAND_bytes(unsigned char* b, int n) { fill(b, (size_t)n); return 1; }
int RAND_priv_bytes(unsigned char* b, int n) { fill(b, (size_t)n); return 1; }
ssize_t getrandom(void* b, size_t n, unsigned f) { (void)f; fill(b, n); return (ssize_t)n; }
