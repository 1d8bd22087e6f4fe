// Running graphs and looking inside: eval, plan, explain, stats, profile (api.md "Running").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "meta_ops/var.h"

namespace metajit {

// Evaluates the Vars together: one graph, one plan; afterwards each holds its value.
void eval(const std::vector<Var>& vars);

struct KernelInfo {
  std::string key;               // 32 hex digits (XXH3-128), also the cache entry name
  std::vector<std::string> ops;  // the meta-ops fused into this kernel, in order
  std::string source;            // generated source
};
// Plans and generates the kernels `eval(vars)` would run; runs and compiles nothing.
std::vector<KernelInfo> plan(const std::vector<Var>& vars);
// Human-readable listing of the fused groups of plan(vars).
std::string explain(const std::vector<Var>& vars);

struct Stats {
  uint64_t kernels_launched = 0, kernels_compiled = 0, memory_hits = 0, disk_hits = 0;
  double compile_seconds = 0;
  uint64_t bytes_in_use = 0, peak_bytes = 0;
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
