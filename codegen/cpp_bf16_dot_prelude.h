// metajit bfloat16 dot-product prelude (codegen/cpp_bf16_dot_prelude.h): a contraction kernel
// whose schedule pairs bfloat16 operands (ContractionSchedule::bf16_pairs, codegen/cpu_schedule.h:
// both factors bfloat16, the target has AVX512_BF16) carries this text after
// codegen/cpp_contraction_prelude.h, before its micro-kernels (CppEmitter::micro_kernel_bf16,
// codegen/cpp_step_groups.cc). It comes after codegen/cpp_narrow_prelude.h (mj_bf16_bits), which
// every kernel with bfloat16 values carries. Embedded as kCppBf16DotPrelude (CMakeLists.txt), so
// it may include no header.
//
// The packing's float32 panels become pairs of bfloat16 values, rounded to nearest even, for
// vdpbf16ps (mj_pair_steps, codegen/cpp_contraction_prelude.h).
static inline void mj_pair_bf16(unsigned* p, i64 w, i64 kn) {
  mj_pair_steps(p, w, kn,
                [](unsigned bits) { return mj_bf16_bits(__builtin_bit_cast(float, bits)); });
}

// Only with AVX512_BF16, which every kernel that multiplies bfloat16 pairs is compiled for; the
// project's own build compiles the rest of this file without it (tests/prelude_compile_check.cc).
#if defined(__AVX512BF16__)
// 16 floats: the accumulators of the bfloat16 micro-kernels.
typedef float mj_v16f __attribute__((vector_size(64)));

// acc[t] += b's pair t times the pair at a, both halves (vdpbf16ps: the two products are exact
// in float32 and added to acc one after the other, the high pair first, rounded to nearest
// even; denormal inputs and results are 0). GCC's builtin, which it schedules and allocates
// registers for like its own arithmetic (an assembly statement left copies between registers,
// and unrolled, spilled accumulators); its operand type changed from short to __bf16 vectors
// in GCC 13. Other compilers: inline assembly, the pair broadcast from memory ({1to16}).
#if defined(__GNUC__) && !defined(__clang__)
#if __GNUC__ >= 13
typedef __bf16 mj_v32bf __attribute__((vector_size(64)));
#else
typedef short mj_v32bf __attribute__((vector_size(64)));
#endif
typedef unsigned mj_v16u __attribute__((vector_size(64)));
static inline void mj_dpbf16(mj_v16f& acc, const mj_v16f b, const unsigned* a) {
  acc = __builtin_ia32_dpbf16ps_v16sf(acc, (mj_v32bf)b, (mj_v32bf)(mj_v16u{} + *a));
}
#else
static inline void mj_dpbf16(mj_v16f& acc, const mj_v16f b, const unsigned* a) {
  __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(b), "m"(*a));
}
#endif
#endif
