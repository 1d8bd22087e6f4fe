// nn::Module, the layers and scaled_dot_product_attention (include/metajit/nn.h, composite.h;
// shared/api.md "Layers, weights and the ops models need"):
//
//   1. values against naive loops in double written here from torch's definitions;
//   2. torch's names, order, shapes and dtypes of parameters and buffers (as torch 2.x prints
//      them for the same layers), and torch's initialisation bounds;
//   3. BatchNorm2d's running statistics against the formulas, over two steps;
//   4. load_state_dict's errors, after which nothing has changed, and safetensors round trips;
//   5. gradients with respect to the parameters against central finite differences;
//   6. the train/eval mode: a jit function traced in one mode traces again in the other.
//
// Compile time matters (each distinct kernel is a g++ run): layers are small, every case
// evaluates its Vars together, and the shapes repeat where the values are not the point.
#include <metajit/metajit.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "support/distinct_values.h"
#include "support/exceptions.h"
#include "support/files.h"
#include "support/gradient_check.h"
#include "support/reference_compare.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::check_gradients;
using metajit_test::In;
using metajit_test::message_of;
using Names = std::vector<std::string>;

namespace {

std::vector<double> values_of(const Var& v) {
  return metajit_test_detail::eval_values_as_double(v);
}

// `n` distinct values in [-2, 2] (seeded).
std::vector<double> data(int64_t n, uint64_t seed) {
  return metajit_test::distinct(size_t(n), -2, 2, seed);
}

Var f32(const std::vector<double>& v, Shape shape) {
  return array(std::vector<float>(v.begin(), v.end()), std::move(shape));
}

// The float32 values `v` holds once stored in a float32 Var.
std::vector<double> rounded(std::vector<double> v) {
  for (double& x : v) x = double(float(x));
  return v;
}

void check_close(const std::vector<double>& got, const std::vector<double>& expected, double tol) {
  REQUIRE(got.size() == expected.size());
  int failures = 0;
  for (size_t k = 0; k < got.size(); ++k)
    if (!(std::fabs(got[k] - expected[k]) <= tol * (1 + std::fabs(expected[k]))) && ++failures <= 8)
      FAIL_CHECK("element " << k << ": got " << got[k] << ", expected " << expected[k]);
  CHECK(failures == 0);
}

Names names_of(const std::vector<std::pair<std::string, Var>>& entries) {
  Names out;
  for (const auto& e : entries) out.push_back(e.first);
  return out;
}

Names keys_of(const nn::StateDict& s) {
  Names out;
  for (const auto& e : s) out.push_back(e.first);
  return out;
}

// ---------------------------------------------------------------- naive references

// y[m, o] = sum_i x[m, i] w[o, i] + b[o] (b empty: no bias).
std::vector<double> linear_ref(const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>& b, int64_t in, int64_t out) {
  const int64_t rows = int64_t(x.size()) / in;
  std::vector<double> y(size_t(rows * out));
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0 : b[size_t(o)];
      for (int64_t i = 0; i < in; ++i) s += x[size_t(m * in + i)] * w[size_t(o * in + i)];
      y[size_t(m * out + o)] = s;
    }
  return y;
}

