// Pattern detectors the emitters choose schedules with (analyses only; they print nothing):
// a reduction over outer axes that reads along the innermost output loop (a column sum), and
// a sum of products whose operands each miss one output loop (a matrix product: matmul,
// conv2d). Both the C++ and the CUDA emitter ask the same questions of a kernel's IR.
#pragma once
#include <optional>
#include <set>
#include <vector>

#include "codegen/kernel_ir.h"

namespace metajit {

// Value ids a block uses that it does not define itself (its statements' args and result,
// recursively). `defined` collects the ids it does define.
void outside_uses(const KBlock& b, std::set<int>& defined, std::set<int>& used);

// A reduction over outer axes whose values are contiguous along the innermost output loop
// (loop variable `inner_var`, at `inner_level`): a column sum. Its loads never index the last
// axis with the reduction's own variables, some load does with `inner_var`, and its body reads
// no value computed per output element (`level_of_value[id]` >= inner_level).
bool is_column_reduction(const KStmt& st, const std::vector<int>& level_of_value, int inner_var,
                         int inner_level);

// A reduction over a window of the innermost output loop: some load indexes the last axis with
// both `inner_var` and a reduced variable (max pooling's 2*j + dj, a convolution's j + dj as a
// map kernel), none with reduced variables alone, and its body reads no value computed per
// output element.
bool is_window_reduction(const KStmt& st, const std::vector<int>& level_of_value, int inner_var,
                         int inner_level);

// A sum of products a*b over reduction loops where `a` does not depend on the output loop
// `j_var` and `b` not on `i_var`: a matrix product (matmul: i, j = rows, columns; conv2d:
// i = output channel, j = output column).
struct Contraction {
  size_t reduce_index = 0;      // the Reduce among ir.body.stmts
  int i_var = -1, j_var = -1;   // loop variables of the two blocked output loops
  std::vector<size_t> a_stmts;  // statements of the Reduce body computing `a`, in order
  std::vector<size_t> b_stmts;  // ... and `b`
  // Top-level statements (ir.body.stmts, in order) an operand reads that the loop-invariant
  // pass hoisted out of the reduction (a layer norm's row mean and scale, softmax's row max):
  // the operand's prologue. The emitters compute them with the operand, once per packed or
  // staged element, so an element-wise producer fused into a contraction keeps its schedule.
  std::vector<size_t> a_outer, b_outer;
  int a = -1, b = -1;  // their value ids
  // Int32 sums (find_contraction's `int8_sums`): the 8-bit dtypes (Int8, UInt8) that `a` and
  // `b`, each an Int32 cast, were cast from; Float32 for a float contraction.
  DType a_bytes = DType::Float32, b_bytes = DType::Float32;
};

// The contraction of a float32 Map kernel (one Reduce, an add of a float32 product; values from
// outside its body computed once per launch or element-wise per operand element, no other
// reduction among them), or nullopt. `levels` and `level_of_value` are
// statement_levels(ir) and the same per value id.
// With `int8_sums`, also the Int32 sum of products of two Int32 casts of 8-bit values (matmul
// of Int8 / UInt8 operands: byte quads or int16 pairs, codegen/cpp_step_groups.cc), which the
// vector targets multiply in groups.
std::optional<Contraction> find_contraction(const KernelIR& ir, const std::vector<int>& levels,
                                            const std::vector<int>& level_of_value,
                                            bool int8_sums = false);

// The output loops of a contraction: the two blocked ones and the others (outermost first).
struct ContractionLoops {
  const KLoop* i = nullptr;
  const KLoop* j = nullptr;
  std::vector<const KLoop*> outer;
};
ContractionLoops contraction_loops(const KernelIR& ir, const Contraction& c);

// statement_levels() by value id (-1 for ids that are not top-level statements).
std::vector<int> levels_by_value(const KernelIR& ir, const std::vector<int>& levels);

}  // namespace metajit
