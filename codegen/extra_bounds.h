// Extra reads that need no bounds test (issue 28: "gather without per-element re-checks where
// the bound is provable"). An extra read whose arguments are the kernel's loop variables
// themselves (a gather's index array read at the output's own index, @e0(i0, i1)) is in bounds
// for every element exactly when each of those loops' extents is at most the dim it indexes.
// Shapes are launch parameters (docs/design.md §5: keys never depend on them), so that is not
// known when the kernel is compiled; it is one comparison per loop when it runs. The C++ map
// kernel then has two versions of its loop nest: one where those reads load directly and the
// tests `i >= 0` and `i < X` they imply are true (X a dim the loop's extent is checked against),
// and the general one, run when a condition fails.
#pragma once
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.h"

namespace metajit {

//
// The same holds for a reindex's bounds tests of compound indexes: a window's i*2+k is below X
// for every element when (extent_i - 1)*2 + (extent_k - 1) < X, a pooling gradient's i/2 when
// (extent_i - 1)/2 < X (intervals over the loops' box, computed when the kernel runs). Where
// every test of a guard holds, the guarded read loads unconditionally: a pooling's or an
// unpadded window's loop nest without branches.
struct InBoundsVersion {
  // (a, b): the fast version runs when every a <= b (a loop's extent and the dim it indexes, an
  // index's upper end and its bound minus one, ...).
  std::vector<std::pair<IndexExprPtr, IndexExprPtr>> conditions;
  std::set<std::string> unchecked_reads;  // ix_to_string of the extra reads loaded directly
  std::set<std::string> true_tests;       // ix_to_string of the comparisons that then hold
  int true_guards = 0;                    // guards all of whose tests then hold
  // ix_to_string of loads' last indexes computed in int (32-bit) in the fast version: those that
  // divide (a gather), all of whose values then fit.
  std::set<std::string> narrow_indexes;
  bool empty() const { return unchecked_reads.empty() && true_guards == 0; }
};

// The version for a Map kernel's body (its loops and its reductions' loops); empty when no
// extra read is indexed by loop variables alone and no guard is wholly true.
InBoundsVersion extra_reads_in_bounds(const KernelIR& ir);

}  // namespace metajit
