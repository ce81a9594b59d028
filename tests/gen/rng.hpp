// Random numbers for amon-gen. Every draw is defined here in integer arithmetic
// (or one IEEE division), never through std::*_distribution, whose algorithms
// differ between libstdc++ and libc++: the same seed must give the same file
// wherever the generator is built.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace amon::gen {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}

  // splitmix64 (Steele, Lea, Flood 2014): full period, good enough equidistribution
  // for traffic synthesis, and trivially reproducible.
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n): Lemire's multiply-shift with rejection, so unbiased.
  uint64_t below(uint64_t n) {
    if (n <= 1) return 0;
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    uint64_t lo = static_cast<uint64_t>(m);
    if (lo < n) {
      const uint64_t t = (0 - n) % n;
      while (lo < t) {
        m = static_cast<unsigned __int128>(next()) * n;
        lo = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
  // Uniform in [lo, hi], both inclusive.
  uint64_t range(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }
  // Uniform in [0, 1) with 53 random bits.
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return unit() < p; }
  void fill(uint8_t* p, size_t n) {
    while (n >= 8) {
      uint64_t v = next();
      for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
      p += 8;
      n -= 8;
    }
    if (n) {
      uint64_t v = next();
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
    }
  }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }
  template <class T, size_t N>
  const T& pick(const T (&a)[N]) { return a[below(N)]; }
  // Index drawn with the given integer weights.
  size_t weighted(const unsigned* w, size_t n) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) total += w[i];
    uint64_t x = below(total);
    for (size_t i = 0; i < n; ++i) {
      if (x < w[i]) return i;
      x -= w[i];
    }
    return n - 1;
  }
  template <class T>
  void shuffle(T* a, size_t n) {
    for (size_t i = n; i > 1; --i) std::swap(a[i - 1], a[below(i)]);
  }

 private:
  uint64_t s_;
};

// A child stream per flow keeps a flow's bytes independent of how many draws
// other flows made, so changing one traffic class does not reshuffle the rest.
inline Rng substream(uint64_t seed, uint64_t tag) {
  Rng r(seed ^ (tag * 0xd1b54a32d192ed03ULL));
  r.next();
  return Rng(r.next());
}

// Zipf over ranks 0..n-1 by inverse CDF over a precomputed table. Exponent 1.0
// (the default) uses plain division, which IEEE 754 makes exact everywhere;
// other exponents go through pow() and are reproducible on one libm.
class Zipf {
 public:
  Zipf() = default;
  Zipf(size_t n, double s) {
    if (n == 0) n = 1;
    cdf_.resize(n);
    double acc = 0;
    for (size_t k = 1; k <= n; ++k) {
      const double w = s == 1.0 ? 1.0 / static_cast<double>(k) : std::pow(static_cast<double>(k), -s);
      acc += w;
      cdf_[k - 1] = acc;
    }
    for (double& c : cdf_) c /= acc;
    cdf_.back() = 1.0;
  }
  size_t sample(Rng& r) const {
    const double u = r.unit();
    return static_cast<size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }
  size_t size() const { return cdf_.size(); }
  double cdf(size_t i) const { return cdf_[i]; }

 private:
  std::vector<double> cdf_;
};

}  // namespace amon::gen
