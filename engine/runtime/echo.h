// Protected values found again in payload a policy keeps: a cookie echoed
// into a page, another host's address or a MAC written as text by an
// agent, a hidden host name repeated in a later message. What a consumer
// rewrote in its fields it remembers (EchoScan, one per consumer and
// worker, a bounded table of recent values); its kept payload is searched
// for those values, and each one found is rewritten as its field was, at
// the same length, so no length or sequence number moves. The engine so
// runs the audit's search on its own output before writing it.
//
// The search: a Hyperscan literal database of every value in the tables of
// a worker's consumers (each value once), compiled by one background
// thread for all workers and taken by the worker at its next packet (a
// generation swap: the worker never waits for it), plus a direct search
// for every value recorded since that the database does not hold (one
// pass over the payload, by the first two bytes of their forms). Each
// consumer applies a hit only for a value its own table holds, as its own
// field became. A
// value the table no longer holds is not searched for, whatever the
// database says. So the search covers exactly the table, and what is
// written never depends on when a database was built: the same input
// gives the same output.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "amon_names.hpp"
#include "value_parts.h"

namespace amon {

struct EchoSpan {
  uint32_t from, to;
};

// The literal forms a value is searched for (`form` numbers them per kind).
struct EchoForm {
  std::string lit;
  uint8_t form;
  bool caseless;
};

enum class EchoKind : uint8_t { Addr4, Addr6, Mac, Bytes, Name };

// One value a consumer rewrote: what it was, and what its field became.
struct EchoValue {
  EchoKind kind = EchoKind::Bytes;
  std::string old;       // addresses and MACs in binary, a value's bytes, a name's text
  std::string repl;      // what the field became (addresses, MACs, bytes: same length as old)
  names::Decision dec;   // a name's decision (Name): its text forms take it again
  uint64_t seq = 0;      // when it entered the table (1, 2, ...); 0: a free slot
  // Only z-anonymity hid it (its population below z): a field that leaves
  // the same value in clear (z users reached, or its rule keeps it) takes
  // it out of the table. A value some other action rewrote (a pseudonym, a
  // hash, a redaction) stays protected everywhere.
  bool z = false;
  std::vector<EchoForm> forms;  // echo_forms(), made once
  uint64_t key = 0;             // echo_key(kind, old), in a table's slot
  // In a table's slot: the seq its forms were made for. They are made when
  // first searched for (listed, or found by a database), not when the value
  // is recorded: most values of a flood leave the table unsearched.
  uint64_t formed = 0;
};

void echo_forms(const EchoValue& v, std::vector<EchoForm>& out);
// A value's key in a table's index and in the databases (kind and bytes).
uint64_t echo_key(EchoKind k, std::string_view old);

// An index of 64-bit keys to slots: open addressing with linear probing in a
// power-of-two array (kept at most half full by its users), so that an
// insertion or a removal, one per new value of a flood, allocates nothing.
class EchoIndex {
 public:
  explicit EchoIndex(unsigned cap = 2 * 4096) : t_(std::bit_ceil(std::max(cap, 16u))), mask_(unsigned(t_.size() - 1)) {}
  static constexpr uint32_t kNone = ~0u;
  uint32_t find(uint64_t key) const {
    for (unsigned i = home(key);; i = (i + 1) & mask_) {
      const E& e = t_[i];
      if (e.slot == kNone) return kNone;
      if (e.key == key) return e.slot;
    }
  }
  void put(uint64_t key, uint32_t slot) {  // inserts or replaces
    unsigned i = home(key);
    for (; t_[i].slot != kNone; i = (i + 1) & mask_)
      if (t_[i].key == key) return void(t_[i].slot = slot);
    t_[i] = {key, slot};
    ++n_;
  }
  void erase(uint64_t key);
  unsigned size() const { return n_; }

