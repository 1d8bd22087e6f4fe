// jit(fn) against plain lazy evaluation on a tiny problem, where per-call overhead is all
// there is: y = a*b + c on 2x3 float32. The first jit call traces and plans (and compiles, or
// loads the kernel from the cache); later calls replay the plan. Lazy evaluation builds,
// plans and looks the kernel up again on every call.
//
//   ./jit_replay [calls]      (default 200000 jit calls; a tenth as many eval calls)
#include <metajit/metajit.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace metajit;
using Clock = std::chrono::steady_clock;

template <class F>
static double best_ns_per_call(F&& call, long calls, int rounds) {
  std::vector<double> per_call;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    for (long i = 0; i < calls; ++i) call();
    per_call.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
                       double(calls));
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call.front();
}

int main(int argc, char** argv) {
  const long calls = argc > 1 ? std::atol(argv[1]) : 200000;
  Var a = rand({2, 3}, 1), b = rand({2, 3}, 2), c = rand({2, 3}, 3);
  eval({a, b, c});

  auto step = jit([](const Var& x, const Var& y, const Var& z) { return x * y + z; }, "step");
  auto t0 = Clock::now();
  Var first = step(a, b, c);
  const double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  // Both paths give the same values.
  Var eager = a * b + c;
  if (first.to_vector<float>() != eager.to_vector<float>()) {
    std::fprintf(stderr, "jit and eval disagree\n");
    return 1;
  }

  for (int i = 0; i < 1000; ++i) step(a, b, c);  // warm the allocator's free lists
  const double jit_ns = best_ns_per_call([&] { Var y = step(a, b, c); }, calls, 5);
  const double eval_ns = best_ns_per_call(
      [&] {
        Var y = a * b + c;
        eval({y});
      },
      std::max(1L, calls / 10), 5);

  std::printf("a*b + c on 2x3 float32\n");
  std::printf("  jit, first call (trace + plan + kernel): %.3f ms\n", first_ms);
  std::printf("  jit, replay:         %8.3f us per call (best of 5 x %ld calls)\n", jit_ns / 1e3,
              calls);
  std::printf("  lazy build + eval(): %8.3f us per call (best of 5 x %ld calls)\n", eval_ns / 1e3,
              std::max(1L, calls / 10));
  std::printf("  speed-up: %.1fx; traces: %llu\n", eval_ns / jit_ns,
              (unsigned long long)step.traces());
  return 0;
}
