// Seeded test values that do not depend on the standard library's generators: the gradient
// suites (test_autograd, test_extras) draw their inputs from them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace metajit_test {

// A small deterministic generator.
struct Lcg {
  uint64_t state;
  explicit Lcg(uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL) {}
  uint64_t next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  }
  double uniform() { return double(next() & 0xFFFFFF) / double(0x1000000); }  // [0, 1)
};

// `n` values in [lo, hi], pairwise at least (hi - lo) / (2n) apart (no ties for max/min/pool),
// in a seeded order.
inline std::vector<double> distinct(size_t n, double lo, double hi, uint64_t seed) {
  Lcg rng(seed);
  std::vector<double> v(n);
  for (size_t k = 0; k < n; ++k)
    v[k] = lo + (hi - lo) * (double(k) + 0.25 + 0.5 * rng.uniform()) / double(n);
  for (size_t k = n; k-- > 1;) std::swap(v[k], v[size_t(rng.next() % (k + 1))]);
  return v;
}

}  // namespace metajit_test
