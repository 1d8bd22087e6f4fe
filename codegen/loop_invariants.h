// Loop-invariant code motion on kernel IR, and the loop level of each statement: the analyses
// the emitters schedule loops with. A reduction fused into an element-wise consumer (the row
// max and row sum inside softmax's output kernel) is computed once per row, not once per
// element, only because these passes move it out of the loops it does not depend on.
#pragma once
#include <set>
#include <vector>

#include "codegen/kernel_ir.h"

namespace metajit {

// Loop variables (i<k>) a statement reads, directly or through the values it uses; for Reduce
// and Guard the variables of their bodies, less the reduction's own loop variables.
// `value_vars` maps a value id to the variables of the statement defining it (filled in as the
// statements are visited in order).
std::set<int> statement_vars(const KStmt& st, const std::vector<std::set<int>>& value_vars);

// Moves every statement of a Reduce body that depends on none of that reduction's loop
// variables in front of the Reduce, recursively (bodies of Guards are left alone: their
// statements may only be valid when the guard holds). Values keep their ids.
void hoist_reduce_invariants(KernelIR& ir);

// For each top-level statement of a Map kernel's body: the position in ir.loops of the
// innermost loop it depends on, or -1 when it depends on none (computed once per launch).
std::vector<int> statement_levels(const KernelIR& ir);

// The variables of each value id of `ir` (index = value id), as statement_vars() gives them.
std::vector<std::set<int>> value_variables(const KernelIR& ir);

}  // namespace metajit