// softmax(q k^T / sqrt(D)) v for `batch` independent [T, D], [S, D], [S, DV] blocks; causal:
// query t sees keys s <= t.
std::vector<double> attention_ref(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, int64_t batch, int64_t t_len,
                                  int64_t s_len, int64_t d, int64_t dv, bool causal) {
  std::vector<double> out(size_t(batch * t_len * dv), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < t_len; ++t) {
      std::vector<double> w(size_t(s_len), 0.0);
      double top = -INFINITY, total = 0;
      for (int64_t s = 0; s < s_len; ++s) {
        if (causal && s > t) continue;
        double dot = 0;
        for (int64_t j = 0; j < d; ++j)
          dot += q[size_t((b * t_len + t) * d + j)] * k[size_t((b * s_len + s) * d + j)];
        w[size_t(s)] = dot / std::sqrt(double(d));
        top = std::max(top, w[size_t(s)]);
      }
      for (int64_t s = 0; s < s_len; ++s) {
        w[size_t(s)] = causal && s > t ? 0 : std::exp(w[size_t(s)] - top);
        total += w[size_t(s)];
      }
      for (int64_t s = 0; s < s_len; ++s)
        for (int64_t j = 0; j < dv; ++j)
          out[size_t((b * t_len + t) * dv + j)] +=
              w[size_t(s)] / total * v[size_t((b * s_len + s) * dv + j)];
    }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- scaled_dot_product_attention

TEST_CASE("scaled_dot_product_attention matches a naive loop, causal or not, T != S",
          "[attention]") {
  const int64_t B = 2, D = 4, DV = 3;
  auto run = [&](int64_t T, int64_t S, bool causal, uint64_t seed) {
    const std::vector<double> q = data(B * T * D, seed), k = data(B * S * D, seed + 1),
                              v = data(B * S * DV, seed + 2);
    Var y = scaled_dot_product_attention(array(q, {B, T, D}), array(k, {B, S, D}),
                                         array(v, {B, S, DV}), causal);
    CHECK(y.shape() == Shape{B, T, DV});
    CHECK(y.dtype() == DType::Float64);
    return std::make_pair(y, attention_ref(q, k, v, B, T, S, D, DV, causal));
  };
  // T < S and T > S: with causal, the first queries see fewer keys, the last ones (T > S) all.
  auto plain = run(3, 5, false, 1), causal_short = run(3, 5, true, 4),
       causal_long = run(5, 3, true, 7);
  // Leading axes broadcast as matmul's: k and v without the batch axis serve every batch.
  const std::vector<double> q = data(B * 3 * D, 10), k = data(5 * D, 11), v = data(5 * DV, 12);
  Var shared =
      scaled_dot_product_attention(array(q, {B, 1, 3, D}), array(k, {5, D}), array(v, {5, DV}));
  CHECK(shared.shape() == Shape{B, 1, 3, DV});
  std::vector<double> k2 = k, v2 = v;
  k2.insert(k2.end(), k.begin(), k.end());
  v2.insert(v2.end(), v.begin(), v.end());
  eval({plain.first, causal_short.first, causal_long.first, shared});
  check_close(values_of(plain.first), plain.second, 1e-12);
  check_close(values_of(causal_short.first), causal_short.second, 1e-12);
  check_close(values_of(causal_long.first), causal_long.second, 1e-12);
  check_close(values_of(shared), attention_ref(q, k2, v2, B, 3, 5, D, DV, false), 1e-12);
  // Causal query 0 sees key 0 only: its output is v's first row.
  const std::vector<double> first = values_of(causal_short.first);
  const std::vector<double> v_short = data(B * 5 * DV, 6);
  for (int64_t j = 0; j < DV; ++j)
    CHECK(first[size_t(j)] == Approx(v_short[size_t(j)]).epsilon(1e-12));
}

TEST_CASE("scaled_dot_product_attention's gradients match finite differences", "[attention]") {
  using V = std::vector<Var>;
  const In q{{1, 3, 2}, data(6, 20)}, k{{1, 4, 2}, data(8, 21)}, v{{1, 4, 3}, data(12, 22)};
  // Causal, T != S: the masked scores get no gradient; without the mask the graph is the same
  // less one reindex.
  check_gradients("scaled_dot_product_attention",
                  [](const V& x) {
                    Var y = scaled_dot_product_attention(x[0], x[1], x[2], true);
                    return y * y;
                  },
                  {q, k, v});
}

TEST_CASE("scaled_dot_product_attention's bad arguments are typed errors", "[attention]") {
  Var q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 3});
  std::string m = message_of<ShapeError>([&] { scaled_dot_product_attention(zeros({4}), k, v); });
  CHECK_THAT(m, Contains("scaled_dot_product_attention") && Contains("q [4]") &&
                    Contains("at least 2 axes"));
  m = message_of<ShapeError>([&] { scaled_dot_product_attention(q, zeros({2, 5, 3}), v); });
  CHECK_THAT(m, Contains("last axes of q and k (4 and 3)"));
  m = message_of<ShapeError>([&] { scaled_dot_product_attention(q, k, zeros({2, 6, 3})); });
  CHECK_THAT(m, Contains("k and v must have the same length S") && Contains("v [2, 6, 3]"));
  m = message_of<ShapeError>([&] { scaled_dot_product_attention(q, zeros({3, 5, 4}), v); });
  CHECK_THAT(m, Contains("scaled_dot_product_attention") && Contains("[2]") && Contains("[3]"));
  m = message_of<DTypeError>([&] {
    scaled_dot_product_attention(zeros({2, 3, 4}, DType::Int32), k, v);
  });
  CHECK_THAT(m, Contains("int32"));
  m = message_of<Error>([&] { scaled_dot_product_attention(q, Var(), v); });
  CHECK_THAT(m, Contains("scaled_dot_product_attention") && Contains("k"));
}

// ---------------------------------------------------------------- names, order, shapes

namespace {

// A model of torch's shape: own parameter, a nested Sequential, a BatchNorm2d, and one Linear
// registered under two names (shared).
struct Net : nn::Module {
  Var scale;
  std::shared_ptr<nn::Sequential> body;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> head;
  Net() {
    scale = register_parameter("scale", ones({1}));
    body = register_module(
        "body", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3),
                                                 std::make_shared<nn::ReLU>(),
                                                 std::make_shared<nn::Linear>(3, 2, false)));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(2));
    head = register_module("head", std::make_shared<nn::Linear>(2, 2));
    register_module("tied", head);
  }
  // Register helpers made callable for the error checks below.
  void add_parameter(const std::string& name, Var v) { register_parameter(name, std::move(v)); }
  void add_module(const std::string& name, std::shared_ptr<nn::Module> m) {
    register_module(name, std::move(m));
  }
};

}  // namespace

