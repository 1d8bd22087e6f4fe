// Jittor's lazy training loop (python/jittor/test/test_example.py) in metajit: an MLP 1-10-1
// fitting y = x^2, its parameters updated with assign() from lazy expressions, only the loss
// read at each step. Prints, every `every` steps, the lazy graph (stats(): live Vars, pending and
// realized nodes), the memory in use, the kernels the step launched and the time per step: all
// flat when each value is computed once (README "Lazy evaluation").
//
//   ./lazy_training_loop [steps] [every]     (default 1000 steps, a row every 100)
//
// Exits 1 if the graph, the memory or the kernels per step grow after step 3, or the loss does
// not fall.
#include <metajit/metajit.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace metajit;
using Clock = std::chrono::steady_clock;

namespace {

struct Reading {
  Stats stats;
  uint64_t kernels = 0;  // launched by the step
  double ms = 0;         // the step's time
};

bool same_footprint(const Reading& a, const Reading& b) {
  return a.stats.live_vars == b.stats.live_vars && a.stats.pending_nodes == b.stats.pending_nodes &&
         a.stats.realized_nodes == b.stats.realized_nodes &&
         a.stats.bytes_in_use == b.stats.bytes_in_use && a.kernels == b.kernels;
}

void print_row(long step, float loss, const Reading& r) {
  std::printf("%6ld  %9.6f  %9llu  %6llu  %8llu  %9llu  %7llu  %8.3f\n", step, double(loss),
              (unsigned long long)r.stats.bytes_in_use, (unsigned long long)r.stats.live_vars,
              (unsigned long long)r.stats.pending_nodes, (unsigned long long)r.stats.realized_nodes,
              (unsigned long long)r.kernels, r.ms);
}

}  // namespace

int main(int argc, char** argv) {
  const long steps = argc > 1 ? std::atol(argv[1]) : 1000;
  const long every = argc > 2 ? std::atol(argv[2]) : 100;
  if (steps < 5 || every < 1) {
    std::fprintf(stderr, "usage: lazy_training_loop [steps >= 5] [every >= 1]\n");
    return 2;
  }
  Var w1 = randn({1, 10}, 11) * 0.5, b1 = zeros({10}), w2 = randn({10, 1}, 12) * 0.5,
      b2 = zeros({1});
  eval({w1, b1, w2, b2});
  std::vector<Var> ps = {w1, b1, w2, b2};
  std::printf("  step       loss      bytes   Vars   pending   realized  kernels   ms/step\n");
  Reading at_step3;
  float first_loss = 0, loss_value = 0;
  bool grew = false;
  for (long i = 0; i < steps; ++i) {
    const uint64_t launched = stats().kernels_launched;
    const auto t0 = Clock::now();
    Var x = rand({50, 1}, uint64_t(1000 + i)), y = x * x;
    Var pred = matmul(relu(matmul(x, ps[0]) + ps[1]), ps[2]) + ps[3];
    Var loss = mean((pred - y) * (pred - y));
    std::vector<Var> gs = grad(loss, ps);
    for (size_t k = 0; k < ps.size(); ++k) ps[k].assign(ps[k] - gs[k] * 0.1);
    loss_value = loss.item<float>();  // only the loss is read
    Reading r{stats(), stats().kernels_launched - launched,
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count()};
    if (i == 0) first_loss = loss_value;
    if (i == 3) at_step3 = r;
    if (i > 3 && !same_footprint(r, at_step3)) grew = true;
    if (i % every == 0 || i == steps - 1) print_row(i, loss_value, r);
  }
  if (grew) std::printf("the lazy graph, the memory or the kernels per step grew after step 3\n");
  if (!(loss_value < first_loss)) std::printf("the loss did not fall\n");
  return grew || !(loss_value < first_loss) ? 1 : 0;
}
