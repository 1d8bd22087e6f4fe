// The fusion planner's cost model (docs/design.md §4): what a node costs per element, how many
// times fusing it into a consumer would compute each of its elements, which values a
// contraction (matmul, conv2d and their gradients) reads as operands, and which values every
// kernel computes once per row. Analyses of the captured graph only; the planner
// (codegen/fusion_planner.cc) decides with them, plan_cost (codegen/plan_cost.h) totals a plan.
#pragma once
#include <cstdint>
#include <vector>

#include "codegen/graph.h"

namespace metajit {

// Fusing a value into a consumer that reads each of its elements several times (a broadcast,
// a reindex, several uses) recomputes it there; that is cheaper than a store and a load only
// while it costs at most this much per element. A value several kernels would each compute
// is stored once when its cost times the kernels beyond the first exceeds it (softmax's
// exp(s - lse), 5 ops in 3 kernels of its backward: fused, the backward ran 1.5x slower than
// with the probabilities stored).
inline constexpr int kRecomputeCostLimit = 8;
// A contraction operand's element-wise producer is computed while its panels are packed, once
// per packed element (codegen/cpp_packing.cc pack_operand): a reindexed operand (conv2d's
// windows) packs each element of the producer several times. Above this much work per element
// of the producer, storing it is cheaper (a producer of one simple op per element is always
// fused: it rides on the packing's own load).
inline constexpr int kPrologueCostLimit = 16;

// Work per element of the node itself, in units of a simple arithmetic op (a transcendental
// function counts 4, a gather's indexed read 2 more per index array).
int op_cost(const Graph& g, const GNode& n);

// consumers[i]: the nodes reading node i (once per input slot).
std::vector<std::vector<int>> consumers_of(const Graph& g);

// A consumer that reads each element of its input more than once per kernel run.
bool is_expanding(const GNode& consumer);

// Elements `consumer` (a broadcast_to or reindex) produces per element of its input: how many
// times a fused input is computed for each of its elements (at least 1).
int64_t expansion_factor(const Graph& g, const GNode& consumer);

// Per node: a row broadcast, a suffix broadcast ([R,1] -> [R,C]) whose value flows, through
// element-wise ops of its own shape, only into outputs or into reductions over expanded axes.
// Whatever it broadcasts is then invariant in the inner loops of every kernel that reads it,
// so the emitter computes it once per row (softmax's max and sum, layer-norm's mean and
// variance) instead of storing it: fusing it costs no recomputation.
std::vector<bool> row_broadcasts(const Graph& g, const std::vector<std::vector<int>>& consumers);

// A sum of products of broadcast or reindexed operands (matmul, conv2d and their gradients),
// judged by structure alone: the emitters give it the blocked contraction schedule when it is
// the one reduction of its kernel (codegen/kernel_patterns.h).
bool is_product_sum_node(const Graph& g, int reduce);

// The operands (broadcast_to / reindex nodes) of product sum `reduce`.
std::vector<int> product_sum_operands(const Graph& g, int reduce);

// Elements a contraction packs per element of its operand's input: the operand's elements
// along the axes its indexes read (an axis it broadcasts along is the other side's and is not
// packed per element), divided by the input's elements. 1 for matmul's broadcasts; about
// kh*kw for conv2d's reindexed input.
int64_t packing_factor(const Graph& g, int operand);

}  // namespace metajit
