// The C++ emitter's blocked contraction (matmul, batched matmul, conv2d): the target's
// micro-kernels, cache blocks, operands packed once, the epilogue (codegen/cpu_schedule.h
// ContractionSchedule decides; codegen/cpp_packing.cc packs).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "codegen/cpp_emitter_internal.h"
#include "codegen/cpp_preludes.h"

namespace metajit {

// Declares the merged outer loops' variables from the flat outer index mj_jo.
void CppEmitter::merged_outer_vars(const MergedColumns& m, int d) {
  std::string rest = "mj_jo";
  for (size_t k = m.outer_vars.size(); k-- > 0;) {
    const std::string name = "i" + std::to_string(m.outer_vars[k]);
    if (k == 0) {
      line(d, "const i64 " + name + " = " + rest + ";");
    } else {
      line(d, "const i64 " + name + " = " + rest + " % (" + m.outer_extents[k] + ");");
      rest = "(" + rest + " / (" + m.outer_extents[k] + "))";
    }
  }
}

// The micro-kernel of the target (cpu_target.h): c[mr x nr] (row stride ldc) = (first ? 0 :
// c) + sum over kn steps of a column of the packed A panel (mr floats a step) times a row of
// the packed B panel (nr floats a step). With vectors, every accumulator is a named variable
// so that the register allocator sees exactly mr x nr/W of them.
// The micro-kernel of tile `t` as the function `name`; with `vector_types`, the vector type
// and its load/store helpers before it (once per kernel source).
// With `direct` (ContractionSchedule::direct) step k's row of B is at g + offs[k] instead.
std::string CppEmitter::micro_kernel(const ContractionTile& t, const std::string& name,
                                     bool vector_types, bool direct) const {
  const int MR = t.mr, NR = t.nr, W = t.vector_floats;
  const std::string sig =
      "static inline void " + name +
      (direct ? "(const float* __restrict__ a, const float* __restrict__ g, "
                "const i64* __restrict__ offs, i64 kn, float* __restrict__ c, i64 ldc, "
                "int first) {\n"
              : "(const float* __restrict__ a, const float* __restrict__ b, "
                "i64 kn, float* __restrict__ c, i64 ldc, int first) {\n");
  // The loop over the steps and the start of its body: B's row of the step at b.
  const std::string step_loop = direct ? "for (i64 k = 0; k < kn; ++k, a += " + std::to_string(MR) +
                                             ") {\n    const float* const b = g + offs[k];\n"
                                       : "for (i64 k = 0; k < kn; ++k, a += " + std::to_string(MR) +
                                             ", b += " + std::to_string(NR) + ") {\n";
  std::string o;
  if (W <= 1) {
    o += "// Portable micro-kernel: plain arrays; the compiler vectorises the rows as it can.\n";
    o += sig;
    o += "  float acc[" + std::to_string(MR) + "][" + std::to_string(NR) + "];\n";
    o += "  for (int r = 0; r < " + std::to_string(MR) + "; ++r)\n";
    o += "    for (int t = 0; t < " + std::to_string(NR) +
         "; ++t) acc[r][t] = first ? 0.0f : c[r * ldc + t];\n";
    if (direct)
      o += "  " + step_loop;
    else
      o += "  for (i64 k = 0; k < kn; ++k, a += " + std::to_string(MR) +
           ", b += " + std::to_string(NR) + ")\n";
    o += "    for (int r = 0; r < " + std::to_string(MR) + "; ++r) {\n";
    o += "      const float av = a[r];\n";
    o += "#pragma omp simd\n";
    o += "      for (int t = 0; t < " + std::to_string(NR) + "; ++t) acc[r][t] += av * b[t];\n";
    o += "    }\n";
    if (direct) o += "  }\n";
    o += "  for (int r = 0; r < " + std::to_string(MR) + "; ++r)\n";
    o += "    for (int t = 0; t < " + std::to_string(NR) + "; ++t) c[r * ldc + t] = acc[r][t];\n";
    o += "}\n";
    return o;
  }
  const int NV = NR / W;
  if (vector_types) o += vector_type(W);
  o += sig;
  auto acc = [](int r, int v) { return "c" + std::to_string(r) + "_" + std::to_string(v); };
  auto at = [&](int r, int v) {
    return "c + " + std::to_string(r) + " * ldc + " + std::to_string(v * W);
  };
  for (int r = 0; r < MR; ++r) {
    o += "  mj_vf";
    for (int v = 0; v < NV; ++v) o += std::string(v ? "," : "") + " " + acc(r, v);
    o += ";\n";
  }
  o += "  if (first) {\n";
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) o += "    " + acc(r, v) + " = mj_vf{};\n";
  o += "  } else {\n";
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) o += "    " + acc(r, v) + " = mj_ld(" + at(r, v) + ");\n";
  o += "  }\n";
  // Unrolled by 4: one step is 2 + mr loads and mr x nr/W FMAs, and the loop's own three
  // additions and branch left the AVX2 6x16 loop at the front end's issue limit (the FFN's
  // second product, [1024,512]x[512,128]: 8% faster, measured).
  o += "#pragma GCC unroll 4\n";
  o += "  " + step_loop;
  for (int v = 0; v < NV; ++v)
    o += "    const mj_vf b" + std::to_string(v) + " = mj_ld(b + " + std::to_string(v * W) + ");\n";
  for (int r = 0; r < MR; ++r) {
    o += "    { const float av = a[" + std::to_string(r) + "];";
    for (int v = 0; v < NV; ++v) o += " " + acc(r, v) + " += av * b" + std::to_string(v) + ";";
    o += " }\n";
  }
  o += "  }\n";
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) o += "  mj_st(" + at(r, v) + ", " + acc(r, v) + ");\n";
  o += "}\n";
  return o;
}

