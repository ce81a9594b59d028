// The audit's z-anonymity allowance, counted again from the original.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

namespace amon::audit {

// Brute-force z-anonymity count: per (class, value) every user's last time.
// A value observed at t is released iff at least z distinct users (this
// one included) were seen with it in (t - dt, t].
class BruteCount {
 public:
  bool observe(const std::string& cls, const std::string& value, const std::string& user, uint64_t t, int64_t z,
               int64_t dt) {
    auto& users = m_[cls + '\0' + value];
    users[user] = t;
    int64_t n = 0;
    for (auto& [u, last] : users)
      if (int64_t(t) - int64_t(last) < dt) ++n;
    return n >= z;
  }

 private:
  std::unordered_map<std::string, std::unordered_map<std::string, uint64_t>> m_;
};

}  // namespace amon::audit
