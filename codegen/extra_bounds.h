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

struct InBoundsVersion {
  // (a loop's extent, a limit): the fast version runs when every extent <= its limit.
  std::vector<std::pair<IndexExprPtr, IndexExprPtr>> conditions;
  std::set<std::string> unchecked_reads;  // ix_to_string of the extra reads loaded directly
  std::set<std::string> true_tests;       // ix_to_string of the comparisons that then hold
  bool empty() const { return unchecked_reads.empty(); }
};

// The version for a Map kernel's body (its loops and its reductions' loops); empty when no
// extra read is indexed by loop variables alone.
InBoundsVersion extra_reads_in_bounds(const KernelIR& ir);

}  // namespace metajit
