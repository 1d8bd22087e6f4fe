// Every op, dtype and broadcasting case, compiled and compared with the reference interpreter
// (tests/reference_check.h), plus hand-computed values where the reference itself could share
// a misunderstanding of the contract (docs/design.md §3).
//
// Compile time matters: each distinct kernel costs a g++ run. Keys do not depend on values
// or shapes, so special values reuse the kernels of ordinary ones, and many ops are checked
// in one kernel by stacking them as the rows of a table (row k = op k; a mismatch report's
// index [k, j] names the op).
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "base/config.h"
#include "meta_ops/index_expr.h"
#include "meta_ops/ops.h"
#include "support/reference_check.h"
#include "support/scoped_env.h"
#include "support/typed_arrays.h"

using namespace metajit;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
const DType kAllDTypes[] = {DType::Bool, DType::Int32, DType::Int64, DType::Float32,
                            DType::Float64};

using metajit_test::make_array;

// The 1-d `x` repeated as `rows` rows: [rows, n]. Table rows are computed from tiled inputs
// so that every row already has the table's shape: a row read through a broadcast would be
// stored by the planner (an extra kernel) when it is expensive.
Var tile(const Var& x, int64_t rows) {
  return broadcast_to(x, {rows, x.numel()});
}

// Row k of the result is row k of rows[k] (each of shape [r, n], r = rows.size()); the dtype
// is the promotion of all rows. One kernel computes the whole table.
Var stack_rows(const std::vector<Var>& rows) {
  const int64_t r = int64_t(rows.size());
  REQUIRE(rows.back().ndim() == 2);
  const int64_t n = rows.back().shape()[1];
  Var selector = broadcast_to(arange(r), {r, n}, {1});
  Var out = rows.back();
  for (int64_t k = r - 2; k >= 0; --k) out = where(selector == double(k), rows[size_t(k)], out);
  return out;
}

std::string row_names(const std::vector<std::string>& names) {
  std::string s = "table rows:";
  for (size_t k = 0; k < names.size(); ++k) s += " " + std::to_string(k) + "=" + names[k];
  return s;
}

// The six comparisons and (for two Vars) logical and/or as bits of one Int32 value, so one
// row checks them all: a wrong bit names the comparison.
template <class A, class B>
Var comparison_bits(const A& a, const B& b) {
  auto bit = [](const Var& c, double weight) { return cast(c, DType::Int32) * weight; };
  Var bits = bit(a < b, 1) + bit(a <= b, 2) + bit(a > b, 4) + bit(a >= b, 8) + bit(a == b, 16) +
             bit(a != b, 32);
  if constexpr (std::is_same_v<A, Var> && std::is_same_v<B, Var>)
    bits = bits + bit(logical_and(a, b), 64) + bit(logical_or(a, b), 128);
  return bits;
}
constexpr char kComparisonBits[] = "bits: 1 <, 2 <=, 4 >, 8 >=, 16 ==, 32 !=, 64 and, 128 or";

// Operand pairs valid in every dtype: negative operands of integer division, division by
// zero, and no 0 raised to a negative power (inf, which has no integer value).
const std::vector<double> kPairA = {7, -7, 7, -7, 0, 3, -2, 1, 2, 5, 0, -3};
const std::vector<double> kPairB = {2, 2, -2, -2, 3, 0, 3, -1, 0, 5, 0, 2};

// Binary ops on the 1-d a and b stacked in one table; the last row holds the comparison bits.
Var binary_table(const Var& a1, const Var& b1) {
  Var a = tile(a1, 8), b = tile(b1, 8);
  return stack_rows(
      {a + b, a - b, a * b, a / b, pow(a, b), maximum(a, b), minimum(a, b), comparison_bits(a, b)});
}
const std::vector<std::string> kBinaryRows = {"+",   "-",       "*",       "/",
                                              "pow", "maximum", "minimum", kComparisonBits};

template <class T>
std::vector<T> values_of(const Var& v) {
  return v.to_vector<T>();
}

}  // namespace

// ---------------------------------------------------------------- unary

TEST_CASE("unary ops on float32, one kernel each", "[ops][unary]") {
  Var x = make_array(DType::Float32, {-3.7, -1, -0.5, 0, 0.25, 1, 2.5, 20});
  check_against_reference({-x, abs(x), exp(x), log(x), sqrt(x), sin(x), cos(x), tanh(x), sigmoid(x),
                           relu(x), floor(x), logical_not(x)});
}

TEST_CASE("unary ops on float32 and float64 in a table, incl. inf, -inf, NaN, -0", "[ops][unary]") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (bool special : {false, true}) {
      INFO("dtype " << dtype_name(dt) << (special ? ", special values" : ""));
      const std::vector<double> values =
          special ? std::vector<double>{kInf, -kInf, kNaN, -0.0, 0.0, 100, -100, 1e-30}
                  : std::vector<double>{-3.7, -1, -0.5, 0, 0.25, 1, 2.5, 20};
      Var x = tile(make_array(dt, values), 12);
      INFO(row_names({"neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu",
                      "floor", "logical_not"}));
      check_against_reference(stack_rows({-x, abs(x), exp(x), log(x), sqrt(x), sin(x), cos(x),
                                          tanh(x), sigmoid(x), relu(x), floor(x), logical_not(x)}));
    }
  }
}

TEST_CASE("unary ops on int32, int64 and bool", "[ops][unary]") {
  for (DType dt : {DType::Int32, DType::Int64, DType::Bool}) {
    INFO("dtype " << dtype_name(dt));
    Var x1 = make_array(dt, {-7, -2, -1, 0, 1, 3, 9});
    // Exact integer results (Bool is counted in Int32 by neg/abs/relu/floor).
    INFO(row_names({"neg", "abs", "relu", "floor", "logical_not"}));
    Var x = tile(x1, 5);
    check_against_reference(stack_rows({-x, abs(x), relu(x), floor(x), logical_not(x)}));
    // Transcendentals of integers compute in float32.
    x = tile(x1, 7);
    Var t = stack_rows({exp(x), log(x), sqrt(x), sin(x), cos(x), tanh(x), sigmoid(x)});
    CHECK(t.dtype() == DType::Float32);
    check_against_reference(t);
  }
  // Int64 beyond 2^53 stays exact.
  Var big = array<int64_t>({9007199254740993LL, -9007199254740993LL, 4611686018427387904LL}, {3});
  check_against_reference({-big, abs(big)});
  CHECK(values_of<int64_t>(-big) ==
        std::vector<int64_t>{-9007199254740993LL, 9007199254740993LL, -4611686018427387904LL});
  // Hand-checked: logical_not gives Bool, floor of an int is the int.
  Var i = array<int32_t>({-2, 0, 5}, {3});
  CHECK(logical_not(i).dtype() == DType::Bool);
  CHECK(values_of<bool>(logical_not(i)) == std::vector<bool>{false, true, false});
  CHECK(values_of<int32_t>(abs(i)) == std::vector<int32_t>{2, 0, 5});
}

// ---------------------------------------------------------------- binary

TEST_CASE("binary ops on float32, one kernel each", "[ops][binary]") {
  Var a = make_array(DType::Float32, {-2.5, -1.5, 0, 0.5, 3, 4, 1e30, 2});
  Var b = make_array(DType::Float32, {0.5, -2, 3, 0, 3, -1.5, 1e30, 0.25});
  check_against_reference({a + b, a - b, a * b, a / b, pow(a, b), maximum(a, b), minimum(a, b),
                           a == b, a != b, (a < b), a <= b, (a > b), a >= b, logical_and(a, b),
                           logical_or(a, b)});
}

TEST_CASE("binary ops on every dtype pair, with promotion", "[ops][binary]") {
  for (DType da : kAllDTypes)
    for (DType db : kAllDTypes) {
      INFO("a " << dtype_name(da) << ", b " << dtype_name(db) << "; " << row_names(kBinaryRows));
      Var a = make_array(da, kPairA), b = make_array(db, kPairB);
      Var t = binary_table(a, b);
      DType expected = promote(da, db);
      if (expected == DType::Bool) expected = DType::Int32;  // arithmetic on Bools counts in Int32
      CHECK(t.dtype() == expected);
      check_against_reference(t);
    }
}

TEST_CASE("binary ops on fractional and special float values", "[ops][binary]") {
  const std::vector<double> a = {-2.5, -1.5, -0.5, 0, 0.5, 1.5, 2.5, 3, kNaN, kInf, -kInf, 1e30};
  const std::vector<double> b = {0.5, -2, 3, 0, -0.5, 2.5, -1.5, 0, 1, 2, kInf, 1e30};
  for (DType dt : {DType::Float32, DType::Float64}) {
    INFO("dtype " << dtype_name(dt) << "; " << row_names(kBinaryRows));
    // Same structure as the dtype-pair tables: these reuse their kernels.
    check_against_reference(binary_table(make_array(dt, a), make_array(dt, b)));
  }
}

TEST_CASE("integer division truncates toward zero, and x/0 follows the reference",
          "[ops][binary]") {
  for (DType dt : {DType::Int32, DType::Int64}) {
    INFO("dtype " << dtype_name(dt));
    Var a = make_array(dt, {7, -7, 7, -7, 1, -1, 0, 5});
    Var b = make_array(dt, {2, 2, -2, -2, 3, 3, 3, 0});
    Var q = a / b;
    check_against_reference(q);
    // C++ truncation, independent of the reference (the last entry, 5/0, is left to it).
    std::vector<double> got = metajit_test_detail::eval_values_as_double(q);
    got.pop_back();
    CHECK(got == std::vector<double>{3, -3, -3, 3, 0, 0, 0});
  }
}

// CUDA's double pow is accurate to 2 ulp, so the CUDA kernels compute integer pow from the exact
// power (codegen/cuda_emitter.cc); (int)pow(-3.0, 1.0) was -2 on an H200 before. These are the
// cases where an inexact pow or a wrong overflow test would show: odd and even powers of
// negative bases, results beyond 2^53 (rounded once to double, as the reference does), at and
// past the int32 and int64 limits, and negative exponents.
TEST_CASE("integer pow: exact powers, the limits and negative exponents", "[ops][binary]") {
  const std::vector<double> a = {-3, -3, 3, -2, 2, 2, -2, 3, -1, -1, 0, 0, 1, 2, -7, 46341};
  const std::vector<double> b = {1, 3, 19, 31, 31, 30, 63, 39, -3, -4, 0, -1, -9, -1, 5, 2};
  for (DType dt : {DType::Int32, DType::Int64}) {
    INFO("dtype " << dtype_name(dt));
    Var p = pow(make_array(dt, a), make_array(dt, b));
    check_against_reference(p);
    const std::vector<double> got = metajit_test_detail::eval_values_as_double(p);
    CHECK(got[0] == -3);
    CHECK(got[1] == -27);
    CHECK(got[2] == 1162261467);
    CHECK(got[3] == -2147483648.0);
    CHECK(got[4] == (dt == DType::Int32 ? 0 : 2147483648.0));  // past int32: 0
    CHECK(got[8] == -1);
    CHECK(got[9] == 1);
    CHECK(got[10] == 1);
    CHECK(got[11] == 0);  // 0^-1 is infinite: out of range
  }
  Var big = pow(array<int64_t>({-2, 3, 2}, {3}), array<int64_t>({63, 39, 63}, {3}));
  check_against_reference(big);
  // -2^63 fits; 3^39 is rounded once to double as the reference does; 2^63 does not fit.
  CHECK(values_of<int64_t>(big) == std::vector<int64_t>{std::numeric_limits<int64_t>::min(),
                                                        int64_t(double(4052555153018976267LL)), 0});
}

