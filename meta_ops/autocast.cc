// autocast: mixed precision as PyTorch's CPU autocast does it, for the graph built inside the
// scope (docs/design.md §3). The state is per thread, as torch's: a graph built on another thread
// is not under this scope.
#include "meta_ops/autocast.h"

#include <metajit/error.h>

namespace metajit {
namespace {

thread_local std::optional<DType> g_autocast;

}  // namespace

autocast::autocast(DType compute) {
  if (!is_half(compute))
    throw DTypeError(std::string("autocast: compute dtype ") + dtype_name(compute) +
                     " is not a half type; expected float16 or bfloat16");
  previous_ = g_autocast ? int(*g_autocast) : -1;
  g_autocast = compute;
}

autocast::~autocast() {
  if (previous_ < 0)
    g_autocast.reset();
  else
    g_autocast = static_cast<DType>(previous_);
}

std::optional<DType> autocast_dtype() {
  return g_autocast;
}

Var autocast_operand(const Var& x) {
  if (!g_autocast || !x.defined() || x.dtype() != DType::Float32) return x;
  return cast(x, *g_autocast);
}

Var autocast_float32(const Var& x) {
  if (!g_autocast || !x.defined() || !is_half(x.dtype())) return x;
  return cast(x, DType::Float32);
}

}  // namespace metajit
