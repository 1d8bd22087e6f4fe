#include <string>
#include <unordered_map>

#include "codegen/graph_passes.h"

namespace metajit {
namespace {

// Everything that makes two nodes compute the same value, as text. Value-carrying nodes get
// their own id so that equal values never merge (that would make keys value-dependent).
std::string structural_text(const Graph& g, int id) {
  const GNode& n = g.nodes[id];
  std::string s = std::to_string(int(n.kind)) + "|" + std::to_string(int(n.dtype)) + "|" +
                  std::to_string(n.op) + "|" + shape_str(n.shape) + "|";
  // A collective is never merged either: each one the program issues runs (the ranks count
  // them, distributed/collective_check.h).
  if (n.kind == OpKind::Scalar || n.kind == OpKind::Reindex || n.kind == OpKind::Collective)
    s += "#" + std::to_string(id);
  if (n.kind == OpKind::Leaf) s += "leaf" + std::to_string(uintptr_t(g.leaves[n.leaf].get()));
  for (int in : n.inputs) s += "," + std::to_string(in);
  s += "|";
  for (int64_t a : n.axes) s += std::to_string(a) + ",";
  s += n.keepdims ? "k|" : "|";
  for (BroadcastAxis b : n.bcast) s += char('0' + int(b));
  for (const auto& e : n.indexes) s += "|" + ix_to_string(*e);
  s += "|";
  for (const auto& e : n.conditions) s += "|" + ix_to_string(*e);
  return s;
}

}  // namespace

void eliminate_common_subexpressions(Graph& g) {
  std::unordered_map<std::string, int> seen;
  std::vector<int> replacement(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int& in : g.nodes[i].inputs) in = replacement[in];  // inputs already canonical
    auto [it, fresh] = seen.emplace(structural_text(g, int(i)), int(i));
    replacement[i] = it->second;
    // One of two equal values behind a fusion_barrier(): the value kept is behind it.
    if (g.nodes[i].fusion_barrier) g.nodes[size_t(it->second)].fusion_barrier = true;
  }
  for (int& o : g.outputs) o = replacement[o];
  eliminate_dead_code(g);
}

}  // namespace metajit