// " / G" for panels of G reduction steps a word (ContractionSchedule::steps_per_word), else "".
std::string CppEmitter::group_div(const ContractionParts& p) {
  const int g = p.cs.steps_per_word();
  return g > 1 ? " / " + std::to_string(g) : "";
}

// An Int8 A shifted to unsigned bytes for vpdpbusd (ContractionSchedule::int8_quads).
bool CppEmitter::shifted_a(const ContractionParts& p) {
  return p.cs.int8_quads && p.cs.match.a_bytes == DType::Int8;
}

// mj_vf, W floats, and its unaligned load and store: the micro-kernels' vector.
std::string CppEmitter::vector_type(int W) const {
  const std::string bytes = std::to_string(W * 4);
  std::string o = "// " + std::to_string(W) + " floats: the vector of the " + target_.name() +
                  " micro-kernels (GCC vector extension; unaligned loads).\n";
  o += "typedef float mj_vf __attribute__((vector_size(" + bytes + ")));\n";
  o += "static inline mj_vf mj_ld(const float* p) { mj_vf v; __builtin_memcpy(&v, p, " + bytes +
       "); return v; }\n";
  o += "static inline void mj_st(float* p, mj_vf v) { __builtin_memcpy(p, &v, " + bytes + "); }\n";
  return o;
}

// mj_transpose: a W x W block of floats, rows `ss` apart, into its transpose, rows `ds` apart
// (W = the target's vector). log2(W) rounds; round h pairs rows r and r + h (r & h == 0) and
// exchanges the h-wide column groups that sit off the diagonal of each 2h x 2h block, one
// two-source shuffle per output row (vpermt2ps on AVX-512, 64 for a 16 x 16 block).
std::string CppEmitter::transpose_helper(int W) {
  std::string o =
      "typedef int mj_vi __attribute__((vector_size(" + std::to_string(W * 4) + ")));\n";
  o += "static inline void mj_transpose(const float* __restrict__ s, i64 ss, float* "
       "__restrict__ d, i64 ds) {\n";
  for (int r = 0; r < W; ++r)
    o += "  mj_vf r" + std::to_string(r) + " = mj_ld(s + " + std::to_string(r) + " * ss);\n";
  for (int h = W / 2; h >= 1; h /= 2) {
    std::string lo, hi;
    for (int j = 0; j < W; ++j) {
      const int base = j / (2 * h) * 2 * h, w = j % (2 * h);
      const int from_b = w < h ? 0 : W, off = w < h ? w : w - h;
      lo += (j ? ", " : "") + std::to_string(from_b + base + off);
      hi += (j ? ", " : "") + std::to_string(from_b + base + h + off);
    }
    o += "  {\n    const mj_vi lo = {" + lo + "}, hi = {" + hi + "};\n";
    for (int r = 0; r < W; ++r) {
      if (r & h) continue;
      const std::string a = "r" + std::to_string(r), b = "r" + std::to_string(r + h);
      o += "    { const mj_vf x = " + a + ", y = " + b + "; " + a +
           " = __builtin_shuffle(x, y, lo); " + b + " = __builtin_shuffle(x, y, hi); }\n";
    }
    o += "  }\n";
  }
  for (int r = 0; r < W; ++r)
    o += "  mj_st(d + " + std::to_string(r) + " * ds, r" + std::to_string(r) + ");\n";
  o += "}\n";
  return o;
}