TEST_CASE("parameters and buffers have torch's names, order, shapes and dtypes", "[names]") {
  Net net;
  // torch: own parameters first, then each child's, recursively; a shared child once.
  CHECK(names_of(net.named_parameters()) == Names{"scale", "body.0.weight", "body.0.bias",
                                                  "body.2.weight", "bn.weight", "bn.bias",
                                                  "head.weight", "head.bias"});
  CHECK(net.parameters().size() == 8);
  CHECK(names_of(net.named_buffers()) ==
        Names{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"});
  // state_dict: parameters and buffers; a shared child under each of its names (torch's too).
  CHECK(keys_of(net.state_dict()) == Names{"bn.bias", "bn.num_batches_tracked", "bn.running_mean",
                                           "bn.running_var", "bn.weight", "body.0.bias",
                                           "body.0.weight", "body.2.weight", "head.bias",
                                           "head.weight", "scale", "tied.bias", "tied.weight"});
  const nn::StateDict s = net.state_dict();
  CHECK(s.at("body.0.weight").shape() == Shape{3, 4});
  CHECK(s.at("body.2.weight").shape() == Shape{2, 3});
  CHECK(s.at("bn.running_var").shape() == Shape{2});
  CHECK(s.at("bn.running_var").dtype() == DType::Float32);
  CHECK(s.at("bn.num_batches_tracked").shape() == Shape{});
  CHECK(s.at("bn.num_batches_tracked").dtype() == DType::Int64);
  CHECK(names_of(net.body->named_parameters()) == Names{"0.weight", "0.bias", "2.weight"});
  CHECK(net.body->size() == 3);
  CHECK(dynamic_cast<nn::ReLU*>((*net.body)[1].get()) != nullptr);

  nn::MultiheadAttention mha(4, 2);
  CHECK(names_of(mha.named_parameters()) ==
        Names{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(mha.in_proj_weight().shape() == Shape{12, 4});
  CHECK(mha.in_proj_bias().shape() == Shape{12});
  CHECK(mha.out_proj()->weight().shape() == Shape{4, 4});
  nn::MultiheadAttention mha_nobias(4, 2, false);
  CHECK(keys_of(mha_nobias.state_dict()) == Names{"in_proj_weight", "out_proj.weight"});
  nn::Conv2d conv(4, 6, 3, 1, 0, 1, 2);
  CHECK(names_of(conv.named_parameters()) == Names{"weight", "bias"});
  CHECK(conv.weight().shape() == Shape{6, 2, 3, 3});
  CHECK(nn::Linear(4, 3, false).parameters().size() == 1);
  CHECK(nn::LayerNorm(5, 1e-5, false).parameters().empty());
  CHECK(nn::LayerNorm(5).weight().shape() == Shape{5});
  CHECK(nn::Embedding(7, 3).weight().shape() == Shape{7, 3});
  CHECK(nn::Dropout().state_dict().empty());
}

TEST_CASE("registering a bad name, value or module is an Error naming it", "[names]") {
  Net net;
  std::string m = message_of<Error>([&] { net.add_parameter("scale", ones({1})); });
  CHECK_THAT(m, Contains("Net::register_parameter") && Contains("\"scale\" is already taken"));
  m = message_of<Error>([&] { net.add_parameter("bn", ones({1})); });
  CHECK_THAT(m, Contains("\"bn\" is already taken"));
  m = message_of<Error>([&] { net.add_parameter("a.b", ones({1})); });
  CHECK_THAT(m, Contains("\"a.b\" contains '.'"));
  m = message_of<Error>([&] { net.add_parameter("", ones({1})); });
  CHECK_THAT(m, Contains("the name is empty"));
  m = message_of<Error>([&] { net.add_parameter("w", Var()); });
  CHECK_THAT(m, Contains("\"w\" is an undefined Var"));
  m = message_of<DTypeError>([&] { net.add_parameter("w", zeros({2}, DType::Int64)); });
  CHECK_THAT(m, Contains("\"w\" has dtype int64") && Contains("buffer"));
  m = message_of<Error>([&] { net.add_module("child", nullptr); });
  CHECK_THAT(m, Contains("Net::register_module: \"child\" is null"));
  m = message_of<Error>([&] { (*net.body)[3]; });
  CHECK_THAT(m, Contains("Sequential: index 3 out of range for 3 children"));
  CHECK(names_of(net.named_parameters()).size() == 8);  // nothing was added
}

// ---------------------------------------------------------------- initialisation

namespace {

// Every value within [-bound, bound], not all equal, spread over most of the range.
void check_uniform(const Var& v, double bound) {
  const std::vector<double> x = values_of(v);
  REQUIRE(!x.empty());
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  INFO("bound " << bound << ": min " << *lo << ", max " << *hi);
  CHECK(*lo >= -bound * (1 + 1e-6));
  CHECK(*hi <= bound * (1 + 1e-6));
  CHECK(*hi - *lo > bound);
}

void check_constant(const Var& v, double value) {
  for (double x : values_of(v)) CHECK(x == value);
}

}  // namespace

TEST_CASE("layers initialise as torch does: bounds, constants, N(0, 1)", "[init]") {
  nn::Linear lin(16, 8);
  check_uniform(lin.weight(), 0.25);  // 1 / sqrt(16)
  check_uniform(lin.bias(), 0.25);
  nn::Conv2d conv(4, 6, 3, 1, 0, 1, 2);
  check_uniform(conv.weight(), 1 / std::sqrt(18.0));  // fan_in = 4 / 2 * 3 * 3
  check_uniform(conv.bias(), 1 / std::sqrt(18.0));
  nn::MultiheadAttention mha(8, 2);
  check_uniform(mha.in_proj_weight(), std::sqrt(6.0 / 32));  // xavier on [24, 8]
  check_constant(mha.in_proj_bias(), 0);
  check_uniform(mha.out_proj()->weight(), 1 / std::sqrt(8.0));
  check_constant(mha.out_proj()->bias(), 0);
  nn::BatchNorm2d bn(3);
  check_constant(bn.weight(), 1);
  check_constant(bn.bias(), 0);
  check_constant(bn.running_mean(), 0);
  check_constant(bn.running_var(), 1);
  CHECK(bn.num_batches_tracked().item<int64_t>() == 0);
  nn::LayerNorm ln(5);
  check_constant(ln.weight(), 1);
  check_constant(ln.bias(), 0);
  // N(0, 1): 4096 samples, the mean within 5 standard errors, the deviation within 5%.
  nn::Embedding emb(256, 16);
  const std::vector<double> e = values_of(emb.weight());
  double sum = 0, sq = 0;
  for (double x : e) sum += x, sq += x * x;
  const double mean = sum / double(e.size()), sd = std::sqrt(sq / double(e.size()) - mean * mean);
  CHECK(std::fabs(mean) < 5 / std::sqrt(double(e.size())));
  CHECK(std::fabs(sd - 1) < 0.05);
}

TEST_CASE("a seed fixes a layer's initialisation, else the random stream draws it", "[init]") {
  auto w = [](const nn::Linear& l) { return values_of(l.weight()); };
  auto b = [](const nn::Linear& l) { return values_of(l.bias()); };
  // Seeded: the same values every time, others for another seed, and the bias is no copy of
  // the weight's first values.
  nn::Linear s1(6, 4, true, 7), s2(6, 4, true, 7), s3(6, 4, true, 8);
  CHECK(w(s1) == w(s2));
  CHECK(b(s1) == b(s2));
  CHECK(w(s1) != w(s3));
  const std::vector<double> w1 = w(s1);
  CHECK(b(s1) != std::vector<double>(w1.begin(), w1.begin() + 4));
  nn::MultiheadAttention m1(4, 2, true, 3), m2(4, 2, true, 3);
  CHECK(values_of(m1.in_proj_weight()) == values_of(m2.in_proj_weight()));
  CHECK(values_of(m1.out_proj()->weight()) == values_of(m2.out_proj()->weight()));
  // Unseeded: two layers differ; manual_seed replays the stream.
  manual_seed(123);
  nn::Linear u1(6, 4), u2(6, 4);
  nn::Embedding e1(5, 3);
  manual_seed(123);
  nn::Linear r1(6, 4), r2(6, 4);
  nn::Embedding re1(5, 3);
  CHECK(w(u1) != w(u2));
  CHECK(w(u1) == w(r1));
  CHECK(b(u2) == b(r2));
  CHECK(values_of(e1.weight()) == values_of(re1.weight()));
  CHECK(w(u1) != w(s1));
}

// ---------------------------------------------------------------- values

TEST_CASE("Linear, Conv2d, LayerNorm, Embedding and the activations match naive loops",
          "[layers]") {
  // Linear over the last axis of a [2, 2, 4] input; without bias.
  nn::Linear lin(4, 3, true, 1), lin_nb(4, 3, false, 2);
  const std::vector<double> x = rounded(data(16, 30));
  Var y = lin(f32(x, {2, 2, 4})), y_nb = lin_nb(f32(x, {4, 4}));
  CHECK(y.shape() == Shape{2, 2, 3});
  // Conv2d: stride 2, padding 1, dilation 1, groups 2, batched and unbatched.
  const int64_t N = 2, C = 4, H = 5, W = 5, O = 6, K = 3;
  nn::Conv2d conv(C, O, K, 2, 1, 1, 2, true, 3);
  const std::vector<double> img = rounded(data(N * C * H * W, 31));
  Var c = conv(f32(img, {N, C, H, W}));
  Var c1 = conv(f32(std::vector<double>(img.begin(), img.begin() + C * H * W), {C, H, W}));
  CHECK(c.shape() == Shape{N, O, 3, 3});
  CHECK(c1.shape() == Shape{O, 3, 3});
  // LayerNorm with weights other than ones and zeros (loaded).
  nn::LayerNorm ln(4);
  const std::vector<double> g = rounded(data(4, 32)), h = rounded(data(4, 33));
  ln.load_state_dict({{"weight", f32(g, {4})}, {"bias", f32(h, {4})}});
  Var l = ln(f32(x, {4, 4}));
  // Embedding: ids of any shape, a negative one counting from the end.
  nn::Embedding emb(5, 3, 4);
  Var e = emb(array(std::vector<int64_t>{4, 0, -1, 2}, {2, 2}));
  CHECK(e.shape() == Shape{2, 2, 3});
  nn::Sequential acts(std::make_shared<nn::Tanh>(), std::make_shared<nn::GELU>(),
                      std::make_shared<nn::Sigmoid>(), std::make_shared<nn::ReLU>());
  Var a = acts(f32(x, {16}));
  eval({y, y_nb, c, c1, l, e, a});

  const std::vector<double> lw = values_of(lin.weight()), lb = values_of(lin.bias());
  check_close(values_of(y), linear_ref(x, lw, lb, 4, 3), 1e-5);
  check_close(values_of(y_nb), linear_ref(x, values_of(lin_nb.weight()), {}, 4, 3), 1e-5);

  const std::vector<double> cw = values_of(conv.weight()), cb = values_of(conv.bias());
  std::vector<double> want(size_t(N * O * 9));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          double s = cb[size_t(o)];
          const int64_t group = o / (O / 2), per = C / 2;
          for (int64_t ci = 0; ci < per; ++ci)
            for (int64_t u = 0; u < K; ++u)
              for (int64_t w = 0; w < K; ++w) {
                const int64_t r = i * 2 - 1 + u, q = j * 2 - 1 + w;
                if (r < 0 || r >= H || q < 0 || q >= W) continue;
                s += img[size_t(((n * C + group * per + ci) * H + r) * W + q)] *
                     cw[size_t(((o * per + ci) * K + u) * K + w)];
              }
          want[size_t(((n * O + o) * 3 + i) * 3 + j)] = s;
        }
  check_close(values_of(c), want, 1e-5);
  check_close(values_of(c1), std::vector<double>(want.begin(), want.begin() + O * 9), 1e-5);

  std::vector<double> ln_want;
  for (int64_t r = 0; r < 4; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < 4; ++j) mean += x[size_t(r * 4 + j)] / 4;
    for (int64_t j = 0; j < 4; ++j) var += std::pow(x[size_t(r * 4 + j)] - mean, 2) / 4;
    for (int64_t j = 0; j < 4; ++j)
      ln_want.push_back((x[size_t(r * 4 + j)] - mean) / std::sqrt(var + 1e-5) * g[size_t(j)] +
                        h[size_t(j)]);
  }
  check_close(values_of(l), ln_want, 1e-5);

  const std::vector<double> table = values_of(emb.weight());
  std::vector<double> e_want;
  for (int64_t id : {4, 0, 4, 2})
    e_want.insert(e_want.end(), table.begin() + id * 3, table.begin() + id * 3 + 3);
  CHECK(values_of(e) == e_want);

  std::vector<double> a_want;
  for (double v : x) {
    const double t = std::tanh(v), gl = t * 0.5 * (1 + std::erf(t / std::sqrt(2.0)));
    a_want.push_back(std::max(0.0, 1 / (1 + std::exp(-gl))));
  }
  check_close(values_of(a), a_want, 1e-6);
}

namespace {

// torch's MultiheadAttention from its parameters' values, in double: in-projection, heads of
// E / H, attention, heads joined, out-projection.
std::vector<double> mha_ref(const nn::MultiheadAttention& m, const std::vector<double>& q,
                            const std::vector<double>& k, const std::vector<double>& v, int64_t N,
                            int64_t T, int64_t S, int64_t E, int64_t H, bool causal) {
  const std::vector<double> w = values_of(m.in_proj_weight()), b = values_of(m.in_proj_bias());
  auto part = [&](const std::vector<double>& x, int64_t p) {
    return linear_ref(x, std::vector<double>(w.begin() + p * E * E, w.begin() + (p + 1) * E * E),
                      std::vector<double>(b.begin() + p * E, b.begin() + (p + 1) * E), E, E);
  };
  const std::vector<double> pq = part(q, 0), pk = part(k, 1), pv = part(v, 2);
  const int64_t dh = E / H;
  // [N, L, H, dh] -> [N * H, L, dh]
  auto heads = [&](const std::vector<double>& x, int64_t L) {
    std::vector<double> out(x.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t hh = 0; hh < H; ++hh)
          for (int64_t j = 0; j < dh; ++j)
            out[size_t(((n * H + hh) * L + l) * dh + j)] = x[size_t((n * L + l) * E + hh * dh + j)];
    return out;
  };
  const std::vector<double> att =
      attention_ref(heads(pq, T), heads(pk, S), heads(pv, S), N * H, T, S, dh, dh, causal);
  std::vector<double> joined(att.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t hh = 0; hh < H; ++hh)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < dh; ++j)
          joined[size_t((n * T + t) * E + hh * dh + j)] =
              att[size_t(((n * H + hh) * T + t) * dh + j)];
  return linear_ref(joined, values_of(m.out_proj()->weight()), values_of(m.out_proj()->bias()), E,
                    E);
}

}  // namespace

TEST_CASE("MultiheadAttention matches torch's definition computed naively", "[layers]") {
  const int64_t N = 2, T = 3, S = 4, E = 4, H = 2;
  nn::MultiheadAttention mha(E, H, true, 5);
  // Biases other than zeros, so that their placement is checked too.
  nn::StateDict s = mha.state_dict();
  s["in_proj_bias"] = f32(data(3 * E, 40), {3 * E});
  s["out_proj.bias"] = f32(data(E, 41), {E});
  mha.load_state_dict(s);
  const std::vector<double> q = rounded(data(N * T * E, 42)), k = rounded(data(N * S * E, 43)),
                            v = rounded(data(N * S * E, 44));
  Var cross = mha(f32(q, {N, T, E}), f32(k, {N, S, E}), f32(v, {N, S, E}));
  Var causal = mha(f32(q, {N, T, E}), f32(k, {N, S, E}), f32(v, {N, S, E}), true);
  const std::vector<double> q0(q.begin(), q.begin() + T * E), k0(k.begin(), k.begin() + S * E),
      v0(v.begin(), v.begin() + S * E);
  Var unbatched = mha(f32(q0, {T, E}), f32(k0, {S, E}), f32(v0, {S, E}));
  CHECK(cross.shape() == Shape{N, T, E});
  CHECK(unbatched.shape() == Shape{T, E});
  eval({cross, causal, unbatched});
  const std::vector<double> want = mha_ref(mha, q, k, v, N, T, S, E, H, false);
  check_close(values_of(cross), want, 1e-5);
  check_close(values_of(causal), mha_ref(mha, q, k, v, N, T, S, E, H, true), 1e-5);
  check_close(values_of(unbatched), std::vector<double>(want.begin(), want.begin() + T * E), 1e-5);
  // Self-attention (one Var as query, key and value) takes the packed projection: same values.
  const Var x = f32(q, {N, T, E});
  check_close(values_of(mha(x, x, x, true)), mha_ref(mha, q, q, q, N, T, T, E, H, true), 1e-5);
}

// ---------------------------------------------------------------- BatchNorm2d

TEST_CASE("BatchNorm2d: batch statistics in training, running statistics updated as torch's",
          "[batchnorm]") {
  const int64_t N = 2, C = 3, HW = 4;
  nn::BatchNorm2d bn(C, 1e-5, 0.25);
  nn::StateDict s = bn.state_dict();  // affine parameters other than ones and zeros
  const std::vector<double> g = rounded(data(C, 50)), b = rounded(data(C, 51));
  s["weight"] = f32(g, {C});
  s["bias"] = f32(b, {C});
  bn.load_state_dict(s);
  const std::vector<double> x1 = rounded(data(N * C * HW, 52)), x2 = rounded(data(N * C * HW, 53));
  // Per channel: the batch mean, biased and unbiased variances (N * H * W = 8 values).
  auto stats = [&](const std::vector<double>& x, int64_t c) {
    double mean = 0, ss = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < HW; ++p) mean += x[size_t((n * C + c) * HW + p)] / double(N * HW);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < HW; ++p) ss += std::pow(x[size_t((n * C + c) * HW + p)] - mean, 2);
    return std::array<double, 3>{mean, ss / double(N * HW), ss / double(N * HW - 1)};
  };
  auto normalise = [&](const std::vector<double>& x, auto mean_var) {
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t c = int64_t(i) / HW % C;
      const auto [m, v] = mean_var(c);
      y[i] = (x[i] - m) / std::sqrt(v + 1e-5) * g[size_t(c)] + b[size_t(c)];
    }
    return y;
  };
  Var y1 = bn(f32(x1, {N, C, 2, 2}));
  Var y2 = bn(f32(x2, {N, C, 2, 2}));
  eval({y1, y2, bn.running_mean(), bn.running_var(), bn.num_batches_tracked()});
  check_close(values_of(y1),
              normalise(x1,
                        [&](int64_t c) {
                          const auto st = stats(x1, c);
                          return std::make_pair(st[0], st[1]);
                        }),
              1e-5);
  check_close(values_of(y2),
              normalise(x2,
                        [&](int64_t c) {
                          const auto st = stats(x2, c);
                          return std::make_pair(st[0], st[1]);
                        }),
              1e-5);
  // Two updates with momentum 0.25 from mean 0, var 1; the unbiased variance.
  std::vector<double> rm(C), rv(C);
  for (int64_t c = 0; c < C; ++c) {
    const auto a = stats(x1, c), z = stats(x2, c);
    rm[size_t(c)] = 0.75 * (0.75 * 0 + 0.25 * a[0]) + 0.25 * z[0];
    rv[size_t(c)] = 0.75 * (0.75 * 1 + 0.25 * a[2]) + 0.25 * z[2];
  }
  check_close(values_of(bn.running_mean()), rm, 1e-6);
  check_close(values_of(bn.running_var()), rv, 1e-6);
  CHECK(bn.num_batches_tracked().item<int64_t>() == 2);
  // Evaluation mode: the running statistics, and no update.
  bn.eval();
  Var y3 = bn(f32(x1, {N, C, 2, 2}));
  check_close(
      values_of(y3),
      normalise(x1, [&](int64_t c) { return std::make_pair(rm[size_t(c)], rv[size_t(c)]); }), 1e-5);
  CHECK(bn.num_batches_tracked().item<int64_t>() == 2);
  check_close(values_of(bn.running_mean()), rm, 1e-6);
  // One value per channel cannot give a variance in training.
  bn.train();
  std::string m = message_of<ShapeError>([&] { bn(zeros({1, C, 1, 1})); });
  CHECK_THAT(m, Contains("BatchNorm2d") && Contains("[1, 3, 1, 1]") && Contains("at least 2"));
  // An eager loop that never reads the statistics: each call settles the previous update, which
  // reads only the stored batch statistics, so the lazy graph stays the same size.
  std::vector<uint64_t> pending;
  for (int step = 0; step < 4; ++step) {
    Var y = bn(f32(data(N * C * HW, 54 + uint64_t(step)), {N, C, 2, 2}));
    eval({sum(y * y)});
    pending.push_back(metajit::stats().pending_nodes);
  }
  CHECK(pending[3] == pending[1]);
  CHECK(bn.num_batches_tracked().item<int64_t>() == 6);
}

