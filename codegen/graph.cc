#include "codegen/graph.h"

#include <unordered_map>

namespace metajit {

Graph capture_graph(const std::vector<NodePtr>& outputs) {
  Graph g;
  std::unordered_map<const Node*, int> ids;
  // Iterative post-order DFS: graphs can be deeper than the stack allows recursion.
  for (const NodePtr& out : outputs) {
    std::vector<std::pair<NodePtr, size_t>> stack{{out, 0}};
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (ids.count(n.get())) {
        stack.pop_back();
        continue;
      }
      if (n->kind != OpKind::Leaf && next < n->inputs.size()) {
        NodePtr child = n->inputs[next++];
        if (!ids.count(child.get())) stack.push_back({std::move(child), 0});
        continue;
      }
      GNode gn;
      gn.kind = n->kind;
      gn.dtype = n->dtype;
      gn.shape = n->shape;
      gn.op = n->op;
      gn.scalar = n->scalar;
      gn.axes = n->axes;
      gn.keepdims = n->keepdims;
      gn.bcast = n->bcast;
      gn.indexes = n->indexes;
      gn.conditions = n->conditions;
      if (n->kind == OpKind::Leaf) {
        gn.leaf = int(g.leaves.size());
        g.leaves.push_back(n);  // keeps the buffer alive for this evaluation
      } else {
        for (const NodePtr& in : n->inputs) gn.inputs.push_back(ids.at(in.get()));
      }
      ids[n.get()] = int(g.nodes.size());
      g.nodes.push_back(std::move(gn));
      stack.pop_back();
    }
    g.outputs.push_back(ids.at(out.get()));
  }
  return g;
}

std::string describe_op(const GNode& n) {
  std::string s = op_kind_name(n.kind);
  switch (n.kind) {
    case OpKind::Unary:
      return s + "." + unary_op_name(UnaryOp(n.op));
    case OpKind::Binary:
      return s + "." + binary_op_name(BinaryOp(n.op));
    case OpKind::Cast:
      return s + "." + dtype_name(n.dtype);
    case OpKind::Reduce:
    case OpKind::ReindexReduce: {
      s += std::string(".") + reduce_op_name(ReduceOp(n.op));
      if (n.kind == OpKind::Reduce) {
        s += "(axes=";
        for (size_t k = 0; k < n.axes.size(); ++k) s += (k ? "," : "") + std::to_string(n.axes[k]);
        s += n.keepdims ? ",keepdims)" : ")";
      }
      return s;
    }
    default:
      return s;
  }
}

std::string Graph::dump() const {
  std::string out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const GNode& n = nodes[i];
    out += "%" + std::to_string(i) + " = " + describe_op(n) + " " + dtype_name(n.dtype) +
           shape_str(n.shape);
    if (!n.inputs.empty()) {
      out += " (";
      for (size_t k = 0; k < n.inputs.size(); ++k)
        out += (k ? ", %" : "%") + std::to_string(n.inputs[k]);
      out += ")";
    }
    if (n.kind == OpKind::Leaf) out += " leaf#" + std::to_string(n.leaf);
    for (const auto& e : n.indexes) out += " " + ix_to_string(*e);
    for (const auto& e : n.conditions) out += " if " + ix_to_string(*e);
    for (int o : outputs)
      if (o == int(i)) out += "  <- output";
    out += "\n";
  }
  return out;
}

}  // namespace metajit
