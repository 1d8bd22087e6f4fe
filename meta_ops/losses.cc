// Loss functions, built from meta-ops like every composite (docs/design.md §3): their gradients
// come from autograd's rules, and a loss fuses with the model's last layer and its backward.
#include <metajit/composite.h>
#include <metajit/error.h>

#include <limits>

#include "base/dtype.h"
#include "meta_ops/autocast.h"

namespace metajit {

Var cross_entropy(const Var& logits, const Var& labels) {
  if (!logits.defined() || !labels.defined())
    throw Error("cross_entropy: a Var is undefined (default-constructed)");
  if (logits.ndim() != 2)
    throw ShapeError("cross_entropy: logits have shape " + shape_str(logits.shape()) +
                     "; they must be [N, C] (a row of C class scores per example)");
  if (!is_float(logits.dtype()))
    throw DTypeError(std::string("cross_entropy: logits have dtype ") + dtype_name(logits.dtype()) +
                     "; they must be float32 or float64");
  if (!is_index_dtype(labels.dtype()))
    throw DTypeError(std::string("cross_entropy: labels have dtype ") + dtype_name(labels.dtype()) +
                     "; they must be class ids of an integer type (" + kIndexDTypes + ")");
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  if (labels.ndim() != 1 || labels.shape()[0] != n)
    throw ShapeError("cross_entropy: labels have shape " + shape_str(labels.shape()) +
                     " for logits " + shape_str(logits.shape()) + "; they must be [" +
                     std::to_string(n) + "], one class id per row");
  if (n == 0 || c == 0)
    throw ShapeError("cross_entropy: logits " + shape_str(logits.shape()) +
                     " are empty; the mean needs at least one row and one class");
  // One-hot mask from an index comparison: class k of row i is picked where k == labels[i].
  Var classes = broadcast_to(arange(c, labels.dtype()), {n, c}, {0});
  Var picked = classes == broadcast_to(labels, {n, c}, {1});
  Var row = -sum(where(picked, log_softmax(logits, 1), scalar(0, logits.dtype())), {1});
  // (where, not mask * log_softmax: 0 * -inf would be NaN for a class whose logit is -inf)
  // A label outside [0, C) picks nothing: NaN rather than a silent zero.
  Var valid = logical_and(labels >= 0.0, labels < double(c));
  row = where(valid, row, scalar(std::numeric_limits<double>::quiet_NaN(), logits.dtype()));
  return mean(row);
}

Var mse_loss(const Var& pred, const Var& target) {
  if (!pred.defined() || !target.defined())
    throw Error("mse_loss: a Var is undefined (default-constructed)");
  if (pred.shape() != target.shape())
    throw ShapeError("mse_loss: pred has shape " + shape_str(pred.shape()) + " and target " +
                     shape_str(target.shape()) +
                     "; they must be equal (broadcast one explicitly if that is meant)");
  if (pred.numel() == 0)
    throw ShapeError("mse_loss: pred " + shape_str(pred.shape()) +
                     " is empty; the mean needs an element");
  Var d = autocast_float32(pred) - autocast_float32(target);
  return mean(d * d);
}

}  // namespace metajit
