// Data-dependent indexing (docs/api.md "Data-dependent indexing"): reindex and reindex_reduce
// with extras ("@eK(a, b, ...)" reads element (a, b, ...) of the integer array extras[K]) and
// the composites built on them (gather, scatter_add, index_select, embedding, one_hot).
//
//   1. every form against the reference interpreter, and hand-computed values that check the
//      oracle itself: extras of rank 0..4, several extras, extras in conditions, nested reads,
//      values and positions out of range either way, Int32/Int64 extras, float/int x,
//      reindex_reduce with add/mul/max/min into colliding targets, empty extras, scalar() extras;
//   2. Jittor's own uses of extras (gather, x[idx], argmax selection, bincount, setitem);
//   3. the composites, with torch's edge cases;
//   4. errors: type, op and expression named;
//   5. keys never depend on the extras' values or shapes, but do on their dtypes and ranks;
//   6. fusion: element-wise work on an embedding fuses, and the extra is read from a buffer;
//   7. gradients against finite differences, and what grad() does with an integer index.
//
// The overflow rule: an element whose expressions read an extra outside its bounds (whether or
// not the value read is used), or whose computed index falls outside x / the output, gives the
// overflow value (reindex) or is skipped (reindex_reduce).
//
// Compile time matters (each distinct kernel is a g++ run): keys do not depend on values or
// shapes, so the cases reuse a few structures and dtypes, and evaluate many Vars together.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/capture_stderr.h"
#include "support/distinct_values.h"
#include "support/exceptions.h"
#include "support/gradient_check.h"
#include "support/reference_check.h"
#include "support/text.h"
#include "support/typed_arrays.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::CaptureStderr;
using metajit_test::count_occurrences;
using metajit_test::message_of;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------- arrays

Var i32(const std::vector<int32_t>& v, Shape shape) {
  return array(v, std::move(shape));
}
Var i32(const std::vector<int32_t>& v) {
  return array(v, {int64_t(v.size())});
}
Var i64(const std::vector<int64_t>& v, Shape shape) {
  return array(v, std::move(shape));
}
Var i64(const std::vector<int64_t>& v) {
  return array(v, {int64_t(v.size())});
}
Var f32(const std::vector<float>& v, Shape shape) {
  return array(v, std::move(shape));
}
Var f32(const std::vector<float>& v) {
  return array(v, {int64_t(v.size())});
}
Var f64(const std::vector<double>& v, Shape shape) {
  return array(v, std::move(shape));
}

using metajit_test::make_array;

// x[r, c] = 10 r + c for a [rows, cols] grid: every value names its position.
std::vector<double> grid_values(int64_t rows, int64_t cols) {
  std::vector<double> v;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v.push_back(double(10 * r + c));
  return v;
}
Var grid(int64_t rows, int64_t cols, DType dt = DType::Float32) {
  return make_array(dt, grid_values(rows, cols), {rows, cols});
}

// {10, 20, 30, 40, 50}.
Var tens(DType dt = DType::Float32) {
  return make_array(dt, {10, 20, 30, 40, 50}, {5});
}

// Every value of a Var as double (evaluating it first).
std::vector<double> values_of(const Var& v) {
  return metajit_test_detail::eval_values_as_double(v);
}

// `v` has `shape` and exactly the values `expected` (the hand-computed values are small
// integers, exact in every dtype; +-inf expects itself).
void check_values(const Var& v, const Shape& shape, const std::vector<double>& expected) {
  CHECK(v.shape() == shape);
  const std::vector<double> got = values_of(v);
  REQUIRE(got.size() == expected.size());
  int wrong = 0;
  for (size_t k = 0; k < got.size(); ++k)
    if (got[k] != expected[k] && ++wrong <= 8)
      FAIL_CHECK("element " << k << " of " << shape_str(v.shape()) << ": got " << got[k]
                            << ", expected " << expected[k]);
  CHECK(wrong == 0);
}

uint64_t launched_by(const std::vector<Var>& vars) {
  reset_stats();
  eval(vars);
  return stats().kernels_launched;
}

// Kernels built for `vars` now: compiled, or found in the disk cache of an earlier run.
uint64_t built_by(const std::vector<Var>& vars) {
  reset_stats();
  eval(vars);
  return stats().kernels_compiled + stats().disk_hits;
}

// ---------------------------------------------------------------- finite differences
// support/gradient_check.h, with this suite's tighter tolerance (float64 throughout).

using metajit_test::distinct;
using metajit_test::In;
using metajit_test::Lcg;
using metajit_test::LossFn;

void check_gradients(const std::string& name, const LossFn& f, const std::vector<In>& inputs) {
  metajit_test::check_gradients(name, f, inputs, {1e-6, 1e-6});
}

}  // namespace

// ================================================================ 1. every form vs the reference

TEST_CASE("x[idx] with a 1-D extra: ids past either end, negative and huge read the overflow value",
          "[extras][reference]") {
  const int32_t i32_min = std::numeric_limits<int32_t>::min();
  const int32_t i32_max = std::numeric_limits<int32_t>::max();
  const int64_t i64_min = std::numeric_limits<int64_t>::min();
  const int64_t i64_max = std::numeric_limits<int64_t>::max();
  Var x = tens();
  Var id32 = i32({4, 0, 2, 5, -1, 2, 1000000, i32_min, i32_max});
  // 2^32 + 2 and -2^32 + 1 would read x[2] and x[1] if an Int64 extra were narrowed to 32 bits.
  Var id64 = i64({4, 0, 2, 5, -1, 2, (int64_t(1) << 32) + 2, -(int64_t(1) << 32) + 1, i64_min,
                  i64_max, int64_t(1) << 40});
  Var y32 = reindex(x, {9}, {"@e0(i0)"}, -7, {}, {id32});
  Var y64 = reindex(x, {11}, {"@e0(i0)"}, -7, {}, {id64});
  check_against_reference({y32, y64});
  check_values(y32, {9}, {50, 10, 30, -7, -7, 30, -7, -7, -7});
  check_values(y64, {11}, {50, 10, 30, -7, -7, 30, -7, -7, -7, -7, -7});
}

TEST_CASE("float32, float64 and int32 x read through Int32 and Int64 extras",
          "[extras][reference]") {
  Var id32 = i32({3, -1, 0, 4, 9});
  Var id64 = i64({1, 1, 5, -6, 2});
  std::vector<Var> ys;
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32})
    for (const Var& id : {id32, id64})
      ys.push_back(reindex(tens(dt), {5}, {"@e0(i0)"}, -2, {}, {id}));
  check_against_reference(ys);
  for (size_t k = 0; k < ys.size(); k += 2) {
    INFO("x dtype #" << k / 2);
    CHECK(ys[k].dtype() == std::vector<DType>{DType::Float32, DType::Float64, DType::Int32}[k / 2]);
    check_values(ys[k], {5}, {40, -2, 10, 50, -2});
    check_values(ys[k + 1], {5}, {20, 20, -2, -2, 30});
  }
}

