// Addresses outside a policy's `clients` that took ip.client's rule (the
// client of a flow with neither end inside, either end of such a flow whose
// roles are uncertain): users of that consumer everywhere afterwards, so
// that a public host pseudonymized as a client in one flow is not kept as a
// server in the next (doc/architecture.md, "Users outside `clients`").
//
// Bounded: 4-way sets of 64-bit fingerprints. A set that would take a fifth
// user is not made to forget one (its address would then be kept beside
// its pseudonym): it becomes a wildcard, and every address that hashes to
// it counts as a user from then on. Overflow thus only ever pseudonymizes
// more servers, never fewer; saturated() says how many sets it has taken.
// An IPv4 address's fingerprint is the address itself, mixed (one to one),
// so no two IPv4 addresses share one; IPv6 ones collide with odds 2^-63
// (the server then takes the client's rule: more protection, not less).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace amon {

class UserTable {
 public:
  static constexpr unsigned kWays = 4;
  // 2^sets_log2 sets of kWays fingerprints (8 bytes each).
  explicit UserTable(unsigned sets_log2) : shift_(64 - sets_log2), fp_(size_t(kWays) << sets_log2) {}

  void add(const uint8_t* a, uint32_t alen) { add_fp(fingerprint(a, alen)); }
  bool has(const uint8_t* a, uint32_t alen) const {
    const uint64_t h = fingerprint(a, alen);
    const uint64_t* s = &fp_[set_of(h)];
    return s[0] == kAll || s[0] == h || s[1] == h || s[2] == h || s[3] == h;
  }
  // Every address `o` holds is held here too; a wildcard set stays one.
  void merge(const UserTable& o) {
    for (size_t si = 0; si < o.fp_.size(); si += kWays) {
      const uint64_t* s = &o.fp_[si];
      if (s[0] == kAll) {
        // Its addresses are unknown: every address hashing to any set of
        // ours they could land in counts (a table of another size).
        if (o.fp_.size() == fp_.size()) saturate(&fp_[si]);
        else for (size_t k = 0; k < fp_.size(); k += kWays) saturate(&fp_[k]);
        continue;
      }
      for (unsigned i = 0; i < kWays; ++i)
        if (s[i]) add_fp(s[i]);
    }
  }
  size_t size() const { return size_; }              // addresses held one by one
  uint64_t saturated() const { return saturated_; }  // sets turned wildcard
  size_t sets() const { return fp_.size() / kWays; }
  size_t memory_bytes() const { return fp_.size() * sizeof(uint64_t); }

 private:
  // Fingerprints are odd and never kAll; 0 is a free way.
  static constexpr uint64_t kAll = ~uint64_t(0);
  // x * odd is one to one, so (before the shift) are IPv4 fingerprints:
  // 32-bit values stay distinct modulo 2^63.
  static uint64_t fingerprint(const uint8_t* a, uint32_t alen) {
    uint64_t x = 0, y = 0;
    std::memcpy(&x, a, alen == 4 ? 4 : 8);
    if (alen == 16) std::memcpy(&y, a + 8, 8);
    const uint64_t h = (x * 0x9e3779b97f4a7c15ULL + y * 0xbf58476d1ce4e5b9ULL + alen) << 1 | 1;
    return h == kAll ? kAll - 2 : h;
  }
  size_t set_of(uint64_t h) const { return size_t((h * 0xd6e8feb86659fd93ULL) >> shift_) * kWays; }
  void add_fp(uint64_t h) {
    uint64_t* s = &fp_[set_of(h)];
    if (s[0] == kAll) return;
    for (unsigned i = 0; i < kWays; ++i) {
      if (s[i] == h) return;
      if (s[i] == 0) {
        s[i] = h;
        ++size_;
        return;
      }
    }
    saturate(s);  // full: never forget one of them
  }
  void saturate(uint64_t* s) {
    if (s[0] == kAll) return;
    for (unsigned i = 0; i < kWays; ++i) size_ -= s[i] != 0, s[i] = 0;
    s[0] = kAll;
    ++saturated_;
  }
  unsigned shift_;
  std::vector<uint64_t> fp_;
  size_t size_ = 0;
  uint64_t saturated_ = 0;
};

}  // namespace amon
