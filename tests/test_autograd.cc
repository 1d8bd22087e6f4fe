// Reverse-mode autograd (include/metajit/autograd.h): every backward rule checked against
// central finite differences of metajit's own float64 forward, the conventions at kinks, ties,
// zeros and NaN checked exactly, the scenarios of Jittor's test_grad.py, the warnings and
// errors, and forward and backward evaluated as one plan.
//
// Compile time matters (each distinct kernel is a g++ run): a finite-difference check evaluates
// every perturbed input with the same graph as the gradient it checks (the loss and its
// gradients together), so the program cache replays the plan already compiled and the
// perturbations compile nothing.
#include <metajit/metajit.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "support/capture_stderr.h"
#include "support/distinct_values.h"
#include "support/exceptions.h"
#include "support/gradient_check.h"
#include "support/reference_check.h"
#include "support/text.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::CaptureStderr;
using metajit_test::check_gradients;
using metajit_test::check_gradients_or_throw;
using metajit_test::count_occurrences;
using metajit_test::FdOptions;
using metajit_test::In;
using metajit_test::leaf;
using metajit_test::LossFn;
using metajit_test::message_of;
using metajit_test::stored;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------- values

// Every value of a float or integer Var as double (evaluating it first).
std::vector<double> values_of(const Var& v) {
  return metajit_test_detail::eval_values_as_double(v);
}

using metajit_test::distinct;
using metajit_test::Lcg;

// `n` values with magnitudes in [lo, hi] (lo > 0) and seeded signs: away from the kink at 0.
std::vector<double> signed_away_from_zero(size_t n, double lo, double hi, uint64_t seed) {
  std::vector<double> v = distinct(n, lo, hi, seed);
  Lcg rng(seed + 1000);
  for (double& x : v)
    if (rng.next() & 1) x = -x;
  return v;
}

// Checks `v` element-wise: NaN expects NaN, +-inf expects itself, else within `tol`.
void check_values(const Var& v, const std::vector<double>& expected, double tol = 1e-12) {
  const std::vector<double> got = values_of(v);
  REQUIRE(got.size() == expected.size());
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("element " << k << ": got " << got[k] << ", expected " << expected[k]);
    if (std::isnan(expected[k]))
      CHECK(std::isnan(got[k]));
    else if (std::isinf(expected[k]))
      CHECK(got[k] == expected[k]);
    else
      CHECK(std::fabs(got[k] - expected[k]) <= tol * (1 + std::fabs(expected[k])));
  }
}

Var f64(const std::vector<double>& v, Shape shape) {
  return array(v, std::move(shape));
}
Var f64(const std::vector<double>& v) {
  return array(v, {int64_t(v.size())});
}
Var f64(double v) {
  return scalar(v, DType::Float64);
}

// ---------------------------------------------------------------- stderr

// grad(loss, wrt) with stderr captured: the gradients and what was written.
std::vector<Var> grad_capturing(const Var& loss, const std::vector<Var>& wrt, std::string& err) {
  CaptureStderr capture;
  std::vector<Var> g = grad(loss, wrt);
  err = capture.text();
  return g;
}

}  // namespace

// ================================================================ 1. rules vs finite differences

TEST_CASE("gradients of add, sub, mul, div match finite differences, with broadcasting",
          "[autograd][fd]") {
  const In a{{2, 3}, distinct(6, 0.5, 2.0, 1)};
  const In b{{3}, distinct(3, 0.5, 2.0, 2)};     // new axis
  const In c{{2, 1}, distinct(2, 0.5, 2.0, 3)};  // expanded axis
  check_gradients("add", [](const std::vector<Var>& x) { return x[0] + x[1] + x[2]; }, {a, b, c});
  check_gradients("sub", [](const std::vector<Var>& x) { return (x[0] - x[1]) - x[2]; }, {a, b, c});
  check_gradients("mul", [](const std::vector<Var>& x) { return x[0] * x[1] * x[2]; }, {a, b, c});
  check_gradients("div", [](const std::vector<Var>& x) { return x[0] / x[1] / x[2]; }, {a, b, c});
  check_gradients(
      "scalar operands",
      [](const std::vector<Var>& x) { return (3.0 - x[0] * 2.0) / (1.5 + x[0]) + 2.0 / x[0]; },
      {a});
}

TEST_CASE("gradients of the unary functions match finite differences", "[autograd][fd]") {
  const In anywhere{{2, 4}, distinct(8, -1.5, 1.5, 11)};
  const In positive{{2, 4}, distinct(8, 0.3, 2.5, 12)};
  const In away{{2, 4}, signed_away_from_zero(8, 0.2, 1.5, 13)};  // kinks at 0
  check_gradients("exp", [](const std::vector<Var>& x) { return exp(x[0]); }, {anywhere});
  check_gradients("log", [](const std::vector<Var>& x) { return log(x[0]); }, {positive});
  check_gradients("sqrt", [](const std::vector<Var>& x) { return sqrt(x[0]); }, {positive});
  check_gradients("sin", [](const std::vector<Var>& x) { return sin(x[0] * 2.0); }, {anywhere});
  check_gradients("cos", [](const std::vector<Var>& x) { return cos(x[0] * 2.0); }, {anywhere});
  check_gradients("tanh", [](const std::vector<Var>& x) { return tanh(x[0] * 2.0); }, {anywhere});
  check_gradients("sigmoid", [](const std::vector<Var>& x) { return sigmoid(x[0] * 3.0); },
                  {anywhere});
  check_gradients("neg", [](const std::vector<Var>& x) { return -x[0] * x[0]; }, {anywhere});
  check_gradients("abs", [](const std::vector<Var>& x) { return abs(x[0]) * x[0]; }, {away});
  check_gradients("relu", [](const std::vector<Var>& x) { return relu(x[0]) * x[0]; }, {away});
}

TEST_CASE("gradients of pow (both operands), maximum, minimum and where match finite differences",
          "[autograd][fd]") {
  const In base{{2, 3}, distinct(6, 0.4, 2.0, 21)};
  const In expo{{2, 3}, distinct(6, -1.5, 2.5, 22)};
  check_gradients("pow(a, b)", [](const std::vector<Var>& x) { return pow(x[0], x[1]); },
                  {base, expo});
  check_gradients("pow(a, 3) at negative a",
                  [](const std::vector<Var>& x) { return pow(x[0], 3.0); },
                  {In{{4}, {-1.3, -0.4, 0.7, 1.1}}});
  check_gradients("pow(a, b) with a broadcast exponent",
                  [](const std::vector<Var>& x) { return pow(x[0], x[1]); },
                  {base, In{{3}, {0.5, 1.5, -0.75}}});
  // b = a + an offset of at least 0.1 either way: never a tie within h.
  std::vector<double> av = distinct(6, -1.0, 1.0, 23), bv = av;
  const std::vector<double> off = signed_away_from_zero(6, 0.1, 0.6, 24);
  for (size_t k = 0; k < bv.size(); ++k) bv[k] += off[k];
  const In a{{2, 3}, av}, b{{2, 3}, bv};
  check_gradients("maximum", [](const std::vector<Var>& x) { return maximum(x[0], x[1]) * x[0]; },
                  {a, b});
  check_gradients("minimum", [](const std::vector<Var>& x) { return minimum(x[0], x[1]) * x[1]; },
                  {a, b});
  check_gradients(
      "maximum with a scalar",
      [](const std::vector<Var>& x) { return maximum(x[0], 0.05) + minimum(x[0], -0.05); }, {a});
  const Var mask = array(std::vector<bool>{true, false, false, true, true, false}, {2, 3});
  check_gradients(
      "where", [mask](const std::vector<Var>& x) { return where(mask, x[0] * x[0], x[1] * 3.0); },
      {a, b});
  check_gradients("where with broadcast branches and a computed condition",
                  [](const std::vector<Var>& x) { return where(x[0] > x[1], x[0], x[2]) * x[1]; },
                  {a, b, In{{3}, {0.25, -0.5, 0.75}}});
}

TEST_CASE("gradients through float32 <-> float64 casts", "[autograd][fd]") {
  // A float32 input read as float64: the loss is quadratic in it, so a central difference with
  // a step exact in float32 is exact up to rounding.
  check_gradients(
      "cast float32 -> float64",
      [](const std::vector<Var>& x) {
        Var w = cast(x[0], DType::Float64);
        return w * w * x[1] + w;
      },
      {In{{5}, {0.5, -1.25, 2.0, 0.75, -0.375}, DType::Float32}, In{{5}, distinct(5, -1, 1, 31)}},
      FdOptions{1.0 / 64, 1e-5});
  // A float64 input through float32 and back: exact values (a difference through float32 would
  // measure rounding).
  Var x = f64({0.5, -1.5, 2.25});
  Var w32 = array(std::vector<float>{2.0f, -3.0f, 0.5f}, {3});
  Var loss = sum(cast(cast(x, DType::Float32) * w32, DType::Float64));
  std::vector<Var> g = grad(loss, {x, w32});
  eval({loss, g[0], g[1]});
  CHECK(g[0].dtype() == DType::Float64);
  CHECK(g[1].dtype() == DType::Float32);
  check_values(g[0], {2.0, -3.0, 0.5});
  check_values(g[1], {0.5, -1.5, 2.25});
}

