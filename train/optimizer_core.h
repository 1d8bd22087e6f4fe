// What an optimizer holds (include/metajit/train.h): its parameters, its state, the learning rate
// and the step count, and its update rule as a pure function of Vars.
#pragma once
#include <metajit/train.h>

#include <optional>
#include <string>
#include <vector>

namespace metajit::detail {

struct OptimizerCore {
  OptimizerCore();
  virtual ~OptimizerCore() = default;
  // The graph of one update (Optimizer::update; arguments already checked).
  virtual OptimizerUpdate update(const std::vector<Var>& params, const std::vector<Var>& grads,
                                 const std::vector<Var>& state, const Var& lr,
                                 const Var& step) const = 0;

  std::string kind;  // "SGD", "Adam": names the optimizer in errors
  std::vector<Var> params;
  std::vector<Var> state;
  double lr = 0;
  int64_t steps = 0;
  double max_grad_norm = 0;    // set_max_grad_norm: 0 = off
  bool data_parallel = false;  // set_data_parallel
  int64_t bucket_bytes = int64_t(25) << 20;
  std::optional<LossScaling> scaling;  // set_loss_scaling: nullopt = off
  double scale = 1;                    // the loss scale of the next step
  int64_t steps_since_backoff = 0;     // good steps in a row (GradScaler's growth tracker)
  int64_t skipped = 0;
  // Unique per optimizer in the process: jit steps of one optimizer are "the same function" for
  // the compiled-again warning, those of another are not (an address could be reused).
  uint64_t number = 0;
};

// Checks an optimizer's parameters (defined, float, each once): Error/DTypeError naming `kind`.
void check_params(const std::vector<Var>& params, const std::string& kind);
// Error naming `kind` and `what` unless lo <= value (and value < hi when hi_open).
void check_hyperparameter(const std::string& kind, const char* what, double value, double lo,
                          double hi = 0, bool has_hi = false);

// A 0-d Float64 leaf holding v: how the learning rate and the step number reach the kernels.
Var scalar_arg(double v);

// torch.nn.utils.clip_grad_norm_ as a graph: every gradient times min(1, max_norm / (total +
// 1e-6)), total the 2-norm of all of them together (summed in float64); max_norm a 0-d float Var.
std::vector<Var> clip_grad_norm(const std::vector<Var>& grads, const Var& max_norm);

// Data-parallel training (train/data_parallel.cc): `grads` averaged over the ranks, one
// all_reduce (Mean) per bucket of about `bucket_bytes` of gradients of one dtype, filled from
// the last gradient back, the first bucket of at most kFirstBucketBytes (PyTorch DDP's rule: the
// backward's first gradients travel while it computes the rest).
inline constexpr int64_t kFirstBucketBytes = int64_t(1) << 20;
std::vector<Var> average_over_ranks(const std::vector<Var>& grads, int64_t bucket_bytes);
// True on every rank when it is true on any (an all_reduce by Max of a 0-d Bool).
Var any_rank(const Var& flag);
// The data-parallel argument of a jit train step: a 0-d Float64 (its value unused) when on,
// an empty [0] array when off (its rank is part of the step's signature, like clip_arg's).
Var data_parallel_arg(const OptimizerCore& core);
// Turns data parallelism on (broadcasting `core`'s parameters from rank 0, evaluated now) or off.
void set_data_parallel(OptimizerCore& core, bool on, int64_t bucket_bytes);

// Loss scaling (train/loss_scaling.cc). The gradients of loss * scale, each multiplied by
// 1 / scale, and a 0-d Bool that is true when any of them holds an inf or NaN. `scale` is a 0-d
// float Var (a kernel argument).
struct ScaledGrads {
  std::vector<Var> grads;
  Var found_nonfinite;
};
ScaledGrads scaled_grads(const Var& loss, const std::vector<Var>& params, const Var& scale);
// `g`'s gradients averaged over the ranks (average_over_ranks with core's bucket size) and, with
// loss scaling, its inf/NaN flag true on every rank when it is on any (train/data_parallel.cc).
void average_gradients(const OptimizerCore& core, ScaledGrads& g);
// The update `u`, or the old `params` and `state` where found_nonfinite is true.
OptimizerUpdate unless_nonfinite(const Var& found_nonfinite, const std::vector<Var>& params,
                                 const std::vector<Var>& state, OptimizerUpdate u);
// After a step with scaling on: the step count, the scale and its growth tracker.
void advance_loss_scale(OptimizerCore& core, bool found_nonfinite);
// The scale argument of a jit train step: the scale as a 0-d Float64 when scaling is on, an
// empty [0] array when off (its rank is part of the step's signature, like clip_arg's).
Var scale_arg(const OptimizerCore& core);

}  // namespace metajit::detail
