// The C++ kernel preludes as text (codegen/cpp_kernel_prelude.h, codegen/cpp_contraction_prelude.h,
// codegen/cpp_narrow_prelude.h, codegen/cpp_bf16_dot_prelude.h, codegen/cpp_int8_dot_prelude.h,
// codegen/integer_prelude.h),
// embedded by the build (CMakeLists.txt, cmake/cpp_preludes.cc.in).
#pragma once

namespace metajit {

// Every CPU kernel's source, after the integer prelude.
extern const char* const kCppKernelPrelude;
// Every contraction kernel's source, before its micro-kernel.
extern const char* const kCppContractionPrelude;
// Every kernel's source with 8- or 16-bit values, after kCppKernelPrelude.
extern const char* const kCppNarrowPrelude;
// Contraction kernels that pair bfloat16 operands (ContractionSchedule::bf16_pairs), after
// kCppContractionPrelude.
extern const char* const kCppBf16DotPrelude;
// Contraction kernels that multiply byte quads (ContractionSchedule::int8_quads), after
// kCppContractionPrelude.
extern const char* const kCppInt8DotPrelude;
// Every C++ and CUDA kernel's source first, after a definition of MJ_FN (CFamilyEmitter::
// integer_prelude).
extern const char* const kIntegerPrelude;

}  // namespace metajit
