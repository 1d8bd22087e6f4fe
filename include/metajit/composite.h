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

}  // namespace metajit
