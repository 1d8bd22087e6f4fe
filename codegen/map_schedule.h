// The loop-nest schedules of the C++ backend's map kernels (issue 28: schedules as data, the
// emitter only prints), decided by the schedule pass (codegen/cpu_schedule.h) from the scheduled
// IR and its statement levels:
//  - row reuse: a value of the innermost loop that a row reduction just outside it already
//    computed for every element of the row (softmax: exp(x - max) in the row sum and in the
//    output) is kept in a row and read back, instead of computed twice per element;
//  - each loop nest's shape: how many outer loops one parallel loop collapses, which loops run
//    under `omp simd`, the column reductions interchanged into strips along memory, and the
//    division chunks of the innermost loop (codegen/division_chunks.h).
// What stays with the printer: the statements rewritten for a chosen chunk or sub-range, and
// the guard sub-ranges of a reduction's innermost loop (codegen/guard_intervals.h), which are
// found on the statements as printed (rewritten ones included).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "codegen/division_chunks.h"
#include "codegen/half_strips.h"
#include "codegen/kernel_ir.h"

namespace metajit {

struct RowReuse {
  size_t reduce_index = 0;               // the row Reduce among ir.body.stmts
  int reduce_id = -1, inner_value = -1;  // the Reduce, and the value inside its body
  int outer_value = -1;                  // the innermost loop's value that equals it
  int inner_var = -1;                    // the innermost loop's variable (the row's index)
  DType dtype = DType::Float32;
  // The row is the output row it belongs to (the value has the output's dtype): the output's
  // stores and their cache misses overlap the row's computation (softmax's exp) instead of
  // coming after it. Otherwise one scratch row per thread, allocated per launch.
  bool in_output = false;
};

// The row reuse of a map kernel with at least two loops (`levels`: statement_levels), or none.
// Shapes are per-node parameters: that the reduction's loop and the innermost loop have one
// length is tested when the kernel runs, the plain nest running otherwise.
std::optional<RowReuse> find_row_reuse(const KernelIR& ir, const std::vector<int>& levels);

// One loop nest of a map kernel, as the printer writes it.
struct MapNest {
  // Column reductions of the innermost loop (top-level statement indices) interchanged into
  // strips that run along memory (kernel_patterns.h is_column_reduction); when any, the
  // innermost loop is a loop over strips.
  std::vector<size_t> strips;
  // Those of `strips` that are window reductions (kernel_patterns.h is_window_reduction:
  // pooling): their innermost reduced loop steps one at a time, each step's bounds tests an
  // interval of the strip.
  std::vector<size_t> window_strips;
  int collapse = 1;          // outer loops collapsed into the one parallel loop
  bool single_simd = false;  // one loop, no strips: the parallel loop is also the SIMD loop
  bool inner_simd = false;   // the innermost loop (of two or more) runs under `omp simd`
  // The innermost loop in division chunks (not with strips, not in a row-reuse nest).
  std::optional<DivisionChunks> chunks;
  // The nest's reductions under `omp simd` (their loops then in two versions, SIMD from
  // kMinSimdReduceExtent on); false for a contraction's fallback (CpuSchedule::nest).
  bool simd_reductions = true;
  // Every loop after the first walked as one strip, its variables read from tables filled once
  // per launch, the window reductions accumulating the whole strip (CpuSchedule::flat_nest).
  bool flat = false;
  // The innermost SIMD loop in strips whose float16 reads and outputs are converted a strip at
  // a time (codegen/half_strips.h); set by the schedule pass on vector targets only.
  std::optional<HalfStrips> half;
};

// Window reductions (kernel_patterns.h is_window_reduction: pooling) are strip-mined like
// column reductions where the innermost output loop has at least this many iterations: a strip
// narrower than the vector ran in the vector loop's scalar remainder with the strip's overhead
// on top (the digits CNN's pooling of 4-column rows: 261 -> 300 us), where 8 x 64 x 112 x 112
// pooled 3x3 stride 2 went 30.6 -> 6.4 ms (AVX-512, Intel Xeon). Below it the nest without
// those strips runs (CpuSchedule::narrow_nest).
inline constexpr int kMinWindowStripColumns = 16;

// The nest of `ir` (scheduled; `levels` and `level_of_value` as statement_levels and
// levels_by_value give them); `row_reuse`: the nest that reads a reused row back; `windows`:
// window reductions strip-mined too.
MapNest schedule_map_nest(const KernelIR& ir, const std::vector<int>& levels,
                          const std::vector<int>& level_of_value, bool row_reuse,
                          bool windows = true);

// The nest as words for METAJIT_LOG=debug's schedule dump ("collapse 2, strips v5 ...").
std::string describe_map_nest(const KernelIR& ir, const MapNest& n);

}  // namespace metajit
