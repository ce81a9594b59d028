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
#include <unordered_set>
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
  // Kind and bytes of every value in it: a value another consumer brought in
  // needs no direct search.
  struct SvHash {
    using is_transparent = void;
    size_t operator()(std::string_view v) const { return std::hash<std::string_view>{}(v); }
  };
  std::unordered_set<std::string, SvHash, std::equal_to<>> values[5];  // by EchoKind
  bool holds(EchoKind k, std::string_view old) const {
    const auto& set = values[unsigned(k)];
    return !set.empty() && set.find(old) != set.end();
  }
  uint64_t covered(unsigned member) const { return member < covers.size() ? covers[member] : 0; }
  ~EchoGen();
};

// What a worker's EchoScans (its consumers', the members) share with the
// background thread.
struct EchoShared {
  explicit EchoShared(unsigned members) : mirror(members, std::vector<EchoValue>(EchoScan::kEntries)), applied(members) {}
  std::mutex m;  // the worker only try-locks it
  struct In {
    unsigned member;
    uint32_t slot;
    EchoValue v;
  };
  std::vector<In> inbox;  // in the order recorded
  std::shared_ptr<const EchoGen> ready;
  std::atomic<uint64_t> ready_no{0};  // bumped with each database built; each member takes it once
  bool queued = false;                // waiting for the background thread
  // The background thread's own: each member's table as handed over.
  std::vector<std::vector<EchoValue>> mirror;
  std::vector<uint64_t> applied;
  std::chrono::steady_clock::time_point due{};
};

// Moves `out` into the shared inbox and wakes the background thread: false
// (out kept) when the lock is held just now; the worker tries again later.
bool echo_hand_over(const std::shared_ptr<EchoShared>& s, unsigned member,
                    std::vector<std::pair<uint32_t, EchoValue>>& out);
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
