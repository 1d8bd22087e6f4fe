// Kernel specs (codegen/kernel_spec.h): every kernel the planner makes survives a JSON round
// trip exactly, and malformed or hostile specs are refused with an Error naming the field.
// Nothing is compiled or run here.
#include <metajit/metajit.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "codegen/cpp_emitter.h"
#include "codegen/kernel_spec.h"
#include "codegen/pipeline.h"
#include "codegen/verify_kernel_ir.h"
#include "meta_ops/ops.h"
#include "support/exceptions.h"
#include "support/scoped_env.h"

using namespace metajit;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

using Strs = std::vector<std::string>;

struct Case {
  std::string name;
  std::vector<Var> outputs;
};

// Graphs whose kernels read extras ({"e": slot, "at": [...]} in their specs).
std::vector<Case> extras_graphs() {
  std::vector<Case> c;
  Var x = rand({3, 4}, 1);
  Var i1 = array(std::vector<int64_t>{2, -1, 0, 5}, {4});
  Var i2 = array(std::vector<int32_t>{0, 1, 2, 0, 3, 1}, {2, 3});
  c.push_back({"gather", {gather(x, 1, cast(rand({3, 2}, 40) * 4.0, DType::Int64))}});
  c.push_back({"scatter_add", {scatter_add(x, 0, i2, rand({2, 3}, 41))}});
  c.push_back({"index_select embedding", {index_select(x, 1, i1), embedding(x, i2) * 2.0}});
  c.push_back({"one_hot", {one_hot(i1, 5), one_hot(i2, 3, DType::Int64)}});
  c.push_back({"reindex extras nested, conditions",
               {reindex(x, {4, 2}, Strs{"@e0(i0)", "@e1(@e0(i1), i0%3)"}, -1.0,
                        Strs{"@e1(1, i1) > 1 || i0 == @e0(3)"}, {i1, i2})}});
  c.push_back({"reindex_reduce extras",
               {reindex_reduce(x, ReduceOp::Max, {4}, Strs{"@e0(i1)"}, Strs{"@e1(i0%2, i1%3)==2"},
                               {i1, i2})}});
  return c;
}

// Graphs covering every op and meta-op the planner lowers.
// One Adam step's new m, v and p from m, v and p, with g = x * 2: one kernel writing three
// values at O1 (codegen/output_merging.h).
std::vector<Var> adam_like(const Var& m, const Var& v, const Var& p) {
  Var g = p * 2.0;
  Var m2 = m * 0.9 + g * 0.1, v2 = v * 0.999 + g * g * 0.001;
  return {m2, v2, p - m2 * 0.01 / (sqrt(v2) + 1e-8)};
}

std::vector<Case> graphs() {
  std::vector<Case> c;
  Var x = rand({3, 4}, 1), y = rand({3, 4}, 2), v = rand({4}, 3);
  Var xi = cast(x * 10.0, DType::Int32), yi = cast(y * 10.0, DType::Int32);
  for (int op = 0; op <= int(UnaryOp::BitwiseNot); ++op) {
    if (UnaryOp(op) != UnaryOp::BitwiseNot)  // integers only
      c.push_back({std::string("unary ") + unary_op_name(UnaryOp(op)),
                   {unary(UnaryOp(op), x * 2.0 + 1.0)}});
    c.push_back({std::string("int unary ") + unary_op_name(UnaryOp(op)), {unary(UnaryOp(op), xi)}});
  }
  for (int op = 0; op <= int(BinaryOp::ShiftRight); ++op) {
    if (!is_bitwise(BinaryOp(op)))  // integers only
      c.push_back({std::string("binary ") + binary_op_name(BinaryOp(op)),
                   {binary(BinaryOp(op), exp(x), y - 0.5)}});
    c.push_back({std::string("int binary ") + binary_op_name(BinaryOp(op)),
                 {binary(BinaryOp(op), xi, yi)}});
  }
  c.push_back({"chain", {sigmoid(tanh(x * y + 1.0) - sqrt(abs(y))) / (x + 2.0)}});
  c.push_back({"where", {where(x > y, x, y * 3.0)}});
  c.push_back({"where int cond", {where(xi, x, y)}});
  c.push_back({"cast", {cast(x, DType::Int64), cast(xi, DType::Bool), cast(x, DType::Float64)}});
  c.push_back({"broadcast", {broadcast_to(v, {2, 3, 4}) + 1.0, x + v}});
  c.push_back({"broadcast dims", {broadcast_to(rand({3}, 4), {3, 5}, {1}) * 2.0}});
  c.push_back({"reindex pad", {reindex(x, {5, 6}, {"i0-1", "i1-1"}, -1.0)}});
  c.push_back(
      {"reindex conditions",
       {reindex(x, {3, 4, 2}, Strs{"i0", "(i1+i2)%4"}, 7.0, Strs{"i2>i0", "i1==3 && i2==1"})}});
  for (ReduceOp op : {ReduceOp::Add, ReduceOp::Mul, ReduceOp::Max, ReduceOp::Min}) {
    c.push_back({std::string("reindex_reduce ") + reduce_op_name(op),
                 {reindex_reduce(x + 1.0, op, {2, 5}, Strs{"i0%2", "i1+1"}, Strs{"i1==2"})}});
  }
  c.push_back(
      {"reduce keepdims",
       {max(rand({2, 3, 4}, 5), {0, 2}, true), sum(x, {1}), mean(x, {0, 1}), prod(x, {0})}});
  c.push_back({"reduce all", {sum(x * y), min(xi)}});
  c.push_back({"softmax", {softmax(x, 1), softmax(rand({2, 3, 4}, 6), 0)}});
  c.push_back(
      {"matmul", {matmul(x, rand({4, 5}, 7)), matmul(rand({2, 3, 4}, 8), rand({4, 2}, 9))}});
  c.push_back({"conv2d",
               {conv2d(rand({1, 2, 6, 6}, 10), rand({3, 2, 3, 3}, 11), 1, 1),
                conv2d(rand({2, 1, 7, 7}, 12), rand({2, 1, 3, 3}, 13), 2, 0, 2)}});
  c.push_back(
      {"max_pool2d",
       {max_pool2d(rand({1, 2, 6, 6}, 14), 2, 2), max_pool2d(rand({1, 1, 5, 5}, 15), 3, 2, 1)}});
  c.push_back({"transpose sum", {sum(transpose(rand({2, 3, 4}, 16), {2, 0, 1}), {0})}});
  c.push_back({"reshape chain",
               {exp(reshape(transpose(reshape(rand({2, 3, 4}, 17), {6, 4}), {1, 0}), {2, 12}))}});
  c.push_back({"0-d", {exp(array<float>({1.5f}, {})) + 1.0, sum(array<float>({2.f}, {}))}});
  c.push_back({"iota", {cast(arange(10), DType::Float32) * 0.5, arange(4, DType::Int64) + 1}});
  c.push_back({"multi-output", adam_like(rand({3, 4}, 18), rand({3, 4}, 19), rand({3, 4}, 20))});
  for (Case& e : extras_graphs()) c.push_back(std::move(e));
  return c;
}

