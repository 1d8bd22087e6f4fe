// A softmax whose value a contraction reads (attention's probabilities times V) is rewritten
// from e / sum(e), e = exp(x - max), to exp(x - lse) with lse = max + log(sum(e)). The fusion
// planner stores a contraction operand's row statistics and computes the rest while packing
// the operand (codegen/fusion_cost.h): e / sum(e) needs two stored statistics, the max and
// the sum, each a kernel of its own (the sum reads the max); exp(x - lse) needs one, whose
// kernel computes the max per row inside it. Elsewhere the softmax keeps e / sum(e), which
// its one kernel computes with one exp per element (the row reuse of codegen/map_schedule.h).
#include <optional>

#include "codegen/fusion_cost.h"
#include "codegen/graph_passes.h"

namespace metajit {
namespace {

// The nodes of e / broadcast(sum(e)) with e = exp(x - broadcast(m)), as matched at `div`.
struct SoftmaxNodes {
  int x = -1, max_broadcast = -1, sum = -1;
};

bool is(const GNode& n, OpKind k, int op) {
  return n.kind == k && n.op == op;
}

std::optional<SoftmaxNodes> match_softmax(const Graph& g, int div) {
  const GNode& d = g.nodes[size_t(div)];
  // Not for the half types: their every op rounds (docs/design.md §3), and the rewrite would
  // change which values are rounded.
  if (!is(d, OpKind::Binary, int(BinaryOp::Div)) || !is_float(d.dtype) || is_half(d.dtype) ||
      d.fusion_barrier)
    return std::nullopt;
  const GNode& e = g.nodes[size_t(d.inputs[0])];
  const GNode& bs = g.nodes[size_t(d.inputs[1])];
  if (!is(e, OpKind::Unary, int(UnaryOp::Exp)) || bs.kind != OpKind::BroadcastTo)
    return std::nullopt;
  const GNode& sub = g.nodes[size_t(e.inputs[0])];
  const GNode& sum = g.nodes[size_t(bs.inputs[0])];
  if (!is(sub, OpKind::Binary, int(BinaryOp::Sub)) ||
      !is(sum, OpKind::Reduce, int(ReduceOp::Add)) || !sum.keepdims || sum.inputs[0] != d.inputs[0])
    return std::nullopt;
  const GNode& bm = g.nodes[size_t(sub.inputs[1])];
  if (bm.kind != OpKind::BroadcastTo || bm.bcast != bs.bcast ||
      g.nodes[size_t(bm.inputs[0])].shape != sum.shape ||
      g.nodes[size_t(bm.inputs[0])].dtype != sum.dtype)
    return std::nullopt;
  return SoftmaxNodes{sub.inputs[0], sub.inputs[1], bs.inputs[0]};
}

GNode derived(const GNode& like, OpKind kind, int op, std::vector<int> inputs) {
  GNode n;
  n.kind = kind;
  n.dtype = like.dtype;
  n.shape = like.shape;
  n.op = op;
  n.inputs = std::move(inputs);
  return n;
}

}  // namespace

void softmax_statistic_for_contractions(Graph& g) {
  const size_t n = g.nodes.size();
  // Only a softmax that one product alone reads, whose e = exp(x - max) nothing else reads: one
  // read by several products (a train step's P.V and P^T dY) or whose e a gradient reads (dS)
  // keeps e / sum(e), e stored once and the division the packing's prologue; exp(x - lse)
  // recomputed in each reader cost more (softmax -> matmul backward on AVX-512: 1.11x its split
  // form, bench/README.md "Fusion patterns").
  const std::vector<std::vector<int>> consumers = consumers_of(g);
  std::vector<size_t> readers(n);
  for (size_t i = 0; i < n; ++i) readers[i] = consumers[i].size();
  for (int o : g.outputs) ++readers[size_t(o)];
  std::vector<std::optional<SoftmaxNodes>> rewrite(n);
  bool any = false;
  for (size_t r = 0; r < n; ++r)
    for (int o : product_sum_operands(g, int(r))) {
      const int p = g.nodes[size_t(o)].inputs[0];
      if (rewrite[size_t(p)] || readers[size_t(p)] != 1 || readers[size_t(o)] != 1) continue;
      std::optional<SoftmaxNodes> m = match_softmax(g, p);
      if (!m) continue;
      const GNode& div = g.nodes[size_t(p)];  // e / broadcast(sum(e))
      if (readers[size_t(div.inputs[0])] != 2 || readers[size_t(div.inputs[1])] != 1) continue;
      rewrite[size_t(p)] = m;
      any = true;
    }
  if (!any) return;
  // Rebuild in order, the new statistic's nodes just before the softmax they replace.
  std::vector<int> renumber(n, -1);
  std::vector<GNode> out;
  for (size_t i = 0; i < n; ++i) {
    GNode node = std::move(g.nodes[i]);
    for (int& in : node.inputs) in = renumber[size_t(in)];
    if (const std::optional<SoftmaxNodes>& s = rewrite[i]) {
      const int sum = renumber[size_t(s->sum)], bm = renumber[size_t(s->max_broadcast)];
      const int m = out[size_t(bm)].inputs[0];
      out.push_back(derived(out[size_t(sum)], OpKind::Unary, int(UnaryOp::Log), {sum}));
      out.push_back(
          derived(out[size_t(sum)], OpKind::Binary, int(BinaryOp::Add), {m, int(out.size()) - 1}));
      GNode lse = out[size_t(bm)];  // the max's broadcast, of the statistic instead
      lse.inputs = {int(out.size()) - 1};
      lse.fusion_barrier = false;
      out.push_back(std::move(lse));
      out.push_back(derived(node, OpKind::Binary, int(BinaryOp::Sub),
                            {renumber[size_t(s->x)], int(out.size()) - 1}));
      node.kind = OpKind::Unary;
      node.op = int(UnaryOp::Exp);
      node.inputs = {int(out.size()) - 1};
    }
    renumber[i] = int(out.size());
    out.push_back(std::move(node));
  }
  for (int& o : g.outputs) o = renumber[size_t(o)];
  g.nodes = std::move(out);
  eliminate_dead_code(g);
}

}  // namespace metajit
