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

std::vector<bool> choose_stored(const Graph& g, int opt_level) {
  const int n = int(g.nodes.size());
  std::vector<bool> stored(n, false);
  std::vector<int> uses(n, 0);
  std::vector<bool> expanded(n, false);
  for (const GNode& node : g.nodes)
    for (int in : node.inputs) {
      ++uses[in];
      if (is_expanding(node)) expanded[in] = true;
    }
  for (int o : g.outputs) stored[o] = true;
  for (int i = 0; i < n; ++i) {
    const GNode& node = g.nodes[i];
    if (node.kind == OpKind::Leaf) stored[i] = true;
    if (node.kind == OpKind::ReindexReduce) stored[i] = true;
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
      if (stored[in]) continue;
      cost[i] += cost[in];
      has_reduce[i] = has_reduce[i] || has_reduce[in];
    }
    bool recomputed = uses[i] > 1 || expanded[i];
    if (recomputed && (has_reduce[i] || cost[i] > kRecomputeCostLimit)) stored[i] = true;
    if (stored[i]) cost[i] = 0, has_reduce[i] = false;
  }
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
