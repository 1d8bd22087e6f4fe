#include "codegen/cpu_target.h"

#include <sstream>

namespace metajit {
namespace {

bool defines(const std::string& macros, const std::string& name) {
  std::istringstream in(macros);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string def, got;
    if (words >> def >> got && def == "#define" && got == name) return true;
  }
  return false;
}

}  // namespace

const char* CpuTarget::name() const {
  switch (isa) {
    case CpuIsa::Avx512:
      return "avx512";
    case CpuIsa::Avx2:
      return "avx2";
    case CpuIsa::Portable:
      break;
  }
  return "portable";
}

std::string CpuTarget::id() const {
  return std::string(name()) + (bf16_dot ? "+bf16" : "") + (int8_dot ? "+vnni" : "");
}

// Register budgets: AVX-512 has 32 vector registers: 6x64 = 24 accumulators, four B vectors
// and a broadcast A value (measured against 12x32 and 8x32 on a Zen 4: fewer broadcasts per
// FMA, and 64 columns fit conv2d's 56-wide rows better; 8x32 was slowest). AVX2 has 16:
// 6x16 = 12 accumulators + 2 + 1 (the classic Haswell shape). The portable tile is small enough for
// SSE2's 16 registers when the compiler turns its 8-wide rows into vectors. kc keeps one B
// micro-panel (kc x nr floats) near 16 KiB, half of a 32 KiB L1; mc x kc and kc x nc (A and B
// blocks) stay well inside a 1 MiB L2.
ContractionTile CpuTarget::contraction_tile() const {
  switch (isa) {
    case CpuIsa::Avx512:
      return {16, 6, 64, 128, 96, 512};
    case CpuIsa::Avx2:
      return {8, 6, 16, 256, 96, 384};
    case CpuIsa::Portable:
      break;
  }
  return {1, 4, 8, 256, 64, 256};
}

// AVX-512's 6x64 tile pads a 9-column product (a 3x3 weight's gradient) to 64 columns, and small
// images' convolutions to whole 64-column panels: on the digits CNN's training step the 6x16
// tile (AVX2's shape on 16-float vectors) ran its contractions 2-3x faster. AVX2's own tile is
// already 16 wide. The emitter takes the wide tile whenever its panels are at most a quarter
// padding (codegen/cpu_schedule.h kWideTileMinColumns).
ContractionTile CpuTarget::narrow_contraction_tile() const {
  if (isa == CpuIsa::Avx512) return {16, 6, 16, 256, 96, 384};
  return contraction_tile();
}

bool operator==(const ContractionTile& a, const ContractionTile& b) {
  return a.vector_floats == b.vector_floats && a.mr == b.mr && a.nr == b.nr && a.kc == b.kc &&
         a.mc == b.mc && a.nc == b.nc;
}

std::string CpuTarget::describe() const {
  const ContractionTile t = contraction_tile();
  std::string s = name();
  s += t.vector_floats > 1 ? " (" + std::to_string(t.vector_floats) + "-float vectors"
                           : " (no vector extensions";
  s += "; contraction tile " + std::to_string(t.mr) + "x" + std::to_string(t.nr) + ", blocks kc " +
       std::to_string(t.kc) + " mc " + std::to_string(t.mc) + " nc " + std::to_string(t.nc) +
       (bf16_dot ? "; bfloat16 contractions by vdpbf16ps" : "") +
       (int8_dot ? "; 8-bit contractions by vpdpbusd" : "") + ")";
  return s;
}

CpuTarget cpu_target_from_macros(const std::string& macros) {
  CpuTarget t;
  if (defines(macros, "__AVX512F__")) {
    t.isa = CpuIsa::Avx512;
    t.bf16_dot = defines(macros, "__AVX512BF16__");
    t.int8_dot = defines(macros, "__AVX512VNNI__");
  } else if (defines(macros, "__AVX2__") && defines(macros, "__FMA__"))
    t.isa = CpuIsa::Avx2;
  return t;
}

bool parse_cpu_isa(const std::string& name, CpuIsa& out) {
  for (CpuIsa isa : {CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512})
    if (name == CpuTarget{isa}.name()) {
      out = isa;
      return true;
    }
  return false;
}

// One spelling per target: id()'s, features only on Avx512.
bool parse_cpu_target(const std::string& id, CpuTarget& out) {
  for (CpuIsa isa : {CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512})
    for (int features = 0; features < (isa == CpuIsa::Avx512 ? 4 : 1); ++features) {
      const CpuTarget t{isa, (features & 1) != 0, (features & 2) != 0};
      if (t.id() == id) {
        out = t;
        return true;
      }
    }
  return false;
}

}  // namespace metajit
