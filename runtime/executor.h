// The executor: runs the kernels of one plan in dependency order, allocating each stored
// value from the caching allocator and freeing intermediates as soon as their last reader
// has run (design.md §8).
#pragma once
#include <vector>

#include "codegen/fusion_planner.h"
#include "codegen/graph.h"
#include "codegen/lowering.h"
#include "runtime/kernel_library.h"

namespace metajit {

// Runs `kernels[k]` (lowered from plan.groups[k]) with `handles[k]`. Returns one buffer per
// entry of g.outputs.
std::vector<BufferPtr> execute_plan(const Graph& g, const FusionPlan& plan,
                                    const std::vector<LoweredKernel>& kernels,
                                    const std::vector<KernelHandle>& handles);

}  // namespace metajit