 private:
  struct E {
    uint64_t key = 0;
    uint32_t slot = kNone;
  };
  unsigned home(uint64_t key) const { return unsigned((key * 0x9e3779b97f4a7c15ULL) >> 40) & mask_; }
  std::vector<E> t_;
  unsigned mask_;
  unsigned n_ = 0;
};

// Values recorded and not yet handed to the background thread: their
// numbers and bytes in two buffers that keep their capacity, so recording a
// value copies its bytes once and allocates nothing once warm. A slot
// emptied (seq 0) frees the background thread's copy.
struct EchoBatch {
  struct Item {
    uint64_t seq;
    uint32_t slot, off, len, member;
    EchoKind kind;
  };
  // An item of no slot: every value its member recorded up to seq is in the
  // batch or has left the table.
  static constexpr uint32_t kCovers = ~0u;
  std::vector<Item> items;
  std::string bytes;
  void add(uint32_t slot, uint64_t seq, EchoKind k, std::string_view old, unsigned member = 0) {
    items.push_back({seq, slot, uint32_t(bytes.size()), uint32_t(old.size()), member, k});
    bytes.append(old);
  }
  std::string_view old(const Item& i) const { return {bytes.data() + i.off, i.len}; }
  bool empty() const { return items.empty(); }
  void clear() { items.clear(), bytes.clear(); }
};

struct EchoCount {
  unsigned mapped = 0;  // rewritten to the form its field took
  unsigned filled = 0;  // no same-length form of the rewrite: a filler (the zero address, 'x')
};

// Offline, the bytes values and names a consumer's fields rewrite anywhere
// in the input, learnt by the pre-pass before the first record
// (engine/core/users_prepass.cpp) from the identifier fields whose rule decides by
// the value alone (Program::echo_preload_rule): each value and its parts,
// with what the field makes of them; each name (a device's host name, an
// NBNS name also as its host's name is written) with its rule's decision. Every worker's table of that consumer
// holds them from its first packet and never lets them go, so a copy that
// travels before its field (a cookie's value in an earlier request's query
// string) is rewritten as the field is. Live, nothing can be known ahead.
struct EchoPreload {
  // Entries (a value, each of its parts) at most per consumer: with the
  // table's own, a database of some 20,000 literals, compiled in the
  // background in a few hundred milliseconds; the direct search covers
  // them until it is built. Values past it are counted, not held.
  static constexpr unsigned kMax = 16384;
  struct Item {
    std::string old, repl;
    EchoKind kind = EchoKind::Bytes;  // Bytes, Name (old: its lowercase text; repl empty), Addr4/6 (repl empty)
    names::Decision dec;              // a name's
  };
  std::vector<Item> items;  // in the order the input first had them
  uint64_t over = 0;        // entries left out, past kMax (each time one is met)
  // The pre-pass's heads split over TCP segments (split_heads.h): parsed
  // whole, read as far as they were whole (never completed), not followed
  // (no room).
  uint64_t split_whole = 0, split_unfinished = 0, split_refused = 0;
  // A field's value (its first kMaxValue bytes, as EchoScan::bytes takes
  // it) and what its rule made of it, the same length; its parts with it.
  void add(std::string_view old, std::string_view repl);
  // A name its rule hides by the decision d, as EchoScan::name takes it.
  void add_name(std::string_view text, const names::Decision& d);
  // A user's address (4 or 16 bytes): what it becomes depends on when a
  // copy travels (a key's rotation), so it is mapped where a hit is
  // applied (EchoScan::set_addr_map), until a field records its rewrite.
  void add_addr(const uint8_t* a, unsigned alen);
  uint64_t addrs = 0;  // of the items, addresses
  size_t size() const { return items.size(); }
  // The values are all in: what told them apart is freed.
  void seal() { std::unordered_set<std::string>().swap(seen_), std::string().swap(key_); }

 private:
  std::unordered_set<std::string> seen_;  // by kind and value
  std::string key_;
  void put(std::string_view old, std::string_view repl, EchoKind kind = EchoKind::Bytes, const names::Decision* dec = nullptr);
};

struct EchoShared;  // what the worker and the background thread share (echo_build.h)
struct EchoGen;     // one compiled database (echo_build.h)

class EchoScan {
 public:
  // Values remembered per consumer and worker; the oldest leaves first.
  // Memory: a few megabytes per consumer and worker when full (the table
  // with its values' forms; 65,536 lists of values not yet compiled, by
  // their forms' first two bytes, 1.5 MB empty), and the database.
  static constexpr unsigned kEntries = 4096;
  // Shortest value searched for: shorter text occurs by chance.
  static constexpr unsigned kMinName = 4, kMinBytes = 6;
  // A value of name=value pairs (a cookie, a query string, credentials)
  // also gives each of its parts of this length or longer, which a page or
  // a log may repeat alone; longer values than kMaxValue are searched by
  // their first kMaxValue bytes and their parts.
  static constexpr unsigned kMinPart = kValuePartMin, kMaxValue = kValuePartMax;

