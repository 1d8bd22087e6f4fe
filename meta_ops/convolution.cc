// conv2d (grouped and depthwise too), conv_transpose2d, max_pool2d and avg_pool2d, written with
// meta-ops only. A convolution is a reindex of the input onto the 7-D product
// [N, O, C, OH, OW, KH, KW] times the broadcast weight, reduced over (C, KH, KW): one fused
// kernel that never materialises the product, which the contraction schedule recognises
// (codegen/kernel_patterns.cc). The transposed convolution is the same product read as a
// gather (the scatter written backwards, as autograd/scatter_as_gather.cc does).
#include <metajit/composite.h>
#include <metajit/error.h>

#include <limits>
#include <optional>
#include <string>

#include "meta_ops/autocast.h"
#include "meta_ops/ops.h"

namespace metajit {
namespace {

IndexExprPtr add(IndexExprPtr a, IndexExprPtr b) {
  return ix_binary(IxKind::Add, a, b);
}
IndexExprPtr mul(IndexExprPtr a, int64_t c) {
  return ix_binary(IxKind::Mul, a, ix_const(c));
}

// How far the first window may move along an input axis: in + 2 * pad - dil * (k - 1) - 1
// (negative: the window does not fit), or nothing where a step overflows int64 (padding,
// dilation or kernel near the limit: found by fuzz_api_sequence as signed overflow).
std::optional<int64_t> window_span(int64_t in, int64_t pad, int64_t dil, int64_t k) {
  int64_t padded = 0, reach = 0, span = 0;
  if (__builtin_mul_overflow(pad, 2, &padded) || __builtin_add_overflow(in, padded, &padded) ||
      __builtin_mul_overflow(dil, k - 1, &reach) || __builtin_add_overflow(reach, 1, &reach) ||
      __builtin_sub_overflow(padded, reach, &span))
    return std::nullopt;
  return span;
}

// The output extents of a window of `kernel` x `kernel` sliding over x's last two axes (NCHW), or
// a ShapeError naming `op` and `what` (the input and weight shapes).
std::pair<int64_t, int64_t> window_outputs(const Var& x, int64_t kh, int64_t kw, int64_t stride,
                                           int64_t padding, int64_t dilation, const char* op,
                                           const std::string& what) {
  const int64_t H = x.shape()[2], W = x.shape()[3];
  const std::optional<int64_t> span_h = window_span(H, padding, dilation, kh),
                               span_w = window_span(W, padding, dilation, kw);
  if (!span_h || !span_w)
    throw ShapeError(std::string(op) + ": " + what + " with padding " + std::to_string(padding) +
                     " and dilation " + std::to_string(dilation) +
                     ": the window arithmetic overflows int64");
  if (*span_h < 0 || *span_w < 0)
    throw ShapeError(std::string(op) + ": " + what +
                     ": the window is larger than the padded input");
  return {*span_h / stride + 1, *span_w / stride + 1};  // floor mode
}

// x's index along an input axis at output position `out_axis` and window tap `k_axis`.
IndexExprPtr tap(int out_axis, int k_axis, int64_t stride, int64_t padding, int64_t dilation) {
  return add(add(mul(ix_var(out_axis), stride), ix_const(-padding)), mul(ix_var(k_axis), dilation));
}

void check_pool_arguments(const Var& x, int64_t kernel, int64_t stride, int64_t padding,
                          const char* op) {
  require_defined(x, op);
  if (x.ndim() != 4)
    throw ShapeError(std::string(op) + ": input " + shape_str(x.shape()) +
                     " must have 4 axes (NCHW)");
  if (kernel < 1 || stride < 1 || padding < 0 || padding > kernel / 2)
    throw ShapeError(std::string(op) + ": kernel " + std::to_string(kernel) + ", stride " +
                     std::to_string(stride) + ", padding " + std::to_string(padding) +
                     " not valid; expected kernel >= 1, stride >= 1, 0 <= padding <= kernel/2");
}

// x's windows as [N, C, OH, OW, kernel, kernel], padded cells reading `padded`.
Var pool_windows(const Var& x, int64_t kernel, int64_t stride, int64_t padding, double padded,
                 const char* op) {
  const auto [oh, ow] =
      window_outputs(x, kernel, kernel, stride, padding, 1, op,
                     "input " + shape_str(x.shape()) + " and kernel " + std::to_string(kernel));
  return reindex_tree(
      x, {x.shape()[0], x.shape()[1], oh, ow, kernel, kernel},
      {ix_var(0), ix_var(1), tap(2, 4, stride, padding, 1), tap(3, 5, stride, padding, 1)}, padded,
      {});
}

}  // namespace

Var conv2d(const Var& x, const Var& w, int64_t stride, int64_t padding, int64_t dilation) {
  return conv2d(x, w, stride, padding, dilation, 1);
}

Var conv2d(const Var& x_in, const Var& w_in, int64_t stride, int64_t padding, int64_t dilation,
           int64_t groups) {
  require_defined(x_in, "conv2d", "the input");
  require_defined(w_in, "conv2d", "the weight");
  const Var x = autocast_operand(x_in), w = autocast_operand(w_in);
  const std::string shapes =
      "input " + shape_str(x.shape()) + " (NCHW), weight " + shape_str(w.shape()) + " (OIHW)";
  if (x.ndim() != 4 || w.ndim() != 4)
    throw ShapeError("conv2d: " + shapes + ": both must have 4 axes");
  if (stride < 1 || dilation < 1 || padding < 0 || groups < 1)
    throw ShapeError("conv2d: stride " + std::to_string(stride) + ", padding " +
                     std::to_string(padding) + ", dilation " + std::to_string(dilation) +
                     ", groups " + std::to_string(groups) +
                     " not valid; expected stride >= 1, padding >= 0, dilation >= 1, groups >= 1");
  const int64_t N = x.shape()[0], C = x.shape()[1];
  const int64_t O = w.shape()[0], Cg = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3];
  if (C % groups != 0 || O % groups != 0 || Cg * groups != C)
    throw ShapeError("conv2d: " + shapes + " with groups " + std::to_string(groups) +
                     ": expected input channels and output channels divisible by groups, and "
                     "weight channels = input channels / groups (" +
                     std::to_string(C % groups == 0 ? C / groups : C) + ")");
  const auto [oh, ow] = window_outputs(x, kh, kw, stride, padding, dilation, "conv2d", shapes);
  const Shape big = {N, O, Cg, oh, ow, kh, kw};
  // out[n,o,h,w] = sum_{c,r,s} x[n, g(o)*Cg + c, h*stride - pad + r*dil, w*stride - pad + s*dil]
  // * w[o,c,r,s], g(o) = o / (O / groups): with one group, the channel index is c alone.
  IndexExprPtr channel =
      groups == 1
          ? ix_var(2)
          : add(mul(ix_binary(IxKind::Div, ix_var(1), ix_const(O / groups)), Cg), ix_var(2));
  const DType dt = promote(x.dtype(), w.dtype());
  Var xr = reindex_tree(cast(x, dt), big,
                        {ix_var(0), channel, tap(3, 5, stride, padding, dilation),
                         tap(4, 6, stride, padding, dilation)},
                        0, {});
  Var wb = broadcast_to(cast(w, dt), big, {0, 3, 4});
  return reduce(xr * wb, ReduceOp::Add, {2, 5, 6});  // reduce: not autocast's float32 sum
}