TEST_CASE("BatchNorm2d inside a jit train step: its running statistics are the step's state",
          "[batchnorm][jit]") {
  const int64_t N = 3, C = 2, HW = 4;
  nn::BatchNorm2d in_step(C), eager(C);
  SGD opt(in_step.parameters(), 0.0);  // lr 0: the buffers are what changes
  auto step = opt.jit_step([&](const Var& x) {
    const Var y = in_step(x);
    return sum(y * y);
  });
  for (int k = 0; k < 3; ++k) {
    const Var x = f32(data(N * C * HW, 70 + uint64_t(k)), {N, C, 2, 2});
    step(x);
    metajit::eval({sum(eager(x))});
  }
  CHECK(step.traces() == 1);
  CHECK(in_step.num_batches_tracked().item<int64_t>() == 3);
  const std::vector<double> m = values_of(in_step.running_mean()),
                            v = values_of(in_step.running_var());
  const std::vector<double> me = values_of(eager.running_mean()),
                            ve = values_of(eager.running_var());
  for (size_t c = 0; c < size_t(C); ++c) {
    CHECK(m[c] == Approx(me[c]).margin(1e-6));
    CHECK(v[c] == Approx(ve[c]).margin(1e-6));
  }
  CHECK(m != std::vector<double>(size_t(C), 0.0));
}