TEST_CASE("gradient of broadcast_to: new and expanded axes, dims argument", "[autograd][fd]") {
  const In row{{3}, distinct(3, -1, 1, 41)};
  const In col{{2, 1}, distinct(2, -1, 1, 42)};
  const In w{{2, 3, 4}, distinct(24, -1, 1, 43)};
  check_gradients("new leading axes",
                  [](const std::vector<Var>& x) {
                    return broadcast_to(x[0], {4, 2, 3}) * x[1];
                  },
                  {row, In{{4, 2, 3}, distinct(24, -1, 1, 44)}});
  check_gradients("expanded axis",
                  [](const std::vector<Var>& x) {
                    return broadcast_to(x[0], {2, 5}) * x[0];
                  },
                  {col});
  check_gradients("dims: a new middle axis and an expanded last axis",
                  [](const std::vector<Var>& x) {
                    return broadcast_to(x[0], {2, 3, 4}, {1}) * x[1];
                  },
                  {col, w});
  check_gradients("dims: a new trailing axis given as a negative axis",
                  [](const std::vector<Var>& x) {
                    return broadcast_to(x[0], {3, 4}, {-1}) * x[1];
                  },
                  {row, In{{3, 4}, distinct(12, -1, 1, 45)}});
}

TEST_CASE("gradients of sum, mean, max, min, prod over axes", "[autograd][fd]") {
  const In x{{2, 3, 4}, distinct(24, -1.5, 1.5, 51)};
  const In pos{{2, 3, 4}, distinct(24, 0.5, 1.5, 52)};  // prod: moderate values, no zero
  const In w34{{3, 4}, distinct(12, -1, 1, 53)};
  const In w2{{2}, {0.7, -1.3}};
  check_gradients("sum over all", [](const std::vector<Var>& v) { return sum(v[0] * v[0]); }, {x});
  check_gradients("sum over axis 0",
                  [](const std::vector<Var>& v) { return sum(v[0], {0}) * v[1]; }, {x, w34});
  check_gradients("sum over axis -1, keepdims",
                  [](const std::vector<Var>& v) { return sum(v[0], {-1}, true) * v[0]; }, {x});
  check_gradients("mean over axes 0, 2",
                  [](const std::vector<Var>& v) {
                    return sin(mean(v[0], {0, 2}));
                  },
                  {x});
  check_gradients("mean over all, keepdims",
                  [](const std::vector<Var>& v) { return mean(v[0], {}, true) * v[0]; }, {x});
  check_gradients("max over axis -2, keepdims",
                  [](const std::vector<Var>& v) { return max(v[0], {-2}, true) * v[0]; }, {x});
  check_gradients("max over axes 1, 2",
                  [](const std::vector<Var>& v) {
                    return max(v[0], {1, 2}) * v[1];
                  },
                  {x, w2});
  check_gradients("min over axis 0",
                  [](const std::vector<Var>& v) { return min(v[0], {0}) * v[1]; }, {x, w34});
  check_gradients("min over all", [](const std::vector<Var>& v) { return min(v[0]) * 3.0; }, {x});
  check_gradients("prod over axis 1",
                  [](const std::vector<Var>& v) { return prod(v[0], {1}) * v[1]; },
                  {pos, In{{2, 4}, distinct(8, -1, 1, 54)}});
  check_gradients("prod over axis -1, keepdims, signed values",
                  [](const std::vector<Var>& v) { return prod(v[0], {-1}, true) * v[0]; },
                  {In{{2, 3, 4}, signed_away_from_zero(24, 0.5, 1.5, 55)}});
  check_gradients("prod over all", [](const std::vector<Var>& v) { return prod(v[0]); }, {pos});
}

TEST_CASE("gradient of reindex: padding, overflow conditions, strides, flips, non-invertible maps",
          "[autograd][fd]") {
  const In x34{{3, 4}, distinct(12, -1, 1, 61)};
  const In x44{{4, 4}, distinct(16, -1, 1, 62)};
  const In x7{{7}, distinct(7, -1, 1, 63)};
  check_gradients("padding with an overflow value",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {5, 6}, {"i0-1", "i1-1"}, 0.5) * v[1];
                  },
                  {x34, In{{5, 6}, distinct(30, -1, 1, 64)}});
  check_gradients("padding, through log (the gradient reaching reindex is a division)",
                  [](const std::vector<Var>& v) {
                    return log(reindex(v[0], {5, 6}, {"i0-1", "i1-2"}, 3.0) + 2.0);
                  },
                  {x34});
  check_gradients(
      "transpose with overflow conditions",
      [](const std::vector<Var>& v) {
        return reindex(v[0], {4, 4}, {"i1", "i0"}, 2.0, {"(i0+i1)%3==0", "i0==3"}) * v[1];
      },
      {x44, In{{4, 4}, distinct(16, -1, 1, 65)}});
  check_gradients("overflow conditions, through log",
                  [](const std::vector<Var>& v) {
                    return log(reindex(v[0], {4, 4}, {"i0", "i1"}, 0.0, {"i0<i1"}) + 2.0);
                  },
                  {x44});
  check_gradients("stride 2 with an offset",
                  [](const std::vector<Var>& v) { return reindex(v[0], {3}, {"i0*2+1"}) * v[1]; },
                  {x7, In{{3}, {0.5, -2.0, 1.5}}});
  check_gradients("flip (coefficient -1)",
                  [](const std::vector<Var>& v) { return reindex(v[0], {7}, {"6-i0"}) * v[0]; },
                  {x7});
  check_gradients(
      "coefficient -2 running out of range",
      [](const std::vector<Var>& v) { return reindex(v[0], {5}, {"6-i0*2"}, -1.0) * v[1]; },
      {x7, In{{5}, distinct(5, -1, 1, 66)}});
  check_gradients("overlapping windows (i0+i1)",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {5, 3}, {"i0+i1"}) * v[1];
                  },
                  {x7, In{{5, 3}, distinct(15, -1, 1, 67)}});
  check_gradients("a new axis and a constant index",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {2, 4}, {"1", "i1"}) * v[1];
                  },
                  {x34, In{{2, 4}, distinct(8, -1, 1, 68)}});
  check_gradients("diagonal (i0, i0): not invertible",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {4}, {"i0", "i0"}) * v[1];
                  },
                  {x44, In{{4}, {1.5, -0.5, 2.0, 0.25}}});
  check_gradients("modulo (several outputs read one input)",
                  [](const std::vector<Var>& v) { return reindex(v[0], {10}, {"i0%7"}) * v[1]; },
                  {x7, In{{10}, distinct(10, -1, 1, 69)}});
  check_gradients("stride 2 windows of 3 (i0*2+i1)",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {3, 3}, {"i0*2+i1"}) * v[1];
                  },
                  {x7, In{{3, 3}, distinct(9, -1, 1, 161)}});
  check_gradients("a negative coefficient on the summed index (i0-i1+2)",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {3, 3}, {"i0-i1+2"}) * v[1];
                  },
                  {In{{5}, distinct(5, -1, 1, 162)}, In{{3, 3}, distinct(9, -1, 1, 163)}});
  check_gradients("one output index in two axes (i0+i2, i1+i2)",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {3, 3, 2}, {"i0+i2", "i1+i2"}) * v[1];
                  },
                  {x44, In{{3, 3, 2}, distinct(18, -1, 1, 164)}});
  check_gradients("division in an index (i0/2)",
                  [](const std::vector<Var>& v) { return reindex(v[0], {6}, {"i0/2"}) * v[1]; },
                  {In{{3}, {0.5, -1.0, 1.5}}, In{{6}, distinct(6, -1, 1, 165)}});
  check_gradients("a condition on an index no axis reads",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {4, 3}, {"i0"}, 0.0, {"i1>i0"}) * v[1];
                  },
                  {In{{4}, distinct(4, -1, 1, 166)}, In{{4, 3}, distinct(12, -1, 1, 167)}});
  // Mixed radix: heads split out of a packed axis (attention's q, k, v out of one qkv) are
  // solved digit by digit, with no sum over candidates.
  const In x212{{2, 12}, distinct(24, -1, 1, 168)};
  check_gradients("heads out of a packed axis (i1*3+i2)",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {2, 2, 3}, {"i0", "i1*3+i2"}) * v[1];
                  },
                  {x212, In{{2, 2, 3}, distinct(12, -1, 1, 169)}});
  check_gradients("the second slice of a packed axis (6+i2*3+i1)",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {2, 3, 2}, {"i0", "6+i2*3+i1"}) * v[1];
                  },
                  {x212, In{{2, 3, 2}, distinct(12, -1, 1, 170)}});
  check_gradients("digits past the end read the overflow value (i1*4+i2*2+1)",
                  [](const std::vector<Var>& v) {
                    return reindex(v[0], {2, 4, 2}, {"i0", "i1*4+i2*2+1"}, 0.5) * v[1];
                  },
                  {x212, In{{2, 4, 2}, distinct(16, -1, 1, 171)}});
  check_gradients("a 0-d input spread over a shape",
                  [](const std::vector<Var>& v) { return reindex(v[0], {3}, {}) * v[1]; },
                  {In{{}, {0.7}}, In{{3}, {0.5, -1.5, 2.0}}});
}

