// nn::Linear (include/metajit/nn.h): y = x W^T + b, torch's layout and initialisation.
#include <metajit/composite.h>
#include <metajit/error.h>
#include <metajit/nn.h>

#include <string>

#include "meta_ops/autocast.h"
#include "nn/init.h"

namespace metajit::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, std::optional<uint64_t> seed)
    : in_(in_features), out_(out_features) {
  if (in_features < 0 || out_features < 0)
    throw Error("Linear(in_features = " + std::to_string(in_features) +
                ", out_features = " + std::to_string(out_features) + "): the sizes must be >= 0");
  Init init(seed);
  const double bound = fan_in_bound(in_features);
  weight_ = register_parameter("weight", init.uniform({out_features, in_features}, bound));
  if (bias) bias_ = register_parameter("bias", init.uniform({out_features}, bound));
}

Var Linear::operator()(const Var& x) const {
  if (!x.defined()) throw Error("Linear: the input is an undefined Var (default-constructed)");
  if (x.ndim() == 0 || x.shape().back() != in_)
    throw ShapeError("Linear(" + std::to_string(in_) + ", " + std::to_string(out_) +
                     "): input of shape " + shape_str(x.shape()) + "; expected [.., " +
                     std::to_string(in_) + "] (the last axis is in_features)");
  const Var y = matmul(x, transpose(weight_, {1, 0}));
  // Under autocast the bias joins the half product as a half, as torch's linear does: a float32
  // bias would make the activation float32 again (meta_ops/autocast.h).
  return bias_.defined() ? y + autocast_operand(bias_) : y;
}

}  // namespace metajit::nn
