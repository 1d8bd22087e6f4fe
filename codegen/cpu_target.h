// What a C++ kernel is compiled for, as far as its schedule cares: the widest vector ISA the
// compiler may use with the kernel's *full* flag list (-march=native, then METAJIT_CXXFLAGS,
// which may narrow it: -march=x86-64-v3, -mno-avx512f). The emitter picks its register tiles
// and block sizes from this (BLIS-style: one micro-kernel shape per ISA, the rest portable);
// it is read from the compiler's predefined macros, never from the CPU the code was tuned on.
#pragma once
#include <string>

namespace metajit {

enum class CpuIsa {
  Portable,  // no vector extensions assumed: plain loops the compiler vectorises as it can
  Avx2,      // 8 floats per vector, FMA, 16 vector registers
  Avx512,    // 16 floats per vector, FMA, 32 vector registers
};

// The matrix-product schedule of one ISA (docs/design.md §4: contractions get a packed, blocked
// schedule). C tiles of mr x nr sums stay in registers over kc steps of the reduction; the
// operands are packed into panels of mr rows / nr columns; a block of mc x nc outputs per work
// item keeps its packed A (mc x kc) and B (kc x nc) in L2 and one B micro-panel (kc x nr) in L1.
struct ContractionTile {
  int vector_floats;  // floats per vector register (1: no vector type, plain arrays)
  int mr, nr;         // register tile: mr rows x nr columns (nr a multiple of vector_floats)
  int kc, mc, nc;     // cache blocks: reduction steps per packed panel, rows and columns per block
};

bool operator==(const ContractionTile& a, const ContractionTile& b);

struct CpuTarget {
  CpuIsa isa = CpuIsa::Portable;
  // AVX512_BF16 on an Avx512 target (`__AVX512BF16__`): bfloat16 contractions multiply pairs of
  // bfloat16 values into float32 sums with `vdpbf16ps` (codegen/cpp_bf16_dot_prelude.h), twice
  // the products per instruction of a float32 FMA.
  bool bf16_dot = false;
  // AVX512-VNNI on an Avx512 target (`__AVX512VNNI__`): Int32 sums of 8-bit products (matmul of
  // Int8 / UInt8 by Int8) multiply four byte pairs per lane with `vpdpbusd`
  // (codegen/cpp_int8_dot_prelude.h).
  bool int8_dot = false;

  const char* name() const;  // "avx512" | "avx2" | "portable": the ISA
  // The ISA and its features as kernel keys and the toolchain record hold them: name(), then
  // "+bf16" with bf16_dot and "+vnni" with int8_dot ("avx512+bf16+vnni").
  std::string id() const;
  ContractionTile contraction_tile() const;
  // The tile for contractions with few output columns, where contraction_tile()'s panels would
  // be mostly padding; the same tile where the ISA has no narrower one worth a second copy.
  ContractionTile narrow_contraction_tile() const;
  // One line for kernel comments and explain(): "avx512 (16-float vectors; contraction tile
  // 6x64, ...)".
  std::string describe() const;
};

// The target from the output of `CXX <flags> -dM -E -x c++ /dev/null` (the predefined macros):
// __AVX512F__ -> Avx512 (with __AVX512BF16__: bf16_dot, __AVX512VNNI__: int8_dot); __AVX2__
// and __FMA__ -> Avx2; else Portable.
CpuTarget cpu_target_from_macros(const std::string& predefined_macros);
// "avx512" | "avx2" | "portable" -> the target; false for anything else.
bool parse_cpu_isa(const std::string& name, CpuIsa& out);
// CpuTarget::id() -> the target; false for anything else ("avx2+bf16" too: no such target).
bool parse_cpu_target(const std::string& id, CpuTarget& out);

}  // namespace metajit