// mj_interleave: W floats from each of `rows` rows `ss` apart, stored interleaved (element k
// of row t at d[k * rows + t]: W steps of an A panel). Each output vector gathers its
// elements from the rows in turn, one two-source shuffle per further row (5 for 6 rows).
std::string CppEmitter::interleave_helper(int W, int rows) {
  std::string o =
      "static inline void mj_interleave(const float* __restrict__ s, i64 ss, "
      "float* __restrict__ d) {\n";
  for (int r = 0; r < rows; ++r)
    o += "  const mj_vf r" + std::to_string(r) + " = mj_ld(s + " + std::to_string(r) + " * ss);\n";
  for (int m = 0; m < rows; ++m) {
    std::vector<int> lane_row(static_cast<size_t>(W)), lane_step(static_cast<size_t>(W)), order;
    for (int j = 0; j < W; ++j) {
      const int q = m * W + j;
      lane_row[size_t(j)] = q % rows;
      lane_step[size_t(j)] = q / rows;
      if (std::find(order.begin(), order.end(), q % rows) == order.end()) order.push_back(q % rows);
    }
    // The first two rows into place (other lanes: anything), then each further row.
    std::string cur = "r" + std::to_string(order[0]);
    for (size_t k = 1; k < order.size(); ++k) {
      std::string mask;
      for (int j = 0; j < W; ++j) {
        int sel = k == 1 ? 0 : j;  // keep what is in place
        if (lane_row[size_t(j)] == order[k])
          sel = W + lane_step[size_t(j)];
        else if (k == 1 && lane_row[size_t(j)] == order[0])
          sel = lane_step[size_t(j)];
        mask += (j ? ", " : "") + std::to_string(sel);
      }
      const std::string next = "v" + std::to_string(m) + "_" + std::to_string(k);
      o += "  const mj_vf " + next + " = __builtin_shuffle(" + cur + ", r" +
           std::to_string(order[k]) + ", (mj_vi){" + mask + "});\n";
      cur = next;
    }
    o += "  mj_st(d + " + std::to_string(m * W) + ", " + cur + ");\n";
  }
  o += "}\n";
  return o;
}

// The blocked, packed schedule of a contraction (matmul, batched matmul, conv2d), in the
// spirit of BLIS: per work item (outer indices, a block of mc rows x nc columns) the
// reduction runs in blocks of kc steps; each block packs A (mc x kc) and B (kc x nc) into
// panels of mr rows / nr columns, and the target's micro-kernel accumulates every mr x nr
// tile of the block's sums (a per-thread buffer) from one A and one B panel. An operand that
// does not depend on the outer loops and serves several blocks is packed once for the whole
// launch instead (up to 1 GiB; without that memory, per block). The columns may span several
// output loops (MergedColumns). After the last block the rest of the kernel (the epilogue:
// bias, activation ...) runs on the finished sums. Without scratch memory: the plain schedule.
void CppEmitter::contraction_kernel(const KernelIR& ir, const std::vector<int>& levels,
                                    const ContractionSchedule& cs, const std::string& store) {
  const Contraction& c = cs.match;
  const ContractionLoops cl = contraction_loops(ir, c);
  ContractionParts p{ir, levels, cs, ir.body.stmts[c.reduce_index], store};
  p.iv = "i" + std::to_string(c.i_var);
  p.jv = "i" + std::to_string(c.j_var);
  p.outer = cl.outer;
  for (size_t s : c.a_outer) p.a_pre.push_back(ir.body.stmts[s]);
  for (size_t s : c.b_outer) p.b_pre.push_back(ir.body.stmts[s]);
  if (!cs.merged_outer_vars.empty()) {
    MergedColumns m;
    for (int o : cs.merged_outer_vars) {
      const auto at =
          std::find_if(p.outer.begin(), p.outer.end(), [&](const KLoop* l) { return l->var == o; });
      m.outer_vars.push_back(o);
      m.outer_extents.push_back(ix(*(*at)->extent));
      p.outer.erase(at);
    }
    m.flat = cs.flat_columns;
    p.merged = std::move(m);
  }
  // The schedule's decision (ContractionSchedule::pack_functions); other statements before the
  // loops (a scalar) a packing function repeats.
  p.pack_functions = cs.pack_functions;
  p.ei = ix(*cl.i->extent);
  p.eji = ix(*cl.j->extent);
  const ContractionTile wide = cs.wide, narrow = cs.narrow;
  const bool two_tiles = !(narrow == wide);
  helpers_ += kCppContractionPrelude;
  if (cs.steps_per_word() > 1) {
    helpers_ += vector_type(wide.vector_floats);
    helpers_ += cs.bf16_pairs ? kCppBf16DotPrelude : kCppInt8DotPrelude;
    auto micro = [&](const ContractionTile& t, const char* name) {
      return cs.bf16_pairs ? micro_kernel_bf16(t, name) : micro_kernel_int(t, name, cs.int8_quads);
    };
    helpers_ += micro(wide, "mj_micro");
    if (two_tiles) helpers_ += micro(narrow, "mj_micro_narrow");
  } else {
    helpers_ += micro_kernel(wide, "mj_micro", true);
    if (two_tiles) helpers_ += micro_kernel(narrow, "mj_micro_narrow", false);
  }
  if (cs.direct || cs.direct_steps) helpers_ += micro_kernel(wide, "mj_micro_direct", false, true);
  if (wide.vector_floats > 1) {
    helpers_ += transpose_helper(wide.vector_floats);
    helpers_ += interleave_helper(wide.vector_floats, wide.mr);
  }
  // Scratch memory refused (malloc failed): the plain loop nest, printed once for both tiles.
  line(1, "bool mj_blocked = false;");
  if (two_tiles)
    two_tile_choice(p);
  else
    wide_tile(p);
  line(1, "if (!mj_blocked) {");
  generic_map(sched_.nest, store, 2);
  line(1, "}");
}