TEST_CASE("gradient of a head split out of a packed axis is a gather with no sum", "[autograd]") {
  Var qkv = randn({2, 5, 24}, 1), r = randn({2, 2, 5, 4}, 2);
  eval({qkv, r});
  const std::vector<std::string> idx = {"i0", "i2", "8+i1*4+i3"};  // k of a [.., 3*2*4] qkv
  Var g = grad(sum(reindex(qkv, {2, 2, 5, 4}, idx) * r), {qkv})[0];
  for (const KernelInfo& k : plan({g}))
    for (const std::string& op : k.ops) CHECK(op.rfind("reduce", 0) != 0);
  // The adjoint by definition: the scatter of r into qkv's shape.
  const std::vector<float> want =
      reindex_reduce(r, ReduceOp::Add, {2, 5, 24}, idx).to_vector<float>();
  const std::vector<float> got = g.to_vector<float>();
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) CHECK(got[k] == want[k]);
}

TEST_CASE("gradient of reindex with constant indexes: rows read, and rows never read",
          "[autograd][fd]") {
  // The gradients of several constant-index reads are gathers with a summed free axis each,
  // added: one kernel with two column reductions.
  const In x34{{3, 4}, distinct(12, -1, 1, 61)};
  check_gradients("two rows read (constant indexes 0 and 2)",
                  [](const std::vector<Var>& v) {
                    return sum(reindex(v[0], {2, 4}, {"0", "i1"}) * v[1] +
                               reindex(v[0], {2, 4}, {"2", "i1"}) * v[1]);
                  },
                  {x34, In{{2, 4}, distinct(8, -1, 1, 168)}});
  check_gradients("constant indexes out of range: never read",
                  [](const std::vector<Var>& v) {
                    return sum(reindex(v[0], {2, 4}, {"5", "i1"}, 0.5) * v[1] +
                               reindex(v[0], {2, 4}, {"-1", "i1"}, 0.5) * v[1]) +
                           sum(v[0]) * 0.25;
                  },
                  {x34, In{{2, 4}, distinct(8, -1, 1, 168)}});
}

TEST_CASE("gradient of a Var broadcast by two ops (a bias used twice)", "[autograd][fd]") {
  // x's gradient is the sum over axis 0 of each broadcast's gradient: two column reductions
  // added in one kernel.
  check_gradients(
      "x + A and x * B with A [4, 3], B [5, 3]",
      [](const std::vector<Var>& v) { return sum((v[0] + v[1]) * v[1]) + sum(v[0] * v[2] * v[2]); },
      {In{{3}, distinct(3, -1, 1, 171)}, In{{4, 3}, distinct(12, -1, 1, 172)},
       In{{5, 3}, distinct(15, -1, 1, 173)}});
}

TEST_CASE("gradient of reindex_reduce with add, mul, max, min and colliding targets",
          "[autograd][fd]") {
  const In y6{{6}, distinct(6, -1.5, 1.5, 71)};
  const In y34{{3, 4}, distinct(12, -1.5, 1.5, 72)};
  check_gradients("add, two inputs per target",
                  [](const std::vector<Var>& v) {
                    return reindex_reduce(v[0], ReduceOp::Add, {3}, {"i0/2"}) * v[1];
                  },
                  {y6, In{{3}, {0.5, -1.5, 2.0}}});
  check_gradients("add with an overflow condition and out-of-range targets",
                  [](const std::vector<Var>& v) {
                    return reindex_reduce(v[0], ReduceOp::Add, {6}, {"i0+i1-1"}, {"i1==2"}) * v[1];
                  },
                  {y34, In{{6}, distinct(6, -1, 1, 73)}});
  check_gradients("mul, two inputs per target",
                  [](const std::vector<Var>& v) {
                    return reindex_reduce(v[0], ReduceOp::Mul, {3}, {"i0%3"}) * v[1];
                  },
                  {In{{6}, signed_away_from_zero(6, 0.5, 1.5, 74)}, In{{3}, {0.5, -1.5, 2.0}}});
  check_gradients("max, anti-diagonals",
                  [](const std::vector<Var>& v) {
                    return reindex_reduce(v[0], ReduceOp::Max, {6}, {"i0+i1"}) * v[1];
                  },
                  {y34, In{{6}, distinct(6, -1, 1, 75)}});
  check_gradients("min, columns",
                  [](const std::vector<Var>& v) {
                    return reindex_reduce(v[0], ReduceOp::Min, {4}, {"i1"}) * v[1];
                  },
                  {y34, In{{4}, distinct(4, -1, 1, 76)}});
  check_gradients("max, two inputs per target with an overflow condition",
                  [](const std::vector<Var>& v) {
                    return reindex_reduce(v[0], ReduceOp::Max, {3}, {"i0/2"}, {"i0==1"}) * v[1];
                  },
                  {y6, In{{3}, {0.5, -1.5, 2.0}}});
  check_gradients("mul with an overflow condition and out-of-range targets",
                  [](const std::vector<Var>& v) {
                    return reindex_reduce(v[0], ReduceOp::Mul, {3}, {"i0-1"}, {"i1==0"}) * v[1];
                  },
                  {In{{3, 2}, signed_away_from_zero(6, 0.5, 1.5, 171)}, In{{3}, {0.5, -1.5, 2.0}}});
  check_gradients("everything into one 0-d target: add, mul, max, min",
                  [](const std::vector<Var>& v) {
                    return reindex_reduce(v[0], ReduceOp::Add, {}, {}) * 0.5 +
                           reindex_reduce(v[0], ReduceOp::Mul, {}, {}) +
                           reindex_reduce(v[0], ReduceOp::Max, {}, {}) * 2.0 -
                           reindex_reduce(v[0], ReduceOp::Min, {}, {}) * 3.0;
                  },
                  {In{{2, 3}, signed_away_from_zero(6, 0.5, 1.5, 172)}});
}

TEST_CASE("gradients of reshape, transpose, matmul and softmax", "[autograd][fd]") {
  check_gradients("reshape",
                  [](const std::vector<Var>& v) {
                    return reshape(v[0], {3, -1}) * v[1];
                  },
                  {In{{2, 6}, distinct(12, -1, 1, 81)}, In{{3, 4}, distinct(12, -1, 1, 82)}});
  check_gradients("transpose",
                  [](const std::vector<Var>& v) {
                    return transpose(v[0], {2, 0, 1}) * v[1];
                  },
                  {In{{2, 3, 4}, distinct(24, -1, 1, 83)}, In{{4, 2, 3}, distinct(24, -1, 1, 84)}});
  check_gradients("matmul", [](const std::vector<Var>& v) { return tanh(matmul(v[0], v[1])); },
                  {In{{3, 4}, distinct(12, -1, 1, 85)}, In{{4, 2}, distinct(8, -1, 1, 86)}});
  check_gradients(
      "batched matmul with a broadcast batch",
      [](const std::vector<Var>& v) { return matmul(v[0], v[1]) * v[2]; },
      {In{{2, 1, 3, 2}, distinct(12, -1, 1, 87)}, In{{3, 2, 2}, distinct(12, -1, 1, 88)},
       In{{2, 3, 3, 2}, distinct(36, -1, 1, 89)}});
  check_gradients("softmax over the last axis",
                  [](const std::vector<Var>& v) { return softmax(v[0], 1) * v[1]; },
                  {In{{3, 4}, distinct(12, -2, 2, 90)}, In{{3, 4}, distinct(12, -1, 1, 91)}});
  check_gradients("softmax over axis -2",
                  [](const std::vector<Var>& v) { return softmax(v[0], -2) * v[1]; },
                  {In{{3, 4}, distinct(12, -2, 2, 92)}, In{{3, 4}, distinct(12, -1, 1, 93)}});
}

