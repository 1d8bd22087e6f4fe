// metajit C++ kernel prelude (codegen/cpp_kernel_prelude.h): every CPU kernel's source carries
// this text after the integer prelude (i64, mj_div, ...: CFamilyEmitter::integer_prelude). The
// build embeds it as kCppKernelPrelude (CMakeLists.txt), so it may include no header: kernels
// compile from the cache alone (g++ -fno-math-errno, runtime/toolchain.cc).
// Integer pow through double; NaN or out-of-range results give 0.
static inline int mj_pow_i32(double a, double b) { double r = __builtin_pow(a, b); return (r == r && r >= -2147483648.0 && r <= 2147483647.0) ? (int)r : 0; }
static inline i64 mj_pow_i64(double a, double b) { double r = __builtin_pow(a, b); return (r == r && r >= -9223372036854775808.0 && r < 9223372036854775808.0) ? (i64)r : 0; }
// libm, declared SIMD-callable so that loops vectorise through glibc's libmvec (same NaN/Inf
// semantics as libm; only errno is not set: -fno-math-errno).
// atan under another name, bound to libm's symbol by an asm label: with -fno-math-errno, g++
// rewrites sin(atan(x)) and cos(atan(x)) to x/sqrt(x*x+1) and 1/sqrt(x*x+1) behind a bound test
// that sends NaN to +-1 and 0 (g++ 12; cos(atan(NaN)) evaluated to 0, found by
// fuzz/fuzz_graph_eval.cc). g++ only folds calls it knows as builtins; mj_atanf is not one, and
// still vectorises through libmvec's _ZGV*_atanf (const: it reads nothing but its argument).
extern "C" {
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
float sinf(float);
#pragma omp declare simd notinbranch
float cosf(float);
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
float powf(float, float);
#pragma omp declare simd notinbranch
float erff(float);
#pragma omp declare simd notinbranch
float log1pf(float);
#pragma omp declare simd notinbranch
float expm1f(float);
#pragma omp declare simd notinbranch
float tanf(float);
#pragma omp declare simd notinbranch
float mj_atanf(float) __asm__("atanf") __attribute__((const, nothrow));
#pragma omp declare simd notinbranch
float asinf(float);
#pragma omp declare simd notinbranch
float acosf(float);
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
double log(double);
#pragma omp declare simd notinbranch
double sin(double);
#pragma omp declare simd notinbranch
double cos(double);
#pragma omp declare simd notinbranch
double tanh(double);
#pragma omp declare simd notinbranch
double pow(double, double);
#pragma omp declare simd notinbranch
double erf(double);
#pragma omp declare simd notinbranch
double log1p(double);
#pragma omp declare simd notinbranch
double expm1(double);
#pragma omp declare simd notinbranch
double tan(double);
#pragma omp declare simd notinbranch
double mj_atan(double) __asm__("atan") __attribute__((const, nothrow));
#pragma omp declare simd notinbranch
double asin(double);
#pragma omp declare simd notinbranch
double acos(double);
}
// float32 exp computed here, not by libmvec: the call to glibc's vector expf cost SELU over 16M
// floats 5.3-6.9 ms against 3.8-3.9 inline on AVX-512 (the copy floor 3.7), 7.5 against 5.8 on
// AVX2 (bench/README.md). x = n ln2 + r with n = round(x / ln2) (the 1.5 * 2^23 shift rounds to
// nearest even) and |r| <= ln2 / 2, ln2 split in two so that n * ln2_hi is exact; exp(r) = 1 + r
// + r^2 q(r), q of degree 4 fitted to exp's relative error on that interval (3e-9); 2^n applied in
// two halves, so that results down to the subnormals round once. Against glibc 2.36's expf over
// every one of the 2^32 floats: at most 1 ulp, with and without FMA; 0, inf and NaN where libm
// has them (tests/test_vector_math.cc). Below -104 the result is 0 (exp(-104) is under half the
// smallest subnormal) and above 89 inf, both through the clamp; no lane is slow: an attention
// mask's -1e9 or -inf is as fast as any score. Comparisons, not fminf/fmaxf, clamp: g++ does not
// vectorise fmaxf without -ffinite-math-only.
#if defined(__FMA__)
#define MJ_FMAF(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define MJ_FMAF(a, b, c) ((a) * (b) + (c))
#endif
static inline float mj_expf(float x) {
  const float above = x < -104.0f ? -104.0f : x;
  const float xc = above > 89.0f ? 89.0f : above;
  const float shifted = MJ_FMAF(xc, 1.44269502163f, 12582912.0f);
  const float n = shifted - 12582912.0f;
  const int ni = __builtin_bit_cast(int, shifted) - 0x4b400000;
  float r = MJ_FMAF(n, -0.693145751953125f, xc);
  r = MJ_FMAF(n, -1.42860676533e-06f, r);
  float q = MJ_FMAF(1.38146127574e-03f, r, 8.36871005595e-03f);
  q = MJ_FMAF(q, r, 4.16683889925e-02f);
  q = MJ_FMAF(q, r, 1.66665211320e-01f);
  q = MJ_FMAF(q, r, 4.99999940395e-01f);
  const float y = MJ_FMAF(q, r * r, r) + 1.0f;
  const int half = ni >> 1;
  const float scaled = y * __builtin_bit_cast(float, (half + 127) << 23);
  const float e = scaled * __builtin_bit_cast(float, (ni - half + 127) << 23);
  return x != x ? x : e;
}
// float64 exp goes to libmvec, guarded: glibc's vector exp computes a whole vector with scalar
// calls when one lane is outside its fast range, and attention masks put -1e9 or -inf in half the
// scores (a masked softmax row sum ran 7x slower, 215 against 33 us, measured with float32's
// libmvec expf). Below -746 exp is 0 to the last bit, so those lanes get the argument 0 and the
// result 0; NaN keeps its lane. The guard is a bit mask, not a select: g++ folds a select on the
// argument back into the call.
static inline double mj_exp(double x) {
  const long long keep = -(long long)!(x < -746.0);
  const double e = exp(__builtin_bit_cast(double, __builtin_bit_cast(long long, x) & keep));
  return __builtin_bit_cast(double, __builtin_bit_cast(long long, e) & keep);
}
// log1p, asin and acos outside their domains (x < -1, |x| > 1) are NaN, and glibc's vector
// variants compute a whole vector with scalar calls when one lane is there (log1p of normal
// samples ran 3x slower than of their absolute values, 28 against 9 ms on 16M floats,
// measured): those lanes get the argument 0 and the result NaN, by bit masks as in mj_exp.
static inline float mj_log1pf(float x) {
  const int bad = -(int)(x < -1.0f);
  const float r = log1pf(__builtin_bit_cast(float, __builtin_bit_cast(int, x) & ~bad));
  return __builtin_bit_cast(float, __builtin_bit_cast(int, r) | (bad & 0x7fc00000));
}
static inline double mj_log1p(double x) {
  const long long bad = -(long long)(x < -1.0);
  const double r = log1p(__builtin_bit_cast(double, __builtin_bit_cast(long long, x) & ~bad));
  return __builtin_bit_cast(double, __builtin_bit_cast(long long, r) | (bad & 0x7ff8000000000000LL));
}
static inline float mj_asinf(float x) {
  const int bad = -(int)(__builtin_fabsf(x) > 1.0f);
  const float r = asinf(__builtin_bit_cast(float, __builtin_bit_cast(int, x) & ~bad));
  return __builtin_bit_cast(float, __builtin_bit_cast(int, r) | (bad & 0x7fc00000));
}
static inline double mj_asin(double x) {
  const long long bad = -(long long)(__builtin_fabs(x) > 1.0);
  const double r = asin(__builtin_bit_cast(double, __builtin_bit_cast(long long, x) & ~bad));
  return __builtin_bit_cast(double, __builtin_bit_cast(long long, r) | (bad & 0x7ff8000000000000LL));
}
static inline float mj_acosf(float x) {
  const int bad = -(int)(__builtin_fabsf(x) > 1.0f);
  const float r = acosf(__builtin_bit_cast(float, __builtin_bit_cast(int, x) & ~bad));
  return __builtin_bit_cast(float, __builtin_bit_cast(int, r) | (bad & 0x7fc00000));
}
static inline double mj_acos(double x) {
  const long long bad = -(long long)(__builtin_fabs(x) > 1.0);
  const double r = acos(__builtin_bit_cast(double, __builtin_bit_cast(long long, x) & ~bad));
  return __builtin_bit_cast(double, __builtin_bit_cast(long long, r) | (bad & 0x7ff8000000000000LL));
}
// Selects without branches. Where a loop is not vectorised (a pooling's 2x2 window, a
// gradient's i/2 gather), g++ compiles `c ? a : b` on floats, and the NaN-propagating max and
// min, as branches, and threads them into one another: data-dependent, half of them
// mispredicted (a 2x2 max-pool over relu, 64x8x8x8: 238 us with branches, 76 without). These
// select with bit masks, which are neither branched nor threaded, and vectorise where the loop
// does (compare, and, or). Exactly `c ? a : b`: every bit of the chosen value, -0 and NaN too.
static inline float mj_selectf(bool c, float a, float b) {
  const int m = -(int)c;
  return __builtin_bit_cast(float, (__builtin_bit_cast(int, a) & m) | (__builtin_bit_cast(int, b) & ~m));
}
static inline double mj_select(bool c, double a, double b) {
  const long long m = -(long long)c;
  return __builtin_bit_cast(double, (__builtin_bit_cast(long long, a) & m) | (__builtin_bit_cast(long long, b) & ~m));
}
// relu: x > 0 ? x : +0 (NaN and -0 give +0).
static inline float mj_reluf(float x) { return __builtin_bit_cast(float, __builtin_bit_cast(int, x) & -(int)(x > 0)); }
static inline double mj_relu(double x) { return __builtin_bit_cast(double, __builtin_bit_cast(long long, x) & -(long long)(x > 0)); }
// max and min propagating NaN (numpy's maximum/minimum): a when a is NaN, else a > b ? a : b
// (b when b is NaN: the comparison is false).
static inline float mj_max_nanf(float a, float b) { return mj_selectf(a != a, a, a > b ? a : b); }
static inline float mj_min_nanf(float a, float b) { return mj_selectf(a != a, a, a < b ? a : b); }
static inline double mj_max_nan(double a, double b) { return mj_select(a != a, a, a > b ? a : b); }
static inline double mj_min_nan(double a, double b) { return mj_select(a != a, a, a < b ? a : b); }
extern "C" void* malloc(unsigned long);
extern "C" void free(void*);
extern "C" int omp_get_max_threads(void);
extern "C" int omp_get_thread_num(void);
// NaN-propagating max/min reductions (like numpy), for OpenMP's parallel and simd reductions.
#pragma omp declare reduction(mj_maxf : float : omp_out = (omp_in > omp_out || omp_in != omp_in) ? omp_in : omp_out) initializer(omp_priv = -__builtin_inff())
#pragma omp declare reduction(mj_minf : float : omp_out = (omp_in < omp_out || omp_in != omp_in) ? omp_in : omp_out) initializer(omp_priv = __builtin_inff())
#pragma omp declare reduction(mj_maxd : double : omp_out = (omp_in > omp_out || omp_in != omp_in) ? omp_in : omp_out) initializer(omp_priv = -__builtin_inf())
#pragma omp declare reduction(mj_mind : double : omp_out = (omp_in < omp_out || omp_in != omp_in) ? omp_in : omp_out) initializer(omp_priv = __builtin_inf())