  EchoScan();
  ~EchoScan();
  EchoScan(const EchoScan&) = delete;
  EchoScan& operator=(const EchoScan&) = delete;

  // What a field of the consumer's became: a value rewritten is recorded
  // (`z`: by z-anonymity's fallback); one left as it came releases what
  // only z-anonymity hid (EchoValue::z).
  void addr(const uint8_t* old_a, const uint8_t* new_a, unsigned alen, bool z = false);
  void mac(const uint8_t* old_m, const uint8_t* new_m);
  void bytes(const uint8_t* old_v, const uint8_t* new_v, uint32_t len, bool z = false);
  void name(std::string_view text, const names::Decision& d, bool z = false);
  // Before any other call: the pre-pass's values, held in slots of their
  // own past the table's kEntries, never replaced (EchoPreload).
  void preload(const EchoPreload& p);
  unsigned preloaded() const { return pinned_; }
  // What the consumer's user address rule makes of `old` now (alen 4 or
  // 16 bytes into `out`), for a preloaded address no field recorded yet;
  // false: not mapped (then the copy becomes the zero address).
  using AddrMap = bool (*)(void* ctx, const uint8_t* old, uint8_t* out, unsigned alen);
  void set_addr_map(AddrMap f, void* ctx) { addr_map_ = f, addr_map_ctx_ = ctx; }
  // Some value in the table only z-anonymity hid (a kept field may release it).
  bool has_z() const { return zlive_ != 0; }

  // Bytes of the payload searched that the search never rewrites: the
  // fields parsed in this packet, which their own rules decided.
  using Span = EchoSpan;
  // Rewrites in p[0, n) every remembered value found outside `keep` (n_keep
  // spans, in any order). `before_write(ctx)`, when given, runs once before
  // the first byte changes.
  EchoCount scan(uint8_t* p, uint32_t n, const Span* keep = nullptr, unsigned n_keep = 0,
                 void (*before_write)(void*) = nullptr, void* ctx = nullptr);

  // One database for a worker's consumers (each its own table, each
  // applying only its own values' hits): the background thread compiles
  // the values they hold once, however many hold them. A scan that has
  // recorded values already keeps its own.
  static void share(const std::vector<EchoScan*>& scans);

  unsigned size() const { return index_.size(); }
  // Values recorded and not in the database the worker holds.
  unsigned pending() const;
  // Tests and benchmarks: waits (at most `ms`) until the database the
  // worker holds covers every value recorded so far.
  bool wait_built(unsigned ms);

