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
// With a seed: fixed values, computed on the host (the same on every machine). Without one: a
// draw from the random stream (Philox4x32-10 in the kernels; meta_ops/random_stream.h): new
// numbers on every call and every jit replay, reproducible from manual_seed (the stream starts
// at seed 0). rand is uniform in [0, 1); randn standard normal (Box-Muller).
Var rand(Shape shape, uint64_t seed, DType dtype = DType::Float32);
Var randn(Shape shape, uint64_t seed, DType dtype = DType::Float32);
Var rand(Shape shape, DType dtype = DType::Float32);
Var randn(Shape shape, DType dtype = DType::Float32);
// Restarts the random stream: the draws after it are the same as after any other
// manual_seed(seed) with this seed. Seed and counter are kernel inputs, never part of a key.
void manual_seed(uint64_t seed);
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

// Mixed precision (shared/api.md "Precision"; docs/design.md §3): while an autocast is alive on
// this thread, the ops BUILT compute matmul and conv2d (and so their gradients) on Float32
// operands cast to `compute` (Float16 or BFloat16, else DTypeError), with float32 sums and
// results in `compute`; sum, mean, prod, softmax, log_softmax, the losses and the norms take a
// half input as Float32 and return Float32 (max and min keep it: their result is exact). Float64
// and integer values are never cast, and Float32 parameters stay Float32 (master weights): their
// gradients come back Float32 through the casts. Scopes nest; the innermost one decides. nn's
// Linear, Conv2d and MultiheadAttention add their biases in the product's dtype, as torch's do.
class autocast {
 public:
  explicit autocast(DType compute = DType::BFloat16);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  int previous_;  // the enclosing scope's dtype, -1 for none
};
Var logical_and(const Var& a, const Var& b);
Var logical_or(const Var& a, const Var& b);
Var logical_not(const Var& x);

// ---- the element-wise ops models need (models issue) ----
// Library functions (libmvec-vectorised on the CPU); integers compute them in Float32.
Var erf(const Var& x);
Var log1p(const Var& x);
Var expm1(const Var& x);
Var tan(const Var& x);
Var atan(const Var& x);
Var asin(const Var& x);
Var acos(const Var& x);
// Composites of the ops above (meta_ops/activations.cc).
Var rsqrt(const Var& x);  // 1 / sqrt(x)
Var sign(const Var& x);   // 1, -1 or 0 in x's dtype; NaN stays NaN; gradient 0
// lo where x < lo, hi where x > hi, else x (torch.clamp: NaN stays NaN, lo > hi gives hi);
// the bounds take x's dtype; a NaN bound is an Error.
Var clamp(const Var& x, double lo, double hi);
Var gelu(const Var& x, bool tanh_approx = false);  // exact (erf) or torch's tanh approximation
Var silu(const Var& x);                            // x * sigmoid(x)
// Bitwise ops on Bool, Int32 and Int64 (promoted as arithmetic is; a float is a DTypeError).
// bitwise_not of a Bool is logical not. Shifts count Bools in Int32; a shift by a negative
// amount or by the width or more gives 0 (left) or the sign, -1 or 0 (right, arithmetic).
Var bitwise_and(const Var& a, const Var& b);
Var bitwise_or(const Var& a, const Var& b);
Var bitwise_xor(const Var& a, const Var& b);
Var bitwise_not(const Var& x);
Var shift_left(const Var& a, const Var& b);
Var shift_right(const Var& a, const Var& b);

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
