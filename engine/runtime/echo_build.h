// What an EchoScan (echo.h) shares with the background thread that compiles
// its database: the values handed over, and the newest database built.
#pragma once

#include <hs/hs.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "echo.h"

namespace amon {

// One compiled database: each literal (Hyperscan id) is one form of one value.
struct EchoGen {
  struct Pat {
    uint64_t seq;   // the value's (EchoValue::seq)
    uint32_t slot;  // the worker's table slot the value was in
    uint32_t len;
    uint8_t form;
  };
  hs_database_t* db = nullptr;
  hs_scratch_t* scratch = nullptr;  // the one worker's, made here so that it never allocates
  std::vector<Pat> pats;
  uint64_t covers = 0;  // every value recorded up to this sequence number is in it
  ~EchoGen();
};

struct EchoShared {
  std::mutex m;  // the worker only try-locks it
  std::vector<std::pair<uint32_t, EchoValue>> inbox;  // (slot, value), in the order recorded
  std::shared_ptr<const EchoGen> ready;
  std::atomic<bool> has_ready{false};
  bool queued = false;  // waiting for the background thread
  // The background thread's own: the worker's table as handed over.
  std::vector<EchoValue> mirror = std::vector<EchoValue>(EchoScan::kEntries);
  uint64_t applied = 0;
  std::chrono::steady_clock::time_point due{};
};

// Moves `out` into the shared inbox and wakes the background thread: false
// (out kept) when the lock is held just now; the worker tries again later.
bool echo_hand_over(const std::shared_ptr<EchoShared>& s, std::vector<std::pair<uint32_t, EchoValue>>& out);
// The newest database built, once; null when there is none new or the lock
// is held just now.
std::shared_ptr<const EchoGen> echo_take(EchoShared& s);
void echo_sleep_ms(unsigned ms);

// Compiles the databases of every EchoScan in order, no more often than
// this for one of them: a stream of new values is batched, and a compile
// (tens of milliseconds for a full table, most of it Hyperscan's fixed
// cost) takes at most a fraction of a core however fast values change.
inline constexpr std::chrono::milliseconds kEchoBuildEvery{200};

}  // namespace amon
