// The composites models need (include/metajit/composite.h; shared/api.md "Layers, weights and
// the ops models need"): concat, stack, split, slice, pad, cumsum, var, layer_norm, avg_pool2d,
// grouped conv2d, conv_transpose2d, and the negative-index rule of gather, index_select,
// embedding and one_hot.
//
//   1. values against naive loops written here from the definitions (torch's and numpy's), with
//      the edges: Python slice bounds, crops, signed zeros and NaN through concat, empty pieces,
//      dtype promotion, integer inputs;
//   2. gradients against central finite differences (support/gradient_check.h);
//   3. bad arguments: a typed Error naming the op, the shapes and what is valid.
//
// Compile time matters (each distinct kernel is a g++ run): every case evaluates its Vars
// together, in float64 where the dtype is not the point.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "support/distinct_values.h"
#include "support/exceptions.h"
#include "support/gradient_check.h"
#include "support/reference_compare.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::check_gradients;
using metajit_test::In;
using metajit_test::message_of;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> values_of(const Var& v) {
  return metajit_test_detail::eval_values_as_double(v);
}

// `n` distinct float64 values in [-2, 2] (seeded).
std::vector<double> data(int64_t n, uint64_t seed) {
  return metajit_test::distinct(size_t(n), -2, 2, seed);
}

Var f64(const std::vector<double>& v, Shape shape) {
  return array(v, std::move(shape));
}

// Row-major offset of `idx` in `shape`.
int64_t offset(const Shape& shape, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t k = 0; k < shape.size(); ++k) off = off * shape[k] + idx[k];
  return off;
}

// Calls f(idx) for every index of `shape`, in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const std::vector<int64_t>&)>& f) {
  if (numel_of(shape) == 0) return;
  std::vector<int64_t> idx(shape.size(), 0);
  for (;;) {
    f(idx);
    size_t k = shape.size();
    while (k > 0 && ++idx[k - 1] == shape[k - 1]) idx[--k] = 0;
    if (k == 0) return;
  }
}

// Exact comparison where the values are copies (NaN equals NaN, signed zeros compared).
void check_same_bits(const std::vector<double>& got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("element " << k << ": got " << got[k] << ", expected " << expected[k]);
    if (std::isnan(expected[k])) {
      CHECK(std::isnan(got[k]));
    } else {
      CHECK(got[k] == expected[k]);
      CHECK(std::signbit(got[k]) == std::signbit(expected[k]));
    }
  }
}

void check_close(const std::vector<double>& got, const std::vector<double>& expected,
                 double tol = 1e-12) {
  REQUIRE(got.size() == expected.size());
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("element " << k << ": got " << got[k] << ", expected " << expected[k]);
    if (std::isnan(expected[k]) || std::isinf(expected[k]))
      CHECK((std::isnan(expected[k]) ? std::isnan(got[k]) : got[k] == expected[k]));
    else
      CHECK(std::fabs(got[k] - expected[k]) <= tol * (1 + std::fabs(expected[k])));
  }
}

}  // namespace

// ---------------------------------------------------------------- joining and cutting