TEST_CASE("Int8, UInt8 and Int16 extras and index arrays read as their Int32 values",
          "[extras][reference][precision]") {
  // The same positions in every integer type: the results equal the Int32 ones and the reference
  // interpreter's. -1 and -128 as Int8 are negative (outside, or from the end where the op counts
  // so); 200 as UInt8 is 200, not -56.
  const std::vector<int32_t> pos = {3, -1, 0, 4, 2, -128, 127};
  const std::vector<int32_t> upos = {3, 0, 4, 200, 1, 255, 2};
  Var x = tens(), g = grid(3, 4);
  std::vector<Var> all;
  for (DType t : {DType::Int8, DType::Int16, DType::UInt8}) {
    INFO(dtype_name(t));
    const std::vector<int32_t>& p = t == DType::UInt8 ? upos : pos;
    const Var ids = cast(i32(p), t), ids32 = i32(p);
    CHECK(ids.dtype() == t);
    const Var y = reindex(x, {7}, {"@e0(i0)"}, -7, {}, {ids});
    check_values(y, {7}, values_of(reindex(x, {7}, {"@e0(i0)"}, -7, {}, {ids32})));
    const Var sel = cast(i32({2, 0, t == DType::UInt8 ? 1 : -1}), t);
    const Var rows = index_select(g, 0, sel);
    check_values(rows, {3, 4}, values_of(index_select(g, 0, cast(sel, DType::Int32))));
    const Var gi = cast(i32({3, 0, 0, 1, 2, 1}, {2, 3}), t);
    const Var gathered = gather(g, 1, gi);
    check_values(gathered, {2, 3}, values_of(gather(g, 1, cast(gi, DType::Int32))));
    const Var scattered = scatter_add(zeros({2, 4}), 1, gi, ones({2, 3}));
    check_values(scattered, {2, 4},
                 values_of(scatter_add(zeros({2, 4}), 1, cast(gi, DType::Int32), ones({2, 3}))));
    const Var emb = embedding(g, cast(i32({2, 1, 2}), t));
    check_values(emb, {3, 4}, values_of(embedding(g, i32({2, 1, 2}))));
    const Var oh = one_hot(cast(i32({1, 3, 0}), t), 4);
    check_values(oh, {3, 4}, values_of(one_hot(i32({1, 3, 0}), 4)));
    const Var ce = cross_entropy(g, cast(i32({3, 0, 2}), t));
    CHECK(ce.item<float>() == cross_entropy(g, i32({3, 0, 2})).item<float>());
    // The gradient through an 8-bit index: the same as through its Int32 copy.
    const Var w = grid(3, 4) * 0.5;
    const std::vector<Var> gw = grad(sum(gather(w, 1, gi) * gathered), {w});
    const std::vector<Var> gw32 = grad(sum(gather(w, 1, cast(gi, DType::Int32)) * gathered), {w});
    check_values(gw[0], {3, 4}, values_of(gw32[0]));
    all.insert(all.end(), {y, rows, gathered, scattered, emb, oh});
  }
  check_against_reference(all);
  // An extra read of a kernel spec takes them too (codegen/kernel_spec.cc); floats and Bool not.
  CHECK_THROWS_WITH(reindex(x, {2}, {"@e0(i0)"}, 0, {}, {cast(i32({0, 1}), DType::Float16)}),
                    Contains("float16") && Contains("int8, uint8, int16, int32 or int64"));
}

TEST_CASE("2-D, 3-D and 4-D extras: x[e(i..), j] with out-of-range and negative rows",
          "[extras][reference]") {
  Var x = grid(3, 4);  // x[r, c] = 10 r + c
  Var e2 = i64({2, 0, 1, 3, 0, 5, -1, 2}, {2, 4});
  Var y2 = reindex(x, {2, 4}, {"@e0(i0,i1)", "i1"}, -1, {}, {e2});
  Var e3 = i32({0, 1, 2, 3, 1, 0, -1, 2}, {2, 2, 2});
  Var y3 = reindex(x, {2, 2, 2}, {"@e0(i0, i1, i2)", "i1+i2"}, -1, {}, {e3});
  Var e4 = i64({0, 1, 2, 2, 1, 0, 3, 0, 1, 1, 1, -5}, {2, 1, 2, 3});
  Var y4 = reindex(x, {2, 1, 2, 3}, {"@e0(i0,i1,i2,i3)", "i3+i1"}, -1, {}, {e4});
  check_against_reference({y2, y3, y4});
  check_values(y2, {2, 4}, {20, 1, 12, -1, 0, -1, -1, 23});
  check_values(y3, {2, 2, 2}, {0, 11, 21, -1, 10, 1, -1, 22});
  check_values(y4, {2, 1, 2, 3}, {0, 11, 22, 20, 11, 2, -1, 1, 12, 10, 11, -1});
}

TEST_CASE("several extras of different ranks and dtypes in one expression", "[extras][reference]") {
  Var x = grid(3, 4);
  Var rows = i32({2, 0, 1, 2});
  Var cols = i64({3, 0, 1, 9}, {2, 2});
  // x[rows[i], cols[i/2, i%2]]
  Var y = reindex(x, {4}, {"@e0(i0)", "@e1(i0/2, i0%2)"}, -1, {}, {rows, cols});
  // Two extras summed in one index, and the same Var passed twice.
  Var sum_of_two = reindex(tens(), {4}, {"@e0(i0) + @e1(i0/2, i0%2) - 3"}, -1, {}, {rows, cols});
  Var twice = reindex(x, {4}, {"@e0(i0)", "@e1(3-i0)"}, -1, {}, {rows, rows});
  check_against_reference({y, sum_of_two, twice});
  check_values(y, {4}, {23, 0, 11, -1});
  // rows + cols - 3: 2+3-3 = 2, 0+0-3 = -3, 1+1-3 = -1, 2+9-3 = 8
  check_values(sum_of_two, {4}, {30, -1, -1, -1});
  // x[rows[i], rows[3-i]]: (2,2) (0,1) (1,0) (2,2)
  check_values(twice, {4}, {22, 1, 10, 22});
}

TEST_CASE("extras in overflow conditions: masks, truthiness, out-of-range reads",
          "[extras][reference]") {
  Var x = tens();
  Var mask = i32({1, 0, 1, 1, 0});
  Var masked = reindex(x, {5}, {"i0"}, -1, {"@e0(i0)==0"}, {mask});
  Var truthy = reindex(x, {5}, {"i0"}, -1, {"@e0(i0)"}, {mask});  // non-zero is true
  // The read at i0+2 leaves the extra for i0 >= 3: overflow even though the test is false.
  Var shifted = reindex(x, {5}, {"i0"}, -1, {"@e0(i0+2) == 7"}, {mask});
  // An index extra and a condition extra together; the condition compares two reads.
  Var ids = i64({4, 3, 2, 1, 0});
  Var both = reindex(x, {5}, {"@e0(i0)"}, -1, {"@e1(i0) > @e1(4-i0)"}, {ids, mask});
  check_against_reference({masked, truthy, shifted, both});
  check_values(masked, {5}, {10, -1, 30, 40, -1});
  check_values(truthy, {5}, {-1, 20, -1, -1, 50});
  check_values(shifted, {5}, {10, 20, 30, -1, -1});
  // mask[i] > mask[4-i]: i=0: 1>0 yes; 1: 0>1 no; 2: no; 3: 1>0 yes; 4: 0>1 no
  check_values(both, {5}, {-1, 40, 30, -1, 10});
}

TEST_CASE("nested reads: @e0(@e1(i0)) and an extra read through itself", "[extras][reference]") {
  Var x = tens();
  Var p = i32({3, 1, 0, 2});
  Var q = i64({0, 2, 3, 7, -1, 1});
  Var nested = reindex(x, {6}, {"@e0(@e1(i0))"}, -1, {}, {p, q});
  Var twice = reindex(x, {6}, {"@e0(@e0(@e1(i0)))"}, -1, {}, {p, q});
  Var in_condition = reindex(x, {6}, {"i0"}, -1, {"@e0(@e1(i0)) == 0"}, {p, q});
  // p[p[i]]: the extra is also x.
  Var self = reindex(p, {4}, {"@e0(i0)"}, -9, {}, {p});
  check_against_reference({nested, twice, in_condition, self});
  // q: 0 2 3 7 -1 1 -> p[q]: 3 0 2 out out 1
  check_values(nested, {6}, {40, 10, 30, -1, -1, 20});
  // p[p[q]]: p[3]=2, p[0]=3, p[2]=0, out, out, p[1]=1
  check_values(twice, {6}, {30, 40, 10, -1, -1, 20});
  // p[q[i]] == 0 at i = 1 (p[2] = 0); q[3], q[4] read p out of range; x has no element 5
  check_values(in_condition, {6}, {10, -1, 30, -1, -1, -1});
  check_values(self, {4}, {2, 1, 3, 0});
}

