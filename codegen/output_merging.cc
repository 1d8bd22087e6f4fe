#include "codegen/output_merging.h"

#include <algorithm>
#include <iterator>

#include "codegen/fusion_cost.h"

namespace metajit {
namespace {

bool elementwise_kind(OpKind k) {
  switch (k) {
    case OpKind::Scalar:
    case OpKind::Iota:
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Where:
    case OpKind::Cast:
    case OpKind::BroadcastTo:
      return true;
    default:
      return false;
  }
}

bool elementwise_group(const Graph& g, const FusedGroup& grp) {
  for (int id : grp.nodes)
    if (!elementwise_kind(g.nodes[size_t(id)].kind)) return false;
  return true;
}

bool contains(const std::vector<int>& sorted, int id) {
  return std::binary_search(sorted.begin(), sorted.end(), id);
}

// Whether every reader of `value` computed in `c` reads it element by element: an operand of
// a unary, binary, where or cast of the same shape (broadcast_to marks every other access).
bool read_elementwise(const Graph& g, const std::vector<std::vector<int>>& consumers,
                      const FusedGroup& c, int value) {
  for (int reader : consumers[size_t(value)]) {
    if (!contains(c.nodes, reader)) continue;
    const OpKind k = g.nodes[size_t(reader)].kind;
    if (k != OpKind::Unary && k != OpKind::Binary && k != OpKind::Where && k != OpKind::Cast)
      return false;
  }
  return true;
}

std::vector<int> sorted_union(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// Whether group `p` (before `c` in plan order) can be computed inside `c` (output_merging.h).
bool mergeable(const Graph& g, const FusionPlan& plan, const std::vector<bool>& gone,
               const std::vector<std::vector<int>>& consumers, size_t p, size_t c) {
  const FusedGroup &pg = plan.groups[p], &cg = plan.groups[c];
  if (g.nodes[size_t(pg.root)].shape != g.nodes[size_t(cg.root)].shape) return false;
  if (pg.extra_roots.size() + cg.extra_roots.size() + 2 > size_t(kMaxKernelOutputs)) return false;
  const std::vector<int> moved = group_outputs(pg);
  for (int v : moved) {
    if (g.nodes[size_t(v)].fusion_barrier) return false;  // its readers read it from memory
    // A collective's input stays where it is: its collective runs right after the kernel
    // that writes it, before the kernels that read the collective's result.
    for (int u : consumers[size_t(v)])
      if (g.nodes[size_t(u)].kind == OpKind::Collective) return false;
    if (contains(cg.reads, v) && !read_elementwise(g, consumers, cg, v)) return false;
  }
  for (size_t q = p + 1; q < c; ++q) {
    if (gone[q]) continue;
    for (int v : moved)
      if (contains(plan.groups[q].reads, v)) return false;
  }
  return true;
}

// Group `c` computes and writes group `p`'s values too.
void merge_into(FusedGroup& c, const FusedGroup& p) {
  const std::vector<int> moved = group_outputs(p);
  c.nodes = sorted_union(c.nodes, p.nodes);
  std::vector<int> reads = sorted_union(c.reads, p.reads);
  reads.erase(std::remove_if(reads.begin(), reads.end(),
                             [&](int r) { return std::count(moved.begin(), moved.end(), r) > 0; }),
              reads.end());
  c.reads = std::move(reads);
  std::vector<int> extra = moved;
  std::sort(extra.begin(), extra.end());
  c.extra_roots = sorted_union(c.extra_roots, extra);
}

// An extra root that is not requested and that no other kernel reads was stored only for the
// kernel that now computes it: it stays in registers and is not written.
void drop_unread_extra_roots(const Graph& g, FusionPlan& plan) {
  std::vector<bool> needed(g.nodes.size(), false);
  for (int o : g.outputs) needed[size_t(o)] = true;
  for (const FusedGroup& grp : plan.groups)
    for (int r : grp.reads) needed[size_t(r)] = true;
  for (const GNode& node : g.nodes)  // the runtime reads a collective's input between kernels
    if (node.kind == OpKind::Collective)
      for (int in : node.inputs) needed[size_t(in)] = true;
  for (FusedGroup& grp : plan.groups) {
    std::vector<int> kept;
    for (int e : grp.extra_roots) {
      if (needed[size_t(e)]) {
        kept.push_back(e);
        continue;
      }
      plan.stored[size_t(e)] = false;
      for (FusionDecision& d : plan.decisions)
        if (d.node == e && d.stored) {
          d.stored = false;
          d.reason = FusionReason::ReadersMerged;
        }
    }
    grp.extra_roots = std::move(kept);
  }
}

}  // namespace

void merge_kernel_outputs(const Graph& g, FusionPlan& plan) {
  const size_t n = plan.groups.size();
  const std::vector<std::vector<int>> consumers = consumers_of(g);
  std::vector<int> group_by_root(g.nodes.size(), -1);
  std::vector<bool> elementwise(n), gone(n, false);
  for (size_t k = 0; k < n; ++k) {
    group_by_root[size_t(plan.groups[k].root)] = int(k);
    elementwise[k] = elementwise_group(g, plan.groups[k]);
  }
  for (size_t c = 0; c < n; ++c) {
    if (!elementwise[c]) continue;
    for (bool merged = true; merged;) {
      merged = false;
      for (int r : plan.groups[c].reads) {
        const int p = group_by_root[size_t(r)];
        if (p < 0 || gone[size_t(p)] || !elementwise[size_t(p)] ||
            !mergeable(g, plan, gone, consumers, size_t(p), c))
          continue;
        merge_into(plan.groups[c], plan.groups[size_t(p)]);
        gone[size_t(p)] = true;
        // A later kernel reading one of them may take this whole kernel in turn.
        for (int v : group_outputs(plan.groups[size_t(p)])) group_by_root[size_t(v)] = int(c);
        merged = true;
        break;
      }
    }
  }
  std::vector<FusedGroup> kept;
  for (size_t k = 0; k < n; ++k)
    if (!gone[k]) kept.push_back(std::move(plan.groups[k]));
  plan.groups = std::move(kept);
  drop_unread_extra_roots(g, plan);
}

}  // namespace metajit
