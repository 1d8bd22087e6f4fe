// Reverse-mode autograd in one run (README "Autograd"): grad() builds the backward graph as a
// lazy graph of meta-ops, eval() runs forward and backward as one plan, value_and_grad() under
// jit() is a training step that replays, and to_dot() draws a plan for Graphviz.
//
//   ./autograd_tour [DIR]   with DIR: also writes DIR/softmax_grad.dot and DIR/conv2d_train.dot
//                           (the pictures of README "Autograd": dot -Tsvg F.dot -o F.svg)
#include <metajit/metajit.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace metajit;

namespace {

void write_dot(const std::string& path, const std::vector<Var>& vars) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << to_dot(vars);
  if (!out.flush()) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::printf("   wrote %s\n", path.c_str());
}

// sum(softmax(x, 1) * w): the softmax example's loss.
Var softmax_loss(const Var& x, const Var& w) {
  return sum(softmax(x, 1) * w);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "";
  int failures = 0;

  std::printf("== 1. grad: d sum(softmax(x) * w) / dx\n");
  Var x = randn({4, 8}, 1);
  Var w = rand({4, 8}, 2);
  Var loss = softmax_loss(x, w);
  Var dx = grad(loss, {x})[0];  // lazy: nothing has run
  std::printf("   forward and backward plan as %zu kernels\n", plan({loss, dx}).size());
  if (!dir.empty()) write_dot(dir + "/softmax_grad.dot", {loss, dx});
  eval({loss, dx});  // one plan for both
  std::vector<float> xs = x.to_vector<float>(), g = dx.to_vector<float>();
  // softmax(x + c) = softmax(x): each row of the gradient sums to 0.
  double worst_row = 0;
  for (int r = 0; r < 4; ++r) {
    double s = 0;
    for (int c = 0; c < 8; ++c) s += g[size_t(r * 8 + c)];
    worst_row = std::max(worst_row, std::fabs(s));
  }
  // A central difference on x[0][0].
  const float h = 1e-2f;
  std::vector<float> plus = xs, minus = xs;
  plus[0] += h;
  minus[0] -= h;
  const double numeric = (softmax_loss(array<float>(plus, {4, 8}), w).item<float>() -
                          softmax_loss(array<float>(minus, {4, 8}), w).item<float>()) /
                         (2.0 * h);
  std::printf("   loss %.5f; dx[0][0] %.5f, central difference %.5f; largest row sum %.1e\n",
              loss.item<float>(), g[0], numeric, worst_row);
  if (std::fabs(numeric - g[0]) > 1e-3 || worst_row > 1e-5) {
    std::printf("   MISMATCH\n");
    ++failures;
  }

  std::printf("\n== 2. value_and_grad under jit: fitting a = b @ w by gradient descent\n");
  Var b = randn({32, 3}, 3);
  Var w_true = array<float>({1.5f, -2.0f, 0.5f}, {3, 1});
  Var a = matmul(b, w_true);
  auto mse = [](const Var& wt, const Var& in, const Var& target) {
    return mean(pow(matmul(in, wt) - target, 2.0));
  };
  // {mse(wt, in, target), d mse / d wt}; traced once, then replayed.
  auto step = jit(value_and_grad(mse, {0}), "fit_step");
  Var wt = zeros({3, 1});
  float first = 0, last = 0;
  for (int i = 0; i < 60; ++i) {
    std::vector<Var> out = step(wt, b, a);
    wt = wt - 0.3 * out[1];
    last = out[0].item<float>();
    if (i == 0) first = last;
  }
  std::vector<float> fitted = wt.to_vector<float>();
  std::printf("   loss %.5f -> %.2e after 60 steps; w = [%.3f, %.3f, %.3f] (true [1.5, -2, 0.5])\n",
              first, last, fitted[0], fitted[1], fitted[2]);
  if (!(last < 1e-3f * first)) {
    std::printf("   DID NOT CONVERGE\n");
    ++failures;
  }

  std::printf("\n== 3. a conv2d training graph: d loss / d weights and d loss / d input\n");
  Var img = randn({4, 3, 8, 8}, 4);
  Var kernel = randn({8, 3, 3, 3}, 5);
  Var target = rand({4, 8, 8, 8}, 6);
  Var conv_loss = sum(relu(conv2d(img, kernel, 1, 1)) * target);
  std::vector<Var> grads = grad(conv_loss, {kernel, img});
  std::printf(
      "   forward and backward plan as %zu kernels; the input gradient is a transposed "
      "convolution (a gather, no scatter)\n",
      plan({conv_loss, grads[0], grads[1]}).size());
  if (!dir.empty()) write_dot(dir + "/conv2d_train.dot", {conv_loss, grads[0], grads[1]});
  eval({conv_loss, grads[0], grads[1]});
  std::vector<float> dw = grads[0].to_vector<float>();
  double norm = 0;
  for (float v : dw) norm += double(v) * v;
  std::printf("   loss %.3f, |d loss / d weights| %.3f\n", conv_loss.item<float>(),
              std::sqrt(norm));

  return failures == 0 ? 0 : 1;
}
