// nn::Conv2d (include/metajit/nn.h): conv2d with torch's weight layout, defaults and
// initialisation; unbatched [C, H, W] input as torch accepts it.
#include <metajit/composite.h>
#include <metajit/error.h>
#include <metajit/nn.h>

#include <string>

#include "meta_ops/autocast.h"
#include "nn/init.h"

namespace metajit::nn {
namespace {

void check_arguments(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                     int64_t dilation, int64_t groups) {
  const std::string call =
      "Conv2d(in_channels = " + std::to_string(in) + ", out_channels = " + std::to_string(out) +
      ", kernel_size = " + std::to_string(kernel) + ", stride = " + std::to_string(stride) +
      ", padding = " + std::to_string(padding) + ", dilation = " + std::to_string(dilation) +
      ", groups = " + std::to_string(groups) + "): ";
  if (in < 1 || out < 1) throw Error(call + "the channel counts must be >= 1");
  if (kernel < 1 || stride < 1 || dilation < 1)
    throw Error(call + "kernel_size, stride and dilation must be >= 1");
  if (padding < 0) throw Error(call + "padding must be >= 0");
  if (groups < 1 || in % groups != 0 || out % groups != 0)
    throw Error(call + "groups must be >= 1 and divide both channel counts");
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
               int64_t padding, int64_t dilation, int64_t groups, bool bias,
               std::optional<uint64_t> seed)
    : in_(in_channels), stride_(stride), padding_(padding), dilation_(dilation), groups_(groups) {
  check_arguments(in_channels, out_channels, kernel_size, stride, padding, dilation, groups);
  Init init(seed);
  const double bound = fan_in_bound(in_channels / groups * kernel_size * kernel_size);
  weight_ = register_parameter(
      "weight",
      init.uniform({out_channels, in_channels / groups, kernel_size, kernel_size}, bound));
  if (bias) bias_ = register_parameter("bias", init.uniform({out_channels}, bound));
}

Var Conv2d::operator()(const Var& x) const {
  if (!x.defined()) throw Error("Conv2d: the input is an undefined Var (default-constructed)");
  const bool unbatched = x.ndim() == 3;
  if ((x.ndim() != 4 && !unbatched) || x.shape()[size_t(x.ndim() - 3)] != in_)
    throw ShapeError("Conv2d(in_channels = " + std::to_string(in_) + "): input of shape " +
                     shape_str(x.shape()) + "; expected [N, " + std::to_string(in_) +
                     ", H, W] or [" + std::to_string(in_) + ", H, W]");
  Shape batched = x.shape();
  if (unbatched) batched.insert(batched.begin(), 1);
  Var y = conv2d(reshape(x, batched), weight_, stride_, padding_, dilation_, groups_);
  // In the product's dtype under autocast, as in Linear (nn/linear.cc).
  if (bias_.defined()) y = y + autocast_operand(reshape(bias_, {1, bias_.shape()[0], 1, 1}));
  if (!unbatched) return y;
  return reshape(y, Shape(y.shape().begin() + 1, y.shape().end()));
}

}  // namespace metajit::nn
