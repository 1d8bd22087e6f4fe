#include "autograd/backward_rules.h"

#include <metajit/composite.h>
#include <metajit/error.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <string>

#include "autograd/contraction_order.h"
#include "autograd/scatter_as_gather.h"
#include "base/check.h"
#include "meta_ops/collective_nodes.h"
#include "meta_ops/ops.h"

namespace metajit {
namespace {

Var input(const NodePtr& y, size_t k) {
  return Var(y->inputs[k]);
}

Var zero(const Var& like) {
  return scalar(0.0, like.dtype());
}

// The elements of x that attain the extremum y (read at each element's own position). x may be
// recomputed in another kernel than the one that computed y (max(exp(x)): exp is fused into
// both), and vectorised and scalar libm calls may differ in the last bits (docs/design.md §6), so
// "attains" means within 16 ulp of |y|: an exact comparison could find no maximum at all.
Var attains(const Var& x, const Var& y, ReduceOp op) {
  const bool f32 = x.dtype() == DType::Float32;
  const double ulp = f32 ? 0x1p-23 : 0x1p-52;
  // Capped at the largest finite value: an infinite extremum keeps a finite slack (inf - slack
  // is inf, while inf - inf would be NaN and nothing would attain it).
  const double largest =
      f32 ? double(std::numeric_limits<float>::max()) : std::numeric_limits<double>::max();
  Var slack = minimum(abs(y) * (16 * ulp), largest);
  return op == ReduceOp::Max ? x >= y - slack : x <= y + slack;
}

// ---------------------------------------------------------------- element-wise

Var unary_backward(UnaryOp op, const Var& x, const Var& y, const Var& g) {
  switch (op) {
    case UnaryOp::Neg:
      return -g;
    case UnaryOp::Abs:  // abs'(0) = 0
      return where(x > 0.0, g, where(x < 0.0, -g, zero(g)));
    case UnaryOp::Exp:
      return g * y;
    case UnaryOp::Log:
      return g / x;
    case UnaryOp::Sqrt:  // g / (2 sqrt(x)): inf at 0, as in PyTorch and JAX
      return g / (y * 2.0);
    case UnaryOp::Sin:
      return g * cos(x);
    case UnaryOp::Cos:
      return -(g * sin(x));
    case UnaryOp::Tanh:
      return g * (1.0 - y * y);
    case UnaryOp::Sigmoid:
      return g * y * (1.0 - y);
    case UnaryOp::Relu:  // relu'(0) = 0
      return where(x > 0.0, g, zero(g));
    case UnaryOp::Erf:  // 2 / sqrt(pi) * exp(-x^2)
      return g * (exp(-(x * x)) * (2.0 / std::sqrt(std::numbers::pi)));
    case UnaryOp::Log1p:
      return g / (x + 1.0);
    case UnaryOp::Expm1:
      return g * (y + 1.0);
    case UnaryOp::Tan:
      return g * (y * y + 1.0);
    case UnaryOp::Atan:
      return g / (x * x + 1.0);
    case UnaryOp::Asin:  // inf at |x| = 1, NaN outside, as in PyTorch
      return g / sqrt(1.0 - x * x);
    case UnaryOp::Acos:
      return -(g / sqrt(1.0 - x * x));
    default:
      METAJIT_UNREACHABLE(std::string("autograd: no gradient for ") + unary_op_name(op));
  }
}

// g where `pick`, half of g where `tie` (maximum/minimum share a tie evenly), else 0.
Var share(const Var& pick, const Var& tie, const Var& g) {
  return where(pick, g, where(tie, g * 0.5, zero(g)));
}

void binary_backward(BinaryOp op, const Var& a, const Var& b, const Var& y, const Var& g, Var& da,
                     Var& db) {
  switch (op) {
    case BinaryOp::Add:
      da = g, db = g;
      return;
    case BinaryOp::Sub:
      da = g, db = -g;
      return;
    case BinaryOp::Mul:
      da = g * b, db = g * a;
      return;
    case BinaryOp::Div:
      da = g / b, db = -(g * a) / (b * b);
      return;
    case BinaryOp::Pow:
      // No NaN at a = 0: b == 0 gives da = 0; a == 0 with b >= 0 gives db = 0.
      da = where(b == 0.0, zero(g), g * b * pow(a, b - 1.0));
      db = g * where(logical_and(a == 0.0, b >= 0.0), zero(g), y * log(a));
      return;
    case BinaryOp::Maximum:
      da = share(a > b, a == b, g), db = share(b > a, a == b, g);
      return;
    case BinaryOp::Minimum:
      da = share(a < b, a == b, g), db = share(b < a, a == b, g);
      return;
    default:
      METAJIT_UNREACHABLE(std::string("autograd: no gradient for ") + binary_op_name(op));
  }
}

// ---------------------------------------------------------------- broadcast_to and reduce

// The gradient of broadcast_to: g summed over the new and the expanded axes.
Var unbroadcast(const Node& b, const Var& g, const Shape& in_shape) {
  std::vector<int64_t> summed;
  for (size_t k = 0; k < b.bcast.size(); ++k) {
    if (b.bcast[k] == BroadcastAxis::Keep) continue;
    summed.push_back(int64_t(k));
  }
  std::optional<Var> reordered = sum_product_in_contraction_order(g, summed);
  Var s = reordered ? *reordered : sum(g, summed);
  if (s.shape() == in_shape) return s;
  // Put the expanded axes back as size 1: s has the input's kept axes, in order.
  std::vector<IndexExprPtr> idx;
  for (size_t k = 0, j = 0; k < b.bcast.size(); ++k) {
    if (b.bcast[k] == BroadcastAxis::New) continue;
    if (b.bcast[k] == BroadcastAxis::Keep) idx.push_back(ix_var(int(j)));
    ++j;
  }
  return reindex_tree(s, in_shape, std::move(idx), 0, {});
}

// v (shaped like the reduce's result) broadcast back over the reduce's input shape.
Var spread(const Node& r, const Var& v, const Shape& in_shape) {
  return r.keepdims ? broadcast_to(v, in_shape) : broadcast_to(v, in_shape, r.axes);
}

Var reduce_backward(const NodePtr& y, const Var& g) {
  const Node& r = *y;
  const Var x = input(y, 0);
  const Shape& in = x.shape();
  const DType dt = g.dtype();
  switch (ReduceOp(r.op)) {
    case ReduceOp::Add:
      return spread(r, g, in);
    case ReduceOp::Max:
    case ReduceOp::Min: {
      // Shared evenly among the tied extrema.
      Var hit = attains(x, spread(r, Var(y), in), ReduceOp(r.op));
      Var count = maximum(reduce(cast(hit, dt), ReduceOp::Add, r.axes, r.keepdims), 1.0);
      return where(hit, spread(r, g / count, in), zero(g));
    }
    case ReduceOp::Mul: {
      // Zero-safe: with no zero, g*y/x; with one zero, that element gets g * the product of
      // the others; with more, nothing does. prod([2,0,3]) gives [0, 6, 0].
      Var is_zero = x == 0.0;
      Var zero_count = spread(r, reduce(cast(is_zero, dt), ReduceOp::Add, r.axes, r.keepdims), in);
      Var others = spread(
          r, reduce(where(is_zero, scalar(1.0, dt), x), ReduceOp::Mul, r.axes, r.keepdims), in);
      Var gb = spread(r, g, in);
      // (x's zeros divide by 1: they are in the other branch, or receive no gradient.)
      return where(zero_count == 0.0, gb * others / where(is_zero, scalar(1.0, dt), x),
                   where(logical_and(zero_count == 1.0, is_zero), gb * others, zero(g)));
    }
    default:
      METAJIT_UNREACHABLE("autograd: reduce mean is lowered to add");
  }
}

// ---------------------------------------------------------------- reindex and reindex_reduce

bool same_indexes(const std::vector<IndexExprPtr>& a, const std::vector<IndexExprPtr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (ix_to_string(*a[k]) != ix_to_string(*b[k])) return false;
  return true;
}

Var reindex_backward(const Node& r, const Var& g, const Shape& x_shape) {
  // reshape: the reverse reshape (a gather, never a scatter).
  if (r.conditions.empty() && numel_of(x_shape) == numel_of(r.shape) &&
      same_indexes(r.indexes, reshape_indexes(x_shape, r.shape)))
    return reshape(g, x_shape);
  // With extras (a data-dependent gather) the transpose is a scatter: colliding reads add up.
  const std::vector<Var> extras = extras_of(r);
  // transpose, conv2d's window, padding, slicing...: the transposed gather.
  if (extras.empty())
    if (auto gathered = scatter_as_gather(g, x_shape, r.indexes, r.conditions)) return *gathered;
  return reindex_reduce_tree(g, ReduceOp::Add, x_shape, r.indexes, r.conditions, extras);
}

Var reindex_reduce_backward(const NodePtr& y, const Var& g) {
  const Node& r = *y;
  const Var x = input(y, 0);
  const Shape& xs = x.shape();
  const DType dt = g.dtype();
  // Reads a value shaped like y at the target of each element of x (0 where it has none).
  const std::vector<Var> extras = extras_of(r);  // a data-dependent scatter: the same reads
  auto at_target = [&](const Var& v) {
    return reindex_tree(v, xs, r.indexes, 0, r.conditions, extras);
  };
  auto to_targets = [&](const Var& v, ReduceOp op) {
    return reindex_reduce_tree(v, op, r.shape, r.indexes, r.conditions, extras);
  };
  switch (ReduceOp(r.op)) {
    case ReduceOp::Add:
      return at_target(g);
    case ReduceOp::Max:
    case ReduceOp::Min: {
      Var hit = attains(x, at_target(Var(y)), ReduceOp(r.op));
      Var count = maximum(to_targets(cast(hit, dt), ReduceOp::Add), 1.0);
      return where(hit, at_target(g / count), zero(g));
    }
    case ReduceOp::Mul: {
      Var is_zero = x == 0.0;
      Var zero_count = at_target(to_targets(cast(is_zero, dt), ReduceOp::Add));
      Var others = at_target(to_targets(where(is_zero, scalar(1.0, dt), x), ReduceOp::Mul));
      Var gb = at_target(g);
      // (x's zeros divide by 1: they are in the other branch, or receive no gradient.)
      return where(zero_count == 0.0, gb * others / where(is_zero, scalar(1.0, dt), x),
                   where(logical_and(zero_count == 1.0, is_zero), gb * others, zero(g)));
    }
    default:
      METAJIT_UNREACHABLE("autograd: reindex_reduce has no mean");
  }
}

}  // namespace

bool is_differentiable_edge(const Node& n, size_t k) {
  const Node& in = *n.inputs[k];
  if (!is_float(n.dtype) || !is_float(in.dtype) || n.stops_gradient) return false;
  if (n.kind == OpKind::Unary && UnaryOp(n.op) == UnaryOp::Floor) return false;
  if (n.kind == OpKind::Where && k == 0) return false;
  return true;
}

std::string cut_reason(const Node& n, size_t k) {
  const Node& in = *n.inputs[k];
  if (n.stops_gradient) return "stop_grad";
  if (n.kind == OpKind::Cast) return std::string("a cast to ") + dtype_name(n.dtype);
  if (n.kind == OpKind::Unary) return unary_op_name(UnaryOp(n.op));
  if (n.kind == OpKind::Binary) {
    BinaryOp op = BinaryOp(n.op);
    return (is_comparison(op) ? "a comparison ("
            : is_bitwise(op)  ? "a bitwise op ("
                              : "a logical op (") +
           std::string(binary_op_name(op)) + ")";
  }
  if (n.kind == OpKind::Where) return "where's condition";
  return std::string("a ") + dtype_name(in.dtype) + " " + op_kind_name(n.kind);
}

std::vector<Var> backward(const NodePtr& y, const Var& g, const std::vector<bool>& wanted) {
  const Node& n = *y;
  std::vector<Var> out(n.inputs.size());
  switch (n.kind) {
    case OpKind::Unary:
      out[0] = unary_backward(UnaryOp(n.op), input(y, 0), Var(y), g);
      break;
    case OpKind::Binary:
      binary_backward(BinaryOp(n.op), input(y, 0), input(y, 1), Var(y), g, out[0], out[1]);
      break;
    case OpKind::Where: {
      Var c = input(y, 0);
      if (wanted[1]) out[1] = where(c, g, zero(g));
      if (wanted[2]) out[2] = where(c, zero(g), g);
      break;
    }
    case OpKind::Cast:  // float -> float: the gradient cast back
      out[0] = cast(g, n.inputs[0]->dtype);
      break;
    case OpKind::BroadcastTo:
      out[0] = unbroadcast(n, g, n.inputs[0]->shape);
      break;
    case OpKind::Reduce:
      out[0] = reduce_backward(y, g);
      break;
    case OpKind::Reindex:
      out[0] = reindex_backward(n, g, n.inputs[0]->shape);
      break;
    case OpKind::ReindexReduce:
      out[0] = reindex_reduce_backward(y, g);
      break;
    case OpKind::Collective:
      out[0] = collective_backward(y, g);
      break;
    default:
      break;  // leaves, scalars and iota have no inputs
  }
  for (size_t k = 0; k < out.size(); ++k)
    if (!wanted[k]) out[k] = Var();
  return out;
}

}  // namespace metajit
