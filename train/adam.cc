// Adam with bias correction and L2 weight decay, as torch.optim.Adam computes it, and AdamW, its
// decoupled weight decay, as torch.optim.AdamW does (no amsgrad; include/metajit/train.h).
#include <metajit/composite.h>
#include <metajit/train.h>

#include "train/optimizer_core.h"

namespace metajit {
namespace {

struct AdamCore : detail::OptimizerCore {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW: p *= 1 - lr * weight_decay before the step, no L2 term

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
      Var decayed = p;
      if (weight_decay != 0 && decoupled)
        decayed = p * (1.0 - cast(lr, dt) * weight_decay);
      else if (weight_decay != 0)
        g = g + p * weight_decay;
      Var m = state[i] * beta1 + g * (1 - beta1);
      Var v = state[n + i] * beta2 + g * g * (1 - beta2);
      Var denom = sqrt(v) / cast(correction2_sqrt, dt) + eps;
      u.params.push_back(decayed - cast(step_size, dt) * m / denom);
      u.state[i] = m;
      u.state[n + i] = v;
    }
    return u;
  }
};

// Both constructors: the checks (naming `kind`), the hyperparameters and zeroed moments.
void init_adam(AdamCore& c, const char* kind, bool decoupled, std::vector<Var> params, double lr,
               double beta1, double beta2, double eps, double weight_decay) {
  c.kind = kind;
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
  c.decoupled = decoupled;
  c.lr = lr;
  c.params = std::move(params);
  for (const Var& p : c.params) c.state.push_back(zeros(p.shape(), p.dtype()));
  for (const Var& p : c.params) c.state.push_back(zeros(p.shape(), p.dtype()));
}

}  // namespace

Adam::Adam(std::vector<Var> params, double lr, double beta1, double beta2, double eps,
           double weight_decay)
    : Optimizer(std::make_shared<AdamCore>()) {
  init_adam(static_cast<AdamCore&>(*core_), "Adam", false, std::move(params), lr, beta1, beta2, eps,
            weight_decay);
}

AdamW::AdamW(std::vector<Var> params, double lr, double beta1, double beta2, double eps,
             double weight_decay)
    : Optimizer(std::make_shared<AdamCore>()) {
  init_adam(static_cast<AdamCore&>(*core_), "AdamW", true, std::move(params), lr, beta1, beta2, eps,
            weight_decay);
}

}  // namespace metajit
