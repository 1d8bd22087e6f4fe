// The operators: creating arrays, element-wise operators, the meta-operators (broadcast_to,
// reindex, reindex_reduce, reduce) and reductions. Each checks its arguments (ShapeError,
// DTypeError or IndexExprError naming the op, the shapes and what is valid) and returns a lazy
// Var; nothing runs until a value is needed (docs/architecture.md, "One eval()").
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "dtype.h"
#include "var.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

enum class ReduceOp { Add, Mul, Max, Min, Mean };  // Mean: reduce() only

// ---- creating ----
// An array of `shape` holding `count` elements of `dtype` copied from `data` (row-major);
// array<T>() is the typed form. ShapeError when count != the shape's element count.
Var array_from(const void* data, size_t count, DType dtype, Shape shape);
template <class T>
Var array(const std::vector<T>& data, Shape shape) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(data.begin(), data.end());
    return array_from(bytes.data(), bytes.size(), DType::Bool, std::move(shape));
  } else {
    return array_from(data.data(), data.size(), dtype_of<T>(), std::move(shape));
  }
}
Var full(Shape shape, double value, DType dtype = DType::Float32);
Var zeros(Shape shape, DType dtype = DType::Float32);
Var ones(Shape shape, DType dtype = DType::Float32);
Var arange(int64_t n, DType dtype = DType::Int32);
Var rand(Shape shape, uint64_t seed = 0, DType dtype = DType::Float32);
Var randn(Shape shape, uint64_t seed = 0, DType dtype = DType::Float32);
Var scalar(double value, DType dtype);  // 0-d constant

// ---- element-wise ----
// Binary operators and functions broadcast as numpy does and promote dtypes
// (Bool < Int32 < Int64 < Float32 < Float64); a double operand takes the Var's dtype.
Var operator+(const Var& a, const Var& b);
Var operator-(const Var& a, const Var& b);
Var operator*(const Var& a, const Var& b);
Var operator/(const Var& a, const Var& b);
Var operator+(const Var& a, double b);
Var operator-(const Var& a, double b);
Var operator*(const Var& a, double b);
Var operator/(const Var& a, double b);
Var operator+(double a, const Var& b);
Var operator-(double a, const Var& b);
Var operator*(double a, const Var& b);
Var operator/(double a, const Var& b);
Var operator-(const Var& x);
Var operator==(const Var& a, const Var& b);
Var operator!=(const Var& a, const Var& b);
Var operator<(const Var& a, const Var& b);
Var operator<=(const Var& a, const Var& b);
Var operator>(const Var& a, const Var& b);
Var operator>=(const Var& a, const Var& b);
Var operator==(const Var& a, double b);
Var operator!=(const Var& a, double b);
Var operator<(const Var& a, double b);
Var operator<=(const Var& a, double b);
Var operator>(const Var& a, double b);
Var operator>=(const Var& a, double b);
Var operator==(double a, const Var& b);
Var operator!=(double a, const Var& b);
Var operator<(double a, const Var& b);
Var operator<=(double a, const Var& b);
Var operator>(double a, const Var& b);
Var operator>=(double a, const Var& b);

Var exp(const Var& x);
Var log(const Var& x);
Var sqrt(const Var& x);
Var abs(const Var& x);
Var sin(const Var& x);
Var cos(const Var& x);
Var tanh(const Var& x);
Var sigmoid(const Var& x);
Var relu(const Var& x);
Var floor(const Var& x);
Var maximum(const Var& a, const Var& b);
Var minimum(const Var& a, const Var& b);
Var pow(const Var& a, const Var& b);
Var maximum(const Var& a, double b);
Var minimum(const Var& a, double b);
Var pow(const Var& a, double b);
Var where(const Var& cond, const Var& a, const Var& b);  // cond: non-Bool is tested != 0
Var cast(const Var& x, DType dtype);
Var logical_and(const Var& a, const Var& b);
Var logical_or(const Var& a, const Var& b);
Var logical_not(const Var& x);

// ---- fusion ----
// The same value, kept in memory: the planner never fuses x's computation into the kernels
// that read it (JAX's optimization_barrier). Gradients pass through unchanged. For programs
// that know better than the cost model (docs/design.md §4; README "Fusion").
Var fusion_barrier(const Var& x);

// ---- meta-ops ----
Var broadcast_to(const Var& x, Shape shape, std::vector<int64_t> dims = {});
// reindex: out[i...] = x[indexes(i...)], or overflow_value where an index falls outside x or
// an overflow condition holds. reindex_reduce: out = identity of `op`, then for every element
// of y, out[indexes(i...)] = op(out[...], y[i...]), skipping out-of-range targets and elements
// whose condition holds. `extras` are Int32/Int64 arrays whose values the expressions may read:
// "@eK(a, b)" is element (a, b) of extras[K], one argument per axis. An @e read outside its
// array counts as out of range (overflow_value / skipped); memory outside an array is never
// read. Keys depend on the extras' count, dtypes and ranks, never on their values or shapes.
Var reindex(const Var& x, Shape shape, std::vector<std::string> indexes, double overflow_value = 0,
            std::vector<std::string> overflow_conditions = {}, std::vector<Var> extras = {});
Var reindex_reduce(const Var& y, ReduceOp op, Shape shape, std::vector<std::string> indexes,
                   std::vector<std::string> overflow_conditions = {}, std::vector<Var> extras = {});
Var reduce(const Var& x, ReduceOp op, std::vector<int64_t> dims = {}, bool keepdims = false);
Var sum(const Var& x, std::vector<int64_t> dims = {}, bool keepdims = false);
Var mean(const Var& x, std::vector<int64_t> dims = {}, bool keepdims = false);
Var max(const Var& x, std::vector<int64_t> dims = {}, bool keepdims = false);
Var min(const Var& x, std::vector<int64_t> dims = {}, bool keepdims = false);
Var prod(const Var& x, std::vector<int64_t> dims = {}, bool keepdims = false);

}  // namespace metajit
#pragma GCC visibility pop