std::vector<KernelIR> planned_kernels(const std::vector<Var>& outputs) {
  std::vector<NodePtr> nodes;
  for (const Var& v : outputs) nodes.push_back(v.node());
  PipelinePlan p = build_pipeline(nodes);
  std::vector<KernelIR> out;
  for (const LoweredKernel& k : p.kernels) out.push_back(k.ir);
  // METAJIT_SPECIALIZE_SHAPES: shapes become constants in the index expressions.
  for (const FusedGroup& g : p.fusion.groups)
    out.push_back(lower_group(p.graph, p.fusion, g, true).ir);
  return out;
}

int expr_depth(const IndexExpr& e) {
  int d = 0;
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c) d = std::max(d, expr_depth(*c));
  return d + 1;
}

struct Shape_ {
  int expr = 0, block = 0;
};
void measure(const KBlock& b, int depth, Shape_& s) {
  s.block = std::max(s.block, depth);
  for (const KStmt& st : b.stmts) {
    for (const auto& e : st.index) s.expr = std::max(s.expr, expr_depth(*e));
    if (st.cond) s.expr = std::max(s.expr, expr_depth(*st.cond));
    if (st.body) measure(*st.body, depth + 1, s);
  }
}

void check_round_trip(const KernelIR& ir) {
  const std::string text = serialize_ir(ir);
  INFO(text);
  const json spec = kernel_spec_to_json(ir);
  const KernelIR back = kernel_spec_from_json(spec);
  CHECK(serialize_ir(back) == text);
  CHECK(back.ops == ir.ops);
  // Exact inverse at the JSON level too, and through text.
  CHECK(kernel_spec_to_json(back) == spec);
  const KernelIR parsed = kernel_spec_from_json(json::parse(spec.dump()));
  CHECK(serialize_ir(parsed) == text);
  CHECK(kernel_spec_from_json(json::parse(spec.dump(2))).ops == ir.ops);
}

// ---- a hand-built kernel whose paths the error table names ----

IndexExprPtr bin(IxKind k, IndexExprPtr a, IndexExprPtr b) {
  auto e = std::make_shared<IndexExpr>();
  e->kind = k;
  e->a = std::move(a);
  e->b = std::move(b);
  return e;
}

// map, in0 float32[p0,p1] -> out float32[p0]:
//   v0 = scalar s0
//   v2 = reduce.add i1<p1 { v1 = load in0[i0,i1]; yield v1 }
//   v3 = binary.add v2 v0
//   v5 = guard (i0<3) else s1 { v4 = unary.exp v3; yield v4 }
//   yield v5
KernelIR sample_ir() {
  KernelIR ir;
  ir.kind = KernelKind::Map;
  ir.inputs.push_back({DType::Float32, {ix_param(0), ix_param(1)}});
  ir.output = {DType::Float32, {ix_param(0)}};
  ir.loops.push_back({0, ix_param(0)});
  KStmt s0;
  s0.kind = KOp::Scalar;
  s0.id = 0;
  s0.slot = 0;
  KStmt load;
  load.kind = KOp::Load;
  load.id = 1;
  load.buffer = 0;
  load.index = {ix_var(0), ix_var(1)};
  KStmt red;
  red.kind = KOp::Reduce;
  red.id = 2;
  red.op = int(ReduceOp::Add);
  red.loops.push_back({1, ix_param(1)});
  red.body = std::make_shared<KBlock>();
  red.body->stmts.push_back(load);
  red.body->result = 1;
  KStmt add;
  add.kind = KOp::Binary;
  add.id = 3;
  add.op = int(BinaryOp::Add);
  add.args = {2, 0};
  KStmt ex;
  ex.kind = KOp::Unary;
  ex.id = 4;
  ex.op = int(UnaryOp::Exp);
  ex.args = {3};
  KStmt guard;
  guard.kind = KOp::Guard;
  guard.id = 5;
  guard.slot = 1;
  guard.cond = bin(IxKind::Lt, ix_var(0), ix_const(3));
  guard.body = std::make_shared<KBlock>();
  guard.body->stmts.push_back(ex);
  guard.body->result = 4;
  ir.body.stmts = {s0, red, add, guard};
  ir.body.result = 5;
  ir.num_params = 2;
  ir.num_scalars = 2;
  ir.num_vars = 2;
  ir.ops = {"reduce.add(axes=1)", "binary.add", "reindex"};
  return ir;
}

json sample_spec() {
  return kernel_spec_to_json(sample_ir());
}

json scatter_spec() {
  Var x = rand({6}, 21);
  std::vector<NodePtr> nodes{reindex_reduce(x, ReduceOp::Max, {3}, {"i0/2"}).node()};
  PipelinePlan p = build_pipeline(nodes);
  for (const LoweredKernel& k : p.kernels)
    if (k.ir.kind == KernelKind::Scatter) return kernel_spec_to_json(k.ir);
  FAIL("no scatter kernel planned");
  return {};
}

json nested(int depth, json leaf) {
  for (int k = 0; k < depth; ++k) leaf = json::array({"neg", std::move(leaf)});
  return leaf;
}

}  // namespace

TEST_CASE("spec JSON format", "[kernel_spec]") {
  const json j = sample_spec();
  CHECK(j["version"] == kKernelSpecVersion);
  CHECK(j["kind"] == "map");
  CHECK(j["inputs"][0] == json::parse(R"({"dtype":"float32","dims":[{"p":0},{"p":1}]})"));
  CHECK(j["loops"] == json::parse(R"([{"var":0,"extent":{"p":0}}])"));
  const json& stmts = j["body"]["stmts"];
  CHECK(stmts[0] == json::parse(R"({"kind":"scalar","id":0,"dtype":"float32","slot":0})"));
  CHECK(stmts[1]["body"]["stmts"][0] ==
        json::parse(R"({"kind":"load","id":1,"dtype":"float32","buffer":0,
                        "index":[{"i":0},{"i":1}]})"));
  CHECK(stmts[1]["op"] == "add");
  CHECK(stmts[2] ==
        json::parse(R"({"kind":"binary","id":3,"dtype":"float32","op":"add","args":[2,0]})"));
  CHECK(stmts[3]["cond"] == json::parse(R"(["lt",{"i":0},3])"));
  CHECK(stmts[3]["body"]["stmts"][0]["op"] == "exp");
  CHECK(j["body"]["result"] == 5);
  CHECK(!j.contains("target"));
  CHECK(j["ir"] == serialize_ir(sample_ir()));
  CHECK(j["ops"] == json::array({"reduce.add(axes=1)", "binary.add", "reindex"}));
  const json s = scatter_spec();
  CHECK(s["kind"] == "scatter");
  CHECK(s["scatter_op"] == "max");
  CHECK(s["target"].size() == 1);
  CHECK(s.contains("target_valid"));
}

