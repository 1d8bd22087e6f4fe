#include "codegen/fusion_planner.h"

#include <algorithm>

namespace metajit {
namespace {

// A consumer that reads each element of its input more than once per kernel run.
bool is_expanding(const GNode& consumer) {
  if (consumer.kind == OpKind::Reindex) return true;
  if (consumer.kind != OpKind::BroadcastTo) return false;
  for (size_t k = 0; k < consumer.bcast.size(); ++k)
    if (consumer.bcast[k] != BroadcastAxis::Keep && consumer.shape[k] != 1) return true;
  return false;
}

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

// A row broadcast: a suffix broadcast whose value flows, through element-wise ops of its own
// shape, only into outputs or into reductions over expanded axes. Whatever it broadcasts is
// then invariant in the inner loops of every kernel that reads it, so the emitter computes
// it once per row (softmax's max and sum, layer-norm's mean and variance) instead of storing
// it: fusing it costs no recomputation.
bool is_row_broadcast(const Graph& g, const std::vector<std::vector<int>>& consumers, int b) {
  const int p = suffix_expansion(g.nodes[b]);
  if (p < 0) return false;
  const Shape& shape = g.nodes[b].shape;
  std::vector<int> todo{b};
  std::vector<bool> seen(g.nodes.size(), false);
  while (!todo.empty()) {
    int id = todo.back();
    todo.pop_back();
    for (int c : consumers[id]) {
      const GNode& cn = g.nodes[c];
      if (is_elementwise(cn.kind) && cn.shape == shape) {
        if (!seen[c]) todo.push_back(c), seen[c] = true;
        continue;
      }
      if (cn.kind == OpKind::Reduce) {
        for (int64_t a : cn.axes)
          if (a < p) return false;
        continue;
      }
      return false;
    }
  }
  return true;
}

int own_cost(const GNode& n) {
  switch (n.kind) {
    case OpKind::Leaf:
    case OpKind::Scalar:
    case OpKind::BroadcastTo:
      return 0;
    case OpKind::Unary:
      return UnaryOp(n.op) >= UnaryOp::Exp && UnaryOp(n.op) <= UnaryOp::Sigmoid ? 4 : 1;
    default:
      return 1;
  }
}

// A sum of products of broadcast or reindexed operands (matmul, conv2d and their gradients):
// the emitters give it the blocked contraction schedule only as the one reduction of its kernel
// (codegen/kernel_patterns.h).
bool is_product_sum(const Graph& g, const std::vector<bool>& stored, int i) {
  const GNode& n = g.nodes[size_t(i)];
  if (n.kind != OpKind::Reduce || ReduceOp(n.op) != ReduceOp::Add || n.inputs.empty()) return false;
  const int in = n.inputs[0];
  const GNode& m = g.nodes[size_t(in)];
  if (stored[size_t(in)] || m.kind != OpKind::Binary || BinaryOp(m.op) != BinaryOp::Mul)
    return false;
  for (int operand : m.inputs) {
    const OpKind k = g.nodes[size_t(operand)].kind;
    if (k != OpKind::BroadcastTo && k != OpKind::Reindex) return false;
  }
  return true;
}

// A product sum inlined into a kernel that has another reduction (max-pool's backward divides
// a transposed convolution by a count of tied maxima) would run as plain nested loops, at a
// fraction of the blocked schedule's speed: it is stored and becomes a kernel of its own, at
// the price of one intermediate.
void store_contractions_beside_reductions(const Graph& g, std::vector<bool>& stored) {
  const int n = int(g.nodes.size());
  for (bool changed = true; changed;) {
    changed = false;
    for (int root = 0; root < n; ++root) {
      const GNode& r = g.nodes[size_t(root)];
      if (!stored[size_t(root)] || r.kind == OpKind::Leaf || r.kind == OpKind::Scalar) continue;
      std::vector<int> members, stack{root};
      std::vector<bool> seen(size_t(n), false);
      seen[size_t(root)] = true;
      while (!stack.empty()) {
        const int id = stack.back();
        stack.pop_back();
        members.push_back(id);
        for (int in : g.nodes[size_t(id)].inputs)
          if (!seen[size_t(in)] && !stored[size_t(in)])
            seen[size_t(in)] = true, stack.push_back(in);
      }
      int reductions = 0;
      for (int id : members) reductions += g.nodes[size_t(id)].kind == OpKind::Reduce;
      if (reductions < 2) continue;
      for (int id : members)
        if (id != root && is_product_sum(g, stored, id)) stored[size_t(id)] = true, changed = true;
    }
  }
}

std::vector<bool> choose_stored(const Graph& g, int opt_level) {
  const int n = int(g.nodes.size());
  std::vector<bool> stored(n, false);
  std::vector<int> uses(n, 0);
  std::vector<bool> expanded(n, false);
  std::vector<std::vector<int>> consumers(n);
  for (int i = 0; i < n; ++i)
    for (int in : g.nodes[i].inputs) consumers[in].push_back(i);
  std::vector<bool> row_broadcast(n, false);
  if (opt_level > 0)
    for (int i = 0; i < n; ++i) row_broadcast[i] = is_row_broadcast(g, consumers, i);
  for (int i = 0; i < n; ++i) {
    const GNode& node = g.nodes[i];
    for (int in : node.inputs) {
      if (row_broadcast[i]) continue;  // read once per row: neither a use nor an expansion
      ++uses[in];
      if (is_expanding(node)) expanded[in] = true;
    }
  }
  for (int o : g.outputs) stored[o] = true;
  for (int i = 0; i < n; ++i) {
    const GNode& node = g.nodes[i];
    if (node.kind == OpKind::Leaf) stored[i] = true;
    if (node.kind == OpKind::ReindexReduce) stored[i] = true;
    // Extras are read at computed positions (codegen/lowering.cc): they live in buffers. A
    // 0-d constant is passed by value instead.
    if (node.kind == OpKind::Reindex || node.kind == OpKind::ReindexReduce)
      for (size_t k = 1; k < node.inputs.size(); ++k)
        if (g.nodes[size_t(node.inputs[k])].kind != OpKind::Scalar) stored[node.inputs[k]] = true;
    if (opt_level == 0 && node.kind != OpKind::Scalar) stored[i] = true;
  }
  if (opt_level == 0) return stored;
  // Inputs come first, so a node's inlined cost is known when its consumers are decided.
  std::vector<int> cost(n, 0);
  std::vector<bool> has_reduce(n, false);
  for (int i = 0; i < n; ++i) {
    const GNode& node = g.nodes[i];
    if (node.kind == OpKind::Leaf || node.kind == OpKind::Scalar) continue;
    cost[i] = own_cost(node);
    has_reduce[i] = node.kind == OpKind::Reduce;
    for (int in : node.inputs) {
      if (stored[in] || row_broadcast[i]) continue;  // row values are hoisted: free per element
      cost[i] += cost[in];
      has_reduce[i] = has_reduce[i] || has_reduce[in];
    }
    bool recomputed = uses[i] > 1 || expanded[i];
    if (recomputed && (has_reduce[i] || cost[i] > kRecomputeCostLimit)) stored[i] = true;
    if (stored[i]) cost[i] = 0, has_reduce[i] = false;
  }
  store_contractions_beside_reductions(g, stored);
  return stored;
}

}  // namespace

FusionPlan plan_fusion(const Graph& g, int opt_level) {
  FusionPlan plan;
  plan.stored = choose_stored(g, opt_level);
  for (int root = 0; root < int(g.nodes.size()); ++root) {
    const GNode& r = g.nodes[root];
    if (!plan.stored[root] || r.kind == OpKind::Leaf || r.kind == OpKind::Scalar) continue;
    FusedGroup group;
    group.root = root;
    std::vector<bool> seen(g.nodes.size(), false);
    std::vector<int> stack{root};
    seen[root] = true;
    while (!stack.empty()) {
      int id = stack.back();
      stack.pop_back();
      group.nodes.push_back(id);
      for (int in : g.nodes[id].inputs) {
        if (seen[in]) continue;
        seen[in] = true;
        if (plan.stored[in])
          group.reads.push_back(in);
        else
          stack.push_back(in);
      }
    }
    std::sort(group.nodes.begin(), group.nodes.end());  // ids are topological
    std::sort(group.reads.begin(), group.reads.end());
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

std::string dump_plan(const Graph& g, const FusionPlan& plan) {
  std::string out;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const FusedGroup& grp = plan.groups[k];
    const GNode& root = g.nodes[grp.root];
    out += "kernel " + std::to_string(k) + ": -> %" + std::to_string(grp.root) + " " +
           dtype_name(root.dtype) + shape_str(root.shape) + "\n  fuses:";
    for (int id : grp.nodes)
      if (g.nodes[id].kind != OpKind::Scalar) out += " " + describe_op(g.nodes[id]);
    out += "\n  reads:";
    for (int id : grp.reads)
      out += " %" + std::to_string(id) + " " + dtype_name(g.nodes[id].dtype) +
             shape_str(g.nodes[id].shape);
    out += "\n";
  }
  return out;
}

}  // namespace metajit
