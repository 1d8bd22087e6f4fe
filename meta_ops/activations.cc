// rsqrt, sign, clamp, gelu and silu: element-wise functions of the models issue that are
// composites of existing element-wise ops (docs/design.md §3), so fusion sees the ops they are
// made of and their gradients are those ops' gradients. erf, log1p, expm1, tan, atan, asin,
// acos and the bitwise ops are node ops of their own (meta_ops/ops.cc), because they need a
// library call or an integer instruction of their own.
#include <metajit/error.h>

#include <cmath>
#include <numbers>
#include <string>

#include "meta_ops/ops.h"

namespace metajit {
namespace {

// Integers and Bool compute these functions in Float32 (JAX's convention, as for exp).
Var as_float(const Var& x) {
  return is_float(x.dtype()) ? x : cast(x, DType::Float32);
}

}  // namespace

Var rsqrt(const Var& x) {
  require_defined(x, "rsqrt");
  return 1.0 / sqrt(x);
}

// 1, -1 or 0 in x's dtype; NaN stays NaN, and a zero of either sign gives +0 (numpy). The
// gradient is 0 everywhere (x - x contributes g - g).
Var sign(const Var& x) {
  require_defined(x, "sign");
  if (x.dtype() == DType::Bool) return x;
  const Var one = scalar(1, x.dtype()), minus_one = scalar(-1, x.dtype());
  return where(x > 0.0, one, where(x < 0.0, minus_one, x - x));
}

// torch.clamp: lo where x < lo, hi where x > hi, else x (NaN stays NaN); when lo > hi every
// element is hi. The bounds take x's dtype. The gradient passes where lo <= x <= hi.
Var clamp(const Var& x, double lo, double hi) {
  require_defined(x, "clamp");
  if (std::isnan(lo) || std::isnan(hi))
    throw Error("clamp: bounds " + std::to_string(lo) + " and " + std::to_string(hi) +
                " for x of shape " + shape_str(x.shape()) +
                "; the bounds must be numbers (use -inf or inf for no bound)");
  if (lo > hi) lo = hi;
  return where(x > hi, scalar(hi, x.dtype()), where(x < lo, scalar(lo, x.dtype()), x));
}

// x * Phi(x), exact through erf, or torch's tanh approximation.
Var gelu(const Var& x, bool tanh_approx) {
  require_defined(x, "gelu");
  const Var f = as_float(x);
  if (!tanh_approx) return f * 0.5 * (1.0 + erf(f * (1.0 / std::numbers::sqrt2)));
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return f * 0.5 * (1.0 + tanh((f + f * f * f * 0.044715) * k));
}

// x * sigmoid(x) (swish).
Var silu(const Var& x) {
  require_defined(x, "silu");
  const Var f = as_float(x);
  return f * sigmoid(f);
}

}  // namespace metajit
