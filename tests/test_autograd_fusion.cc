// Backward graphs fuse like forward ones: kernel counts from plan(), peak memory from stats()
// showing that the gradients of matmul and conv2d never allocate their [n,k,m] / 7-D products,
// the contraction schedule on their gradient kernels, and gathers (never reindex_reduce
// scatters) for the gradients of conv2d's input, reshape and transpose; a value used several
// times, and max's gradient where the maximized value is computed again in the gradient's
// kernel. Values are checked against plain loops.
#include <metajit/metajit.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace metajit;

namespace {

bool has_contraction(const KernelInfo& k) {
  return k.source.find("// schedule: contraction") != std::string::npos;
}

bool fuses_reindex_reduce(const std::vector<KernelInfo>& ks) {
  for (const KernelInfo& k : ks)
    for (const std::string& op : k.ops)
      if (op.find("reindex_reduce") != std::string::npos) return true;
  return false;
}

bool has_key(const std::vector<KernelInfo>& ks, const std::string& key) {
  return std::any_of(ks.begin(), ks.end(), [&](const KernelInfo& k) { return k.key == key; });
}

std::string ops_of(const std::vector<KernelInfo>& ks) {
  std::string out;
  for (size_t i = 0; i < ks.size(); ++i) {
    out += "kernel " + std::to_string(i) + ":";
    for (const std::string& op : ks[i].ops) out += " " + op;
    out += "\n";
  }
  return out;
}

// Every element of `got` within rel * scale[i] + abs of ref[i], scale[i] being the sum of the
// magnitudes of the terms that made ref[i]. Reports how many are not, and the worst one.
void check_close(const std::string& what, const std::vector<float>& got,
                 const std::vector<double>& ref, const std::vector<double>& scale, double rel,
                 double abs = 1e-6) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    const double tol = rel * scale[i] + abs;
    const double ratio = std::isfinite(err) ? err / tol : INFINITY;
    if (!(ratio <= 1)) ++bad;
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements off; worst [" << worst << "]: got "
            << got[worst] << ", loops give " << ref[worst] << " (tolerance "
            << rel * scale[worst] + abs << ")");
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("sum(matmul(a,b)*c) with both gradients: <= 4 kernels, contraction, no [n,k,m] product",
          "[autograd][fusion]") {
  const int64_t n = 256;
  Var a = randn({n, n}, 1), b = randn({n, n}, 2), c = randn({n, n}, 3);
  eval({a, b, c});
  Var loss = sum(matmul(a, b) * c);
  std::vector<Var> g = grad(loss, {a, b});
  REQUIRE(g.size() == 2);
  const std::vector<KernelInfo> all = plan({loss, g[0], g[1]});
  INFO(ops_of(all));
  CHECK(all.size() <= 4);
  // Each gradient alone is one contraction kernel (c b^T and a^T c), and the joint plan runs
  // that same kernel.
  for (size_t k = 0; k < 2; ++k) {
    const std::vector<KernelInfo> alone = plan({g[k]});
    INFO("gradient " << k << " alone:\n" << ops_of(alone));
    REQUIRE(alone.size() == 1);
    CHECK(has_contraction(alone[0]));
    CHECK(has_key(all, alone[0].key));
  }
  reset_stats();
  const uint64_t before = stats().bytes_in_use;
  eval({loss, g[0], g[1]});
  const Stats s = stats();
  CHECK(s.kernels_launched <= 4);
  const uint64_t matrix = uint64_t(n * n) * 4, product = uint64_t(n * n * n) * 4;  // 64 MiB
  const uint64_t inputs = 3 * matrix, outputs = 2 * matrix + 4;
  INFO("peak beyond the inputs: " << s.peak_bytes - before << " bytes; inputs " << inputs
                                  << ", outputs " << outputs << ", the product " << product);
  CHECK(s.peak_bytes - before <= 4 * (inputs + outputs));
  CHECK(s.peak_bytes - before < product / 10);
  // Plain loops in double: loss = sum(ab * c), ga = c b^T, gb = a^T c.
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>(),
                           cv = c.to_vector<float>();
  std::vector<double> ab(size_t(n * n), 0), ab_abs(size_t(n * n), 0);
  std::vector<double> ga(size_t(n * n), 0), ga_abs(size_t(n * n), 0);
  std::vector<double> gb(size_t(n * n), 0), gb_abs(size_t(n * n), 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < n; ++k) {
      const double aik = av[size_t(i * n + k)];
      for (int64_t j = 0; j < n; ++j) {
        const size_t ij = size_t(i * n + j), kj = size_t(k * n + j);
        ab[ij] += aik * bv[kj];
        ab_abs[ij] += std::fabs(aik * bv[kj]);
        ga[size_t(i * n + k)] += double(cv[ij]) * bv[kj];
        ga_abs[size_t(i * n + k)] += std::fabs(double(cv[ij]) * bv[kj]);
        gb[kj] += aik * cv[ij];
        gb_abs[kj] += std::fabs(aik * cv[ij]);
      }
    }
  double l = 0, l_abs = 0;
  for (size_t ij = 0; ij < ab.size(); ++ij) {
    l += ab[ij] * cv[ij];
    l_abs += ab_abs[ij] * std::fabs(cv[ij]);
  }
  check_close("loss", {loss.item<float>()}, {l}, {l_abs}, 1e-4);
  check_close("d loss / d a", g[0].to_vector<float>(), ga, ga_abs, 1e-4);
  check_close("d loss / d b", g[1].to_vector<float>(), gb, gb_abs, 1e-4);
}

