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

  const char* name() const;  // "avx512" | "avx2" | "portable"
  ContractionTile contraction_tile() const;
  // The tile for contractions with few output columns, where contraction_tile()'s panels would
  // be mostly padding; the same tile where the ISA has no narrower one worth a second copy.
  ContractionTile narrow_contraction_tile() const;
  // One line for kernel comments and explain(): "avx512 (16-float vectors; contraction tile
  // 6x64, ...)".
  std::string describe() const;
};

// The target from the output of `CXX <flags> -dM -E -x c++ /dev/null` (the predefined macros):
// __AVX512F__ -> Avx512; __AVX2__ and __FMA__ -> Avx2; else Portable.
CpuTarget cpu_target_from_macros(const std::string& predefined_macros);
// "avx512" | "avx2" | "portable" -> the target; false for anything else.
bool parse_cpu_isa(const std::string& name, CpuIsa& out);

}  // namespace metajit
