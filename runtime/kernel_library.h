// Where a process gets runnable kernels, cheapest first: the in-memory table (canonical IR
// text -> loaded function: no codegen, no hashing of source, no file system), then the
// on-disk cache (verified, then dlopen'd), then the compiler (every missing kernel of one
// evaluation compiled in parallel, installed atomically, the cache then kept under its size
// limit). With METAJIT_RECORD=FILE it also writes the manifest of the kernels used. A miss of a
// kernel IR compiled before under another key says which part of the key changed, one info
// line per cause per call, and is counted by cause in the cache's statistics (miss_cause.h).
// The memory table is here; the tiers below it are disk_tier.h, remote_tier.h and
// compile_tier.h, taken in order by find_or_compile.h; what differs between the C++ and the
// CUDA path is kernel_backend.h; the CLI's warm and push are cache_warm.h.
#pragma once
#include <metajit/runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace metajit {

// How this process obtained a kernel (the profiler's compile column). Ordered: a later value
// tells more.
enum class KernelOrigin : uint8_t {
  Memory,    // no record of how it reached this process
  Disk,      // loaded from the on-disk cache
  Remote,    // fetched from the remote cache (remote_cache/), installed on disk, loaded
  Compiled,  // compiled by this process
};

struct KernelHandle {
  KernelFn fn = nullptr;
  std::string key;
  KernelOrigin origin = KernelOrigin::Memory;  // memory hits keep the first lookup's origin
  double compile_seconds = 0;                  // Compiled: the compiler's wall time
};

// Runnable kernels for `irs` on `device` (CPU: C++ by g++; CUDA: CUDA by nvcc, kernel.cu in
// the same cache), in order. Throws CompileError (nothing installed) when a kernel fails to
// compile, CacheError/Error for unusable caches or objects. Needs no GPU: loading a CUDA kernel
// object does not touch the device.
std::vector<KernelHandle> obtain_kernels(const std::vector<const KernelIR*>& irs,
                                         Device device = Device::CPU);

// Counts `n` kernels found in memory without obtain_kernels() (eval's program cache), in
// stats() and in the cache's persisted counters like obtain_kernels' own memory hits.
void count_memory_hits(uint64_t n);

// The key `ir` would have in the cache for `device` with the current toolchain (no compile).
std::string key_of(const KernelIR& ir, Device device = Device::CPU);
// The source the emitter of `device` writes for `ir` (CUDA: for the GPU, or for the host
// emulation under METAJIT_CUDA_EMULATE=1).
std::string kernel_source(const KernelIR& ir, Device device);
// What explain() says of `ir` on `device`: the target its source is written for and its
// schedule in one line (codegen/cpu_schedule.h), each empty where the backend names none.
struct KernelScheduleLine {
  std::string target, schedule;
};
KernelScheduleLine kernel_schedule(const KernelIR& ir, Device device);

}  // namespace metajit
