// A reduction whose input holds no elements gives the reduction's identity everywhere, but its
// loop nest would still run: the loops over the extents beside the empty one, with nothing in
// the innermost (sum(zeros({2^40, 2^22, 0})) ran 2^62 empty iterations, found by
// tests/fuzz/fuzz_api_sequence.cc). The node becomes a reindex of that empty input whose reads
// are all out of range, so every output element is the overflow value, the identity, and the
// kernel loops over the output only. The structure changes only for an empty input, never with
// a value.
#include <cmath>
#include <limits>
#include <optional>

#include "codegen/graph_passes.h"

namespace metajit {
namespace {

// The identity of `op` on `t` as the double a scalar kernel argument carries; none for int64
// min, whose identity (2^63 - 1) a double cannot hold.
std::optional<double> identity_value(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::Add:
    case ReduceOp::Mean:
      return 0.0;
    case ReduceOp::Mul:
      return 1.0;
    case ReduceOp::Max:
      if (t == DType::Bool) return 0.0;
      if (t == DType::Int8) return double(std::numeric_limits<int8_t>::min());
      if (t == DType::UInt8) return 0.0;
      if (t == DType::Int16) return double(std::numeric_limits<int16_t>::min());
      if (t == DType::Int32) return double(std::numeric_limits<int32_t>::min());
      if (t == DType::Int64) return double(std::numeric_limits<int64_t>::min());  // -2^63 exact
      return -std::numeric_limits<double>::infinity();
    case ReduceOp::Min:
      if (t == DType::Bool) return 1.0;
      if (t == DType::Int8) return double(std::numeric_limits<int8_t>::max());
      if (t == DType::UInt8) return double(std::numeric_limits<uint8_t>::max());
      if (t == DType::Int16) return double(std::numeric_limits<int16_t>::max());
      if (t == DType::Int32) return double(std::numeric_limits<int32_t>::max());
      if (t == DType::Int64) return std::nullopt;
      return std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

}  // namespace

void fill_empty_reductions(Graph& g) {
  for (GNode& n : g.nodes) {
    if (n.kind != OpKind::Reduce) continue;
    const Shape in_shape = g.nodes[size_t(n.inputs[0])].shape;
    if (numel_of(in_shape) != 0) continue;
    const std::optional<double> identity = identity_value(ReduceOp(n.op), n.dtype);
    if (!identity) continue;
    n.kind = OpKind::Reindex;
    n.indexes.assign(in_shape.size(), ix_const(0));  // outside the empty axis
    n.conditions.clear();
    n.scalar = *identity;
    n.axes.clear();
    n.keepdims = false;
    n.op = 0;
  }
}

}  // namespace metajit
