// nn::BatchNorm2d and nn::LayerNorm (include/metajit/nn.h): torch's parameters, buffers and
// running-statistics update.
#include <metajit/autograd.h>
#include <metajit/composite.h>
#include <metajit/error.h>
#include <metajit/eval.h>
#include <metajit/nn.h>

#include <string>

#include "meta_ops/node.h"
#include "nn/init.h"

namespace metajit::nn {
namespace {

// [C] -> [1, C, 1, 1], to broadcast over NCHW.
Var per_channel(const Var& v) {
  return reshape(v, {1, v.shape()[0], 1, 1});
}

}  // namespace

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum,
                         std::optional<uint64_t> /*seed: the initialisation is not random*/)
    : features_(num_features), eps_(eps), momentum_(momentum) {
  if (num_features < 1)
    throw Error("BatchNorm2d(num_features = " + std::to_string(num_features) +
                "): num_features must be >= 1");
  if (!(eps >= 0) || !(momentum >= 0 && momentum <= 1))
    throw Error("BatchNorm2d(eps = " + std::to_string(eps) + ", momentum = " +
                std::to_string(momentum) + "): expected eps >= 0 and 0 <= momentum <= 1");
  weight_ = register_parameter("weight", filled({num_features}, 1));
  bias_ = register_parameter("bias", filled({num_features}, 0));
  running_mean_ = register_buffer("running_mean", filled({num_features}, 0));
  running_var_ = register_buffer("running_var", filled({num_features}, 1));
  num_batches_tracked_ = register_buffer("num_batches_tracked", filled({}, 0, DType::Int64));
}

Var BatchNorm2d::normalized(const Var& x, const Var& mean, const Var& var) const {
  return (x - per_channel(mean)) * per_channel(rsqrt(var + eps_)) * per_channel(weight_) +
         per_channel(bias_);
}

// Eager training keeps the running statistics' pending graph one step deep. The update below
// is lazy and nothing the loss computes reads it, so without this every step would hold the
// previous ones' (and their batches' graphs) until the buffers were read. The previous update
// reads only the batch statistics its forward stored (stored_when_computed): evaluating it is
// one small kernel over [C], and a no-op when it was already evaluated. Not while a jit function
// is traced, where evaluating captured state is not the trace's business.
void BatchNorm2d::settle_running_stats() const {
  if (jit_trace_depth() == 0) metajit::eval({running_mean_, running_var_, num_batches_tracked_});
}

// Moves `stat` (the only Var naming its value) off its value, which thereby becomes an older
// value of a variable: the evaluation that computes it (the loss's) stores it instead of fusing
// it away, as README "Lazy evaluation" describes, so the pending update holds a [C] buffer
// rather than the batch's graph. `stat` must not be used afterwards. Not while a jit function
// is traced: a replay stores its outputs and keeps nothing else.
void BatchNorm2d::stored_when_computed(Var& stat) {
  if (jit_trace_depth() == 0) stat.assign(zeros(stat.shape(), stat.dtype()));
}

// torch's update, outside autograd: the new values are built from the batch statistics with
// stop_grad, so no gradient reaches an earlier batch through the running statistics.
void BatchNorm2d::update_running_stats(const Var& mean, const Var& unbiased_var) const {
  Var rm = running_mean_, rv = running_var_, n = num_batches_tracked_;  // the same variables
  const double m = momentum_;
  rm.assign(rm * (1 - m) + cast(stop_grad(mean), rm.dtype()) * m);
  rv.assign(rv * (1 - m) + cast(stop_grad(unbiased_var), rv.dtype()) * m);
  n.assign(n + 1.0);
}

Var BatchNorm2d::operator()(const Var& x) const {
  if (!x.defined()) throw Error("BatchNorm2d: the input is an undefined Var (default-constructed)");
  if (x.ndim() != 4 || x.shape()[1] != features_)
    throw ShapeError("BatchNorm2d(" + std::to_string(features_) + "): input of shape " +
                     shape_str(x.shape()) + "; expected [N, " + std::to_string(features_) +
                     ", H, W]");
  if (!is_float(x.dtype()))
    throw DTypeError(std::string("BatchNorm2d: input of dtype ") + dtype_name(x.dtype()) +
                     "; expected float32 or float64");
  if (!training()) return normalized(x, running_mean_, running_var_);
  const int64_t count = x.shape()[0] * x.shape()[2] * x.shape()[3];
  if (count < 2)
    throw ShapeError("BatchNorm2d: input of shape " + shape_str(x.shape()) +
                     " has one value per channel; training mode needs at least 2 (N * H * W)");
  settle_running_stats();
  Var mean = metajit::mean(x, {0, 2, 3}), biased = var(x, {0, 2, 3}, false, 0);
  update_running_stats(mean, biased * (double(count) / double(count - 1)));
  const Var y = normalized(x, mean, biased);
  stored_when_computed(mean);
  stored_when_computed(biased);
  return y;
}

LayerNorm::LayerNorm(int64_t normalized_shape, double eps, bool elementwise_affine,
                     std::optional<uint64_t> /*seed: the initialisation is not random*/)
    : features_(normalized_shape), eps_(eps) {
  if (normalized_shape < 1 || !(eps >= 0))
    throw Error("LayerNorm(normalized_shape = " + std::to_string(normalized_shape) +
                ", eps = " + std::to_string(eps) + "): expected normalized_shape >= 1, eps >= 0");
  if (!elementwise_affine) return;
  weight_ = register_parameter("weight", filled({normalized_shape}, 1));
  bias_ = register_parameter("bias", filled({normalized_shape}, 0));
}

Var LayerNorm::operator()(const Var& x) const {
  if (!x.defined()) throw Error("LayerNorm: the input is an undefined Var (default-constructed)");
  if (x.ndim() == 0 || x.shape().back() != features_)
    throw ShapeError("LayerNorm(" + std::to_string(features_) + "): input of shape " +
                     shape_str(x.shape()) + "; expected [.., " + std::to_string(features_) + "]");
  return layer_norm(x, 1, weight_, bias_, eps_);
}

}  // namespace metajit::nn
