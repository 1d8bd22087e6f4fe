// Element types and shapes, with the promotion rules of docs/design.md §3.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

enum class DType { Bool, Int32, Int64, Float32, Float64 };
using Shape = std::vector<int64_t>;

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "bool", "int32", ...
bool is_float(DType t);
// Wider of the two in Bool < Int32 < Int64 < Float32 < Float64.
DType promote(DType a, DType b);

int64_t numel_of(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"

// Maps a C++ element type to its DType (bool -> Bool, int32_t, int64_t, float, double).
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

}  // namespace metajit
#pragma GCC visibility pop
