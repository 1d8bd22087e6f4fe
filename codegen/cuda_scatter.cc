// The CUDA emitter's scatter kernels (reindex_reduce): the output filled with the identity, then
// every source combined into its target atomically.
#include <string>
#include <vector>

#include "codegen/cuda_emitter_internal.h"

namespace metajit {

// ---- reindex_reduce ----

// `*t = op(*t, x)` atomically: atomicAdd where CUDA has it, else a compare-and-swap loop, on
// the containing aligned 32-bit word for values of 1 and 2 bytes (bool, the 8- and 16-bit
// integers, the half types; buffers are padded to whole words: runtime/cuda_runtime.cc).
void CudaEmitter::atomic_combine() {
  const ReduceOp op = ReduceOp(ir_.scatter_op);
  const DType t = ir_.output.dtype;
  const std::string T = ctype(t);
  out_ += "\n__device__ __forceinline__ void mj_atomic_combine(" + element_ctype(t) + "* t, " + T +
          " x) {\n";
  const bool add = op == ReduceOp::Add || op == ReduceOp::Mean;
  if (add && (t == DType::Float32 || t == DType::Float64 || t == DType::Int32)) {
    line(1, "atomicAdd(t, x);");
  } else if (add && t == DType::Int64) {
    line(1, "atomicAdd((unsigned long long*)t, (unsigned long long)x);");
  } else if (dtype_size(t) < 4) {
    subword_atomic_combine(op, t);
  } else {
    const bool wide = t == DType::Int64 || t == DType::Float64;
    const std::string W = wide ? "unsigned long long" : "unsigned";
    auto to_t = [&](const std::string& bits) {
      if (t == DType::Float32) return "__uint_as_float(" + bits + ")";
      if (t == DType::Float64) return "__longlong_as_double((long long)" + bits + ")";
      return "(" + T + ")" + bits;
    };
    auto to_bits = [&](const std::string& val) {
      if (t == DType::Float32) return "__float_as_uint(" + val + ")";
      if (t == DType::Float64) return "(unsigned long long)__double_as_longlong(" + val + ")";
      return "(" + W + ")" + val;
    };
    line(1, W + "* w = (" + W + "*)t;");
    line(1, W + " old = *w, seen;");
    line(1, "do {");
    line(2, "seen = old;");
    line(2, "const " + T + " cur = " + to_t("seen") + ";");
    line(2, "const " + T + " nv = " + combine(op, t, "cur", "x") + ";");
    line(2, "old = atomicCAS(w, seen, " + to_bits("nv") + ");");
    line(1, "} while (old != seen);");
  }
  out_ += "}\n";
}

// The compare-and-swap loop of a 1- or 2-byte value `*t`: its bits at `sh` in the aligned word
// `w`, the rest of the word kept.
void CudaEmitter::subword_atomic_combine(ReduceOp op, DType t) {
  const std::string T = ctype(t), mask = dtype_size(t) == 1 ? "0xffu" : "0xffffu";
  const std::string field = "((seen >> sh) & " + mask + ")";
  std::string cur = "(" + T + ")" + field, bits = "((unsigned)nv & " + mask + ")";
  if (t == DType::Bool) {
    cur = "(" + field + " != 0)";
    bits = "(unsigned)nv";
  } else if (is_half(t)) {
    cur = loaded(t, std::string(t == DType::Float16 ? "__ushort_as_half" : "__ushort_as_bfloat16") +
                        "((unsigned short)" + field + ")");
    bits = std::string("(unsigned)") +
           (t == DType::Float16 ? "__half_as_ushort(" : "__bfloat16_as_ushort(") + stored(t, "nv") +
           ")";
  }
  line(1, "unsigned* w = (unsigned*)((u64)t & ~(u64)3);");
  line(1, "const unsigned sh = (unsigned)((u64)t & 3) * 8;");
  line(1, "unsigned old = *w, seen;");
  line(1, "do {");
  line(2, "seen = old;");
  line(2, "const " + T + " cur = " + cur + ";");
  line(2, "const " + T + " nv = " + combine(op, t, "cur", "x") + ";");
  line(2, "const unsigned nw = (seen & ~(" + mask + " << sh)) | (" + bits + " << sh);");
  line(2, "if (nw == seen) return;");
  line(2, "old = atomicCAS(w, seen, nw);");
  line(1, "} while (old != seen);");
}

void CudaEmitter::scatter_kernels() {
  const ReduceOp op = ReduceOp(ir_.scatter_op);
  atomic_combine();
  std::string n = "(i64)1";
  for (const auto& d : ir_.output.dims) n += " * (" + ix(*d) + ")";
  kernel_open("mj_fill");
  line(1, "const i64 mj_on = " + n + ";");
  line(1,
       "for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < mj_on; j += "
       "(i64)gridDim.x * blockDim.x) out[j] = " +
           stored(ir_.output.dtype, identity(op, ir_.output.dtype)) + ";");
  out_ += "}\n";
  kernel_open("mj_scatter");
  const std::vector<const KLoop*> loops = loop_ptrs(ir_.loops, 0, ir_.loops.size());
  line(1, "const i64 mj_n = " + product(loops) + ";");
  line(1,
       "for (i64 mj_q = (i64)blockIdx.x * blockDim.x + threadIdx.x; mj_q < mj_n; mj_q += "
       "(i64)gridDim.x * blockDim.x) {");
  decompose(loops, "mj_q", 2);
  block(ir_.body, 2);
  line(2, "if (" + ix(*ir_.target_valid) + ") mj_atomic_combine(&out[" + offset("out", ir_.target) +
              "], " + v(ir_.body.result) + ");");
  line(1, "}");
  out_ += "}\n";
  launcher_open();
  const std::string T = std::to_string(kThreads);
  line(1, "const i64 mj_on = " + n + ", mj_n = " + product(loops) + ";");
  line(1, "if (mj_on <= 0) return;");
  line(1, "MJ_LAUNCH(mj_fill, dim3(mj_blocks(mj_on, " + T + ", 65536)), dim3(" + T + "), a);");
  line(1, "if (mj_n > 0) MJ_LAUNCH(mj_scatter, dim3(mj_blocks(mj_n, " + T + ", 65536)), dim3(" + T +
              "), a);");
  out_ += "}\n";
}

}  // namespace metajit
