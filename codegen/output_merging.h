// Multi-output kernels: a pass over the fusion plan (after plan_fusion, O1 and up) that moves a
// stored element-wise value into the kernel of its element-wise reader when both loop over the
// same shape. The merged kernel computes the value once, writes it, and uses it in registers:
// Adam's m and v were three kernels per parameter, each reading the gradient (the p update
// read m and v back from memory); now one loop nest reads the gradient, m, v and p once and
// writes m, v and p (issue 28, "multi-output fused kernels").
//
// A group P is merged into a later group C when
//   - both compute only element-wise work (unary, binary, where, cast, broadcast_to, iota,
//     scalars): their loop nests are plain maps, with no reduction or gather whose schedule
//     the merge could change;
//   - P's value has exactly C's shape and C reads it only through element-wise ops (the same
//     element of the same loop iteration, never through a broadcast or a reindex);
//   - no kernel between them reads P's value (it does not exist before C runs);
//   - P's value is not behind a fusion_barrier() (its readers read it from memory).
// Merging repeats until nothing qualifies, so a chain or several siblings end in one kernel, up
// to kMaxKernelOutputs values written.
#pragma once
#include "codegen/fusion_planner.h"
#include "codegen/graph.h"

namespace metajit {

// Values one kernel writes at most (its root and extra roots): each is one more stream of
// stores in the innermost loop.
inline constexpr int kMaxKernelOutputs = 4;

void merge_kernel_outputs(const Graph& g, FusionPlan& plan);

}  // namespace metajit
