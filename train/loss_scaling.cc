// Dynamic loss scaling (include/metajit/train.h, set_loss_scaling): torch.cuda.amp.GradScaler's
// rule, with the skip decided inside the step's plan (a where() over the old and new values)
// so that a skipped step runs the same kernels as any other and compiles nothing.
#include <metajit/autograd.h>
#include <metajit/composite.h>
#include <metajit/error.h>
#include <metajit/ops.h>
#include <metajit/train.h>

#include <cmath>
#include <string>

#include "train/optimizer_core.h"

namespace metajit {
namespace detail {

ScaledGrads scaled_grads(const Var& loss, const std::vector<Var>& params, const Var& scale) {
  // The scale in the loss's dtype: a Float64 scale would promote a float32 loss, and the
  // backward with it, to float64.
  ScaledGrads out;
  out.grads = grad(loss * cast(scale, loss.dtype()), params);
  const Var inverse = 1.0 / cast(scale, DType::Float64);
  // g * 0 is 0 for every finite g and NaN for inf and NaN (no -ffast-math in kernels,
  // runtime/toolchain.cc), so one sum of them all is NaN exactly when a gradient is not finite.
  Var probe = scalar(0, DType::Float32);
  for (Var& g : out.grads) {
    g = g * cast(inverse, g.dtype());
    probe = probe + cast(sum(g * 0.0), DType::Float32);
  }
  out.found_nonfinite = probe != probe;
  return out;
}

OptimizerUpdate unless_nonfinite(const Var& found_nonfinite, const std::vector<Var>& params,
                                 const std::vector<Var>& state, OptimizerUpdate u) {
  for (size_t i = 0; i < u.params.size(); ++i)
    u.params[i] = where(found_nonfinite, params[i], u.params[i]);
  for (size_t j = 0; j < u.state.size(); ++j)
    u.state[j] = where(found_nonfinite, state[j], u.state[j]);
  return u;
}

void advance_loss_scale(OptimizerCore& core, bool found_nonfinite) {
  const LossScaling& s = *core.scaling;
  if (found_nonfinite) {
    core.scale *= s.backoff_factor;
    core.steps_since_backoff = 0;
    ++core.skipped;
    return;
  }
  ++core.steps;
  if (++core.steps_since_backoff == s.growth_interval) {
    // GradScaler keeps a scale that would overflow float32 where it was.
    const double grown = core.scale * s.growth_factor;
    if (std::isfinite(float(grown))) core.scale = grown;
    core.steps_since_backoff = 0;
  }
}

Var scale_arg(const OptimizerCore& core) {
  return core.scaling ? scalar_arg(core.scale) : array(std::vector<double>{}, {0});
}

}  // namespace detail

void Optimizer::set_loss_scaling(std::optional<LossScaling> scaling) {
  detail::OptimizerCore& c = *core_;
  if (scaling) {
    const std::string op = c.kind + ".set_loss_scaling";
    auto bad = [&](const char* what, double v, const char* valid) {
      throw Error(op + ": " + what + " = " + std::to_string(v) + " is invalid; it must be " +
                  valid);
    };
    const LossScaling& s = *scaling;
    if (!(std::isfinite(s.init_scale) && s.init_scale > 0 && std::isfinite(float(s.init_scale))))
      bad("init_scale", s.init_scale, "finite in float32 and > 0");
    if (!(std::isfinite(s.growth_factor) && s.growth_factor > 1))
      bad("growth_factor", s.growth_factor, "> 1");
    if (!(s.backoff_factor > 0 && s.backoff_factor < 1))
      bad("backoff_factor", s.backoff_factor, "in (0, 1)");
    if (s.growth_interval < 1) bad("growth_interval", double(s.growth_interval), ">= 1");
  }
  c.scaling = scaling;
  c.scale = scaling ? scaling->init_scale : 1.0;
  c.steps_since_backoff = 0;
  c.skipped = 0;
}

double Optimizer::loss_scale() const {
  return core_->scale;
}

int64_t Optimizer::skipped_steps() const {
  return core_->skipped;
}

}  // namespace metajit