TEST_CASE("every planned kernel survives the JSON round trip exactly", "[kernel_spec]") {
  size_t kernels = 0, scatters = 0, guards = 0, reduces = 0, iotas = 0;
  Shape_ deepest;
  auto count = [&](const KBlock& b, auto&& self) -> void {
    for (const KStmt& st : b.stmts) {
      guards += st.kind == KOp::Guard;
      reduces += st.kind == KOp::Reduce;
      iotas += st.kind == KOp::Iota;
      if (st.body) self(*st.body, self);
    }
  };
  for (int opt : {0, 1}) {
    metajit_test::ScopedEnv env("METAJIT_OPT_LEVEL", std::to_string(opt));
    for (const Case& c : graphs()) {
      INFO(c.name << " at O" << opt);
      for (const KernelIR& ir : planned_kernels(c.outputs)) {
        check_round_trip(ir);
        ++kernels;
        scatters += ir.kind == KernelKind::Scatter;
        count(ir.body, count);
        measure(ir.body, 1, deepest);
        for (const auto& e : ir.target) deepest.expr = std::max(deepest.expr, expr_depth(*e));
        if (ir.target_valid) deepest.expr = std::max(deepest.expr, expr_depth(*ir.target_valid));
      }
    }
  }
  INFO("deepest expression " << deepest.expr << ", deepest block " << deepest.block);
  CHECK(kernels > 200);
  CHECK(scatters >= 8);
  CHECK(guards > 0);
  CHECK(reduces > 0);
  CHECK(iotas > 0);
  // The reader's limits (256 expression levels, 64 blocks) leave real kernels ample room.
  CHECK(deepest.expr < 64);
  CHECK(deepest.block < 16);
}

namespace {

// The first statement of `b` (or of a block inside it) of kind `k`.
KStmt* find_stmt(KBlock& b, KOp k) {
  for (KStmt& st : b.stmts) {
    if (st.kind == k) return &st;
    if (st.body)
      if (KStmt* inner = find_stmt(*st.body, k)) return inner;
  }
  return nullptr;
}

// A copy of `ir` that shares no block with it (a KernelIR copy shares its nested bodies).
KernelIR deep_copy(const KernelIR& ir) {
  return kernel_spec_from_json(kernel_spec_to_json(ir));
}

// verify_kernel_ir's verdict on a copy of `ir` after `edit`: its message, "" when it finds
// nothing. A broken kernel in a spec (a manifest's) is refused too.
std::string broken(const KernelIR& ir, const std::function<void(KernelIR&)>& edit) {
  KernelIR k = deep_copy(ir);
  edit(k);
  const std::string problem = verify_kernel_ir(k).value_or("");
  if (!problem.empty()) {
    const std::string refused =
        metajit_test::message_of<Error>([&] { kernel_spec_from_json(kernel_spec_to_json(k)); });
    CHECK_THAT(refused, Contains("kernel spec: "));
  }
  return problem;
}

}  // namespace

TEST_CASE("every planned kernel holds the kernel IR's invariants, and each broken one is named",
          "[kernel_spec]") {
  size_t kernels = 0;
  for (int opt : {0, 1}) {
    metajit_test::ScopedEnv env("METAJIT_OPT_LEVEL", std::to_string(opt));
    for (const Case& c : graphs()) {
      INFO(c.name << " at O" << opt);
      for (const KernelIR& ir : planned_kernels(c.outputs)) {
        INFO(serialize_ir(ir));
        CHECK(verify_kernel_ir(ir).value_or("") == "");
        ++kernels;
      }
    }
  }
  CHECK(kernels > 200);

  // A kernel with a load, a reduction and a binary op: one edit each breaks an invariant.
  const std::vector<KernelIR> planned =
      planned_kernels({sum(rand({3, 4}, 50) * rand({3, 4}, 51), {1}) + 1.0});
  REQUIRE(planned.size() >= 1);
  KernelIR ir = deep_copy(planned[0]);
  REQUIRE(find_stmt(ir.body, KOp::Load));
  REQUIRE(find_stmt(ir.body, KOp::Binary));
  CHECK(broken(ir, [](KernelIR&) {}) == "");
  CHECK_THAT(broken(ir, [](KernelIR& k) { find_stmt(k.body, KOp::Binary)->args[0] = 999; }),
             Contains("reads v999 before it is defined"));
  CHECK_THAT(broken(ir, [](KernelIR& k) { find_stmt(k.body, KOp::Load)->index.pop_back(); }),
             Contains("indexes input") && Contains("expressions for its"));
  CHECK_THAT(broken(ir, [](KernelIR& k) { find_stmt(k.body, KOp::Load)->buffer = 7; }),
             Contains("loads from input 7"));
  CHECK_THAT(broken(ir,
                    [](KernelIR& k) {
                      find_stmt(k.body, KOp::Load)->index[0] = ix_var(k.num_vars - 1 + 40);
                    }),
             Contains("outside the loops binding it"));
  CHECK_THAT(broken(ir, [](KernelIR& k) { find_stmt(k.body, KOp::Load)->index[0] = ix_extent(0); }),
             Contains("extent leaf"));
  CHECK_THAT(broken(ir, [](KernelIR& k) { find_stmt(k.body, KOp::Load)->index[0] = ix_param(99); }),
             Contains("reads parameter 99"));
  CHECK_THAT(broken(ir,
                    [](KernelIR& k) {
                      find_stmt(k.body, KOp::Binary)->id = find_stmt(k.body, KOp::Load)->id;
                    }),
             Contains("defined twice"));
  CHECK_THAT(broken(ir, [](KernelIR& k) { k.body.result = 999; }), Contains("yields v999"));
  CHECK_THAT(broken(ir, [](KernelIR& k) { k.loops.pop_back(); }), Contains("a map has"));
  CHECK_THAT(broken(ir, [](KernelIR& k) { find_stmt(k.body, KOp::Binary)->args.pop_back(); }),
             Contains("has 1 operands, not 2"));
  CHECK_NOTHROW(kernel_spec_from_json(kernel_spec_to_json(ir)));
}

