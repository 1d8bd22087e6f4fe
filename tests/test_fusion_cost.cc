// The fusion planner's cost model (codegen/fusion_cost.h): fusion never does much more work or
// moves more bytes than the unfused plan (a property over random graphs, computed from the
// plans: codegen/plan_cost.h), contraction operands keep the contraction's schedule with their
// producer as a prologue, fusion_barrier() stores a value and passes gradients through, and
// explain() says what was decided and why.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "codegen/fusion_cost.h"
#include "codegen/graph_passes.h"
#include "codegen/pipeline.h"
#include "codegen/plan_cost.h"
#include "support/random_graph.h"
#include "support/reference_check.h"
#include "support/scoped_env.h"

using namespace metajit;

namespace {

// The plan of `outs` at `opt_level`, after the same graph passes as codegen/pipeline.cc.
std::pair<Graph, FusionPlan> planned(const std::vector<Var>& outs, int opt_level) {
  std::vector<NodePtr> nodes;
  for (const Var& v : outs)
    if (!v.node()->realized()) nodes.push_back(v.node());
  Graph g = capture_graph(nodes);
  fold_constants(g);
  eliminate_common_subexpressions(g);
  eliminate_dead_code(g);
  if (opt_level > 0) softmax_statistic_for_contractions(g);
  FusionPlan p = plan_fusion(g, opt_level);
  return {std::move(g), std::move(p)};
}

PlanCost cost_at(const std::vector<Var>& outs, int opt_level) {
  auto [g, p] = planned(outs, opt_level);
  return plan_cost(g, p);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Var layer_norm_rows(const Var& x, const Var& g, const Var& b) {
  Var xc = x - mean(x, {-1}, true);
  return xc / sqrt(mean(xc * xc, {-1}, true) + 1e-5) * g + b;
}

// 12 ops per element (tanh counts 4): above kRecomputeCostLimit, within kPrologueCostLimit.
Var gelu_tanh(const Var& x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

}  // namespace

// The bounds: a value is recomputed in a consumer only while it costs at most
// kRecomputeCostLimit per element (and a contraction prologue at most kPrologueCostLimit in
// all), so fused work per element of a kernel stays within a small multiple of the unfused
// work; fusion stores fewer values, so bytes may only fall. Checked from the plans of 600
// random graphs (support/random_graph.h), nothing compiled.
TEST_CASE("fusion cost property: O1 plans do at most 9x the work and move no more bytes than O0",
          "[fusion][cost]") {
  constexpr double kFlopsFactor = kRecomputeCostLimit + 1, kBytesFactor = 1.0;
  double worst_flops = 0, worst_bytes = 0;
  uint64_t worst_flops_seed = 0, worst_bytes_seed = 0;
  int checked = 0;
  for (uint64_t seed = 0; seed < 600; ++seed) {
    metajit_test::GraphGenerator gen(seed);
    std::vector<Var> outs = gen.build();
    const PlanCost o0 = cost_at(outs, 0), o1 = cost_at(outs, 1);
    if (o0.bytes <= 0) continue;  // everything already realized
    ++checked;
    const double f = o1.flops / std::max(o0.flops, 1.0), b = o1.bytes / o0.bytes;
    if (f > worst_flops) worst_flops = f, worst_flops_seed = seed;
    if (b > worst_bytes) worst_bytes = b, worst_bytes_seed = seed;
    INFO("seed " << seed << "\n" << gen.listing());
    CHECK(o1.flops <= kFlopsFactor * std::max(o0.flops, 1.0));
    CHECK(o1.bytes <= kBytesFactor * o0.bytes);
  }
  INFO("worst flops O1/O0 " << worst_flops << " (seed " << worst_flops_seed << "), worst bytes "
                            << worst_bytes << " (seed " << worst_bytes_seed << ")");
  CHECK(checked >= 500);
  WARN("O1/O0 over " << checked << " random graphs: flops at most " << worst_flops
                     << "x, bytes at most " << worst_bytes << "x");
}

namespace {

// The definition of a row broadcast (codegen/fusion_cost.h), walked from node `b`: a suffix
// broadcast whose value flows through element-wise ops of its shape only into outputs or into
// reductions over axes at or after its first expanded one. row_broadcasts() computes it for
// every node in one pass.
bool row_broadcast_by_walk(const Graph& g, const std::vector<std::vector<int>>& consumers,
                           int b) {
  const GNode& node = g.nodes[size_t(b)];
  if (node.kind != OpKind::BroadcastTo) return false;
  int first = -1;
  for (size_t k = 0; k < node.bcast.size(); ++k) {
    const bool expands = node.bcast[k] != BroadcastAxis::Keep && node.shape[k] != 1;
    if (expands && first < 0) first = int(k);
    if (!expands && first >= 0 && node.shape[k] != 1) return false;
  }
  if (first < 0) return false;
  std::vector<int> todo{b};
  while (!todo.empty()) {
    const int id = todo.back();
    todo.pop_back();
    for (int c : consumers[size_t(id)]) {
      const GNode& cn = g.nodes[size_t(c)];
      if (is_elementwise(cn.kind) && cn.shape == node.shape) {
        todo.push_back(c);
      } else if (cn.kind == OpKind::Reduce) {
        for (int64_t a : cn.axes)
          if (a < first) return false;
      } else {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

TEST_CASE("row broadcasts found in one pass are those a walk from each broadcast finds",
          "[fusion][cost]") {
  int broadcasts = 0, rows = 0;
  auto check = [&](const std::vector<Var>& outs, const std::string& listing) {
    auto [g, p] = planned(outs, 1);
    const std::vector<std::vector<int>> consumers = consumers_of(g);
    const std::vector<bool> fast = row_broadcasts(g, consumers);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      INFO(listing << "\nnode %" << i);
      const bool walked = row_broadcast_by_walk(g, consumers, int(i));
      CHECK(fast[i] == walked);
      broadcasts += g.nodes[i].kind == OpKind::BroadcastTo;
      rows += walked;
    }
  };
  for (uint64_t seed = 0; seed < 600; ++seed) {
    metajit_test::GraphGenerator gen(seed);
    std::vector<Var> outs = gen.build();
    check(outs, "seed " + std::to_string(seed) + "\n" + gen.listing());
  }
  Var x = randn({64, 128}, 3), w = randn({128}, 4), b = randn({128}, 5);
  check({softmax(x, 1), layer_norm_rows(x, w, b), sum(x * mean(x, {1}, true), {0})},
        "softmax, layer norm, a column sum of a row-broadcast product");
  // Both answers occur, so a one-sided mistake fails.
  CHECK(rows > 10);
  CHECK(broadcasts - rows > 10);
}

TEST_CASE("fusion cost property: the issue's patterns cost no more fused than unfused",
          "[fusion][cost]") {
  Var x = randn({16, 64, 128}, 1), w = randn({128, 512}, 2), g = randn({128}, 3),
      b = randn({128}, 4), s = randn({8, 32, 32}, 5), v = randn({8, 32, 16}, 6);
  eval({x, w, g, b, s, v});
  const std::vector<Var> patterns = {matmul(layer_norm_rows(x, g, b), w), matmul(softmax(s, 2), v)};
  for (const Var& y : patterns) {
    // Before the cost model, LayerNorm -> Linear recomputed the norm for each of the 512
    // output columns (512x the work); now the norm's centring is computed twice at most.
    const PlanCost o0 = cost_at({y}, 0), o1 = cost_at({y}, 1);
    CHECK(o1.flops <= 1.1 * o0.flops);
    CHECK(o1.bytes < o0.bytes);
  }
}

TEST_CASE("LayerNorm -> Linear: the contraction keeps its schedule with the norm as its prologue",
          "[fusion][cost]") {
  Var x = randn({4, 24, 40}, 1), w = randn({40, 56}, 2), g = randn({40}, 3), b = randn({40}, 4);
  eval({x, w, g, b});
  Var y = matmul(layer_norm_rows(x, g, b), w);
  const std::string e = explain({y});
  INFO(e);
  CHECK(has(e, "as a contraction prologue"));
  CHECK(has(e, "the contraction keeps its schedule"));
  CHECK(has(e, "schedule: contraction, packed A and B panels"));
  CHECK(has(e, "stored: fusing it into kernel"));  // the row statistics
  CHECK(plan({y}).size() == 3);                    // mean, scale, the contraction
  // Its backward too (built before y is evaluated, which drops y's graph): every gradient
  // against the reference.
  Var r = randn({4, 24, 56}, 5);
  eval({r});
  std::vector<Var> grads = grad(sum(y * r), {x, w, g, b});
  grads.push_back(y);
  check_against_reference(grads);
}

TEST_CASE("softmax -> matmul: one statistics kernel and a contraction with exp as its prologue",
          "[fusion][cost]") {
  Var s = randn({6, 20, 36}, 1), v = randn({6, 36, 24}, 2);
  eval({s, v});
  Var y = matmul(softmax(s, 2), v);
  const std::string e = explain({y});
  INFO(e);
  CHECK(plan({y}).size() == 2);
  CHECK(has(e, "unary.exp fused into kernel 1 as a contraction prologue"));
  CHECK(has(e, "schedule: contraction"));
  // Alone, a softmax keeps e / sum(e) and its one kernel.
  CHECK(plan({softmax(s, 2)}).size() == 1);
  // The backward: the statistics are stored once, not recomputed by every kernel.
  Var r = randn({6, 20, 24}, 3);
  eval({r});
  std::vector<Var> grads = grad(sum(y * r), {s, v});
  const std::string eb = explain(grads);
  INFO(eb);
  CHECK(has(eb, "reduce.max(axes=2,keepdims) stored"));
  // exp(s - max), which dS reads too, is stored once (5 ops per element, 15 more in all against
  // the limit of 8), and the dV contraction, P^T dY, divides it by the row sum while packing.
  // P keeps e / sum(e): no log-sum-exp statistic, whose exp(s - lse) dV would compute again
  // (codegen/softmax_statistic.cc).
  CHECK(has(eb,
            "unary.exp stored: 4 kernels would each compute it (cost 5 per element, 15 more "
            "in all; limit 8)"));
  CHECK(has(eb, "binary.div fused into kernel 6 as a contraction prologue"));
  CHECK(has(e, "unary.log"));
  CHECK(!has(eb, "unary.log"));
  grads.push_back(y);
  check_against_reference(grads);
}

// Readers of one value inside one kernel share one computation: tanh(x) used five times by
// element-wise readers of its own kernel is not stored.
TEST_CASE("a value read several times inside one kernel is not stored for it", "[fusion][cost]") {
  Var x = randn({37, 19}, 7);
  eval({x});
  Var h = tanh(x);
  Var y = h * h + exp(h) + h;
  const std::string e = explain({y});
  INFO(e);
  CHECK(plan({y}).size() == 1);
  CHECK(!has(e, "kernels would each compute"));
  check_against_reference(y);
}

// A gather costs an indexed read and bounds tests per element (codegen/fusion_cost.cc op_cost):
// a token embedding plus a position embedding (5 ops per element), read by the three kernels of
// a LayerNorm feeding a Linear layer, is stored once rather than gathered again by two more
// (10 > 8; counted as one op, the gather would have been fused into all three).
TEST_CASE("an embedding lookup several kernels would gather again is stored once",
          "[fusion][cost]") {
  Var tok = randn({40, 32}, 1), pos = randn({16, 32}, 2), g = randn({32}, 3), b = randn({32}, 4);
  Var w = randn({32, 32}, 5);
  std::vector<int32_t> idv;
  for (int k = 0; k < 64; ++k) idv.push_back(int32_t((k * 7) % 40));
  Var ids = array(idv, {64});
  eval({tok, pos, g, b, w, ids});
  Var x = reshape(embedding(tok, ids), {4, 16, 32}) + pos;
  Var y = matmul(layer_norm_rows(x, g, b), w);
  const std::string e = explain({y});
  INFO(e);
  CHECK(has(e, "binary.add stored: 3 kernels would each compute it (cost 5 per element"));
  check_against_reference(y);
}

// Three projections of one normalised input (q, k and v of attention written as three matmuls):
// after CSE their operands are one broadcast of the norm over the output features, read by the
// products and their weight gradients. It is the norm that is stored, never the broadcast ([N,
// T, E, E]: 64 MiB at N16 T64 E128 against the norm's 0.5 MiB, and an 11x slower train step).
TEST_CASE("a broadcast several kernels read is not stored: what it broadcasts is",
          "[fusion][cost]") {
  const int64_t n = 3, t = 5, e = 8;
  Var x = randn({n, t, e}, 1), wq = randn({e, e}, 2), wk = randn({e, e}, 3), wv = randn({e, e}, 4);
  eval({x, wq, wk, wv});
  Var h = layer_norm_rows(x, ones({e}), zeros({e}));
  Var q = matmul(h, transpose(wq, {1, 0})), k = matmul(h, transpose(wk, {1, 0})),
      v = matmul(h, transpose(wv, {1, 0}));
  std::vector<Var> outs = grad(sum(q * k * v), {x, wq, wk, wv});
  auto [g, p] = planned(outs, 1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!p.stored[i] || g.nodes[i].kind == OpKind::Leaf) continue;
    INFO("stored %" << i << " " << describe_op(g.nodes[i]) << " " << shape_str(g.nodes[i].shape));
    CHECK(g.nodes[i].kind != OpKind::BroadcastTo);
    CHECK(g.nodes[i].numel() <= n * t * e);
  }
  const std::string text = explain(outs);
  INFO(text);
  CHECK(has(text, "binary.add stored: 6 kernels would each compute it"));  // the norm's + b
  CHECK(cost_at(outs, 1).bytes <= cost_at(outs, 0).bytes);
  check_against_reference(outs);
}

// A gather feeding a contraction (an embedding) is packed along the reduction, a vector loop
// over each gathered row, its column bounds tested in the loop; values as the reference's,
// with ids out of range giving zero rows (reindex's overflow value).
TEST_CASE("a gathered contraction operand packs along the reduction and matches the reference",
          "[fusion][cost]") {
  Var table = randn({50, 40}, 1), w = randn({40, 70}, 2);
  Var ids = array(std::vector<int32_t>{3, 49, 0, 7, 7, -1, 50, 12, 33, 21, 5}, {11});
  eval({table, w, ids});
  Var y = matmul(embedding(table, ids), w);
  INFO(explain({y}));
  CHECK(plan({y}).size() == 1);
  CHECK(has(explain({y}), "reindex fused into kernel 0 as a contraction prologue"));
  check_against_reference(y);
}

// Found by the lazy-values tests: exp prologues on both operands of a contraction whose panels
// are packed once generated `mj_bpre + mj_p * mj_k * 16[...]`, which did not compile.
TEST_CASE("transcendental prologues on panels packed once compile and match the reference",
          "[fusion][cost]") {
  Var x = rand({64, 32}, 1), w = rand({32, 16}, 2);
  eval({x, w});
  check_against_reference(matmul(exp(x), exp(w)));
  check_against_reference(sum(matmul(exp(x) * 0.5, tanh(w))));
}

// Operands whose rows lie along memory (a transposed A: a weight gradient's activations) are
// packed through a row buffer in vector loops over groups of panels (codegen/cpp_packing.cc
// pack_rows_through_buffer, kPackRows); rows that a reindex's bounds test are packed that way
// when every real row of the group passes, else panel by panel under the test. Row counts
// around the group sizes (11 panels of 6 rows on AVX2, 4 of 16 columns), with and without a
// prologue, packed once per launch and per block (batched).
TEST_CASE("operands packed through the row buffer match the reference at every group boundary",
          "[fusion][cost]") {
  for (int64_t m : {5, 6, 65, 66, 67, 100, 133}) {
    INFO("rows " << m);
    Var h = randn({23, m}, 1), dy = randn({23, 70}, 2), w = randn({23, m}, 3);
    eval({h, dy, w});
    Var gelu_grad = matmul(transpose(tanh(h) * h + 0.5, {1, 0}), dy);  // A^T with a prologue
    Var plain = matmul(transpose(h, {1, 0}), w);  // plain copies keep the panel loop
    const std::vector<KernelInfo> kernels = plan({gelu_grad, plain});
    REQUIRE(kernels.size() == 2);
    for (const KernelInfo& k : kernels) {
      INFO(k.source);
      const bool prologue = has(k.source, "unary.tanh");
      CHECK(has(k.source, "mj_row[") == prologue);
    }
    check_against_reference({gelu_grad, plain});
    Var hb = randn({3, 17, m}, 4), wb = randn({3, 17, 40}, 5);
    eval({hb, wb});
    check_against_reference(matmul(transpose(exp(hb * 0.1), {0, 2, 1}), wb));
  }
  // A reindex whose rows 0..2 fall outside its input (overflow 0), scaled: the group holding
  // them is packed under the test, the others through the buffer without it.
  for (int64_t m : {40, 140}) {
    INFO("rows " << m);
    Var x = randn({19, m - 3}, 6), b = randn({19, 33}, 7);
    eval({x, b});
    Var shifted = reindex(x, {19, m}, {"i0", "i1 - 3"}) * 1.5;
    Var y = matmul(transpose(shifted, {1, 0}), b);
    const std::vector<KernelInfo> kernels = plan({y});
    REQUIRE(kernels.size() == 1);
    INFO(kernels[0].source);
    CHECK(has(kernels[0].source, "mj_rows_ok"));
    check_against_reference(y);
  }
  // Heads merged back into rows (attention output [B, H, T, D] -> [B*T, H*D], as
  // bench/transformer.cc writes it) as the A^T of the output projection's weight gradient: the
  // row tests divide by D, tested once per packing for every row.
  for (int64_t d : {8, 64}) {
    INFO("head size " << d);
    Var heads = randn({2, 3, 5, d}, 8), w = randn({3 * d, 7}, 9), dy = randn({10, 7}, 10);
    eval({heads, w, dy});
    const std::string D = std::to_string(d);
    Var merged = reindex(heads, {10, 3 * d}, {"i0/5", "i1/" + D, "i0%5", "i1%" + D});
    Var dw = grad(sum(matmul(merged, w) * dy), {w})[0];
    const std::vector<KernelInfo> kernels = plan({dw});
    REQUIRE(kernels.size() == 1);
    INFO(kernels[0].source);
    CHECK(has(kernels[0].source, "mj_rows_ok"));
    check_against_reference(dw);
  }
}

// An operand that does not depend on the outer loops is packed once per launch only when its
// panels serve several blocks (A: several column blocks or outer iterations; B: several row
// blocks or outer iterations); else per block (codegen/cpp_packing.cc pack_operand_once). Both
// sides in both ways, over two reduction blocks (300 steps), with and without prologues. Values
// in [0, 1): sums of 300 positive terms stay within the reference's 1e-5 (signed ones cancel).
TEST_CASE("operands packed once or per block, as their reuse decides, match the reference",
          "[fusion][cost]") {
  for (int64_t m : {7, 200}) {
    for (int64_t n : {9, 1100}) {
      INFO("rows " << m << ", columns " << n);
      Var a = rand({300, m}, 1), b = rand({300, n}, 2);
      eval({a, b});
      check_against_reference(matmul(transpose(exp(a * 0.1), {1, 0}), b * 0.5));
      check_against_reference(matmul(transpose(a, {1, 0}), b));
    }
  }
  // Batched over an outer loop: an invariant B serves every batch even in one row block.
  Var x = rand({3, 5, 300}, 3), w = rand({300, 20}, 4);
  eval({x, w});
  check_against_reference(matmul(x, tanh(w)));
}

// An operand packed along the reduction under guards (a reindex with a fill value) copies a
// block of steps without its tests where they hold at the block's first and last step, and
// keeps them elsewhere: rows out of range (2 * i0 - 1 < 0), steps out of range in the first
// block only (i1 - 3 < 0) and in the last (i1 - 3 >= 600), across three blocks of kc steps.
TEST_CASE("operands packed along the reduction under guards match the reference",
          "[fusion][cost]") {
  Var x = rand({40, 600}, 1), w = rand({602, 24}, 2);
  eval({x, w});
  Var a = reindex(x, {21, 602}, {"i0 * 2 - 1", "i1 - 3"}, 0.25);
  check_against_reference(matmul(a, w));
  check_against_reference(matmul(a * 2.0, w));
}

// A producer read only as one product's operand is computed while packing it, once per element
// however expensive within kPrologueCostLimit: not stored as if the operand's broadcast
// recomputed it per column (a GELU feeding the FFN's second product). Read by two products it
// is stored once. Where the forward product and the weight gradient read the same broadcast,
// the producer is stored, never the broadcast (a transformer's LayerNorm over the embedding
// sum, 9 ops per element, fused there made its [16,64,128,384] broadcast look worth
// materialising: 193 MiB).
TEST_CASE("an expensive producer read only as one contraction's operand is its prologue",
          "[fusion][cost]") {
  Var h = randn({4, 24, 40}, 1), w = randn({40, 56}, 2), w2 = randn({40, 8}, 3);
  Var r = randn({4, 24, 56}, 6);
  eval({h, w, w2, r});
  Var y = matmul(gelu_tanh(h), w);
  const std::string e = explain({y});
  INFO(e);
  CHECK(has(e, "fused into kernel 0 as a contraction prologue"));
  CHECK(plan({y}).size() == 1);
  check_against_reference(y);
  Var a = gelu_tanh(h);
  Var y1 = matmul(a, w), y2 = matmul(a, w2);
  const std::string e2 = explain({y1, y2});
  INFO(e2);
  CHECK(has(e2, "binary.mul stored"));
  CHECK(plan({y1, y2}).size() == 3);
  check_against_reference({y1, y2});
  Var y3 = matmul(gelu_tanh(h), w);
  Var dw = grad(sum(y3 * r), {w})[0];
  const std::string e3 = explain({y3, dw});
  INFO(e3);
  CHECK_FALSE(has(e3, "broadcast_to stored"));
  check_against_reference({y3, dw});
}

TEST_CASE("a producer too costly to repeat while packing a conv2d operand is stored",
          "[fusion][cost]") {
  Var x = randn({2, 4, 9, 9}, 1), w = randn({5, 4, 3, 3}, 2), mu = randn({1, 4, 1, 1}, 3);
  eval({x, w, mu});
  // Cost 5 per element, packed about 9 times (3x3 windows): 45 > kPrologueCostLimit.
  Var xn = tanh(x - mu) * 2.0;
  Var y = conv2d(xn, w, 1, 1);
  const std::string e = explain({y});
  INFO(e);
  CHECK(has(e, "stored: as the prologue of kernel"));
  CHECK(plan({y}).size() == 2);
  check_against_reference({y});
  // A cheap one (relu: 1 per element, about 9 in all) stays a prologue of the one kernel.
  Var y2 = conv2d(relu(x), w, 1, 1);
  CHECK(plan({y2}).size() == 1);
  CHECK(has(explain({y2}), "as a contraction prologue"));
  check_against_reference({y2});
}

TEST_CASE("fusion_barrier stores the value, changes no result and passes gradients through",
          "[fusion][cost]") {
  Var a = randn({12, 20}, 1), b = randn({20, 8}, 2);
  eval({a, b});
  Var fused = sum(exp(a) * 2.0, {1});
  Var barred = sum(fusion_barrier(exp(a)) * 2.0, {1});
  CHECK(plan({fused}).size() == 1);
  CHECK(plan({barred}).size() == 2);
  const std::string e = explain({barred});
  INFO(e);
  CHECK(has(e, "unary.exp stored: fusion_barrier()"));
  // The same sums (a separate kernel may round exp's last bit differently).
  const std::vector<float> fv = fused.to_vector<float>(), bv = barred.to_vector<float>();
  REQUIRE(fv.size() == bv.size());
  for (size_t k = 0; k < fv.size(); ++k) CHECK(bv[k] == Approx(fv[k]).epsilon(1e-6));
  check_against_reference({barred});
  // Gradients: d/da sum(fusion_barrier(a * a) * 3) = 6a, the same as without the barrier.
  std::vector<Var> g1 = grad(sum(fusion_barrier(a * a) * 3.0), {a});
  std::vector<Var> g2 = grad(sum(a * a * 3.0), {a});
  CHECK(g1[0].to_vector<float>() == g2[0].to_vector<float>());
  // Inside jit, and on a value that is also an output; a barrier on a leaf changes nothing.
  auto f = jit([](Var a, Var b) { return matmul(fusion_barrier(relu(a)), fusion_barrier(b)); });
  Var y = f(a, b);
  CHECK(y.to_vector<float>() == matmul(relu(a), b).to_vector<float>());
  Var c = fusion_barrier(a);
  CHECK(c.to_vector<float>() == a.to_vector<float>());
  // The program cache keeps the barrier apart from the same graph without it.
  reset_stats();
  eval({sum(exp(a) * 2.0, {1})});
  eval({sum(fusion_barrier(exp(a)) * 2.0, {1})});
  CHECK(stats().kernels_launched == 3);
}

TEST_CASE("fusion_barrier of an undefined Var is an Error naming the op", "[fusion][cost]") {
  try {
    fusion_barrier(Var());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(has(e.what(), "fusion_barrier"));
  }
}