// ---------------------------------------------------------------- load_state_dict

TEST_CASE("load_state_dict: a missing, unexpected or mismatched key is an Error, nothing changes",
          "[state]") {
  nn::Linear lin(3, 2, true, 9);
  const std::vector<double> w0 = values_of(lin.weight()), b0 = values_of(lin.bias());
  const Var held = lin.parameters()[0];  // as an optimizer holds it
  const Var good_w = f32(data(6, 60), {2, 3}), good_b = f32(data(2, 61), {2});
  auto unchanged = [&] {
    CHECK(values_of(lin.weight()) == w0);
    CHECK(values_of(lin.bias()) == b0);
  };
  std::string m = message_of<Error>([&] { lin.load_state_dict({{"weight", good_w}}); });
  CHECK_THAT(m, Contains("load_state_dict for Linear") && Contains("missing key(s) \"bias\""));
  unchanged();
  m = message_of<Error>([&] {
    lin.load_state_dict({{"weight", good_w}, {"bias", good_b}, {"extra", good_b}});
  });
  CHECK_THAT(m, Contains("unexpected key(s) \"extra\""));
  unchanged();
  // Mismatches fail even when not strict, and after a good key: the good one is not loaded.
  m = message_of<ShapeError>([&] {
    lin.load_state_dict({{"weight", good_w}, {"bias", f32(data(3, 62), {3})}}, false);
  });
  CHECK_THAT(m, Contains("key \"bias\"") && Contains("[3]") && Contains("[2]"));
  unchanged();
  m = message_of<DTypeError>([&] {
    lin.load_state_dict({{"weight", array(data(6, 63), {2, 3})}, {"bias", good_b}});
  });
  CHECK_THAT(m, Contains("key \"weight\"") && Contains("float64") && Contains("float32"));
  unchanged();
  m = message_of<Error>([&] { lin.load_state_dict({{"weight", good_w}, {"bias", Var()}}); });
  CHECK_THAT(m, Contains("key \"bias\" is an undefined Var"));
  unchanged();
  // Not strict: the keys present are loaded, the others skipped. The module's Vars hold copies
  // (not the state's nodes), and every copy of a parameter Var sees the load.
  lin.load_state_dict({{"weight", good_w}, {"other", good_b}}, false);
  CHECK(values_of(lin.weight()) == values_of(good_w));
  CHECK(values_of(held) == values_of(good_w));
  CHECK(lin.weight().node() != good_w.node());
  CHECK(values_of(lin.bias()) == b0);
  // Lazy values are evaluated; integer buffers load too.
  nn::BatchNorm2d bn(2);
  nn::StateDict s = bn.state_dict();
  s["num_batches_tracked"] = scalar(5, DType::Int64);
  s["running_mean"] = ones({2}) * 3.0;
  bn.load_state_dict(s);
  CHECK(bn.num_batches_tracked().item<int64_t>() == 5);
  CHECK(values_of(bn.running_mean()) == std::vector<double>{3, 3});
}

