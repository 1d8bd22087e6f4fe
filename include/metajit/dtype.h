// Element types and shapes, with the promotion rules of docs/design.md §3.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

// The last five are the precision issue's (docs/design.md §3): 8- and 16-bit integers, and the
// two half-precision floats, stored in 16 bits and computed in float32.
enum class DType { Bool, Int32, Int64, Float32, Float64, Int8, UInt8, Int16, Float16, BFloat16 };
using Shape = std::vector<int64_t>;

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "bool", "int32", ..., "float16", "bfloat16"
bool is_float(DType t);           // Float16, BFloat16, Float32, Float64
bool is_half(DType t);            // Float16, BFloat16
// PyTorch's result_type: Bool < {Int8, UInt8} < Int16 < Int32 < Int64 < {Float16, BFloat16} <
// Float32 < Float64; Int8 with UInt8 is Int16, Float16 with BFloat16 is Float32.
DType promote(DType a, DType b);

// IEEE binary16 (numpy's float16), held as its bits. From float: rounded to nearest even,
// overflow to Inf, NaN stays NaN (quieted, its payload's top bits kept, as F16C's vcvtps2ph
// and numpy do for a quiet NaN); to float: exact.
struct float16 {
  uint16_t bits;
  float16() = default;
  float16(float f);  // NOLINT(google-explicit-constructor): rounds, as numpy's astype
  explicit operator float() const;
  static float16 from_bits(uint16_t b) {
    float16 h;
    h.bits = b;
    return h;
  }
};

// bfloat16 (ml_dtypes' and PyTorch's): the top half of a float32. From float: rounded to
// nearest even; a NaN becomes the quiet NaN 0x7fc0 with its sign (ml_dtypes, Eigen); to float:
// exact.
struct bfloat16 {
  uint16_t bits;
  bfloat16() = default;
  bfloat16(float f);  // NOLINT(google-explicit-constructor)
  explicit operator float() const;
  static bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

// The same bit arithmetic as the kernels' (codegen/cpp_half_prelude.h), written for one value.
inline float16::float16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  uint32_t h;
  if (a > 0x7f800000u) {
    h = 0x7e00u | ((a >> 13) & 0x3ffu);  // NaN
  } else if (a >= 0x47800000u) {
    h = 0x7c00u;  // 65536 and above (and Inf): Inf
  } else if (a >= 0x38800000u) {
    // Normal: rebias the exponent, round the 13 dropped bits to nearest even; a carry out of
    // the largest finite value gives Inf's bits.
    h = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  } else {
    // Below 2^-14: a multiple of 2^-24, rounded to nearest even by adding 0.5 (whose last
    // place is 2^-24) in float.
    float m;
    std::memcpy(&m, &a, 4);
    m += 0.5f;
    std::memcpy(&h, &m, 4);
    h -= 0x3f000000u;
  }
  bits = uint16_t(h | sign);
}

inline float16::operator float() const {
  const uint32_t a = bits & 0x7fffu, sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t u;
  if (a >= 0x7c00u) {
    u = (a << 13) | 0x7f800000u;  // Inf, NaN
  } else if (a >= 0x400u) {
    u = (a << 13) + (112u << 23);  // normal
  } else {
    const float s = float(a) * 0x1p-24f;  // subnormal: a x 2^-24, exact
    std::memcpy(&u, &s, 4);
  }
  u |= sign;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bfloat16::bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    bits = uint16_t(((u >> 16) & 0x8000u) | 0x7fc0u);
  else
    bits = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline bfloat16::operator float() const {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int64_t numel_of(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"

// Maps a C++ element type to its DType (bool -> Bool, int32_t, int64_t, float, double, int8_t,
// uint8_t, int16_t, float16, bfloat16).
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<bool>() {
  return DType::Bool;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::Int32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::Int64;
}
template <>
constexpr DType dtype_of<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::Float64;
}
template <>
constexpr DType dtype_of<int8_t>() {
  return DType::Int8;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::UInt8;
}
template <>
constexpr DType dtype_of<int16_t>() {
  return DType::Int16;
}
template <>
constexpr DType dtype_of<float16>() {
  return DType::Float16;
}
template <>
constexpr DType dtype_of<bfloat16>() {
  return DType::BFloat16;
}

}  // namespace metajit
#pragma GCC visibility pop