TEST_CASE("conv2d's gradients: no 7-D product, contraction kernels, the input's as a gather",
          "[autograd][fusion]") {
  const int64_t N = 4, C = 32, H = 32, W = 32, O = 32, K = 3, pad = 1;
  for (int64_t stride : {1, 2}) {
    SECTION("stride " + std::to_string(stride)) {
      const int64_t oh = (H + 2 * pad - K) / stride + 1, ow = (W + 2 * pad - K) / stride + 1;
      Var x = randn({N, C, H, W}, 10 + uint64_t(stride)), w = randn({O, C, K, K}, 20);
      Var c = randn({N, O, oh, ow}, 30);
      eval({x, w, c});
      Var y = conv2d(x, w, stride, pad);
      REQUIRE(y.shape() == Shape{N, O, oh, ow});
      Var loss = sum(y * c);
      std::vector<Var> g = grad(loss, {x, w});
      REQUIRE(g.size() == 2);
      const std::vector<KernelInfo> all = plan({loss, g[0], g[1]});
      INFO(ops_of(all));
      // The forward convolution is its own contraction kernel (a product sum is not fused into
      // the loss's sum, codegen/fusion_planner.cc), then the loss, the two gradients and the
      // weight gradient's copy back into [O, C, KH, KW].
      CHECK(all.size() <= 5);
      // The weight gradient: one contraction kernel summing over (n, oh, ow), perhaps in
      // another axis order followed by a copy of its small result back into [O, C, KH, KW]
      // (autograd/contraction_order.h); the joint plan runs the same kernels.
      const std::vector<KernelInfo> gw = plan({g[1]});
      INFO("weight gradient:\n" << ops_of(gw));
      REQUIRE(!gw.empty());
      CHECK(gw.size() <= 2);
      int reducing = 0;
      for (const KernelInfo& k : gw) {
        CHECK(has_key(all, k.key));
        const bool reduces = std::any_of(k.ops.begin(), k.ops.end(), [](const std::string& op) {
          return op.rfind("reduce", 0) == 0;
        });
        if (!reduces) continue;
        ++reducing;
        CHECK(has_contraction(k));
      }
      CHECK(reducing == 1);
      // The input gradient: a gather of the output gradient (the transposed convolution), not
      // a reindex_reduce scatter; it is a contraction too.
      const std::vector<KernelInfo> gx = plan({g[0]});
      INFO("input gradient:\n" << ops_of(gx));
      CHECK_FALSE(fuses_reindex_reduce(gx));
      CHECK(explain({g[0]}).find("reindex_reduce") == std::string::npos);
      REQUIRE(gx.size() == 1);
      CHECK(has_contraction(gx[0]));
      CHECK(has_key(all, gx[0].key));
      CHECK_FALSE(fuses_reindex_reduce(all));

      reset_stats();
      const uint64_t before = stats().bytes_in_use;
      eval({loss, g[0], g[1]});
      const Stats s = stats();
      const uint64_t seven_d = uint64_t(N * O * C * oh * ow * K * K) * 4;  // [N,O,C,oh,ow,kh,kw]
      const uint64_t inputs = uint64_t(N * C * H * W + O * C * K * K + N * O * oh * ow) * 4;
      const uint64_t outputs = uint64_t(N * C * H * W + O * C * K * K) * 4 + 4;
      INFO("peak beyond the inputs: " << s.peak_bytes - before << " bytes; inputs " << inputs
                                      << ", outputs " << outputs << ", the 7-D product "
                                      << seven_d);
      CHECK(s.peak_bytes - before <= 4 * (inputs + outputs));
      CHECK(s.peak_bytes - before < seven_d / 20);

      // Plain loops in double over every (n, o, oh, ow, c, r, s) tap.
      const std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>(),
                               cv = c.to_vector<float>();
      std::vector<double> gxr(xv.size(), 0), gx_abs(xv.size(), 0);
      std::vector<double> gwr(wv.size(), 0), gw_abs(wv.size(), 0);
      double l = 0, l_abs = 0;
      for (int64_t ni = 0; ni < N; ++ni)
        for (int64_t o = 0; o < O; ++o)
          for (int64_t i = 0; i < oh; ++i)
            for (int64_t j = 0; j < ow; ++j) {
              const double cg = cv[size_t(((ni * O + o) * oh + i) * ow + j)];
              for (int64_t ci = 0; ci < C; ++ci)
                for (int64_t r = 0; r < K; ++r) {
                  const int64_t hi = i * stride - pad + r;
                  if (hi < 0 || hi >= H) continue;
                  for (int64_t q = 0; q < K; ++q) {
                    const int64_t wi = j * stride - pad + q;
                    if (wi < 0 || wi >= W) continue;
                    const size_t xi = size_t(((ni * C + ci) * H + hi) * W + wi);
                    const size_t wk = size_t(((o * C + ci) * K + r) * K + q);
                    l += cg * xv[xi] * wv[wk];
                    l_abs += std::fabs(cg * xv[xi] * wv[wk]);
                    gxr[xi] += cg * wv[wk];
                    gx_abs[xi] += std::fabs(cg * wv[wk]);
                    gwr[wk] += cg * xv[xi];
                    gw_abs[wk] += std::fabs(cg * xv[xi]);
                  }
                }
            }
      check_close("loss", {loss.item<float>()}, {l}, {l_abs}, 1e-4);
      check_close("d loss / d x", g[0].to_vector<float>(), gxr, gx_abs, 1e-4);
      check_close("d loss / d w", g[1].to_vector<float>(), gwr, gw_abs, 1e-4);
    }
  }
}

