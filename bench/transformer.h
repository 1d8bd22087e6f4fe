// A transformer block's train step and forward (bench/README.md "Transformer").
#pragma once
#include "bench/report.h"
#include "bench/workloads.h"

namespace bench {

// Appends metajit's train-step and forward rows, with the first losses and forward values that
// bench/peers_transformer.py checks; its PyTorch and JAX rows get the ratios.
void run_transformer(Report& report, const Options& options);

}  // namespace bench