TEST_CASE("a 0-d extra, a scalar() extra and a folded 0-d extra as offsets",
          "[extras][reference]") {
  Var x = tens();
  Var two = i32({2}, {});
  Var minus3 = i64({-3}, {});
  Var one = scalar(1, DType::Int64);
  Var four = scalar(1, DType::Int32) + 3.0;  // folded to a constant before lowering
  Var a = reindex(x, {3}, {"i0+@e0()"}, -1, {}, {two});
  Var b = reindex(x, {3}, {"i0+@e0()"}, -1, {}, {minus3});
  Var c = reindex(x, {3}, {"i0+@e0()"}, -1, {}, {one});
  Var d = reindex(x, {3}, {"i0+@e0()"}, -1, {}, {four});
  Var prefix = reindex(x, {5}, {"i0"}, -1, {"i0 >= @e0()"}, {two});
  Var zero_d = reindex(x, {}, {"@e0()"}, -1, {}, {two});  // a 0-d output: no loop at all
  check_against_reference({a, b, c, d, prefix, zero_d});
  check_values(a, {3}, {30, 40, 50});
  check_values(b, {3}, {-1, -1, -1});
  check_values(c, {3}, {20, 30, 40});
  check_values(d, {3}, {50, -1, -1});
  check_values(prefix, {5}, {10, 20, -1, -1, -1});
  check_values(zero_d, {}, {30});
}

TEST_CASE("reads of an extra at positions outside it overflow, whether or not the value is used",
          "[extras][reference]") {
  Var x = tens();
  Var ids = i32({0, 1, 2, 3, 4});
  Var ahead = reindex(x, {5}, {"@e0(i0+3)"}, -1, {}, {ids});
  Var behind = reindex(x, {5}, {"@e0(i0-2)"}, -1, {}, {ids});
  Var constant = reindex(x, {3}, {"@e0(5)"}, -1, {}, {ids});
  // && does not hide the read: i0 < 0 is never true, yet i0+3 leaves ids for i0 >= 2.
  Var unused = reindex(x, {5}, {"i0"}, -1, {"i0 < 0 && @e0(i0+3) == 0"}, {ids});
  Var unused_or = reindex(x, {5}, {"i0"}, -1, {"i0 > 100 || @e0(i0+3) < 0"}, {ids});
  check_against_reference({ahead, behind, constant, unused, unused_or});
  check_values(ahead, {5}, {40, 50, -1, -1, -1});
  check_values(behind, {5}, {-1, -1, 10, 20, 30});
  check_values(constant, {3}, {-1, -1, -1});
  check_values(unused, {5}, {10, 20, -1, -1, -1});
  check_values(unused_or, {5}, {10, 20, -1, -1, -1});
}

TEST_CASE("a read multiplied by 0 still overflows outside its extra",
          "[extras][reference][zero_times_read]") {
  // The index's value is i0 whatever the read gives, but the read at i0+3 leaves ids for
  // i0 >= 2: the overflow rule makes those elements overflow (the reference interpreter does).
  Var x = tens();
  Var ids = i32({0, 1, 2, 3, 4});
  Var left = reindex(x, {5}, {"i0 + 0*@e0(i0+3)"}, -1, {}, {ids});
  Var right = reindex(x, {5}, {"i0 + @e0(i0+3)*0"}, -1, {}, {ids});
  Var reduced =
      reindex_reduce(f32({1, 2, 3, 4, 5}), ReduceOp::Add, {5}, {"i0 + 0*@e0(i0+3)"}, {}, {ids});
  // No literal 0: row 0 of a reindex whose index is i0 * (a read), fused into its consumer,
  // which substitutes 0 for i0. y[i0, i1] = x[i0 * ids[i1 + 2]], overflowing for i1 >= 2.
  Var y = reindex(x, {2, 4}, {"i0 * @e0(i1+2)"}, -1, {}, {i32({0, 1, 2, 3})});
  Var row0 = reindex(y, {4}, {"0", "i0"});
  check_against_reference({left, right, reduced, row0});
  check_values(left, {5}, {10, 20, -1, -1, -1});
  check_values(right, {5}, {10, 20, -1, -1, -1});
  check_values(reduced, {5}, {1, 2, 0, 0, 0});
  check_values(row0, {4}, {10, 10, -1, -1});
}

