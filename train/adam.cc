// Adam with bias correction and L2 weight decay, as torch.optim.Adam computes it (no amsgrad;
// include/metajit/train.h).
#include <metajit/composite.h>
#include <metajit/train.h>

#include "train/optimizer_core.h"

namespace metajit {
namespace {

struct AdamCore : detail::OptimizerCore {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;

  OptimizerUpdate update(const std::vector<Var>& params, const std::vector<Var>& grads,
                         const std::vector<Var>& state, const Var& lr,
                         const Var& step) const override {
    // The bias corrections depend on the step number, a 0-d Var: one plan serves every step.
    // In float64 whatever the Vars' dtype (0.999 rounded to float32 is off by 1e-5 relative).
    const Var t = cast(step, DType::Float64);
    Var step_size = cast(lr, DType::Float64) / (1.0 - pow(full({}, beta1, DType::Float64), t));
    Var correction2_sqrt = sqrt(1.0 - pow(full({}, beta2, DType::Float64), t));
    const size_t n = params.size();
    OptimizerUpdate u;
    u.state.resize(2 * n);
    for (size_t i = 0; i < n; ++i) {
      const Var& p = params[i];
      const DType dt = p.dtype();
      Var g = grads[i];
      if (weight_decay != 0) g = g + p * weight_decay;
      Var m = state[i] * beta1 + g * (1 - beta1);
      Var v = state[n + i] * beta2 + g * g * (1 - beta2);
      Var denom = sqrt(v) / cast(correction2_sqrt, dt) + eps;
      u.params.push_back(p - cast(step_size, dt) * m / denom);
      u.state[i] = m;
      u.state[n + i] = v;
    }
    return u;
  }
};

}  // namespace

Adam::Adam(std::vector<Var> params, double lr, double beta1, double beta2, double eps,
           double weight_decay)
    : Optimizer(std::make_shared<AdamCore>()) {
  auto& c = static_cast<AdamCore&>(*core_);
  c.kind = "Adam";
  detail::check_params(params, c.kind);
  detail::check_hyperparameter(c.kind, "lr", lr, 0);
  detail::check_hyperparameter(c.kind, "beta1", beta1, 0, 1, true);
  detail::check_hyperparameter(c.kind, "beta2", beta2, 0, 1, true);
  detail::check_hyperparameter(c.kind, "eps", eps, 0);
  detail::check_hyperparameter(c.kind, "weight_decay", weight_decay, 0);
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.eps = eps;
  c.weight_decay = weight_decay;
  c.lr = lr;
  c.params = std::move(params);
  for (const Var& p : c.params) c.state.push_back(zeros(p.shape(), p.dtype()));
  for (const Var& p : c.params) c.state.push_back(zeros(p.shape(), p.dtype()));
}

}  // namespace metajit