TEST_CASE("gradients of conv2d (stride, padding, dilation) and max_pool2d",
          "[autograd][fd][slow]") {
  const In x{{1, 2, 5, 5}, distinct(50, -1, 1, 101)};
  const In w{{2, 2, 3, 3}, distinct(36, -1, 1, 102)};
  check_gradients("conv2d stride 1",
                  [](const std::vector<Var>& v) { return conv2d(v[0], v[1]) * v[2]; },
                  {x, w, In{{1, 2, 3, 3}, distinct(18, -1, 1, 103)}});
  check_gradients("conv2d stride 2 padding 1",
                  [](const std::vector<Var>& v) { return conv2d(v[0], v[1], 2, 1) * v[2]; },
                  {x, w, In{{1, 2, 3, 3}, distinct(18, -1, 1, 104)}});
  check_gradients("conv2d dilation 2 padding 1",
                  [](const std::vector<Var>& v) { return conv2d(v[0], v[1], 1, 1, 2) * v[2]; },
                  {x, w, In{{1, 2, 3, 3}, distinct(18, -1, 1, 105)}});
  check_gradients("conv2d stride 2 dilation 2 padding 2, through tanh",
                  [](const std::vector<Var>& v) { return tanh(conv2d(v[0], v[1], 2, 2, 2)); },
                  {x, w});
  check_gradients(
      "conv2d batch 2, 3 input channels, padding 1",
      [](const std::vector<Var>& v) { return conv2d(v[0], v[1], 1, 1) * v[2]; },
      {In{{2, 3, 3, 3}, distinct(54, -1, 1, 108)}, In{{2, 3, 2, 2}, distinct(24, -1, 1, 109)},
       In{{2, 2, 4, 4}, distinct(64, -1, 1, 110)}});
  check_gradients(
      "max_pool2d kernel 3 stride 1 padding 1",
      [](const std::vector<Var>& v) { return max_pool2d(v[0], 3, 1, 1) * v[1]; },
      {In{{1, 2, 4, 4}, distinct(32, -1, 1, 111)}, In{{1, 2, 4, 4}, distinct(32, -1, 1, 112)}});
  check_gradients("max_pool2d kernel 3 stride 2 padding 1 (overlapping windows)",
                  [](const std::vector<Var>& v) { return max_pool2d(v[0], 3, 2, 1) * v[1]; },
                  {x, In{{1, 2, 3, 3}, distinct(18, -1, 1, 106)}});
  check_gradients("max_pool2d kernel 2 stride 2",
                  [](const std::vector<Var>& v) { return max_pool2d(v[0], 2, 2) * v[1]; },
                  {x, In{{1, 2, 2, 2}, distinct(8, -1, 1, 107)}});
}

TEST_CASE("second-order gradients (the backward graphs' own rules) match finite differences",
          "[autograd][fd][slow]") {
  // f returns a first gradient (times fixed weights): checking it against central differences
  // differentiates the backward graph, whose gathers have divisions and modulos in their
  // indexes, wheres, comparisons and reindex_reduces.
  const In a{{3, 4}, distinct(12, -1, 1, 301)}, b{{4, 2}, distinct(8, -1, 1, 302)};
  const Var vb = f64(distinct(8, -1, 1, 303), {4, 2});
  check_gradients("tanh(matmul)",
                  [vb](const std::vector<Var>& v) {
                    return grad(sum(tanh(matmul(v[0], v[1]))), {v[1]})[0] * vb;
                  },
                  {a, b});
  const In x{{1, 2, 5, 5}, distinct(50, -1, 1, 304)}, w{{2, 2, 3, 3}, distinct(36, -1, 1, 305)};
  const Var vx = f64(distinct(50, -1, 1, 306), {1, 2, 5, 5});
  const Var vw = f64(distinct(36, -1, 1, 307), {2, 2, 3, 3});
  check_gradients("conv2d stride 2 padding 1, through tanh",
                  [vx, vw](const std::vector<Var>& v) {
                    std::vector<Var> g = grad(sum(tanh(conv2d(v[0], v[1], 2, 1))), {v[0], v[1]});
                    return sum(g[0] * vx) + sum(g[1] * vw);
                  },
                  {x, w});
  const Var vp = f64(distinct(18, -1, 1, 308), {1, 2, 3, 3});
  check_gradients("max_pool2d, squared",
                  [vp, vx](const std::vector<Var>& v) {
                    Var p = max_pool2d(v[0], 3, 2, 1);
                    return grad(sum(p * p * vp), {v[0]})[0] * vx;
                  },
                  {x});
  const Var vs = f64(distinct(12, -1, 1, 309), {3, 4});
  check_gradients(
      "softmax",
      [vs](const std::vector<Var>& v) { return grad(sum(softmax(v[0], 1) * vs), {v[0]})[0] * vs; },
      {In{{3, 4}, distinct(12, -2, 2, 310)}});
  const Var v44 = f64(distinct(16, -1, 1, 311), {4, 4});
  check_gradients("reindex with conditions and a stride",
                  [v44](const std::vector<Var>& v) {
                    Var y = reindex(v[0], {4, 4}, {"i1*2", "i0"}, 0.5, {"i0==i1"});
                    return grad(sum(sin(y) * v44), {v[0]})[0] * (v[0] + 0.5);
                  },
                  {In{{7, 4}, distinct(28, -1, 1, 312)}});
  const Var v3 = f64({0.5, -1.5, 2.0});
  const Var v6 = f64(distinct(6, -1, 1, 313));
  check_gradients("reindex_reduce max and mul",
                  [v3, v6](const std::vector<Var>& v) {
                    Var mx = reindex_reduce(v[0], ReduceOp::Max, {3}, {"i0/2"});
                    Var pr = reindex_reduce(v[0], ReduceOp::Mul, {3}, {"i0%3"});
                    return grad(sum(mx * mx * v3 + pr * v3), {v[0]})[0] * v6;
                  },
                  {In{{6}, signed_away_from_zero(6, 0.5, 1.5, 314)}});
  const Var v24 = f64(distinct(8, -1, 1, 315), {2, 4});
  check_gradients(
      "prod and max over an axis",
      [v24](const std::vector<Var>& v) {
        return grad(sum(prod(v[0], {1}) * v24) + sum(pow(max(v[0], {-2}), 2.0)), {v[0]})[0] * v[0];
      },
      {In{{2, 3, 4}, signed_away_from_zero(24, 0.5, 1.5, 316)}});
  check_gradients("pow, sqrt, log, sigmoid, div",
                  [](const std::vector<Var>& v) {
                    std::vector<Var> g = grad(
                        sum(pow(v[0], v[1]) + sigmoid(v[0] * v[1]) * log(v[0]) / sqrt(v[0] + v[1])),
                        {v[0], v[1]});
                    return g[0] * g[1];
                  },
                  {In{{5}, distinct(5, 0.5, 2.0, 317)}, In{{5}, distinct(5, 0.5, 2.0, 318)}});
}

TEST_CASE("max over a computed value finds its maximum again in the backward kernels",
          "[autograd][conventions]") {
  // The backward of a max compares the input with the max, and the input here is recomputed
  // (exp, tanh, sin in float32 over rows with vector tails): each row's gradient must still
  // be the derivative at its maximum, once, whether the loss and the gradient are evaluated
  // together or apart.
  const int64_t rows = 3, cols = 37;
  std::vector<float> xv;
  for (double v : distinct(size_t(rows * cols), -2, 2, 401)) xv.push_back(float(v));
  for (int together = 0; together < 2; ++together) {
    INFO((together ? "evaluated together" : "gradient alone"));
    Var x = array(xv, {rows, cols});
    Var e = exp(x * 1.3f + 0.1) + tanh(x) * 0.5 + sin(x * 3.0) * 0.1;
    Var loss = max(e, {1});
    Var g = grad(loss, {x})[0];
    Var em = min(e, {-1}, true);
    Var gm = grad(em, {x})[0];
    if (together)
      eval({loss, g, em, gm});
    else
      eval({g, gm});
    const std::vector<double> gv = values_of(g), gmv = values_of(gm);
    for (int64_t r = 0; r < rows; ++r) {
      INFO("row " << r);
      int nonzero = 0, nonzero_min = 0;
      size_t at = 0, at_min = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const size_t k = size_t(r * cols + c);
        if (gv[k] != 0) ++nonzero, at = k;
        if (gmv[k] != 0) ++nonzero_min, at_min = k;
      }
      CHECK(nonzero == 1);
      CHECK(nonzero_min == 1);
      // The derivative of e at the element found, computed here in double.
      auto de = [](double t) {
        return 1.3 * std::exp(1.3 * t + 0.1) + 0.5 * (1 - std::tanh(t) * std::tanh(t)) +
               0.3 * std::cos(3 * t);
      };
      CHECK(gv[at] == Approx(de(xv[at])).epsilon(1e-4));
      CHECK(gmv[at_min] == Approx(de(xv[at_min])).epsilon(1e-4));
      // And it is the row's maximum (minimum) by the forward's own values.
      const std::vector<double> ev = values_of(e);
      double best = -kInf, worst = kInf;
      size_t best_at = 0, worst_at = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const size_t k = size_t(r * cols + c);
        if (ev[k] > best) best = ev[k], best_at = k;
        if (ev[k] < worst) worst = ev[k], worst_at = k;
      }
      CHECK(at == best_at);
      CHECK(at_min == worst_at);
    }
  }
}

