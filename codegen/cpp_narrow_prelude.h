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
// written; inside the kernel a half value keeps its float value, rounded to its type only where
// it is stored or cast (mj_round_f16 / mj_round_bf16). The element conversions are integer
// arithmetic and selects, written so that g++ vectorises them: g++ 12 has no vector type for
// _Float16 without AVX512-FP16, so F16C's conversions would run one element at a time. Where the
// schedule strip-mines a loop over float16 buffers (codegen/half_strips.h), mj_widen_f16 and
// mj_narrow_f16 below convert whole strips with F16C's vector instructions instead. The bit
// patterns are those of include/metajit/dtype.h's float16 and bfloat16
// (tests/test_precision.cc compares them for every half and many floats).

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

// The bits of the half element `element` places after `base`, read as the low half of the 32-bit
// word at its address: where lanes gather half elements (a flat strip's,
// codegen/cpp_flat_strips.cc) g++ vectorises this as a 32-bit gather (vpgatherdd), a 16-bit
// element load not at all. The
// word's top half is the next element or, past a buffer's end, the slack every host buffer has
// after its bytes (base/buffer.cc kHostReadSlack).
typedef unsigned mj_u32_any __attribute__((aligned(1), may_alias));
static inline unsigned mj_half_word(const void* base, i64 element) {
  return *(const mj_u32_any*)((const char*)base + 2 * element) & 0xffffu;
}

// A strip of n float16 values widened to floats, and n floats rounded to float16 values: what
// the element conversions above give, eight or sixteen at a time with F16C's vcvtph2ps /
// vcvtps2ph (AVX-512's forms where the target has it), the rest one by one. GCC's builtins,
// since this text includes no header; other compilers take the element loop. vcvtph2ps quiets a
// signalling NaN (sets its payload's top bit), which the element conversion and numpy keep: a
// vector with a NaN lane is converted again one element at a time.
#if defined(__GNUC__) && !defined(__clang__) && defined(__F16C__)
typedef short mj_w8h __attribute__((vector_size(16), aligned(2), may_alias));
typedef float mj_w8f __attribute__((vector_size(32), aligned(4), may_alias));
#if defined(__AVX512F__)
typedef short mj_w16h __attribute__((vector_size(32), aligned(2), may_alias));
typedef float mj_w16f __attribute__((vector_size(64), aligned(4), may_alias));
#endif
#define MJ_F16C_STRIPS 1
#endif

static inline void mj_widen_f16(const mj_f16* __restrict__ src, float* __restrict__ dst, i64 n) {
  i64 k = 0;
#if defined(MJ_F16C_STRIPS) && defined(__AVX512F__)
  for (; k + 16 <= n; k += 16) {
    const mj_w16f f = __builtin_ia32_vcvtph2ps512_mask(*(const mj_w16h*)(src + k), mj_w16f{},
                                                       (unsigned short)0xffff, 4);
    *(mj_w16f*)(dst + k) = f;
    if (__builtin_ia32_cmpps512_mask(f, f, 3, (unsigned short)0xffff, 4))  // 3: unordered
      for (i64 t = k; t < k + 16; ++t) dst[t] = src[t];
  }
#endif
#if defined(MJ_F16C_STRIPS)
  for (; k + 8 <= n; k += 8) {
    const mj_w8f f = __builtin_ia32_vcvtph2ps256(*(const mj_w8h*)(src + k));
    *(mj_w8f*)(dst + k) = f;
    if (__builtin_ia32_movmskps256(__builtin_ia32_cmpps256(f, f, 3)))
      for (i64 t = k; t < k + 8; ++t) dst[t] = src[t];
  }
#endif
  for (; k < n; ++k) dst[k] = src[k];
}

// One float16 element widened, and one float rounded into a float16 element, where the loop
// runs one element at a time (CFamilyEmitter::scalar_halves_: a map nest whose innermost loop
// is not SIMD): F16C's conversion of one lane, two instructions where the element conversions
// above take a dozen; a NaN is widened again by mj_f16_to_float (vcvtph2ps quiets a signalling
// one). vcvtps2ph rounds to nearest even and keeps a NaN's top payload bits, as mj_f16_bits does.
// Without F16C, the element conversions.
#if defined(MJ_F16C_STRIPS)
typedef float mj_w4f __attribute__((vector_size(16)));
#endif
static inline float mj_f16_one(mj_f16 h) {
#if defined(MJ_F16C_STRIPS)
  const mj_w4f f = __builtin_ia32_vcvtph2ps(mj_w8h{(short)h.bits});
  return f[0] == f[0] ? f[0] : mj_f16_to_float(h.bits);
#else
  return h;
#endif
}
static inline void mj_f16_set_one(mj_f16& dst, float x) {
#if defined(MJ_F16C_STRIPS)
  dst.bits = (unsigned short)__builtin_ia32_vcvtps2ph(mj_w4f{x, 0, 0, 0}, 0)[0];
#else
  dst = x;
#endif
}

static inline void mj_narrow_f16(const float* __restrict__ src, mj_f16* __restrict__ dst, i64 n) {
  i64 k = 0;
#if defined(MJ_F16C_STRIPS) && defined(__AVX512F__)
  for (; k + 16 <= n; k += 16)  // 0: to nearest even
    *(mj_w16h*)(dst + k) = __builtin_ia32_vcvtps2ph512_mask(*(const mj_w16f*)(src + k), 0,
                                                            mj_w16h{}, (unsigned short)0xffff);
#endif
#if defined(MJ_F16C_STRIPS)
  for (; k + 8 <= n; k += 8)
    *(mj_w8h*)(dst + k) = __builtin_ia32_vcvtps2ph256(*(const mj_w8f*)(src + k), 0);
#endif
  for (; k < n; ++k) dst[k] = src[k];
}
