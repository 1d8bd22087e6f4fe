#include "runtime/runtime_stats.h"

#include <metajit/runtime.h>

#include "base/buffer.h"

namespace metajit {

RuntimeCounters& runtime_counters() {
  static RuntimeCounters c;
  return c;
}

Stats stats() {
  RuntimeCounters& c = runtime_counters();
  AllocatorStats a = allocator_stats();
  Stats s;
  s.kernels_launched = c.kernels_launched.load();
  s.kernels_compiled = c.kernels_compiled.load();
  s.memory_hits = c.memory_hits.load();
  s.disk_hits = c.disk_hits.load();
  s.compile_seconds = double(c.compile_micros.load()) * 1e-6;
  s.bytes_in_use = a.bytes_in_use;
  s.peak_bytes = a.peak_bytes;
  AllocatorStats g = allocator_stats(Device::CUDA);
  s.cuda_bytes_in_use = g.bytes_in_use;
  s.cuda_peak_bytes = g.peak_bytes;
  s.cuda_kernels_launched = c.cuda_kernels_launched.load();
  return s;
}

void reset_stats() {
  RuntimeCounters& c = runtime_counters();
  c.kernels_launched = 0;
  c.cuda_kernels_launched = 0;
  c.kernels_compiled = 0;
  c.memory_hits = 0;
  c.disk_hits = 0;
  c.compile_micros = 0;
  reset_allocator_peak();
}

}  // namespace metajit
