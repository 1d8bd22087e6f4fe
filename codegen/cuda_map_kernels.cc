// The CUDA emitter's map kernels: the candidates the schedule chose (codegen/cuda_schedule.h),
// one thread per element, 16-byte element-wise accesses, and the launcher that picks one from
// the launch's shapes.
#include <string>
#include <vector>

#include "codegen/cuda_emitter_internal.h"

namespace metajit {

// ---- map kernels ----

void CudaEmitter::map_kernels() {
  const CudaSchedule& cs = schedule_;
  for (const KStmt& st : sched_.body.stmts)
    if (st.kind == KOp::Reduce) reduce_functor(st);
  for (size_t s : cs.globals) global_reduce_kernels(s);
  generic_kernel();
  if (cs.vec4) vec4_kernel();
  if (cs.contraction) contraction_kernels(*cs.contraction);
  if (cs.column) column_kernels(cs.cooperative[0]);
  if (cs.rows) row_kernel(cs.row_level);
  launcher();
}

// Four elements per thread and access: vector loads, the body once per lane (unrolled), one
// vector store; the last n % 4 elements one per thread. The launcher picks it when every
// vector access is 16-byte aligned.
void CudaEmitter::vec4_kernel() {
  kernel_open("mj_vec4");
  prologue(sched_.body.stmts.size(), 1);
  const std::vector<const KLoop*> loops = loop_ptrs(sched_.loops, 0, sched_.loops.size());
  const std::string O = ctype(ir_.output.dtype);
  line(1, "const i64 mj_n = " + product(loops) + ";");
  line(1, "const unsigned mj_n4 = (unsigned)(mj_n / 4);");
  line(1,
       "for (unsigned mj_q = blockIdx.x * blockDim.x + threadIdx.x; mj_q < mj_n4; mj_q += "
       "gridDim.x * blockDim.x) {");
  for (int b : schedule_.vec4_buffers) {
    const std::string V = ctype(ir_.inputs[size_t(b)].dtype) + "4", B = std::to_string(b);
    line(2, "const " + V + " mj_l" + B + " = ((const " + V + "*)in" + B + ")[mj_q];");
    lane_loads_[b] = "mj_lane(mj_l" + B + ", mj_k)";
  }
  line(2, O + " mj_o[4];");
  for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
    line(2, ctype(ir_.extra_outputs[k].buffer.dtype) + " mj_o" + std::to_string(k + 1) + "[4];");
  line(2, "MJ_UNROLL");
  line(2, "for (int mj_k = 0; mj_k < 4; ++mj_k) {");
  line(3, "const i64 mj_f = (i64)mj_q * 4 + mj_k;");
  decompose(loops, "mj_f", 3);  // for Iota; nothing else reads the loop variables
  for (size_t s = 0; s < sched_.body.stmts.size(); ++s)
    if (levels_[s] >= 0) stmt(sched_.body.stmts[s], 3);
  lane_loads_.clear();
  line(3, "mj_o[mj_k] = " + v(sched_.body.result) + ";");
  for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
    line(3, "mj_o" + std::to_string(k + 1) + "[mj_k] = " + v(ir_.extra_outputs[k].value) + ";");
  line(2, "}");
  line(2, "((" + O + "4*)out)[mj_q] = make_" + O + "4(mj_o[0], mj_o[1], mj_o[2], mj_o[3]);");
  for (size_t k = 0; k < ir_.extra_outputs.size(); ++k) {
    const std::string E = ctype(ir_.extra_outputs[k].buffer.dtype),
                      o = "mj_o" + std::to_string(k + 1);
    line(2, "((" + E + "4*)" + extra_out(k) + ")[mj_q] = make_" + E + "4(" + o + "[0], " + o +
                "[1], " + o + "[2], " + o + "[3]);");
  }
  line(1, "}");
  line(1, "const i64 mj_t = (i64)mj_n4 * 4 + (i64)blockIdx.x * blockDim.x + threadIdx.x;");
  line(1, "if (mj_t < mj_n) {");
  decompose(loops, "mj_t", 2);
  for (size_t s = 0; s < sched_.body.stmts.size(); ++s)
    if (levels_[s] >= 0) stmt(sched_.body.stmts[s], 2);
  line(2, store());
  line(1, "}");
  out_ += "}\n";
}

// One thread per output element, every reduction run by that thread: correct for any map
// kernel, the fastest for element-wise work; 32- and 64-bit index variants.
void CudaEmitter::generic_kernel() {
  out_ += "\ntemplate <class I> __device__ __forceinline__ void mj_map_body(const mj_args& a) {\n";
  kernel_body_open();
  prologue(sched_.body.stmts.size(), 1);
  const std::vector<const KLoop*> loops = loop_ptrs(sched_.loops, 0, sched_.loops.size());
  line(1, "const I mj_n = (I)(" + product(loops) + ");");
  line(1,
       "for (I mj_q = (I)blockIdx.x * blockDim.x + threadIdx.x; mj_q < mj_n; mj_q += (I)gridDim.x "
       "* blockDim.x) {");
  decompose(loops, "mj_q", 2, "I");
  for (size_t s = 0; s < sched_.body.stmts.size(); ++s)
    if (levels_[s] >= 0) stmt(sched_.body.stmts[s], 2);
  line(2, store());
  line(1, "}");
  out_ += "}\n";
  for (const char* w : {"32", "64"})
    out_ += "__global__ void __launch_bounds__(" + std::to_string(kThreads) + ") mj_map" + w +
            "(const mj_args a) { mj_map_body<" + (std::string(w) == "32" ? "unsigned" : "u64") +
            ">(a); }\n";
}

// The host launcher: fills mj_args, launches the reductions over everything, then picks the
// main kernel from the shapes of this launch: the first of the schedule's kernels whose
// launch conditions hold, the one-thread-per-element kernel last.
void CudaEmitter::launcher() {
  const CudaSchedule& cs = schedule_;
  launcher_open();
  const std::string T = std::to_string(kThreads);
  for (size_t s : cs.globals) {
    const KStmt& st = sched_.body.stmts[s];
    const std::string id = std::to_string(st.id);
    line(1, "{");
    line(2, "const i64 mj_rn = " + product(loop_ptrs(st.loops, 0, st.loops.size())) + ";");
    line(2,
         "const unsigned mj_g = mj_blocks(mj_rn, " + T + ", " + std::to_string(kPartials) + ");");
    line(2, "MJ_LAUNCH(mj_gpart" + id + ", dim3(mj_g), dim3(" + T + "), a);");
    line(2, "MJ_LAUNCH(mj_gfin" + id + ", dim3(1), dim3(" + T + "), mj_g);");
    line(1, "}");
  }
  const std::vector<const KLoop*> all = loop_ptrs(sched_.loops, 0, sched_.loops.size());
  line(1, "const i64 mj_n = " + product(all) + ";");
  line(1, "if (mj_n <= 0) return;");
  if (cs.contraction) launch_contraction(*cs.contraction);
  if (cs.column) launch_columns();
  if (cs.rows) launch_rows();
  if (cs.vec4) launch_vec4();
  line(1, "if (mj_n < 2147483647LL) MJ_LAUNCH(mj_map32, dim3(mj_blocks(mj_n, " + T +
              ", 65536)), dim3(" + T + "), a);");
  line(1, "else MJ_LAUNCH(mj_map64, dim3(mj_blocks(mj_n, " + T + ", 65536)), dim3(" + T + "), a);");
  out_ += "}\n";
}

// The shared-memory tiles of a contraction, for products of at least 16 x 16 x 8.
void CudaEmitter::launch_contraction(const Contraction& c) {
  const ContractionLoops cl = contraction_loops(sched_, c);
  const std::string ei = ix(*cl.i->extent), ej = ix(*cl.j->extent);
  const KStmt& r = sched_.body.stmts[c.reduce_index];
  line(1, "{");
  line(2, "const i64 mj_ei = " + ei + ", mj_ej = " + ej +
              ", mj_k = " + product(loop_ptrs(r.loops, 0, r.loops.size())) + ";");
  line(2, "if (mj_ei >= 16 && mj_ej >= 16 && mj_k >= 8) {");
  line(3, "const bool mj_large = mj_ei >= 128 && mj_ej >= 128;");
  line(3, "const i64 mj_tile = mj_large ? 128 : 64;");
  line(3,
       "const i64 mj_tiles = mj_n / (mj_ei * mj_ej) * ((mj_ei + mj_tile - 1) / mj_tile) * "
       "((mj_ej + mj_tile - 1) / mj_tile);");
  line(3, "const unsigned mj_b = mj_blocks(mj_tiles, 1, 1u << 20);");
  line(3, "if (mj_large) MJ_LAUNCH(mj_mm_large, dim3(mj_b), dim3(256), a);");
  line(3, "else MJ_LAUNCH(mj_mm_small, dim3(mj_b), dim3(256), a);");
  line(3, "return;");
  line(2, "}");
  line(1, "}");
}

// The column kernels, from 32 columns on.
void CudaEmitter::launch_columns() {
  const int k = int(sched_.loops.size());
  const std::string T = std::to_string(kThreads);
  const KStmt& st = sched_.body.stmts[schedule_.cooperative[0]];
  line(1, "{");
  line(2, "const i64 mj_c = " + ix(*sched_.loops[size_t(k - 1)].extent) + ";");
  line(2, "const i64 mj_rn = " + product(loop_ptrs(st.loops, 0, st.loops.size())) + ";");
  line(2, "if (mj_c >= 32) {");
  line(3, "const i64 mj_on = mj_n / mj_c, mj_strips = mj_on * ((mj_c + 31) / 32);");
  // Enough blocks to fill a large GPU (~2048 resident blocks of 256 threads), each with at
  // least 64 rows of the reduced axis, within the scratch for partials.
  line(3, "i64 mj_split = 1;");
  line(3,
       "while (mj_strips * mj_split < 2048 && mj_rn / (mj_split * 2) >= 64 && "
       "mj_split * 2 * mj_n <= " +
           std::to_string(kColScratch) +
           " && mj_split < 256) "
           "mj_split *= 2;");
  line(3, "const unsigned mj_b = mj_blocks(mj_strips, 1, 1u << 20);");
  line(3, "MJ_LAUNCH(mj_cols, dim3(mj_b, (unsigned)mj_split), dim3(32, 8), a);");
  line(3, "if (mj_split > 1) MJ_LAUNCH(mj_colfin, dim3(mj_blocks(mj_n, " + T +
              ", 1u << 20)), dim3(" + T + "), a, (int)mj_split);");
  line(3, "return;");
  line(2, "}");
  line(1, "}");
}

// The row kernel, when a row has a warp's worth of work.
void CudaEmitter::launch_rows() {
  line(1, "{");
  line(2, "i64 mj_rmax = 0;");
  for (size_t s : schedule_.cooperative) {
    const KStmt& st = sched_.body.stmts[s];
    line(2, "mj_rmax = mj_max(mj_rmax, " + product(loop_ptrs(st.loops, 0, st.loops.size())) + ");");
  }
  const std::vector<const KLoop*> outer =
      loop_ptrs(sched_.loops, 0, size_t(schedule_.row_level) + 1);
  line(2, "if (mj_rmax >= 32) {");
  line(3, "const i64 mj_rows_n = " + product(outer) + ";");
  line(3, "const i64 mj_w = mj_max(mj_rmax, mj_n / mj_rows_n);");
  line(3, "const int mj_t = mj_w >= 256 ? 256 : (mj_w >= 128 ? 128 : (mj_w >= 64 ? 64 : 32));");
  line(3, "MJ_LAUNCH(mj_rows, dim3(mj_blocks(mj_rows_n, 1, 1u << 20)), dim3(mj_t), a);");
  line(3, "return;");
  line(2, "}");
  line(1, "}");
}

// The 16-byte element-wise kernel, when every buffer is aligned and the dims match.
void CudaEmitter::launch_vec4() {
  const std::string T = std::to_string(kThreads);
  std::string aligned = "(unsigned long long)a.out";
  for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
    aligned += " | (unsigned long long)a." + extra_out(k);
  for (int b : schedule_.vec4_buffers) aligned += " | (unsigned long long)a.in" + std::to_string(b);
  const std::string same = same_dims(*schedule_.vec4);
  line(1, "if (mj_n >= 4 && mj_n < 2147483647LL && ((" + aligned + ") & 15) == 0" + same + ") {");
  line(2, "MJ_LAUNCH(mj_vec4, dim3(mj_blocks(mj_n / 4, " + T + ", 65536)), dim3(" + T + "), a);");
  line(2, "return;");
  line(1, "}");
}

}  // namespace metajit