TEST_CASE("a read at a position no loop varies compiles: 1-loop maps and collapsed loops",
          "[extras][reference][hoisted_read]") {
  // An @e read whose arguments do not change along the innermost loop is computed once before
  // it. It must not land between "#pragma omp parallel for" and its loop, nor between loops
  // that the pragma collapses.
  Var x = tens();
  Var x3 = make_array(DType::Float32, grid_values(6, 4), {2, 3, 4});  // 30 a + 10 b + c
  struct Case {
    const char* what;
    Var y;
    Shape shape;
    std::vector<double> expected;
  };
  const std::vector<Case> cases = {
      {"0-d extra, one loop",
       reindex(x, {3}, {"i0+@e0()"}, -1, {}, {i32({2}, {})}),
       {3},
       {30, 40, 50}},
      {"constant position, one loop",
       reindex(x, {3}, {"@e0(1)"}, -1, {}, {i64({4, 2})}),
       {3},
       {30, 30, 30}},
      {"embedding of a 0-d id", embedding(grid(4, 3), i64({2}, {})), {3}, {20, 21, 22}},
      {"sum over the middle axis of selected blocks (collapsed strip loops)",
       sum(index_select(x3, 0, i32({1, 0})), {1}),
       {2, 4},
       {120, 123, 126, 129, 30, 33, 36, 39}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string error = metajit_test::thrown_message([&] { eval({c.y}); });
    CHECK(error == "");
    if (error.empty()) check_values(c.y, c.shape, c.expected);
  }
}

TEST_CASE("reindex_reduce with extras: add, mul, max, min into colliding targets",
          "[extras][reference]") {
  Var y = f32({1, 2, 3, 4, 5, 6});
  Var t = i32({2, 0, 2, 5, -1, 0});  // 5 and -1 fall outside [0, 4)
  Var add = reindex_reduce(y, ReduceOp::Add, {4}, {"@e0(i0)"}, {}, {t});
  Var mul = reindex_reduce(y, ReduceOp::Mul, {4}, {"@e0(i0)"}, {}, {t});
  Var mx = reindex_reduce(y, ReduceOp::Max, {4}, {"@e0(i0)"}, {}, {t});
  Var mn = reindex_reduce(y, ReduceOp::Min, {4}, {"@e0(i0)"}, {}, {t});
  // Rows scattered by a 1-D extra, with a condition reading a second extra.
  Var rows = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  Var keep = i64({0, 0, 1});
  Var scattered = reindex_reduce(rows, ReduceOp::Add, {2, 2}, {"@e0(i0)", "i1"}, {"@e1(i0) != 0"},
                                 {i64({1, 1, 0}), keep});
  // Int32 y; a target read past the end of the extra skips the element.
  Var ints = reindex_reduce(i32({1, 2, 3, 4, 5, 6}), ReduceOp::Add, {4}, {"@e0(i0+1)"}, {}, {t});
  // Int64 targets 2^32 + 1 and -2^32 + 2 would hit 1 and 2 if narrowed to 32 bits.
  Var wide = reindex_reduce(y, ReduceOp::Add, {4}, {"@e0(i0)"}, {},
                            {i64({(int64_t(1) << 32) + 1, 3, -(int64_t(1) << 32) + 2, 3, 0, 0})});
  // Nested: targets p[q[i]].
  Var nested = reindex_reduce(y, ReduceOp::Add, {4}, {"@e0(@e1(i0))"}, {},
                              {i32({3, 1, 0, 2}), i64({0, 0, 1, 2, 3, 9})});
  check_against_reference({add, mul, mx, mn, scattered, ints, wide, nested});
  check_values(add, {4}, {2 + 6, 0, 1 + 3, 0});
  check_values(mul, {4}, {2 * 6, 1, 1 * 3, 1});
  check_values(mx, {4}, {6, -kInf, 3, -kInf});
  check_values(mn, {4}, {2, kInf, 1, kInf});
  // keep: rows 0, 1 go to output row 1; row 2 is skipped.
  check_values(scattered, {2, 2}, {0, 0, 1 + 3, 2 + 4});
  CHECK(ints.dtype() == DType::Int32);
  // t[i+1]: 0 2 5 -1 0 out -> out[0] = 1+5, out[2] = 2
  check_values(ints, {4}, {1 + 5, 0, 2, 0});
  check_values(wide, {4}, {5 + 6, 0, 0, 2 + 4});
  // p[q]: 3 3 1 0 2 out -> out[3] = 1+2, out[1] = 3, out[0] = 4, out[2] = 5
  check_values(nested, {4}, {4, 3, 5, 1 + 2});
}

TEST_CASE("empty extras: every read is outside, nothing is scattered, empty outputs",
          "[extras][reference]") {
  Var x = tens();
  Var none = i32({}, {0});
  Var none2 = i64({}, {2, 0});
  Var all_out = reindex(x, {3}, {"@e0(i0)"}, -1, {}, {none});
  Var all_out2 = reindex(grid(3, 4), {2, 3}, {"@e0(i0,i1)", "i1"}, -1, {}, {none2});
  Var empty = reindex(x, {0}, {"@e0(i0)"}, -1, {}, {none});
  Var nothing = reindex_reduce(f32({1, 2, 3}), ReduceOp::Add, {4}, {"@e0(i0)"}, {}, {none});
  Var gathered = gather(grid(3, 4), 0, i64({}, {0, 4}));
  check_against_reference({all_out, all_out2, empty, nothing, gathered});
  check_values(all_out, {3}, {-1, -1, -1});
  check_values(all_out2, {2, 3}, {-1, -1, -1, -1, -1, -1});
  check_values(empty, {0}, {});
  check_values(nothing, {4}, {0, 0, 0, 0});
  check_values(gathered, {0, 4}, {});
}

// ================================================================ 2. Jittor's uses of extras

TEST_CASE("jittor: the docs' a.reindex([2], [i0, @e0(i0)], extras=[b]) picks one column per row",
          "[extras][jittor]") {
  // The reindex docs' example: a = [[1,2],[3,4]], b = [1,0] -> [2,3].
  Var a = i32({1, 2, 3, 4}, {2, 2});
  Var b = i32({1, 0});
  Var picked = reindex(a, {2}, {"i0", "@e0(i0)"}, 0, {}, {b});
  check_against_reference(picked);
  check_values(picked, {2}, {2, 3});
}

TEST_CASE("jittor: argmax-style selection reads the maximum of each row", "[extras][jittor]") {
  Var x =
      f32({0.5f, 3.0f, -1.0f, 2.0f, 7.0f, 7.5f, -2.0f, 0.25f, -3.0f, -1.0f, -0.5f, -4.0f}, {3, 4});
  Var best = argmax(x, 1);  // computed extra: 1, 1, 2
  Var selected = reindex(x, {3}, {"i0", "@e0(i0)"}, 0, {}, {best});
  Var maxima = max(x, {1});
  check_against_reference({selected, maxima});
  check_values(selected, {3}, {3.0, 7.5, -0.5});
  CHECK(selected.to_vector<float>() == maxima.to_vector<float>());
}

TEST_CASE("jittor: gather along a dim with @e0(i0,i1) (numpy take_along_axis)",
          "[extras][jittor]") {
  Var x = grid(3, 4);
  Var idx = i64({3, 0, 1, 1, 2, 2}, {3, 2});
  // x.reindex(idx.shape, ["i0", "@e0(i0,i1)"], extras=[idx]) as jittor's gather writes it
  Var along1 = reindex(x, {3, 2}, {"i0", "@e0(i0,i1)"}, 0, {}, {idx});
  Var idx0 = i64({2, 0, 1, 2, 1, 0, 0, 0}, {2, 4});
  Var along0 = reindex(x, {2, 4}, {"@e0(i0,i1)", "i1"}, 0, {}, {idx0});
  check_against_reference({along1, along0, gather(x, 1, idx), gather(x, 0, idx0)});
  // np.take_along_axis(x, idx, 1)
  check_values(along1, {3, 2}, {3, 0, 11, 11, 22, 22});
  check_values(along0, {2, 4}, {20, 1, 12, 23, 10, 1, 2, 3});
  CHECK(gather(x, 1, idx).to_vector<float>() == along1.to_vector<float>());
}

TEST_CASE("jittor: advanced indexing x[idx] and x[idx1, idx2] via reindex", "[extras][jittor]") {
  Var x = grid(3, 4);
  Var idx = i32({2, 0, 2});
  // x[idx]: rows, shape idx.shape + x.shape[1:]
  Var rows = reindex(x, {3, 4}, {"@e0(i0)", "i1"}, 0, {}, {idx});
  // x[idx1, idx2]: paired positions
  Var pairs = reindex(x, {3}, {"@e0(i0)", "@e1(i0)"}, 0, {}, {idx, i32({3, 1, 0})});
  // x[idx1[:, None], idx2]: the two index arrays broadcast against each other (np.ix_)
  Var outer =
      reindex(x, {2, 3}, {"@e0(i0, 0)", "@e1(i1)"}, 0, {}, {i32({2, 0}, {2, 1}), i64({3, 1, 0})});
  // x[:, idx]: columns
  Var cols = reindex(x, {3, 3}, {"i0", "@e0(i1)"}, 0, {}, {idx});
  check_against_reference({rows, pairs, outer, cols, index_select(x, 0, idx)});
  check_values(rows, {3, 4}, {20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23});
  check_values(pairs, {3}, {23, 1, 20});
  check_values(outer, {2, 3}, {23, 21, 20, 3, 1, 0});
  check_values(cols, {3, 3}, {2, 0, 2, 12, 10, 12, 22, 20, 22});
  CHECK(index_select(x, 0, idx).to_vector<float>() == rows.to_vector<float>());
}

TEST_CASE("jittor: bincount and x[idx] += v with reindex_reduce", "[extras][jittor]") {
  Var ids = i32({1, 3, 1, 0, 3, 3, 7});
  // ones(n).reindex_reduce("add", [bins], ["@e0(i0)"], extras=[ids])
  Var counts = reindex_reduce(ones({7}), ReduceOp::Add, {4}, {"@e0(i0)"}, {}, {ids});
  // x[idx] += v (setitem with reduce "add"): colliding positions add up
  Var x = f32({10, 20, 30, 40});
  Var v = f32({1, 2, 4, 8, 16, 32, 64});
  Var added = x + reindex_reduce(v, ReduceOp::Add, {4}, {"@e0(i0)"}, {}, {ids});
  // scatter max (setitem reduce "maximum")
  Var maxed = maximum(x, reindex_reduce(v * 10.0, ReduceOp::Max, {4}, {"@e0(i0)"}, {}, {ids}));
  check_against_reference({counts, added, maxed});
  check_values(counts, {4}, {1, 2, 0, 3});
  check_values(added, {4}, {10 + 8, 20 + 1 + 4, 30, 40 + 2 + 16 + 32});
  check_values(maxed, {4}, {80, 40, 30, 320});
}

TEST_CASE("jittor: embedding as weight.reindex(ids.shape+[D], [@e0(i0,i1), i2])",
          "[extras][jittor]") {
  Var w = grid(4, 3);
  Var ids = i64({3, 0, 1, 3}, {2, 2});
  Var by_hand = reindex(w, {2, 2, 3}, {"@e0(i0,i1)", "i2"}, 0, {}, {ids});
  check_against_reference({by_hand, embedding(w, ids)});
  check_values(by_hand, {2, 2, 3}, {30, 31, 32, 0, 1, 2, 10, 11, 12, 30, 31, 32});
  CHECK(embedding(w, ids).to_vector<float>() == by_hand.to_vector<float>());
}

// ================================================================ 3. composites

TEST_CASE(
    "gather: torch semantics, index smaller than x, negative dim and index, out-of-range reads 0",
    "[extras][composite]") {
  Var x = grid(3, 4);
  // dim 1, index [2, 3]: smaller than x in both axes. -1 is the last column, -5 before the first.
  Var idx1 = i64({3, 0, -5, 1, -1, 4}, {2, 3});
  Var g1 = gather(x, 1, idx1);
  Var g_neg = gather(x, -1, idx1);
  // dim 0, Int32 index [2, 2].
  Var idx0 = i32({2, 0, 1, 7}, {2, 2});
  Var g0 = gather(x, 0, idx0);
  Var g_neg2 = gather(x, -2, idx0);
  // 3-D x, gather along the middle axis; 1-D x.
  Var x3 = make_array(DType::Float64, grid_values(6, 4), {2, 3, 4});
  Var idx3 = i64({2, 0, 1, 1, 0, 2, 2, 2}, {2, 1, 4});
  Var g3 = gather(x3, 1, idx3);
  Var g_1d = gather(tens(), 0, i64({4, 4, 0}));
  check_against_reference({g1, g_neg, g0, g_neg2, g3, g_1d});
  check_values(g1, {2, 3}, {3, 0, 0, 11, 13, 0});
  CHECK(g_neg.to_vector<float>() == g1.to_vector<float>());
  check_values(g0, {2, 2}, {20, 1, 10, 0});
  CHECK(g_neg2.to_vector<float>() == g0.to_vector<float>());
  // x3[a, b, c] = 30 a + 10 b + c (grid 6x4 reshaped); out[a, 0, c] = x3[a, idx3[a, 0, c], c]
  check_values(g3, {2, 1, 4}, {20, 1, 12, 13, 30, 51, 52, 53});
  check_values(g_1d, {3}, {50, 50, 10});
}

TEST_CASE(
    "scatter_add: colliding positions add, out-of-range positions drop, src larger than index",
    "[extras][composite]") {
  Var x = grid(3, 4);
  // dim 1, index [2, 2], src [2, 3]: only src[:, :2] is scattered.
  Var s1 = scatter_add(x, 1, i64({0, 0, 3, 5}, {2, 2}), f32({1, 2, 100, 4, 8, 100}, {2, 3}));
  // dim 0 (as -2), index [1, 3], src [2, 4].
  Var s0 = scatter_add(x, -2, i32({2, 2, -1}, {1, 3}), f32({1, 2, 4, 8, 16, 32, 64, 128}, {2, 4}));
  // Int32 x, Int32 src; 1-D.
  Var s_int = scatter_add(i32({0, 0, 0}), 0, i64({2, 0, 2, 3}), i32({1, 2, 4, 8}));
  check_against_reference({s1, s0, s_int});
  check_values(s1, {3, 4}, {0 + 1 + 2, 1, 2, 3, 10, 11, 12, 13 + 4, 20, 21, 22, 23});
  check_values(s0, {3, 4}, {0, 1, 2, 3, 10, 11, 12, 13, 20 + 1, 21 + 2, 22, 23});
  CHECK(s_int.dtype() == DType::Int32);
  check_values(s_int, {3}, {2, 0, 1 + 4});
}

TEST_CASE("index_select: rows and columns, repeated and out-of-range positions",
          "[extras][composite]") {
  Var x = grid(3, 4);
  Var rows = index_select(x, 0, i32({2, 0, 2, -1, 3, -3, -4}));
  Var cols = index_select(x, -1, i64({3, 1}));
  Var x3 = make_array(DType::Int32, grid_values(6, 4), {2, 3, 4});
  Var mid = index_select(x3, 1, i32({2, 2, 0}));
  check_against_reference({rows, cols, mid});
  check_values(rows, {7, 4}, {20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23, 20, 21,
                              22, 23, 0,  0,  0, 0, 0, 1, 2,  3,  0,  0,  0,  0});
  check_values(cols, {3, 2}, {3, 1, 13, 11, 23, 21});
  CHECK(mid.dtype() == DType::Int32);
  // x3[a, b, c] = 30 a + 10 b + c
  check_values(mid, {2, 3, 4}, {20, 21, 22, 23, 20, 21, 22, 23, 0,  1,  2,  3,
                                50, 51, 52, 53, 50, 51, 52, 53, 30, 31, 32, 33});
}

TEST_CASE(
    "embedding: ids of rank 0 to 3, Int32 and Int64, negative ids from the end, out-of-range ids "
    "read zeros",
    "[extras][composite]") {
  Var w = grid(4, 3);
  Var e0 = embedding(w, i32({2}, {}));
  Var e1 = embedding(w, i32({3, 0, -1, 4, -4, -5}));
  Var e2 = embedding(w, i64({1, 1, 0, 2}, {2, 2}));
  Var e3 = embedding(w, i64({3, 2, 1, 0}, {2, 1, 2}));
  check_against_reference({e0, e1, e2, e3});
  check_values(e0, {3}, {20, 21, 22});
  check_values(e1, {6, 3}, {30, 31, 32, 0, 1, 2, 30, 31, 32, 0, 0, 0, 0, 1, 2, 0, 0, 0});
  check_values(e2, {2, 2, 3}, {10, 11, 12, 10, 11, 12, 0, 1, 2, 20, 21, 22});
  check_values(e3, {2, 1, 2, 3}, {30, 31, 32, 20, 21, 22, 10, 11, 12, 0, 1, 2});
}

TEST_CASE("one_hot: dtypes, out-of-range ids give zero rows, ids of rank 0 and 2",
          "[extras][composite]") {
  Var ids = i32({2, 0, -4, 3, 1});  // -4 is before the first class, -1 would be the last
  const std::vector<double> rows = {0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
  std::vector<Var> hots;
  const std::vector<DType> dtypes = {DType::Float32, DType::Float64, DType::Int32, DType::Int64,
                                     DType::Bool};
  for (DType dt : dtypes) hots.push_back(one_hot(ids, 3, dt));
  Var plain = one_hot(i64({1, 0, 2, 2}, {2, 2}), 3);
  Var scalar_id = one_hot(i64({1}, {}), 4);
  Var no_classes = one_hot(ids, 0);
  std::vector<Var> all = hots;
  all.insert(all.end(), {plain, scalar_id, no_classes});
  check_against_reference(all);
  for (size_t k = 0; k < dtypes.size(); ++k) {
    INFO("dtype " << dtype_name(dtypes[k]));
    CHECK(hots[k].dtype() == dtypes[k]);
    check_values(hots[k], {5, 3}, rows);
  }
  CHECK(plain.dtype() == DType::Float32);
  check_values(plain, {2, 2, 3}, {0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1});
  check_values(scalar_id, {4}, {0, 1, 0, 0});
  check_values(no_classes, {5, 0}, {});
}

// ================================================================ 4. errors

TEST_CASE("an @e naming no extra is an IndexExprError naming the op and the expression",
          "[extras][errors]") {
  Var x = tens();
  Var ids = i32({0, 1});
  std::string m = message_of<IndexExprError>([&] { reindex(x, {2}, {"@e1(i0)"}, 0, {}, {ids}); });
  CHECK_THAT(m, Contains("reindex: indexes[0]") && Contains("@e1 names no extra (1 given)") &&
                    Contains("\"@e1(i0)\"") && Contains("@e0..@e0"));
  m = message_of<IndexExprError>([&] { reindex(x, {2}, {"@e0(i0)"}); });
  CHECK_THAT(m, Contains("reindex: indexes[0]") && Contains("@e0 names no extra (0 given)") &&
                    Contains("pass the arrays as extras"));
  m = message_of<IndexExprError>([&] { reindex(x, {2}, {"i0"}, 0, {"@e3(i0) == 0"}, {ids, ids}); });
  CHECK_THAT(m, Contains("reindex: overflow_conditions[0]") &&
                    Contains("@e3 names no extra (2 given)") && Contains("\"@e3(i0) == 0\""));
  m = message_of<IndexExprError>(
      [&] { reindex_reduce(x, ReduceOp::Add, {2}, {"@e2(i0)"}, {}, {ids}); });
  CHECK_THAT(m, Contains("reindex_reduce: indexes[0]") && Contains("@e2 names no extra") &&
                    Contains("\"@e2(i0)\""));
}

TEST_CASE("an @e with the wrong number of arguments is an IndexExprError giving the rank",
          "[extras][errors]") {
  Var x = grid(3, 4);
  Var ids2 = i64({0, 1, 2, 0}, {2, 2});
  std::string m = message_of<IndexExprError>([&] {
    reindex(x, {2, 2}, {"@e0(i0)", "i1"}, 0, {}, {ids2});
  });
  CHECK_THAT(m, Contains("reindex: indexes[0]") && Contains("@e0 given 1 argument(s)") &&
                    Contains("extras[0] has rank 2") && Contains("\"@e0(i0)\""));
  m = message_of<IndexExprError>([&] {
    reindex(x, {2, 2}, {"i0", "@e0(i0, i1, 0)"}, 0, {}, {ids2});
  });
  CHECK_THAT(m, Contains("reindex: indexes[1]") && Contains("@e0 given 3 argument(s)") &&
                    Contains("\"@e0(i0, i1, 0)\""));
  m = message_of<IndexExprError>([&] { reindex(x, {2, 2}, {"@e0()", "i1"}, 0, {}, {ids2}); });
  CHECK_THAT(m, Contains("@e0 given 0 argument(s)") && Contains("rank 2"));
  // A 0-d extra takes none.
  m = message_of<IndexExprError>([&] { reindex(tens(), {2}, {"@e0(i0)"}, 0, {}, {i32({1}, {})}); });
  CHECK_THAT(m, Contains("@e0 given 1 argument(s)") && Contains("rank 0"));
  m = message_of<IndexExprError>(
      [&] { reindex_reduce(tens(), ReduceOp::Max, {3}, {"i0"}, {"@e0(i0) == 1"}, {ids2}); });
  CHECK_THAT(m, Contains("reindex_reduce: overflow_conditions[0]") &&
                    Contains("@e0 given 1 argument(s)") && Contains("\"@e0(i0) == 1\""));
}

TEST_CASE("malformed @ reads are IndexExprErrors naming the expression", "[extras][errors]") {
  Var x = tens();
  Var ids = i32({0, 1});
  struct Case {
    const char* text;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"@", "'@' not followed by 'e'"},
      {"@f0(i0)", "'@' not followed by 'e'"},
      {"@e", "'@e' not followed by a number"},
      {"@ex(", "'@e' not followed by a number"},
      {"@e(i0)", "'@e' not followed by a number"},
      {"@e0", "missing '(' after @e0"},
      {"@e0 + 1", "missing '(' after @e0"},
      {"@e0(i0", "missing ')'"},
      {"@e0(i0,)", "unexpected"},
      {"@e0(i7)", "i7"},
      {"i0 @e0(i0)", "unexpected '@e0(i0)'"},
      {"@e0(i0) == 1", "condition"},  // comparisons only in conditions
  };
  for (const Case& c : cases) {
    INFO("expression " << c.text);
    const std::string m =
        message_of<IndexExprError>([&] { reindex(x, {2}, {c.text}, 0, {}, {ids}); });
    CHECK_THAT(m, Contains("reindex: indexes[0]") && Contains(c.says) &&
                      Contains("\"" + std::string(c.text) + "\""));
  }
  const std::string m = message_of<IndexExprError>(
      [&] { reindex_reduce(x, ReduceOp::Add, {2}, {"@ex("}, {}, {ids}); });
  CHECK_THAT(m, Contains("reindex_reduce: indexes[0]") && Contains("\"@ex(\""));
}

TEST_CASE("non-integer extras are DTypeErrors, an undefined extra an Error", "[extras][errors]") {
  Var x = tens();
  reset_stats();
  std::string m = message_of<DTypeError>([&] {
    reindex(x, {2}, {"@e0(i0)"}, 0, {}, {f32({0, 1})});
  });
  CHECK_THAT(m, Contains("reindex: extras[0]") && Contains("float32") && Contains("[2]") &&
                    Contains("expected int8, uint8, int16, int32 or int64"));
  m = message_of<DTypeError>([&] {
    reindex(x, {2}, {"@e0(i0)"}, 0, {}, {i32({0, 1}), f64({0, 1}, {1, 2})});
  });
  CHECK_THAT(m, Contains("reindex: extras[1]") && Contains("float64") && Contains("[1, 2]"));
  m = message_of<DTypeError>([&] {
    reindex_reduce(x, ReduceOp::Add, {2}, {"@e0(i0)"}, {}, {i32({0, 1}) > 0.0});
  });
  CHECK_THAT(m, Contains("reindex_reduce: extras[0]") && Contains("bool"));
  // Checked even when no expression reads it.
  CHECK_THROWS_AS(reindex(x, {2}, {"i0"}, 0, {}, {f32({0, 1})}), DTypeError);
  m = message_of<Error>([&] { reindex(x, {2}, {"@e0(i0)"}, 0, {}, {Var()}); });
  CHECK_THAT(m, Contains("reindex: extras[0]") && Contains("undefined"));
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().kernels_launched == 0);
}

