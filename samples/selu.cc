// The JAX SELU example on 1M floats: the first call compiles (or loads from the disk cache),
// later calls reuse the loaded kernel; a different size reuses it too (shapes are arguments).
#include <metajit/metajit.h>

#include <chrono>
#include <cstdio>

using namespace metajit;

static Var selu(const Var& x, double alpha = 1.67, double lambda = 1.05) {
  return lambda * where(x > 0.0, x, alpha * exp(x) - alpha);
}

static double run_ms(int64_t n, uint64_t seed, float* first_value) {
  Var x = randn({n}, seed);
  eval({x});  // generate the input outside the timing
  auto t0 = std::chrono::steady_clock::now();
  Var y = selu(x);
  eval({y});
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  *first_value = y.to_vector<float>()[0];
  return ms;
}

int main() {
  // The GPU when there is one (METAJIT_DEVICE=cpu|cuda chooses), else the CPU.
  const Device dev = use_best_device();
  std::printf("device: %s\n", describe_device(dev).c_str());
  if (dev == Device::CPU && cuda_available() == false)
    std::printf("        (%s)\n", describe_device(Device::CUDA).c_str());
  const int64_t n = 1 << 20;
  float v;
  reset_stats();
  double first = run_ms(n, 1, &v);
  Stats s = stats();
  std::printf(
      "selu on %lld floats, first call: %.2f ms (%llu kernel(s) compiled, %llu loaded from disk)\n",
      (long long)n, first, (unsigned long long)s.kernels_compiled, (unsigned long long)s.disk_hits);
  double best = 1e30, total = 0;
  for (int i = 0; i < 10; ++i) {
    double t = run_ms(n, 2 + i, &v);
    total += t;
    best = t < best ? t : best;
  }
  std::printf("later calls: mean %.3f ms, best %.3f ms\n", total / 10, best);
  uint64_t compiled = stats().kernels_compiled;
  double other = run_ms(3000, 99, &v);
  std::printf("a different size (3000): %.3f ms, new compiles: %llu\n", other,
              (unsigned long long)(stats().kernels_compiled - compiled));
  return 0;
}
