// The loop of README "Lazy evaluation" (samples/lazy_training_loop.cc): an MLP 1-10-1 fitting
// y = x^2 on batches of 50, its parameters updated with assign() from lazy expressions (SGD, lr
// 0.1), only the loss read each step. Two rows of one run: the median step time over steps
// 5..15 and over steps 995..1005. Equal rows mean a step costs the same at any point of the
// run; before values were kept (issue 25) step 1,000 took 70x step 10.
#include "bench/lazy_loop.h"

#include <metajit/metajit.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <vector>

namespace bench {
namespace {

using metajit::Var;

constexpr int kSteps = 1006;

// The median of the 11 steps from `first` on.
double median_of_steps(const std::vector<double>& step_s, size_t first) {
  std::vector<double> v(step_s.begin() + long(first), step_s.begin() + long(first + 11));
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Row row_of(const std::string& workload, double seconds, int reps, const std::string& note) {
  Row r;
  r.workload = workload;
  r.impl = "metajit";
  r.seconds = seconds;
  r.reps = reps;
  r.note = note;
  return r;
}

}  // namespace

void run_lazy_loop(Report& report, const Options& opt) {
  const std::string early = "lazy loop MLP 1-10-1 sgd step 10",
                    late = "lazy loop MLP 1-10-1 sgd step 1000";
  if (!opt.wanted(early) && !opt.wanted(late)) return;
  std::cerr << "bench: lazy loop ..." << std::endl;
  Var w1 = metajit::randn({1, 10}, 11) * 0.5, b1 = metajit::zeros({10}),
      w2 = metajit::randn({10, 1}, 12) * 0.5, b2 = metajit::zeros({1});
  metajit::eval({w1, b1, w2, b2});
  std::vector<Var> ps = {w1, b1, w2, b2};
  std::vector<double> step_s(kSteps);
  float loss_value = 0;
  for (int i = 0; i < kSteps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Var x = metajit::rand({50, 1}, uint64_t(1000 + i)), y = x * x;
    Var pred = metajit::matmul(metajit::relu(metajit::matmul(x, ps[0]) + ps[1]), ps[2]) + ps[3];
    Var loss = metajit::mean((pred - y) * (pred - y));
    std::vector<Var> gs = metajit::grad(loss, ps);
    for (size_t k = 0; k < ps.size(); ++k) ps[k].assign(ps[k] - gs[k] * 0.1);
    loss_value = loss.item<float>();
    step_s[size_t(i)] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double at10 = median_of_steps(step_s, 5), at1000 = median_of_steps(step_s, 995);
  const std::string note = "median of 11 steps of one run of " + std::to_string(kSteps) +
                           " (build, grad, assign, read the loss); final loss " +
                           std::to_string(loss_value);
  if (opt.wanted(early)) report.rows.push_back(row_of(early, at10, 11, note));
  if (opt.wanted(late)) {
    Row r = row_of(late, at1000, 11, note);
    r.target = "step 1000 within 1.5x of step 10 (flat)";
    r.measured = std::to_string(at1000 / at10).substr(0, 4) + "x of step 10";
    r.met = at1000 <= 1.5 * at10;
    report.rows.push_back(r);
  }
}

}  // namespace bench