TEST_CASE("composites: dtype, dim and shape errors name the op and the shapes",
          "[extras][errors]") {
  Var x = grid(3, 4);
  reset_stats();
  // gather
  std::string m = message_of<DTypeError>([&] { gather(x, 1, f32({0, 1}, {1, 2})); });
  CHECK_THAT(m, Contains("gather: index") && Contains("float32") && Contains("[1, 2]") &&
                    Contains("expected int8, uint8, int16, int32 or int64"));
  m = message_of<ShapeError>([&] { gather(x, 1, i32({0, 1})); });
  CHECK_THAT(m, Contains("gather: index of shape [2]") && Contains("x of shape [3, 4]") &&
                    Contains("at dim 1") && Contains("same rank"));
  m = message_of<ShapeError>([&] { gather(x, 1, i32({0, 1, 0, 1, 0, 1, 0, 1}, {4, 2})); });
  CHECK_THAT(m, Contains("gather: index of shape [4, 2]") && Contains("[3, 4]") &&
                    Contains("index.shape[d] <= x.shape[d]"));
  m = message_of<ShapeError>([&] { gather(x, 2, i32({0}, {1, 1})); });
  CHECK_THAT(m, Contains("gather: dim 2") && Contains("[3, 4]") && Contains("-2 <= dim < 2"));
  CHECK_THROWS_AS(gather(x, -3, i32({0}, {1, 1})), ShapeError);
  m = message_of<ShapeError>([&] { gather(scalar(1, DType::Float32), 0, i32({0}, {})); });
  CHECK_THAT(m, Contains("gather") && Contains("at least one axis"));
  // scatter_add
  m = message_of<ShapeError>([&] {
    scatter_add(x, 0, i32({0, 1, 0, 1}, {2, 2}), f32({1, 2}, {2, 1}));
  });
  CHECK_THAT(m, Contains("scatter_add: index of shape [2, 2]") &&
                    Contains("larger than src of shape [2, 1]"));
  m = message_of<ShapeError>([&] {
    scatter_add(x, 0, i32({0, 1}, {1, 2, 1}), f32({1, 2}, {1, 2, 1}));
  });
  CHECK_THAT(m, Contains("scatter_add: index of shape [1, 2, 1]") && Contains("[3, 4]"));
  m = message_of<DTypeError>([&] { scatter_add(x, 0, f64({0}, {1, 1}), f32({1}, {1, 1})); });
  CHECK_THAT(m, Contains("scatter_add: index") && Contains("float64"));
  m = message_of<ShapeError>([&] { scatter_add(x, 5, i32({0}, {1, 1}), f32({1}, {1, 1})); });
  CHECK_THAT(m, Contains("scatter_add: dim 5") && Contains("[3, 4]"));
  // index_select
  m = message_of<ShapeError>([&] { index_select(x, 0, i32({0, 1}, {1, 2})); });
  CHECK_THAT(m, Contains("index_select: index of shape [1, 2]") && Contains("not 1-D") &&
                    Contains("[3, 4]"));
  m = message_of<DTypeError>([&] { index_select(x, 0, f32({0})); });
  CHECK_THAT(m, Contains("index_select: index") && Contains("float32"));
  m = message_of<ShapeError>([&] { index_select(x, -3, i32({0})); });
  CHECK_THAT(m, Contains("index_select: dim -3") && Contains("[3, 4]"));
  // embedding
  m = message_of<ShapeError>([&] { embedding(zeros({2, 3, 4}), i32({0})); });
  CHECK_THAT(m, Contains("embedding: weight of shape [2, 3, 4]") && Contains("not a table"));
  m = message_of<DTypeError>([&] { embedding(x, f32({0})); });
  CHECK_THAT(m, Contains("embedding: ids") && Contains("float32"));
  m = message_of<DTypeError>([&] { embedding(x, i32({0}) > 0.0); });
  CHECK_THAT(m, Contains("embedding: ids") && Contains("bool"));
  // one_hot
  m = message_of<ShapeError>([&] { one_hot(i32({0}), -2); });
  CHECK_THAT(m, Contains("one_hot: num_classes -2") && Contains("negative"));
  m = message_of<DTypeError>([&] { one_hot(f32({0}), 3); });
  CHECK_THAT(m, Contains("one_hot: ids") && Contains("float32"));
  // Undefined Vars.
  CHECK_THAT(message_of<Error>([&] { gather(x, 0, Var()); }), Contains("gather: index"));
  CHECK_THAT(message_of<Error>([&] { embedding(Var(), i32({0})); }), Contains("embedding: weight"));
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().kernels_launched == 0);
}