TEST_CASE("a multi-output kernel's further outputs come back exactly and are checked",
          "[kernel_spec]") {
  const std::vector<KernelIR> planned =
      planned_kernels(adam_like(rand({3, 4}, 21), rand({3, 4}, 22), rand({3, 4}, 23)));
  REQUIRE(planned.size() == 2);  // the kernel, and the same with shapes specialised
  const KernelIR& ir = planned[0];
  REQUIRE(ir.extra_outputs.size() == 2);
  check_round_trip(ir);
  CHECK(kernel_spec_to_json(ir).contains("extra_outputs"));
  CHECK_THAT(serialize_ir(ir), Contains("out1 float32[p0,p1] = v"));
  CHECK(broken(ir, [](KernelIR&) {}) == "");
  CHECK_THAT(broken(ir, [](KernelIR& k) { k.extra_outputs[0].value = 999; }),
             Contains("extra output 1 stores v999, which is not a top-level statement"));
  CHECK_THAT(broken(ir, [](KernelIR& k) { k.extra_outputs[1].buffer.dims.pop_back(); }),
             Contains("extra output 2 does not have the output's extents"));
  CHECK_THAT(broken(ir, [](KernelIR& k) { k.extra_outputs[1].buffer.dims[0] = ix_const(3); }),
             Contains("extra output 2 does not have the output's extents"));
  CHECK_THAT(broken(ir, [](KernelIR& k) { k.extra_outputs[0].buffer.dtype = DType::Int32; }),
             Contains("extra output 1 is int32 but stores v"));
  // A value inside a reduction's body is not stored per output element.
  const std::vector<KernelIR> reduced = planned_kernels({sum(rand({3, 4}, 24) * 2.0, {1}) + 1.0});
  KernelIR r = deep_copy(reduced[0]);
  REQUIRE(find_stmt(r.body, KOp::Reduce));
  const KStmt* inner = &find_stmt(r.body, KOp::Reduce)->body->stmts.back();
  KOutput o;
  o.buffer = r.output;
  o.buffer.dtype = inner->dtype;
  o.value = inner->id;
  r.extra_outputs.push_back(o);
  CHECK_THAT(verify_kernel_ir(r).value_or(""), Contains("not a top-level statement"));

  // The reader: only map kernels have the field, and each entry is checked where it is read.
  json spec = kernel_spec_to_json(ir);
  spec["extra_outputs"][0]["value"] = "v3";
  CHECK_THAT(metajit_test::message_of<Error>([&] { kernel_spec_from_json(spec); }),
             Contains("extra_outputs[0].value") && Contains("expected an integer"));
  spec = kernel_spec_to_json(ir);
  spec["extra_outputs"][1]["stride"] = 1;
  CHECK_THAT(metajit_test::message_of<Error>([&] { kernel_spec_from_json(spec); }),
             Contains("extra_outputs[1]") && Contains("unknown field \"stride\""));
  const std::vector<KernelIR> scatter = planned_kernels(
      {reindex_reduce(rand({3, 4}, 25), ReduceOp::Add, {2, 5}, Strs{"i0%2", "i1+1"})});
  json s = kernel_spec_to_json(scatter[0]);
  REQUIRE(s["kind"] == "scatter");
  s["extra_outputs"] = spec["extra_outputs"];
  CHECK_THAT(metajit_test::message_of<Error>([&] { kernel_spec_from_json(s); }),
             Contains("unknown field \"extra_outputs\""));
}

TEST_CASE("index expressions come back exactly, unfolded", "[kernel_spec]") {
  // Trees the ix_* builders would fold (1+2, x+0, x*1, select on a constant) and every kind.
  auto un = [](IxKind k, IndexExprPtr a) {
    auto e = std::make_shared<IndexExpr>();
    e->kind = k;
    e->a = std::move(a);
    return e;
  };
  auto sel = [](IndexExprPtr c, IndexExprPtr a, IndexExprPtr b) {
    auto e = std::make_shared<IndexExpr>();
    e->kind = IxKind::Select;
    e->a = std::move(c);
    e->b = std::move(a);
    e->c = std::move(b);
    return e;
  };
  IndexExprPtr i0 = ix_var(0), p0 = ix_param(0);
  std::vector<IndexExprPtr> trees = {
      bin(IxKind::Add, ix_const(1), ix_const(2)),
      bin(IxKind::Add, i0, ix_const(0)),
      bin(IxKind::Mul, ix_const(1), i0),
      bin(IxKind::Div, i0, ix_const(0)),
      sel(ix_const(1), i0, p0),
      un(IxKind::Neg, ix_const(std::numeric_limits<int64_t>::min())),
      un(IxKind::Not, ix_const(std::numeric_limits<int64_t>::max())),
      bin(IxKind::Min, bin(IxKind::Max, i0, ix_const(-7)), p0),
  };
  for (IxKind k : {IxKind::Sub, IxKind::Mod, IxKind::Lt, IxKind::Le, IxKind::Gt, IxKind::Ge,
                   IxKind::Eq, IxKind::Ne, IxKind::And, IxKind::Or})
    trees.push_back(bin(k, i0, p0));
  for (const IndexExprPtr& t : trees) {
    KernelIR ir;
    ir.inputs.push_back({DType::Int64, {p0}});
    ir.output = {DType::Int64, {p0}};
    ir.loops.push_back({0, p0});
    KStmt load;
    load.kind = KOp::Load;
    load.dtype = DType::Int64;
    load.buffer = 0;
    load.index = {t};
    KStmt iota;
    iota.kind = KOp::Iota;
    iota.id = 1;
    iota.dtype = DType::Int64;
    iota.index = {t};
    KStmt guard;
    guard.kind = KOp::Guard;
    guard.id = 3;
    guard.dtype = DType::Int64;
    guard.cond = t;
    guard.slot = 0;
    guard.body = std::make_shared<KBlock>();
    guard.body->result = 1;
    ir.body.stmts = {load, iota, guard};
    ir.body.result = 3;
    ir.num_params = 1;
    ir.num_scalars = 1;
    ir.num_vars = 1;
    check_round_trip(ir);
  }
  CHECK(kernel_spec_to_json(sample_ir())["body"]["stmts"][3]["cond"] ==
        json::parse(R"(["lt",{"i":0},3])"));
}