TEST_CASE("concat and stack place each input at its offset, exactly", "[shaping]") {
  const std::vector<double> a = data(2 * 2 * 3, 1), b = data(2 * 1 * 3, 2), c = data(2 * 3 * 3, 3);
  std::vector<double> c_special = c;
  c_special[0] = -0.0;  // a copy keeps the sign of zero and NaN
  c_special[4] = kNaN;
  c_special[5] = -std::numeric_limits<double>::infinity();
  Var va = f64(a, {2, 2, 3}), vb = f64(b, {2, 1, 3}), vc = f64(c_special, {2, 3, 3});
  Var empty = zeros({2, 0, 3}, DType::Float64);
  Var joined = concat({va, vb, empty, vc}, -2);
  CHECK(joined.shape() == Shape{2, 6, 3});
  std::vector<double> expected;
  for (int64_t i = 0; i < 2; ++i) {
    expected.insert(expected.end(), a.begin() + i * 6, a.begin() + (i + 1) * 6);
    expected.insert(expected.end(), b.begin() + i * 3, b.begin() + (i + 1) * 3);
    expected.insert(expected.end(), c_special.begin() + i * 9, c_special.begin() + (i + 1) * 9);
  }
  // Along the first and the last axis too; dtypes promote (Int32 with Float64); Bool stays Bool.
  const std::vector<double> a4(a.begin(), a.begin() + 4), b4(b.begin(), b.begin() + 4),
      c12(c.begin(), c.begin() + 12);
  Var ints = array(std::vector<int32_t>{7, -8, 9}, {1, 3});
  Var rows = concat({f64(a, {4, 3}), ints}, 0);
  Var cols = concat({f64(a, {4, 3}), f64(b4, {4, 1})}, 1);
  Var flags =
      concat({array(std::vector<bool>{true, false}, {2}), array(std::vector<bool>{false}, {1})}, 0);
  Var s0 = stack({f64(a, {2, 6}), f64(c12, {2, 6})}, 0);
  Var s_last = stack({f64(a4, {2, 2}), f64(b4, {2, 2})}, -1);
  eval({joined, rows, cols, flags, s0, s_last});
  check_same_bits(values_of(joined), expected);
  CHECK(rows.dtype() == DType::Float64);
  CHECK(rows.shape() == Shape{5, 3});
  std::vector<double> rows_expected(a.begin(), a.end());
  rows_expected.insert(rows_expected.end(), {7, -8, 9});
  check_same_bits(values_of(rows), rows_expected);
  std::vector<double> cols_expected;
  for (int64_t i = 0; i < 4; ++i) {
    cols_expected.insert(cols_expected.end(), a.begin() + i * 3, a.begin() + (i + 1) * 3);
    cols_expected.push_back(b4[size_t(i)]);
  }
  check_same_bits(values_of(cols), cols_expected);
  CHECK(flags.dtype() == DType::Bool);
  CHECK(flags.to_vector<bool>() == std::vector<bool>{true, false, false});
  CHECK(s0.shape() == Shape{2, 2, 6});
  std::vector<double> s0_expected(a.begin(), a.end());
  s0_expected.insert(s0_expected.end(), c12.begin(), c12.end());
  check_same_bits(values_of(s0), s0_expected);
  CHECK(s_last.shape() == Shape{2, 2, 2});
  check_same_bits(values_of(s_last), {a[0], b[0], a[1], b[1], a[2], b[2], a[3], b[3]});
}

TEST_CASE("slice follows Python's bounds, split cuts along an axis", "[shaping]") {
  const std::vector<double> x = data(3 * 7, 4);
  Var vx = f64(x, {3, 7});
  struct Case {
    int64_t start, stop, step;
  };
  const std::vector<Case> cases = {{1, 5, 1}, {-3, 7, 1}, {0, 100, 2}, {-100, 3, 1},
                                   {5, 2, 1}, {6, -1, 1}, {-1, 7, 3},  {2, -2, 2},
                                   {7, 9, 1}, {0, 7, 7},  {-7, -5, 1}};
  std::vector<Var> outs;
  for (const Case& c : cases) outs.push_back(slice(vx, -1, c.start, c.stop, c.step));
  Var rows = slice(vx, 0, 1, 3);
  std::vector<Var> parts = split(vx, {2, 0, 5}, 1);
  std::vector<Var> all = outs;
  all.push_back(rows);
  all.insert(all.end(), parts.begin(), parts.end());
  eval(all);
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    INFO("x[:, " << c.start << ":" << c.stop << ":" << c.step << "]");
    // Python's slice.indices for a positive step.
    auto clamp = [](int64_t b) {
      if (b < 0) b = std::max<int64_t>(b + 7, 0);
      return std::min<int64_t>(b, 7);
    };
    std::vector<int64_t> picked;
    for (int64_t j = clamp(c.start); j < clamp(c.stop); j += c.step) picked.push_back(j);
    CHECK(outs[k].shape() == Shape{3, int64_t(picked.size())});
    std::vector<double> expected;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j : picked) expected.push_back(x[size_t(i * 7 + j)]);
    check_same_bits(values_of(outs[k]), expected);
  }
  check_same_bits(values_of(rows), std::vector<double>(x.begin() + 7, x.end()));
  REQUIRE(parts.size() == 3);
  CHECK(parts[1].shape() == Shape{3, 0});
  CHECK(parts[2].shape() == Shape{3, 5});
  std::vector<double> first, last;
  for (int64_t i = 0; i < 3; ++i) {
    first.insert(first.end(), x.begin() + i * 7, x.begin() + i * 7 + 2);
    last.insert(last.end(), x.begin() + i * 7 + 2, x.begin() + i * 7 + 7);
  }
  check_same_bits(values_of(parts[0]), first);
  check_same_bits(values_of(parts[2]), last);
}

