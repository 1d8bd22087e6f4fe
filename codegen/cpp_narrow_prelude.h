// metajit narrow-type prelude (codegen/cpp_narrow_prelude.h): a C++ kernel whose buffers or
// values include Int8, UInt8, Int16, Float16 or BFloat16 carries this text after
// codegen/cpp_kernel_prelude.h (CppEmitter::run). Embedded as kCppNarrowPrelude
// (CMakeLists.txt), so it may include no header.
//
// A float converts to an 8- or 16-bit integer through codegen/integer_prelude.h's
// mj_float_to_int, as to the wider ones.
//
// Half values are stored in 16 bits and computed in float (docs/design.md §3): a buffer element
// is an mj_f16 / mj_bf16, which widens exactly when read and rounds to nearest even when
// written, and the result of every op of a half dtype is rounded to it (mj_round_f16 /
// mj_round_bf16), so that a fused kernel gives the values of the same ops run one by one. The
// conversions are integer arithmetic and selects, written so that g++ vectorises them: g++ 12
// has no vector type for _Float16 without AVX512-FP16, so F16C's conversions would run one
// element at a time. The bit patterns are those of include/metajit/dtype.h's float16 and
// bfloat16 (tests/test_precision.cc compares them for every half and many floats).

// float16 bits -> float, exact: Inf and NaN keep their payload, subnormals are a x 2^-24.
// Everything stays 32 bits wide until the store: g++ narrowed the selects to 16-bit lanes
// otherwise, packing every mask (a float16 copy 20% slower on AVX2, measured).
static inline float mj_f16_to_float(unsigned h) {
  const unsigned a = h & 0x7fffu, sign = (h & 0x8000u) << 16;
  const unsigned normal = (a << 13) + (112u << 23);
  const unsigned sub = __builtin_bit_cast(unsigned, (float)(int)a * 0x1p-24f);
  unsigned mag = a >= 0x400u ? normal : sub;
  mag = a >= 0x7c00u ? ((a << 13) | 0x7f800000u) : mag;
  return __builtin_bit_cast(float, mag | sign);
}

// float -> float16 bits, to nearest even: 65520 and above are Inf, a NaN is quieted with its
// payload's top bits, below 2^-14 a multiple of 2^-24 (rounded by adding 0.5, whose last place
// is 2^-24, in float).
static inline unsigned mj_f16_bits(float f) {
  const unsigned u = __builtin_bit_cast(unsigned, f);
  const unsigned sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  const unsigned normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const unsigned sub =
      __builtin_bit_cast(unsigned, __builtin_bit_cast(float, a) + 0.5f) - 0x3f000000u;
  unsigned mag = a >= 0x38800000u ? normal : sub;
  mag = a >= 0x47800000u ? 0x7c00u : mag;
  mag = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : mag;
  return mag | sign;
}

static inline float mj_bf16_to_float(unsigned b) {
  return __builtin_bit_cast(float, b << 16);
}

// float -> bfloat16 bits, to nearest even; a NaN is 0x7fc0 with its sign.
static inline unsigned mj_bf16_bits(float f) {
  const unsigned u = __builtin_bit_cast(unsigned, f);
  const unsigned rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const unsigned nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  return (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
}

// A float rounded to the half type, as a float.
static inline float mj_round_f16(float x) {
  return mj_f16_to_float(mj_f16_bits(x));
}
static inline float mj_round_bf16(float x) {
  return mj_bf16_to_float(mj_bf16_bits(x));
}

// The float nearest to `d` toward zero with its last bit set where that is inexact (rounding
// to odd): rounded once more to a half type it gives the direct rounding of `d`, which a
// double -> float -> half conversion would not (base/dtype.cc round_to_odd_float).
static inline float mj_to_odd_float(double d) {
  const float f = (float)d;
  const unsigned u = __builtin_bit_cast(unsigned, f);
  const unsigned away = __builtin_fabs((double)f) > __builtin_fabs(d) ? 1u : 0u;
  const unsigned odd = (u - away) | 1u;
  return __builtin_bit_cast(float, (d == d && (double)f != d) ? odd : u);
}
static inline float mj_round_f16d(double d) {
  return mj_round_f16(mj_to_odd_float(d));
}
static inline float mj_round_bf16d(double d) {
  return mj_round_bf16(mj_to_odd_float(d));
}

// A buffer element of a half type: read as a float (exact), written from a float (rounded).
struct mj_f16 {
  unsigned short bits;
  operator float() const { return mj_f16_to_float(bits); }
  mj_f16& operator=(float f) {
    bits = (unsigned short)mj_f16_bits(f);
    return *this;
  }
};
struct mj_bf16 {
  unsigned short bits;
  operator float() const { return mj_bf16_to_float(bits); }
  mj_bf16& operator=(float f) {
    bits = (unsigned short)mj_bf16_bits(f);
    return *this;
  }
};
