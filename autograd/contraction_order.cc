#include "autograd/contraction_order.h"

#include <metajit/composite.h>

#include <algorithm>

#include "meta_ops/ops.h"

namespace metajit {
namespace {

// An innermost result axis this short wastes most of a column tile.
constexpr int64_t kShortAxis = 16;

// v (a factor of the product, shaped like it) read with its axes permuted: new axis p is old
// axis order[p]. A lazy broadcast_to or reindex is read through, so that the result depends
// only on the axes its input reads (a permutation never leaves the bounds: no checks added).
Var permuted_factor(const Var& v, const Shape& shape, const std::vector<IndexExprPtr>& old_axis) {
  const Node& n = *v.node();
  if (n.kind == OpKind::BroadcastTo) {
    std::vector<IndexExprPtr> idx;
    for (size_t k = 0; k < n.bcast.size(); ++k) {
      if (n.bcast[k] == BroadcastAxis::Keep) idx.push_back(old_axis[k]);
      if (n.bcast[k] == BroadcastAxis::Expand) idx.push_back(ix_const(0));
    }
    return reindex_tree(Var(n.inputs[0]), shape, std::move(idx), 0, {});
  }
  if (n.kind == OpKind::Reindex) {
    std::vector<IndexExprPtr> idx, conds;
    for (const IndexExprPtr& e : n.indexes) idx.push_back(ix_substitute(e, old_axis));
    for (const IndexExprPtr& e : n.conditions) conds.push_back(ix_substitute(e, old_axis));
    return reindex_tree(Var(n.inputs[0]), shape, std::move(idx), n.scalar, std::move(conds),
                        extras_of(n));
  }
  return reindex_tree(v, shape, old_axis, 0, {});
}

}  // namespace

std::optional<Var> sum_product_in_contraction_order(const Var& g,
                                                    const std::vector<int64_t>& summed) {
  const Node& n = *g.node();
  if (n.kind != OpKind::Binary || BinaryOp(n.op) != BinaryOp::Mul) return std::nullopt;
  const Shape& shape = g.shape();
  std::vector<int64_t> kept;
  for (int64_t a = 0; a < int64_t(shape.size()); ++a)
    if (std::find(summed.begin(), summed.end(), a) == summed.end()) kept.push_back(a);
  if (kept.size() < 3 || shape[size_t(kept.back())] >= kShortAxis) return std::nullopt;
  std::vector<int64_t> order = kept;  // short axes outside, the rest as they were
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return shape[size_t(a)] < shape[size_t(b)]; });
  if (order == kept || shape[size_t(order.back())] < kShortAxis) return std::nullopt;
  // The product with axes [order..., summed...]; old axis a is read at new position pos[a].
  std::vector<int64_t> axes = order;
  axes.insert(axes.end(), summed.begin(), summed.end());
  Shape permuted;
  std::vector<IndexExprPtr> old_axis(shape.size());
  for (size_t p = 0; p < axes.size(); ++p) {
    permuted.push_back(shape[size_t(axes[p])]);
    old_axis[size_t(axes[p])] = ix_var(int(p));
  }
  Var product = permuted_factor(Var(n.inputs[0]), permuted, old_axis) *
                permuted_factor(Var(n.inputs[1]), permuted, old_axis);
  std::vector<int64_t> trailing;
  for (size_t p = order.size(); p < axes.size(); ++p) trailing.push_back(int64_t(p));
  Var s = sum(product, trailing);
  // Back to the kept axes' own order.
  std::vector<int64_t> back;
  for (int64_t a : kept)
    back.push_back(int64_t(std::find(order.begin(), order.end(), a) - order.begin()));
  return transpose(s, back);
}

}  // namespace metajit