TEST_CASE("pad fills with a value and crops where an entry is negative", "[shaping]") {
  const std::vector<double> x = data(2 * 3 * 4, 5);
  Var vx = f64(x, {2, 3, 4});
  Var padded = pad(vx, {0, 2, -1}, {1, -1, 3}, -7.5);
  Var ints = pad(array(std::vector<int64_t>{1, 2, 3}, {3}), {2}, {1}, 9);
  eval({padded, ints});
  const Shape out = {3, 4, 6};
  CHECK(padded.shape() == out);
  std::vector<double> expected;
  for_each_index(out, [&](const std::vector<int64_t>& i) {
    const int64_t a = i[0], b = i[1] - 2, c = i[2] + 1;
    const bool inside = a < 2 && b >= 0 && b < 3 && c < 4;
    expected.push_back(inside ? x[size_t(offset({2, 3, 4}, {a, b, c}))] : -7.5);
  });
  check_same_bits(values_of(padded), expected);
  CHECK(ints.dtype() == DType::Int64);
  CHECK(ints.to_vector<int64_t>() == std::vector<int64_t>{9, 9, 1, 2, 3, 9});
}

// ---------------------------------------------------------------- statistics

TEST_CASE("cumsum, var and layer_norm match their definitions", "[statistics]") {
  const Shape shape = {2, 5, 3};
  const std::vector<double> x = data(30, 6), g = data(15, 7), b = data(15, 8);
  Var vx = f64(x, shape);
  Var cs = cumsum(vx, 1);
  Var cs_int = cumsum(array(std::vector<int32_t>{2147483647, 1, -5, 3}, {4}), 0);
  Var v_all = var(vx);
  Var v_01 = var(vx, {0, -1}, true, 0);
  Var v_one = var(f64({3.5}, {1}));  // N - correction = 0: 0/0
  Var v_int = var(array(std::vector<int32_t>{1, 2, 3, 4}, {4}), {}, false, 1);
  Var ln = layer_norm(vx, 2, f64(g, {5, 3}), f64(b, {5, 3}), 1e-5);
  Var ln_plain = layer_norm(vx, 1);
  eval({cs, cs_int, v_all, v_01, v_one, v_int, ln, ln_plain});

  std::vector<double> cs_expected(30);
  for_each_index(shape, [&](const std::vector<int64_t>& i) {
    double s = 0;
    for (int64_t j = 0; j <= i[1]; ++j) s += x[size_t(offset(shape, {i[0], j, i[2]}))];
    cs_expected[size_t(offset(shape, i))] = s;
  });
  check_close(values_of(cs), cs_expected);
  CHECK(cs_int.dtype() == DType::Int64);  // no int32 wrap-around
  CHECK(cs_int.to_vector<int64_t>() ==
        std::vector<int64_t>{2147483647, 2147483648LL, 2147483643LL, 2147483646LL});

  auto variance = [](const std::vector<double>& v, double correction) {
    double m = 0, s = 0;
    for (double e : v) m += e;
    m /= double(v.size());
    for (double e : v) s += (e - m) * (e - m);
    return s / std::max(0.0, double(v.size()) - correction);
  };
  check_close(values_of(v_all), {variance(x, 1)});
  CHECK(v_01.shape() == Shape{1, 5, 1});
  std::vector<double> v_01_expected;
  for (int64_t j = 0; j < 5; ++j) {
    std::vector<double> picked;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t k = 0; k < 3; ++k) picked.push_back(x[size_t(offset(shape, {i, j, k}))]);
    v_01_expected.push_back(variance(picked, 0));
  }
  check_close(values_of(v_01), v_01_expected);
  CHECK(std::isnan(values_of(v_one).at(0)));
  CHECK(v_int.dtype() == DType::Float32);
  check_close(values_of(v_int), {5.0 / 3.0}, 1e-6);

  auto normalised = [&](int64_t row, int64_t width, int64_t k) {
    std::vector<double> r(x.begin() + row * width, x.begin() + (row + 1) * width);
    double m = 0;
    for (double e : r) m += e;
    m /= double(width);
    return (r[size_t(k)] - m) / std::sqrt(variance(r, 0) + 1e-5);
  };
  std::vector<double> ln_expected, plain_expected;
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t k = 0; k < 15; ++k)
      ln_expected.push_back(normalised(row, 15, k) * g[size_t(k)] + b[size_t(k)]);
  for (int64_t row = 0; row < 10; ++row)
    for (int64_t k = 0; k < 3; ++k) plain_expected.push_back(normalised(row, 3, k));
  check_close(values_of(ln), ln_expected, 1e-10);
  check_close(values_of(ln_plain), plain_expected, 1e-10);
}

