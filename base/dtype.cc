#include "base/dtype.h"

#include <algorithm>
#include <cmath>

namespace metajit {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool:
      return 1;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 8;
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool:
      return "bool";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
  }
  return "?";
}

bool is_float(DType t) {
  return t == DType::Float32 || t == DType::Float64;
}

DType promote(DType a, DType b) {
  return static_cast<DType>(std::max(int(a), int(b)));
}

double to_dtype_value(double v, DType t) {
  // Out of range (or NaN) gives 0, the reference interpreter's rule for float -> int.
  auto clamp_int = [](double x, double lo, double hi) {
    double t = std::trunc(x);
    return (t >= lo && t <= hi) ? t : 0.0;
  };
  switch (t) {
    case DType::Bool:
      return v != 0 ? 1.0 : 0.0;
    case DType::Int32:
      return clamp_int(v, -2147483648.0, 2147483647.0);
    case DType::Int64:
      return clamp_int(v, -9223372036854775808.0, 9223372036854774784.0);
    case DType::Float32:
      return double(float(v));
    case DType::Float64:
      return v;
  }
  return v;
}

int64_t numel_of(const Shape& s) {
  // A zero extent empties a shape whatever the others are ([2^40, 2^63-1, 0] is valid: nothing
  // to store), so it is looked for before multiplying; any other shape a node has fits in int64
  // (check_shape_fits, meta_ops/node.cc). Unsigned: a shape not yet checked wraps, never traps.
  if (std::find(s.begin(), s.end(), int64_t(0)) != s.end()) return 0;
  uint64_t n = 1;
  for (int64_t d : s) n *= uint64_t(d);
  return int64_t(n);
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace metajit
