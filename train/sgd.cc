// SGD with momentum, Nesterov momentum and L2 weight decay, as torch.optim.SGD computes it
// (include/metajit/train.h).
#include <metajit/composite.h>
#include <metajit/error.h>
#include <metajit/train.h>

#include "train/optimizer_core.h"

namespace metajit {
namespace {

struct SGDCore : detail::OptimizerCore {
  double momentum = 0, weight_decay = 0;
  bool nesterov = false;

  OptimizerUpdate update(const std::vector<Var>& params, const std::vector<Var>& grads,
                         const std::vector<Var>& state, const Var& lr,
                         const Var& /*step*/) const override {
    OptimizerUpdate u;
    for (size_t i = 0; i < params.size(); ++i) {
      const Var& p = params[i];
      Var g = grads[i];
      if (weight_decay != 0) g = g + p * weight_decay;
      if (momentum != 0) {
        // The buffer starts at zeros, so the first step's buffer is g exactly (PyTorch's
        // "buf = g on the first step") and no step-dependent branch enters the plan.
        Var buf = state[i] * momentum + g;
        u.state.push_back(buf);
        g = nesterov ? g + buf * momentum : buf;
      }
      u.params.push_back(p - cast(lr, p.dtype()) * g);
    }
    return u;
  }
};

}  // namespace

SGD::SGD(std::vector<Var> params, double lr, double momentum, double weight_decay, bool nesterov)
    : Optimizer(std::make_shared<SGDCore>()) {
  auto& c = static_cast<SGDCore&>(*core_);
  c.kind = "SGD";
  detail::check_params(params, c.kind);
  detail::check_hyperparameter(c.kind, "lr", lr, 0);
  detail::check_hyperparameter(c.kind, "momentum", momentum, 0);
  detail::check_hyperparameter(c.kind, "weight_decay", weight_decay, 0);
  if (nesterov && momentum == 0)
    throw Error("SGD: nesterov = true needs a momentum > 0 (momentum is 0)");
  c.momentum = momentum;
  c.weight_decay = weight_decay;
  c.nesterov = nesterov;
  c.lr = lr;
  c.params = std::move(params);
  if (momentum != 0)
    for (const Var& p : c.params) c.state.push_back(zeros(p.shape(), p.dtype()));
}

}  // namespace metajit
