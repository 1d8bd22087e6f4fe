// Process-wide counters behind stats() (docs/api.md): kernels launched and compiled, memory and
// disk cache hits, compile seconds.
#pragma once
#include <atomic>
#include <cstdint>

namespace metajit {

struct RuntimeCounters {
  std::atomic<uint64_t> kernels_launched{0};       // on every device
  std::atomic<uint64_t> cuda_kernels_launched{0};  // of those, on CUDA
  std::atomic<uint64_t> kernels_compiled{0};
  std::atomic<uint64_t> memory_hits{0};
  std::atomic<uint64_t> disk_hits{0};
  std::atomic<uint64_t> compile_micros{0};
  std::atomic<uint64_t> collectives_run{0};             // host steps (runtime/host_steps.h)
  std::atomic<uint64_t> kernels_during_collectives{0};  // launched while one was outstanding
};

RuntimeCounters& runtime_counters();

}  // namespace metajit