TEST_CASE(
    "backward kernels at sizes that take the tiled and strip-mined schedules agree with "
    "the reference interpreter",
    "[autograd][reference][slow]") {
  // The rules are checked above on small inputs; here the same backward graphs run at sizes
  // where the generated kernels block, tile and strip-mine (contractions, column sums over
  // more than one 2048-wide strip, vector tails), compared with the reference interpreter.
  SECTION("matmul through tanh, batched") {
    Var a = randn({2, 33, 70}, 1, DType::Float64), b = randn({70, 45}, 2, DType::Float64);
    Var loss = sum(tanh(matmul(a, b) * 0.1));
    std::vector<Var> g = grad(loss, {a, b});
    check_against_reference({loss, g[0], g[1]});
  }
  SECTION("conv2d stride 2 padding 1 and dilation 2, float32 and float64") {
    std::vector<std::vector<double>> f64_results;
    for (DType dt : {DType::Float64, DType::Float32}) {
      INFO(dtype_name(dt));
      Var x = randn({2, 3, 19, 19}, 3, dt), w = randn({8, 3, 3, 3}, 4, dt);
      Var t = rand({2, 8, 10, 10}, 5, dt);
      Var loss = sum(conv2d(x, w, 2, 1) * t) + sum(tanh(conv2d(x, w, 1, 2, 2)));
      std::vector<Var> g = grad(loss, {x, w});
      if (dt == DType::Float64) {
        check_against_reference({loss, g[0], g[1]});
        for (const Var& v : {loss, g[0], g[1]}) f64_results.push_back(v.to_vector<double>());
        continue;
      }
      // Float32 contraction kernels accumulate in float32 (the forward convolutions are such
      // kernels of their own), and tanh' and the 722-term weight-gradient sums carry their
      // rounding on: compared with the float64 run at 1e-4 relative, not the reference's 1e-5.
      eval({loss, g[0], g[1]});
      const Var outs[] = {loss, g[0], g[1]};
      for (size_t k = 0; k < 3; ++k) {
        const std::vector<float> got = outs[k].to_vector<float>();
        REQUIRE(got.size() == f64_results[k].size());
        for (size_t i = 0; i < got.size(); ++i) {
          const double want = f64_results[k][i];
          INFO("output " << k << " element " << i << ": " << got[i] << " vs " << want);
          CHECK(std::abs(got[i] - want) <= 1e-4 * std::max(1.0, std::abs(want)));
        }
      }
    }
  }
  SECTION("a bias broadcast over 64 rows of 2100 columns") {
    Var bias = randn({2100}, 6, DType::Float64), a = randn({64, 2100}, 7, DType::Float64);
    Var loss = sum(sigmoid(broadcast_to(bias, {64, 2100}) + a) * a);
    check_against_reference({loss, grad(loss, {bias})[0]});
  }
  SECTION("max_pool2d and softmax") {
    Var x = randn({2, 3, 17, 17}, 8, DType::Float64);
    Var t = rand({2, 3, 9, 9}, 9, DType::Float64);
    Var s = randn({37, 129}, 10, DType::Float64), u = rand({37, 129}, 11, DType::Float64);
    Var loss = sum(max_pool2d(x, 3, 2, 1) * t) + sum(softmax(s, 1) * u);
    std::vector<Var> g = grad(loss, {x, s});
    check_against_reference({loss, g[0], g[1]});
  }
  SECTION("reductions over rows and columns") {
    Var x = randn({65, 131}, 12, DType::Float64);
    Var loss = sum(max(x, {1}) * 2.0) + sum(min(x, {0})) + sum(prod(x * 0.1 + 1.0, {1})) +
               sum(mean(x * x, {0}));
    check_against_reference({loss, grad(loss, {x})[0]});
  }
}

// ================================================================ 2. conventions, exactly

TEST_CASE("relu'(0) = 0 and abs'(0) = 0", "[autograd][conventions]") {
  Var x = f64({-1.5, 0.0, 2.0});
  std::vector<Var> g = {grad(relu(x), {x})[0], grad(abs(x), {x})[0]};
  eval(g);
  check_values(g[0], {0, 0, 1});
  check_values(g[1], {-1, 0, 1});
}

TEST_CASE("maximum and minimum share a tie evenly", "[autograd][conventions]") {
  Var x = f64({1.0, 2.0, 3.0});
  Var y = f64({1.0, 5.0, 3.0});
  std::vector<Var> gmax = grad(maximum(x, y), {x, y});
  std::vector<Var> gmin = grad(minimum(x, y), {x, y});
  Var gscalar = grad(maximum(x, 2.0) + minimum(x, 2.0), {x})[0];
  eval({gmax[0], gmax[1], gmin[0], gmin[1], gscalar});
  check_values(gmax[0], {0.5, 0, 0.5});
  check_values(gmax[1], {0.5, 1, 0.5});
  check_values(gmin[0], {0.5, 1, 0.5});
  check_values(gmin[1], {0.5, 0, 0.5});
  check_values(gscalar, {1, 1, 1});  // x = 2: half from each, x != 2: one of them
}

