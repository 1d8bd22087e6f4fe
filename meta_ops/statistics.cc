// cumsum, var and layer_norm: composites of the models issue built from reductions, element-wise
// ops and (cumsum) a guarded reindex, so their gradients are those of the meta-ops.
// docs/design.md §3.
#include <metajit/composite.h>
#include <metajit/error.h>

#include <algorithm>
#include <string>

#include "meta_ops/autocast.h"
#include "meta_ops/ops.h"

namespace metajit {
namespace {

// The axes `dims` names (all of them when empty), each once and counted from the end when
// negative, as a mask over x's axes; ShapeError naming `op` otherwise.
std::vector<bool> reduced_axes(const Var& x, const std::vector<int64_t>& dims, const char* op) {
  std::vector<bool> reduced(size_t(x.ndim()), dims.empty());
  for (int64_t d : dims) {
    const int64_t a = norm_axis(d, x.ndim(), op, x.shape());
    if (reduced[size_t(a)])
      throw ShapeError(std::string(op) + ": dim " + std::to_string(d) + " listed twice for shape " +
                       shape_str(x.shape()));
    reduced[size_t(a)] = true;
  }
  return reduced;
}

// Under autocast a half input is taken as Float32 too (norms return Float32: shared/api.md).
Var as_float(const Var& x) {
  return is_float(x.dtype()) ? autocast_float32(x) : cast(x, DType::Float32);
}

}  // namespace

Var cumsum(const Var& x, int64_t dim) {
  require_defined(x, "cumsum");
  if (x.ndim() == 0) throw ShapeError("cumsum: the input is 0-d; it needs at least one axis");
  const int64_t axis = norm_axis(dim, x.ndim(), "cumsum", x.shape());
  // Integers and Bool add up in Int64, as torch.cumsum does.
  const DType dt = is_float(x.dtype()) ? x.dtype() : DType::Int64;
  // out[.., i, ..] = sum over j of x[.., j, ..] where j <= i: a reindex onto one more (last)
  // axis j, guarded by j > i, reduced over j. One fused kernel, O(n) work per element (n the
  // axis's extent): right for the sequence lengths of models, not for scans of millions.
  Shape big = x.shape();
  const int64_t n = big[size_t(axis)];
  big.push_back(n);
  const int j = int(x.ndim());
  std::vector<IndexExprPtr> idx;
  for (int k = 0; k < int(x.ndim()); ++k) idx.push_back(ix_var(k == axis ? j : k));
  IndexExprPtr later = ix_binary(IxKind::Gt, ix_var(j), ix_var(int(axis)));
  return sum(reindex_tree(cast(x, dt), std::move(big), std::move(idx), 0, {later}), {j});
}

Var var(const Var& x, std::vector<int64_t> dims, bool keepdims, int64_t correction) {
  require_defined(x, "var");
  const std::vector<bool> reduced = reduced_axes(x, dims, "var");
  std::vector<int64_t> axes;
  double count = 1;
  for (int64_t k = 0; k < x.ndim(); ++k)
    if (reduced[size_t(k)]) {
      axes.push_back(k);
      count *= double(x.shape()[size_t(k)]);
    }
  Var in = as_float(x);
  Var centred = in - mean(in, axes, true);
  // torch's divisor: max(0, N - correction); 0 gives inf or NaN, as there.
  const double divisor = std::max(0.0, count - double(correction));
  return sum(centred * centred, axes, keepdims) / divisor;
}

Var layer_norm(const Var& x, int64_t normalized_dims, const Var& weight, const Var& bias,
               double eps) {
  require_defined(x, "layer_norm");
  if (normalized_dims < 1 || normalized_dims > x.ndim())
    throw ShapeError("layer_norm: normalized_dims " + std::to_string(normalized_dims) +
                     " for input " + shape_str(x.shape()) + "; expected 1 to " +
                     std::to_string(x.ndim()) + " (the trailing axes normalised)");
  const Shape trailing(x.shape().end() - normalized_dims, x.shape().end());
  for (const auto& [param, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}})
    if (param->defined() && param->shape() != trailing)
      throw ShapeError(std::string("layer_norm: ") + name + " of shape " +
                       shape_str(param->shape()) + " for input " + shape_str(x.shape()) +
                       " normalised over " + std::to_string(normalized_dims) + " axes; expected " +
                       shape_str(trailing) + " or an undefined Var");
  std::vector<int64_t> axes;
  for (int64_t k = x.ndim() - normalized_dims; k < x.ndim(); ++k) axes.push_back(k);
  Var in = as_float(x);
  Var centred = in - mean(in, axes, true);
  // The biased variance, as torch.nn.LayerNorm.
  Var y = centred / sqrt(mean(centred * centred, axes, true) + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

}  // namespace metajit
