// The work and memory traffic of a fusion plan, computed from the plan (nothing is run): what
// the property "fusion never does more work or moves more bytes than the unfused plan by more
// than a stated factor" is checked with (tests/test_fusion_cost.cc), and what explain() could
// rank plans by. A model, not a measurement: see plan_cost().
#pragma once
#include "codegen/fusion_planner.h"

namespace metajit {

struct PlanCost {
  double flops = 0;  // op_cost units (codegen/fusion_cost.h), every recomputation counted,
                     // and one per element a kernel stores (a materialised broadcast is a copy)
  double bytes = 0;  // each kernel reads each element of a stored input it touches once, and
                     // writes its output once
};

// How often each fused node is computed: its kernel's root once per element; an input of a
// reduction once per element it reduces; an input of a row broadcast once per row (the emitter
// hoists it); a contraction operand's producer once per packed element (packing_factor); any
// other input once per element of its reader, so a value fused behind a broadcast counts once
// per element of the broadcast.
PlanCost plan_cost(const Graph& g, const FusionPlan& plan);

}  // namespace metajit
