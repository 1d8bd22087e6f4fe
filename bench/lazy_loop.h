// Jittor's lazy training loop (bench/README.md "Lazy loop"): time per step early and late in
// one run, flat when each value is computed once.
#pragma once
#include "bench/report.h"
#include "bench/workloads.h"

namespace bench {

// Appends metajit's rows: ms per step around step 10 and around step 1,000 of one run; the
// Python peers (bench/peers_lazy_loop.py) add PyTorch's and Jittor's.
void run_lazy_loop(Report& report, const Options& options);

}  // namespace bench