TEST_CASE("Var-double and double-Var forms: the scalar takes the Var's dtype", "[ops][binary]") {
  const double s = 2.5;  // 2 for integers, true for Bool
  for (DType dt : kAllDTypes) {
    INFO("dtype " << dtype_name(dt));
    Var a = tile(make_array(dt, kPairA), 13);
    INFO(row_names({"a+s", "a-s", "a*s", "a/s", "pow(a,s)", "maximum(a,s)", "minimum(a,s)", "s+a",
                    "s-a", "s*a", "s/a", std::string("cmp(a,s) ") + kComparisonBits, "cmp(s,a)"}));
    check_against_reference(
        stack_rows({a + s, a - s, a * s, a / s, pow(a, s), maximum(a, s), minimum(a, s), s + a,
                    s - a, s * a, s / a, comparison_bits(a, s), comparison_bits(s, a)}));
  }
  // Hand-checked: 7 + 2.5 on Int32 is 7 + 2.
  Var i = array<int32_t>({7, -7}, {2});
  CHECK((i + 2.5).dtype() == DType::Int32);
  CHECK(values_of<int32_t>(i + 2.5) == std::vector<int32_t>{9, -5});
  CHECK(values_of<int32_t>(10.0 - i) == std::vector<int32_t>{3, 17});
}

TEST_CASE("where: Bool, integer and float conditions, mixed dtypes, broadcasting", "[ops][where]") {
  Var cond_b = array<bool>({true, false, true}, {3, 1});
  Var cond_i = array<int32_t>({0, -3, 2}, {3, 1});
  Var cond_f = array<float>({0.5f, 0.0f, -0.0f}, {3, 1});
  Var a = array<int32_t>({1, 2, 3, 4}, {1, 4});
  Var b = array<double>({-1.5}, {});
  Var c = array<float>({10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120}, {3, 4});
  Var w1 = where(cond_b, a, b), w2 = where(cond_i, c, a), w3 = where(cond_f, b, c);
  CHECK(w1.dtype() == DType::Float64);
  CHECK(w1.shape() == Shape{3, 4});
  check_against_reference({w1, w2, w3, where(c > 55.0, c, -c)});
  CHECK(values_of<double>(w1) ==
        std::vector<double>{1, 2, 3, 4, -1.5, -1.5, -1.5, -1.5, 1, 2, 3, 4});
}

// ---------------------------------------------------------------- cast

TEST_CASE("cast between every dtype pair", "[ops][cast]") {
  // Float sources truncate toward zero; no NaN or out-of-range value goes to an integer.
  const std::vector<double> floats = {-2.7, -1, -0.5, 0, 0.4, 1, 3.9, 100.25};
  const std::vector<double> ints = {-3, -1, 0, 0, 1, 2, 7, 100000};
  std::vector<Var> sources = {
      make_array(DType::Bool, ints), make_array(DType::Int32, ints),
      array<int64_t>({-3, -1, 0, 0, 1, 2, 7, 5000000000LL}, {8}),  // wraps in int32
      make_array(DType::Float32, floats), make_array(DType::Float64, floats)};
  for (DType to : kAllDTypes) {
    INFO("to " << dtype_name(to) << "; table rows: 0=bool 1=int32 2=int64 3=float32 4=float64");
    std::vector<Var> rows;
    for (const Var& s : sources) rows.push_back(cast(tile(s, 5), to));
    Var t = stack_rows(rows);
    CHECK(t.dtype() == to);
    check_against_reference(t);
  }
  // Any non-zero float is true, NaN and infinities included.
  for (DType from : {DType::Float32, DType::Float64}) {
    Var special = make_array(from, {kNaN, kInf, -kInf, -0.0, 1e-30});
    Var as_bool = cast(special, DType::Bool);
    check_against_reference(as_bool);
    CHECK(values_of<bool>(as_bool) == std::vector<bool>{true, true, true, false, true});
  }
  // Hand-checked.
  Var f = make_array(DType::Float32, floats);
  CHECK(values_of<int32_t>(cast(f, DType::Int32)) ==
        std::vector<int32_t>{-2, -1, 0, 0, 0, 1, 3, 100});
  CHECK(values_of<bool>(cast(f, DType::Bool)) ==
        std::vector<bool>{true, true, true, false, true, true, true, true});
}

// ---------------------------------------------------------------- broadcasting

TEST_CASE("numpy broadcasting of binary ops", "[ops][broadcast]") {
  Var col = array<float>({1, 2, 3}, {3, 1});
  Var row = array<float>({10, 20, 30, 40}, {1, 4});
  Var v4 = array<float>({1, 2, 3, 4}, {4});
  Var cube = make_array(DType::Float32, {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                         12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23},
                        {2, 3, 4});
  Var zero_d = array<float>({2.5f}, {});
  Var m23 = array<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Var empty = array<float>({}, {0, 3});
  Var one3 = array<float>({7, 8, 9}, {1, 3});
  Var ones11 = array<float>({5}, {1, 1});
  Var one1 = array<float>({2}, {1});
  Var a213 = make_array(DType::Float32, {1, 2, 3, 4, 5, 6}, {2, 1, 3});
  Var a141 = make_array(DType::Float32, {1, 2, 3, 4}, {1, 4, 1});
  Var ints = array<int32_t>({1, 2, 3}, {3, 1});
  Var dbl = array<double>({0.5, 1.5, 2.5, 3.5}, {4});

  Var outer = col + row, rank_up = v4 * cube, scalar_m = zero_d - m23, zero_size = empty + one3;
  Var size1 = ones11 + one1, mixed = a213 * a141, promoted = ints < dbl;
  CHECK(outer.shape() == Shape{3, 4});
  CHECK(rank_up.shape() == Shape{2, 3, 4});
  CHECK(scalar_m.shape() == Shape{2, 3});
  CHECK(zero_size.shape() == Shape{0, 3});
  CHECK(size1.shape() == Shape{1, 1});
  CHECK(mixed.shape() == Shape{2, 4, 3});
  CHECK(promoted.shape() == Shape{3, 4});
  check_against_reference({outer, rank_up, scalar_m, zero_size, size1, mixed, promoted, ints + dbl,
                           sum(zero_size, {0})});
  CHECK(values_of<float>(outer) ==
        std::vector<float>{11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43});
  CHECK(values_of<float>(zero_d - m23) ==
        std::vector<float>{1.5f, 0.5f, -0.5f, -1.5f, -2.5f, -3.5f});
  CHECK(values_of<float>(zero_size).empty());
}

TEST_CASE("broadcast_to with numpy rules, explicit dims and negative dims", "[ops][broadcast]") {
  Var v = array<float>({1, 2, 3}, {3});
  Var c = array<int32_t>({4, 5, 6}, {3, 1});
  Var s = array<double>({-2}, {});
  Var b1 = broadcast_to(v, {2, 3});              // numpy: new leading axis
  Var b2 = broadcast_to(v, {3, 2}, {1});         // new trailing axis
  Var b3 = broadcast_to(v, {2, 3, 4}, {0, -1});  // negative dims
  Var b4 = broadcast_to(c, {2, 3, 5}, {0});      // new axis and an expanded size-1 axis
  Var b5 = broadcast_to(c, {3, 2, 4}, {-2});     // new middle axis
  Var b6 = broadcast_to(s, {2, 2});              // 0-d
  Var b7 = broadcast_to(v, {0, 3});              // zero-size target
  check_against_reference({b1, b2, b3, b4, b5, b6, b7});
  CHECK(values_of<float>(b2) == std::vector<float>{1, 1, 2, 2, 3, 3});
  CHECK(b5.shape() == Shape{3, 2, 4});
  std::vector<int32_t> b5v = values_of<int32_t>(b5);
  CHECK(b5v[0] == 4);
  CHECK(b5v[8] == 5);  // [1, 0, 0]
  CHECK(b5v[23] == 6);
}

// ---------------------------------------------------------------- reindex

TEST_CASE("reindex: negative and out-of-range indices, overflow values and conditions",
          "[ops][reindex]") {
  Var x = make_array(DType::Float32, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Var xi = make_array(DType::Int32, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Var xb = make_array(DType::Bool, {0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0}, {3, 4});
  Var x33 = make_array(DType::Float64, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});

  // Shifted window: i0-1 is -1 on the first row, i1*2-3 is negative or >= 4 for many columns.
  Var shifted = reindex(x, {4, 5}, {"i0-1", "i1*2-3"}, -9);
  // 4-d output with an integer condition: (i1-i3)%2 is -1, 0 or 1 (C++ remainder).
  Var parity = reindex(x33, {3, 2, 3, 2}, {"i0", "i2"}, 7.25, {"(i1-i3)%2"});
  // A logical condition; out-of-range reads are also overflow.
  Var logical = reindex(x, {4, 4}, {"i0", "i1"}, 0.5, {"i0>1 && i1<2"});
  // Integer / and % with negative numerators, unary minus and parentheses.
  Var divmod = reindex(xi, {6, 5}, {"(i0-3)/2", "-(i1-4)%4"}, 2.5);  // 2.5 -> 2 in int32
  Var bools = reindex(xb, {2, 6}, {"i0+1", "i1-1"}, 1, {"!(i1!=3)"});
  Var to0d = reindex(x, {}, {"2", "3"});  // 0-d output
  Var from0d = reindex(array<float>({4.5f}, {}), {2, 3}, std::vector<std::string>{}, 0,
                       {"i0==i1"});  // 0-d input
  Var empty = reindex(x, {0, 4}, {"i0", "i1"});
  check_against_reference({shifted, parity, logical, divmod, bools, to0d, from0d, empty});

  // Hand-checked entries.
  std::vector<float> s = values_of<float>(shifted);
  CHECK(s[0] == -9);          // row -1
  CHECK(s[1 * 5 + 2] == 1);   // x[0, 1]
  CHECK(s[3 * 5 + 3] == 11);  // x[2, 3]
  CHECK(s[3 * 5 + 4] == -9);  // column 5 is out of range
  std::vector<double> p = values_of<double>(parity);
  CHECK(p[0] == 1);     // [0,0,0,0]: (0-0)%2 == 0 -> x[0,0]
  CHECK(p[1] == 7.25);  // [0,0,0,1]: (0-1)%2 == -1, true -> overflow
  CHECK(values_of<float>(to0d) == std::vector<float>{11});
  std::vector<int32_t> d = values_of<int32_t>(divmod);
  CHECK(d[0] == 2);  // (0-3)/2 == -1: overflow value 2.5 truncated to int32
}

TEST_CASE("reindex: an overflow value the dtype cannot hold converts as cast does (0)",
          "[ops][reindex]") {
  // Found by fuzz_api_sequence: -inf as the overflow value of an int32 reindex gave INT32_MIN
  // (the kernel converted it) where cast and the reference give 0 (docs/design.md §3).
  Var xi = make_array(DType::Int32, {1, 2, 3}, {3});
  Var xl = make_array(DType::Int64, {1, 2, 3}, {3});
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<Var> outs;
  for (double fill : {-inf, inf, std::nan(""), 1e30, -3e9})
    for (const Var& x : {xi, xl}) outs.push_back(reindex(x, {5}, {"i0-1"}, fill));
  check_against_reference(outs);
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::vector<int64_t> v = values_of<int64_t>(cast(outs[k], DType::Int64));
    const bool int64_holds = k == 9;  // -3e9 fits int64, not int32
    CHECK(v[0] == (int64_holds ? -3000000000LL : 0));
    CHECK(v[1] == 1);
    CHECK(v[4] == v[0]);  // i0 = 4 reads x[3]: out of range too
  }
}

