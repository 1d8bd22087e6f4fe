#include "codegen/collective_order.h"

#include <algorithm>
#include <limits>

namespace metajit {
namespace {

// The kernels collective `c` needs, through other collectives too, as a mask over the groups.
std::vector<char> kernels_needed(const Graph& g, const std::vector<int>& kernel_of, int c,
                                 size_t num_groups, const FusionPlan& plan) {
  std::vector<char> needed(num_groups, 0), seen(g.nodes.size(), 0);
  std::vector<int> stack(g.nodes[size_t(c)].inputs);
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (seen[size_t(id)]) continue;
    seen[size_t(id)] = 1;
    if (const int k = kernel_of[size_t(id)]; k >= 0) {
      needed[size_t(k)] = 1;
      const FusedGroup& group = plan.groups[size_t(k)];
      stack.insert(stack.end(), group.reads.begin(), group.reads.end());
    } else if (g.nodes[size_t(id)].kind == OpKind::Collective) {
      const std::vector<int>& in = g.nodes[size_t(id)].inputs;
      stack.insert(stack.end(), in.begin(), in.end());
    }
  }
  return needed;
}

}  // namespace

void order_kernels_for_collectives(const Graph& g, FusionPlan& plan) {
  std::vector<int> collectives;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].kind == OpKind::Collective) collectives.push_back(int(i));
  const size_t num_groups = plan.groups.size();
  if (collectives.empty() || num_groups < 2) return;
  std::vector<int> kernel_of(g.nodes.size(), -1);
  for (size_t k = 0; k < num_groups; ++k)
    for (int out : group_outputs(plan.groups[k])) kernel_of[size_t(out)] = int(k);
  std::vector<std::vector<char>> needs;
  for (int c : collectives) needs.push_back(kernels_needed(g, kernel_of, c, num_groups, plan));

  std::vector<char> placed(num_groups, 0), issued(collectives.size(), 0);
  std::vector<int> order;
  auto place = [&](const std::vector<char>& mask) {
    for (size_t k = 0; k < num_groups; ++k)
      if (mask[k] && !placed[k]) placed[k] = 1, order.push_back(int(k));
  };
  for (size_t round = 0; round < collectives.size(); ++round) {
    size_t best = 0, best_count = std::numeric_limits<size_t>::max();
    for (size_t c = 0; c < collectives.size(); ++c) {  // collectives are in node order
      if (issued[c]) continue;
      size_t count = 0;
      for (size_t k = 0; k < num_groups; ++k) count += size_t(needs[c][k] && !placed[k]);
      if (count < best_count) best = c, best_count = count;
    }
    issued[best] = 1;
    place(needs[best]);
  }
  place(std::vector<char>(num_groups, 1));
  std::vector<FusedGroup> groups;
  groups.reserve(num_groups);
  for (int k : order) groups.push_back(std::move(plan.groups[size_t(k)]));
  plan.groups = std::move(groups);
}

}  // namespace metajit