// ================================================================ 5. keys

TEST_CASE("keys never depend on the extras' values or shapes", "[extras][keys]") {
  Var x = grid(3, 4);
  Var big = make_array(DType::Float32, grid_values(7, 9), {7, 9});
  eval({x, big});
  Var small_idx = i32({3, 0, 1, 1, 2, 2}, {3, 2});
  Var big_idx = i32({8, 7, 6, 5, 4, 3, 2, 1, 0, -1, 9, 0, 0, 1}, {7, 2});
  Var wide_idx = i32(std::vector<int32_t>(7 * 5, 4), {7, 5});
  eval({small_idx, big_idx, wide_idx});
  Var a = gather(x, 1, small_idx), b = gather(big, 1, big_idx), c = gather(big, 1, wide_idx);
  REQUIRE(plan({a}).size() == 1);
  CHECK(plan({a})[0].key == plan({b})[0].key);
  CHECK(plan({a})[0].key == plan({c})[0].key);
  CHECK(built_by({a}) <= 1);  // compiled now, or found from an earlier run
  reset_stats();
  check_against_reference({b, c});
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().disk_hits == 0);
  CHECK(stats().memory_hits >= 1);
  std::vector<double> column4;  // big[r, 4] = 10 r + 4, five times a row
  for (int r = 0; r < 7; ++r)
    for (int k = 0; k < 5; ++k) column4.push_back(10 * r + 4);
  check_values(c, {7, 5}, column4);
  // 0-d extras: the value of an array or of a scalar() is not in the key either.
  Var t = tens();
  CHECK(plan({reindex(t, {3}, {"i0+@e0()"}, -1, {}, {scalar(1, DType::Int64)})})[0].key ==
        plan({reindex(t, {3}, {"i0+@e0()"}, -1, {}, {scalar(2, DType::Int64)})})[0].key);
  CHECK(plan({reindex(t, {3}, {"i0+@e0()"}, -1, {}, {i64({1}, {})})})[0].key ==
        plan({reindex(t, {3}, {"i0+@e0()"}, -1, {}, {i64({-2}, {})})})[0].key);
}

