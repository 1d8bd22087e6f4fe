// The throughput workloads (SELU, row/column sums, softmax, matmul, conv2d and, with
// --variants, odd shapes around them) and the latency rows (compile, load, dispatch).
#pragma once
#include <string>

#include "bench/report.h"
#include "bench/timing.h"

namespace bench {

struct Options {
  Schedule schedule;
  bool variants = false;
  std::string only;        // run only workloads whose name contains this (empty: all)
  std::string probe_path;  // the metajit_load_probe executable
  // --serve-gpt: set up the GPT rows, then time blocks of them on request (bench/gpt.h).
  bool serve_gpt = false;
  bool wanted(const std::string& name) const {
    return only.empty() || name.find(only) != std::string::npos;
  }
};

// Appends the rows (and floors) of every throughput workload to `report`.
void run_throughput(Report& report, const Options& options);
// Compile latency, kernels found on disk by a new process, dispatch overhead.
void run_latency(Report& report, const Options& options);

// Sets METAJIT_OPT_LEVEL and re-reads metajit's configuration.
void set_opt_level(int level);

}  // namespace bench