// ---------------------------------------------------------------- reindex_reduce

TEST_CASE("reindex_reduce: add, mul, max, min with colliding targets and conditions",
          "[ops][reindex_reduce]") {
  // Multiples of 0.25: float sums are exact in any order, so atomics or a parallel order
  // cannot explain a difference.
  std::vector<double> ints, quarters;
  for (int k = 0; k < 24; ++k) {
    ints.push_back(k * 7 % 11 - 5);  // -5 .. 5
    quarters.push_back(ints.back() * 0.25);
  }
  for (DType dt : {DType::Float32, DType::Int32, DType::Int64}) {
    INFO("dtype " << dtype_name(dt));
    Var y = make_array(dt, dt == DType::Float32 ? quarters : ints, {4, 6});
    std::vector<Var> outs;
    for (ReduceOp op : {ReduceOp::Add, ReduceOp::Mul, ReduceOp::Max, ReduceOp::Min}) {
      if (dt == DType::Int64 && op != ReduceOp::Max) continue;  // int32 covers the rest
      // Targets collide (i1/2); i0+1 == 4 falls outside and is skipped; row 0 never receives
      // a value and keeps the identity.
      outs.push_back(reindex_reduce(y, op, {4, 3}, {"i0+1", "i1/2"}, {"i0==2 && i1>3"}));
    }
    if (dt == DType::Float32) {
      outs.push_back(reindex_reduce(y, ReduceOp::Add, {3}, {"(i0*6+i1)%3"}));  // collisions
      // Everything into one 0-d value.
      outs.push_back(reindex_reduce(y, ReduceOp::Min, {}, std::vector<std::string>{}));
    }
    check_against_reference(outs);
  }
  // Bool add counts in Int32.
  Var yb = array<bool>({true, false, true, true, true, false}, {6});
  Var counts = reindex_reduce(yb, ReduceOp::Add, {2}, {"i0%2"});
  CHECK(counts.dtype() == DType::Int32);
  check_against_reference(counts);
  CHECK(values_of<int32_t>(counts) == std::vector<int32_t>{3, 1});
  // Hand-checked identities and skips.
  Var y1 = array<float>({1, 2, 3, 4}, {4});
  Var mx = reindex_reduce(y1, ReduceOp::Max, {3}, {"i0-1"});  // y[0] goes to -1: skipped
  CHECK(values_of<float>(mx) == std::vector<float>{2, 3, 4});
  Var mn = reindex_reduce(y1, ReduceOp::Min, {5}, {"i0"}, {"i0==1"});
  std::vector<float> mnv = values_of<float>(mn);
  CHECK(mnv[0] == 1);
  CHECK(std::isinf(mnv[1]));  // skipped by the condition: +inf
  CHECK(std::isinf(mnv[4]));
}

// Jittor's call forms: braced lists of one, two and three string literals in `indexes` and
// `overflow_conditions`, overflow_value given as a double literal or left out. A list of two
// literals used to be ambiguous with the expression-tree overload and did not compile.
TEST_CASE("Jittor-style reindex and reindex_reduce calls with 1, 2 and 3 strings per list",
          "[ops][reindex]") {
  Var v = array<float>({1, 2, 3}, {3});
  Var m = array<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {4, 4});
  Var c = reshape(arange(8, DType::Float32), {2, 2, 2});

  Var one = reindex(v, {4}, {"i0-1"});
  Var one_c1 = reindex(v, {4}, {"i0"}, 0.0, {"i0==1"});
  Var one_c2 = reindex(v, {4}, {"i0"}, 0.0, {"i0==1", "i0==2"});
  Var one_c3 = reindex(v, {4}, {"i0"}, -1.0, {"i0==0", "i0==1", "i0==2"});
  Var two = reindex(m, {4, 4}, {"i0", "i1"});
  Var two_c1 = reindex(m, {4, 4}, {"i0", "i1"}, 0.0, {"i0==0"});
  Var two_c2 = reindex(m, {4, 4}, {"i0", "i1"}, 0.0, {"i0==0", "i1>=3"});  // once ambiguous
  Var two_c3 = reindex(m, {4, 4}, {"i1", "i0"}, 9.0, {"i0==0", "i1>=3", "i0==i1"});
  Var three = reindex(c, {2, 2, 2}, {"i2", "i1", "i0"});
  Var three_c2 = reindex(c, {2, 2, 2}, {"i0", "i1", "i2"}, 0.0, {"i0==1", "i2==0"});
  Var three_c3 =
      reindex(c, {2, 2, 2}, {"i0", "i1", "i2"}, 0.0, {"i0==1 && i1==1", "i2==5", "i1==0 && i2==1"});

  Var rr1 = reindex_reduce(v, ReduceOp::Add, {1}, {"0"});
  Var rr1_c2 = reindex_reduce(v, ReduceOp::Add, {1}, {"0"}, {"i0==0", "i0==2"});
  Var rr2 = reindex_reduce(m, ReduceOp::Add, {2, 2}, {"i0/2", "i1/2"});
  Var rr2_c1 = reindex_reduce(m, ReduceOp::Max, {2, 2}, {"i0/2", "i1/2"}, {"i0==3"});
  Var rr2_c2 = reindex_reduce(m, ReduceOp::Add, {2, 2}, {"i0%2", "i1%2"}, {"i0==0", "i1==0"});
  Var rr3 = reindex_reduce(c, ReduceOp::Add, {2, 2, 1}, {"i0", "i1", "0"});
  Var rr3_c3 = reindex_reduce(c, ReduceOp::Add, {2, 2, 1}, {"i0", "i1", "0"},
                              {"i0==1 && i1==1", "i2==5", "i1==0 && i2==1"});
  check_against_reference({one, one_c1, one_c2, one_c3, two, two_c1, two_c2, two_c3, three,
                           three_c2, three_c3, rr1, rr1_c2, rr2, rr2_c1, rr2_c2, rr3, rr3_c3});

  // The documented results, by hand: any true condition, or an index outside the input, gives
  // overflow_value (reindex) or skips the element (reindex_reduce).
  CHECK(values_of<float>(one) == std::vector<float>{0, 1, 2, 3});
  CHECK(values_of<float>(one_c2) == std::vector<float>{1, 0, 0, 0});
  CHECK(values_of<float>(one_c3) == std::vector<float>{-1, -1, -1, -1});
  std::vector<float> t = values_of<float>(two_c2);
  CHECK(t == std::vector<float>{0, 0, 0, 0, 4, 5, 6, 0, 8, 9, 10, 0, 12, 13, 14, 0});
  std::vector<float> u = values_of<float>(two_c3);
  CHECK(u == std::vector<float>{9, 9, 9, 9, 1, 9, 9, 9, 2, 6, 9, 9, 3, 7, 11, 9});
  CHECK(values_of<float>(three) == std::vector<float>{0, 4, 2, 6, 1, 5, 3, 7});
  CHECK(values_of<float>(three_c3) == std::vector<float>{0, 0, 2, 3, 4, 0, 0, 0});
  CHECK(values_of<float>(rr1) == std::vector<float>{6});
  CHECK(values_of<float>(rr1_c2) == std::vector<float>{2});
  CHECK(values_of<float>(rr2) == std::vector<float>{10, 18, 42, 50});
  CHECK(values_of<float>(rr2_c1) == std::vector<float>{5, 7, 9, 11});
  CHECK(values_of<float>(rr2_c2) == std::vector<float>{10, 20, 20, 40});
  CHECK(values_of<float>(rr3) == std::vector<float>{1, 5, 9, 13});
  CHECK(values_of<float>(rr3_c3) == std::vector<float>{0, 5, 4, 0});
}

TEST_CASE("reindex_reduce with many colliding int32 values", "[ops][reindex_reduce]") {
  // Above the kernels' 32768-iteration threshold for multi-threading.
  std::vector<int32_t> v(256 * 161);
  for (size_t k = 0; k < v.size(); ++k) v[k] = int32_t(k % 13) - 6;
  Var y = array(v, {256, 161});
  check_against_reference({reindex_reduce(y, ReduceOp::Add, {3}, {"i1%3"}),
                           reindex_reduce(y, ReduceOp::Max, {2, 2}, {"i0%2", "i1%2"}),
                           reindex_reduce(y, ReduceOp::Min, {2, 2}, {"i0%2", "i1%2"})});
}

// ---------------------------------------------------------------- reduce

TEST_CASE("reduce add/mul/max/min/mean over one, several, negative and all axes", "[ops][reduce]") {
  std::vector<double> vals;
  for (int k = 0; k < 24; ++k) vals.push_back(0.5 + (k * 5 % 7) * 0.125);  // 0.5 .. 1.25
  Var x = make_array(DType::Float32, vals, {2, 3, 4});
  std::vector<Var> outs;
  for (ReduceOp op : {ReduceOp::Add, ReduceOp::Mul, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean}) {
    outs.push_back(reduce(x, op, {1}));
    outs.push_back(reduce(x, op));  // all axes: 0-d
  }
  outs.push_back(sum(x, {0, 2}));
  outs.push_back(sum(x, {-1}, true));
  outs.push_back(sum(x, {}, true));  // [1, 1, 1]
  outs.push_back(max(x, {-3, -2}));
  outs.push_back(mean(x, {2, 0}, true));
  check_against_reference(outs);
  CHECK(outs[1].shape() == Shape{});
  CHECK(outs[10].shape() == Shape{3});
  CHECK(outs[11].shape() == Shape{2, 3, 1});
  CHECK(outs[12].shape() == Shape{1, 1, 1});
  CHECK(outs[14].shape() == Shape{1, 3, 1});
  // item() of 0-d results agrees with the reference.
  float total = 0;
  for (double v : vals) total += float(v);
  CHECK(reduce(x, ReduceOp::Add).item<float>() == Approx(total).epsilon(1e-6));
  CHECK(sum(x, {}, true).item<float>() == Approx(total).epsilon(1e-6));
  CHECK(max(x).item<float>() == 1.25f);
}

TEST_CASE("reduce on integers and Bool: dtypes of sums, means and extremes", "[ops][reduce]") {
  Var i = make_array(DType::Int32, {3, -1, 4, -1, 5, -9, 2, 6}, {2, 4});
  Var l = array<int64_t>({4000000000LL, 5, -3, 4000000000LL}, {2, 2});
  Var b = array<bool>({true, false, true, true, false, false}, {2, 3});
  Var bool_sum = sum(b), bool_rows = sum(b, {1}), int_mean = mean(i, {1}), bool_max = max(b, {1});
  CHECK(bool_sum.dtype() == DType::Int32);
  CHECK(int_mean.dtype() == DType::Float32);
  CHECK(sum(i).dtype() == DType::Int32);
  CHECK(bool_max.dtype() == DType::Bool);
  check_against_reference({sum(i, {1}), prod(i, {0}), max(i, {1}), min(i), int_mean, sum(l, {0}),
                           max(l), bool_sum, bool_rows, bool_max, min(b, {1}), prod(b)});
  CHECK(bool_sum.item<int32_t>() == 3);
  CHECK(values_of<int32_t>(bool_rows) == std::vector<int32_t>{2, 1});
  CHECK(values_of<float>(int_mean) == std::vector<float>{1.25f, 1.0f});
  CHECK(values_of<int64_t>(sum(l, {0})) == std::vector<int64_t>{3999999997LL, 4000000005LL});
}

