#include "codegen/fusion_planner.h"

#include <algorithm>
#include <optional>

namespace metajit {
namespace {

// Whether a stored node is computed by a kernel of its own: leaves and stored scalars are
// written before the kernels run, a collective's result by the runtime between them.
bool has_kernel(const GNode& n) {
  return n.kind != OpKind::Leaf && n.kind != OpKind::Scalar && n.kind != OpKind::Collective;
}

// The kernel of stored node `root` under `stored`: what it computes (sorted, ids are
// topological, root last) and the stored nodes it reads (sorted).
FusedGroup group_at(const Graph& g, const std::vector<bool>& stored, int root) {
  FusedGroup group;
  group.root = root;
  std::vector<bool> seen(g.nodes.size(), false);
  std::vector<int> stack{root};
  seen[size_t(root)] = true;
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    group.nodes.push_back(id);
    for (int in : g.nodes[size_t(id)].inputs) {
      if (seen[size_t(in)]) continue;
      seen[size_t(in)] = true;
      if (stored[size_t(in)])
        group.reads.push_back(in);
      else
        stack.push_back(in);
    }
  }
  std::sort(group.nodes.begin(), group.nodes.end());
  std::sort(group.reads.begin(), group.reads.end());
  return group;
}

// What the planner knows of each node while it walks the graph in order.
struct NodeUses {
  std::vector<std::vector<int>> consumers;
  std::vector<int> uses;           // readers that compute it per element of theirs
  std::vector<int64_t> expansion;  // largest expansion_factor among its expanding readers
  std::vector<int> expander;       // that reader (-1: none)
  std::vector<int> operand_of;     // the product sum it is an operand producer of, or -1
  std::vector<int> operand;        // ... through this broadcast/reindex operand
  std::vector<bool> row_broadcast;
};

NodeUses node_uses(const Graph& g) {
  const size_t n = g.nodes.size();
  NodeUses u;
  u.consumers = consumers_of(g);
  u.uses.assign(n, 0);
  u.expansion.assign(n, 1);
  u.expander.assign(n, -1);
  u.operand_of.assign(n, -1);
  u.operand.assign(n, -1);
  u.row_broadcast = row_broadcasts(g, u.consumers);
  for (size_t i = 0; i < n; ++i) {
    const GNode& node = g.nodes[i];
    for (int in : node.inputs) {
      if (u.row_broadcast[i]) continue;  // read once per row: neither a use nor an expansion
      ++u.uses[size_t(in)];
      if (!is_expanding(node)) continue;
      const int64_t f = expansion_factor(g, node);
      if (u.expander[size_t(in)] < 0 || f > u.expansion[size_t(in)])
        u.expansion[size_t(in)] = f, u.expander[size_t(in)] = int(i);
    }
    for (int o : product_sum_operands(g, int(i))) {
      const int producer = g.nodes[size_t(o)].inputs[0];
      u.operand_of[size_t(producer)] = int(i);
      u.operand[size_t(producer)] = o;
    }
  }
  return u;
}

// A product sum inlined into a kernel that has another reduction or a scatter (max-pool's
// backward divides a transposed convolution by a count of tied maxima) would run as plain
// nested loops, at a fraction of the blocked schedule's speed: it is stored and becomes a
// kernel of its own, at the price of one intermediate.
void store_contractions_beside_reductions(const Graph& g, std::vector<bool>& stored,
                                          std::vector<FusionDecision>& decisions) {
  const int n = int(g.nodes.size());
  for (bool changed = true; changed;) {
    changed = false;
    for (int root = 0; root < n; ++root) {
      const GNode& r = g.nodes[size_t(root)];
      if (!stored[size_t(root)] || !has_kernel(r)) continue;
      const std::vector<int> members = group_at(g, stored, root).nodes;
      int reductions = 0;
      // A scatter counts: its kernel loops over the source, never a contraction's blocks
      // (the embedding's gradient fed by the product that computes it).
      for (int id : members)
        reductions += g.nodes[size_t(id)].kind == OpKind::Reduce ||
                      g.nodes[size_t(id)].kind == OpKind::ReindexReduce;
      if (reductions < 2) continue;
      for (int id : members) {
        if (id == root || !is_product_sum_node(g, id) ||
            stored[size_t(g.nodes[size_t(id)].inputs[0])])
          continue;
        stored[size_t(id)] = true, changed = true;
        FusionDecision d;
        d.node = id, d.consumer = root, d.stored = true;
        d.reason = FusionReason::ContractionBesideReduction;
        decisions.push_back(d);
      }
    }
  }
}

// The nodes each kernel would compute under `stored`: per node, how many kernels compute it.
std::vector<int> kernels_computing(const Graph& g, const std::vector<bool>& stored) {
  const size_t n = g.nodes.size();
  std::vector<int> count(n, 0);
  for (size_t root = 0; root < n; ++root) {
    const GNode& r = g.nodes[root];
    if (!stored[root] || !has_kernel(r)) continue;
    for (int id : group_at(g, stored, int(root)).nodes) ++count[size_t(id)];
  }
  return count;
}

// Stores, one at a time and the last (outermost) first, nodes that several kernels would each
// compute under `stored` and that `pick(i, kernels)` returns a decision for (the decision's node
// is the one stored: i, or what i only indexes), until it picks none: storing one may leave the
// ones inside it shared by fewer kernels.
template <class Pick>
void store_shared_by_kernels(const Graph& g, std::vector<bool>& stored,
                             std::vector<FusionDecision>& decisions, Pick pick) {
  for (bool changed = true; changed;) {
    changed = false;
    const std::vector<int> count = kernels_computing(g, stored);
    for (size_t i = g.nodes.size(); i-- > 0;) {
      if (stored[i] || count[i] < 2) continue;
      const std::optional<FusionDecision> d = pick(i, count[i]);
      if (!d) continue;
      stored[size_t(d->node)] = true, changed = true;
      decisions.push_back(*d);
      break;
    }
  }
}

// A reduction computed in several kernels is stored once. The row-broadcast rule makes a
// reduction read per row free inside one kernel, but each kernel that fuses it still walks
// every row (softmax's statistics, recomputed by each kernel of its backward). The statistic
// is stored, not the element-wise values around it: those are recomputed from it cheaply.
void store_reductions_shared_by_kernels(const Graph& g, std::vector<bool>& stored,
                                        std::vector<FusionDecision>& decisions) {
  store_shared_by_kernels(g, stored, decisions,
                          [&](size_t i, int kernels) -> std::optional<FusionDecision> {
                            if (g.nodes[i].kind != OpKind::Reduce) return std::nullopt;
                            FusionDecision d;
                            d.node = int(i), d.stored = true;
                            d.reason = FusionReason::SharedReduction;
                            d.recompute = kernels, d.has_reduce = true;
                            return d;
                          });
}

// A value several kernels would each compute is stored once when the work the others add, its
// cost times the kernels beyond the first, exceeds kRecomputeCostLimit (softmax's exp(s - lse)
// in three kernels of its backward). Readers inside one kernel share one computation and do not
// count. `cost` is each node's inlined cost when the planner decided it.
// A broadcast is never stored: what it broadcasts is, and its readers index that (a LayerNorm
// read by three projections of one input, after CSE one [B, T, 128, 128] broadcast read by six
// kernels, was written as 64 MiB where the norm is 0.5 MiB: the train step 11x slower than with
// fusion_barrier() on the norm).
void store_values_shared_by_kernels(const Graph& g, const std::vector<int>& cost,
                                    std::vector<bool>& stored,
                                    std::vector<FusionDecision>& decisions) {
  store_shared_by_kernels(g, stored, decisions,
                          [&](size_t i, int kernels) -> std::optional<FusionDecision> {
                            if (int64_t(cost[i]) * (kernels - 1) <= kRecomputeCostLimit)
                              return std::nullopt;
                            size_t value = i;
                            while (g.nodes[value].kind == OpKind::BroadcastTo)
                              value = size_t(g.nodes[value].inputs[0]);
                            if (stored[value] || g.nodes[value].kind == OpKind::Scalar)
                              return std::nullopt;  // read through the broadcast: free
                            FusionDecision d;
                            d.node = int(value), d.stored = true;
                            d.reason = FusionReason::SharedValue;
                            d.recompute = kernels, d.cost = cost[i];
                            return d;
                          });
}

// What O1 must store whatever the cost: outputs, leaves, scatters, extras (read at computed
// positions, codegen/lowering.cc; a 0-d constant is passed by value instead), barriers.
std::vector<bool> always_stored(const Graph& g, int opt_level,
                                std::vector<FusionDecision>& decisions) {
  const size_t n = g.nodes.size();
  std::vector<bool> stored(n, false);
  for (int o : g.outputs) stored[size_t(o)] = true;
  for (size_t i = 0; i < n; ++i) {
    const GNode& node = g.nodes[i];
    if (node.kind == OpKind::Leaf || node.kind == OpKind::ReindexReduce) stored[i] = true;
    // A collective runs on its inputs' buffers between kernels, and its result is a buffer.
    if (node.kind == OpKind::Collective) {
      stored[i] = true;
      for (int in : node.inputs) stored[size_t(in)] = true;
    }
    if (node.kind == OpKind::Reindex || node.kind == OpKind::ReindexReduce)
      for (size_t k = 1; k < node.inputs.size(); ++k)
        if (g.nodes[size_t(node.inputs[k])].kind != OpKind::Scalar)
          stored[size_t(node.inputs[k])] = true;
    if (opt_level == 0 && node.kind != OpKind::Scalar) stored[i] = true;
    if (opt_level > 0 && node.fusion_barrier && node.kind != OpKind::Scalar &&
        node.kind != OpKind::Leaf) {
      stored[i] = true;
      FusionDecision d;
      d.node = int(i), d.stored = true, d.reason = FusionReason::Barrier;
      decisions.push_back(d);
    }
  }
  return stored;
}

// The cost model's verdict on fusing node `i` (not stored yet) into its readers; records the
// decision when fusing is not free. Returns whether to store it.
bool store_by_cost(const Graph& g, const NodeUses& u, int i, int cost, bool has_reduce,
                   std::vector<FusionDecision>& decisions) {
  FusionDecision d;
  d.node = i, d.cost = cost, d.has_reduce = has_reduce;
  const bool recomputed = u.uses[size_t(i)] > 1 || u.expander[size_t(i)] >= 0;
  // Read only as the operand of one contraction, it is computed while the operand is packed,
  // about packing_factor times per element, not once per element of the broadcast: the
  // prologue rule below weighs it (a GELU, 12 per element, feeding the FFN's second product
  // was stored as if computed 128 times, and the forward wrote and read back 2 MiB for it).
  // An operand that several products read (a forward product and its weight gradient share
  // the broadcast after CSE) keeps the rule above: fused, its cost would make the broadcast
  // itself look worth storing.
  const int operand = u.operand[size_t(i)];
  const bool operand_only = u.operand_of[size_t(i)] >= 0 && u.uses[size_t(i)] == 1 &&
                            u.expander[size_t(i)] == operand && u.uses[size_t(operand)] == 1;
  if (recomputed && (has_reduce || (!operand_only && cost > kRecomputeCostLimit))) {
    d.stored = true, d.reason = FusionReason::Recomputed;
    d.consumer = u.expander[size_t(i)] >= 0 ? u.expander[size_t(i)] : u.consumers[size_t(i)][0];
    d.recompute = u.expander[size_t(i)] >= 0 ? u.expansion[size_t(i)] : u.uses[size_t(i)];
    decisions.push_back(d);
    return true;
  }
  const int product = u.operand_of[size_t(i)];
  if (product < 0 || cost == 0) return false;
  d.consumer = product;
  d.recompute = packing_factor(g, u.operand[size_t(i)]);
  // One simple op per packed element (a scale, a cast, a relu) rides on the packing's own
  // load, however often an element is packed; beyond that the cost is weighed.
  d.stored = cost > 1 && cost * d.recompute > kPrologueCostLimit;
  d.reason = d.stored ? FusionReason::ExpensivePrologue : FusionReason::Prologue;
  decisions.push_back(d);
  return d.stored;
}

std::vector<bool> choose_stored(const Graph& g, int opt_level,
                                std::vector<FusionDecision>& decisions) {
  const int n = int(g.nodes.size());
  std::vector<bool> stored = always_stored(g, opt_level, decisions);
  if (opt_level == 0) return stored;
  const NodeUses u = node_uses(g);
  // Inputs come first, so a node's inlined cost is known when its consumers are decided.
  std::vector<int> cost(size_t(n), 0);
  std::vector<bool> has_reduce(size_t(n), false);
  for (int i = 0; i < n; ++i) {
    const GNode& node = g.nodes[size_t(i)];
    if (node.kind == OpKind::Leaf || node.kind == OpKind::Scalar) continue;
    cost[size_t(i)] = op_cost(g, node);
    has_reduce[size_t(i)] = node.kind == OpKind::Reduce;
    for (int in : node.inputs) {
      if (stored[size_t(in)] || u.row_broadcast[size_t(i)]) continue;  // row values: hoisted
      cost[size_t(i)] += cost[size_t(in)];
      has_reduce[size_t(i)] = has_reduce[size_t(i)] || has_reduce[size_t(in)];
    }
    if (!stored[size_t(i)] &&
        store_by_cost(g, u, i, cost[size_t(i)], has_reduce[size_t(i)], decisions))
      stored[size_t(i)] = true;
    if (stored[size_t(i)]) cost[size_t(i)] = 0, has_reduce[size_t(i)] = false;
  }
  store_contractions_beside_reductions(g, stored, decisions);
  store_reductions_shared_by_kernels(g, stored, decisions);
  store_values_shared_by_kernels(g, cost, stored, decisions);
  std::stable_sort(
      decisions.begin(), decisions.end(),
      [](const FusionDecision& a, const FusionDecision& b) { return a.node < b.node; });
  return stored;
}

}  // namespace

