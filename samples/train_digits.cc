// Trains a 64-64-10 MLP on the UCI optical digits (data/digits/) with the whole training step
// (forward, backward, Adam or SGD update) as one jit function, and reports per epoch the loss,
// the held-out accuracy, microseconds per step, traces and compiles (README "Training").
//
//   ./train_digits [--sgd|--adam] [--lr LR] [--epochs N] [--autocast bfloat16|float16]
//                  [--compare] [--distributed] [--check]
//   mpirun --oversubscribe --bind-to none -np 2 ./train_digits --distributed --check
//   ./train_digits --wrong-way   the same steps with the jit step created anew every step
//
// --check (the registered test): exit status 1 unless held-out accuracy >= 95% and nothing
// compiled after the first epoch.
#include <cstring>

#include "digits_data.h"

using namespace metajit;

// The mistake the compiled-again warning is about, measured against the right way: the train
// step re-created inside the loop traces and plans again every step (it still compiles
// nothing: the kernels are in memory), then the same number of steps with one step reused.
static int compare_wrong_and_right(int steps) {
  using Clock = std::chrono::steady_clock;
  const digits::Data data = digits::load();
  std::vector<int64_t> order(size_t(data.train.n));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  auto [x, y] = digits::batch(data.train, order, 0, 64);
  eval({x, y});
  auto loss_of = [](const digits::MLP& m) {
    return [&m](const Var& xb, const Var& yb) { return cross_entropy(m(xb), yb); };
  };
  for (int right_way = 0; right_way < 2; ++right_way) {
    digits::MLP model({64, 64, 10});
    Adam opt(model.params(), 1e-3);
    auto step = opt.jit_step(loss_of(model), "train_step");
    step(x, y);  // traces, and compiles or loads the kernels: not timed
    reset_stats();
    uint64_t traces = 0;
    const auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      if (right_way) {
        step(x, y);  // the step created once, reused
      } else {
        auto again = opt.jit_step(loss_of(model), "train_step");  // the mistake
        again(x, y);
        traces += again.traces();
      }
    }
    if (right_way) traces = step.traces() - 1;
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / steps;
    std::printf("%s: %d steps, %llu traces, %llu compiles, %.1f us/step\n",
                right_way ? "right way (step created once)" : "wrong way (step created every step)",
                steps, (unsigned long long)traces, (unsigned long long)stats().kernels_compiled,
                us);
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], "--wrong-way") == 0) return compare_wrong_and_right(200);
    const digits::TrainOptions o = digits::parse_options(argc, argv, 30);
    return digits::train<digits::MLP>("train_digits (MLP 64-64-10)", o,
                                      std::vector<int64_t>{64, 64, 10});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_digits: %s\n", e.what());
    return 2;
  }
}
