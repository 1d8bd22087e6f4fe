#include "codegen/plan_cost.h"

#include <algorithm>
#include <set>

namespace metajit {
namespace {

double elements(const GNode& n) {
  return double(std::max<int64_t>(n.numel(), 1));
}

// The broadcast/reindex operands of the product sums computed inside `group`.
std::set<int> contraction_operands(const Graph& g, const FusedGroup& group) {
  std::set<int> out;
  for (int id : group.nodes)
    for (int o : product_sum_operands(g, id)) out.insert(o);
  return out;
}

// How often `in`, an input of `c` in the same kernel, is computed (or, stored, read).
double input_evaluations(const Graph& g, const std::vector<bool>& row,
                         const std::set<int>& operands, int c, double evals_c, int in) {
  const GNode& cn = g.nodes[size_t(c)];
  const GNode& i = g.nodes[size_t(in)];
  // A reduction (and a scatter, which loops over its source) reads each input element once
  // per evaluation of the whole node.
  if (cn.kind == OpKind::Reduce || cn.kind == OpKind::ReindexReduce)
    return evals_c * elements(i) / elements(cn);
  if (operands.count(c))
    return evals_c / double(expansion_factor(g, cn)) * double(packing_factor(g, c));
  if (row[size_t(c)]) return evals_c / double(expansion_factor(g, cn));
  return evals_c;
}

double dtype_bytes(const GNode& n) {
  return double(dtype_size(n.dtype)) * elements(n);
}

}  // namespace

PlanCost plan_cost(const Graph& g, const FusionPlan& plan) {
  PlanCost cost;
  const std::vector<bool> row = row_broadcasts(g, consumers_of(g));
  std::vector<double> evals(g.nodes.size(), 0), reach(g.nodes.size(), 0);
  for (const FusedGroup& group : plan.groups) {
    const std::set<int> operands = contraction_operands(g, group);
    std::fill(evals.begin(), evals.end(), 0.0);
    std::fill(reach.begin(), reach.end(), 0.0);
    evals[size_t(group.root)] = reach[size_t(group.root)] = elements(g.nodes[size_t(group.root)]);
    for (int e : group.extra_roots)
      evals[size_t(e)] = reach[size_t(e)] = elements(g.nodes[size_t(e)]);
    // group.nodes is topological: readers after what they read.
    for (auto it = group.nodes.rbegin(); it != group.nodes.rend(); ++it) {
      const int c = *it;
      const GNode& cn = g.nodes[size_t(c)];
      double work = double(op_cost(g, cn)) * evals[size_t(c)];
      if ((cn.kind == OpKind::Reduce || cn.kind == OpKind::ReindexReduce) && !cn.inputs.empty())
        work *= elements(g.nodes[size_t(cn.inputs[0])]) / elements(cn);
      cost.flops += work;
      // Distinct elements: what a kernel reads of a stored input (a reindex that slices reads
      // only its slice; one element read 40 times is read once).
      reach[size_t(c)] = std::min(reach[size_t(c)], elements(cn));
      for (int in : cn.inputs) {
        const bool reduces = cn.kind == OpKind::Reduce || cn.kind == OpKind::ReindexReduce;
        reach[size_t(in)] += reduces
                                 ? reach[size_t(c)] * elements(g.nodes[size_t(in)]) / elements(cn)
                                 : reach[size_t(c)];
        if (!plan.stored[size_t(in)])
          evals[size_t(in)] += input_evaluations(g, row, operands, c, evals[size_t(c)], in);
      }
    }
    for (int r : group.reads) {
      const GNode& rn = g.nodes[size_t(r)];
      if (rn.kind == OpKind::Scalar) continue;
      cost.bytes += double(dtype_size(rn.dtype)) * std::min(elements(rn), reach[size_t(r)]);
    }
    for (int r : group_outputs(group)) {
      cost.bytes += dtype_bytes(g.nodes[size_t(r)]);
      cost.flops += elements(g.nodes[size_t(r)]);  // storing each element: one op
    }
  }
  return cost;
}

}  // namespace metajit