TEST_CASE("a model's state_dict round-trips through safetensors into another model", "[state]") {
  metajit_test::TempDir dir;
  const std::string path = (dir.path() / "model.safetensors").string();
  auto model = [](uint64_t seed) {
    return std::make_shared<nn::Sequential>(
        std::make_shared<nn::Conv2d>(2, 3, 2, 1, 0, 1, 1, true, seed),
        std::make_shared<nn::BatchNorm2d>(3), std::make_shared<nn::ReLU>());
  };
  auto a = model(1), b = model(2);
  const Var x = f32(data(2 * 2 * 3 * 3, 70), {2, 2, 3, 3});
  (*a)(x);  // a training step's update of the running statistics
  save_safetensors(path, a->state_dict());
  CHECK(values_of(a->state_dict().at("0.weight")) != values_of(b->state_dict().at("0.weight")));
  b->load_state_dict(load_safetensors(path));
  for (const auto& [key, v] : a->state_dict()) {
    INFO(key);
    CHECK(values_of(b->state_dict().at(key)) == values_of(v));
  }
  CHECK(b->state_dict().at("1.num_batches_tracked").item<int64_t>() == 1);
  a->eval();
  b->eval();
  CHECK(values_of((*a)(x)) == values_of((*b)(x)));
}

// ---------------------------------------------------------------- gradients