// The two tiles' schedules and the choice between them.
void CppEmitter::two_tile_choice(const ContractionParts& p) {
  const ContractionTile wide = p.cs.wide, narrow = p.cs.narrow;
  // The tile is chosen at run time from the number of output columns (kernels are
  // shape-generic): few columns would leave the wide tile's panels mostly padding.
  std::string cols = p.eji;
  if (p.merged)
    for (const std::string& e : p.merged->outer_extents) cols += " * " + e;
  // Wide when its panels would be at most a quarter padding: 256 columns and more, or a
  // multiple of the wide tile's width near enough (128 columns: two whole 64-wide panels).
  const std::string NRW = std::to_string(wide.nr);
  line(1, "const i64 mj_cols = " + cols + ", mj_colsp = (mj_cols + " + NRW + " - 1) / " + NRW +
              " * " + NRW + ";");
  line(1, "if (mj_cols >= " + std::to_string(kWideTileMinColumns) + " || (mj_cols >= " + NRW +
              " && (mj_colsp - mj_cols) * 4 <= mj_colsp)) {");
  ++indent_;
  wide_tile(p);
  --indent_;
  line(1, "} else {");
  ++indent_;
  contraction_tile(p, narrow, "mj_micro_narrow");
  --indent_;
  line(1, "}");
}

// The wide tile's schedule; with ContractionSchedule::direct, the direct one first where the
// launch's shape allows it (mj_blocked when it ran), then the packed one where it did not.
void CppEmitter::wide_tile(const ContractionParts& p) {
  if (!p.cs.direct && !p.cs.direct_steps) {
    contraction_tile(p, p.cs.wide, "mj_micro");
    return;
  }
  if (p.cs.direct) {
    direct_tile(p);
  } else if (p.cs.a_once) {
    direct_steps_tile(p);
  } else {
    ContractionParts q = p;
    q.direct_steps = true;
    q.pack_functions = false;
    line(1, "{");
    ++indent_;
    contraction_tile(q, p.cs.wide, "mj_micro_direct");
    --indent_;
    line(1, "}");
  }
  line(1, "if (!mj_blocked) {");
  ++indent_;
  contraction_tile(p, p.cs.wide, "mj_micro");
  --indent_;
  line(1, "}");
}