 private:
  void record(EchoKind k, std::string_view old, std::string_view repl, bool z, const names::Decision* dec = nullptr);
  void release(EchoKind k, std::string_view old);
  void adopt();  // a newer database, if the background thread has one ready
  void flush();  // hands the recorded values to the background thread
  void touch(uint32_t slot);  // the slot's value changed since the last hand-over
  void list_new();            // the values recorded since the last search, into the direct search's lists
  const std::vector<EchoForm>& forms_of(EchoValue& v);
  struct Hit {
    uint32_t from;
    uint32_t len;
    uint8_t form;
    const EchoValue* v;
  };
  static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned flags, void* self);
  // IPv4 addresses in binary: four given bytes turn up by chance in
  // compressed or encrypted payload, so they are looked for only in
  // payload that is neither (bin4_structured), and not in the database.
  // How many of the table's IPv4 values (those without two zero bytes:
  // structured data is full of such runs) begin, and end, with each pair
  // of bytes; and a bit per pair that some do (8 KiB each, what the search
  // reads: four bytes go on to the table's index only when both their
  // pairs begin and end some value).
  std::vector<uint16_t> bin4_first_ = std::vector<uint16_t>(65536), bin4_last_ = std::vector<uint16_t>(65536);
  std::vector<uint64_t> bin4_first_bits_ = std::vector<uint64_t>(1024), bin4_last_bits_ = std::vector<uint64_t>(1024);
  // Their first bytes, as two 16-entry tables of 8 buckets by nibble (a
  // byte may begin a value when both its nibbles' entries share a bucket):
  // sixteen bytes are tested at once, only those that pass go on to the
  // pairs. Rebuilt at the next search when a first byte comes or goes.
  uint16_t bin4_lead_[256] = {};
  alignas(16) uint8_t bin4_lo_[16] = {}, bin4_hi_[16] = {};
  bool bin4_lead_changed_ = false;
  unsigned bin4_live_ = 0;
  void bin4_count(const EchoValue& v, int by);
  void search_bin4(const uint8_t* p, uint32_t n);
  bool in_db(const EchoValue& v) const;
  bool in_db(EchoKind k, std::string_view old, uint64_t key) const;
  void search_pending(const uint8_t* p, uint32_t n);
  void add_pending(uint32_t slot);
  void relist_pending();
  struct Cand {
    uint64_t seq;  // the value's, to tell a slot that took another value since
    uint32_t slot;
    // The form's first four bytes (bit 0x20 set in each when caseless;
    // masked to its length when shorter): most candidates end here, without
    // reaching the value's lines.
    uint32_t head, mask;
    uint8_t form;  // index in its forms
    bool caseless;
  };
  // The forms of values not in the database, by their first two bytes.
  // A Wu-Manber search with blocks of two bytes over windows of m_ bytes
  // (the shortest form listed, at most kWindow): the forms by the two bytes
  // that end their first window, and for each pair of bytes how far a
  // window ending in it may move on (shift_: kWindow - 1 where no form's
  // first window holds the pair, 0 where one ends in it). Pairs are taken
  // with letters in lower case: a caseless form is listed once.
  static constexpr unsigned kWindow = 4;
  std::vector<std::vector<Cand>> buckets_ = std::vector<std::vector<Cand>>(65536);
  std::vector<uint8_t> shift_ = std::vector<uint8_t>(65536, kWindow - 1);
  unsigned m_ = kWindow;
  std::vector<uint16_t> touched_;  // pairs with a list
  std::vector<uint16_t> shifted_;  // pairs with a shift below the default
  unsigned listed_ = 0;            // values listed since the last relist
  EchoCount apply(uint8_t* p, uint32_t n, const Span* keep, unsigned n_keep, void (*before_write)(void*), void* ctx);

  std::vector<EchoValue> slots_;
  EchoIndex index_{2 * kEntries};                 // echo_key of (kind, old) -> slot
  uint32_t quick_[256] = {};                      // recent slots + 1 (record's cache), 0: none
  std::deque<std::pair<uint32_t, uint64_t>> pending_;  // (slot, seq), oldest first
  // Recorded since the last search of a payload, not listed yet: a consumer
  // whose packets have no kept payload to search (DNS under the datagram
  // shortcut) lists nothing, and one that searches lists each value once.
  std::vector<std::pair<uint32_t, uint64_t>> fresh_;
  // Slots whose value changed since the last hand-over (each once): what
  // the background thread is given is their values then, so a consumer that
  // never searches holds no more than its table, and a slot that took
  // several values between two searches is handed over once.
  std::vector<uint32_t> dirty_;
  std::vector<uint8_t> is_dirty_;
  EchoBatch outbox_;  // the hand-over being made
  std::string low_;   // name()'s lowercased text
  uint32_t next_ = 0;
  uint64_t seq_ = 0;
  unsigned pinned_ = 0;   // preloaded slots, after the kEntries that take turns
  bool handed_ = false;   // some value went to the background thread
  unsigned zlive_ = 0;  // values in the table with z set
  // Values a field released lately (key_of, direct-mapped: a newer one
  // takes the place of an older): z-anonymity's fallback hiding one of them
  // again (a flow decided before the population reached z) does not bring
  // it back, so a value does not enter and leave the table packet after
  // packet.
  static constexpr unsigned kReleased = 8192;
  std::vector<uint64_t> released_ = std::vector<uint64_t>(kReleased);
  std::shared_ptr<EchoShared> shared_;
  unsigned member_ = 0;   // this scan's index in shared_
  uint64_t taken_ = 0;    // the last database number taken
  uint64_t covered_ = 0;  // every value recorded up to this sequence number is in gen_
  std::shared_ptr<const EchoGen> gen_;
  const uint8_t* scanned_ = nullptr;  // the payload hs_scan is searching (on_match checks each hit's bytes)
  std::vector<Hit> hits_;
  AddrMap addr_map_ = nullptr;
  void* addr_map_ctx_ = nullptr;
};

}  // namespace amon
