// Learning-rate schedules: plain functions of the step number, for Optimizer::set_lr() (which
// compiles nothing; include/metajit/train.h).
#include <metajit/error.h>
#include <metajit/train.h>

#include <cmath>
#include <numbers>
#include <string>

namespace metajit {

double cosine_lr(int64_t step, double base_lr, int64_t warmup_steps, int64_t total_steps,
                 double min_lr) {
  if (step < 0 || warmup_steps < 0 || total_steps < warmup_steps || !(base_lr >= 0) ||
      !(min_lr >= 0) || !std::isfinite(base_lr) || !std::isfinite(min_lr))
    throw Error("cosine_lr: step " + std::to_string(step) + ", base_lr " + std::to_string(base_lr) +
                ", warmup_steps " + std::to_string(warmup_steps) + ", total_steps " +
                std::to_string(total_steps) + ", min_lr " + std::to_string(min_lr) +
                "; expected step >= 0, 0 <= warmup_steps <= total_steps and finite rates >= 0");
  if (step < warmup_steps) return base_lr * double(step) / double(warmup_steps);
  if (step >= total_steps) return min_lr;
  const double progress = double(step - warmup_steps) / double(total_steps - warmup_steps);
  return min_lr + 0.5 * (base_lr - min_lr) * (1 + std::cos(std::numbers::pi * progress));
}

}  // namespace metajit
