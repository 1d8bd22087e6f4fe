// A child process for the latency rows of `make bench`; the parent sets METAJIT_CACHE_DIR.
// Every mode prints one line of key=value pairs on stdout; times are taken in here, so
// process start-up (and the bench's own libraries) are not counted.
//
//   metajit_load_probe load N             N distinct tiny kernels, one eval each: the time from
//                                         before the first eval to after the last (against a
//                                         warm cache: "new process, kernels found on disk")
//   metajit_load_probe cold elementwise   one fused element-wise kernel (SELU) on a tiny input,
//   metajit_load_probe cold matmul        or the matmul kernel: eval() wall time, the toolchain
//                                         resolved first with plan() (against an empty cache)
//   metajit_load_probe many N together    N distinct kernels compiled for one eval (in parallel,
//   metajit_load_probe many N separate    METAJIT_JOBS), or the same N by N separate evals
#include <metajit/metajit.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

using namespace metajit;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The i-th of up to 24 structurally distinct element-wise kernels (keys ignore constants, so
// each differs in its operations), on a realized 2x3 input.
Var distinct_kernel(int i, const Var& x) {
  static const std::vector<std::function<Var(const Var&)>> fns = {
      [](const Var& v) { return exp(v) + 1.0; },
      [](const Var& v) { return log(abs(v) + 1.0); },
      [](const Var& v) { return sqrt(abs(v)) * 2.0; },
      [](const Var& v) { return sin(v) - v; },
      [](const Var& v) { return cos(v) * v; },
      [](const Var& v) { return tanh(v) / 3.0; },
      [](const Var& v) { return sigmoid(v) + v; },
      [](const Var& v) { return relu(v) * relu(-v); },
      [](const Var& v) { return floor(v * 4.0); },
      [](const Var& v) { return maximum(v, 0.5) - minimum(v, -0.5); },
      [](const Var& v) { return pow(abs(v), 1.5); },
      [](const Var& v) { return where(v > 0.0, exp(v), -v); },
      [](const Var& v) { return exp(sin(v)); },
      [](const Var& v) { return tanh(cos(v)) + 1.0; },
      [](const Var& v) { return sigmoid(v * v); },
      [](const Var& v) { return log(exp(v) + exp(-v)); },
      [](const Var& v) { return sqrt(v * v + 1.0); },
      [](const Var& v) { return abs(sin(v) * cos(v)); },
      [](const Var& v) { return relu(tanh(v)); },
      [](const Var& v) { return floor(exp(v)); },
      [](const Var& v) { return where(v < 0.0, sin(v), cos(v)); },
      [](const Var& v) { return minimum(exp(v), 2.0); },
      [](const Var& v) { return v * v * v - v; },
      [](const Var& v) { return sigmoid(sin(v)) * tanh(v); },
  };
  return fns.at(size_t(i))(x);
}

Var tiny_input() {
  Var x = array<float>({0.5f, -1.25f, 2.0f, -0.75f, 0.125f, 3.0f}, {2, 3});
  eval({x});
  return x;
}

int usage() {
  std::fprintf(stderr,
               "usage: metajit_load_probe load N | cold elementwise|matmul | many N "
               "together|separate\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string mode = argv[1];
  try {
    if (mode == "load") {
      const int n = std::atoi(argv[2]);
      if (n < 1 || n > 24) return usage();
      Var x = tiny_input();
      std::vector<Var> ys;
      for (int i = 0; i < n; ++i) ys.push_back(distinct_kernel(i, x));
      auto t0 = std::chrono::steady_clock::now();
      for (const Var& y : ys) eval({y});
      const double s = seconds_since(t0);
      Stats st = stats();
      std::printf("seconds=%.9f disk_hits=%llu compiled=%llu\n", s,
                  (unsigned long long)st.disk_hits, (unsigned long long)st.kernels_compiled);
    } else if (mode == "cold") {
      const std::string what = argv[2];
      Var y;
      if (what == "elementwise") {
        Var x = tiny_input();
        y = 1.05 * where(x > 0.0, x, 1.67 * exp(x) - 1.67);
      } else if (what == "matmul") {
        Var a = rand({8, 8}, 1), b = rand({8, 8}, 2);
        eval({a, b});
        y = matmul(a, b);
      } else {
        return usage();
      }
      const size_t kernels = plan({y}).size();  // resolves the toolchain; compiles nothing
      reset_stats();
      auto t0 = std::chrono::steady_clock::now();
      eval({y});
      const double s = seconds_since(t0);
      Stats st = stats();
      std::printf("seconds=%.9f compile_seconds=%.9f compiled=%llu kernels=%zu\n", s,
                  st.compile_seconds, (unsigned long long)st.kernels_compiled, kernels);
    } else if (mode == "many" && argc == 4) {
      const int n = std::atoi(argv[2]);
      const std::string how = argv[3];
      if (n < 1 || n > 24 || (how != "together" && how != "separate")) return usage();
      Var x = tiny_input();
      std::vector<Var> ys;
      for (int i = 0; i < n; ++i) ys.push_back(distinct_kernel(i, x));
      const size_t kernels = plan(ys).size();
      reset_stats();
      auto t0 = std::chrono::steady_clock::now();
      if (how == "together") {
        eval(ys);
      } else {
        for (const Var& y : ys) eval({y});
      }
      const double s = seconds_since(t0);
      Stats st = stats();
      std::printf("seconds=%.9f compile_seconds=%.9f compiled=%llu kernels=%zu\n", s,
                  st.compile_seconds, (unsigned long long)st.kernels_compiled, kernels);
    } else {
      return usage();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "metajit_load_probe: %s\n", e.what());
    return 2;
  }
  return 0;
}
