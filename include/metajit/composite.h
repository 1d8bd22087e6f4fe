// Composite ops built only from meta-ops, as in Jittor: they add no node kinds, so fusion
// and code generation see only meta-ops (docs/design.md §3).
#pragma once
#include "ops.h"

namespace metajit {

Var reshape(const Var& x, Shape shape);  // one -1 allowed
Var transpose(const Var& x, std::vector<int64_t> perm);
Var matmul(const Var& a, const Var& b);  // [..,n,k] x [..,k,m]; leading batch dims broadcast
Var conv2d(const Var& x, const Var& w, int64_t stride = 1, int64_t padding = 0,
           int64_t dilation = 1);  // NCHW input, OIHW weight
Var max_pool2d(const Var& x, int64_t kernel, int64_t stride, int64_t padding = 0);
Var softmax(const Var& x, int64_t dim);
// log(softmax(x, dim)), computed as (x - max) - log(sum(exp(x - max))): finite for any finite
// logits, however extreme.
Var log_softmax(const Var& x, int64_t dim);
// The index (Int32) of the first maximum / minimum along dim; that axis is removed. A NaN counts
// as the maximum (and the minimum), as in PyTorch.
Var argmax(const Var& x, int64_t dim);
Var argmin(const Var& x, int64_t dim);

// ---- losses (meta_ops/losses.cc) ----
// Mean over N of -log_softmax(logits)[n, labels[n]]: logits [N, C] float, labels [N] Int32 or
// Int64 class ids (the one-hot mask is an index comparison, as Jittor builds it). A label
// outside [0, C) cannot be checked without reading it: its row's loss is NaN, so the mean is NaN.
Var cross_entropy(const Var& logits, const Var& labels);
// Mean of (pred - target)^2 over every element; pred and target have the same shape.
Var mse_loss(const Var& pred, const Var& target);

}  // namespace metajit