TEST_CASE("reduce max and min share tied extrema evenly", "[autograd][conventions]") {
  Var a = f64({1, 3, 3});
  Var b = f64({2, 1, 1, 5});
  Var c = f64({4, 1, 4, 4, 2, 0}, {2, 3});
  Var y = f64({3, 3, 1, 2, 2, 2});
  std::vector<Var> g = {grad(max(a), {a})[0], grad(min(b), {b})[0], grad(max(c, {1}), {c})[0],
                        grad(reindex_reduce(y, ReduceOp::Max, {2}, {"i0/3"}), {y})[0],
                        grad(reindex_reduce(y, ReduceOp::Min, {2}, {"i0/3"}), {y})[0]};
  eval(g);
  check_values(g[0], {0, 0.5, 0.5});
  check_values(g[1], {0, 0.5, 0.5, 0});
  check_values(g[2], {0.5, 0, 0.5, 1, 0, 0});
  check_values(g[3], {0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  check_values(g[4], {0, 0, 1, 1.0 / 3, 1.0 / 3, 1.0 / 3});
}

TEST_CASE("an infinite extremum of max and min receives the gradient", "[autograd][conventions]") {
  // The element that is the maximum gets the gradient even when it is inf (as in PyTorch and
  // JAX); -inf maxima tie like any others.
  Var a = f64({1, kInf, 2});
  Var b = f64({1, -kInf, 2});
  Var c = f64({-kInf, -kInf});
  Var y = f64({3, kInf, 1, 2});
  std::vector<Var> g = {grad(max(a), {a})[0], grad(min(b), {b})[0], grad(max(c), {c})[0],
                        grad(reindex_reduce(y, ReduceOp::Max, {2}, {"i0/2"}), {y})[0]};
  eval(g);
  check_values(g[0], {0, 1, 0});
  check_values(g[1], {0, 1, 0});
  check_values(g[2], {0.5, 0.5});
  check_values(g[3], {0, 1, 0, 1});
}

TEST_CASE("prod with zeros: one zero takes the product of the others, two give zeros, no NaN",
          "[autograd][conventions]") {
  Var one = f64({2, 0, 3});
  Var two = f64({2, 0, 0, 3});
  Var rows = f64({2, 0, 3, 0, 5, 0, 1, 4, 2}, {3, 3});
  Var y = f64({2, 0, 3, 4, 0, 0});
  std::vector<Var> g = {grad(prod(one), {one})[0], grad(prod(two), {two})[0],
                        grad(prod(rows, {1}), {rows})[0],
                        grad(reindex_reduce(y, ReduceOp::Mul, {2}, {"i0/3"}), {y})[0]};
  eval(g);
  check_values(g[0], {0, 6, 0});
  check_values(g[1], {0, 0, 0, 0});
  check_values(g[2], {0, 6, 0, 0, 0, 0, 8, 2, 4});
  check_values(g[3], {0, 6, 0, 0, 0, 0});
}

TEST_CASE("pow at 0: no NaN where the derivative is 0", "[autograd][conventions]") {
  Var a = f64({0.0, 0.0, 2.0});
  Var b = f64({0.0, 2.0, 0.0});
  std::vector<Var> g = grad(pow(a, b), {a, b});
  Var da_square = grad(pow(a, 2.0), {a})[0];
  eval({g[0], g[1], da_square});
  // d/da a^b = b a^(b-1): 0 at b = 0 (also at a = 0), 2*0 at (0, 2), 0 at (2, 0).
  check_values(g[0], {0, 0, 0});
  // d/db a^b = a^b log a: 0 at a = 0 (b >= 0), 1 * log 2 at (2, 0).
  check_values(g[1], {0, 0, std::log(2.0)});
  check_values(da_square, {0, 0, 4});
}

TEST_CASE("sqrt'(0) is inf", "[autograd][conventions]") {
  Var x = f64({0.0, 4.0});
  Var g = grad(sqrt(x), {x})[0];
  check_values(g, {kInf, 0.25});
}

TEST_CASE("floor, comparisons, casts to integers and logical ops pass no gradient",
          "[autograd][conventions]") {
  Var x = f64({-1.5, 0.5, 2.5});
  Var y = f64({1.0, 0.0, 2.0});
  // Each term is a float function of x through a non-differentiable op, plus x itself: only
  // the x term contributes, so every gradient is ones.
  std::vector<Var> losses = {
      floor(x) + x,
      cast(x > y, DType::Float64) * 5.0 + x,
      cast(cast(x, DType::Int32), DType::Float64) * 5.0 + x,
      cast(cast(x, DType::Int64), DType::Float64) * 5.0 + x,
      cast(logical_and(x, y), DType::Float64) + cast(logical_or(x, y), DType::Float64) +
          cast(logical_not(x), DType::Float64) + x,
      cast(x == y, DType::Float64) + cast(x != y, DType::Float64) + cast(x <= 0.5, DType::Float64) +
          x,
  };
  std::vector<Var> g;
  for (const Var& l : losses) g.push_back(grad(l, {x})[0]);
  eval(g);
  for (size_t k = 0; k < g.size(); ++k) {
    INFO("loss " << k);
    check_values(g[k], {1, 1, 1});
  }
}

TEST_CASE("stop_grad is the identity on values and stops the gradient", "[autograd][conventions]") {
  Var x = f64({1.5, -2.0, 3.0});
  Var s = stop_grad(x);
  Var loss = sum(s * x);  // d/dx = stop_grad(x) = x
  Var g = grad(loss, {x})[0];
  eval({s, loss, g});
  check_values(s, {1.5, -2.0, 3.0});
  check_values(loss, {1.5 * 1.5 + 4 + 9});
  check_values(g, {1.5, -2.0, 3.0});
}

TEST_CASE("where: NaN from the untaken branch propagates, and the double-where idiom avoids it",
          "[autograd][conventions]") {
  Var x = f64({0.0, 1.0, -1.0, 4.0});
  Var c = x > 0.0;
  // The untaken branch receives where(c, 0, g) = 0: 0 * d log(x) = 0 / 0 at x = 0 is NaN, as in
  // PyTorch and JAX; 0 / -1 at x = -1 is 0.
  Var g_log = grad(where(c, log(x), f64(0.0)), {x})[0];
  // sqrt: 0 / (2 sqrt(x)) is 0/0 at 0 and 0/NaN at -1.
  Var g_sqrt = grad(where(c, sqrt(x), f64(0.0)), {x})[0];
  // The double where: the untaken branch sees a safe value and its gradient is 0.
  Var g_log_safe = grad(where(c, log(where(c, x, f64(1.0))), f64(0.0)), {x})[0];
  Var g_sqrt_safe = grad(where(c, sqrt(where(c, x, f64(1.0))), f64(0.0)), {x})[0];
  eval({g_log, g_sqrt, g_log_safe, g_sqrt_safe});
  check_values(g_log, {kNaN, 1.0, 0.0, 0.25});
  check_values(g_sqrt, {kNaN, 0.5, kNaN, 0.25});
  check_values(g_log_safe, {0.0, 1.0, 0.0, 0.25});
  check_values(g_sqrt_safe, {0.0, 0.5, 0.0, 0.25});
}

TEST_CASE("an element reindex never reads gets no gradient, even where the upstream one is NaN",
          "[autograd][conventions]") {
  // y[2] does not depend on x[2] (the condition replaces it by the overflow value), so
  // d sum(loss) / dx[2] = 0 whatever gradient reaches y[2], as PyTorch's masked copy and JAX's
  // where give (the gradient of an element is a sum over the outputs that read it: none here).
  Var x = f64({1, 2, 3, 4});
  Var m = array(std::vector<bool>{true, true, false, true}, {4});
  Var zero = f64(0.0);
  SECTION("a zero upstream gradient") {
    Var y = reindex(x, {4}, {"i0"}, 0.0, {"i0==2"});
    check_values(grad(where(m, y * f64({1, 1, 7, 1}), zero), {x})[0], {1, 1, 0, 1});
  }
  SECTION("NaN upstream, reaching reindex as a division: where(m, log(y), 0)") {
    // log's gradient where(m, 1, 0) / y is 0 / 0 at y[2] = 0.
    Var y = reindex(x, {4}, {"i0"}, 0.0, {"i0==2"});
    Var loss = where(m, log(y), zero);
    Var g = grad(loss, {x})[0];
    eval({loss, g});
    check_values(g, {1, 0.5, 0, 0.25});
  }
  SECTION("NaN upstream, reaching reindex as a product: where(m, y * w, 0), w[2] = inf") {
    // mul's gradient where(m, 1, 0) * w is 0 * inf at y[2].
    Var y = reindex(x, {4}, {"i0"}, 0.0, {"i0==2"});
    Var loss = where(m, y * f64({1, 1, kInf, 1}), zero);
    Var g = grad(loss, {x})[0];
    eval({loss, g});
    check_values(loss, {1, 2, 0, 4});
    check_values(g, {1, 1, 0, 1});
  }
  SECTION("stride 2: the elements between the strides, NaN upstream as a product") {
    // y = x[::2]; y[0] receives 0 * inf = NaN, which x[0] inherits; x[1], x[3], x[5] are never
    // read and get 0.
    Var x6 = f64({1, 2, 3, 4, 5, 6});
    Var y = reindex(x6, {3}, {"i0*2"});
    Var mask = array(std::vector<bool>{false, true, true}, {3});
    Var loss = where(mask, y * f64({kInf, 1, 1}), zero);
    Var g = grad(loss, {x6})[0];
    eval({loss, g});
    check_values(loss, {0, 3, 5});
    check_values(g, {kNaN, 0, 1, 0, 1, 0});
  }
}

TEST_CASE("a loss of any shape is differentiated as sum(loss)", "[autograd][conventions]") {
  Var x = f64({0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, {2, 3});
  Var y = sin(x) * x;
  Var g = grad(y, {x})[0];
  Var gs = grad(sum(y), {x})[0];
  Var g0 = grad(sum(y, {0}), {x})[0];
  eval({g, gs, g0});
  const std::vector<double> a = values_of(g), b = values_of(gs), c = values_of(g0);
  CHECK(a == b);
  CHECK(a == c);
  std::vector<double> want;
  for (double v : std::vector<double>{0.5, -1.0, 2.0, 1.5, 0.25, -0.75})
    want.push_back(std::sin(v) + v * std::cos(v));
  check_values(g, want);
}

TEST_CASE("gradients have the dtype and shape of their wrt", "[autograd][conventions]") {
  Var x32 = array(std::vector<float>{1.5f, -2.0f, 0.5f, 3.0f}, {2, 2});
  Var x64 = f64({0.5, 2.0}, {2, 1});
  Var loss = sum(cast(x32, DType::Float64) * x64);  // float64 loss
  std::vector<Var> g = grad(loss, {x32, x64});
  eval(g);
  CHECK(g[0].dtype() == DType::Float32);
  CHECK(g[0].shape() == Shape{2, 2});
  CHECK(g[1].dtype() == DType::Float64);
  CHECK(g[1].shape() == Shape{2, 1});
  check_values(g[0], {0.5, 0.5, 2.0, 2.0});
  check_values(g[1], {-0.5, 3.5});
  // A float32 loss of a float64 wrt.
  Var loss32 = sum(cast(x64, DType::Float32) * x32);
  Var g64 = grad(loss32, {x64})[0];
  CHECK(g64.dtype() == DType::Float64);
  CHECK(g64.shape() == Shape{2, 1});
  check_values(g64, {-0.5, 3.5});
  // A 0-d wrt.
  Var s = array(std::vector<double>{3.0}, {});
  Var gs = grad(broadcast_to(s, {2, 3}) * s, {s})[0];
  CHECK(gs.shape() == Shape{});
  check_values(gs, {36.0});
}

// ================================================================ 3. Jittor test_grad.py

TEST_CASE("jittor: gradient with respect to an intermediate", "[autograd][jittor]") {
  Var x = array(std::vector<double>{3.0}, {});
  Var y = x * x;
  Var z = y * y + x * y;  // x^4 + x^3
  std::vector<Var> g = grad(z, {y, x});
  eval({z, g[0], g[1]});
  check_values(g[0], {2 * 9.0 + 3.0});       // dz/dy = 2y + x
  check_values(g[1], {4 * 27.0 + 3 * 9.0});  // dz/dx = 4x^3 + 3x^2, through y too
  // Only the intermediate.
  Var x2 = array(std::vector<double>{3.0}, {});
  Var y2 = exp(x2 * 0.5);
  Var g2 = grad(sin(y2) * 2.0, {y2})[0];
  check_values(g2, {2 * std::cos(std::exp(1.5))});
}

TEST_CASE("jittor: x*x*int(x)*int(x)*float(x) at x = 2 has gradient 48", "[autograd][jittor]") {
  Var x = array(std::vector<float>{2.0f}, {});
  Var i = cast(x, DType::Int32);
  Var z = x * x * i * i * cast(x, DType::Float32);  // int factors are constants: 4 x^3
  CHECK(z.dtype() == DType::Float32);
  Var g = grad(z, {x})[0];
  CHECK(g.dtype() == DType::Float32);
  check_values(g, {48});
  check_values(z, {32});
  // In float64, with float(x) a real cast through float32.
  Var x64 = array(std::vector<double>{2.0}, {});
  Var i64 = cast(x64, DType::Int32);
  Var z64 = x64 * x64 * i64 * i64 * cast(x64, DType::Float32);
  check_values(grad(z64, {x64})[0], {48});
}

TEST_CASE("jittor: y = x, then 9 times y = y*x, gives 10 * 2^9 (top-sort)", "[autograd][jittor]") {
  Var x = array(std::vector<double>{2.0}, {});
  Var y = x;
  for (int k = 0; k < 9; ++k) y = y * x;
  Var g = grad(y, {x})[0];
  check_values(g, {10 * 512.0});
  // The same built the other way round, and summed with a square: several users of x.
  Var y2 = x;
  for (int k = 0; k < 9; ++k) y2 = x * y2;
  check_values(grad(y2 + x * x, {x})[0], {10 * 512.0 + 4});
}

TEST_CASE("a chain 300 levels deep", "[autograd][jittor]") {
  // y <- sin(y)/2 + y/2, 300 times: the gradient is the product of the levels' derivatives.
  const std::vector<double> x0 = {0.5, -1.25};
  Var x = f64(x0);
  Var y = x;
  for (int k = 0; k < 300; ++k) y = sin(y) * 0.5 + y * 0.5;
  Var g = grad(y, {x})[0];
  eval({y, g});
  std::vector<double> want_y, want_g;
  for (double v : x0) {
    double d = 1;
    for (int k = 0; k < 300; ++k) {
      d *= 0.5 * std::cos(v) + 0.5;
      v = 0.5 * std::sin(v) + 0.5 * v;
    }
    want_y.push_back(v);
    want_g.push_back(d);
  }
  check_values(y, want_y, 1e-10);
  check_values(g, want_g, 1e-10);
}

TEST_CASE("jittor: gradients of gradients (nth order)", "[autograd][jittor]") {
  Var x = array(std::vector<double>{2.0}, {});
  Var y = x * x * x * x;
  Var d1 = grad(y, {x})[0];
  Var d2 = grad(d1, {x})[0];
  Var d3 = grad(d2, {x})[0];
  Var d4 = grad(d3, {x})[0];
  eval({y, d1, d2, d3, d4});
  check_values(d1, {4 * 8.0});
  check_values(d2, {12 * 4.0});
  check_values(d3, {24 * 2.0});
  check_values(d4, {24});
  // Through pow, sin and exp, on a vector.
  Var v = f64({0.5, 1.5, -0.7});
  Var p2 = grad(grad(pow(v, 4.0), {v})[0], {v})[0];
  Var s3 = grad(grad(grad(sin(v), {v})[0], {v})[0], {v})[0];
  Var e2 = grad(grad(exp(v * 2.0), {v})[0], {v})[0];
  eval({p2, s3, e2});
  std::vector<double> want_p2, want_s3, want_e2;
  for (double t : {0.5, 1.5, -0.7}) {
    want_p2.push_back(12 * t * t);
    want_s3.push_back(-std::cos(t));
    want_e2.push_back(4 * std::exp(2 * t));
  }
  check_values(p2, want_p2);
  check_values(s3, want_s3);
  check_values(e2, want_e2);
  // A mixed second derivative: d/dz (d/dx x^2 z) = 2x.
  Var a = f64({1.5, -2.0});
  Var b = f64({0.5, 3.0});
  Var dx = grad(a * a * b, {a})[0];
  check_values(grad(dx, {b})[0], {3.0, -4.0});
}

TEST_CASE("jittor: random graphs of + - * / match finite differences", "[autograd][jittor][slow]") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    INFO("graph seed " << seed);
    const LossFn f = [seed](const std::vector<Var>& v) {
      Lcg rng(seed * 7919);
      std::vector<Var> nodes = v;
      for (int step = 0; step < 8; ++step) {
        const Var& a = nodes[size_t(rng.next() % nodes.size())];
        const Var& b = nodes[size_t(rng.next() % nodes.size())];
        switch (rng.next() % 4) {
          case 0:
            nodes.push_back(a + b);
            break;
          case 1:
            nodes.push_back(a - b);
            break;
          case 2:
            nodes.push_back(a * b);
            break;
          default:
            nodes.push_back(a / (b * b + 1.0));  // a denominator away from 0
            break;
        }
      }
      // Every value built is part of the loss: each input reaches it.
      Var loss = nodes.back();
      for (size_t k = 0; k + 1 < nodes.size(); ++k) loss = loss + nodes[k] * 0.5;
      return loss;
    };
    check_gradients(
        "random graph " + std::to_string(seed), f,
        {In{{3}, distinct(3, -1.5, 1.5, seed * 3)}, In{{3}, distinct(3, -1.5, 1.5, seed * 3 + 1)},
         In{{3}, distinct(3, -1.5, 1.5, seed * 3 + 2)}});
  }
}

// ================================================================ 4. warnings and errors

TEST_CASE("a wrt the loss does not depend on gets zeros and one warning naming it",
          "[autograd][errors]") {
  Var x = f64({1, 2, 3});
  Var unused = array(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  std::string err;
  std::vector<Var> g = grad_capturing(sum(x * x), {x, unused}, err);
  INFO(err);
  CHECK(count_occurrences(err, "metajit: warning: ") == 1);
  CHECK_THAT(err, Contains("wrt[1] float32[2, 3] does not affect the loss") &&
                      Contains("its gradient is zeros"));
  CHECK(err.find("wrt[0]") == std::string::npos);
  REQUIRE(g[1].dtype() == DType::Float32);
  REQUIRE(g[1].shape() == Shape{2, 3});
  check_values(g[1], {0, 0, 0, 0, 0, 0});
  check_values(g[0], {2, 4, 6});
}

TEST_CASE("the warning names the op that cuts the path: floor, stop_grad, int cast, comparison",
          "[autograd][errors]") {
  Var x = f64({1.5, -2.5});
  Var y = f64({2, 3});
  struct Case {
    const char* what;
    Var loss;
    const char* cut;
  };
  const std::vector<Case> cases = {
      {"floor", sum(floor(x) * y), "(the path is cut by floor)"},
      {"stop_grad", sum(stop_grad(x) * y), "(the path is cut by stop_grad)"},
      {"cast to int32", sum(cast(cast(x, DType::Int32), DType::Float64) * y),
       "(the path is cut by a cast to int32)"},
      {"comparison", sum(cast(x > y, DType::Float64) * y),
       "(the path is cut by a comparison (gt))"},
      {"where's condition", sum(where(x > 0.0, y, y * 2.0)),
       "(the path is cut by a comparison (gt))"},
      // A logical op reads its float operands through a cast to bool: that cast is the cut.
      {"logical op", sum(cast(logical_and(x, y), DType::Float64) * y),
       "(the path is cut by a cast to bool)"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    std::string err;
    std::vector<Var> g = grad_capturing(c.loss, {x}, err);
    INFO(err);
    CHECK(count_occurrences(err, "metajit: warning: ") == 1);
    CHECK_THAT(err, Contains("wrt[0] float64[2] does not affect the loss") && Contains(c.cut));
    check_values(g[0], {0, 0});
  }
}

TEST_CASE("a path through an already evaluated value: zeros and a warning saying why",
          "[autograd][errors]") {
  Var x = f64({1, 2});
  Var y = x * 2.0;
  eval({y});
  std::string err;
  std::vector<Var> g = grad_capturing(sum(y * y), {x}, err);
  INFO(err);
  CHECK(count_occurrences(err, "metajit: warning: ") == 1);
  CHECK_THAT(err, Contains("wrt[0] float64[2] does not affect the loss") &&
                      Contains("evaluating drops the graph"));
  check_values(g[0], {0, 0});
}

TEST_CASE("integer wrt or loss is a DTypeError naming the dtype", "[autograd][errors]") {
  Var x = f64({1, 2});
  Var i = array(std::vector<int32_t>{1, 2}, {2});
  Var j = array(std::vector<int64_t>{1, 2}, {2});
  reset_stats();
  std::string m = message_of<DTypeError>([&] { grad(sum(x * cast(i, DType::Float64)), {x, i}); });
  CHECK_THAT(m, Contains("wrt[1]") && Contains("int32[2]") && Contains("not a float"));
  m = message_of<DTypeError>([&] { grad(sum(i * 2.0), {x}); });
  CHECK_THAT(m, Contains("loss") && Contains("int32") && Contains("not a float"));
  m = message_of<DTypeError>([&] { grad(j, {x}); });
  CHECK_THAT(m, Contains("loss") && Contains("int64[2]"));
  m = message_of<DTypeError>([&] { grad(sum(x), {x > 1.0}); });
  CHECK_THAT(m, Contains("wrt[0]") && Contains("bool[2]"));
  // Nothing ran.
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().kernels_launched == 0);
}

TEST_CASE("an undefined loss or wrt is an Error", "[autograd][errors]") {
  Var x = f64({1, 2});
  reset_stats();
  std::string m = message_of<Error>([&] { grad(Var(), {x}); });
  CHECK_THAT(m, Contains("loss") && Contains("undefined"));
  m = message_of<Error>([&] { grad(sum(x), {x, Var()}); });
  CHECK_THAT(m, Contains("wrt[1]") && Contains("undefined"));
  m = message_of<Error>([&] { stop_grad(Var()); });
  CHECK_THAT(m, Contains("undefined"));
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().kernels_launched == 0);
}

TEST_CASE("grad of an evaluated loss is an Error saying to build grad first or use value_and_grad",
          "[autograd][errors]") {
  Var x = f64({1, 2, 3});
  Var loss = sum(x * x);
  CHECK(loss.item<double>() == 14.0);
  reset_stats();
  const std::string m = message_of<Error>([&] { grad(loss, {x}); });
  CHECK_THAT(m, Contains("already evaluated") && Contains("build grad() before evaluating") &&
                    Contains("value_and_grad") && Contains("wrt[0] float64[3]"));
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().kernels_launched == 0);
  // wrt == the evaluated loss itself is fine: ones.
  check_values(grad(loss, {loss})[0], {1});
}

