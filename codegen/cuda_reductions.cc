// The CUDA emitter's reductions: over everything (per-block partials, then one block), per row
// (block reductions, 16-byte loads where they apply) and over columns (32 per block, tall
// inputs split over blocks and combined in a fixed order).
#include <set>
#include <string>
#include <vector>

#include "codegen/cuda_emitter_internal.h"

namespace metajit {

// A functor combining two accumulators of Reduce `st` (for mj_block_reduce).
void CudaEmitter::reduce_functor(const KStmt& st) {
  const DType at = acc_dtype(ReduceOp(st.op), st.dtype);
  const std::string A = ctype(at);
  out_ += "struct mj_op" + std::to_string(st.id) + " { __device__ __forceinline__ " + A +
          " operator()(" + A + " x, " + A + " y) const { return " +
          combine(ReduceOp(st.op), at, "x", "y") + "; } };\n";
}

// `acc` accumulates Reduce `st`'s body over its iterations first, first+step, ...: the
// cooperative part of a block or grid reduction.
void CudaEmitter::strided_reduce(const KStmt& st, const std::string& acc, const std::string& first,
                                 const std::string& step, int d) {
  const ReduceOp op = ReduceOp(st.op);
  const DType at = acc_dtype(op, st.dtype);
  std::vector<const KLoop*> loops = loop_ptrs(st.loops, 0, st.loops.size());
  line(d, ctype(at) + " " + acc + " = " + identity(op, at) + ";");
  line(d, "{");
  line(d + 1, "const i64 mj_rn = " + product(loops) + ";");
  line(d + 1, "for (i64 mj_q = " + first + "; mj_q < mj_rn; mj_q += " + step + ") {");
  decompose(loops, "mj_q", d + 2);
  block(*st.body, d + 2);
  line(d + 2, acc + " = " + combine(op, at, acc, v(st.body->result)) + ";");
  line(d + 1, "}");
  line(d, "}");
}

// A reduction over everything: per-block partials, then one block combines them into the
// device variable mj_g<id> that later kernels read.
void CudaEmitter::global_reduce_kernels(size_t s) {
  const KStmt& st = sched_.body.stmts[s];
  const std::string id = std::to_string(st.id);
  const DType at = acc_dtype(ReduceOp(st.op), st.dtype);
  const std::string A = ctype(at), ident = identity(ReduceOp(st.op), at);
  out_ += "__device__ " + A + " mj_g" + id + ";\n";
  out_ += "__device__ " + A + " mj_part" + id + "[" + std::to_string(kPartials) + "];\n";
  kernel_open("mj_gpart" + id);
  prologue(s, 1);
  strided_reduce(st, "mj_acc", "(i64)blockIdx.x * blockDim.x + threadIdx.x",
                 "(i64)gridDim.x * blockDim.x", 1);
  line(1, "mj_acc = mj_block_reduce(mj_acc, mj_op" + id + "(), (" + A + ")" + ident + ");");
  line(1, "if (threadIdx.x == 0) mj_part" + id + "[blockIdx.x] = mj_acc;");
  out_ += "}\n";
  out_ += "\n__global__ void __launch_bounds__(" + std::to_string(kThreads) + ") mj_gfin" + id +
          "(const unsigned mj_parts) {\n";
  line(1, A + " mj_acc = " + ident + ";");
  line(1, "for (unsigned q = threadIdx.x; q < mj_parts; q += blockDim.x) mj_acc = " +
              combine(ReduceOp(st.op), at, "mj_acc", "mj_part" + id + "[q]") + ";");
  line(1, "mj_acc = mj_block_reduce(mj_acc, mj_op" + id + "(), (" + A + ")" + ident + ");");
  line(1, "if (threadIdx.x == 0) mj_g" + id + " = mj_acc;");
  out_ += "}\n";
}

// One block per row (the output loops 0..row_level): the row's reductions are block
// reductions, its outputs (loops row_level+1..) are shared by the block's threads.
void CudaEmitter::row_kernel(int row_level) {
  const int k = int(sched_.loops.size());
  kernel_open("mj_rows");
  prologue(sched_.body.stmts.size(), 1);
  const std::vector<const KLoop*> outer = loop_ptrs(sched_.loops, 0, size_t(row_level) + 1);
  const std::vector<const KLoop*> inner = loop_ptrs(sched_.loops, size_t(row_level) + 1, size_t(k));
  line(1, "const i64 mj_rows_n = " + product(outer) + ";");
  line(1, "const i64 mj_inner = " + product(inner) + ";");
  line(1, "for (i64 mj_o = blockIdx.x; mj_o < mj_rows_n; mj_o += gridDim.x) {");
  decompose(outer, "mj_o", 2);
  for (size_t s = 0; s < sched_.body.stmts.size(); ++s) {
    if (levels_[s] < 0 || levels_[s] > row_level) continue;
    const KStmt& st = sched_.body.stmts[s];
    if (st.kind != KOp::Reduce) {
      stmt(st, 2);
      continue;
    }
    const std::string id = std::to_string(st.id);
    const DType at = acc_dtype(ReduceOp(st.op), st.dtype);
    if (auto it = schedule_.row_vec4.find(st.id); it != schedule_.row_vec4.end())
      row_reduce_vec4(st, "mj_acc" + id, it->second, 2);
    else
      strided_reduce(st, "mj_acc" + id, "threadIdx.x", "blockDim.x", 2);
    line(2, "mj_acc" + id + " = mj_block_reduce(mj_acc" + id + ", mj_op" + id + "(), (" +
                ctype(at) + ")" + identity(ReduceOp(st.op), at) + ");");
    dtypes_[st.id] = st.dtype;
    line(2, "const " + ctype(st.dtype) + " " + v(st.id) + " = (" + ctype(st.dtype) + ")mj_acc" +
                id + ";");
  }
  line(2, "for (i64 mj_e = threadIdx.x; mj_e < mj_inner; mj_e += blockDim.x) {");
  decompose(inner, "mj_e", 3);
  for (size_t s = 0; s < sched_.body.stmts.size(); ++s)
    if (levels_[s] > row_level) stmt(sched_.body.stmts[s], 3);
  line(3, store());
  line(2, "}");
  line(2, "__syncthreads();  // the next row reuses the block reductions' shared memory");
  line(1, "}");
  out_ += "}\n";
}

// strided_reduce() over a block's threads with 16-byte loads where `conds` hold at run time
// (the same for every thread of the block: no divergence), else as strided_reduce().
void CudaEmitter::row_reduce_vec4(const KStmt& st, const std::string& acc, const RowVec4& vec4,
                                  int d) {
  const ReduceOp op = ReduceOp(st.op);
  const DType at = acc_dtype(op, st.dtype);
  const std::string i = "i" + std::to_string(st.loops[0].var);
  // The dims, 16-byte aligned rows and the row length a multiple of 4.
  std::string all;
  for (const RowVec4::Read& r : vec4.reads) {
    if (r.same) all += same_dims({*r.same});
    all += " && ((unsigned long long)in" + std::to_string(r.buffer) + " & 15) == 0";
  }
  all = all.substr(4) + " && (" + ix(*st.loops[0].extent) + ") % 4 == 0";
  line(d, ctype(at) + " " + acc + " = " + identity(op, at) + ";");
  line(d, "if (" + all + ") {");
  line(d + 1, "const i64 mj_rn4 = (" + ix(*st.loops[0].extent) + ") / 4;");
  line(d + 1, "for (i64 mj_q = threadIdx.x; mj_q < mj_rn4; mj_q += blockDim.x) {");
  std::set<int> loaded;
  for (const KStmt& b : st.body->stmts) {
    if (b.kind != KOp::Load || !loaded.insert(b.buffer).second) continue;
    const std::string B = std::to_string(b.buffer);
    const std::string V = ctype(ir_.inputs[size_t(b.buffer)].dtype) + "4";
    line(d + 2, V + " mj_l" + B + ";");
    line(d + 2, "{");
    line(d + 3, "const i64 " + i + " = mj_q * 4;");
    line(d + 3,
         "mj_l" + B + " = *(const " + V + "*)(in" + B + " + " + offset("in" + B, b.index) + ");");
    line(d + 2, "}");
    lane_loads_[b.buffer] = "mj_lane(mj_l" + B + ", mj_k)";
  }
  line(d + 2, "MJ_UNROLL");
  line(d + 2, "for (int mj_k = 0; mj_k < 4; ++mj_k) {");
  line(d + 3, "const i64 " + i + " = mj_q * 4 + mj_k;");
  block(*st.body, d + 3);
  line(d + 3, acc + " = " + combine(op, at, acc, v(st.body->result)) + ";");
  line(d + 2, "}");
  lane_loads_.clear();
  line(d + 1, "}");
  line(d, "} else {");
  strided_reduce(st, "mj_acc_s", "threadIdx.x", "blockDim.x", d + 1);
  line(d + 1, acc + " = mj_acc_s;");
  line(d, "}");
}

// Column reductions: a block of 32x8 threads owns 32 adjacent outputs; its rows (and, with
// mj_split > 1 blocks, the blocks along y) share the reduced axis. Warps read 32 adjacent
// values of one row: coalesced.
void CudaEmitter::column_kernels(size_t r) {
  const int k = int(sched_.loops.size());
  const KStmt& st = sched_.body.stmts[r];
  const std::string id = std::to_string(st.id);
  const ReduceOp op = ReduceOp(st.op);
  const DType at = acc_dtype(op, st.dtype);
  const std::string A = ctype(at), T = ctype(st.dtype);
  const std::string jv = "i" + std::to_string(sched_.loops[size_t(k - 1)].var);
  const std::string cols = ix(*sched_.loops[size_t(k - 1)].extent);
  const std::vector<const KLoop*> outer = loop_ptrs(sched_.loops, 0, size_t(k - 1));
  out_ += "__device__ " + A + " mj_cpart" + id + "[" + std::to_string(kColScratch) + "];\n";

  kernel_open("mj_cols");
  prologue(sched_.body.stmts.size(), 1);
  line(1, "__shared__ " + A + " mj_col[8][33];");
  line(1, "const i64 mj_c = " + cols + ", mj_strips = (mj_c + 31) / 32;");
  line(1, "const i64 mj_on = " + product(outer) + ";");
  line(1, "for (i64 mj_b = blockIdx.x; mj_b < mj_on * mj_strips; mj_b += gridDim.x) {");
  line(2, "const i64 mj_o = mj_b / mj_strips;");
  decompose(outer, "mj_o", 2);
  line(2, "const i64 " + jv + " = (mj_b % mj_strips) * 32 + threadIdx.x;");
  for (size_t s = 0; s < sched_.body.stmts.size(); ++s)
    if (levels_[s] >= 0 && levels_[s] < k - 1) stmt(sched_.body.stmts[s], 2);
  line(2, A + " mj_acc = " + identity(op, at) + ";");
  line(2, "if (" + jv + " < mj_c) {");
  strided_reduce(st, "mj_part", "(i64)blockIdx.y * blockDim.y + threadIdx.y",
                 "(i64)gridDim.y * blockDim.y", 3);
  line(3, "mj_acc = mj_part;");
  line(2, "}");
  line(2, "mj_col[threadIdx.y][threadIdx.x] = mj_acc;");
  line(2, "__syncthreads();");
  line(2, "if (threadIdx.y == 0 && " + jv + " < mj_c) {");
  line(3, "for (int y = 1; y < (int)blockDim.y; ++y) mj_acc = " +
              combine(op, at, "mj_acc", "mj_col[y][threadIdx.x]") + ";");
  line(3, "if (gridDim.y > 1) {");
  line(4,
       "mj_cpart" + id + "[(i64)blockIdx.y * mj_on * mj_c + mj_o * mj_c + " + jv + "] = mj_acc;");
  line(3, "} else {");
  dtypes_[st.id] = st.dtype;
  line(4, "const " + T + " " + v(st.id) + " = (" + T + ")mj_acc;");
  for (size_t s = 0; s < sched_.body.stmts.size(); ++s)
    if (levels_[s] == k - 1 && s != r) stmt(sched_.body.stmts[s], 4);
  line(4, store());
  line(3, "}");
  line(2, "}");
  line(2, "__syncthreads();");
  line(1, "}");
  out_ += "}\n";

  // Tall inputs: combine the blocks' partials in order, then finish each output.
  kernel_open("mj_colfin", ", const int mj_split");
  prologue(sched_.body.stmts.size(), 1);
  line(1, "const i64 mj_c = " + cols + ", mj_on = " + product(outer) + ";");
  line(1,
       "for (i64 mj_e = (i64)blockIdx.x * blockDim.x + threadIdx.x; mj_e < mj_on * mj_c; "
       "mj_e += (i64)gridDim.x * blockDim.x) {");
  line(2, A + " mj_acc = " + identity(op, at) + ";");
  line(2, "for (int s = 0; s < mj_split; ++s) mj_acc = " +
              combine(op, at, "mj_acc", "mj_cpart" + id + "[(i64)s * mj_on * mj_c + mj_e]") + ";");
  decompose(loop_ptrs(sched_.loops, 0, size_t(k)), "mj_e", 2);
  for (size_t s = 0; s < sched_.body.stmts.size(); ++s) {
    if (levels_[s] < 0) continue;
    if (s == r)
      line(2, "const " + T + " " + v(st.id) + " = (" + T + ")mj_acc;");
    else
      stmt(sched_.body.stmts[s], 2);
  }
  line(2, store());
  line(1, "}");
  out_ += "}\n";
}

}  // namespace metajit
