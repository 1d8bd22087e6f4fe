// Lowering: one fused group of the fusion plan -> KernelIR plus the argument values it is
// launched with. Shapes become Param slots (or constants with METAJIT_SPECIALIZE_SHAPES=1);
// broadcast_to and reindex become index expressions; reduces become loops.
#pragma once
#include <vector>

#include "codegen/fusion_planner.h"
#include "codegen/graph.h"
#include "codegen/kernel_ir.h"

namespace metajit {

struct LoweredKernel {
  KernelIR ir;
  KernelArgs args;
  std::vector<int> input_nodes;  // graph node read by each input buffer slot
  int output_node = -1;
  std::vector<int> extra_output_nodes;  // graph node of each ir.extra_outputs entry
};

LoweredKernel lower_group(const Graph& g, const FusionPlan& plan, const FusedGroup& group,
                          bool specialize_shapes);

}  // namespace metajit