TEST_CASE("grad with wrt == loss gives ones", "[autograd][errors]") {
  Var x = f64({1, 2, 3, 4}, {2, 2});
  Var y = exp(x);
  std::vector<Var> g = grad(y, {y, x});
  eval(g);
  CHECK(g[0].shape() == Shape{2, 2});
  check_values(g[0], {1, 1, 1, 1});
  check_values(g[1], {std::exp(1.0), std::exp(2.0), std::exp(3.0), std::exp(4.0)});
  // A leaf as its own loss.
  check_values(grad(x, {x})[0], {1, 1, 1, 1});
}

TEST_CASE("a wrt listed twice gets its gradient twice, and an evaluated value can be a wrt",
          "[autograd][errors]") {
  Var x = f64({1, -2});
  std::vector<Var> g = grad(sum(x * x * x), {x, x});
  eval(g);
  check_values(g[0], {3, 12});
  check_values(g[1], {3, 12});
  // y was evaluated (a computed leaf): as a wrt it is a variable like any other, no warning.
  Var y = exp(x);
  eval({y});
  std::string err;
  std::vector<Var> gy = grad_capturing(sum(y * y), {y}, err);
  CHECK(err.empty());
  check_values(gy[0], {2 * std::exp(1.0), 2 * std::exp(-2.0)});
}