TEST_CASE("malformed specs are refused with the offending path", "[kernel_spec]") {
  using Mutate = std::function<void(json&)>;
  struct Bad {
    const char* what;
    Mutate mutate;
    std::string path;     // as the message names it
    std::string message;  // part of the explanation
  };
  auto set = [](const char* pointer, json value) -> Mutate {
    return [=](json& j) { j[json::json_pointer(pointer)] = value; };
  };
  auto erase = [](const char* pointer, const char* key) -> Mutate {
    return [=](json& j) { j[json::json_pointer(pointer)].erase(key); };
  };
  const std::vector<Bad> table = {
      // version
      {"version 999", set("/version", 999), "version", "not supported"},
      {"version string", set("/version", "1"), "version", "expected an integer, got string"},
      {"version missing", erase("", "version"), "version", "missing field"},
      // the whole spec
      {"array",
       [](json& j) {
         j = json::array({1, 2});
       },
       "(top level)", "expected an object"},
      {"string", [](json& j) { j = "spec"; }, "(top level)", "expected an object, got string"},
      {"null", [](json& j) { j = nullptr; }, "(top level)", "expected an object, got null"},
      {"unknown top-level field", set("/extra", 1), "(top level)", "unknown field \"extra\""},
      {"target on a map", set("/target", json::array()), "(top level)", "only for scatter"},
      // sizes and kinds
      {"kind unknown", set("/kind", "gather"), "kind", "valid: map, scatter"},
      {"kind number", set("/kind", 3), "kind", "expected a string, got number"},
      {"num_params negative", set("/num_params", -1), "num_params", "out of range"},
      {"num_vars absurd", set("/num_vars", 5000), "num_vars", "valid: 0..4096"},
      {"num_scalars float", set("/num_scalars", 2.5), "num_scalars", "expected an integer"},
      {"num_params huge", set("/num_params", uint64_t(1) << 63), "num_params", "out of range"},
      {"inputs object", set("/inputs", json::object()), "inputs", "expected an array, got object"},
      {"output missing", erase("", "output"), "output", "missing field"},
      {"body missing", erase("", "body"), "body", "missing field"},
      {"ops missing", erase("", "ops"), "ops", "missing field"},
      {"ops newline", set("/ops/1", "x\nint evil;"), "ops[1]", "printable ASCII"},
      {"dtype unknown", set("/inputs/0/dtype", "float8"), "inputs[0].dtype",
       "valid: bool, int32, int64, float32, float64, int8, uint8, int16, float16, bfloat16"},
      {"dims string", set("/output/dims/0", "p0"), "output.dims[0]",
       "expected an index expression"},
      {"dims use a loop variable", set("/output/dims/0", json{{"i", 0}}), "output.dims[0].i",
       "no loop variable is in scope"},
      {"rank too large", set("/inputs/0/dims", json(std::vector<int>(65, 1))), "inputs[0].dims",
       "too large"},
      {"map loop count", set("/loops", json::array()), "loops", "one loop per output axis"},
      {"loop var out of range", set("/loops/0/var", 2), "loops[0].var", "out of range"},
      {"loop extent missing", erase("/loops/0", "extent"), "loops[0].extent", "missing field"},
      // statements
      {"stmt kind unknown", set("/body/stmts/0/kind", "store"), "body.stmts[0].kind",
       "valid: load, scalar, iota"},
      {"stmt id negative", set("/body/stmts/0/id", -1), "body.stmts[0].id", "out of range"},
      {"stmt id string", set("/body/stmts/0/id", "v0"), "body.stmts[0].id", "expected an integer"},
      {"stmt id twice", set("/body/stmts/2/id", 1), "body.stmts[2].id", "defined twice"},
      {"stmt dtype missing", erase("/body/stmts/2", "dtype"), "body.stmts[2].dtype",
       "missing field"},
      {"stmts not an array", set("/body/stmts", json::object()), "body.stmts", "expected an array"},
      {"stmt not an object", set("/body/stmts/1", 7), "body.stmts[1]", "expected an object"},
      {"field of another kind", set("/body/stmts/0/buffer", 0), "body.stmts[0]",
       "unknown field \"buffer\""},
      {"scalar slot out of range", set("/body/stmts/0/slot", 2), "body.stmts[0].slot",
       "valid: 0..1"},
      {"scalar slot missing", erase("/body/stmts/0", "slot"), "body.stmts[0].slot", "missing"},
      {"load buffer out of range", set("/body/stmts/1/body/stmts/0/buffer", 1),
       "body.stmts[1].body.stmts[0].buffer", "valid: 0..0"},
      {"load dtype", set("/body/stmts/1/body/stmts/0/dtype", "int32"),
       "body.stmts[1].body.stmts[0].dtype", "buffer's dtype"},
      {"load index count", set("/body/stmts/1/body/stmts/0/index", json::array({0})),
       "body.stmts[1].body.stmts[0].index", "one index per axis of input 0 (2), got 1"},
      {"param out of range", set("/body/stmts/1/body/stmts/0/index/0", json{{"p", 2}}),
       "body.stmts[1].body.stmts[0].index[0].p", "valid: 0..1"},
      {"var out of range", set("/body/stmts/1/body/stmts/0/index/1", json{{"i", 7}}),
       "body.stmts[1].body.stmts[0].index[1].i", "valid: 0..1"},
      {"var out of scope", set("/body/stmts/3/cond/1", json{{"i", 1}}), "body.stmts[3].cond[1].i",
       "not a loop variable in scope here (in scope: i0)"},
      {"expression float", set("/body/stmts/3/cond/2", 1.5), "body.stmts[3].cond[2]",
       "expected an index expression"},
      {"expression huge constant", set("/body/stmts/3/cond/2", uint64_t(1) << 63),
       "body.stmts[3].cond[2]", "out of range"},
      {"expression op unknown", set("/body/stmts/3/cond/0", "pow"), "body.stmts[3].cond[0]",
       "unknown index operator \"pow\""},
      {"expression arity", set("/body/stmts/3/cond", json::parse(R"(["lt", 1])")),
       "body.stmts[3].cond", "takes 2 operand(s), got 1"},
      {"expression two keys", set("/body/stmts/3/cond/1", json{{"i", 0}, {"p", 0}}),
       "body.stmts[3].cond[1]", "expected an index expression"},
      // Deeper than the limit, not 10000 deep: copying such a json (this test does) recurses once
      // per level, which overflows 8 MB under ASan. Files are read with a bound on nesting
      // (cache/untrusted_json.h), so a deeper document never becomes a json value at all.
      {"expression depth 1000", set("/body/stmts/3/cond", nested(1000, 1)), "body.stmts[3].cond",
       "nested deeper than 256"},
      {"unary op unknown", set("/body/stmts/3/body/stmts/0/op", "erfc"),
       "body.stmts[3].body.stmts[0].op", "valid: neg, abs, exp"},
      {"unary op on int", set("/body/stmts/3/body/stmts/0/dtype", "int32"),
       "body.stmts[3].body.stmts[0].dtype", "needs a float type"},
      {"binary op unknown", set("/body/stmts/2/op", "xor"), "body.stmts[2].op",
       "valid: add, sub, mul"},
      {"bitwise op on float", set("/body/stmts/2/op", "shift_left"), "body.stmts[2].dtype",
       "needs bool or an integer type"},
      {"binary op missing", erase("/body/stmts/2", "op"), "body.stmts[2].op", "missing field"},
      {"args count", set("/body/stmts/2/args", json::array({2})), "body.stmts[2].args",
       "expected 2 argument(s), got 1"},
      {"args later id", set("/body/stmts/2/args/1", 5), "body.stmts[2].args[1]",
       "v5 is not defined before this statement"},
      {"args own id", set("/body/stmts/2/args/0", 3), "body.stmts[2].args[0]", "not defined"},
      {"args inner id", set("/body/stmts/2/args/0", 1), "body.stmts[2].args[0]", "not defined"},
      {"args string", set("/body/stmts/2/args/0", "v2"), "body.stmts[2].args[0]",
       "expected an integer"},
      {"args negative", set("/body/stmts/2/args/0", -2), "body.stmts[2].args[0]", "out of range"},
      {"reduce op unknown", set("/body/stmts/1/op", "avg"), "body.stmts[1].op",
       "valid: add, mul, max, min, mean"},
      {"reduce without body", erase("/body/stmts/1", "body"), "body.stmts[1].body",
       "missing field"},
      {"reduce loops missing", erase("/body/stmts/1", "loops"), "body.stmts[1].loops",
       "missing field"},
      {"reduce rebinds i0", set("/body/stmts/1/loops/0/var", 0), "body.stmts[1].loops[0].var",
       "already bound"},
      {"guard without body", erase("/body/stmts/3", "body"), "body.stmts[3].body", "missing field"},
      {"guard without cond", erase("/body/stmts/3", "cond"), "body.stmts[3].cond", "missing field"},
      {"guard slot", set("/body/stmts/3/slot", 9), "body.stmts[3].slot", "out of range"},
      {"result undefined", set("/body/result", 99), "body.result", "v99 is not defined"},
      {"result inner", set("/body/result", 4), "body.result", "v4 is not defined"},
      {"result missing", erase("/body", "result"), "body.result", "missing field"},
      {"block depth",
       [](json& j) {
         json b = j["body"];
         for (int k = 0; k < 100; ++k) {
           json g = {{"kind", "guard"}, {"id", 1000 + k}, {"dtype", "float32"},
                     {"cond", 1},       {"slot", 0},      {"body", b}};
           b = {{"stmts", json::array({g})}, {"result", 1000 + k}};
         }
         j["body"] = b;
       },
       "body", "blocks nested deeper than 64"},
  };
  for (const Bad& b : table) {
    INFO(b.what);
    json j = sample_spec();
    REQUIRE_NOTHROW(kernel_spec_from_json(j));
    b.mutate(j);
    CHECK_THROWS_AS(kernel_spec_from_json(j), Error);
    CHECK_THROWS_WITH(kernel_spec_from_json(j),
                      Contains("kernel spec: " + b.path + ":") && Contains(b.message));
  }

  // A deep path keeps both ends and stays short.
  {
    json j = sample_spec();
    j["body"]["stmts"][3]["cond"] = nested(200, json::array({"pow", 1, 2}));
    std::string message;
    try {
      kernel_spec_from_json(j);
    } catch (const Error& e) {
      message = e.what();
    }
    CHECK_THAT(message, Contains("kernel spec: body.stmts[3].cond[1][1]") &&
                            Contains("]...[1][1]") &&
                            Contains("[1][0]: unknown index operator \"pow\""));
    CHECK(message.size() < 400);
  }

  // Scatter-only fields.
  const json s = scatter_spec();
  REQUIRE_NOTHROW(kernel_spec_from_json(s));
  for (const char* key : {"target", "target_valid", "scatter_op"}) {
    json j = s;
    j.erase(key);
    CHECK_THROWS_WITH(kernel_spec_from_json(j),
                      Contains(std::string("kernel spec: ") + key + ": missing field"));
  }
  json j = s;
  j["scatter_op"] = "avg";
  CHECK_THROWS_WITH(kernel_spec_from_json(j),
                    Contains("kernel spec: scatter_op: unknown reduce op"));
  j = s;
  j["target"].push_back(0);
  CHECK_THROWS_WITH(kernel_spec_from_json(j), Contains("kernel spec: target: one target index"));

  // Removing any member anywhere (but the informational "ir") is refused.
  std::vector<std::string> pointers;
  auto walk = [&](const json& v, const std::string& at, auto&& self) -> void {
    if (v.is_object())
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (at.empty() && it.key() == "ir") continue;
        pointers.push_back(at + "/" + it.key());
        self(it.value(), at + "/" + it.key(), self);
      }
    else if (v.is_array())
      for (size_t k = 0; k < v.size(); ++k) self(v[k], at + "/" + std::to_string(k), self);
  };
  const json base = sample_spec();
  walk(base, "", walk);
  for (const std::string& ptr : pointers) {
    INFO(ptr);
    json m = base;
    json::json_pointer jp(ptr);
    m[jp.parent_pointer()].erase(jp.back());
    CHECK_THROWS_WITH(kernel_spec_from_json(m), Contains("kernel spec: "));
  }
  json without_ir = base;
  without_ir.erase("ir");
  CHECK(serialize_ir(kernel_spec_from_json(without_ir)) == serialize_ir(sample_ir()));
}

