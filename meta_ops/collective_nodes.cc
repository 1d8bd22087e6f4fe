#include "meta_ops/collective_nodes.h"

#include <metajit/composite.h>
#include <metajit/error.h>

namespace metajit {

Var collective_node(CollectiveKind kind, const Var& x, ReduceOp op, int32_t root, int32_t rank,
                    int32_t world_size) {
  Shape shape = x.shape();
  if (kind == CollectiveKind::AllGather) shape[0] *= world_size;
  NodePtr n = new_node(OpKind::Collective, x.dtype(), shape, {x.node()});
  n->collective = kind;
  n->op = int(op);
  n->root = root;
  n->rank = rank;
  return Var(n);
}

Var mean_over_ranks(const Var& x, int32_t rank, int32_t world_size) {
  if (!is_float(x.dtype()))
    return collective_node(CollectiveKind::AllReduce, x, ReduceOp::Mean, 0, rank, world_size);
  const Var sum = collective_node(CollectiveKind::AllReduce, x, ReduceOp::Add, 0, rank, world_size);
  return sum / scalar(double(world_size), x.dtype());  // an argument: world_size is in no key
}

Var all_reduce_flat(const std::vector<Var>& xs, ReduceOp op, int32_t rank, int32_t world_size) {
  if (xs.empty()) throw InternalError("all_reduce_flat: no values");
  const DType dtype = xs[0].dtype();
  if (xs.size() == 1) {  // one value: the plain node, reduced in place where it can be
    const Var flat = reshape(xs[0], {xs[0].numel()});
    if (op == ReduceOp::Mean) return mean_over_ranks(flat, rank, world_size);
    return collective_node(CollectiveKind::AllReduce, flat, op, 0, rank, world_size);
  }
  int64_t total = 0;
  std::vector<NodePtr> inputs;
  for (const Var& x : xs) {
    if (x.dtype() != dtype) throw InternalError("all_reduce_flat: values of different dtypes");
    total += x.numel();
    inputs.push_back(x.node());
  }
  const bool divide = op == ReduceOp::Mean && is_float(dtype);
  NodePtr n = new_node(OpKind::Collective, dtype, {total}, std::move(inputs));
  n->collective = CollectiveKind::AllReduce;
  n->op = int(divide ? ReduceOp::Add : op);
  n->rank = rank;
  const Var sum(n);
  return divide ? sum / scalar(double(world_size), dtype) : sum;
}

Var collective_backward(const NodePtr& y, const Var& g) {
  const Node& n = *y;
  if (n.inputs.size() != 1)
    throw Error("grad: an all_reduce of several values laid end to end (a data-parallel "
                "gradient bucket) has no gradient here; dist::all_reduce of each value has");
  const Var x(n.inputs[0]);
  switch (n.collective) {
    case CollectiveKind::AllReduce:
      if (ReduceOp(n.op) != ReduceOp::Add && ReduceOp(n.op) != ReduceOp::Mean)
        throw Error(std::string("grad: dist::all_reduce by ") + reduce_op_name(ReduceOp(n.op)) +
                    " has no gradient here; Add and Mean do");
      return collective_node(CollectiveKind::AllReduce, g, ReduceOp(n.op), 0, n.rank, 1);
    case CollectiveKind::Broadcast: {
      const Var sum = collective_node(CollectiveKind::AllReduce, g, ReduceOp::Add, 0, n.rank, 1);
      // Kept on the root, zero elsewhere: the rank is a kernel argument, never in a key.
      return sum * scalar(n.rank == n.root ? 1.0 : 0.0, g.dtype());
    }
    case CollectiveKind::AllGather: {
      const Var sum = collective_node(CollectiveKind::AllReduce, g, ReduceOp::Add, 0, n.rank, 1);
      const int64_t rows = x.shape()[0];
      const Var mine = arange(rows, DType::Int64) + scalar(double(n.rank * rows), DType::Int64);
      return index_select(sum, 0, mine);
    }
    case CollectiveKind::Barrier:
      break;
  }
  throw InternalError("collective_backward: not a collective with a gradient");
}

}  // namespace metajit
