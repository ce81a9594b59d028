// What the EchoScans (echo.h) of one worker share with the background thread
// that compiles their database: the values handed over, and the newest
// database built.
#pragma once

#include <hs/hs.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "echo.h"

namespace amon {

// One compiled database of a worker's consumers' tables (an EchoGroup):
// each literal (Hyperscan id) is one form of one value, once however many
// consumers hold the value.
struct EchoGen {
  struct Pat {
    uint64_t key;   // the value's key_of (kind, old): the consumer looks it up in its own table
    uint32_t len;
    uint8_t form;   // its index in the value's forms (the same for every table: echo_forms)
  };
  hs_database_t* db = nullptr;
  hs_scratch_t* scratch = nullptr;  // the one worker's, made here so that it never allocates
  std::vector<Pat> pats;
  // Per member: every value it recorded up to this sequence number is in it.
  std::vector<uint64_t> covers;
  // Kind and bytes of every value in it, by echo_key (the key the worker
  // computed once for its table): a value another consumer brought in needs
  // no direct search. A key's first value owns it; another value of the
  // same key (a 64-bit collision) is held but not found here, so it is
  // also searched directly: more work, never a value missed.
  std::vector<std::pair<EchoKind, std::string>> values;
  EchoIndex by_key{16};
  bool holds(EchoKind k, std::string_view old, uint64_t key) const {
    const uint32_t i = by_key.find(key);
    return i != EchoIndex::kNone && values[i].first == k && values[i].second == old;
  }
  uint64_t covered(unsigned member) const { return member < covers.size() ? covers[member] : 0; }
  ~EchoGen();
};

// What a worker's EchoScans (its consumers', the members) share with the
// background thread.
struct EchoShared {
  // Each member's table size (EchoScan::kEntries, and its preloaded slots).
  explicit EchoShared(const std::vector<size_t>& slots) : applied(slots.size()) {
    for (size_t n : slots) mirror.emplace_back(n);
  }
  std::mutex m;  // the worker only try-locks it
  EchoBatch inbox;  // in the order recorded
  std::shared_ptr<const EchoGen> ready;
  std::atomic<uint64_t> ready_no{0};  // bumped with each database built; each member takes it once
  bool queued = false;                // waiting for the background thread
  // The background thread's own: each member's table as handed over.
  std::vector<std::vector<EchoValue>> mirror;
  std::vector<uint64_t> applied;
  std::chrono::steady_clock::time_point due{};
};

// Copies `out` into the shared inbox and wakes the background thread: false
// when the lock is held just now; the worker keeps `out` and tries again
// later.
bool echo_hand_over(const std::shared_ptr<EchoShared>& s, unsigned member, const EchoBatch& out);
// The newest database built, when newer than `taken` (then updated); null
// when there is none newer or the lock is held just now.
std::shared_ptr<const EchoGen> echo_take(EchoShared& s, uint64_t& taken);
void echo_sleep_ms(unsigned ms);

// Compiles the databases of every EchoScan in order, no more often than
// this for one of them: a stream of new values is batched, and a compile
// (tens of milliseconds for a full table, most of it Hyperscan's fixed
// cost) takes at most a fraction of a core however fast values change.
inline constexpr std::chrono::milliseconds kEchoBuildEvery{200};

}  // namespace amon
