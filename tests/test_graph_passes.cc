// The graph passes and the planner on captured graphs: constant folding, CSE, DCE, and the
// fusion decisions, checked on the Graph / FusionPlan data structures directly.
#include <metajit/metajit.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "codegen/fusion_planner.h"
#include "codegen/graph.h"
#include "codegen/graph_passes.h"
#include "codegen/lowering.h"

using namespace metajit;

namespace {

Graph capture(const std::vector<Var>& vars) {
  std::vector<NodePtr> nodes;
  for (const Var& v : vars) nodes.push_back(v.node());
  return capture_graph(nodes);
}

size_t count_kind(const Graph& g, OpKind k) {
  size_t n = 0;
  for (const GNode& node : g.nodes) n += node.kind == k;
  return n;
}

}  // namespace

TEST_CASE("capture numbers nodes topologically and shares common inputs", "[passes]") {
  Var x = rand({3, 4}, 1);
  Var y = exp(x) + exp(x) * 2.0;
  Graph g = capture({y});
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs) CHECK(in < int(i));
  CHECK(g.leaves.size() == 1);
  CHECK(g.outputs.size() == 1);
  CHECK(g.outputs[0] == int(g.nodes.size()) - 1);
}

// The debug log's graph dump (METAJIT_LOG=debug) shows a scalar's value and a reindex's
// overflow value (issue 26: scalars were printed without it).
TEST_CASE("the graph dump shows scalar values", "[passes]") {
  Var x = rand({3, 4}, 1);
  eval({x});
  const std::string d = capture({x * 0.125 + reindex(x, {3, 4}, {"i0", "i1 + 1"}, -2.5)}).dump();
  INFO(d);
  CHECK(d.find("scalar float32[] = 0.125") != std::string::npos);
  CHECK(d.find("else -2.5") != std::string::npos);
}

TEST_CASE("constant folding turns scalar arithmetic into one scalar", "[passes]") {
  Var x = rand({3}, 1);
  Var c = full({}, 2.0) * full({}, 3.0) + 1.0;  // 0-d: folds to 7
  Graph g = capture({x * c});
  fold_constants(g);
  CHECK(count_kind(g, OpKind::Binary) == 1);  // only x * 7 is left
  bool found = false;
  for (const GNode& n : g.nodes) found = found || (n.kind == OpKind::Scalar && n.scalar == 7.0);
  CHECK(found);
  // Broadcast scalars fold too: full([3], 2) + full([3], 5) -> one broadcast of 7.
  Graph g2 = capture({full({3}, 2.0) + full({3}, 5.0)});
  fold_constants(g2);
  CHECK(count_kind(g2, OpKind::Binary) == 0);
  CHECK(count_kind(g2, OpKind::BroadcastTo) == 1);
}

TEST_CASE("CSE merges identical subexpressions but never scalars by value", "[passes]") {
  Var x = rand({3, 4}, 1);
  Graph g = capture({exp(x) + exp(x)});
  eliminate_common_subexpressions(g);
  CHECK(count_kind(g, OpKind::Unary) == 1);
  // x*2 + x*2 keeps two scalars: merging equal values would make the kernel key depend on
  // whether the two constants happen to be equal.
  Graph g2 = capture({x * 2.0 + x * 2.0});
  eliminate_common_subexpressions(g2);
  CHECK(count_kind(g2, OpKind::Scalar) == 2);
  CHECK(count_kind(g2, OpKind::Binary) == 3);
}

TEST_CASE("DCE drops what no output needs", "[passes]") {
  Var x = rand({3}, 1);
  Var used = x + 1.0;
  Graph g = capture({used, exp(x)});
  const size_t before = g.nodes.size();
  g.outputs.pop_back();  // forget the exp output
  eliminate_dead_code(g);
  CHECK(g.nodes.size() == before - 1);
  CHECK(count_kind(g, OpKind::Unary) == 0);
}

TEST_CASE("the planner stores reductions read through a broadcast, not cheap values", "[planner]") {
  Var x = rand({8, 8}, 1);
  eval({x});
  Var e = exp(x * 2.0);
  // e: two consumers, cheap -> recomputed. A row sum read back along its row is fused (the
  // emitter computes it once per row); a column sum read back along columns is stored.
  Var rows = e / sum(e, {1}, true);
  Var cols = e / sum(e, {0}, true);
  Graph g = capture({rows});
  FusionPlan p = plan_fusion(g, 1);
  CHECK(p.groups.size() == 1);
  FusionPlan p0 = plan_fusion(g, 0);
  CHECK(p0.groups.size() > p.groups.size());
  CHECK(plan_fusion(capture({cols}), 1).groups.size() == 2);
  // Read through a reindex (here a transpose), even a row sum is stored.
  Var t = transpose(e - sum(e, {1}, true), {1, 0});
  CHECK(plan_fusion(capture({t}), 1).groups.size() == 2);
}

TEST_CASE("lowered kernels carry shapes and scalars as arguments", "[planner]") {
  Var x = rand({5, 7}, 1);
  eval({x});
  Graph g = capture({x * 3.0 + 1.5});
  fold_constants(g);
  FusionPlan p = plan_fusion(g, 1);
  REQUIRE(p.groups.size() == 1);
  LoweredKernel k = lower_group(g, p, p.groups[0], false);
  CHECK(k.args.scalars == std::vector<double>{3.0, 1.5});
  CHECK(std::find(k.args.params.begin(), k.args.params.end(), 7) != k.args.params.end());
  std::string ir = serialize_ir(k.ir);
  CHECK(ir.find("1.5") == std::string::npos);  // values never reach the IR text
  LoweredKernel spec = lower_group(g, p, p.groups[0], true);
  CHECK(spec.args.params.empty());
  CHECK(serialize_ir(spec.ir).find("7") != std::string::npos);
}
