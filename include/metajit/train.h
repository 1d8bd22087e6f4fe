// Training: optimizers over parameter Vars, their updates as pure functions, and whole train
// steps as one jit function (docs/api.md "Training", README "Training").
//
//   Var w1 = randn({64, 64}, 1) * 0.1, b1 = zeros({64});   // parameters: ordinary Vars
//   Var w2 = randn({64, 10}, 2) * 0.1, b2 = zeros({10});
//   Adam opt({w1, b1, w2, b2}, 1e-3);
//   // The right way: build the step once, call it every batch.
//   auto train_step = opt.jit_step([&](const Var& x, const Var& y) {
//     return cross_entropy(matmul(relu(matmul(x, w1) + b1), w2) + b2, y);
//   }, "train_step");
//   for (...) { Var loss = train_step(xb, yb); }   // w1, b1, ... and Adam's state are updated
//
// - step(loss): grad(loss, params), the update of every parameter and of the optimizer's state,
//   then ONE evaluation of the loss, the new parameters and the new state: forward, backward and
//   the updates run as one plan, and the updates fuse with the backward (not a kernel per op per
//   parameter). Afterwards every parameter Var (and every copy of it: Var::assign) holds its new
//   value and `loss` its value. The graph behind them is dropped, so memory is flat from step to
//   step.
// - jit_step(loss_fn, name): a callable with loss_fn's parameters (each a Var) that runs a whole
//   step (forward, backward, every update) as one jit function: it traces once per signature of
//   (its arguments, the parameters, the state), and replays trace and compile nothing. While it
//   is traced, the parameter Vars loss_fn captures stand for the trace's placeholders, so loss_fn
//   simply uses the model's Vars. Create it once and reuse it: a jit_step created again for the
//   same loss_fn and optimizer gets the compiled-again warning (include/metajit/jit.h).
// - The learning rate and the step count are arguments of the kernels, never part of a kernel
//   key: set_lr() compiles nothing, and neither does the bias correction changing every step.
// - Formulas are PyTorch's (torch.optim.SGD, torch.optim.Adam): see SGD and Adam below.
// - update(): the same update as a pure function of Vars (it builds a graph and evaluates
//   nothing), for train steps written by hand inside any jit function.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "autograd.h"
#include "jit.h"
#include "var.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

// New parameters and optimizer state from one update (Optimizer::update).
struct OptimizerUpdate {
  std::vector<Var> params;
  std::vector<Var> state;
};

// Dynamic loss scaling (Optimizer::set_loss_scaling), torch.cuda.amp.GradScaler's defaults.
struct LossScaling {
  double init_scale = 65536, growth_factor = 2, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

namespace detail {

struct OptimizerCore;

// The jit function of a train step: the user's loss function over its own `num_user_args`
// arguments, then the parameters, the state, the learning rate, the step count, the clipping
// norm and the loss scale.
std::shared_ptr<JitCore> make_train_jit(const std::shared_ptr<OptimizerCore>& core,
                                        JitTraceFn loss_fn, size_t num_user_args, std::string name,
                                        std::string identity);
Var call_train_jit(OptimizerCore& core, JitCore& jit, const Var* const* user_args,
                   size_t num_user_args);

template <class F, class Args>
class TrainStep;
template <class F, class... A>
class TrainStep<F, std::tuple<A...>> {
 public:
  static constexpr bool kHasLists = (is_var_list_param_v<A> || ...);
  TrainStep(std::shared_ptr<OptimizerCore> core, F fn, std::string name) : core_(std::move(core)) {
    auto shared_fn = std::make_shared<F>(std::move(fn));
    if constexpr (kHasLists) {
      layouts_ = std::make_shared<JitCoresByLayout>(
          [opt = core_, shared_fn, name](const std::vector<size_t>& layout) {
            std::string layout_text;
            for (size_t n : layout) layout_text += " " + std::to_string(n);
            const ParamSpans<A...> spans(layout);
            return make_train_jit(opt, trace_of_layout<Var, A...>(shared_fn, spans), spans.total,
                                  name, typeid(F).name() + (" lists" + layout_text));
          },
          name);
    } else {
      jit_ = make_train_jit(core_, trace_of_layout<Var, A...>(shared_fn, ParamSpans<A...>({})),
                            sizeof...(A), std::move(name), typeid(F).name());
    }
  }
  // Runs one step on these arguments; returns the loss (evaluated).
  Var operator()(const CallArg<A>&... args) const {
    if constexpr (kHasLists) {
      const FlatArgs flat = flatten_all(args...);
      return call_train_jit(*core_, layouts_->core_for(flat.list_lengths), flat.vars.data(),
                            flat.vars.size());
    } else {
      const Var* in[sizeof...(A) + 1] = {&args...};
      return call_train_jit(*core_, *jit_, in, sizeof...(A));
    }
  }
  // How many times the step has been traced (one per signature).
  uint64_t traces() const { return kHasLists ? layouts_->traces() : jit_traces(*jit_); }