namespace {

// An In holding a parameter's current values (float32).
In param_input(const Var& p) {
  return In{p.shape(), values_of(p), DType::Float32};
}

// Checks d loss / d m.parameters() (and d loss / d x) against central differences: the check's
// leaves are assigned into the module's parameters, so the wrt of its grad() are the module's
// parameter Vars and the layer computes with them.
void check_layer_gradients(const std::string& name, nn::Module& m,
                           const std::function<Var(const Var&)>& forward, const In& x) {
  std::vector<Var> params = m.parameters();
  std::vector<In> inputs;
  for (const Var& p : params) inputs.push_back(param_input(p));
  inputs.push_back(x);
  check_gradients(name,
                  [&](const std::vector<Var>& v) {
                    for (size_t i = 0; i < params.size(); ++i) params[i].assign(v[i]);
                    Var y = forward(v.back());
                    return y * y;
                  },
                  inputs, {1e-2, 2e-2});
}

}  // namespace

namespace {

// Conv2d, LayerNorm and MultiheadAttention (whose out_proj is a Linear) in one model: one
// forward and backward graph checks the four layers' gradients, and costs fewer kernels to
// compile than four graphs would.
struct Stack : nn::Module {
  std::shared_ptr<nn::Conv2d> conv =
      register_module("conv", std::make_shared<nn::Conv2d>(2, 4, 2, 1, 0, 1, 1, true, 12));
  std::shared_ptr<nn::LayerNorm> norm = register_module("norm", std::make_shared<nn::LayerNorm>(4));
  std::shared_ptr<nn::MultiheadAttention> attn =
      register_module("attn", std::make_shared<nn::MultiheadAttention>(4, 2, true, 13));
  // x [1, 2, 3, 3] -> conv [1, 4, 2, 2]: its 4 channels as tokens of 4 features.
  Var operator()(const Var& x) const {
    const Var h = (*norm)(reshape((*conv)(x), {1, 4, 4}));
    return (*attn)(h, h, h, true);
  }
};

}  // namespace

