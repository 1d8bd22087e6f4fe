// The C++ emitter's contractions whose panels hold several reduction steps per word
// (ContractionSchedule::steps_per_word, codegen/cpu_schedule.h): bfloat16 pairs multiplied by
// vdpbf16ps into float32 sums (bf16_pairs, codegen/cpp_bf16_dot_prelude.h), and byte quads
// multiplied by vpdpbusd (int8_quads) or int16 pairs by vpmaddwd (int16_pairs) into Int32 sums
// (codegen/cpp_int8_dot_prelude.h). The packing's float32 panels are grouped in place after
// they are packed; everything else is the float32 schedule of codegen/cpp_contraction.cc:
// tiles, blocks, the epilogue.
#include <string>

#include "codegen/cpp_emitter_internal.h"

namespace metajit {
namespace {

std::string acc_name(int r, int v) {
  return "c" + std::to_string(r) + "_" + std::to_string(v);
}

// The accumulators of an mr x nr tile in vectors of `type` (W lanes), zero when `first`, else
// loaded from c (row stride ldc) with `load`.
std::string tile_start(const ContractionTile& t, const std::string& type, const std::string& load) {
  const int MR = t.mr, W = t.vector_floats, NV = t.nr / W;
  std::string o;
  for (int r = 0; r < MR; ++r) {
    o += "  " + type;
    for (int v = 0; v < NV; ++v) o += std::string(v ? "," : "") + " " + acc_name(r, v);
    o += ";\n";
  }
  o += "  if (first) {\n";
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) o += "    " + acc_name(r, v) + " = " + type + "{};\n";
  o += "  } else {\n";
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v)
      o += "    " + acc_name(r, v) + " = " + load + "(c + " + std::to_string(r) + " * ldc + " +
           std::to_string(v * W) + ");\n";
  o += "  }\n";
  return o;
}

std::string tile_end(const ContractionTile& t, const std::string& store) {
  const int W = t.vector_floats, NV = t.nr / W;
  std::string o;
  for (int r = 0; r < t.mr; ++r)
    for (int v = 0; v < NV; ++v)
      o += "  " + store + "(c + " + std::to_string(r) + " * ldc + " + std::to_string(v * W) + ", " +
           acc_name(r, v) + ");\n";
  return o;
}

// The loop over the grouped steps: per step the tile's B vectors (`type`, loaded with `load`),
// then `row(r)` for each row.
template <class Row>
std::string step_loop(const ContractionTile& t, const std::string& type, const std::string& load,
                      const Row& row) {
  const int W = t.vector_floats, NV = t.nr / W;
  std::string o = "  for (i64 k = 0; k < kg; ++k, a += " + std::to_string(t.mr) +
                  ", b += " + std::to_string(t.nr) + ") {\n";
  for (int v = 0; v < NV; ++v)
    o += "    const " + type + " b" + std::to_string(v) + " = " + load + "(b + " +
         std::to_string(v * W) + ");\n";
  for (int r = 0; r < t.mr; ++r) o += row(r);
  o += "  }\n";
  return o;
}

}  // namespace

// The micro-kernel of tile `t` on bfloat16 pairs: c[mr x nr] (row stride ldc) = (first ? 0 : c)
// + the sum over kg pairs of steps of A's pairs (mr words a pair, each broadcast) times B's
// (nr words a pair). The float32 kernel's registers (mr x nr/16 accumulators), half the steps.
std::string CppEmitter::micro_kernel_bf16(const ContractionTile& t, const std::string& name) {
  const int NV = t.nr / t.vector_floats;
  std::string o = "// The " + std::to_string(t.mr) + "x" + std::to_string(t.nr) +
                  " micro-kernel on bfloat16 pairs (codegen/cpp_bf16_dot_prelude.h).\n";
  o += "static inline void " + name +
       "(const float* __restrict__ ap, const float* __restrict__ b, i64 kg, "
       "float* __restrict__ c, i64 ldc, int first) {\n";
  o += "  const unsigned* a = (const unsigned*)(const void*)ap;\n";
  o += tile_start(t, "mj_v16f", "mj_ld");
  // Not unrolled: the loop runs at one vdpbf16ps a cycle already (perf annotate: 94% of the
  // kernel's samples in it, Zen 4); unrolled by 2 it measured the same.
  o += step_loop(t, "mj_v16f", "mj_ld", [&](int r) {
    std::string s = "   ";
    for (int v = 0; v < NV; ++v)
      s += " mj_dpbf16(" + acc_name(r, v) + ", b" + std::to_string(v) + ", a + " +
           std::to_string(r) + ");";
    return s + "\n";
  });
  o += tile_end(t, "mj_st");
  return o + "}\n";
}

