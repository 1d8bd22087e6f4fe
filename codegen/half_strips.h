// Float16 strips (issue 29): where a map kernel's innermost loop runs under `omp simd` and reads
// or writes float16 buffers along it, the schedule pass (codegen/cpu_schedule.h) strip-mines
// that loop. Each strip's float16 reads are widened into float arrays, and its float16 outputs
// narrowed from float arrays, by F16C's vector conversions (codegen/cpp_narrow_prelude.h
// mj_widen_f16 / mj_narrow_f16); the strip's SIMD loop reads and writes those arrays. Element by
// element the conversions are integer arithmetic (g++ 12 does not vectorise F16C's scalar
// forms): a float16 SELU over 16M elements took 8.5 ms that way against 5.6 in float32
// (AVX-512, bench row `selu 16M float16`). BFloat16 needs no strips: its conversions are shifts
// and adds that g++ vectorises.
#pragma once
#include <cstddef>
#include <optional>
#include <vector>

#include "codegen/kernel_ir.h"

namespace metajit {

// Outputs per strip: four float16 strips and their float arrays stay within 6 KiB of stack.
inline constexpr int kHalfStrip = 256;

struct HalfStrips {
  // Top-level loads of the innermost loop from float16 buffers whose offset steps by one with
  // the loop's variable (the variable added to the last index, which no other index reads):
  // their strip is widened once, then read from the float array.
  std::vector<int> loads;
  bool output = false;                // the output is float16: narrowed from a float array
  std::vector<size_t> extra_outputs;  // ir.extra_outputs entries that are float16, likewise
};

// A load whose offset steps by one with loop variable `var` (row-major strides: `var` added to
// the last index, which no other index reads).
bool contiguous_along(const KStmt& load, int var);

// The float16 strips of `ir`'s innermost loop (`levels`: statement_levels), or none: none when
// no load or output qualifies. The caller decides that the loop is a plain SIMD loop (no column
// strips, division chunks or row reuse) on a vector target.
std::optional<HalfStrips> find_half_strips(const KernelIR& ir, const std::vector<int>& levels);

}  // namespace metajit
