// Mixed precision's scope (shared/api.md "Precision"): what the composites consult while a
// metajit::autocast is alive on this thread (meta_ops/autocast.cc).
#pragma once
#include <metajit/ops.h>

#include <optional>

namespace metajit {

// The compute dtype of the innermost autocast alive on this thread, if any.
std::optional<DType> autocast_dtype();

// A matmul's or conv2d's operand under autocast: a Float32 `x` cast to the compute dtype; any
// other (float64, integers, halves) as it is.
Var autocast_operand(const Var& x);

// A reduction's, softmax's, loss's or norm's input under autocast: a half `x` cast to Float32
// (their results are Float32, shared/api.md); any other as it is.
Var autocast_float32(const Var& x);

}  // namespace metajit
