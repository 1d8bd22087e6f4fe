// Internal forms of the operators (the public ones are in <metajit/ops.h>): element-wise ops
// by op code, reindex over expression trees, and the broadcasting rule.
#pragma once
#include <metajit/ops.h>

#include <array>
#include <cstdint>
#include <vector>

#include "meta_ops/index_expr.h"
#include "meta_ops/node.h"

namespace metajit {

Var unary(UnaryOp op, const Var& x);
Var binary(BinaryOp op, const Var& a, const Var& b);  // numpy broadcasting + promotion
Var binary(BinaryOp op, const Var& a, double b);      // b takes a's dtype
Var binary(BinaryOp op, double a, const Var& b);

// Expression-tree forms of reindex / reindex_reduce for callers that build trees in C++
// (composite ops). They have their own names: as overloads of the string forms, a braced list
// of two string literals also matched std::vector<IndexExprPtr>'s iterator-pair constructor,
// and `reindex(x, {4, 4}, {"i0", "i1"}, 0.0, {"i0==0", "i1>=3"})` was ambiguous.
// `extras` are the integer arrays the trees' Extra leaves (@eK) read.
Var reindex_tree(const Var& x, Shape shape, std::vector<IndexExprPtr> indexes,
                 double overflow_value, std::vector<IndexExprPtr> overflow_conditions,
                 const std::vector<Var>& extras = {});
Var reindex_reduce_tree(const Var& y, ReduceOp op, Shape shape, std::vector<IndexExprPtr> indexes,
                        std::vector<IndexExprPtr> overflow_conditions,
                        const std::vector<Var>& extras = {});
// The extras a Reindex/ReindexReduce node reads: its inputs after the first.
std::vector<Var> extras_of(const Node& n);

// stop_grad(x) (include/metajit/autograd.h): an identity cast that autograd does not
// differentiate through; constant folding removes it from kernels. Composite ops below autograd
// (softmax's row max) use it directly.
Var identity_without_gradient(const Var& x);

// The indexes reshape(x, to) reads x (of shape `from`) with: row-major order kept. autograd
// recognises a reshape by them (its gradient is the reverse reshape, a gather).
std::vector<IndexExprPtr> reshape_indexes(const Shape& from, const Shape& to);

// A possibly negative axis counted from the end of `ndim` axes, or ShapeError naming `op`,
// `shape` and the valid range.
int64_t norm_axis(int64_t axis, int64_t ndim, const char* op, const Shape& shape);
// Error naming `op` and `what` (e.g. "the Var", "weight") when x is undefined.
void require_defined(const Var& x, const char* op, const char* what = "the Var");

// Shape of numpy broadcasting of a and b, or ShapeError naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// The product sum under matmul and attention's scores: a [.., x, y] and b [.., x', y'] (leading
// batch axes broadcast, dtypes promoted) broadcast to [batch.., axes[0], axes[1], axes[2]], a
// gaining axis a_new and b axis b_new of those three, multiplied and summed over axis `summed`.
// matmul is ({n, k, m}, 2, 0, 1); q k^T over the last axes is ({T, S, D}, 1, 0, 2). No checks
// beyond the batch broadcast (ShapeError naming `op`): callers check the other axes.
Var batched_contraction(const Var& a, const Var& b, const std::array<int64_t, 3>& axes, int a_new,
                        int b_new, int summed, const char* op);

}  // namespace metajit
