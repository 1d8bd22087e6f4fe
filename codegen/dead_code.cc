#include "codegen/graph_passes.h"

namespace metajit {

void eliminate_dead_code(Graph& g) {
  const int n = int(g.nodes.size());
  std::vector<bool> live(n, false);
  for (int o : g.outputs) live[o] = true;
  for (int i = n - 1; i >= 0; --i)  // topological order: users come after their inputs
    if (live[i])
      for (int in : g.nodes[i].inputs) live[in] = true;
  std::vector<int> renumber(n, -1);
  std::vector<GNode> kept;
  std::vector<NodePtr> leaves;
  for (int i = 0; i < n; ++i) {
    if (!live[i]) continue;
    renumber[i] = int(kept.size());
    GNode node = std::move(g.nodes[i]);
    for (int& in : node.inputs) in = renumber[in];
    if (node.kind == OpKind::Leaf) {
      leaves.push_back(g.leaves[node.leaf]);
      node.leaf = int(leaves.size()) - 1;
    }
    kept.push_back(std::move(node));
  }
  for (int& o : g.outputs) o = renumber[o];
  g.nodes = std::move(kept);
  g.leaves = std::move(leaves);
}

}  // namespace metajit