TEST_CASE("reduce over zero-size axes gives the identity", "[ops][reduce]") {
  // Same ranks and axes as the tests above, so these reuse their kernels.
  Var e = array<float>({}, {2, 0, 4});
  Var ei = array<int32_t>({}, {2, 0});
  std::vector<Var> outs = {sum(e, {1}),    prod(e, {1}), max(e, {1}),  min(e, {1}), mean(e, {1}),
                           sum(e, {0, 2}), sum(e),       max(ei, {1}), min(ei),     sum(ei, {1})};
  check_against_reference(outs);
  CHECK(values_of<float>(outs[0]) == std::vector<float>(8, 0.0f));
  CHECK(values_of<float>(outs[1]) == std::vector<float>(8, 1.0f));
  CHECK(values_of<float>(outs[2])[0] == -std::numeric_limits<float>::infinity());
  CHECK(values_of<float>(outs[3])[7] == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(values_of<float>(outs[4])[0]));  // 0/0, like numpy
  CHECK(outs[5].shape() == Shape{0});
  CHECK(outs[6].item<float>() == 0);
  CHECK(values_of<int32_t>(outs[7]) ==
        std::vector<int32_t>(2, std::numeric_limits<int32_t>::lowest()));
  CHECK(outs[8].item<int32_t>() == std::numeric_limits<int32_t>::max());
  CHECK(values_of<int32_t>(outs[9]) == std::vector<int32_t>{0, 0});
}

// ---------------------------------------------------------------- composite ops

TEST_CASE("reshape and transpose feeding reductions (non-contiguous reads)", "[ops][composite]") {
  Var x = make_array(DType::Float32, {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                      12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23},
                     {2, 3, 4});
  Var r1 = reshape(x, {4, -1});
  Var r2 = reshape(x, {24});
  Var r3 = reshape(transpose(x, {1, 0, 2}), {3, 8});  // reshape of a non-contiguous view
  Var t1 = transpose(x, {2, 0, 1});
  Var t2 = transpose(reshape(x, {6, 4}), {-1, -2});
  CHECK(r1.shape() == Shape{4, 6});
  CHECK(t1.shape() == Shape{4, 2, 3});
  check_against_reference({r1, r2, r3, t1, sum(t1, {2}), max(t2, {0}), sum(r3, {1}), t2 * 2.0});
  CHECK(values_of<float>(sum(transpose(x, {2, 0, 1}), {2})) ==
        std::vector<float>{12, 48, 15, 51, 18, 54, 21, 57});
  std::vector<float> r3v = values_of<float>(r3);
  CHECK(r3v[4] == 12);  // transposed [0, 1, 0] = x[1, 0, 0]
}

// A reduction of an input with no elements is its identity everywhere, computed without looping
// over the extents beside the empty one (codegen/empty_reductions.cc): before, sum over
// [2^40, 2^22, 0] ran 2^62 empty iterations (found by tests/fuzz/fuzz_api_sequence.cc). The
// huge cases are checked by value (the reference interpreter would loop too), the small ones
// against it as well.
TEST_CASE("reductions of empty inputs give the identity without looping", "[ops][reduce]") {
  const double inf = std::numeric_limits<double>::infinity();
  Var huge = zeros({int64_t(1) << 40, int64_t(1) << 22, 0});
  Var huge_i32 = zeros({int64_t(1) << 40, 0, 3}, DType::Int32);
  Var huge_i64 = zeros({int64_t(1) << 40, 0}, DType::Int64);
  Var s = sum(huge), m = mean(huge), p = prod(huge), mx = max(huge), mn = min(huge);
  Var kept = sum(zeros({int64_t(1) << 40, 5, 0}), {0, 2}, true);
  Var imax = max(huge_i32, {0, 1}), imin = min(huge_i32, {0, 1}), lmax = max(huge_i64);
  eval({s, m, p, mx, mn, kept, imax, imin, lmax});
  CHECK(s.item<float>() == 0);
  CHECK(std::isnan(m.item<float>()));  // 0 / 0, as numpy
  CHECK(p.item<float>() == 1);
  CHECK(mx.item<float>() == -inf);
  CHECK(mn.item<float>() == inf);
  CHECK(kept.shape() == Shape{1, 5, 1});
  CHECK(values_of<float>(kept) == std::vector<float>(5, 0.f));
  CHECK(values_of<int32_t>(imax) == std::vector<int32_t>(3, std::numeric_limits<int32_t>::min()));
  CHECK(values_of<int32_t>(imin) == std::vector<int32_t>(3, std::numeric_limits<int32_t>::max()));
  CHECK(lmax.item<int64_t>() == std::numeric_limits<int64_t>::min());
  // Small empty inputs, fused with element-wise work around them, against the reference.
  Var e = zeros({3, 0, 2});
  check_against_reference({sum(e, {1}) + 1.0, max(e * 2.0, {1}), prod(exp(e), {0, 1}),
                           min(cast(e, DType::Bool), {1}), sum(cast(e, DType::Int64))});
}

// reshape matches dims in groups of equal size (meta_ops/composite.cc reshape_indexes): the
// innermost dim a reshape keeps is read as it is, only merged or split dims divide. Every
// element must still land where row-major order puts it, for groups, size-1 dims, shapes that
// share no group and empty tensors.
TEST_CASE("reshape keeps row-major order for every grouping of dims", "[ops][composite]") {
  const std::vector<std::pair<Shape, Shape>> pairs = {
      {{2, 3, 4}, {6, 4}},    {{2, 3, 4}, {2, 12}},   {{6, 4}, {4, 6}},     {{2, 3, 4}, {4, 3, 2}},
      {{1, 5, 1}, {5}},       {{5}, {1, 5, 1}},       {{3, 1, 4}, {12, 1}}, {{2, 6}, {2, 2, 3}},
      {{4, 6}, {2, 2, 2, 3}}, {{2, 2, 2, 3}, {4, 6}}, {{1, 1}, {1}},        {{0, 3}, {3, 0}}};
  for (const auto& [from, to] : pairs) {
    INFO(shape_str(from) << " -> " << shape_str(to));
    int64_t n = 1;
    for (int64_t d : from) n *= d;
    Var x = reshape(cast(arange(n), DType::Float32), from);
    Var y = reshape(x * 2.0, to);
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) want[size_t(k)] = float(2 * k);
    CHECK(y.shape() == to);
    CHECK(values_of<float>(y) == want);
    check_against_reference({y});
  }
  // The transformer's logits for cross-entropy: only the merged rows divide.
  std::vector<std::string> idx;
  for (const IndexExprPtr& e : reshape_indexes({16, 64, 64}, {1024, 64}))
    idx.push_back(ix_to_string(*e));
  CHECK(idx == std::vector<std::string>{"(i0/64)", "(i0%64)", "i1"});
}

// Quotients and remainders of the innermost index by a constant (heads split and merged,
// pieces side by side) run in chunks of the divisor where both are constant per chunk
// (codegen/division_chunks.h). C division truncates: chunks whose numerators are negative
// compute their first element as written. Offsets that are and are not multiples of the
// divisor, negative and positive, overflow values, extents that end inside a chunk or are
// shorter than one, a second divisor in the same kernel, and one too small to chunk.
TEST_CASE("reindex dividing the innermost index runs in chunks and matches the reference",
          "[ops][reindex]") {
  auto chunked = [](const Var& y) {  // the C++ emitter's source, whichever device runs
    const std::vector<KernelInfo> k = plan({y}, Device::CPU);
    return k.size() == 1 && k[0].source.find("mj_c0") != std::string::npos;
  };
  // dq, dk^T and dv of two batches, three heads of 16, written side by side (bench/transformer.cc
  // splits qkv so; its gradient is this concatenation).
  Var q = randn({2, 3, 5, 16}, 1), kt = randn({2, 3, 16, 5}, 2), v = randn({2, 3, 5, 16}, 3);
  eval({q, kt, v});
  Var cat = reindex(q, {2, 5, 144}, {"i0", "i2/16", "i1", "i2%16"}) +
            reindex(kt, {2, 5, 144}, {"i0", "(i2-48)/16", "(i2-48)%16", "i1"}, 0.5) +
            reindex(v, {2, 5, 144}, {"i0", "(i2-96)/16", "i1", "(i2-96)%16"});
  CHECK(chunked(cat));
  check_against_reference(cat);
  // The same heads merged, then padded into place (the gradient of a slice: a reindex by
  // i2 - 48 and i2 - 96 with their bounds tests): after substitution the quotients are
  // (i2 - 48) / 16 and (i2 - 96) / 16, read only where i2 - 48 >= 0 (i2 - 96 >= 0), so the
  // chunks left of each piece need no first element of their own (read_only_where_nonnegative).
  auto first_elements = [](const Var& y) {
    const std::vector<KernelInfo> k = plan({y}, Device::CPU);
    return k.size() == 1 && k[0].source.find("mj_cs = mj_c0 + 1") != std::string::npos;
  };
  Var merged_q = reindex(q, {2, 5, 48}, {"i0", "i2/16", "i1", "i2%16"});
  Var merged_v = reindex(v, {2, 5, 48}, {"i0", "i2/16", "i1", "i2%16"});
  Var padded = reindex(merged_q, {2, 5, 144}, {"i0", "i1", "i2-48"}, 0.0) +
               reindex(merged_v, {2, 5, 144}, {"i0", "i1", "i2-96"}, 0.0);
  CHECK(chunked(padded));
  CHECK_FALSE(first_elements(padded));
  check_against_reference(padded);
  Var x = randn({4, 12, 8}, 4);
  eval({x});
  for (int64_t n : {0, 3, 100, 131}) {
    INFO("columns " << n);
    Var below = reindex(x, {4, n}, {"i0", "(i1-5)/8", "(i1-5)%8"}, -1.0) * 2.0;
    Var above = reindex(x, {4, n}, {"i0", "(i1+3)/8", "(i1+3)%8"}) * 2.0;
    // Negative numerators that still index inside: (i1 - 16) / 8 is -2 at i1 = 0, -1 for
    // i1 = 1..8 (truncated), 0 for 9..16.
    Var truncated = reindex(x, {4, n}, {"i0", "(i1-16)/8+2", "i1%8"}) * 2.0;
    if (n >= 8) CHECK(chunked(below));
    if (n >= 8) CHECK(chunked(above));
    if (n >= 8) CHECK(chunked(truncated));
    // No test of i1 - 16 >= 0 guards these quotients: the first element keeps its own run.
    if (n >= 8) CHECK(first_elements(truncated));
    check_against_reference({below, above, truncated});
  }
  // Two divisors: the first one found is chunked, the other divides per element.
  Var y = randn({4, 6, 16}, 5);
  eval({y});
  Var mixed = reindex(x, {4, 90}, {"i0", "i1/8", "i1%8"}) +
              reindex(y, {4, 90}, {"i0", "i1/16", "i1%16"}, 0.25);
  CHECK(chunked(mixed));
  check_against_reference(mixed);
  // A divisor below kMinChunkDivisor keeps the plain loop.
  Var small = reindex(x, {4, 40}, {"i0", "i1/4", "i1%4"}) * 3.0;
  CHECK_FALSE(chunked(small));
  check_against_reference(small);
}