TEST_CASE("an extra's dtype or rank is in the key: a new kernel is built", "[extras][keys]") {
  // An int64 x: no other case builds these kernels, so the counts hold when the cases run in one
  // process too.
  Var x = grid(3, 4, DType::Int64);
  Var idx32 = i32({3, 0, 1, 1, 2, 2}, {3, 2});
  Var idx64 = i64({3, 0, 1, 1, 2, 2}, {3, 2});
  eval({x, idx32, idx64});
  Var a = gather(x, 1, idx32), b = gather(x, 1, idx64);
  CHECK(plan({a})[0].key != plan({b})[0].key);
  CHECK(built_by({a}) == 1);
  CHECK(built_by({b}) == 1);
  check_values(a, {3, 2}, {3, 0, 11, 11, 22, 22});
  check_values(b, {3, 2}, {3, 0, 11, 11, 22, 22});
  // The same reindex expression over a 1-D and a 2-D extra of one dtype (the 2-D read gives
  // one argument per axis).
  Var t = tens();
  Var r1 = reindex(t, {3}, {"@e0(i0)"}, -1, {}, {i64({4, 0, 1})});
  Var r2 = reindex(t, {3}, {"@e0(i0, 0)"}, -1, {}, {i64({4, 0, 1}, {3, 1})});
  CHECK(plan({r1})[0].key != plan({r2})[0].key);
  reset_stats();
  check_against_reference({r2});
  CHECK(stats().kernels_compiled + stats().disk_hits == 1);
  check_values(r2, {3}, {50, 10, 20});
}

TEST_CASE("jit: new ids values and sizes replay or retrace without compiling", "[extras][keys]") {
  auto f = jit([](Var w, Var ids) { return embedding(w, ids) * 2.0; });
  Var w = grid(4, 3);
  Var first = f(w, i32({3, 1}));
  check_values(first, {2, 3}, {60, 62, 64, 20, 22, 24});
  reset_stats();
  Var again = f(w, i32({0, 2}));            // same shapes: a replay
  Var longer = f(w, i32({2, 9, 0, 1, 3}));  // a new shape: a retrace, the same kernel
  check_values(again, {2, 3}, {0, 2, 4, 40, 42, 44});
  check_values(longer, {5, 3}, {40, 42, 44, 0, 0, 0, 0, 2, 4, 20, 22, 24, 60, 62, 64});
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().disk_hits == 0);
}

// ================================================================ 6. fusion

TEST_CASE("element-wise work on an embedding fuses into its kernel, the ids read from a buffer",
          "[extras][fusion]") {
  Var w = grid(4, 3);
  Var ids = i32({3, 0, 3, 1, 9}, {5});
  eval({w, ids});
  Var y = relu(embedding(w, ids) * 2.0 - 5.0) + 1.0;
  const std::vector<KernelInfo> kernels = plan({y});
  REQUIRE(kernels.size() == 1);
  CHECK_THAT(kernels[0].source, Contains("mj_read1("));
  CHECK(launched_by({y}) == 1);
  check_values(y, {5, 3}, {56, 58, 60, 1, 1, 1, 56, 58, 60, 16, 18, 20, 1, 1, 1});
  // A reduction absorbs the gather too.
  Var s = sum(embedding(w, ids), {1});
  REQUIRE(plan({s}).size() == 1);
  check_against_reference(s);
  check_values(s, {5}, {93, 3, 93, 33, 0});
  // A computed extra is stored: its kernel, then the fused gather reading its buffer.
  Var shifted = ids + 1.0;
  Var z = embedding(w, shifted) * 2.0;
  CHECK(plan({z}).size() == 2);
  check_against_reference(z);
  check_values(z, {5, 3}, {0, 0, 0, 20, 22, 24, 0, 0, 0, 40, 42, 44, 0, 0, 0});
}

TEST_CASE("gathered values feed reductions over the ids axis, max along a dim and a matmul",
          "[extras][fusion]") {
  Var w = grid(4, 3);
  Var ids = i64({3, 0, 3, 1, -5, 2}, {6});  // -5: before the first of 4 rows
  eval({w, ids});
  Var e = embedding(w, ids);   // [6, 3]
  Var over_ids = sum(e, {0});  // the reduced axis is the one the ids are read along
  Var row_max = max(gather(grid(3, 4), 1, i64({3, 0, 9, 2, 1, 1}, {3, 2})), {1});
  Var m = matmul(e, f32({1, 0, 0, -1, 2, 1}, {3, 2}));  // [6, 2]
  // A reduction over the middle axis of selected blocks (the read depends on the outer loop only).
  Var x3 = make_array(DType::Float32, grid_values(6, 4), {2, 3, 4});  // 30 a + 10 b + c
  Var blocks = sum(index_select(x3, 0, i32({1, 1, 0, 5})), {1});
  check_against_reference({over_ids, row_max, m, blocks});
  // rows 3, 0, 3, 1, (none), 2: column c sums 30+0+30+10+0+20 = 90, plus 5c
  check_values(over_ids, {3}, {90, 95, 100});
  // [3, 0], [out -> 0, 12], [11, 21 -> 21]: max per row
  check_values(row_max, {3}, {3, 12, 21});
  // row (a, a+1, a+2): (a + 2(a+2), -(a+1) + (a+2)) = (3a + 4, 1); a zero row gives (0, 0)
  check_values(m, {6, 2}, {94, 1, 4, 1, 94, 1, 34, 1, 0, 0, 64, 1});
  // block 1: sum over b of 30 + 10 b + c = 120 + 3c; block 0: 30 + 3c; position 5: zeros
  check_values(blocks, {4, 4},
               {120, 123, 126, 129, 120, 123, 126, 129, 30, 33, 36, 39, 0, 0, 0, 0});
}