// The micro-kernel of tile `t` on byte quads (`quads`: vpdpbusd) or int16 pairs (vpmaddwd):
// Int32 c[mr x nr] (the block buffer's floats reinterpreted; row stride ldc) = (first ? 0 : c)
// + the sum over kg groups of steps of A's groups (mr words a group, each broadcast) times B's
// (nr words a group). 16 lanes on AVX-512, 8 on AVX2.
std::string CppEmitter::micro_kernel_int(const ContractionTile& t, const std::string& name,
                                         bool quads) {
  const int NV = t.nr / t.vector_floats;
  const bool wide = t.vector_floats == 16;
  const std::string type = wide ? "mj_v16i" : "mj_v8i", load = wide ? "mj_ldi" : "mj_ldi8",
                    store = wide ? "mj_sti" : "mj_sti8",
                    product = quads  ? "mj_dpbusd"
                              : wide ? "mj_madd16"
                                     : "mj_madd8";
  std::string o = "// The " + std::to_string(t.mr) + "x" + std::to_string(t.nr) +
                  " micro-kernel on " + (quads ? "byte quads" : "int16 pairs") +
                  " (codegen/cpp_int8_dot_prelude.h).\n";
  o += "static inline void " + name +
       "(const float* __restrict__ ap, const float* __restrict__ bp, i64 kg, "
       "float* __restrict__ cp, i64 ldc, int first) {\n";
  o += "  const int* a = (const int*)(const void*)ap;\n";
  o += "  const int* b = (const int*)(const void*)bp;\n";
  o += "  int* const c = (int*)(void*)cp;\n";
  o += tile_start(t, type, load);
  o += step_loop(t, type, load, [&](int r) {
    std::string s = "    { const " + type + " av = " + type + "{} + a[" + std::to_string(r) + "];";
    for (int v = 0; v < NV; ++v)
      s += " " + acc_name(r, v) + " = " + product + "(" + acc_name(r, v) + ", av, b" +
           std::to_string(v) + ");";
    return s + " }\n";
  });
  o += tile_end(t, store);
  return o + "}\n";
}

// The grouping of operand `side` (0: A, 1: B) of `pw`-wide panels, `steps` reduction steps, at
// `at`: bfloat16 pairs, or byte quads (A shifted to unsigned where it is Int8).
std::string CppEmitter::group_call(const ContractionParts& p, int side, int pw,
                                   const std::string& at, const std::string& steps) const {
  const std::string PW = std::to_string(pw);
  if (p.cs.bf16_pairs) return "mj_pair_bf16(" + at + ", " + PW + ", " + steps + ");";
  if (p.cs.int16_pairs) return "mj_pair_int16(" + at + ", " + PW + ", " + steps + ");";
  const bool shifted = side == 0 && shifted_a(p);
  return "mj_quad_bytes(" + at + ", " + PW + ", " + steps + ", " + (shifted ? "128" : "0") + ");";
}

// After operand `side` was packed once for the launch (pack_operand_once): each of its panels
// of `pw` over the whole reduction grouped in place, the panels in parallel.
void CppEmitter::group_once(const ContractionParts& p, int side, int pw) {
  const std::string buf = side == 0 ? "mj_apre" : "mj_bpre", pad = side == 0 ? "mj_eip" : "mj_ejp";
  const std::string PW = std::to_string(pw);
  line(1, "if (" + buf + ") {");
  line(2, "#pragma omp parallel for schedule(static) if(" + pad + " * mj_k > 32768)");
  line(2, "for (i64 mj_q = 0; mj_q < " + pad + " / " + PW + "; ++mj_q)");
  line(3, group_call(p, side, pw, "(unsigned*)(void*)" + buf + " + mj_q * mj_k * " + PW, "mj_k"));
  line(1, "}");
}

// At depth `d`, after operand `side`'s panels of `pw` were packed for the block's reduction
// steps (mj_kn of them, mj_as / mj_bs apart): each grouped in place.
void CppEmitter::group_block(const ContractionParts& p, int side, int pw, int d) {
  const std::string name = side == 0 ? "a" : "b", padded = side == 0 ? "mj_inp" : "mj_jnp";
  const std::string PW = std::to_string(pw);
  line(d, "for (i64 mj_q = 0; mj_q < " + padded + " / " + PW + "; ++mj_q)");
  line(d + 1, group_call(p, side, pw,
                         "(unsigned*)(void*)mj_" + name + "p + mj_q * mj_" + name + "s", "mj_kn"));
}

// At depth `d`, where an Int8 A was shifted by 128: the block's B quads' column sums for this
// reduction block, into the thread's mj_cs (set at the first block, then added to).
void CppEmitter::quad_column_sums(const ContractionParts& p, const ContractionTile& t, int d) {
  if (!shifted_a(p)) return;
  const std::string NR = std::to_string(t.nr);
  line(d, "mj_quad_column_sums((const unsigned*)(const void*)mj_b, mj_bs, mj_jnp / " + NR + ", " +
              NR + ", (mj_kn + 3) / 4, mj_cs, mj_pc == 0);");
}

}  // namespace metajit