// In a chunk, a reindex's tests of the loop variable are affine (codegen/guard_intervals.h):
// the chunk runs in sub-ranges where every guard is one value, and each top-level guard's
// values come from a loop of its own. Sub-range ends inside chunks (offsets not multiples of
// the divisor), an inner guard failing where the outer one passes (the unvectorised branch),
// bounds from conditions with -i and ==, and a test that is not affine (kept per element).
TEST_CASE("a chunked loop's guards run as constants per sub-range and match the reference",
          "[ops][reindex]") {
  auto source = [](const Var& y) {
    const std::vector<KernelInfo> k = plan({y}, Device::CPU);
    return k.size() == 1 ? k[0].source : std::string();
  };
  Var x = randn({4, 3, 5}, 6), w = randn({4, 12, 8}, 7);
  eval({x, w});
  for (int64_t n : {0, 3, 40, 45, 61}) {
    INFO("columns " << n);
    // x's last axis has 5 of each chunk's 8: the inner guard fails for 3 elements of each.
    Var inner = reindex(x, {4, 24}, {"i0", "i1/8", "i1%8"}, -2.0);
    Var nested = reindex(inner, {4, n}, {"i0", "i1-7"}, 0.5) * 3.0;
    Var pieces =
        reindex(w, {4, n}, {"i0", "(i1-5)/8", "(i1-5)%8"}, -1.0) +
        reindex(w, {4, n}, {"i0", "(i1+3)/8", "(i1+3)%8"}, 0.25, {"30 - i1 < 4", "i1 < 2"});
    // i1 != 11 is no interval: that test stays in the loop.
    Var holed = reindex(w, {4, n}, {"i0", "i1/8", "i1%8"}, 1.5, {"i1 == 11", "i1 + 9 > 40"});
    if (n >= 40) {
      for (const Var& y : {nested, pieces, holed})
        CHECK(source(y).find("mj_a") != std::string::npos);
      CHECK(source(nested).find("mj_t") != std::string::npos);
      CHECK(source(pieces).find("mj_t") != std::string::npos);
      CHECK(source(holed).find("mj_t") == std::string::npos);
    }
    check_against_reference({nested, pieces, holed});
  }
}

// A reduction over a reindex whose tests of the reduced index are intervals (a causal mask,
// j <= i) runs in sub-ranges where each test is one value (cpp_reductions.cc partitioned_reduce),
// taking a failing test's fill once where that is exact. Against the reference: a causal
// logsumexp with fully masked rows (NaN), fills that are and are not the reduction's identity
// (a sum adds 2 once per masked element), NaNs read, products, an integer sum, and rows
// shorter than kMinSimdReduceExtent (the plain loop of the same kernel).
TEST_CASE("a reduction's interval guards run as constants per sub-range and match the reference",
          "[ops][reindex]") {
  auto partitioned = [](const Var& y) {
    for (const KernelInfo& k : plan({y}, Device::CPU))
      if (k.source.find("mj_ra") != std::string::npos) return true;
    return false;
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t n : {5, 8, 20, 37}) {
    INFO("rows of " << n);
    std::vector<float> data(size_t(3 * n * n));
    for (size_t k = 0; k < data.size(); ++k) data[k] = float(std::sin(0.7 * double(k)));
    data[size_t(n + 1)] = std::numeric_limits<float>::quiet_NaN();      // [0, 1, 1]
    data[size_t(4 * n + 1)] = std::numeric_limits<float>::quiet_NaN();  // [0, 4, 1]
    Var x = array(data, {3, n, n});
    auto under = [&](const Var& v, double fill, const char* hidden) {
      return reindex(v, {3, n, n}, {"i0", "i1", "i2"}, fill, {hidden});
    };
    // Key j hidden from query i where j > i - 2: rows 0 and 1 see nothing.
    Var masked = under(x, -inf, "i2 > i1 - 2");
    Var m = max(masked, {2}, true);
    Var lse = log(sum(exp(masked - m), {2}, true)) + m;
    Var filled = sum(under(x, 2.0, "i2 > i1"), {2});
    Var zero_filled = sum(under(x, 0.0, "i2 < i1"), {2});
    Var smallest = min(under(x, inf, "i2 >= i1 + 3"), {2});
    Var product = prod(under(x * 0.5 + 1.0, 1.25, "i2 > i1"), {2});
    Var unit_product = prod(under(x * 0.5 + 1.0, 1.0, "i2 > i1"), {2});
    Var counts =
        sum(under(cast(floor(randn({3, n, n}, 31) * 4.0), DType::Int32), 3.0, "i2 > i1"), {2});
    for (const Var& y : {lse, filled, zero_filled, smallest, product, unit_product, counts})
      CHECK(partitioned(y));
    check_against_reference({lse, filled, zero_filled, smallest, product, unit_product, counts});
  }
}

// A convolution's B panels hold output columns merged over output rows (pieces within one
// output row); with padding, each piece's columns inside the input form one interval, packed by
// a vector loop, and the columns at the row's ends under their bounds tests
// (cpp_packing.cc merged_piece_in_bounds). Strides 1 and 2, pads that leave whole pieces
// outside (pad 4 around a 3-wide kernel, rows of 5), batches, odd widths; integer data: exact.
TEST_CASE("convolutions with padding pack each piece's in-bounds interval and match the reference",
          "[ops][composite]") {
  Var x = floor(randn({2, 3, 19, 23}, 14) * 4.0), w = floor(randn({5, 3, 7, 7}, 15) * 4.0);
  Var small = floor(randn({1, 2, 5, 5}, 16) * 4.0), w3 = floor(randn({4, 2, 3, 3}, 17) * 4.0);
  eval({x, w, small, w3});
  const Var stem = conv2d(x, w, 2, 3), same = conv2d(x, w, 1, 3), wide = conv2d(small, w3, 1, 4);
  for (const Var& y : {stem, same, wide}) {
    const std::vector<KernelInfo> k = plan({y}, Device::CPU);
    REQUIRE(k.size() == 1);
    CHECK(k[0].source.find("i64 mj_lo = 0, mj_hi = ") != std::string::npos);
  }
  check_against_reference({stem, same, wide, relu(conv2d(x, w, 2, 3) + 1.0)});
}

// Each operand of a contraction is packed by one function (MJ_PACK_FN, cpp_contraction.cc
// pack_function) that the packing once per launch and the packing per block both call: 600
// columns are two column blocks (A reused, packed once), 40 one (packed per block); a scalar
// computed before the loops is repeated in the function; a batched product's operands, read
// at the batch index it passes, are packed per block only. Integer data: exact sums.
TEST_CASE("contraction operands packed by shared functions match the reference",
          "[ops][composite]") {
  Var a = floor(randn({50, 70}, 41) * 4.0), b = floor(randn({70, 600}, 42) * 4.0);
  Var b40 = floor(randn({70, 40}, 43) * 4.0), c = floor(randn({30}, 44) * 4.0);
  Var ba = floor(randn({3, 20, 70}, 45) * 4.0), bb = floor(randn({3, 70, 300}, 46) * 4.0);
  eval({a, b, b40, c, ba, bb});
  const Var wide = matmul(a * 2.0, b), narrow = matmul(a * 2.0, b40), batched = matmul(ba, bb);
  const Var with_sum = matmul(a, b) + sum(c);
  const std::vector<std::pair<Var, bool>> packed_once = {
      {wide, true}, {narrow, true}, {batched, false}};
  for (const auto& [y, once] : packed_once) {
    const std::vector<KernelInfo> k = plan({y}, Device::CPU);
    REQUIRE(k.size() == 1);
    const std::string& src = k[0].source;
    int functions = 0, most_calls = 0;
    for (size_t at = src.find("MJ_PACK_FN void "); at != std::string::npos;
         at = src.find("MJ_PACK_FN void ", at + 1)) {
      ++functions;
      const size_t name_at = at + std::string("MJ_PACK_FN void ").size();
      const std::string call = src.substr(name_at, src.find('(', name_at) - name_at) + "(B, P, S";
      int calls = 0;
      for (size_t c2 = src.find(call); c2 != std::string::npos; c2 = src.find(call, c2 + 1))
        ++calls;
      CHECK(calls >= 1);
      most_calls = std::max(most_calls, calls);
    }
    CHECK(functions >= 2);
    // A (the same rows for every column block) packed once and per block by one function.
    if (once) CHECK(most_calls >= 2);
  }
  check_against_reference({wide, narrow, batched, with_sum});
}

// A convolution's weight gradient sums over (n, oh, ow), and the activations it reads run along
// ow: they pack along the reduction in runs of one output row (cpp_packing.cc innermost_runs),
// the padding's steps found from the run's ends (guarded_step_loop). Reduction blocks cut rows
// (K = 2 * 9 * 11 = 198 and 2 * 7 * 8 = 112 against kc 128 or 256); 20 input channels fill
// 16-wide panels and a partial one; stride 2 reads every other column; integer data, exact sums.
TEST_CASE("convolution weight gradients pack activations in runs of output rows, as the reference",
          "[ops][composite]") {
  Var x = floor(randn({2, 20, 9, 11}, 31) * 4.0), w = floor(randn({24, 20, 3, 3}, 32) * 4.0);
  Var x2 = floor(randn({2, 3, 13, 15}, 33) * 4.0), w2 = floor(randn({5, 3, 5, 5}, 34) * 4.0);
  eval({x, w, x2, w2});
  Var g = floor(randn({2, 24, 9, 11}, 35) * 4.0), g2 = floor(randn({2, 5, 7, 8}, 36) * 4.0);
  eval({g, g2});
  const Var dw = grad(sum(conv2d(x, w, 1, 1) * g), {w})[0];
  const Var dw2 = grad(sum(conv2d(x2, w2, 2, 2) * g2), {w2})[0];
  for (const Var& y : {dw, dw2}) {
    bool runs = false;
    for (const KernelInfo& k : plan({y}, Device::CPU))
      runs = runs || k.source.find("const i64 mj_run = ") != std::string::npos;
    CHECK(runs);
  }
  check_against_reference({dw, dw2});
}

