#include "api/kept_values.h"

#include <metajit/error.h>

#include <algorithm>
#include <string>
#include <unordered_set>

namespace metajit {
namespace {

bool is_view(const Node& n) {
  return n.kind == OpKind::BroadcastTo || n.kind == OpKind::Reindex || n.kind == OpKind::Scalar ||
         n.kind == OpKind::Iota;
}

// The elements behind `n` once views are seen through: a broadcast or a reindex reads its
// first input.
int64_t source_numel(const Node* n) {
  while ((n->kind == OpKind::BroadcastTo || n->kind == OpKind::Reindex) && !n->inputs.empty())
    n = n->inputs[0].get();
  return n->kind == OpKind::Scalar ? 1 : n->numel();
}

}  // namespace

bool worth_storing(const Node& n) {
  if (n.kind == OpKind::Scalar || n.kind == OpKind::Iota) return false;
  if (n.assigned_away) return true;
  if (is_view(n)) return false;
  int64_t largest_input = 0;
  for (const NodePtr& in : n.inputs)
    largest_input = std::max(largest_input, source_numel(in.get()));
  return n.inputs.empty() || n.numel() <= largest_input;
}

namespace {

// One walk's scratch, per pending node reached (Node::walk_index): the edges from inside the
// evaluated graph that read it, whether it outlives the evaluation unstored, and whether it
// is stored.
struct Reached {
  const NodePtr* node;
  bool requested = false;
  int64_t edges_inside = 0;
  bool survives = false;
  bool stored = false;
};

// The pending graph behind `requested`, inputs before their readers, numbered through
// Node::walk_index; counts the edges inside it.
void walk_pending(const std::vector<NodePtr>& requested, std::vector<Reached>& reached) {
  static uint64_t last_stamp = 0;  // graph_mutex() is held
  const uint64_t stamp = ++last_stamp;
  thread_local std::vector<std::pair<const NodePtr*, size_t>> stack;
  stack.clear();
  reached.clear();
  auto visit = [&](const NodePtr* p) {
    (*p)->walk_stamp = stamp;
    stack.push_back({p, 0});
  };
  for (const NodePtr& r : requested)
    if (r->walk_stamp != stamp) visit(&r);
  while (!stack.empty()) {
    auto& [p, next] = stack.back();
    Node& n = **p;
    if (next < n.inputs.size()) {
      const NodePtr* in = &n.inputs[next++];
      if ((*in)->realized()) continue;
      if ((*in)->walk_stamp != stamp) visit(in);
      continue;
    }
    n.walk_index = uint32_t(reached.size());
    reached.push_back({p});
    stack.pop_back();
  }
  for (const NodePtr& r : requested) reached[r->walk_index].requested = true;
  for (const Reached& r : reached)
    for (const NodePtr& in : (*r.node)->inputs)
      if (!in->realized()) ++reached[in->walk_index].edges_inside;
}

std::vector<NodePtr> pending_nodes(const std::vector<Var>& vars, const char* what) {
  std::vector<NodePtr> nodes;
  std::unordered_set<const Node*> seen;  // only for long lists: a short one is searched
  for (const Var& v : vars) {
    if (!v.defined()) throw Error(std::string(what) + ": a Var is undefined (default-constructed)");
    if (v.node()->realized()) continue;
    bool fresh;
    if (vars.size() <= 16)
      fresh = std::find(nodes.begin(), nodes.end(), v.node()) == nodes.end();
    else
      fresh = seen.insert(v.node().get()).second;
    if (fresh) nodes.push_back(v.node());
  }
  return nodes;
}

}  // namespace

void values_to_keep(const std::vector<NodePtr>& requested, bool will_run,
                    std::vector<NodePtr>& kept) {
  kept.clear();
  thread_local std::vector<Reached> reached;
  walk_pending(requested, reached);
  // Readers before what they read: a value outlives the evaluation unstored when something
  // outside it reads it (a Var, a pending node not evaluated now) or a reader that outlives it
  // unstored does.
  for (size_t i = reached.size(); i-- > 0;) {
    Reached& r = reached[i];
    Node& n = **r.node;
    if (r.requested) {
      r.stored = true;
      continue;
    }
    r.survives = r.survives || n.holders.load(std::memory_order_relaxed) > 0 ||
                 r.node->use_count() > r.edges_inside;
    r.stored = r.survives && (n.assigned_away || n.computed_before) && worth_storing(n);
    if (r.stored) {
      kept.push_back(*r.node);
      continue;
    }
    if (r.survives)
      for (const NodePtr& in : n.inputs)
        if (!in->realized()) reached[in->walk_index].survives = true;
  }
  if (will_run)
    for (const Reached& r : reached)
      if (!r.stored) (*r.node)->computed_before = true;
}

void keep_value(Node& n, BufferPtr data) {
  NodePtr history;
  if (!n.assigned_away) {
    history = new_node(n.kind, n.dtype, n.shape, n.inputs);
    static_cast<OpAttrs&>(*history) = static_cast<const OpAttrs&>(n);
    history->stops_gradient = n.stops_gradient;
  }
  realize(n, std::move(data));
  n.history = std::move(history);
}

// The requested pending nodes of `vars`, then the values evaluating them also stores.
std::vector<NodePtr> nodes_to_compute(const std::vector<Var>& vars, const char* what, bool will_run,
                                      size_t& requested) {
  std::vector<NodePtr> nodes = pending_nodes(vars, what);
  requested = nodes.size();
  if (nodes.empty()) return nodes;
  thread_local std::vector<NodePtr> kept;
  values_to_keep(nodes, will_run, kept);
  nodes.insert(nodes.end(), kept.begin(), kept.end());
  kept.clear();
  return nodes;
}

}  // namespace metajit