// The schedule of one tile `t` (its micro-kernel the function `micro`): the extents and block
// sizes, the operands packed once, the blocks in parallel; mj_blocked when it ran.
void CppEmitter::contraction_tile(const ContractionParts& p, const ContractionTile& t,
                                  const std::string& micro) {
  const std::string MR = std::to_string(t.mr), NR = std::to_string(t.nr);
  line(1, "const i64 mj_k = " + work(p.r.loops) + ";");
  if (p.direct) {
    // Widened rows (direct_tile declared mj_eji, mj_eo and mj_gw).
    line(1, "const i64 mj_ei = " + p.ei + ", mj_ej = mj_eo * mj_gw;");
  } else if (p.merged) {
    std::string eo;
    for (const std::string& e : p.merged->outer_extents) eo += (eo.empty() ? "" : " * ") + e;
    line(1, "const i64 mj_eji = " + p.eji + ";");
    line(1, "const i64 mj_ei = " + p.ei + ", mj_ej = " + eo + " * mj_eji;");
  } else {
    line(1, "const i64 mj_ei = " + p.ei + ", mj_ej = " + p.eji + ";");
  }
  reduction_blocks(t, p.cs.steps_per_word());
  // Blocks of equal size (in whole tiles): 1024 rows are 8 blocks of 132, not 7 of 144 and
  // one of 16, which would leave one thread a seventh of the work behind the other.
  // Row blocks are counted last, as many as make the rounds of the threads even
  // (mj_row_blocks), their sizes within one tile of each other.
  std::string per_row_block = "mj_nb";
  for (const KLoop* l : p.outer) per_row_block += " * (" + ix(*l->extent) + ")";
  for (const char* side : {"n", "m"}) {
    const bool m = side[0] == 'm';
    const std::string pad = m ? "mj_eip" : "mj_ejp", T = m ? MR : NR;
    const std::string cap = std::to_string(m ? t.mc : t.nc);
    const std::string b = std::string("mj_") + side + "b";
    std::string blocks = "(" + pad + " + " + cap + " - 1) / " + cap;
    if (m) blocks = "mj_row_blocks(" + blocks + ", " + per_row_block + ", " + pad + " / " + T + ")";
    line(1, "const i64 " + b + " = " + blocks + ";");
    line(1, "const i64 mj_" + std::string(side) + "c = " + b + " > 0 ? ((" + pad + " / " + T +
                " + " + b + " - 1) / " + b + ") * " + T + " : 0;");
  }
  row_block_tiles(t);
  contraction_pack_once(p, t);
  // Beside the panels and the sums, B's column sums where an Int8 A was shifted (int8_quads).
  line(1, std::string("const i64 mj_per_thread = mj_mc * mj_kc + mj_kc * mj_nc + mj_mc * mj_nc") +
              (shifted_a(p) ? " + mj_nc;" : ";"));
  line(1, std::string("float* mj_scratch = ") +
              (p.direct_steps ? "!mj_bpre || !mj_goff ? 0 : " : "") +
              "mj_take(2, sizeof(float) * (mj_per_thread > 0 ? mj_per_thread "
              ": 1) * omp_get_max_threads());");
  line(1, "if (mj_scratch) {");
  line(2, "mj_blocked = true;");
  std::string w = work(p.ir.loops) + " * mj_k";
  // Static: a thread takes the same rows in consecutive kernels, as in the map kernels'
  // static split, so what it wrote is still in its own core's caches. The row blocks are
  // as many as make the threads' rounds even, within one tile of each other
  // (mj_row_blocks), so a static share loses no balance where the rounds are even. On
  // this project's shared 2-vCPU machines the two vCPUs sometimes sit on different core
  // complexes (two L3s; each alone streams memory at a different speed then): there the
  // GPT forward took 19.5 ms with blocks handed out dynamically, 17.2 static, and 12.7
  // either way otherwise (AVX2, bench --serve-gpt).
  int d = parallel_blocks(p, w);
  contraction_block(p, t, micro, d);
  contraction_epilogue(p, d);
  for (; d > 2; --d) line(d - 1, "}");
  line(2, "mj_give(2, mj_scratch);");
  line(1, "}");
  line(1, "mj_give(0, mj_apre);");
  line(1, "mj_give(1, mj_bpre);");
  if (p.direct_steps) line(1, "mj_give(3, (float*)(void*)mj_goff);");
}

// Operands packed once: every panel over the whole reduction, panels in parallel, when the
// panels are used by more than one block (A by the column blocks and the outer iterations, B by
// the row blocks and the outer iterations). Used by one, they are packed per block like the
// others: the block's panels stay in L2 where the whole operand packed once went through memory
// (a GELU MLP's weight gradient, 512 x 1024^T x 128 in one column block: 10% faster, 17% with
// cold caches, measured).
void CppEmitter::contraction_pack_once(const ContractionParts& p, const ContractionTile& t) {
  const Contraction& c = p.cs.match;
  std::string outer_work = "1";
  for (const KLoop* l : p.outer) outer_work += " * (" + ix(*l->extent) + ")";
  line(1, "float* mj_apre = 0;");
  if (p.cs.a_once)
    pack_operand_once(p.r, p.a_pre, c.a_stmts, c.a, p.iv, t.mr, 0, nullptr,
                      "mj_nb * " + outer_work + " > 1", pack_call(p, 0, t.mr, true));
  if (p.cs.a_once && p.cs.steps_per_word() > 1) group_once(p, 0, t.mr);
  line(1, "float* mj_bpre = 0;");
  if (p.direct_steps)
    direct_steps_table(p, t);
  else if (p.cs.b_once && !p.direct)
    pack_operand_once(p.r, p.b_pre, c.b_stmts, c.b, p.jv, t.nr, 1, p.merged_columns(),
                      "mj_mb * " + outer_work + " > 1", pack_call(p, 1, t.nr, true));
  if (p.cs.b_once && p.cs.steps_per_word() > 1 && !p.direct_steps && !p.direct)
    group_once(p, 1, t.nr);
}

// The start of a call of operand `side`'s packing function for panels of `pw` (up to its
// destination argument), printing the function the first time; empty where the packing is
// printed in place (ContractionParts::pack_functions). Packed once per launch, the operand
// reads no outer loop: those arguments are 0. A contraction printed the same packing loops in
// both places for each tile: with the functions a matmul kernel compiles in 0.39 s, not 0.52
// (g++ 12 -O3, AVX-512; its cold compile row in make bench 0.54 -> 0.40 s).
std::string CppEmitter::pack_call(const ContractionParts& p, int side, int pw, bool once) {
  if (!p.pack_functions) return "";
  std::string call = pack_function(p, side, pw) + "(B, P, S, ";
  for (const KLoop* l : p.outer) call += once ? "0, " : "i" + std::to_string(l->var) + ", ";
  return call;
}