// An operand read through nested reindexes (a head split of a packed qkv: slice, reshape,
// transpose) packs along the reduction as a plain copy where every guard holds over a block of
// steps (cpp_packing.cc step_span_tests), whole panels of rows in one loop (interleaved_panel),
// element by element elsewhere; 13 rows: two whole panels of 6 and a partial one. K = 1000 in
// four blocks of 250 (every target's narrow tile has kc 256): the outer guard fails in the
// first, the inner one in the first and the last (where the outer one holds throughout), both
// hold in the middle two.
TEST_CASE("matmul of operands under nested guards matches the reference", "[ops][composite]") {
  // Small integers: every sum is exact, whatever order the kernel adds in.
  Var a = floor(randn({13, 900}, 8) * 4.0), b = floor(randn({1000, 4}, 9) * 4.0);
  eval({a, b});
  Var inner = reindex(a, {13, 1020}, {"i0", "i1-1"}, 0.5);
  Var outer = reindex(inner, {13, 1000}, {"i0", "i1-20"}, -1.0);
  Var y = matmul(outer, b);
  const std::vector<KernelInfo> k = plan({y}, Device::CPU);
  REQUIRE(k.size() == 1);
  CHECK(k[0].source.find("mj_kspan") != std::string::npos);
  // 6-row panels through the tile, interleaved in registers (transposed_panel)
  CHECK(k[0].source.find("mj_interleave(mj_tile") != std::string::npos);
  check_against_reference(y);
  // The same pads on the other operand, read along the reduction too (k^T of q.k^T).
  Var bt = reindex(reindex(transpose(b, {1, 0}), {4, 1002}, {"i0", "i1-2"}, 0.25), {4, 1000},
                   {"i0", "i1"});
  Var z = matmul(outer, transpose(bt, {1, 0}));
  check_against_reference(z);
  // Nested guards on the rows of a panel (cpp_packing.cc hoist_guard_tests): B's 130 columns
  // in 16-wide panels, all passing, straddling the inner bounds, or failing only them; and a
  // transposed A with a prologue, through the row buffer, whose groups of rows are checked
  // against every guard.
  Var c = floor(randn({300, 100}, 10) * 4.0), e = floor(randn({200, 40}, 11) * 4.0);
  eval({c, e});
  Var cols = reindex(reindex(c, {300, 140}, {"i0", "i1-3"}, 0.5), {300, 130}, {"i0", "i1+5"}, -1.0);
  Var u = matmul(floor(randn({7, 300}, 12) * 4.0), cols);
  Var rows = reindex(reindex(e, {200, 50}, {"i0", "i1-2"}, 0.5), {200, 45}, {"i0", "i1+1"}, -1.0);
  Var w = matmul(transpose(rows, {1, 0}) * 2.0, floor(randn({200, 8}, 13) * 4.0));
  check_against_reference({u, w});
}

TEST_CASE("contraction row blocks of unequal size cover every row once", "[ops][composite]") {
  // mj_row_blocks (cpp_contraction_prelude.h) spreads the row tiles over the blocks so that sizes
  // differ by at most one tile: 1024 rows are 171 tiles of 6 in 12 blocks of 15 or 14 on 2 threads.
  // Row counts around the block caps and tile sizes, 64 and 200 columns (both tiles), one and
  // several reduction blocks, a batch loop outside; integer data, so every sum is exact.
  Var b64 = floor(randn({130, 64}, 21) * 4.0), b200 = floor(randn({130, 200}, 22) * 4.0);
  eval({b64, b200});
  std::vector<Var> ys;
  for (int64_t m : {1, 7, 97, 191, 577, 1024, 1031}) {
    Var a = floor(randn({m, 130}, 23 + uint64_t(m)) * 4.0);
    ys.push_back(matmul(a, b64));
    ys.push_back(matmul(slice(a, 1, 0, 3), slice(b200, 0, 0, 3)));
  }
  Var batched = floor(randn({3, 581, 40}, 24) * 4.0);
  ys.push_back(matmul(batched, slice(b64, 0, 0, 40)));
  check_against_reference(ys);
  // Plain loops, independent of the reference: the last row of the 1031-row product.
  Var a = floor(randn({1031, 130}, 23 + 1031) * 4.0);
  const std::vector<float> av = values_of<float>(a), bv = values_of<float>(b64),
                           yv = values_of<float>(ys[12]);
  for (int64_t j = 0; j < 64; j += 9) {
    double want = 0;
    for (int64_t k = 0; k < 130; ++k)
      want += double(av[size_t(1030 * 130 + k)]) * bv[size_t(k * 64 + j)];
    CHECK(yv[size_t(1030 * 64 + j)] == want);
  }
}

TEST_CASE("panels read along the reduction are packed through a transposed tile",
          "[ops][composite]") {
  // cpp_packing.cc transposed_panel: x.W^T and q.k^T read B along the reduction; W x W blocks
  // of a tile go through mj_transpose (A's 6-row panels through mj_interleave), the steps left
  // over (not a multiple of W) and the columns past the matrix one by one. Reductions of 5 (no
  // whole block), 37, 130 and 300 steps (several chunks of 128), 3, 70 and 200 columns (both tiles,
  // padded panels), B packed once and per block, and B under guards (a pad along the reduction: the
  // kspan test); on both vector widths. Integer data: every sum is exact.
  __builtin_cpu_init();
  for (const char* flags : {"", "-march=x86-64-v3"}) {
    if (*flags && !__builtin_cpu_supports("avx2")) {
      WARN("AVX2 (-march=x86-64-v3) not checked: this CPU cannot run it; the native width was");
      continue;
    }
    INFO("METAJIT_CXXFLAGS += '" << flags << "'");
    metajit_test::ScopedEnv width("METAJIT_CXXFLAGS",
                                  metajit_test::ScopedEnv::appended("METAJIT_CXXFLAGS", flags));
    std::vector<Var> ys;
    for (int64_t k : {5, 37, 130, 300})
      for (int64_t n : {3, 70, 200}) {
        Var x = floor(randn({45, k}, 31 + uint64_t(k)) * 4.0);
        Var w = floor(randn({n, k}, 37 + uint64_t(n)) * 4.0);
        ys.push_back(matmul(x, transpose(w, {1, 0})));
      }
    Var q = floor(randn({2, 3, 50, 33}, 41) * 4.0), kt = floor(randn({2, 3, 70, 33}, 42) * 4.0);
    ys.push_back(matmul(q, transpose(kt, {0, 1, 3, 2})));
    Var wp = reindex(floor(randn({64, 120}, 43) * 4.0), {64, 130}, {"i0", "i1-4"}, 0.5);
    ys.push_back(matmul(floor(randn({20, 130}, 44) * 4.0), transpose(wp, {1, 0})));
    // A's rows (mr of them) read along the reduction too, with a prologue: interleaved.
    Var xa = floor(randn({47, 131}, 45) * 4.0);
    ys.push_back(matmul(xa * 2.0 + 1.0, floor(randn({131, 20}, 46) * 4.0)));
    const std::vector<KernelInfo> k = plan({ys[10]}, Device::CPU);
    REQUIRE(k.size() == 1);
    CHECK(k[0].source.find("mj_transpose(mj_tile") != std::string::npos);
    CHECK(k[0].source.find("mj_interleave(mj_tile") != std::string::npos);
    check_against_reference(ys);
  }
}

TEST_CASE("matmul, incl. broadcast batch dims", "[ops][composite]") {
  Var a = rand({3, 4}, 11), b = rand({4, 5}, 12);
  Var a3 = rand({2, 3, 4}, 13);
  Var a4 = rand({2, 1, 3, 4}, 14), b3 = rand({5, 4, 2}, 15);
  Var ai = make_array(DType::Int32, {1, -2, 3, 4, 0, -1}, {2, 3});
  Var bi = make_array(DType::Int32, {2, 1, 0, -1, 5, 3}, {3, 2});
  Var ad = randn({3, 4}, 16, DType::Float64);
  Var m1 = matmul(a, b), m2 = matmul(a3, b), m3 = matmul(a4, b3), mi = matmul(ai, bi);
  Var md = matmul(ad, b);  // float64 x float32 promotes
  CHECK(m2.shape() == Shape{2, 3, 5});
  CHECK(m3.shape() == Shape{2, 5, 3, 2});
  CHECK(mi.dtype() == DType::Int32);
  CHECK(md.dtype() == DType::Float64);
  check_against_reference({m1, m2, m3, mi, md});
  CHECK(values_of<int32_t>(mi) == std::vector<int32_t>{17, 12, 3, 1});
  // Plain loops, independent of the reference: m3[1, 4, 2, 1].
  std::vector<float> av = values_of<float>(a4), bv = values_of<float>(b3),
                     mv = values_of<float>(m3);
  double want = 0;
  for (int k = 0; k < 4; ++k) want += double(av[(1 * 3 + 2) * 4 + k]) * bv[(4 * 4 + k) * 2 + 1];
  CHECK(mv[((1 * 5 + 4) * 3 + 2) * 2 + 1] == Approx(want).epsilon(1e-5));
}

namespace {
// Plain-loop conv2d (NCHW x OIHW) for one output element.
double naive_conv(const std::vector<float>& x, const Shape& xs, const std::vector<float>& w,
                  const Shape& ws, int64_t n, int64_t o, int64_t h, int64_t wo, int64_t stride,
                  int64_t pad, int64_t dil) {
  double acc = 0;
  for (int64_t c = 0; c < xs[1]; ++c)
    for (int64_t r = 0; r < ws[2]; ++r)
      for (int64_t s = 0; s < ws[3]; ++s) {
        int64_t ih = h * stride - pad + r * dil, iw = wo * stride - pad + s * dil;
        if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
        acc += double(x[((n * xs[1] + c) * xs[2] + ih) * xs[3] + iw]) *
               w[((o * ws[1] + c) * ws[2] + r) * ws[3] + s];
      }
  return acc;
}
}  // namespace

TEST_CASE("conv2d with stride, padding and dilation", "[ops][composite]") {
  Var x = randn({2, 2, 6, 5}, 21), w = randn({3, 2, 3, 3}, 22), w2 = randn({3, 2, 2, 2}, 23);
  struct ConvCase {
    Var w;
    int64_t stride, padding, dilation;
  };
  std::vector<ConvCase> configs = {{w, 1, 0, 1}, {w, 2, 1, 1}, {w, 1, 2, 2}, {w2, 2, 0, 1}};
  std::vector<Var> outs;
  for (const ConvCase& c : configs) outs.push_back(conv2d(x, c.w, c.stride, c.padding, c.dilation));
  CHECK(outs[0].shape() == Shape{2, 3, 4, 3});
  CHECK(outs[1].shape() == Shape{2, 3, 3, 3});
  CHECK(outs[2].shape() == Shape{2, 3, 6, 5});
  CHECK(outs[3].shape() == Shape{2, 3, 3, 2});
  check_against_reference(outs);
  // Plain loops, independent of the reference.
  std::vector<float> xv = values_of<float>(x);
  for (size_t k = 0; k < configs.size(); ++k) {
    INFO("config " << k);
    const ConvCase& c = configs[k];
    std::vector<float> wv = values_of<float>(c.w), ov = values_of<float>(outs[k]);
    const Shape& os = outs[k].shape();
    for (int64_t flat : {int64_t(0), int64_t(ov.size() / 2), int64_t(ov.size() - 1)}) {
      int64_t wo = flat % os[3], h = flat / os[3] % os[2], o = flat / os[3] / os[2] % os[1],
              n = flat / os[3] / os[2] / os[1];
      CHECK(ov[size_t(flat)] == Approx(naive_conv(xv, x.shape(), wv, c.w.shape(), n, o, h, wo,
                                                  c.stride, c.padding, c.dilation))
                                    .margin(1e-5));
    }
  }
}

