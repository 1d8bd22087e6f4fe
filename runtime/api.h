// Running graphs and looking inside: eval, plan, explain, stats (api.md "Running").
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

}  // namespace metajit
