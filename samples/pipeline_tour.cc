// The whole pipeline in one run (`make run`): build a lazy graph, show the fused kernels and
// their cache keys, evaluate (compiling on the first run, loading from the disk cache on the
// next), print the result and what the runtime did.
#include <metajit/metajit.h>

#include <chrono>
#include <cstdio>

using namespace metajit;

int main() {
  // The GPU when there is one (METAJIT_DEVICE=cpu|cuda chooses), else the CPU.
  const Device dev = use_best_device();
  std::printf("device: %s\n", describe_device(dev).c_str());
  if (dev == Device::CPU && cuda_available() == false)
    std::printf("        (%s)\n", describe_device(Device::CUDA).c_str());
  // A small layer: y = softmax(relu(x @ w + b)) over rows, and its row sums (which are 1).
  Var x = rand({4, 8}, 1);
  Var w = randn({8, 5}, 2);
  Var b = array<float>({0.1f, -0.2f, 0.3f, 0.0f, 0.5f}, {5});
  Var y = softmax(relu(matmul(x, w) + b), 1);
  Var total = sum(y, {1});

  std::printf("== 1. planned kernels (nothing has run yet)\n%s\n", explain({y, total}).c_str());
  for (const KernelInfo& k : plan({y, total})) {
    std::printf("kernel %s fuses %zu ops:", k.key.c_str(), k.ops.size());
    for (const auto& op : k.ops) std::printf(" %s", op.c_str());
    std::printf("\n");
  }

  reset_stats();
  auto t0 = std::chrono::steady_clock::now();
  eval({y, total});
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  Stats s = stats();
  std::printf(
      "\n== 2. evaluated in %.1f ms: %llu kernels launched, %llu compiled (%.2f s), "
      "%llu loaded from the disk cache, %llu from memory\n",
      ms, (unsigned long long)s.kernels_launched, (unsigned long long)s.kernels_compiled,
      s.compile_seconds, (unsigned long long)s.disk_hits, (unsigned long long)s.memory_hits);
  std::printf("   %s\n", s.kernels_compiled
                             ? "first run: kernels were compiled and cached; run again to load them"
                             : "kernels came from the cache: nothing was compiled");

  std::printf("\n== 3. result\n");
  std::vector<float> yv = y.to_vector<float>(), tv = total.to_vector<float>();
  for (int r = 0; r < 4; ++r) {
    std::printf("   row %d:", r);
    for (int c = 0; c < 5; ++c) std::printf(" %.4f", yv[r * 5 + c]);
    std::printf("   sum %.4f\n", tv[r]);
  }
  std::printf(
      "\nInspect a kernel: metajit cache show <key prefix>; list them: metajit cache list\n");
  return 0;
}
