// The fusion planner (docs/design.md §4): decides which values are stored in memory and groups
// everything else into the loop nest of the kernel that needs it.
//
// O1 rules: element-wise ops, broadcast_to and reindex are inlined into their consumer (index
// arithmetic, never an allocation); a reduce absorbs its whole input tree and can itself be
// inlined into element-wise work on its result. A value is stored only when it is requested,
// is a reindex_reduce (a scatter), or would otherwise be recomputed (several consumers, or a
// broadcast/reindex consumer) while being expensive (contains a reduce or more than
// kRecomputeCostLimit operations). A value read through a row broadcast ([R,1] -> [R,C]) is
// not recomputed per element: the emitter hoists it out of the inner loops, so a softmax or a
// layer norm is one kernel that reads each row from memory once. O0: every meta-op is stored,
// one kernel each.
#pragma once
#include <string>
#include <vector>

#include "codegen/graph.h"

namespace metajit {

struct FusedGroup {
  int root = -1;           // the node whose value the kernel writes
  std::vector<int> nodes;  // nodes computed inside the kernel, topological, root last
  std::vector<int> reads;  // stored nodes (leaves or other groups' roots) the kernel reads
};

struct FusionPlan {
  std::vector<FusedGroup> groups;  // in an order that respects dependencies
  std::vector<bool> stored;        // per graph node: lives in a buffer (leaf or group root)
};

inline constexpr int kRecomputeCostLimit = 8;

FusionPlan plan_fusion(const Graph& g, int opt_level);

// Text listing of the groups, for explain() and METAJIT_LOG=debug.
std::string dump_plan(const Graph& g, const FusionPlan& plan);

}  // namespace metajit
