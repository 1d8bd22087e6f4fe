// The schedule pass of the C++ backend (issue 28, first part): what the C++ emitter will do
// with a kernel, decided before anything is printed and kept as data. explain() and
// METAJIT_LOG=debug read it from here, not from the generated source; the emitter prints it.
//
// It holds today: the scheduled copy of the IR (each reduction's loop invariants hoisted in
// front of it, codegen/loop_invariants.h), the loop level of every top-level statement, and a
// contraction's blocked schedule (the register tiles of the target, which operands are packed
// once per launch, the output loops walked as one column dimension), and the version of a map
// kernel's loop nest whose extra reads need no bounds tests (codegen/extra_bounds.h), and the
// map kernels' loop nests: row reuse, collapsed and SIMD loops, column reductions in strips,
// division chunks (codegen/map_schedule.h). Still found while printing: the guard sub-ranges of
// a reduction's innermost loop and of a division chunk (codegen/guard_intervals.h), which are
// found on the statements as printed.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "codegen/cpu_target.h"
#include "codegen/direct_columns.h"
#include "codegen/extra_bounds.h"
#include "codegen/kernel_ir.h"
#include "codegen/kernel_patterns.h"
#include "codegen/map_schedule.h"

namespace metajit {

// Contractions with at least this many output columns take the target's wide tile (its panels
// then at most a quarter padding), fewer the narrow one (cpu_target.h) unless the wide tile's
// panels are at most a quarter padding anyway (128 or 192 columns on AVX-512: 6x16 has 6
// accumulators, too few to keep two FMA units busy; [1024,512]x[512,128] ran at 187 GFLOP/s on
// it, 228 on 6x64, on 2 threads of an AVX-512 Xeon). The choice is made at run time, from the
// launch's extents; the schedule holds both tiles.
inline constexpr int kWideTileMinColumns = 256;

// ContractionSchedule::direct runs where the widened rows' extra columns are at most 1 /
// kDirectMaxWaste of them: rows of 14 and more for a 3x3 kernel (codegen/cpp_direct_columns.cc).
inline constexpr int kDirectMaxWaste = 8;

struct ContractionSchedule {
  Contraction match;                   // kernel_patterns.h: the reduction and its operands
  ContractionTile wide, narrow;        // the target's tiles; equal where it has one
  std::vector<int> merged_outer_vars;  // output loops just outside j walked as columns too,
                                       // outermost first (conv2d: 64 rows x 3136 columns)
  // Merged columns whose loads (B's) are affine in every column variable, without extras:
  // where at run time those loads are contiguous along the columns and the rows are short,
  // a panel's columns pack in one vector loop, the column variables from tables, not row
  // piece by row piece (CppEmitter::pack_merged_flat; the digits CNN's 4x4 images).
  bool flat_columns = false;
  // A convolution's B read from a table of its input over the windows, not packed
  // (codegen/direct_columns.h), on the wide tile, where at run time the widened rows waste at
  // most an eighth of the columns (kDirectMaxWaste), the kernel is not 1x1 and the table fits
  // (CppEmitter::direct_tile): conv2d 8x64x56x56 by 64x3x3 in 6.5 ms against 8.6 packed
  // (AVX-512).
  std::optional<DirectColumns> direct;
  // A weight gradient's B packed once, over its reduction widened by the taps, for every tap
  // (codegen/direct_columns.h DirectSteps), on the wide tile, where the table fits: conv2d
  // 8x64x56x56 by 64x3x3's weight gradient had packed B 18 times (9 taps, 2 row blocks).
  std::optional<DirectSteps> direct_steps;
  bool a_once = false, b_once = false;  // packed once per launch (reads no outer loop)
  // Both operands bfloat16 on a target with vdpbf16ps (CpuTarget::bf16_dot): the packed panels
  // are rounded to bfloat16 and paired along the reduction where they lie
  // (codegen/cpp_bf16_dot_prelude.h), the micro-kernels multiply pairs into float32 sums, and
  // the reduction blocks are of even length. Neither `direct` nor `direct_steps` then: their
  // B is read as float32 from a table.
  bool bf16_pairs = false;
  // Int32 sums of 8-bit products (Contraction::a_bytes, b_bytes: A Int8 or UInt8, B Int8) on a
  // target with vpdpbusd (CpuTarget::int8_dot): the panels hold quads of reduction steps as
  // bytes (codegen/cpp_int8_dot_prelude.h), A's unsigned (an Int8 A shifted by 128, taken back
  // in the epilogue through B's column sums), B's signed; the sums Int32 in the block buffer.
  bool int8_quads = false;
  // Int32 sums of 8-bit products otherwise, on AVX2 and AVX-512: the panels hold pairs of
  // reduction steps as int16 (any 8-bit value, no shift), multiplied by vpmaddwd.
  bool int16_pairs = false;
  // Reduction steps per panel word: 2 (bf16_pairs, int16_pairs), 4 (int8_quads) or 1.
  int steps_per_word() const { return bf16_pairs || int16_pairs ? 2 : int8_quads ? 4 : 1; }
  bool int32_sums() const { return int8_quads || int16_pairs; }
  // Each operand packed by one function (MJ_PACK_FN) that the packing once per launch and the
  // packing per block call: compiled once, not once per call site (codegen/cpp_contraction.cc).
  // Not for merged columns (a convolution: g++ allocated the piece loop's registers worse in a
  // function, the 7x7 stem's packing 60% slower), nor after a reduction before the loops, which
  // a function would compute again.
  bool pack_functions = false;
};

// A scatter kernel (reindex_reduce): its target is filled with the identity, then its sources
// accumulate in order.
struct ScatterSchedule {
  // A loop whose variable is, by itself, one of the target indices and appears in no other:
  // iterations with different values of it write different elements, so it is split between
  // threads (and run as SIMD lanes) without changing the order in which any element
  // accumulates; the innermost such loop (embedding's backward: the column loop), or -1: the
  // accumulation runs on one thread.
  int split_loop = -1;
  // The split loop under `omp simd`: not when the body has a reduction, whose own OpenMP
  // construct cannot sit in a SIMD region.
  bool simd = false;
};

struct CpuSchedule {
  KernelIR ir;              // the scheduled copy: reduction invariants hoisted (map kernels)
  std::vector<int> levels;  // per top-level statement: its loop (statement_levels)
  std::vector<int> level_of_value;  // the same by value id
  std::optional<ContractionSchedule> contraction;
  // Map kernels that are not contractions: the version of the loop nest whose extra reads load
  // without bounds tests, and when it runs (codegen/extra_bounds.h); empty when there is none.
  InBoundsVersion in_bounds;
  // Map kernels with loops (codegen/map_schedule.h): the plain loop nest (also a contraction's,
  // run where scratch memory is refused, once for both tiles, its reductions without SIMD); where a
  // row reduction's values are reused (not contractions), the reuse and the nest that reads the row
  // back (the plain one runs when the lengths differ).
  MapNest nest;
  std::optional<RowReuse> row_reuse;
  MapNest reuse_nest;
  // Where `nest` strip-mines window reductions: the nest without them, run when the innermost
  // output loop is shorter than kMinWindowStripColumns (codegen/map_schedule.h).
  std::optional<MapNest> narrow_nest;
  // Where narrow_nest runs in the version without bounds tests (in_bounds) and the loops after
  // the first hold at most a strip of outputs: those loops as one strip through tables
  // (MapNest::flat), the reads indexed in int. The digits CNN's 2x2 pooling of 4-column rows
  // ran scalar in narrow_nest: 76 us a call, 32 this way (AVX-512). Only window reductions at
  // the innermost loop, other statements there or before any loop, and reads whose indexes
  // are integer arithmetic of the loops.
  std::optional<MapNest> flat_nest;
  ScatterSchedule scatter;  // scatter kernels
};

CpuSchedule schedule_cpu_kernel(const KernelIR& ir, const CpuTarget& target);

// One line naming the schedule where it is not the plain loop nest (the source's
// "// schedule:" comment and explain()), empty otherwise.
std::string describe_schedule(const CpuSchedule& s, const CpuTarget& target);

// The scheduled IR with each statement's loop level, and the line above: METAJIT_LOG=debug.
std::string dump_schedule(const CpuSchedule& s, const CpuTarget& target);

}  // namespace metajit