// Rows of 16 output columns and more strip-mine the pooling window (codegen/map_schedule.h
// kMinWindowStripColumns): a vector loop over the strip's outputs per window step, the outputs
// whose reads pass the bounds tests found as an interval, the padding's outputs under the
// tests; narrower rows run the plain nest. Padding of 1 and 2, strides 1 and 2, integers (a 5x5
// window), a NaN that must win its window, an average (a sum window), relu inside the window, a
// sum whose padding is not its identity.
TEST_CASE("pooling over wide rows strip-mines the window and matches the reference",
          "[ops][composite]") {
  Var x = randn({2, 3, 9, 37}, 61);
  std::vector<float> xv = values_of<float>(x);
  xv[size_t(1 * 9 * 37 + 4 * 37 + 20)] = std::numeric_limits<float>::quiet_NaN();
  Var xn = array(xv, {2, 3, 9, 37});
  Var xi = cast(floor(x * 10.0), DType::Int32) - 1000;
  const Var wide = max_pool2d(relu(xn), 2, 2), padded = max_pool2d(xn - 100.0, 3, 2, 1);
  const Var dense = max_pool2d(xi, 5, 1, 2), average = avg_pool2d(x, 3, 1, 1);
  const Var narrow = max_pool2d(randn({2, 3, 8, 8}, 62), 2, 2);
  // A window whose reads past the row are 5, not the sum's identity: each padded step counts.
  const Var shifted = sum(reindex(x, {2, 3, 9, 19, 3}, {"i0", "i1", "i2", "i3*2+i4-1"}, 5.0), {4});
  for (const Var& y : {wide, padded, dense, average, shifted}) {
    const std::vector<KernelInfo> k = plan({y}, Device::CPU);
    REQUIRE(k.size() == 1);
    CHECK(k[0].source.find("i64 mj_lo = 0, mj_hi = jn;") != std::string::npos);
  }
  check_against_reference({wide, padded, dense, average, narrow, shifted});
  // The NaN (channel 1 of image 0, row 4, column 20) wins its one 3x3 stride-2 window.
  const std::vector<float> pv = values_of<float>(padded);
  CHECK(std::isnan(pv[size_t(1 * 5 * 19 + 2 * 19 + 10)]));
  CHECK(!std::isnan(pv[size_t(1 * 5 * 19 + 2 * 19 + 11)]));
}

// Rows narrower than 16 outputs, in the version without bounds tests, run every loop after the
// first as one strip through tables of their variables (CpuSchedule::flat_nest): the window's
// steps outside, the strip's lanes inside, reads gathered with int indexes, the outputs stored
// contiguously. Where the loops after the first hold more than a strip (2048 outputs) or a
// window reads padding, the plain nest runs. NaN, integers, a sum window, relu inside, a
// 3x3 stride-2 window over odd rows, 2-output rows, a channel count that makes the strip long.
TEST_CASE("pooling over narrow rows runs as one flat strip and matches the reference",
          "[ops][composite]") {
  Var x = randn({3, 5, 8, 8}, 63);
  std::vector<float> xv = values_of<float>(x);
  xv[size_t(2 * 64 + 3 * 8 + 5)] = std::numeric_limits<float>::quiet_NaN();
  Var xn = array(xv, {3, 5, 8, 8});
  Var xi = cast(floor(x * 10.0), DType::Int32) - 1000;
  Var tall = randn({1, 2, 1200, 8}, 64);  // 2 x 600 x 4 outputs per image: more than a strip
  const Var plain = max_pool2d(xn, 2, 2), relu_max = max_pool2d(relu(xn), 2, 2);
  const Var ints = max_pool2d(xi, 2, 2);
  const Var odd = max_pool2d(randn({2, 4, 9, 7}, 65), 3, 2), tiny = max_pool2d(x, 4, 4);
  const Var average = avg_pool2d(x, 2, 2), padded = max_pool2d(x, 3, 2, 1);
  const Var many = max_pool2d(randn({2, 96, 8, 8}, 66), 2, 2), long_rows = max_pool2d(tall, 2, 2);
  for (const Var& y : {plain, relu_max, ints, odd, tiny, average, padded, long_rows}) {
    const std::vector<KernelInfo> k = plan({y}, Device::CPU);
    REQUIRE(k.size() == 1);
    CHECK(k[0].source.find("int mj_fl") != std::string::npos);
  }
  check_against_reference({plain, relu_max, ints, odd, tiny, average, padded, many, long_rows});
  // The NaN (image 0, channel 2, row 3, column 5) wins its 2x2 window (row 1, column 2).
  const std::vector<float> pv = values_of<float>(plain);
  CHECK(std::isnan(pv[size_t(2 * 16 + 1 * 4 + 2)]));
  CHECK(!std::isnan(pv[size_t(2 * 16 + 1 * 4 + 3)]));
}

// A reindex's bounds tests of compound indexes (a window's i*2+k, the gradient's i/2 and i%2)
// that hold for every element are tested once per launch, from the index's range over the loops
// (codegen/extra_bounds.h); the kernel then has a version without them, and the general one
// runs where they fail. Both versions are the same kernel: keys do not depend on shapes.
TEST_CASE("reindex bounds tests that hold over the whole launch are tested once",
          "[ops][composite]") {
  Var x = randn({3, 4, 8, 9}, 71);
  const Var pooled = max_pool2d(relu(x), 2, 2);
  Var w = randn(pooled.shape(), 72);
  const Var dx = grad(sum(pooled * w), {x})[0];
  for (bool gradient : {false, true}) {
    const std::vector<KernelInfo> k = plan({gradient ? dx : pooled}, Device::CPU);
    bool versioned = false, narrowed = false;
    for (const KernelInfo& ki : k) {
      versioned |= ki.source.find("reindex guards without bounds tests") != std::string::npos;
      // The gradient reads the pooled values at i/2: in that version an int index, a gather
      // g++ vectorises (the forward's flat strip indexes in int too, by products, not halves).
      narrowed |= std::regex_search(ki.source, std::regex(R"(\(i64\)\(\(int\)i\d+ / 2\))"));
    }
    CHECK(versioned);
    CHECK(narrowed == gradient);
  }
  check_against_reference({pooled, dx});
  // The same kernel in bounds (10 reads of 20) and past the end (12: the last two are 7.5), and
  // ranges from negative coefficients, divisions and remainders, against the reference.
  Var v = randn({20}, 73);
  const char* exprs[] = {"i0*2", "i0*2+1", "19-i0*2", "(i0*5+3)/3", "i0/2*3+i0%2", "(i0-3)%4+3"};
  for (const char* e : exprs)
    for (int64_t n : {10, 11, 12}) {
      INFO(e << " over " << n);
      const Var r = reindex(v, {n}, {e}, 7.5);
      check_against_reference(r);
      const std::vector<float> got = values_of<float>(r), src = values_of<float>(v);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = ix_eval(*parse_index_expr(e, 1, false, "t"), &i);
        CHECK(got[size_t(i)] == (j >= 0 && j < 20 ? src[size_t(j)] : 7.5f));
      }
    }
  const KernelInfo in = plan({reindex(v, {10}, {"i0*2+1"}, 7.5)}, Device::CPU)[0];
  const KernelInfo past = plan({reindex(v, {12}, {"i0*2+1"}, 7.5)}, Device::CPU)[0];
  CHECK(in.key == past.key);
  CHECK(in.source.find("reindex guards without bounds tests") != std::string::npos);
}

// A reduction over trailing axes it reads plainly (a bias gradient: dy summed over n, h, w) runs
// its two innermost loops as one over h*w (codegen/loop_coalescing.h): the load's index becomes
// (0, hw), the same address. Not where the inner loop covers part of the last axis (a slice) or
// may (its extent another shape parameter), nor over axes that are not adjacent; values against
// the reference either way.
TEST_CASE("a reduction over trailing axes read plainly runs them as one loop", "[ops][composite]") {
  Var x = randn({5, 3, 7, 9}, 81);
  const Var bias_grad = sum(x, {0, 2, 3});
  const Var spaced = sum(x, {1, 3});
  const Var sliced = sum(slice(x, 3, 0, 5), {0, 2, 3});
  // An element-wise body's loops have the body's own shape parameters, which equal the array's
  // only when the kernel runs: not coalesced (keys do not depend on shapes, so the pass
  // cannot know).
  const Var fused = sum(x * 2.0 + 1.0, {2, 3});
  auto coalesced = [](const Var& y) {
    const std::vector<KernelInfo> k = plan({y}, Device::CPU);
    REQUIRE(k.size() == 1);
    return k[0].source.find("(0LL) * in0_s2") != std::string::npos;
  };
  CHECK(coalesced(bias_grad));
  CHECK_FALSE(coalesced(fused));
  CHECK_FALSE(coalesced(spaced));
  CHECK_FALSE(coalesced(sliced));
  check_against_reference({bias_grad, spaced, sliced, fused});
  // Plain loops, independent of the reference.
  const std::vector<float> xv = values_of<float>(x), bv = values_of<float>(bias_grad);
  for (int64_t c = 0; c < 3; ++c) {
    double want = 0;
    for (int64_t n = 0; n < 5; ++n)
      for (int64_t i = 0; i < 7 * 9; ++i) want += xv[size_t((n * 3 + c) * 63 + i)];
    CHECK(bv[size_t(c)] == Approx(want).epsilon(1e-5));
  }
}

TEST_CASE("max_pool2d with padding: padded cells never win", "[ops][composite]") {
  Var x = randn({1, 2, 5, 5}, 31);
  Var neg = x - 100.0;  // all negative: a padded 0 would win if padding read zeros
  Var xi = cast(floor(x * 10.0), DType::Int32) - 1000;
  Var p1 = max_pool2d(x, 2, 2), p2 = max_pool2d(neg, 3, 2, 1), p3 = max_pool2d(neg, 3, 1, 1);
  Var p4 = max_pool2d(xi, 2, 1, 1);
  CHECK(p1.shape() == Shape{1, 2, 2, 2});  // floor mode
  CHECK(p2.shape() == Shape{1, 2, 3, 3});
  CHECK(p3.shape() == Shape{1, 2, 5, 5});
  CHECK(p4.shape() == Shape{1, 2, 6, 6});
  check_against_reference({p1, p2, p3, p4});
  // Plain loops, independent of the reference.
  std::vector<float> nv = values_of<float>(neg), p2v = values_of<float>(p2);
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t w = 0; w < 3; ++w) {
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t s = 0; s < 3; ++s) {
            int64_t ih = h * 2 - 1 + r, iw = w * 2 - 1 + s;
            if (ih >= 0 && ih < 5 && iw >= 0 && iw < 5)
              best = std::max(best, nv[size_t((c * 5 + ih) * 5 + iw)]);
          }
        CHECK(p2v[size_t((c * 3 + h) * 3 + w)] == best);
      }
  for (int32_t v : values_of<int32_t>(p4)) CHECK(v < -900);
}

TEST_CASE("softmax over each axis", "[ops][composite]") {
  Var x = randn({2, 3, 4}, 41) * 3.0;
  Var xd = randn({3, 5}, 42, DType::Float64);
  std::vector<Var> outs = {softmax(x, 0), softmax(x, 1), softmax(x, 2), softmax(x, -2),
                           softmax(xd, 1)};
  check_against_reference(outs);
  // Each slice along the axis sums to 1 (summed here: a sum kernel would cost a compile).
  const int64_t strides[] = {12, 4, 1}, extents[] = {2, 3, 4};
  for (int64_t axis = 0; axis < 3; ++axis) {
    INFO("axis " << axis);
    std::vector<float> v = values_of<float>(outs[size_t(axis)]);
    for (int64_t start = 0; start < 24; ++start) {
      if (start / strides[axis] % extents[axis] != 0) continue;  // first of its slice only
      double total = 0;
      for (int64_t k = 0; k < extents[axis]; ++k) total += v[size_t(start + k * strides[axis])];
      CHECK(total == Approx(1.0).epsilon(1e-5));
    }
  }
}