// ---------------------------------------------------------------- convolution and pooling

namespace {

// Naive grouped convolution, NCHW x OIHW.
std::vector<double> naive_conv2d(const std::vector<double>& x, const Shape& xs,
                                 const std::vector<double>& w, const Shape& ws, int64_t stride,
                                 int64_t pad, int64_t dil, int64_t groups, Shape& out) {
  const int64_t N = xs[0], H = xs[2], W = xs[3], O = ws[0], Cg = ws[1], KH = ws[2], KW = ws[3];
  const int64_t OH = (H + 2 * pad - dil * (KH - 1) - 1) / stride + 1;
  const int64_t OW = (W + 2 * pad - dil * (KW - 1) - 1) / stride + 1;
  out = {N, O, OH, OW};
  std::vector<double> y;
  for_each_index(out, [&](const std::vector<int64_t>& i) {
    const int64_t group = i[1] / (O / groups);
    double s = 0;
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t r = 0; r < KH; ++r)
        for (int64_t q = 0; q < KW; ++q) {
          const int64_t h = i[2] * stride - pad + r * dil, v = i[3] * stride - pad + q * dil;
          if (h < 0 || h >= H || v < 0 || v >= W) continue;
          s += x[size_t(offset(xs, {i[0], group * Cg + c, h, v}))] *
               w[size_t(offset(ws, {i[1], c, r, q}))];
        }
    y.push_back(s);
  });
  return y;
}

// Naive transposed convolution as the scatter it is: every input element adds its products.
std::vector<double> naive_conv_transpose2d(const std::vector<double>& x, const Shape& xs,
                                           const std::vector<double>& w, const Shape& ws,
                                           int64_t stride, int64_t pad, int64_t out_pad,
                                           Shape& out) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], O = ws[1], KH = ws[2], KW = ws[3];
  out = {N, O, (H - 1) * stride - 2 * pad + KH + out_pad,
         (W - 1) * stride - 2 * pad + KW + out_pad};
  std::vector<double> y(size_t(numel_of(out)), 0.0);
  for_each_index({N, C, H, W}, [&](const std::vector<int64_t>& i) {
    for (int64_t o = 0; o < O; ++o)
      for (int64_t r = 0; r < KH; ++r)
        for (int64_t q = 0; q < KW; ++q) {
          const int64_t h = i[2] * stride - pad + r, v = i[3] * stride - pad + q;
          if (h < 0 || h >= out[2] || v < 0 || v >= out[3]) continue;
          y[size_t(offset(out, {i[0], o, h, v}))] +=
              x[size_t(offset(xs, i))] * w[size_t(offset(ws, {i[1], o, r, q}))];
        }
  });
  return y;
}

}  // namespace

