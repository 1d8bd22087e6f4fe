#include "base/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
    case DType::Int8:
    case DType::UInt8:
      return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
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
    case DType::Int8:
      return "int8";
    case DType::UInt8:
      return "uint8";
    case DType::Int16:
      return "int16";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
  }
  return "?";
}

bool is_float(DType t) {
  return t == DType::Float32 || t == DType::Float64 || is_half(t);
}

bool is_half(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

bool is_index_dtype(DType t) {
  return t == DType::Int8 || t == DType::UInt8 || t == DType::Int16 || t == DType::Int32 ||
         t == DType::Int64;
}

namespace {

// A dtype's place in the promotion order; the two pairs that share a place promote to the
// next wider type that holds both (Int8 with UInt8: Int16; Float16 with BFloat16: Float32).
int promotion_rank(DType t) {
  switch (t) {
    case DType::Bool:
      return 0;
    case DType::Int8:
    case DType::UInt8:
      return 1;
    case DType::Int16:
      return 2;
    case DType::Int32:
      return 3;
    case DType::Int64:
      return 4;
    case DType::Float16:
    case DType::BFloat16:
      return 5;
    case DType::Float32:
      return 6;
    case DType::Float64:
      return 7;
  }
  return 0;
}

// The float nearest to `d` toward zero, its last bit set where that is inexact (rounding to
// odd): rounding it once more to a format of at most 22 significant bits (float16: 11,
// bfloat16: 8) gives the direct rounding of `d` (docs/design.md §3: a double rounds to a half
// type once). NaN and infinities stay.
float round_to_odd_float(double d) {
  const float f = float(d);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (d == d && double(f) != d) {
    if (std::fabs(double(f)) > std::fabs(d)) --u;  // rounded away from zero: step back
    u |= 1u;
  }
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

}  // namespace

DType promote(DType a, DType b) {
  if (a == b) return a;
  const int ra = promotion_rank(a), rb = promotion_rank(b);
  if (ra == rb) return ra == 1 ? DType::Int16 : DType::Float32;  // {Int8, UInt8}, the halves
  return ra > rb ? a : b;
}

float16 float16_from_double(double v) {
  return float16(round_to_odd_float(v));
}

bfloat16 bfloat16_from_double(double v) {
  return bfloat16(round_to_odd_float(v));
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
    case DType::Int8:
      return clamp_int(v, -128.0, 127.0);
    case DType::UInt8:
      return clamp_int(v, 0.0, 255.0);
    case DType::Int16:
      return clamp_int(v, -32768.0, 32767.0);
    case DType::Float16:
      return double(float(float16_from_double(v)));
    case DType::BFloat16:
      return double(float(bfloat16_from_double(v)));
  }
  return v;
}

void store_dtype_value(double v, DType t, void* dst) {
  const double x = to_dtype_value(v, t);
  switch (t) {
    case DType::Bool:
      *static_cast<bool*>(dst) = x != 0;
      return;
    case DType::Int32:
      *static_cast<int32_t*>(dst) = int32_t(x);
      return;
    case DType::Int64:
      *static_cast<int64_t*>(dst) = int64_t(x);
      return;
    case DType::Float32:
      *static_cast<float*>(dst) = float(x);
      return;
    case DType::Float64:
      *static_cast<double*>(dst) = x;
      return;
    case DType::Int8:
      *static_cast<int8_t*>(dst) = int8_t(x);
      return;
    case DType::UInt8:
      *static_cast<uint8_t*>(dst) = uint8_t(x);
      return;
    case DType::Int16:
      *static_cast<int16_t*>(dst) = int16_t(x);
      return;
    case DType::Float16:
      *static_cast<float16*>(dst) = float16(float(x));  // x is a float16 value: exact
      return;
    case DType::BFloat16:
      *static_cast<bfloat16*>(dst) = bfloat16(float(x));
      return;
  }
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
