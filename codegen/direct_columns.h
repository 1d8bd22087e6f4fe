// Whether a contraction's B operand can be read straight from a table of its input instead of
// packed panels (ContractionSchedule::direct, codegen/cpu_schedule.h): a stride-1 convolution.
//
// Its columns are an output row and column (the merged loop R and j), and B depends on each only
// together with one reduction loop, through R + kh or R - kh (and j + kw or j - kw): B's value at
// (kh, kw, R, j) is then a table G's element (R + kh', j + kw'), kh' = kh or KH-1-kh. G is the
// operand over the union of the windows (an input plane with its padding applied: (OH+KH-1) x
// (OW+KW-1) per other reduction step, a ninth of im2col's 3x3 copy), and a micro-kernel reads
// step k's row of a panel at G + offset(k) + column, contiguous along the columns when each
// output row is widened to OW+KW-1 columns (the KW-1 extra ones are computed and dropped). This is
// the direct convolution of oneDNN's "flat" layouts with the output pixels along the vector
// (NCHW, the layout metajit's tensors have) rather than a blocked channel layout, which would cost
// a reorder of the input and the output per call.
#pragma once
#include <optional>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/kernel_patterns.h"

namespace metajit {

struct DirectColumns {
  int row_var = -1, col_var = -1;  // the merged output row loop and the column loop j
  int row_tap = -1, col_tap = -1;  // the reduction loops paired with them
  // B reads row - row_tap (a transposed convolution, or one whose kernel is flipped) rather
  // than row + row_tap; the same for the columns.
  bool row_flipped = false, col_flipped = false;
  // B reads stride * row + kh (a strided convolution): the table holds one plane per phase
  // kh % stride, and tap kh reads phase kh % stride at row + kh / stride. Flipped only at 1.
  int row_stride = 1, col_stride = 1;
};

// The largest stride find_direct_columns pairs (the 7x7 stride-2 stem of an image network).
inline constexpr int kDirectMaxStride = 4;

// The other direct form: a convolution's weight gradient (sum over n, oh, ow of dy times x at
// oh + kh, ow + kw, one [oc x ic] product per kh, kw): B reads outer loops (the taps kh, kw)
// only together with reduction loops (oh, ow). One table of B over the reduction with those
// loops widened by the taps' extents - 1, [column panel][step][panel's columns] like a packed
// panel, then serves every outer iteration: step k of iteration (kh, kw) is the table's row
// offset(k) + shift(kh, kw). B is packed once for all nine taps instead of once per tap and
// row block.
struct TapPair {
  int outer_var = -1, step_var = -1;
  bool flipped = false;  // B reads step - outer rather than step + outer
};
struct DirectSteps {
  std::vector<TapPair> pairs;  // every outer loop B reads, with its reduction loop
};

// The pairing for contraction `c` without merged columns whose output loops outside the blocks
// are `outer`: each one B reads is paired with a reduction loop (distinct ones) as in
// shift_invariant; at least one; nullopt otherwise.
std::optional<DirectSteps> find_direct_steps(const KernelIR& ir, const Contraction& c,
                                             const std::vector<int>& outer);

// The pairing for contraction `c` whose columns merge the output loops `merged` (exactly one),
// or nullopt: B has no prologue (Contraction::b_outer) and every index expression of its
// statements (loads, iotas, guards, nested bodies included) reads the row loop only with its
// tap, as R + kh or R - kh up to a common factor, and the column loop likewise with another.
std::optional<DirectColumns> find_direct_columns(const KernelIR& ir, const Contraction& c,
                                                 const std::vector<int>& merged);

// Whether `e` depends on loop variables `u` and `t` only through stride * u + sigma * t (sigma
// = 1 or -1): each subexpression reading either is a function of subexpressions that do, down
// to affine ones whose coefficient of u is stride * sigma times that of t.
bool shift_invariant(const IndexExpr& e, int u, int t, int sigma, int stride = 1);

}  // namespace metajit