// ---------------------------------------------------------------- creating

TEST_CASE("arange, full, zeros, ones", "[ops][create]") {
  Var a32 = arange(5), a64 = arange(4, DType::Int64), af = arange(6, DType::Float32);
  Var f = full({2, 3}, 2.5), fi = full({2}, 2.5, DType::Int32), z = zeros({3}, DType::Bool);
  Var o = ones({2, 2}, DType::Int64), f0 = full({}, -1.5, DType::Float64);
  check_against_reference({a32, a64, af, arange(0), f, fi, z, o, f0, a32 * 2.0 + 3.0});
  CHECK(values_of<int32_t>(a32) == std::vector<int32_t>{0, 1, 2, 3, 4});
  CHECK(values_of<int64_t>(a64) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(values_of<float>(af) == std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK(values_of<float>(f) == std::vector<float>(6, 2.5f));
  CHECK(values_of<int32_t>(fi) == std::vector<int32_t>{2, 2});
  CHECK(values_of<bool>(z) == std::vector<bool>{false, false, false});
  CHECK(values_of<int64_t>(o) == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(f0.item<double>() == -1.5);
}

TEST_CASE("rand and randn: range, determinism per seed", "[ops][create]") {
  Var u = rand({1000}, 7), u_again = rand({1000}, 7), u_other = rand({1000}, 8);
  Var g = randn({1000}, 7), ud = rand({500}, 7, DType::Float64);
  std::vector<float> uv = values_of<float>(u);
  for (float v : uv) {
    CHECK(v >= 0.0f);
    CHECK(v < 1.0f);
  }
  for (double v : values_of<double>(ud)) CHECK((v >= 0.0 && v < 1.0));
  CHECK(uv == values_of<float>(u_again));
  CHECK(uv != values_of<float>(u_other));
  CHECK(values_of<float>(g) == values_of<float>(randn({1000}, 7)));
  // Loose moments: a broken generator (constant, uniform instead of normal) fails these.
  double mean_u = 0, mean_g = 0, var_g = 0;
  std::vector<float> gv = values_of<float>(g);
  for (size_t k = 0; k < 1000; ++k) {
    mean_u += uv[k] / 1000.0;
    mean_g += gv[k] / 1000.0;
  }
  for (float v : gv) var_g += (v - mean_g) * (v - mean_g) / 1000.0;
  CHECK(std::fabs(mean_u - 0.5) < 0.05);
  CHECK(std::fabs(mean_g) < 0.15);
  CHECK(std::fabs(var_g - 1.0) < 0.2);
  // Random leaves feed kernels like any array.
  check_against_reference({sum(u * g), max(ud)});
}

// ---------------------------------------------------------------- constants, large shapes

TEST_CASE("ops on constants (folded before code generation) agree with the reference",
          "[ops][folding]") {
  // full() and scalar operands are folded at graph level: results must not depend on that.
  // Each line also runs on an array, which goes through a kernel instead.
  auto i32 = [](double v) { return full({2}, v, DType::Int32); };
  auto a32 = [](int32_t v) { return array<int32_t>({v, v}, {2}); };
  auto i64 = [](double v) { return full({2}, v, DType::Int64); };
  auto a64 = [](int64_t v) { return array<int64_t>({v, v}, {2}); };
  const int32_t lo32 = std::numeric_limits<int32_t>::lowest();
  const int32_t hi32 = std::numeric_limits<int32_t>::max();
  std::vector<Var> folded = {
      cast(full({2}, 2.5, DType::Bool), DType::Int32),  // the Bool scalar is true: 1
      i64(9007199254740992.0) + 1.0,                    // 2^53 + 1 is exact in int64
      i64(9007199254740992.0) * 3.0 - 1.0,
      i32(hi32) + 1.0,                     // integer add wraps
      i32(lo32) / -1.0,                    // lowest / -1 wraps
      -i32(lo32),                          // neg wraps
      pow(i32(10), 10.0),                  // out of range: 0
      full({2}, 0.1) == 0.1000000001,      // the same float32
      full({2}, 16777217.0) - 16777216.0,  // 2^24 + 1 is 2^24 in float32: 0
      full({2}, 2.5, DType::Int32) * 2.0,  // the scalar is 2 in int32: 4
  };
  std::vector<Var> kernels = {
      cast(array<bool>({true, true}, {2}), DType::Int32),
      a64(9007199254740992LL) + 1.0,
      a64(9007199254740992LL) * 3.0 - 1.0,
      a32(hi32) + 1.0,
      a32(lo32) / -1.0,
      -a32(lo32),
      pow(a32(10), 10.0),
      array<float>({0.1f, 0.1f}, {2}) == 0.1000000001,
      array<float>({16777217.0f, 16777217.0f}, {2}) - 16777216.0,
      a32(2) * 2.0,
  };
  INFO(
      "0: cast(Bool 2.5) 1: 2^53+1 2: 3*2^53-1 3: int32 max+1 4: lowest/-1 5: -lowest "
      "6: pow(10,10) int32 7: 0.1f == 0.1000000001 8: float32 (2^24+1) - 2^24 "
      "9: int32 2.5 * 2");
  check_against_reference(folded);
  check_against_reference(kernels);
  CHECK(values_of<int64_t>(folded[1])[0] == 9007199254740993LL);
  CHECK(values_of<int64_t>(kernels[1])[0] == 9007199254740993LL);
  CHECK(values_of<float>(folded[8])[0] == 0.0f);
  CHECK(values_of<int32_t>(folded[9])[0] == 4);
}

TEST_CASE("integer arithmetic wraps in kernels, never overflows (no undefined behaviour)",
          "[ops][wrap]") {
  // UBSan found `(int)(v0 + v1)` overflowing in a kernel: generated code computes Int32/Int64
  // + - *, negation, abs, sums and products in the unsigned type (docs/design.md §3), as the
  // reference and constant folding do. `make test-asan` runs this with UBSan in the kernels.
  const int32_t lo32 = std::numeric_limits<int32_t>::lowest();
  const int32_t hi32 = std::numeric_limits<int32_t>::max();
  const int64_t lo64 = std::numeric_limits<int64_t>::lowest();
  const int64_t hi64 = std::numeric_limits<int64_t>::max();
  Var a = array<int32_t>({hi32, lo32, hi32, -7}, {4});
  Var b = array<int32_t>({1, -1, hi32, lo32}, {4});
  Var c = array<int64_t>({hi64, lo64, hi64, -7}, {4});
  Var d = array<int64_t>({1, -1, hi64, lo64}, {4});
  std::vector<Var> wrapped = {a + b,
                              a - b,
                              a * b,
                              -a,
                              abs(b),
                              sum(a),
                              prod(a),
                              c + d,
                              c - d,
                              c * d,
                              -c,
                              abs(d),
                              sum(c),
                              prod(c),
                              sum(reshape(a, {2, 2}), {1}),
                              prod(reshape(c, {2, 2}), {0})};
  check_against_reference(wrapped);
  CHECK(values_of<int32_t>(wrapped[0]) == std::vector<int32_t>{lo32, hi32, -2, hi32 - 6});
  CHECK(values_of<int32_t>(wrapped[3])[1] == lo32);  // -lowest is lowest
  CHECK(values_of<int64_t>(wrapped[7])[0] == lo64);
  CHECK(values_of<int64_t>(wrapped[11])[3] == lo64);  // abs(lowest) is lowest
  // Index arithmetic wraps too (kernels are compiled with -fwrapv): (i0 * 2^62) * 4 is i0 * 2^64,
  // which wraps to 0, so out[i] = x[i]; the reference evaluates index expressions the same way.
  Var x = array<float>({10, 11, 12, 13}, {4});
  Var wrapped_index = reindex(x, {4}, {"(i0*4611686018427387904)*4 + i0"}, -1.0);
  check_against_reference(wrapped_index);
  CHECK(values_of<float>(wrapped_index) == std::vector<float>{10, 11, 12, 13});
  // The source says so: no signed + - * on integer values.
  std::string source;
  for (const auto& k : plan({a + b})) source += k.source;
  CHECK_THAT(source, Catch::Matchers::Contains("(unsigned)"));
}

TEST_CASE("large shapes take the OpenMP parallel path and reuse the kernels above",
          "[ops][parallel]") {
  // Kernels run multi-threaded above 32768 loop iterations. Keys do not depend on shapes,
  // so these reuse the kernels compiled for the small cases (same ops, dtypes and ranks).
  Var a = rand({50000}, 61), b = rand({50000}, 62) + 0.5;
  eval({b});  // a leaf, like the operands of the small case
  Var x = randn({40, 30, 50}, 63);
  Var img = randn({2, 2, 34, 34}, 64), w = randn({3, 2, 3, 3}, 65);
  Var m = rand({64, 64}, 66), n = rand({64, 64}, 67);
  std::vector<double> pa, pb;
  for (int k = 0; k < 500; ++k) {
    pa.insert(pa.end(), kPairA.begin(), kPairA.end());
    pb.insert(pb.end(), kPairB.begin(), kPairB.end());
  }
  check_against_reference(
      {a + b, a * b, a / b, maximum(a, b), sum(x, {1}), max(x, {1}), mean(x, {1}),
       reduce(x, ReduceOp::Add), matmul(m, n), conv2d(img, w), softmax(x * 3.0, 1),
       sum(transpose(x, {2, 0, 1}), {2}),
       binary_table(make_array(DType::Int32, pa), make_array(DType::Int32, pb))});
}

// ---------------------------------------------------------------- O0

TEST_CASE("the unfused baseline (METAJIT_OPT_LEVEL=0) gives the reference results too",
          "[ops][O0]") {
  metajit_test::ScopedEnv o0("METAJIT_OPT_LEVEL", "0");
  REQUIRE(config().opt_level == 0);
  Var a = make_array(DType::Float32, kPairA), b = make_array(DType::Int32, kPairB);
  Var e = exp(a * 0.1) * 2.0;         // several element-wise ops into a reduction
  CHECK(plan({sum(e)}).size() >= 3);  // unfused: the setting took effect
  Var x = randn({2, 3, 4}, 51), col = rand({3, 1}, 52), row = rand({1, 4}, 53);
  Var img = randn({1, 2, 5, 5}, 54), w = randn({2, 2, 3, 3}, 55);
  Var y = make_array(DType::Int32, {1, 2, 3, 4, 5, 6}, {6});
  check_against_reference({a / b, maximum(a, b), sum(e), col + row, where(col > 0.5, col, row),
                           sum(x, {0, 2}), mean(x, {-1}, true), max(transpose(x, {2, 1, 0}), {0}),
                           reindex(x, {3, 3}, {"i0-1", "i1", "i0+i1"}, -1, {"i0==2 && i1==0"}),
                           reindex_reduce(y, ReduceOp::Add, {2}, {"i0%2"}),
                           matmul(x, rand({4, 2}, 56)), conv2d(img, w, 2, 1),
                           max_pool2d(img - 10.0, 3, 2, 1), softmax(x, 1),
                           cast(x > 0.0, DType::Int64) + arange(4, DType::Int64)});
}
