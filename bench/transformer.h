// A transformer block's train step and forward (bench/README.md "Transformer").
#pragma once
#include "bench/report.h"
#include "bench/workloads.h"

namespace bench {

// Appends the train-step and forward rows (metajit's; the peers are still to come).
void run_transformer(Report& report, const Options& options);

}  // namespace bench