FusionPlan plan_fusion(const Graph& g, int opt_level) {
  FusionPlan plan;
  plan.stored = choose_stored(g, opt_level, plan.decisions);
  for (int root = 0; root < int(g.nodes.size()); ++root) {
    const GNode& r = g.nodes[root];
    if (!plan.stored[root] || !has_kernel(r)) continue;
    plan.groups.push_back(group_at(g, plan.stored, root));
  }
  return plan;
}

std::vector<int> group_outputs(const FusedGroup& group) {
  std::vector<int> out = group.extra_roots;
  out.push_back(group.root);
  return out;
}

int group_of(const FusionPlan& plan, int id) {
  for (size_t k = 0; k < plan.groups.size(); ++k)
    if (std::binary_search(plan.groups[k].nodes.begin(), plan.groups[k].nodes.end(), id))
      return int(k);
  return -1;
}

std::string describe_decision(const Graph& g, const FusionPlan& plan, const FusionDecision& d) {
  const std::string value =
      "%" + std::to_string(d.node) + " " + describe_op(g.nodes[size_t(d.node)]);
  const int k = d.consumer >= 0 ? group_of(plan, d.consumer) : -1;
  const std::string kernel = k >= 0 ? "kernel " + std::to_string(k) : "its reader";
  const std::string per = "cost " + std::to_string(d.cost) + " per element";
  switch (d.reason) {
    case FusionReason::Barrier:
      return value + " stored: fusion_barrier()";
    case FusionReason::Recomputed:
      return value + " stored: fusing it into " + kernel + " would compute each element " +
             (d.recompute > 1 ? std::to_string(d.recompute) + " times" : "again for each reader") +
             " (" + (d.has_reduce ? "it contains a reduction" : per) + ")";
    case FusionReason::ExpensivePrologue:
      return value + " stored: as the prologue of " + kernel + "'s contraction it would be " +
             "computed " + std::to_string(d.recompute) + " times per element (" + per + ", limit " +
             std::to_string(kPrologueCostLimit) + " in all)";
    case FusionReason::SharedReduction:
      return value + " stored: a reduction " + std::to_string(d.recompute) +
             " kernels would each compute";
    case FusionReason::SharedValue:
      return value + " stored: " + std::to_string(d.recompute) + " kernels would each compute " +
             "it (" + per + ", " + std::to_string(d.cost * (d.recompute - 1)) + " more in all; " +
             "limit " + std::to_string(kRecomputeCostLimit) + ")";
    case FusionReason::ContractionBesideReduction:
      return value + " stored: a contraction beside another reduction in " + kernel +
             " would lose its blocked schedule";
    case FusionReason::ReadersMerged:
      return value + " fused: every reader is in " + kernel + ", which writes several values " +
             "and computes it once per element (" + per + ")";
    case FusionReason::Prologue:
      return value + " fused into " + kernel + " as a contraction prologue: computed while " +
             "packing the operand, " + std::to_string(d.recompute) + "x per element (" + per +
             "); the contraction keeps its schedule";
  }
  return value;
}