TEST_CASE("reshape and transpose gradients are gathers, never reindex_reduce",
          "[autograd][fusion]") {
  Var x = randn({6, 8}, 1), x3 = randn({2, 3, 4}, 2);
  Var c1 = randn({4, 12}, 3), c2 = randn({8, 6}, 4), c3 = randn({4, 2, 3}, 5),
      c4 = randn({3, 8}, 6);
  eval({x, x3, c1, c2, c3, c4});
  struct Case {
    std::string what;
    Var g;
    std::vector<float> want;  // the upstream gradient moved back: exact
  };
  std::vector<Case> cases;
  {
    std::vector<float> cv = c1.to_vector<float>();  // the same row-major order as x
    cases.push_back({"reshape [6,8] -> [4,12]", grad(sum(reshape(x, {4, 12}) * c1), {x})[0], cv});
  }
  {
    std::vector<float> cv = c2.to_vector<float>(), want(48);
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 8; ++j) want[size_t(i * 8 + j)] = cv[size_t(j * 6 + i)];
    cases.push_back({"transpose [6,8] {1,0}", grad(sum(transpose(x, {1, 0}) * c2), {x})[0], want});
  }
  {
    // out[a,b,c] = x3[b,c,a]: out shape [4,2,3].
    std::vector<float> cv = c3.to_vector<float>(), want(24);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t cc = 0; cc < 3; ++cc)
        for (int64_t a = 0; a < 4; ++a)
          want[size_t((b * 3 + cc) * 4 + a)] = cv[size_t((a * 2 + b) * 3 + cc)];
    cases.push_back(
        {"transpose [2,3,4] {2,0,1}", grad(sum(transpose(x3, {2, 0, 1}) * c3), {x3})[0], want});
  }
  {
    // A transpose of a reshape: x3 [2,3,4] -> [6,4] -> [4,6] -> [3,8].
    Var t = reshape(transpose(reshape(x3, {6, 4}), {1, 0}), {3, 8});
    std::vector<float> cv = c4.to_vector<float>(), want(24);
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t q = 0; q < 4; ++q) want[size_t(r * 4 + q)] = cv[size_t(q * 6 + r)];
    cases.push_back({"reshape, transpose, reshape", grad(sum(t * c4), {x3})[0], want});
  }
  for (Case& k : cases) {
    INFO(k.what);
    const std::vector<KernelInfo> ks = plan({k.g});
    INFO(ops_of(ks));
    CHECK_FALSE(fuses_reindex_reduce(ks));
    CHECK(explain({k.g}).find("reindex_reduce") == std::string::npos);
    CHECK(ks.size() == 1);
    CHECK(k.g.to_vector<float>() == k.want);
  }
  // The check above can see a scatter: a reindex that reads x[i/2] has no gather for its
  // gradient, which shows up as reindex_reduce.
  Var y = reindex(x, {12, 8}, {"i0/2", "i1"});
  Var gs = grad(sum(y * 2.0), {x})[0];
  CHECK(fuses_reindex_reduce(plan({gs})));
  CHECK(gs.to_vector<float>() == std::vector<float>(48, 4.0f));
}