Var conv_transpose2d(const Var& x, const Var& w, int64_t stride, int64_t padding,
                     int64_t output_padding) {
  require_defined(x, "conv_transpose2d", "the input");
  require_defined(w, "conv_transpose2d", "the weight");
  const std::string shapes = "input " + shape_str(x.shape()) + " (NCHW), weight " +
                             shape_str(w.shape()) + " ([C_in, C_out, KH, KW])";
  if (x.ndim() != 4 || w.ndim() != 4)
    throw ShapeError("conv_transpose2d: " + shapes + ": both must have 4 axes");
  if (stride < 1 || padding < 0 || output_padding < 0 || output_padding >= stride)
    throw ShapeError(
        "conv_transpose2d: stride " + std::to_string(stride) + ", padding " +
        std::to_string(padding) + ", output_padding " + std::to_string(output_padding) +
        " not valid; expected stride >= 1, padding >= 0, 0 <= output_padding < stride");
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t O = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3];
  if (w.shape()[0] != C)
    throw ShapeError("conv_transpose2d: " + shapes + ": input channels " + std::to_string(C) +
                     " != weight's first axis " + std::to_string(w.shape()[0]));
  // torch's size: (in - 1) * stride - 2 * padding + kernel + output_padding.
  auto extent = [&](int64_t in, int64_t k) -> std::optional<int64_t> {
    int64_t e = 0, pads = 0;
    if (__builtin_mul_overflow(padding, 2, &pads) || __builtin_mul_overflow(in - 1, stride, &e) ||
        __builtin_sub_overflow(e, pads, &e) || __builtin_add_overflow(e, k, &e) ||
        __builtin_add_overflow(e, output_padding, &e))
      return std::nullopt;
    return e;
  };
  const std::optional<int64_t> oh = extent(H, kh), ow = extent(W, kw);
  if (!oh || !ow || *oh < 0 || *ow < 0)
    throw ShapeError("conv_transpose2d: " + shapes + " with stride " + std::to_string(stride) +
                     " and padding " + std::to_string(padding) +
                     ": the output would have no valid size");
  // out[n,o,h,w] = sum_{c,r,s} x[n, c, (h + pad - r) / stride, (w + pad - s) / stride] * w[c,o,r,s]
  // over the taps where stride divides h + pad - r: each input element scattered by the forward
  // convolution's adjoint, read here as a gather.
  const Shape big = {N, O, C, *oh, *ow, kh, kw};
  auto source = [&](int out_axis, int k_axis) {
    return ix_binary(IxKind::Sub, add(ix_var(out_axis), ix_const(padding)), ix_var(k_axis));
  };
  std::vector<IndexExprPtr> idx = {ix_var(0), ix_var(2), source(3, 5), source(4, 6)};
  std::vector<IndexExprPtr> off_grid;
  if (stride > 1)
    for (int k : {2, 3}) {
      off_grid.push_back(ix_binary(
          IxKind::Ne, ix_binary(IxKind::Mod, idx[size_t(k)], ix_const(stride)), ix_const(0)));
      idx[size_t(k)] = ix_binary(IxKind::Div, idx[size_t(k)], ix_const(stride));
    }
  const DType dt = promote(x.dtype(), w.dtype());
  Var xr = reindex_tree(cast(x, dt), big, std::move(idx), 0, std::move(off_grid));
  Var wb = broadcast_to(transpose(cast(w, dt), {1, 0, 2, 3}), big, {0, 3, 4});
  return reduce(xr * wb, ReduceOp::Add, {2, 5, 6});  // reduce: not autocast's float32 sum
}

Var max_pool2d(const Var& x, int64_t kernel, int64_t stride, int64_t padding) {
  check_pool_arguments(x, kernel, stride, padding, "max_pool2d");
  // Padded cells read the lowest value of the dtype, so they never win.
  const double lowest = is_float(x.dtype())         ? -std::numeric_limits<double>::infinity()
                        : x.dtype() == DType::Int32 ? double(std::numeric_limits<int32_t>::lowest())
                        : x.dtype() == DType::Int64 ? double(std::numeric_limits<int64_t>::lowest())
                                                    : 0.0;
  return max(pool_windows(x, kernel, stride, padding, lowest, "max_pool2d"), {4, 5});
}

Var avg_pool2d(const Var& x, int64_t kernel, int64_t stride, int64_t padding) {
  check_pool_arguments(x, kernel, stride, padding, "avg_pool2d");
  // count_include_pad: padded cells are zeros that count, so every window divides by k * k.
  Var in = is_float(x.dtype()) ? x : cast(x, DType::Float32);
  return sum(pool_windows(in, kernel, stride, padding, 0, "avg_pool2d"), {4, 5}) /
         (double(kernel) * double(kernel));
}

}  // namespace metajit
