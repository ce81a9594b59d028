// The background thread of the echo databases (echo_build.h): one for the
// process, started at the first hand-over, stopped at exit. Compiling a
// literal database of a thousand values takes milliseconds: never on a
// worker.
#include "echo_build.h"

#include <condition_variable>
#include <deque>
#include <thread>

namespace amon {

EchoGen::~EchoGen() {
  if (scratch) hs_free_scratch(scratch);
  if (db) hs_free_database(db);
}

namespace {

// One literal per form of each value any member holds, deduplicated: N
// consumers of one policy hold the same values, and one database for all
// costs one compile and one scan's worth of states instead of N.
std::shared_ptr<EchoGen> compile(const EchoShared& s) {
  auto g = std::make_shared<EchoGen>();
  g->covers = s.applied;
  std::vector<const char*> lits;
  std::vector<size_t> lens;
  std::vector<unsigned> flags, ids;
  std::vector<const std::string*> keep;
  size_t held = 0;
  for (const auto& table : s.mirror)
    for (const EchoValue& v : table) held += v.seq != 0;
  g->by_key = EchoIndex(unsigned(std::min<size_t>(2 * held, 1u << 30)));
  for (const auto& table : s.mirror)
    for (const EchoValue& v : table) {
      if (!v.seq) continue;
      const uint64_t key = echo_key(v.kind, v.old);
      if (g->holds(v.kind, v.old, key)) continue;
      if (g->by_key.find(key) == EchoIndex::kNone) g->by_key.put(key, uint32_t(g->values.size()));
      g->values.emplace_back(v.kind, v.old);
      for (uint8_t fi = 0; fi < v.forms.size(); ++fi) {
        const EchoForm& f = v.forms[fi];
        g->pats.push_back({key, uint32_t(f.lit.size()), fi});
        keep.push_back(&f.lit);
        flags.push_back(f.caseless ? HS_FLAG_CASELESS : 0);
      }
    }
  if (keep.empty()) return g;  // nothing to search: no database, nothing pending either
  for (unsigned i = 0; i < keep.size(); ++i) lits.push_back(keep[i]->data()), lens.push_back(keep[i]->size()), ids.push_back(i);
  hs_compile_error_t* err = nullptr;
  if (hs_compile_lit_multi(lits.data(), flags.data(), ids.data(), lens.data(), unsigned(lits.size()), HS_MODE_BLOCK,
                           nullptr, &g->db, &err) != HS_SUCCESS) {
    if (err) hs_free_compile_error(err);
    return nullptr;  // the worker keeps searching the values directly
  }
  if (hs_alloc_scratch(g->db, &g->scratch) != HS_SUCCESS) return nullptr;
  return g;
}

class Builder {
 public:
  ~Builder() {
    {
      std::lock_guard l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (t_.joinable()) t_.join();
  }
  bool post(const std::shared_ptr<EchoShared>& s) {
    std::unique_lock l(m_, std::try_to_lock);
    if (!l.owns_lock()) return false;
    if (!t_.joinable()) t_ = std::thread([this] { run(); });
    work_.push_back(s);
    cv_.notify_one();
    return true;
  }

 private:
  void run() {
    for (;;) {
      std::shared_ptr<EchoShared> s;
      {
        std::unique_lock l(m_);
        cv_.wait(l, [&] { return stop_ || !work_.empty(); });
        if (stop_) return;
        s = std::move(work_.front());
        work_.pop_front();
      }
      if (auto now = std::chrono::steady_clock::now(); now < s->due) std::this_thread::sleep_until(s->due);
      {
        std::lock_guard l(s->m);
        std::swap(in_, s->inbox);  // both keep their buffers
        s->queued = false;
      }
      // The forms are made here, off the worker.
      for (const EchoBatch::Item& e : in_.items) {
        s->applied[e.member] = std::max(s->applied[e.member], e.seq);
        if (e.slot == EchoBatch::kCovers) continue;
        EchoValue& v = s->mirror[e.member][e.slot];
        v.kind = e.kind, v.seq = e.seq;
        v.old.assign(in_.old(e));
        if (e.seq) echo_forms(v, v.forms);
        else v.old.clear(), v.forms.clear();
      }
      in_.clear();
      s->due = std::chrono::steady_clock::now() + kEchoBuildEvery;
      if (s.use_count() == 1) continue;  // its members are gone
      if (auto g = compile(*s)) {
        std::lock_guard l(s->m);
        s->ready = std::move(g);
        s->ready_no.fetch_add(1, std::memory_order_release);
      }
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<EchoShared>> work_;
  std::thread t_;
  bool stop_ = false;
  EchoBatch in_;  // the inbox taken
};

Builder& builder() {
  static Builder b;
  return b;
}

}  // namespace

bool echo_hand_over(const std::shared_ptr<EchoShared>& s, unsigned member, const EchoBatch& out) {
  std::unique_lock l(s->m, std::try_to_lock);
  if (!l.owns_lock()) return false;
  if (!s->queued) {
    if (!builder().post(s)) return false;
    s->queued = true;
  }
  for (const EchoBatch::Item& i : out.items) s->inbox.add(i.slot, i.seq, i.kind, out.old(i), member);
  return true;
}

std::shared_ptr<const EchoGen> echo_take(EchoShared& s, uint64_t& taken) {
  const uint64_t no = s.ready_no.load(std::memory_order_acquire);
  if (no == taken) return nullptr;
  std::unique_lock l(s.m, std::try_to_lock);
  if (!l.owns_lock()) return nullptr;
  taken = s.ready_no.load(std::memory_order_relaxed);
  return s.ready;
}

void echo_sleep_ms(unsigned ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace amon
