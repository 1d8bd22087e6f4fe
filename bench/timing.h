// The measuring engine: every implementation of one workload (metajit, its peers, the floor's
// copy and triad) is warmed up, checked against metajit's result, then timed in blocks that
// alternate between implementations within one run, so that machine noise hits all of them.
#pragma once
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#if METAJIT_BENCH_GBENCH
#include <benchmark/benchmark.h>
#endif

namespace bench {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Keeps the compiler from dropping a peer's work whose result nobody reads.
inline void clobber_memory() {
#if METAJIT_BENCH_GBENCH
  benchmark::ClobberMemory();
#else
  asm volatile("" : : : "memory");
#endif
}

// One implementation of a workload.
struct Impl {
  std::string name;
  std::function<void()> run;      // one timed call (graph building included for metajit)
  std::function<void()> prepare;  // optional, untimed, before each block of calls
  std::function<void()> finish;   // optional, untimed, after each block of calls
  // Optional: the output after the warm-up; every peer's is checked against impls[0]'s.
  std::function<std::vector<float>()> result;
  std::string skipped;  // non-empty: not run, and why
  // The check's tolerance for this impl when it is not the workload's: an algorithm whose
  // rounding error is known to be larger (the Winograd peer's), NaN for the workload's.
  double tol = kNaN;
};

struct Timing {
  double median_s = kNaN, min_s = kNaN;
  int reps = 0;
  double max_rel_err = kNaN;  // against impls[0]; NaN when not checked
  std::string error;          // non-empty: not timed, and why (threw, or a wrong result)
  bool ok() const { return error.empty() && reps > 0; }
};

struct Schedule {
  double budget_s = 2.5;  // time for the timed calls of one workload, shared by its impls
  int min_reps = 3, max_reps = 2000;  // per impl
  int passes = 3;                     // blocks per impl: forward order, then reverse order, ...
  double settle_s = 0.1;              // idle before each block: other thread pools stop spinning
};

// Largest |peer - reference| / max(|reference|, 1e-2 * rms(reference)) over all elements.
double max_rel_err(const std::vector<float>& peer, const std::vector<float>& reference);

// Warms up every impl (the first call compiles), checks results against impls[0] (tolerance
// `tol`), estimates each impl's time, gives each an equal share of the budget (at least
// min_reps calls), and times the impls in blocks whose order alternates from pass to pass.
// Returns the median per impl (same order as `impls`).
std::vector<Timing> measure(std::vector<Impl>& impls, const Schedule& schedule, double tol);

double median(std::vector<double> v);

}  // namespace bench
