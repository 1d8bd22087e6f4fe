// `make bench`: fused (O1) against unfused (O0) metajit in the same run, reported as ratios.
// The peer comparison (Halide, Eigen, OpenBLAS, Python frameworks) and the memory-bandwidth
// floor belong to the performance issue and are not here yet.
#include <metajit/metajit.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "runtime/config.h"

using namespace metajit;

namespace {

// Median wall time of `reps` evaluations of build(), after one warm-up (which compiles).
double median_ms(const std::function<Var()>& build, int reps) {
  eval({build()});
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    Var y = build();
    auto t0 = std::chrono::steady_clock::now();
    eval({y});
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double at_level(int level, const std::function<Var()>& build, int reps) {
  setenv("METAJIT_OPT_LEVEL", level ? "1" : "0", 1);
  reload_config();
  return median_ms(build, reps);
}

}  // namespace

int main() {
  Var big = randn({1 << 24}, 1);
  Var mat = randn({2048, 2048}, 2);
  eval({big, mat});
  struct Workload {
    const char* name;
    std::function<Var()> build;
  } workloads[] = {
      {"selu 16M f32", [&] { return 1.05 * where(big > 0.0, big, 1.67 * exp(big) - 1.67); }},
      {"sum(exp(x)) 16M f32", [&] { return sum(exp(big)); }},
      {"softmax rows 2048x2048", [&] { return softmax(mat, 1); }},
      {"row sums 2048x2048", [&] { return sum(mat, {1}); }},
  };
  std::printf("%-26s %12s %12s %10s\n", "workload", "O1 ms", "O0 ms", "O0/O1");
  for (auto& w : workloads) {
    double o1 = at_level(1, w.build, 7), o0 = at_level(0, w.build, 7);
    std::printf("%-26s %12.2f %12.2f %9.2fx\n", w.name, o1, o0, o0 / o1);
  }
  return 0;
}
