// The random stream (meta_ops/random_stream.h): manual_seed, rand/randn without a seed and
// dropout, drawn by Philox4x32-10 built from integer element-wise ops, so that a draw fuses into
// the kernel that reads it and its seed and offset are kernel inputs, never part of a key.
#include <metajit/composite.h>
#include <metajit/error.h>

#include <cmath>
#include <mutex>
#include <numbers>
#include <string>

#include "meta_ops/ops.h"
#include "meta_ops/random_stream.h"

namespace metajit {
namespace {

constexpr int64_t kWord = 0xFFFFFFFFLL;

struct Stream {
  std::mutex mu;
  uint64_t seed = 0;
  uint64_t offset = 0;  // counters taken so far
};
Stream& stream() {
  static Stream s;
  return s;
}

thread_local RandomTrace* t_trace = nullptr;

Var i64(int64_t v) {
  return scalar(double(v), DType::Int64);
}
Var low_word(const Var& x) {
  return bitwise_and(x, i64(kWord));
}
// The high 32 bits of a 64-bit value, as a word (the arithmetic shift's sign bits masked off).
Var high_word(const Var& x) {
  return low_word(shift_right(x, i64(32)));
}

// Element k of the Int64 [4] source, as a 0-d Var.
Var source_word(const Var& source, int64_t k) {
  return reshape(slice(source, 0, k, k + 1), {});
}

// The four counter words of every element of a draw of `shape`: counter = offset + flat index,
// 64 bits in words 0 and 1; words 2 and 3 are 0.
std::array<Var, 4> counter_words(const Var& source, uint64_t local, const Shape& shape) {
  const Var offset = source_word(source, 2) + shift_left(source_word(source, 3), i64(32));
  const Var index = reshape(arange(numel_of(shape), DType::Int64), shape);
  const Var counter = index + (offset + i64(int64_t(local)));
  return {low_word(counter), high_word(counter), zeros(shape, DType::Int64),
          zeros(shape, DType::Int64)};
}

// The Philox words of a draw of `shape`: from the trace's placeholder inside a jit trace, else
// from counters taken from the stream now.
std::array<Var, 4> draw_words(const Shape& shape) {
  const uint64_t n = uint64_t(numel_of(shape));
  Var source;
  uint64_t local = 0;
  if (RandomTrace* t = t_trace) {
    source = t->source;
    local = t->used;
    t->used += n;
  } else {
    const RandomWords w = take_random_counters(n);
    source = array(std::vector<int64_t>(w.begin(), w.end()), {4});
  }
  return philox4x32(counter_words(source, local, shape), source_word(source, 0),
                    source_word(source, 1));
}

// A word's top `bits` bits as a float in [0, 1): exact in float32 (24) and float64 (53).
Var unit_interval(const Var& hi, const Var& lo, DType dtype) {
  if (dtype == DType::Float32) return cast(shift_right(hi, i64(8)), dtype) * 0x1p-24;
  const Var bits53 = bitwise_or(shift_left(hi, i64(21)), shift_right(lo, i64(11)));
  return cast(bits53, dtype) * 0x1p-53;
}

void check_float(DType dtype, const Shape& shape, const char* op) {
  if (!is_float(dtype))
    throw DTypeError(
        std::string(op) + ": dtype " + dtype_name(dtype) + " for shape " + shape_str(shape) +
        " is not supported; expected a float type (float16, bfloat16, float32 or float64)");
}

}  // namespace

RandomWords take_random_counters(uint64_t count) {
  Stream& s = stream();
  std::lock_guard<std::mutex> lock(s.mu);
  const RandomWords w = {int64_t(s.seed & uint64_t(kWord)), int64_t(s.seed >> 32),
                         int64_t(s.offset & uint64_t(kWord)), int64_t(s.offset >> 32)};
  s.offset += count;
  return w;
}

RandomTrace* random_trace() {
  return t_trace;
}
void set_random_trace(RandomTrace* t) {
  t_trace = t;
}

std::array<Var, 4> philox4x32(const std::array<Var, 4>& counter, const Var& key0, const Var& key1) {
  std::array<Var, 4> c = counter;
  for (int64_t round = 0; round < 10; ++round) {
    // Round r's key is the key plus r Weyl increments, mod 2^32: each from the key directly, so
    // the keys are no chain of dependent values.
    const Var k0 = low_word(key0 + i64((round * 0x9E3779B9LL) & kWord));
    const Var k1 = low_word(key1 + i64((round * 0xBB67AE85LL) & kWord));
    // 32 x 32 -> 64-bit products: below 2^64, so Int64's wrapping keeps every bit.
    const Var p0 = c[0] * double(0xD2511F53u), p1 = c[2] * double(0xCD9E8D57u);
    c = {bitwise_xor(bitwise_xor(high_word(p1), c[1]), k0), low_word(p1),
         bitwise_xor(bitwise_xor(high_word(p0), c[3]), k1), low_word(p0)};
  }
  return c;
}

void manual_seed(uint64_t seed) {
  Stream& s = stream();
  std::lock_guard<std::mutex> lock(s.mu);
  s.seed = seed;
  s.offset = 0;
}

// A half type draws in Float32 (unit_interval's integer would overflow Float16) and rounds once;
// [0, 1) is kept by the type's largest value below 1, as the seeded rand does (meta_ops/ops.cc).
Var rand(Shape shape, DType dtype) {
  check_shape_fits("rand", dtype, shape);
  check_float(dtype, shape, "rand");
  const std::array<Var, 4> w = draw_words(shape);
  if (!is_half(dtype)) return unit_interval(w[0], w[1], dtype);
  const double below_one = dtype == DType::Float16 ? 1.0 - 0x1p-11 : 1.0 - 0x1p-8;
  return cast(minimum(unit_interval(w[0], w[1], DType::Float32), below_one), dtype);
}

// Box-Muller on two uniforms of the block: u1 in (0, 1] (log finite), u2 in [0, 1).
Var randn(Shape shape, DType dtype) {
  check_shape_fits("randn", dtype, shape);
  check_float(dtype, shape, "randn");
  const std::array<Var, 4> w = draw_words(shape);
  // A half type draws in Float32 and rounds once at the end.
  const DType compute = is_half(dtype) ? DType::Float32 : dtype;
  const double ulp = compute == DType::Float32 ? 0x1p-24 : 0x1p-53;
  const Var u1 = unit_interval(w[0], w[1], compute) + ulp;
  const Var u2 = unit_interval(w[2], w[3], compute);
  const Var z = sqrt(log(u1) * -2.0) * cos(u2 * (2 * std::numbers::pi));
  return compute == dtype ? z : cast(z, dtype);
}

Var dropout(const Var& x, double p, bool training) {
  require_defined(x, "dropout");
  if (!(p >= 0 && p <= 1))
    throw Error("dropout: p = " + std::to_string(p) + " for x of shape " + shape_str(x.shape()) +
                "; expected 0 <= p <= 1");
  check_float(x.dtype(), x.shape(), "dropout");
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  // A half x's mask compares a Float32 draw with p: p's rounding to the half type would move
  // the keep rate (p = 0.1 as a bfloat16 is 0.10009765625).
  const Var keep = rand(x.shape(), is_half(x.dtype()) ? DType::Float32 : x.dtype()) >= p;
  return where(keep, x * (1 / (1 - p)), zeros({}, x.dtype()));
}

}  // namespace metajit
