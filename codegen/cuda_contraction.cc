// The CUDA emitter's contraction: output tiles per block, the operands staged through shared
// memory, a register tile per thread, the epilogue on each finished output.
#include <string>
#include <vector>

#include "codegen/cuda_emitter_internal.h"

namespace metajit {

// Matrix products: a BM x BN tile of outputs (loops i, j) per block, the reduction in steps
// of 8 staged through shared memory, TM x TN outputs per thread in registers; then the rest
// of the kernel (bias, activation...) on each finished output.
void CudaEmitter::contraction_kernels(const Contraction& c) {
  const KStmt& r = sched_.body.stmts[c.reduce_index];
  const KBlock& body = *r.body;
  const std::string iv = "i" + std::to_string(c.i_var), jv = "i" + std::to_string(c.j_var);
  const ContractionLoops cl = contraction_loops(sched_, c);
  const std::string ei = ix(*cl.i->extent), ej = ix(*cl.j->extent);
  const std::vector<const KLoop*>& outer = cl.outer;
  const std::vector<const KLoop*> red = loop_ptrs(r.loops, 0, r.loops.size());
  out_ +=
      "\ntemplate <int BM, int BN, int TM, int TN>\n"
      "__device__ __forceinline__ void mj_mm_body(const mj_args& a) {\n";
  line(1, "constexpr int BK = 8, NT = (BM / TM) * (BN / TN), CT = BN / TN, RT = BM / TM;");
  // Padded: the a-tile is written with consecutive threads along BK, 4 banks apart.
  line(1, "__shared__ float mj_as[BK][BM + 4];");
  line(1, "__shared__ float mj_bs[BK][BN];");
  kernel_body_open();
  prologue(sched_.body.stmts.size(), 1);
  line(1, "const i64 mj_ei = " + ei + ", mj_ej = " + ej + ", mj_k = " + product(red) + ";");
  line(1, "const i64 mj_ti = (mj_ei + BM - 1) / BM, mj_tj = (mj_ej + BN - 1) / BN;");
  line(1, "const i64 mj_on = " + product(outer) + ";");
  line(1, "const int mj_tid = threadIdx.x, mj_tr = mj_tid / CT, mj_tc = mj_tid % CT;");
  line(1, "for (i64 mj_t = blockIdx.x; mj_t < mj_on * mj_ti * mj_tj; mj_t += gridDim.x) {");
  line(2, "const i64 mj_jb = (mj_t % mj_tj) * BN, mj_ib = (mj_t / mj_tj % mj_ti) * BM;");
  line(2, "const i64 mj_o = mj_t / mj_tj / mj_ti;");
  decompose(outer, "mj_o", 2);
  line(2, "float mj_c[TM][TN];");
  line(2, "for (int m = 0; m < TM; ++m)");
  line(3, "for (int n = 0; n < TN; ++n) mj_c[m][n] = 0.0f;");
  line(2, "for (i64 mj_k0 = 0; mj_k0 < mj_k; mj_k0 += BK) {");
  // Operand a: consecutive threads take consecutive reduction steps of one row; operand b:
  // consecutive columns of one reduction step (both read along memory for row-major inputs).
  stage_operand("BM * BK", "const int m = mj_x / BK, kk = mj_x % BK;", "mj_ib + m < mj_ei", iv,
                "mj_ib + m", red, body, c.a_outer, c.a_stmts, c.a, "mj_as[kk][m]");
  stage_operand("BN * BK", "const int kk = mj_x / BN, n = mj_x % BN;", "mj_jb + n < mj_ej", jv,
                "mj_jb + n", red, body, c.b_outer, c.b_stmts, c.b, "mj_bs[kk][n]");
  line(3, "__syncthreads();");
  line(3, "#pragma unroll");
  line(3, "for (int kk = 0; kk < BK; ++kk) {");
  line(4, "float mj_ra[TM], mj_rb[TN];");
  line(4, "for (int m = 0; m < TM; ++m) mj_ra[m] = mj_as[kk][mj_tr + m * RT];");
  line(4, "for (int n = 0; n < TN; ++n) mj_rb[n] = mj_bs[kk][mj_tc + n * CT];");
  line(4, "for (int m = 0; m < TM; ++m)");
  line(5, "for (int n = 0; n < TN; ++n) mj_c[m][n] += mj_ra[m] * mj_rb[n];");
  line(3, "}");
  line(3, "__syncthreads();");
  line(2, "}");
  line(2, "for (int m = 0; m < TM; ++m) {");
  line(3, "for (int n = 0; n < TN; ++n) {");
  line(4, "const i64 " + iv + " = mj_ib + mj_tr + m * RT, " + jv + " = mj_jb + mj_tc + n * CT;");
  line(4, "if (" + iv + " >= mj_ei || " + jv + " >= mj_ej) continue;");
  for (size_t s = 0; s < sched_.body.stmts.size(); ++s) {
    if (levels_[s] < 0) continue;
    const KStmt& st = sched_.body.stmts[s];
    if (s == c.reduce_index) {
      dtypes_[st.id] = st.dtype;
      line(4, "const float " + v(st.id) + " = mj_c[m][n];");
    } else {
      stmt(st, 4);
    }
  }
  line(4, store());
  line(3, "}");
  line(2, "}");
  line(1, "}");
  out_ += "}\n";
  out_ +=
      "__global__ void __launch_bounds__(256) mj_mm_large(const mj_args a) { "
      "mj_mm_body<128, 128, 8, 8>(a); }\n";
  out_ +=
      "__global__ void __launch_bounds__(256) mj_mm_small(const mj_args a) { "
      "mj_mm_body<64, 64, 4, 4>(a); }\n";
}

// One operand's tile for this reduction step into shared memory: `count` elements, thread
// mj_x takes element `split` (setting m or n, and kk), computes it with `stmts` (its output
// loop variable `var` = `var_value`) where `inside`, else 0.
void CudaEmitter::stage_operand(const std::string& count, const std::string& split,
                                const std::string& inside, const std::string& var,
                                const std::string& var_value, const std::vector<const KLoop*>& red,
                                const KBlock& body, const std::vector<size_t>& outer,
                                const std::vector<size_t>& stmts, int value,
                                const std::string& target) {
  line(3, "for (int mj_x = mj_tid; mj_x < " + count + "; mj_x += NT) {");
  line(4, split);
  line(4, "float mj_val = 0.0f;");
  line(4, "if (" + inside + " && mj_k0 + kk < mj_k) {");
  line(5, "const i64 " + var + " = " + var_value + ";");
  decompose(red, "(mj_k0 + kk)", 5);
  for (size_t s : outer) stmt(sched_.body.stmts[s], 5);  // the operand's prologue
  for (size_t s : stmts) stmt(body.stmts[s], 5);
  line(5, "mj_val = " + v(value) + ";");
  line(4, "}");
  line(4, target + " = mj_val;");
  line(3, "}");
}

}  // namespace metajit