TEST_CASE("fuzzed specs give a kernel or an Error, nothing else", "[kernel_spec]") {
  std::mt19937_64 rng(20240611);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  const char* words[] = {"add",     "neg", "select", "load", "guard", "float32", "int32", "map",
                         "scatter", "i",   "p",      "",     "\n",    "v0",      "exp",   "max"};
  auto random_value = [&]() -> json {
    switch (pick(10)) {
      case 0:
        return int64_t(pick(8));
      case 1:
        return -int64_t(pick(5)) - 1;
      case 2:
        return std::numeric_limits<uint64_t>::max() - pick(3);
      case 3:
        return 0.5 * double(pick(5));
      case 4:
        return words[pick(std::size(words))];
      case 5:
        return nullptr;
      case 6:
        return pick(2) == 1;
      case 7:
        return json::array({words[pick(std::size(words))], int64_t(pick(3))});
      case 8:
        return json{{pick(2) ? "i" : "p", int64_t(pick(3))}};
      default:
        return pick(2) ? json::array() : json::object();
    }
  };
  std::vector<json> seeds = {sample_spec(), scatter_spec()};
  {
    Var x = rand({2, 3, 4}, 30);
    std::vector<NodePtr> nodes{softmax(reindex(x, {2, 5, 4}, {"i0", "i1-1", "i2"}, 0.0), 1).node(),
                               conv2d(rand({1, 1, 5, 5}, 31), rand({1, 1, 3, 3}, 32), 1, 1).node()};
    for (const LoweredKernel& k : build_pipeline(nodes).kernels)
      seeds.push_back(kernel_spec_to_json(k.ir));
  }
  int accepted = 0, refused = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    json j = seeds[pick(seeds.size())];
    const size_t edits = 1 + pick(3);
    for (size_t e = 0; e < edits; ++e) {
      std::vector<json*> nodes;
      auto collect = [&](json& v, auto&& self) -> void {
        nodes.push_back(&v);
        if (v.is_structured())
          for (json& c : v) self(c, self);
      };
      collect(j, collect);
      *nodes[pick(nodes.size())] = random_value();
    }
    try {
      KernelIR ir = kernel_spec_from_json(j);
      ++accepted;
      // What is accepted is usable downstream: it prints, re-serialises and emits.
      CHECK(serialize_ir(kernel_spec_from_json(kernel_spec_to_json(ir))) == serialize_ir(ir));
      CHECK_FALSE(verify_kernel_ir(ir));
      for (CpuIsa isa : {CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512})
        CHECK_NOTHROW(emit_cpp(ir, CpuTarget{isa}));
      CHECK_NOTHROW(emit_cpp(ir, CpuTarget{CpuIsa::Avx512, true, true}));  // pairs and quads
    } catch (const Error& e) {
      ++refused;
      CHECK_THAT(e.what(), Contains("kernel spec: "));
    } catch (const std::exception& e) {
      FAIL("iteration " << iter << ": " << e.what() << "\n" << j.dump());
    } catch (...) {
      FAIL("iteration " << iter << ": unknown exception\n" << j.dump());
    }
  }
  INFO("accepted " << accepted << ", refused " << refused);
  CHECK(refused > 1000);
  CHECK(accepted > 0);
}

