// The audit's z-anonymity allowance: the definition of doc/zanon.md
// replayed by brute force, independently of engine/zanon (the model its
// tests hold the store to, tests/zanon/test_zanon_model.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace amon::audit {

// Per (value class, value) every user's newest time. A value observed at t
// is released iff at least z distinct users (this one included) were seen
// with it after t - dt. A user's time never moves back (a late packet does
// not forget the user's newer occurrence), and an occurrence already
// processed counts even when its time is after t: the window's upper end
// is arrival order, as the engine's store reads it. Counts are kept per
// class, as the store's scopes are (one identifier per policy).
class ZCount {
 public:
  bool observe(const std::string& cls, const std::string& value, const std::string& user, uint64_t t, int64_t z,
               int64_t dt) {
    auto& users = m_[cls + '\0' + value];
    auto [it, fresh] = users.emplace(user, t);
    if (!fresh) it->second = std::max(it->second, t);
    return recent(users, t, dt) >= z;
  }

  // The decision at t without counting an occurrence.
  bool released(const std::string& cls, const std::string& value, uint64_t t, int64_t z, int64_t dt) const {
    auto it = m_.find(cls + '\0' + value);
    return it != m_.end() && recent(it->second, t, dt) >= z;
  }

 private:
  using Users = std::unordered_map<std::string, uint64_t>;
  static int64_t recent(const Users& users, uint64_t t, int64_t dt) {
    int64_t n = 0;
    for (auto& [u, last] : users)
      if (uint64_t(dt) > t || last > t - uint64_t(dt)) ++n;
    return n;
  }
  std::unordered_map<std::string, std::unordered_map<std::string, uint64_t>> m_;
};

}  // namespace amon::audit
