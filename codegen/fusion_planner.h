// The fusion planner (docs/design.md §4): decides which values are stored in memory and groups
// everything else into the loop nest of the kernel that needs it.
//
// O1 rules: element-wise ops, broadcast_to and reindex are inlined into their consumer (index
// arithmetic, never an allocation); a reduce absorbs its whole input tree and can itself be
// inlined into element-wise work on its result. A value is stored when it is requested, is a
// reindex_reduce (a scatter), is behind a fusion_barrier(), or when fusing it would cost more
// than storing it (the cost model, codegen/fusion_cost.h): it would be recomputed (several
// consumers, or a broadcast/reindex consumer) while being expensive (contains a reduce or more
// than kRecomputeCostLimit operations), or it is a contraction operand whose producer would
// cost more than kPrologueCostLimit per element while packed. A cheap element-wise producer of
// a contraction operand stays fused: the emitter computes it while packing the operand (a
// prologue), so the product keeps its blocked schedule. A value read through a row broadcast
// ([R,1] -> [R,C]) is not recomputed per element: the emitter hoists it out of the inner
// loops, so a softmax or a layer norm is one kernel that reads each row from memory once.
// Every decision that is not automatic is recorded with its reason (FusionDecision), and
// explain() prints them. O0: every meta-op is stored, one kernel each.
#pragma once
#include <string>
#include <vector>

#include "codegen/fusion_cost.h"
#include "codegen/graph.h"

namespace metajit {

struct FusedGroup {
  int root = -1;           // the node whose value the kernel writes
  std::vector<int> nodes;  // nodes computed inside the kernel, topological, root last
  std::vector<int> reads;  // stored nodes (leaves or other groups' roots) the kernel reads
  // Further stored nodes of root's shape the kernel also writes, computed in its loop nest
  // (merge_kernel_outputs, codegen/output_merging.h), in node order.
  std::vector<int> extra_roots;
};

// Why the planner stored a value or fused it where fusing is not free.
enum class FusionReason : uint8_t {
  Barrier,                     // stored: fusion_barrier()
  Recomputed,                  // stored: fusing would recompute an expensive value
  ExpensivePrologue,           // stored: too costly to recompute while packing a contraction
  ContractionBesideReduction,  // stored: a product sum beside another reduction
  SharedReduction,             // stored: a reduction several kernels would compute
  SharedValue,                 // stored: a costly value several kernels would compute
  Prologue,                    // fused: computed while packing a contraction operand
  ReadersMerged,               // fused: every reader ended up in one multi-output kernel
};

struct FusionDecision {
  int node = -1;      // the value decided on
  int consumer = -1;  // the node that reads it where the decision was made
  bool stored = false;
  FusionReason reason = FusionReason::Recomputed;
  int cost = 0;             // work per element of the value (op_cost units), fused inputs included
  int64_t recompute = 0;    // times each element would be computed in the consumer's kernel
  bool has_reduce = false;  // the value contains a reduction
};

struct FusionPlan {
  std::vector<FusedGroup> groups;         // in an order that respects dependencies
  std::vector<bool> stored;               // per graph node: lives in a buffer (leaf or group root)
  std::vector<FusionDecision> decisions;  // in node order
};

FusionPlan plan_fusion(const Graph& g, int opt_level);

// Every value the kernel of `group` writes: its extra roots, then its root.
std::vector<int> group_outputs(const FusedGroup& group);

// The kernel (index into plan.groups) that computes node `id`, or -1 (a leaf).
int group_of(const FusionPlan& plan, int id);

// One line saying what a decision was and why, e.g. "%12 stored: read through a broadcast by
// kernel 2, fusing would compute each element 512 times (cost 5 per element)".
std::string describe_decision(const Graph& g, const FusionPlan& plan, const FusionDecision& d);

// Text listing of the groups and the decisions, for explain() and METAJIT_LOG=debug.
std::string dump_plan(const Graph& g, const FusionPlan& plan);

}  // namespace metajit
