#include "codegen/graph.h"

#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "meta_ops/index_expr.h"

namespace metajit {

namespace {

// Node -> position in the walk. Evaluations are mostly small graphs: a flat list searched
// linearly until it grows, then a hash map (no allocation per lookup on the dispatch path).
class NodeIds {
 public:
  int find(const Node* n) const {
    if (!map_.empty()) {
      auto it = map_.find(n);
      return it == map_.end() ? -1 : it->second;
    }
    for (const auto& [node, id] : flat_)
      if (node == n) return id;
    return -1;
  }
  void add(const Node* n, int id) {
    if (map_.empty() && flat_.size() < 48) {
      flat_.emplace_back(n, id);
      return;
    }
    if (map_.empty())
      for (const auto& [node, i] : flat_) map_.emplace(node, i);
    map_.emplace(n, id);
  }

 private:
  std::vector<std::pair<const Node*, int>> flat_;
  std::unordered_map<const Node*, int> map_;
};

// Every node `outputs` depend on that is not yet realized, and the realized ones they read,
// in one post order (inputs first): visit(node, its inputs' positions) once per node, then
// output(position) once per requested output. capture_graph and node_fingerprint share it,
// so that their numbering agrees.
template <class Visit, class Output>
void walk_pending(const std::vector<NodePtr>& outputs, Visit&& visit, Output&& output) {
  NodeIds ids;
  int next_id = 0;
  std::vector<int> input_ids;
  // Iterative post-order DFS: graphs can be deeper than the stack allows recursion.
  // Pointers to the NodePtrs held by `outputs` and by the nodes' inputs: stable while the
  // caller holds graph_mutex().
  std::vector<std::pair<const NodePtr*, size_t>> stack;
  for (const NodePtr& out : outputs) {
    stack.assign(1, {&out, 0});
    while (!stack.empty()) {
      auto& [ptr, next] = stack.back();
      const Node* n = ptr->get();
      if (ids.find(n) >= 0) {
        stack.pop_back();
        continue;
      }
      if (n->kind != OpKind::Leaf && next < n->inputs.size()) {
        const NodePtr* child = &n->inputs[next++];
        if (ids.find(child->get()) < 0) stack.push_back({child, 0});
        continue;
      }
      input_ids.clear();
      if (n->kind != OpKind::Leaf)
        for (const NodePtr& in : n->inputs) input_ids.push_back(ids.find(in.get()));
      visit(*ptr, input_ids);
      ids.add(n, next_id++);
      stack.pop_back();
    }
    output(ids.find(out.get()));
  }
}

template <class T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_exprs(std::string& s, const std::vector<IndexExprPtr>& es) {
  put(s, uint32_t(es.size()));
  for (const IndexExprPtr& e : es) {
    const std::string t = e ? ix_to_string(*e) : std::string();
    put(s, uint32_t(t.size()));
    s += t;
  }
}

}  // namespace

Graph capture_graph(const std::vector<NodePtr>& outputs) {
  Graph g;
  walk_pending(
      outputs,
      [&g](const NodePtr& node, const std::vector<int>& inputs) {
        const Node& n = *node;
        GNode gn;
        static_cast<OpAttrs&>(gn) = static_cast<const OpAttrs&>(n);
        gn.inputs = inputs;
        if (n.kind == OpKind::Leaf) {
          gn.leaf = int(g.leaves.size());
          g.leaves.push_back(node);  // keeps the buffer alive for this evaluation
        }
        g.nodes.push_back(std::move(gn));
      },
      [&g](int id) { g.outputs.push_back(id); });
  return g;
}

void node_fingerprint(const std::vector<NodePtr>& outputs, std::string& s,
                      std::vector<NodePtr>& leaves) {
  s.clear();
  leaves.clear();
  walk_pending(
      outputs,
      [&](const NodePtr& node, const std::vector<int>& inputs) {
        const Node& n = *node;
        put(s, uint8_t(n.kind));
        put(s, uint8_t(n.dtype));
        put(s, uint32_t(n.shape.size()));
        for (int64_t d : n.shape) put(s, d);
        if (n.kind == OpKind::Leaf) {
          leaves.push_back(node);
          return;
        }
        put(s, int32_t(n.op));
        put(s, uint8_t(n.keepdims));
        put(s, uint8_t(n.fusion_barrier));
        put(s, uint8_t(n.collective));
        put(s, n.root);
        put(s, n.rank);
        put(s, n.scalar);
        put(s, uint32_t(inputs.size()));
        for (int i : inputs) put(s, int32_t(i));
        put(s, uint32_t(n.axes.size()));
        for (int64_t a : n.axes) put(s, a);
        put(s, uint32_t(n.bcast.size()));
        for (BroadcastAxis b : n.bcast) put(s, uint8_t(b));
        put_exprs(s, n.indexes);
        put_exprs(s, n.conditions);
      },
      [&s](int id) { put(s, int32_t(id)); });
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
    case OpKind::Collective:
      s += std::string(".") + collective_kind_name(n.collective);
      if (n.collective == CollectiveKind::AllReduce)
        s += std::string("(") + reduce_op_name(ReduceOp(n.op)) + ")";
      if (n.collective == CollectiveKind::Broadcast) s += "(root=" + std::to_string(n.root) + ")";
      return s;
    default:
      return s;
  }
}

namespace {
// Shortest text that reads back as the same double ("0.5", "1e-05", "-inf").
std::string format_scalar(double v) {
  char text[32];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, v);
    if (std::strtod(text, nullptr) == v || v != v) break;
  }
  return text;
}
}  // namespace

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
    // The value of a scalar (issue 26: the debug log printed "scalar f32[]" without it).
    if (n.kind == OpKind::Scalar) out += " = " + format_scalar(n.scalar);
    if (n.kind == OpKind::Reindex && n.scalar != 0) out += " else " + format_scalar(n.scalar);
    for (const auto& e : n.indexes) out += " " + ix_to_string(*e);
    for (const auto& e : n.conditions) out += " if " + ix_to_string(*e);
    for (int o : outputs)
      if (o == int(i)) out += "  <- output";
    out += "\n";
  }
  return out;
}

}  // namespace metajit