TEST_CASE("grouped and depthwise conv2d, conv_transpose2d and avg_pool2d match naive loops",
          "[convolution]") {
  const Shape xs = {2, 4, 6, 5};
  const std::vector<double> x = data(numel_of(xs), 9);
  const Shape w2s = {6, 2, 3, 3}, wds = {8, 1, 3, 2}, wts = {4, 3, 3, 2};
  const std::vector<double> w2 = data(numel_of(w2s), 10), wd = data(numel_of(wds), 11),
                            wt = data(numel_of(wts), 12);
  Var vx = f64(x, xs);
  Var grouped = conv2d(vx, f64(w2, w2s), 1, 1, 1, 2);
  Var depthwise = conv2d(vx, f64(wd, wds), 2, 1, 2, 4);  // channel multiplier 2
  Var transposed = conv_transpose2d(vx, f64(wt, wts), 2, 1, 1);
  Var transposed_plain = conv_transpose2d(vx, f64(wt, wts));
  Var pooled = avg_pool2d(vx, 3, 2, 1);
  Var pooled_int = avg_pool2d(array(std::vector<int32_t>{1, 2, 3, 4}, {1, 1, 2, 2}), 2, 2);
  eval({grouped, depthwise, transposed, transposed_plain, pooled, pooled_int});

  Shape out;
  std::vector<double> expected = naive_conv2d(x, xs, w2, w2s, 1, 1, 1, 2, out);
  CHECK(grouped.shape() == out);
  check_close(values_of(grouped), expected);
  expected = naive_conv2d(x, xs, wd, wds, 2, 1, 2, 4, out);
  CHECK(depthwise.shape() == out);
  check_close(values_of(depthwise), expected);
  expected = naive_conv_transpose2d(x, xs, wt, wts, 2, 1, 1, out);
  CHECK(transposed.shape() == out);
  check_close(values_of(transposed), expected);
  expected = naive_conv_transpose2d(x, xs, wt, wts, 1, 0, 0, out);
  CHECK(transposed_plain.shape() == out);
  check_close(values_of(transposed_plain), expected);

  // count_include_pad: every window divides by 9.
  const Shape ps = {2, 4, 3, 3};
  CHECK(pooled.shape() == ps);
  std::vector<double> pool_expected;
  for_each_index(ps, [&](const std::vector<int64_t>& i) {
    double s = 0;
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t q = 0; q < 3; ++q) {
        const int64_t h = i[2] * 2 - 1 + r, v = i[3] * 2 - 1 + q;
        if (h >= 0 && h < 6 && v >= 0 && v < 5) s += x[size_t(offset(xs, {i[0], i[1], h, v}))];
      }
    pool_expected.push_back(s / 9);
  });
  check_close(values_of(pooled), pool_expected);
  CHECK(pooled_int.dtype() == DType::Float32);
  check_close(values_of(pooled_int), {2.5}, 1e-7);
}

// ---------------------------------------------------------------- negative indices

