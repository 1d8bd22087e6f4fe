// Fused vs split model patterns (bench/README.md "Fusion patterns"): the guard that keeps
// fusion from ever making a program slower.
#pragma once
#include "bench/report.h"
#include "bench/workloads.h"

namespace bench {

// Appends a fused and a split row for the forward and the backward of every pattern.
void run_fusion_patterns(Report& report, const Options& options);

}  // namespace bench