// Prints (once per kernel) the function packing operand `side` into panels of `pw` rows: the
// kernel's input locals again (frame_locals), then pack_operand for the destination, panel
// stride, first row, rows, padded rows, first step and steps its arguments name, after the
// statements the kernel runs before its loops (scalars, no reduction). MJ_PACK_FN
// (codegen/cpp_contraction_prelude.h): neither inlined nor cloned, so compiled once.
std::string CppEmitter::pack_function(const ContractionParts& p, int side, int pw) {
  const bool a = side == 0;
  const std::string name = std::string("mj_pack_") + (a ? "a" : "b") + std::to_string(pw);
  if (!pack_functions_.insert(name).second) return name;
  const Contraction& c = p.cs.match;
  std::string saved_out, sig;
  std::swap(out_, saved_out);
  const int saved_indent = indent_;
  indent_ = 0;
  sig = "MJ_PACK_FN void " + name + "(void* const* B, const long long* P, const double* S, ";
  for (const KLoop* l : p.outer) sig += "const i64 i" + std::to_string(l->var) + ", ";
  sig +=
      "float* const mj_to, const i64 mj_tos, const i64 mj_x0, const i64 mj_xn, "
      "const i64 mj_xnp, const i64 mj_k0, const i64 mj_kn0) {";
  line(0, sig);
  frame_locals(false);
  for (size_t s = 0; s < p.levels.size(); ++s)
    if (p.levels[s] < 0) stmt(p.ir.body.stmts[s], 1);
  for (const KLoop* l : p.outer) line(1, "(void)i" + std::to_string(l->var) + ";");
  if (!a && p.merged) line(1, "const i64 mj_eji = " + p.eji + ";");
  pack_operand(p.r, a ? p.a_pre : p.b_pre, a ? c.a_stmts : c.b_stmts, a ? c.a : c.b,
               a ? p.iv : p.jv, pw, "mj_to", "mj_tos", "mj_x0", "mj_xn", "mj_xnp", "mj_k0",
               "mj_kn0", 1, a ? nullptr : p.merged_columns());
  line(0, "}");
  std::swap(out_, saved_out);
  indent_ = saved_indent;
  helpers_ += saved_out;
  return name;
}

// At depth 2, the parallel loop over the outer loops and the blocks (mj_bi, mj_bj), run in
// parallel where `work` passes 32768; returns the depth inside it.
int CppEmitter::parallel_blocks(const ContractionParts& p, const std::string& work) {
  line(2, "#pragma omp parallel for collapse(" + std::to_string(p.outer.size() + 2) +
              ") schedule(static) if(" + work + " > 32768)");
  int d = 2;
  for (const KLoop* l : p.outer) {
    const std::string i = "i" + std::to_string(l->var);
    line(d++, "for (i64 " + i + " = 0; " + i + " < " + ix(*l->extent) + "; ++" + i + ") {");
  }
  line(d++, "for (i64 mj_bi = 0; mj_bi < mj_mb; ++mj_bi) {");
  line(d++, "for (i64 mj_bj = 0; mj_bj < mj_nb; ++mj_bj) {");
  return d;
}

// The reduction's blocks (mj_nkb of mj_kc steps: of equal length, no short last block) and the
// rows and columns padded to the tile (mj_eip, mj_ejp), from mj_k, mj_ei and mj_ej.
void CppEmitter::reduction_blocks(const ContractionTile& t, int group) {
  const std::string MR = std::to_string(t.mr), NR = std::to_string(t.nr);
  line(1, "const i64 mj_nkb = mj_k > " + std::to_string(t.kc) + " ? (mj_k + " +
              std::to_string(t.kc - 1) + ") / " + std::to_string(t.kc) + " : 1;");
  // Grouped panels (ContractionSchedule::steps_per_word) start each block at a whole group.
  const std::string G = std::to_string(group);
  line(1, group > 1 ? "const i64 mj_kc = mj_k > 0 ? ((mj_k + mj_nkb - 1) / mj_nkb + " + G +
                          " - 1) / " + G + " * " + G + " : " + G + ";"
                    : "const i64 mj_kc = mj_k > 0 ? (mj_k + mj_nkb - 1) / mj_nkb : 1;");
  line(1, "const i64 mj_eip = (mj_ei + " + MR + " - 1) / " + MR + " * " + MR +
              ", mj_ejp = (mj_ej + " + NR + " - 1) / " + NR + " * " + NR + ";");
}

// Row block mj_bi has mj_mtb tiles, one more when mj_bi < mj_mte (mj_mc is the larger).
void CppEmitter::row_block_tiles(const ContractionTile& t) {
  const std::string MR = std::to_string(t.mr);
  line(1, "const i64 mj_mtb = mj_mb > 0 ? mj_eip / " + MR + " / mj_mb : 0, mj_mte = mj_mb > 0 ? " +
              "mj_eip / " + MR + " % mj_mb : 0;");
}