namespace {

// Every {"e": slot, "at": [...]} read in a spec (JSON), checked against the spec's inputs.
size_t count_extra_reads(const json& v, const json& inputs) {
  size_t n = 0;
  if (v.is_object() && v.contains("e") && v.contains("at")) {
    const json& buf = inputs.at(v["e"].get<size_t>());
    CHECK((buf["dtype"] == "int32" || buf["dtype"] == "int64"));
    CHECK(v["at"].size() == buf["dims"].size());
    ++n;
  }
  if (v.is_structured())
    for (const json& c : v) n += count_extra_reads(c, inputs);
  return n;
}

// map, in0 float32[p0,p1], in1 int64[p0] -> out float32[p0]:
//   v0 = load in0[@in1(i0), 0]
//   v2 = reduce.add i1<p1 { v1 = load in0[@in1(@in1(i0)), i1]; yield v1 }
//   v3 = binary.add v0 v2
//   yield v3
KernelIR extra_ir() {
  KernelIR ir;
  ir.kind = KernelKind::Map;
  ir.inputs.push_back({DType::Float32, {ix_param(0), ix_param(1)}});
  ir.inputs.push_back({DType::Int64, {ix_param(0)}});
  ir.output = {DType::Float32, {ix_param(0)}};
  ir.loops.push_back({0, ix_param(0)});
  KStmt first;
  first.kind = KOp::Load;
  first.id = 0;
  first.buffer = 0;
  first.index = {ix_extra(1, {ix_var(0)}), ix_const(0)};
  KStmt load;
  load.kind = KOp::Load;
  load.id = 1;
  load.buffer = 0;
  load.index = {ix_extra(1, {ix_extra(1, {ix_var(0)})}), ix_var(1)};
  KStmt red;
  red.kind = KOp::Reduce;
  red.id = 2;
  red.op = int(ReduceOp::Add);
  red.loops.push_back({1, ix_param(1)});
  red.body = std::make_shared<KBlock>();
  red.body->stmts.push_back(load);
  red.body->result = 1;
  KStmt add;
  add.kind = KOp::Binary;
  add.id = 3;
  add.op = int(BinaryOp::Add);
  add.args = {0, 2};
  ir.body.stmts = {first, red, add};
  ir.body.result = 3;
  ir.num_params = 2;
  ir.num_vars = 2;
  ir.ops = {"reindex", "reduce.add(axes=1)", "binary.add"};
  return ir;
}

}  // namespace

TEST_CASE("kernels that read extras survive the JSON round trip exactly", "[kernel_spec][extras]") {
  // The JSON form of a read, nested reads included.
  const json spec = kernel_spec_to_json(extra_ir());
  CHECK(spec["body"]["stmts"][0]["index"][0] == json::parse(R"({"e":1,"at":[{"i":0}]})"));
  CHECK(spec["body"]["stmts"][1]["body"]["stmts"][0]["index"][0] ==
        json::parse(R"({"e":1,"at":[{"e":1,"at":[{"i":0}]}]})"));
  check_round_trip(extra_ir());
  CHECK_THAT(serialize_ir(kernel_spec_from_json(spec)), Contains("@e1(@e1(i0))"));

  // Every kernel the planner makes for the extras ops, fused and not, shape-generic and
  // specialised, scatter targets and conditions included.
  size_t kernels = 0, reading = 0, scatters = 0;
  for (int opt : {0, 1}) {
    metajit_test::ScopedEnv env("METAJIT_OPT_LEVEL", std::to_string(opt));
    for (const Case& c : extras_graphs()) {
      INFO(c.name << " at O" << opt);
      size_t reads = 0;
      for (const KernelIR& ir : planned_kernels(c.outputs)) {
        check_round_trip(ir);
        const json j = kernel_spec_to_json(ir);
        const size_t n = count_extra_reads(j, j["inputs"]);
        reads += n;
        ++kernels;
        reading += n > 0;
        scatters += n > 0 && ir.kind == KernelKind::Scatter;
      }
      CHECK(reads > 0);
    }
  }
  CHECK(reading >= 12);
  CHECK(scatters >= 4);  // scatter_add and reindex_reduce, in both modes
  CHECK(kernels >= reading);
}

