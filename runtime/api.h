// Running graphs and looking inside: eval, plan, explain, stats, profile (api.md "Running").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "meta_ops/var.h"
#include "runtime/device.h"

namespace metajit {

// Evaluates the Vars together: one graph, one plan; afterwards each holds its value.
void eval(const std::vector<Var>& vars);

struct KernelInfo {
  std::string key;               // 32 hex digits (XXH3-128), also the cache entry name
  std::vector<std::string> ops;  // the meta-ops fused into this kernel, in order
  std::string source;            // generated source
};
// Plans and generates the kernels `eval(vars)` would run on the current device; runs and
// compiles nothing.
std::vector<KernelInfo> plan(const std::vector<Var>& vars);
// The same for `target`: plan(vars, Device::CUDA) writes the CUDA kernels and their keys on a
// machine without a GPU (it needs nvcc only for the key's toolchain identity).
std::vector<KernelInfo> plan(const std::vector<Var>& vars, Device target);
// Human-readable listing of the fused groups of plan(vars).
std::string explain(const std::vector<Var>& vars);

struct Stats {
  uint64_t kernels_launched = 0, kernels_compiled = 0, memory_hits = 0, disk_hits = 0;
  double compile_seconds = 0;
  uint64_t bytes_in_use = 0, peak_bytes = 0;  // host memory
  // CUDA: device memory in use and its peak, kernels launched on the GPU (also counted in
  // kernels_launched).
  uint64_t cuda_bytes_in_use = 0, cuda_peak_bytes = 0, cuda_kernels_launched = 0;
};
Stats stats();
void reset_stats();  // zeroes counters; peak_bytes restarts from bytes_in_use

// Profiling (README "Profiling"): one row per kernel with calls, run time, compile time, bytes
// moved and GB/s, sorted by total time. METAJIT_PROFILE=1 records from the first launch and
// prints the table to stderr at exit; set_profiling() switches recording on or off at any time.
std::string profile_report();  // works either way; says how to switch profiling on when it is off
void set_profiling(bool on);
void reset_profile();  // forgets what was recorded

}  // namespace metajit
