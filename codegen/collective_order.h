// Kernel order for plans with collectives: a pass over the fusion plan (after
// merge_kernel_outputs) that moves the kernels each collective needs ahead of the others, the
// collective that needs the fewest first, so that the runtime can start it while the remaining
// kernels run (runtime/executor.h HostStep::wait_before_step, docs/design.md §11.1).
//
// A data-parallel step (train/data_parallel.cc) reads every gradient bucket's mean in the update;
// the graph's own order (a depth-first walk from the updated parameters) computes a bucket's
// gradients just before the update that reads them, so the first parameter's bucket, which needs
// the whole backward, came first and nothing was left to run beside it. Here the bucket of the
// last layers, whose gradients come first in the backward, is issued as soon as they exist and
// the earlier layers' gradients are computed while it travels, as PyTorch's DDP overlaps its
// buckets with autograd.
//
// Deterministic: every rank plans the same graph to the same order, so the collectives are
// issued in the same order everywhere (their signatures are checked anyway,
// distributed/collective_check.h). A plan without collectives is left as it is.
#pragma once
#include "codegen/fusion_planner.h"
#include "codegen/graph.h"

namespace metajit {

// Reorders plan.groups: repeatedly, the collective with the fewest kernels still to place
// (ties: the lower node id) has those kernels placed, in their current relative order; then
// the kernels no collective needs, in their current order. The result respects dependencies.
void order_kernels_for_collectives(const Graph& g, FusionPlan& plan);

}  // namespace metajit