TEST_CASE("bad extra reads in specs are refused with the offending path", "[kernel_spec][extras]") {
  using Mutate = std::function<void(json&)>;
  struct Bad {
    const char* what;
    Mutate mutate;
    std::string path;
    std::string message;
  };
  auto set = [](const char* pointer, json value) -> Mutate {
    return [=](json& j) { j[json::json_pointer(pointer)] = value; };
  };
  const json read = json::parse(R"({"e":1,"at":[0]})");
  json deep = json{{"i", 0}};
  for (int k = 0; k < 300; ++k) deep = json{{"e", 1}, {"at", json::array({deep})}};
  const std::vector<Bad> table = {
      {"slot out of range", set("/body/stmts/0/index/0/e", 2), "body.stmts[0].index[0].e",
       "2 is out of range (valid: 0..1)"},
      {"slot negative", set("/body/stmts/0/index/0/e", -1), "body.stmts[0].index[0].e",
       "out of range"},
      {"slot huge", set("/body/stmts/0/index/0/e", uint64_t(1) << 63), "body.stmts[0].index[0].e",
       "out of range"},
      {"slot string", set("/body/stmts/0/index/0/e", "in1"), "body.stmts[0].index[0].e",
       "expected an integer, got string"},
      {"a float buffer", set("/body/stmts/0/index/0/e", 0), "body.stmts[0].index[0].e",
       "in0 is float32; extra reads take int8, uint8, int16, int32 or int64 buffers"},
      {"a bool buffer", set("/inputs/1/dtype", "bool"), "body.stmts[0].index[0].e",
       "in1 is bool; extra reads take int8, uint8, int16, int32 or int64 buffers"},
      {"too many indices", set("/body/stmts/0/index/0/at", json::array({0, 1})),
       "body.stmts[0].index[0].at", "in1 has 1 axes; got 2 indices"},
      {"no indices", set("/body/stmts/0/index/0/at", json::array()), "body.stmts[0].index[0].at",
       "in1 has 1 axes; got 0 indices"},
      {"at not an array", set("/body/stmts/0/index/0/at", 0), "body.stmts[0].index[0].at",
       "expected an array, got number"},
      {"nested too many indices", set("/body/stmts/1/body/stmts/0/index/0/at/0/at/1", 0),
       "body.stmts[1].body.stmts[0].index[0].at[0].at", "in1 has 1 axes; got 2 indices"},
      {"nested float buffer", set("/body/stmts/1/body/stmts/0/index/0/at/0/e", 0),
       "body.stmts[1].body.stmts[0].index[0].at[0].e", "in0 is float32"},
      {"index out of scope", set("/body/stmts/0/index/0/at/0", json{{"i", 1}}),
       "body.stmts[0].index[0].at[0].i", "not a loop variable in scope here (in scope: i0)"},
      {"index unknown operator", set("/body/stmts/0/index/0/at/0", json::array({"pow", 1, 2})),
       "body.stmts[0].index[0].at[0][0]", "unknown index operator \"pow\""},
      {"e without at", set("/body/stmts/0/index/0", json{{"e", 1}}), "body.stmts[0].index[0]",
       "expected an index expression"},
      {"at without e", set("/body/stmts/0/index/0", json{{"at", json::array({0})}}),
       "body.stmts[0].index[0]", "expected an index expression"},
      {"a third key", set("/body/stmts/0/index/0", json{{"e", 1}, {"at", {0}}, {"p", 0}}),
       "body.stmts[0].index[0]", "expected an index expression"},
      {"in input dims", set("/inputs/0/dims/0", read), "inputs[0].dims[0].e",
       "an extra read where only params and constants may appear"},
      {"in its own dims", set("/inputs/1/dims/0", read), "inputs[1].dims[0].e",
       "an extra read where only params and constants may appear"},
      {"in output dims", set("/output/dims/0", read), "output.dims[0].e",
       "an extra read where only params and constants may appear"},
      {"in a loop extent", set("/loops/0/extent", read), "loops[0].extent.e",
       "an extra read where only params and constants may appear"},
      {"in a reduce extent", set("/body/stmts/1/loops/0/extent", read),
       "body.stmts[1].loops[0].extent.e",
       "an extra read where only params and constants may appear"},
      {"inside an extent expression",
       set("/loops/0/extent", json::array({"add", {{"p", 0}}, read})), "loops[0].extent[2].e",
       "an extra read where only params and constants may appear"},
      {"nested deeper than the limit", set("/body/stmts/0/index/0", deep), "body.stmts[0].index[0]",
       "nested deeper than 256"},
  };
  for (const Bad& b : table) {
    INFO(b.what);
    json j = kernel_spec_to_json(extra_ir());
    REQUIRE_NOTHROW(kernel_spec_from_json(j));
    b.mutate(j);
    CHECK_THROWS_AS(kernel_spec_from_json(j), Error);
    CHECK_THROWS_WITH(kernel_spec_from_json(j),
                      Contains("kernel spec: " + b.path + ":") && Contains(b.message));
  }

  // A kernel without input buffers has nothing to read: an iota of a read.
  {
    KernelIR ir;
    ir.output = {DType::Int64, {ix_param(0)}};
    ir.loops.push_back({0, ix_param(0)});
    KStmt iota;
    iota.kind = KOp::Iota;
    iota.dtype = DType::Int64;
    iota.index = {ix_var(0)};
    ir.body.stmts = {iota};
    ir.body.result = 0;
    ir.num_params = 1;
    ir.num_vars = 1;
    json j = kernel_spec_to_json(ir);
    REQUIRE_NOTHROW(kernel_spec_from_json(j));
    j["body"]["stmts"][0]["index"][0] = read;
    CHECK_THROWS_WITH(kernel_spec_from_json(j),
                      Contains("kernel spec: body.stmts[0].index[0].e: the kernel has no input "
                               "buffers to read"));
  }

  // In a scatter kernel's target and target_valid, with the same checks.
  {
    Var x = rand({6}, 22);
    Var idx = array(std::vector<int32_t>{0, 2, 1, 9, -1, 0}, {6});
    std::vector<NodePtr> nodes{
        reindex_reduce(x, ReduceOp::Add, {3}, {"@e0(i0)"}, {"@e0(i0) == 2"}, {idx}).node()};
    json s;
    for (const LoweredKernel& k : build_pipeline(nodes).kernels)
      if (k.ir.kind == KernelKind::Scatter) s = kernel_spec_to_json(k.ir);
    REQUIRE(s.is_object());
    REQUIRE(s["target"][0].contains("e"));
    REQUIRE_NOTHROW(kernel_spec_from_json(s));
    const int slot = s["target"][0]["e"].get<int>();
    json j = s;
    j["target"][0]["at"].push_back(0);
    CHECK_THROWS_WITH(kernel_spec_from_json(j),
                      Contains("kernel spec: target[0].at: in" + std::to_string(slot) +
                               " has 1 axes; got 2 indices"));
    j = s;
    j["target"][0]["e"] = int(s["inputs"].size());
    CHECK_THROWS_WITH(kernel_spec_from_json(j),
                      Contains("kernel spec: target[0].e: ") && Contains("out of range"));
  }
}
