// The driver: the whole path from lazy nodes to lowered kernels, one stage after another:
//   capture -> fold_constants -> eliminate_common_subexpressions -> eliminate_dead_code
//           -> softmax_statistic_for_contractions (O1) -> plan_fusion
//           -> merge_kernel_outputs (O1) -> order_kernels_for_collectives
//           -> lower_group (per group)
// With METAJIT_LOG=debug it prints the graph after every pass, the fusion plan and each
// kernel's IR.
#pragma once
#include <vector>

#include "codegen/fusion_planner.h"
#include "codegen/graph.h"
#include "codegen/lowering.h"

namespace metajit {

struct PipelinePlan {
  Graph graph;
  FusionPlan fusion;
  std::vector<LoweredKernel> kernels;  // one per fusion.groups entry
};

// Plans the evaluation of `outputs` (realized ones simply become leaves). Runs nothing.
PipelinePlan build_pipeline(const std::vector<NodePtr>& outputs);
// The same from an already captured graph (capture_graph(outputs)).
PipelinePlan build_pipeline(Graph captured);

}  // namespace metajit
