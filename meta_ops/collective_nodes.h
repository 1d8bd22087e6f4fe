// Collective nodes (OpKind::Collective): what dist::all_reduce, broadcast and all_gather build
// (distributed/graph_collectives.cc) and what their gradients are made of
// (autograd/backward_rules.cc). Checked by their callers: this builds the node.
#pragma once
#include <metajit/ops.h>
#include <metajit/var.h>

#include "meta_ops/node.h"

namespace metajit {

// `kind` of `x` issued by `rank`; all_gather's result has world_size times x's rows; `op` is
// all_reduce's, `root` broadcast's.
Var collective_node(CollectiveKind kind, const Var& x, ReduceOp op, int32_t root, int32_t rank,
                    int32_t world_size);

// all_reduce by Mean of `x` issued by `rank`: for a float type the all_reduce by Add divided by
// world_size in the graph, so that the division fuses into the kernel that reads the result (as
// the runner's own pass over the buffer it cost a 64 MB float32 average a tenth of its time,
// bench/dist_bench.cc); other types keep the node's division, which truncates like `/`.
Var mean_over_ranks(const Var& x, int32_t rank, int32_t world_size);

// all_reduce by `op` (Add, Mean) of the values `xs`, all of one dtype, flattened and laid end to
// end: one collective for a bucket of gradients (train/data_parallel.cc). With several values
// it is one node with every value as an input; the executor copies them into the result's buffer
// and reduces that in place (runtime/executor.cc run_host_step), as DDP copies gradients into
// its buckets. A concat of the values was one kernel that read every part for every element:
// 37 ms a step for the GPT's 53 gradients (6 MB) on one thread, twice the step without it
// (samples/train_gpt.cc --distributed). A float Mean divides in the graph, as mean_over_ranks.
// No gradient (an Error): the optimizer builds it after the backward.
Var all_reduce_flat(const std::vector<Var>& xs, ReduceOp op, int32_t rank, int32_t world_size);

// The gradient of collective node `y` from the gradient `g` of its result (Error for an
// all_reduce by Max or Min, which has none here): all_reduce's is the same all_reduce of g,
// broadcast's the sum of g over the ranks kept on the root, all_gather's this rank's rows of
// that sum.
Var collective_backward(const NodePtr& y, const Var& g);

}  // namespace metajit
