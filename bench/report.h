// One table and one JSON file for the whole run (C++ rows; bench/peers.py appends its own).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "bench/timing.h"

namespace bench {

enum class Unit { Ms, S, UsPerCall };

struct Row {
  std::string workload, impl;
  double seconds = kNaN;            // median per call (or the latency measured), in seconds
  Unit unit = Unit::Ms;             // how `seconds` is printed
  double gflops = kNaN;             // compute-bound workloads
  double metajit_over_impl = kNaN;  // metajit's time / this impl's time (<1: metajit faster)
  double floor_seconds = kNaN;      // compulsory bytes / measured bandwidth
  double over_floor = kNaN;         // this impl's time / floor
  std::string target, measured;     // this row's target (bench/README.md), and the measured value
  std::optional<bool> met;          // nullopt: reported only
  std::string note;                 // skipped / failed / how measured
  double max_rel_err = kNaN;
  int reps = 0;
  // What bench/peers.py checks against its float64 numpy reference (the transformer rows; NaN /
  // empty elsewhere, and then not written to the JSON): the first train step's loss, the loss
  // of the last warm-up step, and forward values at fixed positions.
  double loss_first = kNaN, loss_after_check = kNaN;
  std::vector<double> logits_probe;
  // The GPT rows (bench/gpt.cc): the loss of each check step, which bench/peers_gpt.py compares
  // with PyTorch eager's, and the safetensors file of the initial weights and the batch.
  std::vector<double> losses;
  std::string weights_file;
};

struct FloorInfo {
  std::string workload;
  long long elems = 0;
  double copy_gb_per_s = kNaN, triad_gb_per_s = kNaN, compulsory_bytes = kNaN;
};

struct Report {
  std::vector<Row> rows;
  std::vector<FloorInfo> floors;
  std::vector<std::string> notes;  // printed under the table
};

std::string format_row_header();
std::string format_row(const Row& r, bool first_of_workload);
void print_table(const Report& report);
// Writes {"meta": ..., "floors": [...], "rows": [...]} to `path` (directories created).
void write_json(const Report& report, const std::string& path, const std::string& argv_line);

}  // namespace bench
