// The GPT of samples/gpt_model.h: its AdamW train step and forward (bench/README.md "GPT").
#pragma once
#include "bench/report.h"
#include "bench/workloads.h"

namespace bench {

// Appends metajit's train-step and forward rows. Writes the initial weights and the batch to a
// safetensors file (the step row's weights_file) that bench/peers_gpt.py loads for PyTorch and
// JAX, and records the first losses and forward values it checks; its rows get the ratios.
void run_gpt(Report& report, const Options& options);

}  // namespace bench
