// The collectives on Vars (include/metajit/distributed.h): lazy graph nodes
// (meta_ops/collective_nodes.h) that the executor runs between kernels through the runner
// installed here (runtime/collective_runner.h), on the buffer collectives of
// distributed/buffer_collectives.h.
#include <metajit/distributed.h>
#include <metajit/error.h>

#include <cstring>

#include "distributed/buffer_collectives.h"
#include "meta_ops/collective_nodes.h"
#include "runtime/collective_runner.h"

namespace metajit::dist {
namespace {

void run_collective(const CollectiveCall& call, const void* in, void* out) {
  const size_t bytes = size_t(call.count) * dtype_size(call.dtype);
  switch (call.kind) {
    case CollectiveKind::AllReduce:
      return all_reduce_buffer(in, out, call.count, call.dtype, call.op, call.what);
    case CollectiveKind::Broadcast:
      if (in != out && bytes > 0) std::memcpy(out, in, bytes);
      return broadcast_buffer(out, call.count, call.dtype, call.root, call.what);
    case CollectiveKind::AllGather:
      return all_gather_buffer(in, out, call.count, call.dtype, call.what);
    case CollectiveKind::Barrier:
      break;
  }
  throw InternalError("dist: a collective node of an unknown kind");
}

std::string shape_text(const Var& x) {
  return std::string(dtype_name(x.dtype())) + shape_str(x.shape());
}

void check_defined(const Var& x, const char* op) {
  if (!x.node())
    throw Error(std::string("dist::") + op + ": the Var is empty (default-constructed)");
}

}  // namespace

// Called by init(): collectives in plans run through the buffer collectives.
void install_collective_runner() {
  set_collective_runner(&run_collective);
}

Var all_reduce(const Var& x, ReduceOp op) {
  check_defined(x, "all_reduce");
  if (op == ReduceOp::Mul)
    throw Error("dist::all_reduce of " + shape_text(x) + ": op mul is not a collective here; " +
                "valid ops are Add, Mean, Max and Min");
  if (x.dtype() == DType::Bool && op == ReduceOp::Mean)
    throw DTypeError("dist::all_reduce of " + shape_text(x) +
                     ": Mean of a bool value is not defined; valid ops for bool are Add and "
                     "Max (or), Min (and)");
  if (op == ReduceOp::Mean) return mean_over_ranks(x, rank(), world_size());
  return collective_node(CollectiveKind::AllReduce, x, op, 0, rank(), world_size());
}

Var broadcast(const Var& x, int root) {
  check_defined(x, "broadcast");
  if (root < 0 || root >= world_size())
    throw Error("dist::broadcast of " + shape_text(x) + ": root " + std::to_string(root) +
                " is not a rank; valid roots are 0 to " + std::to_string(world_size() - 1) +
                " (world_size " + std::to_string(world_size()) + ")");
  return collective_node(CollectiveKind::Broadcast, x, ReduceOp::Add, root, rank(), world_size());
}

Var all_gather(const Var& x) {
  check_defined(x, "all_gather");
  if (x.shape().empty())
    throw ShapeError("dist::all_gather of " + shape_text(x) +
                     ": a 0-d value has no axis 0 to concatenate on; gather reshape(x, {1})");
  return collective_node(CollectiveKind::AllGather, x, ReduceOp::Add, 0, rank(), world_size());
}

}  // namespace metajit::dist