TEST_CASE("gather, index_select, embedding and one_hot count a negative index from the end",
          "[indexing]") {
  // The ONNX backend case of issue 27: index_select(x, 0, [0, -9, -10]) is 10 11 10.
  Var x = arange(10, DType::Int64) + 10.0;
  Var picked = index_select(x, 0, array(std::vector<int32_t>{0, -9, -10, -11, 9, 10}, {6}));
  Var table = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  Var rows = embedding(table, array(std::vector<int64_t>{-1, 0, -3, -4, 3}, {5}));
  Var hot = one_hot(array(std::vector<int32_t>{-1, 1, -4, -3}, {4}), 3);
  Var gathered = gather(f64({1, 2, 3, 4, 5, 6}, {2, 3}), 1,
                        array(std::vector<int64_t>{-1, 0, -2, 2, -3, -4}, {2, 3}));
  // scatter_add drops a negative position (torch refuses them), as one past the end.
  Var scattered = scatter_add(zeros({3}, DType::Float64), 0,
                              array(std::vector<int32_t>{-1, 1, 3}, {3}), f64({5, 6, 7}, {3}));
  eval({picked, rows, hot, gathered, scattered});
  CHECK(picked.to_vector<int64_t>() == std::vector<int64_t>{10, 11, 10, 0, 19, 0});
  check_same_bits(values_of(rows), {5, 6, 1, 2, 1, 2, 0, 0, 0, 0});
  CHECK(hot.to_vector<float>() == std::vector<float>{0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0});
  check_same_bits(values_of(gathered), {3, 1, 2, 6, 4, 0});
  check_same_bits(values_of(scattered), {0, 6, 0});
}

// ---------------------------------------------------------------- gradients

TEST_CASE("the composites' gradients match finite differences", "[gradients]") {
  using V = std::vector<Var>;
  const In a{{2, 3}, data(6, 20)}, b{{2, 2}, data(4, 21)}, c{{3, 4}, data(12, 22)};
  const In g{{4}, data(4, 23)}, h{{4}, data(4, 24)};
  check_gradients("concat",
                  [](const V& v) {
                    Var j = concat({v[0], v[1]}, 1);
                    return j * j * j;
                  },
                  {a, b});
  check_gradients("stack and slice",
                  [](const V& v) {
                    Var s = stack({v[0], sin(v[0])}, -1);
                    return slice(s, 1, -2, 3) * slice(s, 1, 0, 2);
                  },
                  {a});
  check_gradients("split and pad",
                  [](const V& v) {
                    std::vector<Var> p = split(v[0], {1, 2}, 1);
                    return pad(p[1] * p[1], {1, 0}, {0, -1}, 0.5) * 2.0 + sum(p[0] * p[0]);
                  },
                  {a});
  check_gradients("cumsum",
                  [](const V& v) {
                    Var y = cumsum(v[0], 1);
                    return y * y;
                  },
                  {c});
  check_gradients("var", [](const V& v) { return var(v[0], {1}) + var(v[0], {}, false, 0) * 0.5; },
                  {c});
  check_gradients("layer_norm", [](const V& v) { return layer_norm(v[0], 1, v[1], v[2]) * v[0]; },
                  {c, g, h});
  const In img{{1, 2, 4, 4}, data(32, 25)}, wg{{4, 1, 2, 2}, data(16, 26)},
      wt{{2, 3, 2, 2}, data(24, 27)}, small{{1, 2, 3, 3}, data(18, 28)};
  check_gradients("avg_pool2d",
                  [](const V& v) {
                    Var p = avg_pool2d(v[0], 3, 2, 1);
                    return p * p;
                  },
                  {img});
  check_gradients("grouped conv2d",
                  [](const V& v) {
                    Var y = conv2d(v[0], v[1], 1, 1, 1, 2);
                    return y * y;
                  },
                  {img, wg});
  check_gradients("conv_transpose2d",
                  [](const V& v) {
                    Var y = conv_transpose2d(v[0], v[1], 2, 1, 1);
                    return y * y;
                  },
                  {small, wt});
  check_gradients("gather with negative indices",
                  [](const V& v) {
                    Var idx = array(std::vector<int32_t>{-1, 0, -3, 1, -2, 5}, {2, 3});
                    Var y = gather(v[0], 1, idx);
                    return y * y;
                  },
                  {a});
}

// ---------------------------------------------------------------- errors

