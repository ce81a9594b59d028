// The TSC frequency for a static DPDK's EAL, without its 100 ms sleep.
//
// EAL (22.11) asks get_tsc_freq_arch() (lib/eal/x86/rte_cycles.c), which
// knows the frequency only from CPUID leaf 0x15 (Intel with a crystal clock)
// or from MSR 0xCE through /dev/cpu/0/msr (Intel, msr module loaded, root).
// Everywhere else (AMD, most VMs, containers) it returns 0 and EAL measures
// the TSC against CLOCK_MONOTONIC_RAW across a 100 ms nanosleep: two thirds
// of an offline run on a small capture. That object defines nothing but this
// function, so a static link takes this definition instead.
//
// This version asks CPUID leaf 0x15 first, as EAL's does. Otherwise it
// measures the same way EAL would, TSC against CLOCK_MONOTONIC_RAW, but over
// a window that opened when the program was loaded: by the time EAL asks,
// policy compilation and EAL's own CPU scan have run for tens of
// milliseconds, so the window is already long enough and nothing waits. Only
// a program that starts EAL at once sleeps the rest of kMinWindowNs. Each
// end of the window is the tightest of a few back-to-back (TSC, clock) reads,
// so a preemption between the two reads does not skew it; over 10 ms the
// result is within a few parts per million, closer than EAL's own figure
// (which it rounds to 10 MHz).
//
// Without an invariant TSC (CPUID 0x80000007 EDX bit 8) the function returns
// 0 and EAL measures as it always does.

#include <cpuid.h>
#include <errno.h>
#include <stdint.h>
#include <time.h>
#include <x86intrin.h>

uint64_t get_tsc_freq_arch(void);

enum { kMinWindowNs = 10 * 1000 * 1000, kTries = 8 };

static uint64_t g_tsc0, g_ns0;
static int g_ok;

static int invariant_tsc(void) {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0x80000000u, 0) < 0x80000007u) return 0;
  __cpuid(0x80000007u, a, b, c, d);
  return (d >> 8) & 1;
}

static int tsc_and_ns(uint64_t* tsc, uint64_t* ns) {
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < kTries; ++i) {
    struct timespec ts;
    uint64_t t0 = __rdtsc();
    if (clock_gettime(CLOCK_MONOTONIC_RAW, &ts) != 0) return 0;
    uint64_t t1 = __rdtsc();
    if (t1 - t0 < best) {
      best = t1 - t0;
      *tsc = t0 + (t1 - t0) / 2;
      *ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    }
  }
  return 1;
}

__attribute__((constructor)) static void open_window(void) { g_ok = invariant_tsc() && tsc_and_ns(&g_tsc0, &g_ns0); }

uint64_t get_tsc_freq_arch(void) {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, 0) >= 0x15) {
    __cpuid(0x15, a, b, c, d);
    // EBX/EAX: TSC to crystal ratio; ECX: crystal Hz.
    if (a && b && c) return (uint64_t)c * (b / a);
  }
  if (!g_ok) return 0;
  uint64_t tsc, ns;
  if (!tsc_and_ns(&tsc, &ns)) return 0;
  if (ns - g_ns0 < kMinWindowNs) {
    uint64_t left = kMinWindowNs - (ns - g_ns0);
    struct timespec sl = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
    while (nanosleep(&sl, &sl) != 0 && errno == EINTR) {
    }
    if (!tsc_and_ns(&tsc, &ns)) return 0;
  }
  if (tsc <= g_tsc0 || ns <= g_ns0) return 0;
  return (uint64_t)((unsigned __int128)(tsc - g_tsc0) * 1000000000u / (ns - g_ns0));
}