// Block (mj_bi, mj_bj)'s first row and column, its rows and columns, padded to the tile.
void CppEmitter::block_bounds(const ContractionTile& t, int d) {
  const std::string MR = std::to_string(t.mr), NR = std::to_string(t.nr);
  line(d, "const i64 mj_i0 = (mj_bi * mj_mtb + (mj_bi < mj_mte ? mj_bi : mj_mte)) * " + MR +
              ", mj_j0 = mj_bj * mj_nc;");
  line(d, "const i64 mj_ib = (mj_mtb + (mj_bi < mj_mte)) * " + MR + ";");
  line(d, "const i64 mj_in = (mj_ei - mj_i0) < mj_ib ? (mj_ei - mj_i0) : mj_ib;");
  line(d, "const i64 mj_jn = (mj_ej - mj_j0) < mj_nc ? (mj_ej - mj_j0) : mj_nc;");
  line(d, "const i64 mj_inp = (mj_in + " + MR + " - 1) / " + MR + " * " + MR +
              ", mj_jnp = (mj_jn + " + NR + " - 1) / " + NR + " * " + NR + ";");
}

// One block of the parallel loop at depth `d`: its rows and columns, each reduction block's
// panels (packed here or taken from the once-packed ones) and the micro-kernel over its tiles.
void CppEmitter::contraction_block(const ContractionParts& p, const ContractionTile& t,
                                   const std::string& micro, int d) {
  const Contraction& c = p.cs.match;
  const std::string MR = std::to_string(t.mr), NR = std::to_string(t.nr);
  line(d, "float* const mj_ap = mj_scratch + (i64)omp_get_thread_num() * mj_per_thread;");
  line(d, "float* const mj_bp = mj_ap + mj_mc * mj_kc;");
  line(d, "float* const mj_cb = mj_bp + mj_kc * mj_nc;");
  if (shifted_a(p)) line(d, "int* const mj_cs = (int*)(void*)(mj_cb + mj_mc * mj_nc);");
  block_bounds(t, d);
  if (p.direct) line(d, "const float* const mj_gb = mj_g + " + direct_plane(p) + " + mj_j0;");
  if (p.direct_steps)
    line(d, "const float* const mj_gb = mj_bpre + (mj_j0 / " + NR + ") * mj_gk * " + NR + " + (" +
                direct_steps_shift(p) + ") * " + NR + ";");
  line(d, "for (i64 mj_pc = 0; mj_pc < mj_k; mj_pc += mj_kc) {");
  ++d;
  line(d, "const i64 mj_kn = (mj_k - mj_pc) < mj_kc ? (mj_k - mj_pc) : mj_kc;");
  // Each operand's panels for this reduction block: the once-packed ones (mj_i0 and mj_j0 are
  // multiples of the tile), or packed here; mj_as / mj_bs is the distance between panels.
  for (int side = 0; side < 1 + !(p.direct || p.direct_steps); ++side) {
    const bool a = side == 0;
    const std::string T = a ? MR : NR, name = a ? "a" : "b", x0 = a ? "mj_i0" : "mj_j0";
    const bool once = a ? p.cs.a_once : p.cs.b_once;
    const std::string pre = "mj_" + name + "pre";
    line(d, "const float* mj_" + name + " = mj_" + name + "p;");
    line(d, "i64 mj_" + name + "s = mj_kn * " + T + ";");
    if (once) {
      // Grouped panels (steps_per_word): the block's first group.
      line(d, "if (" + pre + ") {");
      line(d + 1, "mj_" + name + " = " + pre + " + (" + x0 + " / " + T + ") * mj_k * " + T +
                      " + mj_pc" + group_div(p) + " * " + T + ";");
      line(d + 1, "mj_" + name + "s = mj_k * " + T + ";");
      line(d, "} else {");
    }
    const std::string call = pack_call(p, side, a ? t.mr : t.nr, false);
    const std::string to = "mj_" + name + "p", to_stride = "mj_kn * " + T,
                      rows = a ? "mj_in" : "mj_jn", padded = a ? "mj_inp" : "mj_jnp";
    if (!call.empty())
      line(d + once, call + to + ", " + to_stride + ", " + x0 + ", " + rows + ", " + padded +
                         ", mj_pc, mj_kn);");
    else
      pack_operand(p.r, a ? p.a_pre : p.b_pre, a ? c.a_stmts : c.b_stmts, a ? c.a : c.b,
                   a ? p.iv : p.jv, a ? t.mr : t.nr, to, to_stride, x0, rows, padded, "mj_pc",
                   "mj_kn", d + once, a ? nullptr : p.merged_columns());
    if (p.cs.steps_per_word() > 1) group_block(p, side, a ? t.mr : t.nr, d + once);
    if (once) line(d, "}");
  }
  quad_column_sums(p, t, d);
  // Each B micro-panel stays in L1 while the A panels of the block stream past it.
  line(d, "for (i64 mj_jr = 0; mj_jr < mj_jnp; mj_jr += " + NR + ")");
  line(d + 1, "for (i64 mj_ir = 0; mj_ir < mj_inp; mj_ir += " + MR + ")");
  const std::string b_panel =
      p.direct         ? "mj_gb + mj_jr, mj_goff + mj_pc"
      : p.direct_steps ? "mj_gb + (mj_jr / " + NR + ") * mj_gk * " + NR + ", mj_goff + mj_pc"
                       : "mj_b + (mj_jr / " + NR + ") * mj_bs";
  line(d + 2,
       micro + "(mj_a + (mj_ir / " + MR + ") * mj_as, " + b_panel +
           (p.cs.steps_per_word() > 1
                ? ", (mj_kn + " + std::to_string(p.cs.steps_per_word() - 1) + ")" + group_div(p)
                : ", mj_kn") +
           ", mj_cb + mj_ir * mj_nc + mj_jr, mj_nc, mj_pc == 0);");
  line(--d, "}");
}

