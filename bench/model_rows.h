// What the language-model rows share (bench/transformer.cc, bench/gpt.cc): the logits probe the
// peers check against float64, and a metajit row from a timing.
#pragma once
#include <metajit/var.h>

#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/timing.h"

namespace bench {

// The logits [B, T, V] of positions (b, t) = (0, 0), (0, T-1), (B-1, T/2), all V classes each
// (PROBE in bench/peers_transformer.py and bench/peers_gpt.py).
std::vector<double> logits_probe(const metajit::Var& logits);

// metajit's row of `workload` from its timing (the error, or "not measured", as its note).
Row metajit_row(const std::string& workload, const Timing& t);

}  // namespace bench