TEST_CASE("bad arguments are typed errors naming the op, the shapes and what is valid",
          "[errors]") {
  Var x = zeros({2, 3}), y = zeros({2, 4, 1});
  std::string m = message_of<ShapeError>([&] { concat({x, y}, 0); });
  CHECK_THAT(m, Contains("concat") && Contains("[2, 3]") && Contains("[2, 4, 1]"));
  m = message_of<ShapeError>([&] { concat({x, zeros({3, 3})}, 1); });
  CHECK_THAT(m, Contains("concat") && Contains("equal extents"));
  m = message_of<ShapeError>([&] { concat({}, 0); });
  CHECK_THAT(m, Contains("concat: no inputs"));
  m = message_of<ShapeError>([&] { concat({x}, 2); });
  CHECK_THAT(m, Contains("concat") && Contains("-2..1"));
  m = message_of<Error>([&] { concat({x, Var()}, 0); });
  CHECK_THAT(m, Contains("concat: input 1 is undefined"));
  m = message_of<ShapeError>([&] { stack({x, zeros({3, 2})}, 0); });
  CHECK_THAT(m, Contains("stack") && Contains("[3, 2]"));
  m = message_of<ShapeError>([&] { stack({x}, 3); });
  CHECK_THAT(m, Contains("stack") && Contains("-3..2"));
  m = message_of<ShapeError>([&] { slice(x, 1, 0, 2, 0); });
  CHECK_THAT(m, Contains("slice: step 0") && Contains("step >= 1"));
  m = message_of<ShapeError>([&] { slice(scalar(1, DType::Float32), 0, 0, 1); });
  CHECK_THAT(m, Contains("slice") && Contains("0-d"));
  m = message_of<ShapeError>([&] { split(x, {2, 2}, 1); });
  CHECK_THAT(m, Contains("split: sizes [2, 2]") && Contains("adding up to 3"));
  m = message_of<ShapeError>([&] { split(x, {4, -1}, 1); });
  CHECK_THAT(m, Contains("sizes >= 0"));
  m = message_of<ShapeError>([&] { pad(x, {1}, {1, 1}); });
  CHECK_THAT(m, Contains("pad") && Contains("one entry per axis (2)"));
  m = message_of<ShapeError>([&] { pad(x, {0, -2}, {0, -2}); });
  CHECK_THAT(m, Contains("pad") && Contains("extent -1"));
  m = message_of<ShapeError>([&] { pad(x, {0, INT64_MAX}, {0, 1}); });
  CHECK_THAT(m, Contains("pad") && Contains("beyond int64"));
  m = message_of<ShapeError>([&] { cumsum(x, 2); });
  CHECK_THAT(m, Contains("cumsum") && Contains("[2, 3]"));
  m = message_of<ShapeError>([&] { var(x, {1, -1}); });
  CHECK_THAT(m, Contains("var: dim -1 listed twice"));
  m = message_of<ShapeError>([&] { var(x, {5}); });
  CHECK_THAT(m, Contains("var") && Contains("-2..1"));
  m = message_of<ShapeError>([&] { layer_norm(x, 3); });
  CHECK_THAT(m, Contains("layer_norm: normalized_dims 3") && Contains("1 to 2"));
  m = message_of<ShapeError>([&] { layer_norm(x, 1, zeros({2})); });
  CHECK_THAT(m, Contains("layer_norm: weight of shape [2]") && Contains("expected [3]"));
  Var img = zeros({1, 4, 5, 5});
  m = message_of<ShapeError>([&] { conv2d(img, zeros({6, 3, 3, 3}), 1, 0, 1, 2); });
  CHECK_THAT(m, Contains("conv2d") && Contains("groups 2") && Contains("(2)"));
  m = message_of<ShapeError>([&] { conv2d(img, zeros({6, 4, 3, 3}), 1, 0, 1, 0); });
  CHECK_THAT(m, Contains("groups >= 1"));
  m = message_of<ShapeError>([&] { conv_transpose2d(img, zeros({3, 2, 3, 3})); });
  CHECK_THAT(m, Contains("conv_transpose2d") && Contains("input channels 4"));
  m = message_of<ShapeError>([&] { conv_transpose2d(img, zeros({4, 2, 3, 3}), 2, 0, 2); });
  CHECK_THAT(m, Contains("output_padding < stride"));
  m = message_of<ShapeError>([&] { conv_transpose2d(img, zeros({4, 2, 1, 1}), 1, 3); });
  CHECK_THAT(m, Contains("no valid size"));
  m = message_of<ShapeError>([&] { avg_pool2d(img, 3, 1, 2); });
  CHECK_THAT(m, Contains("avg_pool2d") && Contains("padding <= kernel/2"));
  m = message_of<ShapeError>([&] { avg_pool2d(zeros({1, 1, 2, 2}), 3, 1); });
  CHECK_THAT(m, Contains("avg_pool2d") && Contains("larger than the padded input"));
}