// After a block's last reduction block, at depth `d`: every other statement per output element
// of the block (the epilogue), reading the finished sums.
void CppEmitter::contraction_epilogue(const ContractionParts& p, int d) {
  const Contraction& c = p.cs.match;
  const KernelIR& ir = p.ir;
  // An empty reduction: every sum is 0.
  line(d, "if (mj_k <= 0)");
  line(d + 1, "for (i64 mj_t = 0; mj_t < mj_inp * mj_nc; ++mj_t) mj_cb[mj_t] = 0;");
  if (shifted_a(p))
    line(d, "if (mj_k <= 0) for (i64 mj_t = 0; mj_t < mj_nc; ++mj_t) mj_cs[mj_t] = 0;");
  // The epilogue: every other statement, per output element of the block.
  line(d, "for (i64 mj_r = 0; mj_r < mj_in; ++mj_r) {");
  line(d + 1, "const i64 " + p.iv + " = mj_i0 + mj_r;");
  int e = d + 1;
  // Direct: pieces of the widened rows (mj_gw), stored up to the row's own end.
  const std::string row = p.direct ? "mj_gw" : "mj_eji";
  if (p.merged) {
    // Row pieces of the merged columns, as in pack_operand: contiguous stores.
    line(e, "i64 mj_jo = mj_j0 / " + row + ", mj_ji = mj_j0 % " + row + ";");
    line(e, "for (i64 mj_c = 0; mj_c < mj_jn;) {");
    line(e + 1, std::string("const i64 ") + (p.direct ? "mj_step" : "mj_len") + " = (" + row +
                    " - mj_ji) < (mj_jn - mj_c) ? (" + row + " - mj_ji) : (mj_jn - mj_c);");
    if (p.direct)
      line(e + 1,
           "const i64 mj_len = mj_ji >= mj_eji ? 0 : (mj_eji - mj_ji) < mj_step ? "
           "(mj_eji - mj_ji) : mj_step;");
    merged_outer_vars(*p.merged, e + 1);
    ++e;
  }
  line(e, "#pragma omp simd");
  line(e,
       std::string("for (i64 mj_t = 0; mj_t < ") + (p.merged ? "mj_len" : "mj_jn") + "; ++mj_t) {");
  line(e + 1, "const i64 " + p.jv + " = " + (p.merged ? "mj_ji" : "mj_j0") + " + mj_t;");
  for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
    if (p.levels[s] < 0) continue;
    const KStmt& st = ir.body.stmts[s];
    if (s == c.reduce_index) {
      dtypes_[st.id] = st.dtype;
      const std::string col = std::string(p.merged ? "mj_c + " : "") + "mj_t";
      const std::string at = "mj_r * mj_nc + " + col;
      if (!p.cs.int32_sums())
        line(e + 1, "const float " + v(st.id) + " = mj_cb[" + at + "];");
      else if (!shifted_a(p))
        line(e + 1, "const int " + v(st.id) + " = ((const int*)(const void*)mj_cb)[" + at + "];");
      else  // the Int8 A's shift by 128 taken back: 128 times B's column sum, wrapping
        line(e + 1, "const int " + v(st.id) +
                        " = (int)((unsigned)((const int*)(const void*)mj_cb)[" + at +
                        "] - 128u * (unsigned)mj_cs[" + col + "]);");
    } else {
      stmt(st, e + 1);
    }
  }
  line(e + 1, p.store);
  line(e, "}");
  if (p.merged) {
    const std::string step = p.direct ? "mj_step" : "mj_len";
    line(e, "mj_c += " + step + ";");
    line(e, "mj_ji += " + step + ";");
    line(e, "if (mj_ji >= " + row + ") { mj_ji -= " + row + "; ++mj_jo; }");
    line(--e, "}");
  }
  line(d, "}");
}

}  // namespace metajit