std::string dump_plan(const Graph& g, const FusionPlan& plan) {
  std::string out;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const FusedGroup& grp = plan.groups[k];
    const GNode& root = g.nodes[size_t(grp.root)];
    out += "kernel " + std::to_string(k) + ": -> %" + std::to_string(grp.root) + " " +
           dtype_name(root.dtype) + shape_str(root.shape);
    for (int e : grp.extra_roots)
      out += ", %" + std::to_string(e) + " " + dtype_name(g.nodes[size_t(e)].dtype) +
             shape_str(g.nodes[size_t(e)].shape);
    out += "\n  fuses:";
    for (int id : grp.nodes)
      if (g.nodes[size_t(id)].kind != OpKind::Scalar) out += " " + describe_op(g.nodes[size_t(id)]);
    out += "\n  reads:";
    for (int id : grp.reads)
      out += " %" + std::to_string(id) + " " + dtype_name(g.nodes[size_t(id)].dtype) +
             shape_str(g.nodes[size_t(id)].shape);
    out += "\n";
  }
  // Collectives run between the kernels (runtime/executor.h HostStep), never inside one.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const GNode& c = g.nodes[i];
    if (c.kind != OpKind::Collective) continue;
    out += "between kernels: %" + std::to_string(i) + " " + dtype_name(c.dtype) +
           shape_str(c.shape) + " = " + describe_op(c) + " of";
    for (size_t j = 0; j < c.inputs.size(); ++j) {
      const int in = c.inputs[j], k = group_of(plan, in);
      out += std::string(j ? ", %" : " %") + std::to_string(in) +
             (k >= 0 ? " (kernel " + std::to_string(k) + ")" : "");
    }
    // The kernels in between run while it travels (codegen/collective_order.h).
    for (size_t k = 0; k < plan.groups.size(); ++k)
      if (std::binary_search(plan.groups[k].reads.begin(), plan.groups[k].reads.end(), int(i))) {
        out += "; read first by kernel " + std::to_string(k);
        break;
      }
    out += "\n";
  }
  if (!plan.decisions.empty()) out += "decisions:\n";
  for (const FusionDecision& d : plan.decisions) out += "  " + describe_decision(g, plan, d) + "\n";
  return out;
}

}  // namespace metajit
