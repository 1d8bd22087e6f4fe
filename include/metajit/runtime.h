// The process the graphs run in: the current device, counters, the profiler and the kernel
// cache in use (docs/api.md "Devices", "Running", "Profiling").
//
// Devices: graphs evaluate on the current device, CPU or CUDA. The current device is
// process-wide, like Jittor's use_cuda flag: METAJIT_DEVICE=cpu|cuda (read at the first use)
// chooses it, set_device() changes it. Building metajit needs no CUDA toolkit: the CUDA runtime
// is loaded when first asked for.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "device.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

// ---- devices ----
// Throws Error naming why when `d` is CUDA and no CUDA device can be used.
void set_device(Device d);
Device device();
// True when a CUDA device can be used (a GPU with a working driver and runtime, or the host
// emulation of METAJIT_CUDA_EMULATE=1). Cheap after the first call.
bool cuda_available();
// Why cuda_available() is false ("" when it is true).
std::string cuda_unavailable_reason();

// One line about `d`, e.g. "cuda: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB; ...)" or
// "cpu: 2 threads"; for CUDA without a usable device, why not.
std::string describe_device(Device d);

// The GPU when one can be used, else the CPU; an explicit METAJIT_DEVICE wins. What samples and
// programs that want "the fastest device here" call first. Returns the device chosen.
Device use_best_device();

// ---- counters and profiling ----
struct Stats {
  uint64_t kernels_launched = 0, kernels_compiled = 0, memory_hits = 0, disk_hits = 0;
  double compile_seconds = 0;
  uint64_t bytes_in_use = 0, peak_bytes = 0;  // host memory
  // CUDA: device memory in use and its peak, kernels launched on the GPU (also counted in
  // kernels_launched).
  uint64_t cuda_bytes_in_use = 0, cuda_peak_bytes = 0, cuda_kernels_launched = 0;
  // The remote kernel cache (README "Sharing kernels across machines"): kernels installed from
  // it, lookups that found nothing, entries refused (unsigned, untrusted, corrupt, for another
  // key), failed operations (of those, timeouts), kernels uploaded.
  uint64_t remote_hits = 0, remote_misses = 0, remote_rejected = 0, remote_errors = 0,
           remote_timeouts = 0, remote_uploads = 0;
  // The lazy graph now (README "Lazy evaluation"; Jittor's liveness_info): Var handles alive
  // (copies of a Var share one), graph nodes still to compute, and realized nodes holding a
  // value. Not counters: reset_stats() leaves them. A training loop whose numbers grow from
  // step to step is keeping history it should not.
  uint64_t live_vars = 0, pending_nodes = 0, realized_nodes = 0;
  // Collectives (include/metajit/distributed.h) run between kernels, and kernels launched while
  // one of them had started and was not yet complete: on more than one rank, the all-reduces
  // that overlap the backward (README "Distributed training").
  uint64_t collectives_run = 0, kernels_during_collectives = 0;
};
Stats stats();
void reset_stats();  // zeroes counters; peak_bytes restarts from bytes_in_use

// Profiling (README "Profiling"): one row per kernel with calls, run time, compile time, bytes
// moved and GB/s, sorted by total time. METAJIT_PROFILE=1 records from the first launch and
// prints the table to stderr at exit; set_profiling() switches recording on or off at any time.
std::string profile_report();  // works either way; says how to switch profiling on when it is off
void set_profiling(bool on);
void reset_profile();  // forgets what was recorded

// ---- the kernel cache ----
// The root of the on-disk kernel cache this process uses: METAJIT_CACHE_DIR, else
// $XDG_CACHE_HOME/metajit, else ~/.cache/metajit; `metajit cache path` prints the same. When it
// cannot be written, kernels go to a private temporary cache instead, and a warning says so.
std::filesystem::path cache_dir();
// The directory of the cache entry of the kernel `key` (KernelInfo::key): its source, shared
// object and meta.json, once compiled (README "The kernel cache"). Error for a malformed key.
std::filesystem::path cache_entry_dir(const std::string& key);

}  // namespace metajit
#pragma GCC visibility pop
