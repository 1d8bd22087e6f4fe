// Internal additions to <metajit/dtype.h>: how scalars are stored.
#pragma once
#include <metajit/dtype.h>

namespace metajit {

// `v` as a value of dtype `t` holds it, back in a double: Bool 0/1, integers truncated toward
// zero and clamped (NaN -> 0), Float32 rounded. Scalars are stored this way.
double to_dtype_value(double v, DType t);

}  // namespace metajit
