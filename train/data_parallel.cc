// Data-parallel training (Optimizer::set_data_parallel, include/metajit/train.h): gradients
// averaged over the ranks in buckets, as PyTorch's DDP does, with collectives that are graph
// nodes (meta_ops/collective_nodes.h), so that a step stays one evaluation and a jit step
// replays them. The ranks come from the distributed layer (runtime/collective_runner.h
// CollectiveWorld), which this layer does not link.
#include <metajit/composite.h>
#include <metajit/error.h>
#include <metajit/eval.h>

#include <algorithm>

#include "meta_ops/collective_nodes.h"
#include "runtime/collective_runner.h"
#include "train/optimizer_core.h"

namespace metajit::detail {
namespace {

CollectiveWorld joined_world(const std::string& kind) {
  const CollectiveWorld w = collective_world();
  if (!w.joined)
    throw Error(kind +
                ".set_data_parallel: no distributed world: link metajit::distributed and "
                "call dist::init() first (a plain start is a world of one)");
  return w;
}

// One bucket's gradients averaged as one buffer (laid end to end), and cut back into their
// shapes: slices of that buffer, which the update's kernels read.
void average_bucket(const std::vector<Var>& grads, const std::vector<size_t>& bucket,
                    const CollectiveWorld& w, std::vector<Var>& out) {
  std::vector<Var> values;
  std::vector<int64_t> sizes;
  for (size_t i : bucket) {
    values.push_back(grads[i]);
    sizes.push_back(grads[i].numel());
  }
  const Var mean = all_reduce_flat(values, ReduceOp::Mean, w.rank, w.size);
  const std::vector<Var> parts =
      bucket.size() == 1 ? std::vector<Var>{mean} : split(mean, sizes, 0);
  for (size_t k = 0; k < bucket.size(); ++k)
    out[bucket[k]] = reshape(parts[k], grads[bucket[k]].shape());
}

}  // namespace

std::vector<Var> average_over_ranks(const std::vector<Var>& grads, int64_t bucket_bytes) {
  const CollectiveWorld w = joined_world("Optimizer");
  std::vector<Var> out = grads;
  std::vector<size_t> bucket;
  int64_t bytes = 0, limit = std::min(bucket_bytes, kFirstBucketBytes);
  auto flush = [&] {
    if (!bucket.empty()) average_bucket(grads, bucket, w, out);
    bucket.clear();
    bytes = 0;
    limit = bucket_bytes;
  };
  // Last parameters first: the backward computes their gradients first, so their bucket can
  // start while the rest of it runs (codegen/collective_order.h).
  for (size_t i = grads.size(); i-- > 0;) {
    if (grads[i].numel() == 0) continue;  // nothing to average
    if (!bucket.empty() && grads[bucket[0]].dtype() != grads[i].dtype()) flush();
    bucket.push_back(i);
    bytes += grads[i].numel() * int64_t(dtype_size(grads[i].dtype()));
    if (bytes >= limit) flush();
  }
  flush();
  return out;
}

Var any_rank(const Var& flag) {
  const CollectiveWorld w = joined_world("Optimizer");
  return collective_node(CollectiveKind::AllReduce, flag, ReduceOp::Max, 0, w.rank, w.size);
}

void average_gradients(const OptimizerCore& core, ScaledGrads& g) {
  g.grads = average_over_ranks(g.grads, core.bucket_bytes);
  if (g.found_nonfinite.defined()) g.found_nonfinite = any_rank(g.found_nonfinite);
}

Var data_parallel_arg(const OptimizerCore& core) {
  // A leaf, not zeros(): a lazy argument would be evaluated (a kernel looked up) every call.
  return core.data_parallel ? scalar_arg(1) : array(std::vector<double>{}, {0});
}

void set_data_parallel(OptimizerCore& core, bool on, int64_t bucket_bytes) {
  if (bucket_bytes < 1)
    throw Error(core.kind + ".set_data_parallel: bucket_bytes " + std::to_string(bucket_bytes) +
                "; expected at least 1 (25 MiB by default)");
  if (on) {
    const CollectiveWorld w = joined_world(core.kind);
    std::vector<Var> params;
    for (const Var& p : core.params)
      params.push_back(
          collective_node(CollectiveKind::Broadcast, p, ReduceOp::Add, 0, w.rank, w.size));
    for (size_t i = 0; i < params.size(); ++i) core.params[i].assign(params[i]);
    eval(core.params);
  }
  core.data_parallel = on;
  core.bucket_bytes = bucket_bytes;
}

}  // namespace metajit::detail
