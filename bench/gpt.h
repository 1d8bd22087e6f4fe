// The GPT of samples/gpt_model.h: its AdamW train step and forward (bench/README.md "GPT").
#pragma once
#include "bench/report.h"
#include "bench/workloads.h"

namespace bench {

// Appends metajit's train-step and forward rows. Writes the initial weights and the batch to a
// safetensors file (the step row's weights_file) that bench/peers_gpt.py loads for PyTorch and
// JAX, and records the first losses and forward values it checks; its rows get the ratios.
//
// With options.serve_gpt no row is appended: after the set-up it prints "ready" and answers
// requests on stdin, one a line, so that bench/peers_gpt.py can alternate blocks of metajit's
// calls with blocks of its peers' in one run (a machine that slows down for minutes then slows
// both): "step SECONDS" or "forward SECONDS" times single calls for about SECONDS and prints
// "MEDIAN_SECONDS CALLS"; "quit" or the end of input returns.
void run_gpt(Report& report, const Options& options);

}  // namespace bench