// ---------------------------------------------------------------- models as values

TEST_CASE("matmul with a 1-D operand follows numpy: a row, a column, or a dot product",
          "[composite]") {
  const std::vector<double> av = data(3, 40), bv = data(6, 41), mv = data(12, 42);
  Var a = f64(av, {3}), m = f64(mv, {4, 3}), b = f64(bv, {2, 3});
  Var mt = f64(mv, {3, 4});
  Var row = matmul(a, mt);                      // [3] x [3, 4] -> [4]
  Var col = matmul(m, a);                       // [4, 3] x [3] -> [4]
  Var dot = matmul(a, a);                       // [3] x [3] -> []
  Var batched = matmul(f64(mv, {2, 2, 3}), a);  // [2, 2, 3] x [3] -> [2, 2]
  eval({row, col, dot, batched});
  CHECK(row.shape() == Shape{4});
  CHECK(col.shape() == Shape{4});
  CHECK(dot.shape() == Shape{});
  CHECK(batched.shape() == Shape{2, 2});
  std::vector<double> want_row(4, 0), want_col(4, 0);
  double want_dot = 0;
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t k = 0; k < 3; ++k) {
      want_row[size_t(j)] += av[size_t(k)] * mv[size_t(k * 4 + j)];
      want_col[size_t(j)] += mv[size_t(j * 3 + k)] * av[size_t(k)];
    }
  for (int64_t k = 0; k < 3; ++k) want_dot += av[size_t(k)] * av[size_t(k)];
  check_close(values_of(row), want_row);
  check_close(values_of(col), want_col);
  check_close(values_of(dot), {want_dot});
  check_close(values_of(batched), want_col);
  check_gradients("matmul of vectors", [](const std::vector<Var>& v) { return matmul(v[0], v[1]); },
                  {In{{3}, av}, In{{3, 2}, bv}});
  CHECK_THAT(message_of<ShapeError>([&] { matmul(a, b); }),
             Contains("matmul") && Contains("[3]") && Contains("[2, 3]") &&
                 Contains("inner dimensions 3 and 2"));
  CHECK_THAT(message_of<ShapeError>([&] { matmul(scalar(1, DType::Float64), a); }),
             Contains("matmul") && Contains("0-d operand"));
}

TEST_CASE("operator<< prints the dtype, the shape and the values, long axes cut", "[composite]") {
  auto text = [](const Var& v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  CHECK(text(Var()) == "Var()");
  CHECK(text(array(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3})) ==
        "int32[2, 3] [[1, 2, 3], [4, 5, 6]]");
  CHECK(text(arange(10, DType::Int64)) == "int64[10] [0, 1, 2, ..., 7, 8, 9]");
  CHECK(text(scalar(2.5, DType::Float64)) == "float64[] 2.5");
  CHECK(text(array(std::vector<bool>{true, false}, {2})) == "bool[2] [true, false]");
  CHECK(text(zeros({0, 3})) == "float32[0, 3] []");
  CHECK(text(ones({2}) * 0.5) == "float32[2] [0.5, 0.5]");  // evaluates a lazy Var
}
