/* LD_PRELOAD for output comparisons only: OpenSSL's RAND_bytes and
 * RAND_priv_bytes and getrandom(2) return the same bytes on every call, so
 * every per-run secret of amon (hidden names' random masks, the DNS query
 * memory's and the name caches' secrets, the z-store's key, the user-hash
 * key) is the same from run to run and from build to build: two binaries'
 * outputs of one capture and policy can be compared byte for byte, and
 * callgrind counts repeat to the instruction. Never for production. */
#include <stddef.h>
#include <sys/types.h>

static void fill(unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)(0x5a ^ (i * 37));
}

int RAND_bytes(unsigned char* b, int n) {
  fill(b, (size_t)n);
  return 1;
}

int RAND_priv_bytes(unsigned char* b, int n) {
  fill(b, (size_t)n);
  return 1;
}

ssize_t getrandom(void* b, size_t n, unsigned flags) {
  (void)flags;
  fill(b, n);
  return (ssize_t)n;
}
