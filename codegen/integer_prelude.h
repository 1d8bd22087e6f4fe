// metajit integer prelude (codegen/integer_prelude.h): the first lines of every C++ and CUDA
// kernel. The index expressions the emitters print (CFamilyEmitter::ix) compute in i64 and call
// these, so that integer division and modulo never trap. MJ_FN qualifies each function: the
// kernel's source defines it just before this text ("static inline" in C++, MJ_HD, host and
// device, in CUDA). The build embeds it as kIntegerPrelude (CMakeLists.txt), so it may include
// no header.
typedef long long i64;
typedef unsigned long long u64;
// Integer division never traps: x/0 == x%0 == 0, and INT_MIN/-1 wraps.
MJ_FN i64 mj_div(i64 a, i64 b) { return b == 0 ? 0 : (b == -1 ? (i64)(0ULL - (u64)a) : a / b); }
MJ_FN i64 mj_mod(i64 a, i64 b) { return (b == 0 || b == -1) ? 0 : a % b; }
MJ_FN i64 mj_min(i64 a, i64 b) { return a < b ? a : b; }
MJ_FN i64 mj_max(i64 a, i64 b) { return a > b ? a : b; }
// A float or double converted to the integer type I as the reference interpreter's cast does:
// truncated toward zero, and 0 where that is outside I or NaN (a plain conversion is undefined
// there). (lo, hi) is the open interval of x's type whose values truncate into I; the emitter
// prints it (CFamilyEmitter::cast_expr).
template <class I, class F>
MJ_FN I mj_float_to_int(F x, F lo, F hi) { return (x > lo && x < hi) ? (I)x : (I)0; }