// max's gradient finds the maximum by comparing each element with it; the element is computed
// again in the gradient's kernel, and must be found there bit for bit.
TEST_CASE("max's gradient reaches the maximum of a value its kernel computes again",
          "[autograd][fusion]") {
  struct Case {
    std::string what;
    Shape shape;
    DType dtype;
    bool use_tanh;  // else exp
  };
  for (const Case& k :
       {Case{"exp, float64 [1, 4]", {1, 4}, DType::Float64, false},
        Case{"tanh, float64 [2, 3, 8, 8]", {2, 3, 8, 8}, DType::Float64, true},
        Case{"exp, float32 [4, 16, 32, 32]", {4, 16, 32, 32}, DType::Float32, false}}) {
    INFO(k.what);
    Var x = k.shape == Shape{1, 4} ? array<double>({0.46, 0.45, 0.05, 1.35}, {1, 4})
                                   : cast(randn(k.shape, 5), k.dtype);
    eval({x});
    Var loss = max(k.use_tanh ? tanh(x) : exp(x));
    Var g = cast(grad(loss, {x})[0], DType::Float64);
    Var xd = cast(x, DType::Float64);
    eval({g, xd});
    const std::vector<double> xv = xd.to_vector<double>(), gv = g.to_vector<double>();
    // Both functions increase: the maximum is at x's largest element (no ties here).
    const size_t at = size_t(std::max_element(xv.begin(), xv.end()) - xv.begin());
    const double t = std::tanh(xv[at]);
    const double want = k.use_tanh ? 1 - t * t : std::exp(xv[at]);
    size_t nonzero = 0;
    for (double v : gv) nonzero += v != 0;
    INFO("the maximum is element " << at << "; its gradient " << gv[at] << ", want " << want);
    CHECK(nonzero == 1);
    CHECK(std::fabs(gv[at] - want) <= 1e-5 * std::fabs(want));
  }
}

TEST_CASE("a value used several times gets the sum of its gradients in one fused kernel",
          "[autograd][fusion]") {
  Var x = randn({37, 19}, 7);
  eval({x});
  const std::vector<float> xv = x.to_vector<float>();
  SECTION("y = x*x + sin(x) + x") {
    Var loss = sum(x * x + sin(x) + x);
    Var g = grad(loss, {x})[0];
    const std::vector<KernelInfo> ks = plan({g});
    INFO(ops_of(ks));
    CHECK(ks.size() == 1);
    CHECK(plan({loss, g}).size() <= 2);
    const std::vector<float> gv = g.to_vector<float>();
    std::vector<double> want, scale;
    for (float v : xv) {
      want.push_back(2.0 * v + std::cos(double(v)) + 1);
      scale.push_back(2.0 * std::fabs(v) + 2);
    }
    check_close("2x + cos(x) + 1", gv, want, scale, 1e-6);
  }
  SECTION("h = tanh(x) used three times") {
    Var h = tanh(x);
    Var loss = sum(h * h + exp(h) + h);
    Var g = grad(loss, {x})[0];
    const std::vector<KernelInfo> ks = plan({g});
    INFO(ops_of(ks));
    CHECK(ks.size() == 1);
    const std::vector<float> gv = g.to_vector<float>();
    std::vector<double> want, scale;
    for (float v : xv) {
      const double t = std::tanh(double(v));
      want.push_back((2 * t + std::exp(t) + 1) * (1 - t * t));
      scale.push_back(6);
    }
    check_close("(2h + exp(h) + 1)(1 - h^2)", gv, want, scale, 1e-6);
  }
}