TEST_CASE("value_and_grad returns {value, grads...}, eagerly and under jit", "[autograd][errors]") {
  auto fn = [](const Var& a, const Var& b) { return sum(a * b * b); };
  Var a = f64({1.0, 2.0, -1.0});
  Var b = f64({0.5, -1.5, 2.0});
  auto vg = value_and_grad(fn, {0, 1});
  std::vector<Var> out = vg(a, b);
  REQUIRE(out.size() == 3);
  eval(out);
  check_values(out[0], {0.25 + 2 * 2.25 - 4});
  check_values(out[1], {0.25, 2.25, 4.0});
  check_values(out[2], {1.0, -6.0, -4.0});
  // Default argnums {0}; a non-scalar value is differentiated as its sum.
  auto vg0 = value_and_grad([](Var p) { return p * p; });
  std::vector<Var> out0 = vg0(b);
  REQUIRE(out0.size() == 2);
  check_values(out0[0], {0.25, 2.25, 4.0});
  check_values(out0[1], {1.0, -3.0, 4.0});
  // Under jit: the same values as eager, traced once and replayed.
  auto step = jit(value_and_grad(fn, {1}), "autograd_value_and_grad");
  for (int call = 0; call < 2; ++call) {
    INFO("call " << call);
    std::vector<Var> j = step(a, b);
    REQUIRE(j.size() == 2);
    std::vector<Var> eager = value_and_grad(fn, {1})(a, b);
    eval(eager);
    CHECK(values_of(j[0]) == values_of(eager[0]));
    CHECK(values_of(j[1]) == values_of(eager[1]));
    check_values(j[1], {1.0, -6.0, -4.0});
  }
  CHECK(step.traces() == 1);
  // A new shape retraces; the values are still the eager ones.
  Var a5 = f64({1, 2, 3, 4, 5}), b5 = f64({0.5, 1.5, -2, 1, 0});
  std::vector<Var> j5 = step(a5, b5);
  CHECK(step.traces() == 2);
  check_values(j5[0], {0.25 + 2 * 2.25 + 3 * 4 + 4 + 0});
  check_values(j5[1], {1, 6, -12, 8, 0});
}

TEST_CASE("value_and_grad with bad argnums throws at creation", "[autograd][errors]") {
  auto fn = [](const Var& a, const Var& b) { return sum(a * b); };
  std::string m = message_of<Error>([&] { value_and_grad(fn, {2}); });
  CHECK_THAT(m, Contains("argnums[0] = 2") && Contains("out of range") && Contains("2 arguments"));
  m = message_of<Error>([&] { value_and_grad(fn, {0, -1}); });
  CHECK_THAT(m, Contains("argnums[1] = -1") && Contains("out of range"));
  m = message_of<Error>([&] { value_and_grad(fn, {}); });
  CHECK_THAT(m, Contains("argnums is empty"));
}

// ================================================================ 5. one plan

TEST_CASE("eval({loss, g...}) runs forward and backward as one plan", "[autograd][plan]") {
  auto build = [] {
    Var x = f64(distinct(12, -1, 1, 201), {4, 3});
    Var w = f64(distinct(6, -1, 1, 202), {3, 2});
    Var loss = sum(tanh(matmul(x, w)));
    std::vector<Var> g = grad(loss, {x, w});
    return std::vector<Var>{loss, g[0], g[1]};
  };
  std::vector<Var> joint = build();
  const size_t planned = plan(joint).size();
  const size_t separately =
      plan({joint[0]}).size() + plan({joint[1]}).size() + plan({joint[2]}).size();
  INFO("joint plan " << planned << " kernels, separately " << separately);
  CHECK(planned >= 1);
  CHECK(planned <= separately);
  eval(build());  // compile once, so the counts below see only this plan
  reset_stats();
  eval(joint);
  CHECK(stats().kernels_launched == planned);
  CHECK(stats().kernels_compiled == 0);
  // The same values as the loss and the gradients evaluated one at a time.
  std::vector<Var> apart = build();
  for (const Var& v : apart) eval({v});
  for (size_t k = 0; k < joint.size(); ++k) {
    INFO("output " << k);
    const std::vector<double> a = values_of(joint[k]), b = values_of(apart[k]);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-12).margin(1e-14));
  }
}
