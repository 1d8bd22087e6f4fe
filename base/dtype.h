// Internal additions to <metajit/dtype.h>: how scalars are stored.
#pragma once
#include <metajit/dtype.h>

namespace metajit {

// `v` as a value of dtype `t` holds it, back in a double: Bool 0/1, integers truncated toward
// zero, NaN or out of range 0, floats rounded (a half type directly from the double, once).
// Scalars are stored this way.
double to_dtype_value(double v, DType t);
// Writes to_dtype_value(v, t) as one element of dtype t at `dst`.
void store_dtype_value(double v, DType t, void* dst);

// A double rounded to a half type once, to nearest even (no double rounding through float).
float16 float16_from_double(double v);
bfloat16 bfloat16_from_double(double v);

// The dtypes an index array (extras, gather/scatter indices, embedding ids, class labels) may
// have: every integer type but Bool. kIndexDTypes names them for error messages.
bool is_index_dtype(DType t);
inline constexpr const char* kIndexDTypes = "int8, uint8, int16, int32 or int64";

}  // namespace metajit
