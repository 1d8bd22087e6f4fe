// The C++ kernel preludes compiled as the project's own code, with its warnings (CMakeLists.txt:
// -Werror in CI): every CPU kernel's source carries their text (codegen/cpp_emitter.cc run()),
// which otherwise only g++ at kernel-compile time would see, without warnings.
//
// The integer prelude comes first in a kernel, its functions static inline
// (CFamilyEmitter::integer_prelude).
// In the kernel's order: clang-format must not sort them.
// clang-format off
#define MJ_FN static inline
#include "codegen/integer_prelude.h"
#include "codegen/cpp_kernel_prelude.h"
#include "codegen/cpp_contraction_prelude.h"
#include "codegen/cpp_narrow_prelude.h"
#include "codegen/cpp_bf16_dot_prelude.h"
#include "codegen/cpp_int8_dot_prelude.h"
// clang-format on

// Uses of the helpers that are not inline, as a contraction kernel's (-Wunused-function).
extern "C" i64 metajit_prelude_compile_check(i64 rows) {
  float* scratch = mj_take(0, 64);
  const i64 blocks = mj_row_blocks(rows, 1, rows);
  mj_give(0, scratch);
  return blocks;
}

// The narrow-type prelude's helpers a kernel may leave unused (-Wunused-function).
extern "C" float metajit_narrow_prelude_compile_check(double d, float f, mj_f16* h, mj_bf16* b) {
  *h = mj_round_f16d(d) + mj_round_bf16d(d);
  *b = mj_round_bf16(f) + mj_round_f16(f);
  return float(mj_float_to_int<signed char>(d, -129.0, 128.0) +
               mj_float_to_int<unsigned char>(f, -1.0f, 256.0f)) +
         *h + *b;
}

// The groupings the step-grouped contraction kernels call (their products need AVX2, AVX-512,
// AVX512_BF16 or AVX512-VNNI, which this build's flags need not have: tests/test_cpu_targets.cc
// compiles them in kernels).
extern "C" void metajit_dot_preludes_compile_check(unsigned* panel, i64 w, i64 kn, int* sums) {
  mj_pair_bf16(panel, w, kn);
  mj_quad_bytes(panel, w, kn, 128);
  mj_pair_int16(panel, w, kn);
  mj_quad_column_sums(panel, w * kn, 1, w, (kn + 3) / 4, sums, 1);
}