TEST_CASE("gradients reach every parameter and match finite differences", "[gradients]") {
  Stack model;
  CHECK(names_of(model.named_parameters()) ==
        Names{"conv.weight", "conv.bias", "norm.weight", "norm.bias", "attn.in_proj_weight",
              "attn.in_proj_bias", "attn.out_proj.weight", "attn.out_proj.bias"});
  check_layer_gradients(
      "Conv2d, LayerNorm, MultiheadAttention", model, [&](const Var& x) { return model(x); },
      In{{1, 2, 3, 3}, data(18, 80), DType::Float32});
}

// ---------------------------------------------------------------- modes

TEST_CASE("train/eval: Dropout follows the mode, and a jit function traces again", "[mode]") {
  auto drop = std::make_shared<nn::Dropout>(0.5);
  nn::Sequential net(std::make_shared<nn::Linear>(4, 4, true, 16), drop);
  CHECK(net.training());
  CHECK(drop->training());
  net.eval();  // recursively
  CHECK(!net.training());
  CHECK(!drop->training());
  net.train();
  CHECK(drop->training());

  const Var x = ones({256});
  auto f = jit([drop](const Var& v) { return (*drop)(v); }, "dropout_layer");
  const std::vector<float> trained = f(x).to_vector<float>();
  CHECK(f.traces() == 1);
  size_t zeros_seen = 0;
  for (float v : trained) {
    CHECK((v == 0.0f || v == 2.0f));
    zeros_seen += v == 0.0f;
  }
  CHECK(zeros_seen > 64);
  CHECK(zeros_seen < 192);
  f(x);
  CHECK(f.traces() == 1);  // replayed in the same mode
  drop->eval();
  CHECK(f(x).to_vector<float>() == std::vector<float>(256, 1.0f));
  CHECK(f.traces() == 2);  // the mode changed: traced again
  drop->train();
  const std::vector<float> again = f(x).to_vector<float>();
  CHECK(std::count(again.begin(), again.end(), 0.0f) > 64);
}

// ---------------------------------------------------------------- bad inputs and arguments

TEST_CASE("layers name themselves, the shapes and what is valid in their errors", "[errors]") {
  nn::Linear lin(4, 3);
  std::string m = message_of<ShapeError>([&] { lin(zeros({2, 5})); });
  CHECK_THAT(m, Contains("Linear(4, 3)") && Contains("[2, 5]") && Contains("[.., 4]"));
  nn::Conv2d conv(2, 4, 3);
  m = message_of<ShapeError>([&] { conv(zeros({1, 3, 5, 5})); });
  CHECK_THAT(m, Contains("Conv2d(in_channels = 2)") && Contains("[1, 3, 5, 5]"));
  m = message_of<ShapeError>([&] { nn::BatchNorm2d(3)(zeros({2, 3, 4})); });
  CHECK_THAT(m, Contains("BatchNorm2d(3)") && Contains("[N, 3, H, W]"));
  m = message_of<ShapeError>([&] { nn::LayerNorm(4)(zeros({2, 3})); });
  CHECK_THAT(m, Contains("LayerNorm(4)") && Contains("[2, 3]"));
  m = message_of<DTypeError>([&] { nn::Embedding(5, 2)(zeros({3})); });
  CHECK_THAT(m, Contains("Embedding(5, 2)") && Contains("float32") && Contains("int8, uint8, int16, int32 or int64"));
  nn::MultiheadAttention mha(4, 2);
  m = message_of<ShapeError>([&] { mha(zeros({2, 3, 4}), zeros({2, 5, 4}), zeros({2, 6, 4})); });
  CHECK_THAT(m, Contains("MultiheadAttention(embed_dim = 4)") && Contains("value [2, 6, 4]"));
  m = message_of<ShapeError>([&] { mha(zeros({2, 3, 4}), zeros({1, 5, 4}), zeros({1, 5, 4})); });
  CHECK_THAT(m, Contains("key [1, 5, 4]"));
  m = message_of<Error>([] { nn::MultiheadAttention(6, 4); });
  CHECK_THAT(m, Contains("embed_dim = 6, num_heads = 4") && Contains("divisible"));
  m = message_of<Error>([] { nn::Conv2d(4, 6, 3, 1, 0, 1, 3); });
  CHECK_THAT(m, Contains("groups = 3") && Contains("divide both channel counts"));
  m = message_of<Error>([] { nn::Dropout(1.5); });
  CHECK_THAT(m, Contains("Dropout(p = 1.5") && Contains("0 <= p <= 1"));
  m = message_of<Error>([] { nn::Linear(-1, 3); });
  CHECK_THAT(m, Contains("Linear(in_features = -1"));
}