TEST_CASE("a scalar() extra is a kernel argument, not a buffer", "[extras][fusion]") {
  Var t = tens();
  eval({t});
  Var y = reindex(t, {3}, {"i0+@e0()"}, -1, {}, {scalar(2, DType::Int32)}) * 3.0;
  const std::vector<KernelInfo> kernels = plan({y});
  REQUIRE(kernels.size() == 1);
  CHECK(kernels[0].source.find("mj_read") == std::string::npos);
  CHECK(launched_by({y}) == 1);
  check_values(y, {3}, {90, 120, 150});
}

// ================================================================ 7. gradients

TEST_CASE("gradient of reindex with extras matches finite differences", "[extras][autograd]") {
  const Var ids = i32({4, 0, 2, 4, -1, 9});
  const Var rows2 = i64({2, 0, 1, 2, 0, 0}, {2, 3});
  const Var mask = i32({0, 1, 0, 0, 1, 0});
  check_gradients("x[ids]: repeated, negative and out-of-range ids",
                  [ids](const std::vector<Var>& v) {
                    return reindex(v[0], {6}, {"@e0(i0)"}, 0.5, {}, {ids}) * v[1];
                  },
                  {In{{5}, distinct(5, -1, 1, 1)}, In{{6}, distinct(6, -1, 1, 2)}});
  check_gradients("a 2-D extra and a condition reading another extra",
                  [rows2, mask](const std::vector<Var>& v) {
                    return reindex(v[0], {2, 3}, {"@e0(i0,i1)", "i1"}, 0, {"@e1(i0*3+i1) != 0"},
                                   {rows2, mask}) *
                           v[1];
                  },
                  {In{{3, 3}, distinct(9, -1, 1, 3)}, In{{2, 3}, distinct(6, -1, 1, 4)}});
}

TEST_CASE("gradient of reindex_reduce with extras: add, max and min", "[extras][autograd]") {
  const Var t = i32({2, 0, 2, 5, -1, 0, 1});
  check_gradients("add into colliding targets",
                  [t](const std::vector<Var>& v) {
                    return reindex_reduce(v[0], ReduceOp::Add, {4}, {"@e0(i0)"}, {}, {t}) * v[1];
                  },
                  {In{{7}, distinct(7, -1, 1, 11)}, In{{4}, {0.5, -1.5, 2.0, 0.25}}});
  // Every target is hit, so no identity (+-inf) reaches the loss.
  const Var u = i64({2, 0, 2, 3, 1, 0, 1, 3});
  check_gradients("max and min, ties-free",
                  [u](const std::vector<Var>& v) {
                    return reindex_reduce(v[0], ReduceOp::Max, {4}, {"@e0(i0)"}, {}, {u}) * v[1] +
                           reindex_reduce(v[0], ReduceOp::Min, {4}, {"@e0(i0)"}, {}, {u});
                  },
                  {In{{8}, distinct(8, -1, 1, 12)}, In{{4}, {0.5, -1.5, 2.0, 0.25}}});
}

TEST_CASE("gradients of gather, scatter_add, index_select and embedding", "[extras][autograd]") {
  const Var g_idx = i64({3, 0, 0, 1, 2, 1}, {2, 3});
  check_gradients("gather along dim 1 with repeats",
                  [g_idx](const std::vector<Var>& v) { return gather(v[0], 1, g_idx) * v[1]; },
                  {In{{3, 4}, distinct(12, -1, 1, 21)}, In{{2, 3}, distinct(6, -1, 1, 22)}});
  const Var s_idx = i32({0, 2, 0, 2, 1, 7}, {2, 3});
  check_gradients(
      "scatter_add w.r.t. x and src",
      [s_idx](const std::vector<Var>& v) { return scatter_add(v[0], 1, s_idx, v[1]) * v[2]; },
      {In{{2, 3}, distinct(6, -1, 1, 23)}, In{{2, 4}, distinct(8, -1, 1, 24)},
       In{{2, 3}, distinct(6, -1, 1, 25)}});
  const Var sel = i32({2, 0, 2, -1});
  check_gradients("index_select along dim 0 with a repeat",
                  [sel](const std::vector<Var>& v) { return index_select(v[0], 0, sel) * v[1]; },
                  {In{{3, 2}, distinct(6, -1, 1, 26)}, In{{4, 2}, distinct(8, -1, 1, 27)}});
  const Var ids = i64({1, 3, 1, 1}, {2, 2});
  check_gradients("embedding with colliding ids",
                  [ids](const std::vector<Var>& v) { return embedding(v[0], ids) * v[1]; },
                  {In{{4, 3}, distinct(12, -1, 1, 28)}, In{{2, 2, 3}, distinct(12, -1, 1, 29)}});
}

TEST_CASE("embedding's gradient sums the rows of repeated ids, unused rows get 0",
          "[extras][autograd]") {
  Var w = f64(grid_values(4, 3), {4, 3});
  Var ids = i32({1, 3, 1, 1, 9});
  Var scale = f64({1, 2, 4, 8, 16}, {5, 1});
  Var loss = sum(embedding(w, ids) * scale);
  std::vector<Var> g = grad(loss, {w});
  eval({loss, g[0]});
  // row 1: 1 + 4 + 8; row 3: 2; id 9 is out of range and reaches nothing.
  check_values(g[0], {4, 3}, {0, 0, 0, 13, 13, 13, 0, 0, 0, 2, 2, 2});
  // scatter_add's gradient w.r.t. src is a gather at the same positions (dropped ones get 0).
  Var x = f64({0, 0, 0}, {3});
  Var src = f64({1, 2, 3, 4}, {4});
  Var weights = f64({10, 20, 30}, {3});
  Var l2 = sum(scatter_add(x, 0, i64({2, 0, 5, 2}), src) * weights);
  std::vector<Var> g2 = grad(l2, {x, src});
  eval({l2, g2[0], g2[1]});
  check_values(g2[0], {3}, {10, 20, 30});
  check_values(g2[1], {4}, {30, 10, 0, 30});
}

TEST_CASE("large gathers and scatters (threaded loops) equal the reference, forward and backward",
          "[extras][autograd]") {
  // Sizes past the kernels' threading threshold (32768 elements of work): the parallel gather
  // and the scatter split between threads along the embedding dimension.
  const int64_t n = 300, v = 50, d = 128;
  std::vector<int32_t> ids(n);
  for (int64_t k = 0; k < n; ++k) ids[size_t(k)] = int32_t((k * 37) % (v + 3)) - 1;  // -1..v+1
  Var id = i32(ids);
  Var w = randn({v, d}, 5, DType::Float64);
  Var c = randn({n, d}, 6, DType::Float64);
  eval({id, w, c});
  Var e = embedding(w, id);
  Var loss = sum(e * c);
  std::vector<Var> g = grad(loss, {w});
  check_against_reference({e, loss, g[0]});
}

TEST_CASE(
    "extras get no gradient: grad w.r.t. an index is a DTypeError, a float cast to an index "
    "gets zeros",
    "[extras][autograd]") {
  Var x = f64(grid_values(3, 4), {3, 4});
  Var idx = i32({3, 0, 1, 1}, {2, 2});
  Var loss = sum(gather(x, 1, idx));
  std::string m = message_of<DTypeError>([&] { grad(loss, {x, idx}); });
  CHECK_THAT(m, Contains("grad: wrt[1]") && Contains("int32[2, 2]") && Contains("not a float"));
  // An index computed from a float: the path through the index is cut by the cast.
  Var pos = f64({3, 0, 1, 1}, {2, 2});
  Var loss2 = sum(gather(x, 1, cast(pos, DType::Int64)) * 1.0);
  std::string err;
  std::vector<Var> g;
  {
    CaptureStderr capture;
    g = grad(loss2, {x, pos});
    err = capture.text();
  }
  INFO(err);
  CHECK(count_occurrences(err, "metajit: warning: ") == 1);
  CHECK_THAT(err, Contains("wrt[1] float64[2, 2] does not affect the loss") &&
                      Contains("cut by a cast to int64"));
  eval({loss2, g[0], g[1]});
  check_values(g[1], {2, 2}, {0, 0, 0, 0});
  check_values(g[0], {3, 4}, {1, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0});
}
