// The CUDA preludes as the host emulation compiles them, built as the project's own code with
// its warnings (tests/CMakeLists.txt; -Werror in CI): every emulated kernel's source carries
// their text (codegen/cuda_emitter.cc), which otherwise only g++ at kernel-compile time would
// see, without warnings. The GPU prelude (codegen/cuda_gpu_prelude.h) needs nvcc: the GPU kernel
// tests compile it (tests/test_cuda_codegen.cc).
// In the kernel's order: clang-format must not sort them. The integer prelude comes between the
// two, its functions MJ_HD (CFamilyEmitter::integer_prelude).
// clang-format off
#include "codegen/cuda_emulation_prelude.h"
#define MJ_FN MJ_HD
#include "codegen/integer_prelude.h"
#include "codegen/cuda_common_prelude.h"
#include "codegen/cuda_narrow_prelude.h"
// clang-format on

// A use of the helpers, as a kernel's (-Wunused-function).
extern "C" double metajit_cuda_prelude_compile_check(i64 a, i64 b) {
  return mj_pow_int(a, b) + mj_pow_i32(a, b) + double(mj_pow_i64(a, b)) +
         double(mj_blocks(a, 256, 1024u)) + double(mj_round_f16d(double(a))) +
         double(mj_round_bf16d(double(b))) +
         double(__bfloat16_as_ushort(__ushort_as_bfloat16(__half_as_ushort(__ushort_as_half(1)))));
}
