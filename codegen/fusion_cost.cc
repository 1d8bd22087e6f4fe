#include "codegen/fusion_cost.h"

#include <algorithm>
#include <climits>
#include <set>

namespace metajit {
namespace {

// The first axis a broadcast_to expands, when every expanded axis comes after every kept one
// ([R,1] -> [R,C]: 1), else -1. Read inside a loop nest over the broadcast's shape, its input
// then depends on outer loops only.
int suffix_expansion(const GNode& b) {
  if (b.kind != OpKind::BroadcastTo) return -1;
  int first = -1;
  for (size_t k = 0; k < b.bcast.size(); ++k) {
    bool expands = b.bcast[k] != BroadcastAxis::Keep && b.shape[k] != 1;
    if (expands && first < 0) first = int(k);
    if (!expands && first >= 0 && b.shape[k] != 1) return -1;  // a kept axis inside: no
  }
  return first;
}

void index_vars(const IndexExpr* e, std::set<int64_t>& out) {
  if (!e) return;
  if (e->kind == IxKind::Var) out.insert(e->value);
  index_vars(e->a.get(), out);
  index_vars(e->b.get(), out);
  index_vars(e->c.get(), out);
  for (const IndexExprPtr& a : e->args) index_vars(a.get(), out);
}

// The index arrays a reindex reads (its extras: inputs after the first that are not 0-d
// constants, which are passed by value).
int index_arrays(const Graph& g, const GNode& n) {
  int arrays = 0;
  for (size_t k = 1; k < n.inputs.size(); ++k)
    arrays += g.nodes[size_t(n.inputs[k])].kind != OpKind::Scalar;
  return arrays;
}

}  // namespace

int op_cost(const Graph& g, const GNode& n) {
  switch (n.kind) {
    case OpKind::Leaf:
    case OpKind::Scalar:
    case OpKind::BroadcastTo:
      return 0;
    case OpKind::Unary:
      return is_transcendental(UnaryOp(n.op)) ? 4 : 1;
    case OpKind::Reindex:
      // A gather reads an index per element and tests it against the source's bounds before
      // an indirect load: an embedding lookup recomputed by four kernels of a LayerNorm took
      // 0.3 ms of a 12 ms transformer step.
      return 1 + 2 * index_arrays(g, n);
    default:
      return 1;
  }
}

std::vector<std::vector<int>> consumers_of(const Graph& g) {
  std::vector<std::vector<int>> consumers(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs) consumers[size_t(in)].push_back(int(i));
  return consumers;
}

bool is_expanding(const GNode& consumer) {
  if (consumer.kind == OpKind::Reindex) return true;
  if (consumer.kind != OpKind::BroadcastTo) return false;
  for (size_t k = 0; k < consumer.bcast.size(); ++k)
    if (consumer.bcast[k] != BroadcastAxis::Keep && consumer.shape[k] != 1) return true;
  return false;
}

int64_t expansion_factor(const Graph& g, const GNode& consumer) {
  if (consumer.kind == OpKind::BroadcastTo) {
    int64_t f = 1;
    for (size_t k = 0; k < consumer.bcast.size(); ++k)
      if (consumer.bcast[k] != BroadcastAxis::Keep) f *= std::max<int64_t>(1, consumer.shape[k]);
    return f;
  }
  if (consumer.kind == OpKind::Reindex && !consumer.inputs.empty()) {
    const int64_t in = g.nodes[size_t(consumer.inputs[0])].numel();
    return in > 0 ? std::max<int64_t>(1, consumer.numel() / in) : 1;
  }
  return 1;
}

std::vector<bool> row_broadcasts(const Graph& g, const std::vector<std::vector<int>>& consumers) {
  // One pass from the last node back (consumers come after their inputs): lowest[i] is the
  // lowest axis that a reduction reached from i through element-wise ops of i's shape reduces
  // (INT_MAX: none), or -1 when such a path ends in any other consumer. A walk per broadcast
  // instead made planning quadratic: a 4,000-deep chain of `y * s` broadcasts each scalar.
  const size_t n = g.nodes.size();
  std::vector<int> lowest(n, INT_MAX);
  std::vector<bool> out(n, false);
  for (size_t i = n; i-- > 0;) {
    int low = INT_MAX;
    for (int c : consumers[i]) {
      const GNode& cn = g.nodes[size_t(c)];
      if (is_elementwise(cn.kind) && cn.shape == g.nodes[i].shape)
        low = std::min(low, lowest[size_t(c)]);
      else if (cn.kind == OpKind::Reduce)
        for (int64_t a : cn.axes) low = std::min(low, int(a));
      else
        low = -1;
    }
    lowest[i] = low;
    const int p = suffix_expansion(g.nodes[i]);
    out[i] = p >= 0 && low >= p;
  }
  return out;
}

bool is_product_sum_node(const Graph& g, int reduce) {
  const GNode& n = g.nodes[size_t(reduce)];
  if (n.kind != OpKind::Reduce || ReduceOp(n.op) != ReduceOp::Add || n.inputs.empty()) return false;
  const GNode& m = g.nodes[size_t(n.inputs[0])];
  if (m.kind != OpKind::Binary || BinaryOp(m.op) != BinaryOp::Mul) return false;
  for (int operand : m.inputs) {
    const OpKind k = g.nodes[size_t(operand)].kind;
    if (k != OpKind::BroadcastTo && k != OpKind::Reindex) return false;
  }
  return true;
}

std::vector<int> product_sum_operands(const Graph& g, int reduce) {
  if (!is_product_sum_node(g, reduce)) return {};
  return g.nodes[size_t(g.nodes[size_t(reduce)].inputs[0])].inputs;
}

int64_t packing_factor(const Graph& g, int operand) {
  const GNode& o = g.nodes[size_t(operand)];
  if (o.kind != OpKind::Reindex || o.inputs.empty()) return 1;
  std::set<int64_t> read;
  for (const IndexExprPtr& e : o.indexes) index_vars(e.get(), read);
  for (const IndexExprPtr& e : o.conditions) index_vars(e.get(), read);
  int64_t packed = 1;
  for (int64_t k : read)
    if (k >= 0 && size_t(k) < o.shape.size()) packed *= std::max<int64_t>(1, o.shape[size_t(k)]);
  const int64_t in = g.nodes[size_t(o.inputs[0])].numel();
  return in > 0 ? std::max<int64_t>(1, packed / in) : 1;
}

}  // namespace metajit