 private:
  std::shared_ptr<OptimizerCore> core_;
  std::shared_ptr<JitCore> jit_;               // without list parameters
  std::shared_ptr<JitCoresByLayout> layouts_;  // with
};

}  // namespace detail

// What SGD and Adam share: the parameters, the state, the learning rate and the step count.
class Optimizer {
 public:
  // One training step on `loss` (see the file comment). Error when loss was already evaluated
  // (build it, then call step).
  void step(const Var& loss);
  void set_lr(double lr);  // compiles nothing
  double lr() const;
  // Global-norm gradient clipping in every step (torch.nn.utils.clip_grad_norm_): the raw
  // gradients, before weight decay, times min(1, max_norm / (total norm + 1e-6)); 0 = off (the
  // default). Inside the step's one plan. A new norm compiles nothing; turning clipping on or
  // off traces a jit step once more (its signature changes). update() does not clip.
  void set_max_grad_norm(double max_norm);
  double max_grad_norm() const;
  // Data-parallel training over the ranks of the MPI world (include/metajit/distributed.h; link
  // metajit::distributed and call dist::init() first, else an Error says so). Turning it on
  // broadcasts the parameters from rank 0 now; from then on every step and jit step averages
  // the gradients over the ranks before clipping and the update, by one all_reduce (Mean) per
  // bucket of about `bucket_bytes` of gradients of one dtype (PyTorch DDP's default: 25 MiB),
  // never one per parameter. As in DDP, buckets fill from the last parameter back, the first
  // one of at most 1 MiB, and on more than one rank each starts as soon as its gradients exist,
  // while the rest of the backward runs (README "Distributed training"). With loss scaling, a step is skipped on every rank when any rank
  // found an inf or NaN. Turning it on or off traces a jit step once more.
  void set_data_parallel(bool on = true, int64_t bucket_bytes = int64_t(25) << 20);
  bool data_parallel() const;
  // Dynamic loss scaling for float16 training (GradScaler's semantics), in every step and jit
  // step; nullopt turns it off (the default), a value turns it on and starts at its init_scale.
  // The gradients are taken of loss * scale and multiplied by 1 / scale; when any of them holds
  // an inf or NaN the step is skipped: the parameters, the state and steps() keep their values
  // and the scale is multiplied by backoff_factor. After growth_interval steps in a row without
  // one, it is multiplied by growth_factor. The decision is made inside the step's one plan and
  // the scale is a kernel argument: a new scale and a skipped step compile nothing; turning
  // scaling on or off traces a jit step once more. Error for init_scale <= 0, growth_factor
  // <= 1, backoff_factor outside (0, 1) or growth_interval < 1.
  void set_loss_scaling(std::optional<LossScaling> scaling);
  // The scale the next step multiplies the loss by (1 when loss scaling is off).
  double loss_scale() const;
  // Steps skipped for an inf or NaN gradient since loss scaling was turned on.
  int64_t skipped_steps() const;
  // Steps taken so far (the next one is number steps() + 1 in the bias corrections).
  int64_t steps() const;
  // Sets that count, resuming from a checkpoint (with the parameters and state() assigned the
  // saved values): the next step is number steps + 1. Compiles nothing. Error when negative.
  void set_steps(int64_t steps);
  const std::vector<Var>& params() const;
  // The optimizer's state Vars, in the order update() takes them: SGD with momentum, one
  // momentum buffer per parameter; Adam, the first moments, then the second moments.
  const std::vector<Var>& state() const;

  // The update of `params` (one per optimizer parameter, same shapes) by `grads` from `state`,
  // with learning rate `lr` and 1-based step number `step` (0-d Vars, any float dtype): a graph,
  // nothing evaluated. What step() and jit_step() use; for hand-written jit train steps.
  OptimizerUpdate update(const std::vector<Var>& params, const std::vector<Var>& grads,
                         const std::vector<Var>& state, const Var& lr, const Var& step) const;

  // A whole train step as one jit function (see the file comment). loss_fn takes Vars (by value
  // or const Var&) or lists of Vars (std::vector<Var>) and returns the loss Var.
  template <class F>
  auto jit_step(F loss_fn, std::string name = {}) {
    using Fn = std::decay_t<F>;
    using Args = typename detail::CallSignature<std::conditional_t<
        std::is_function_v<std::remove_pointer_t<Fn>>, std::remove_pointer_t<Fn>, Fn>>::type;
    return detail::TrainStep<Fn, Args>(core_, std::move(loss_fn), std::move(name));
  }

 protected:
  explicit Optimizer(std::shared_ptr<detail::OptimizerCore> core);
  std::shared_ptr<detail::OptimizerCore> core_;
};

// torch.optim.SGD: g = grad + weight_decay * p; with momentum, buf = momentum * buf + g (the
// first step: buf = g), then g = nesterov ? g + momentum * buf : buf; p -= lr * g.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Var> params, double lr, double momentum = 0, double weight_decay = 0,
      bool nesterov = false);
};

// torch.optim.Adam (no amsgrad): g = grad + weight_decay * p; m = beta1 m + (1 - beta1) g;
// v = beta2 v + (1 - beta2) g^2; p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Var> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
       double eps = 1e-8, double weight_decay = 0);
};

// torch.optim.AdamW: Adam without the L2 term, and the decoupled decay p *= 1 - lr * weight_decay
// applied before each step's update.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Var> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
        double eps = 1e-8, double weight_decay = 1e-2);
};

// The learning rate of step `step` (0-based): linear from 0 at step 0 to base_lr at
// warmup_steps, then a half cosine from base_lr down to min_lr at total_steps, and min_lr after.
// For set_lr() before each step: it compiles nothing. Error for negative arguments or
// total_steps < warmup_steps.
double cosine_lr(int64_t step, double base_lr, int64_t warmup_steps, int64_t total_steps,
                 double min_lr = 0);

}  // namespace metajit
#pragma GCC visibility pop
