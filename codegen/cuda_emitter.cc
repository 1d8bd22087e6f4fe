#include "codegen/cuda_emitter.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "codegen/c_family_emitter.h"
#include "codegen/cuda_emulation.h"
#include "codegen/kernel_patterns.h"
#include "codegen/loop_invariants.h"

namespace metajit {
namespace {

constexpr int kThreads = 256;
constexpr int kPartials = 1024;           // per-block partials of a reduction over everything
constexpr int64_t kColScratch = 1 << 18;  // partial column sums of tall column reductions

class CudaEmitter : public CFamilyEmitter {
 public:
  CudaEmitter(const KernelIR& ir, CudaTarget target)
      : CFamilyEmitter(ir, Dialect::Cuda), target_(target), sched_(ir) {}

  std::string run() {
    out_ = "// metajit generated CUDA kernel: ";
    for (size_t k = 0; k < ir_.ops.size(); ++k) out_ += (k ? ", " : "") + ir_.ops[k];
    out_ += "\n";
    out_ += target_ == CudaTarget::Gpu ? kCudaGpuPrelude : kCudaEmulationPrelude;
    out_ += integer_prelude("MJ_HD");
    out_ += extra_readers("MJ_HD");
    out_ += kCudaCommonPrelude;
    args_struct();
    if (ir_.kind == KernelKind::Scatter) {
      scatter_kernels();
    } else {
      hoist_reduce_invariants(sched_);
      levels_ = statement_levels(sched_);
      level_of_value_ = levels_by_value(sched_, levels_);
      map_kernels();
    }
    return out_;
  }

 private:
  // ---- pieces every kernel has ----

  void args_struct() {
    out_ += "\nstruct mj_args {\n";
    for (size_t k = 0; k < ir_.inputs.size(); ++k)
      line(1, "const " + ctype(ir_.inputs[k].dtype) + "* in" + std::to_string(k) + ";");
    line(1, ctype(ir_.output.dtype) + "* out;");
    for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
      line(1, ctype(ir_.extra_outputs[k].buffer.dtype) + "* " + extra_out(k) + ";");
    line(1, "i64 p[" + std::to_string(std::max(ir_.num_params, 1)) + "];");
    line(1, "double s[" + std::to_string(std::max(ir_.num_scalars, 1)) + "];");
    out_ += "};\n";
  }

  // Opens `__global__ void name(const mj_args a<extra>)` and names its arguments as the C++
  // emitter does (p<k>, S, in<k> with strides, out).
  void kernel_open(const std::string& name, const std::string& extra = "") {
    out_ += "\n__global__ void __launch_bounds__(" + std::to_string(kThreads) + ") " + name +
            "(const mj_args a" + extra + ") {\n";
    kernel_body_open();
  }

  // Sets the loop variables of `loops` (row-major: the last runs fastest) from the flat index
  // `flat` in [0, product of their extents).
  void decompose(const std::vector<const KLoop*>& loops, const std::string& flat, int d,
                 const std::string& type = "i64") {
    if (loops.empty()) return;
    if (loops.size() == 1) {
      line(d, "const i64 i" + std::to_string(loops[0]->var) + " = (i64)" + flat + ";");
      return;
    }
    const std::string r = "mj_r" + std::to_string(uid_++);
    line(d, type + " " + r + " = " + flat + ";");
    for (size_t k = loops.size(); k-- > 0;) {
      const std::string i = "i" + std::to_string(loops[k]->var);
      if (k == 0) {
        line(d, "const i64 " + i + " = (i64)" + r + ";");
      } else {
        const std::string e = "(" + type + ")(" + ix(*loops[k]->extent) + ")";
        line(d, "const i64 " + i + " = (i64)(" + r + " % " + e + ");");
        line(d, r + " /= " + e + ";");
      }
    }
  }

  std::string product(const std::vector<const KLoop*>& loops) const {
    std::string s = "(i64)1";
    for (const KLoop* l : loops) s += " * (" + ix(*l->extent) + ")";
    return s;
  }
  static std::vector<const KLoop*> loop_ptrs(const std::vector<KLoop>& loops, size_t begin,
                                             size_t end) {
    std::vector<const KLoop*> out;
    for (size_t k = begin; k < end && k < loops.size(); ++k) out.push_back(&loops[k]);
    return out;
  }

  std::string store() const {
    std::vector<IndexExprPtr> idx;
    for (const KLoop& l : sched_.loops) idx.push_back(ix_var(l.var));
    const std::string at = offset("out", idx);
    std::string s = "out[" + at + "] = " + v(sched_.body.result) + ";";
    for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
      s += " " + extra_out(k) + "[" + at + "] = " + v(ir_.extra_outputs[k].value) + ";";
    return s;
  }

  // The name of extra output `k` (codegen/output_merging.h): out1, out2, ...
  static std::string extra_out(size_t k) { return "out" + std::to_string(k + 1); }

  // A functor combining two accumulators of Reduce `st` (for mj_block_reduce).
  void reduce_functor(const KStmt& st) {
    const DType at = acc_dtype(ReduceOp(st.op), st.dtype);
    const std::string A = ctype(at);
    out_ += "struct mj_op" + std::to_string(st.id) + " { __device__ __forceinline__ " + A +
            " operator()(" + A + " x, " + A + " y) const { return " +
            combine(ReduceOp(st.op), at, "x", "y") + "; } };\n";
  }

  // Level -1 statements before statement `upto`: computed once per thread; a reduction over
  // everything is read from the device variable its own kernels wrote.
  void prologue(size_t upto, int d) {
    for (size_t s = 0; s < upto && s < sched_.body.stmts.size(); ++s) {
      if (levels_[s] >= 0) continue;
      const KStmt& st = sched_.body.stmts[s];
      if (st.kind == KOp::Reduce) {
        dtypes_[st.id] = st.dtype;
        line(d, "const " + ctype(st.dtype) + " " + v(st.id) + " = (" + ctype(st.dtype) + ")mj_g" +
                    std::to_string(st.id) + ";");
      } else {
        stmt(st, d);
      }
    }
  }

  // `acc` accumulates Reduce `st`'s body over its iterations first, first+step, ...: the
  // cooperative part of a block or grid reduction.
  void strided_reduce(const KStmt& st, const std::string& acc, const std::string& first,
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

  // ---- map kernels ----

  void map_kernels() {
    const int k = int(sched_.loops.size());
    for (const KStmt& st : sched_.body.stmts)
      if (st.kind == KOp::Reduce) reduce_functor(st);
    std::vector<size_t> globals, cooperative;
    int row_level = -1;
    for (size_t s = 0; s < sched_.body.stmts.size(); ++s) {
      if (sched_.body.stmts[s].kind != KOp::Reduce) continue;
      if (levels_[s] < 0) {
        globals.push_back(s);
      } else {
        cooperative.push_back(s);
        row_level = std::max(row_level, levels_[s]);
      }
    }
    for (size_t s : globals) global_reduce_kernels(s);
    generic_kernel();
    const std::optional<std::vector<std::string>> vec4 = vec4_same_dims();
    if (vec4) vec4_kernel();
    std::optional<Contraction> mm = find_contraction(sched_, levels_, level_of_value_);
    if (mm) contraction_kernels(*mm);
    const bool column = !mm && cooperative.size() == 1 && row_level == k - 1 &&
                        is_column_reduction(sched_.body.stmts[cooperative[0]], level_of_value_,
                                            sched_.loops[size_t(k - 1)].var, k - 1);
    if (column) column_kernels(cooperative[0]);
    if (!cooperative.empty() && !mm) row_kernel(row_level);
    launcher(globals, cooperative, row_level, mm, column, vec4);
  }

  static bool is_word(DType t) { return t == DType::Float32 || t == DType::Int32; }

  // An element-wise kernel whose every per-element load and its store walk the same contiguous
  // run of 4-byte values can move 16 bytes per access (float4/int4). One value per access does
  // not keep enough bytes in flight: on an H200 a SELU over 2^28 floats ran at 0.74 of a device
  // copy that way and at 1.00 with 16-byte accesses; unrolling the scalar loop changed nothing.
  // Nothing when the kernel is not such; else the conditions on dims only the launch can check
  // (see walks_the_loops()).
  std::optional<std::vector<std::string>> vec4_same_dims() const {
    std::vector<std::string> same;
    if (!is_word(ir_.output.dtype) || !walks_the_loops({}, ir_.output, &same)) return {};
    for (const KOutput& o : ir_.extra_outputs)
      if (!is_word(o.buffer.dtype)) return {};
    for (size_t s = 0; s < sched_.body.stmts.size(); ++s) {
      const KStmt& st = sched_.body.stmts[s];
      switch (st.kind) {
        case KOp::Load: {
          if (levels_[s] < 0) break;  // read once per thread, in the prologue
          const KBuffer& in = ir_.inputs[size_t(st.buffer)];
          if (!is_word(in.dtype) || !walks_the_loops(st.index, in, &same)) return {};
          break;
        }
        case KOp::Scalar:
        case KOp::Iota:
        case KOp::Unary:
        case KOp::Binary:
        case KOp::Where:
        case KOp::Cast:
          break;
        default:
          return {};
      }
    }
    return same;
  }

  // Whether buffer `b` read at `index` (empty: the output's own index) is visited in the
  // order of the flat loop index: the loop variables in order, over dims equal to the loops'
  // extents, so that its offset is the flat index itself. Dims are parameters of their own
  // (keys never hold shapes): where a dim is not the extent's own parameter, `same` gets the
  // condition the launcher checks (same_dim()).
  bool walks_the_loops(const std::vector<IndexExprPtr>& index, const KBuffer& b,
                       std::vector<std::string>* same) const {
    const size_t n = sched_.loops.size();
    if (n == 0 || b.dims.size() != n || (!index.empty() && index.size() != n)) return false;
    for (size_t k = 0; k < n; ++k) {
      if (!index.empty() &&
          (index[k]->kind != IxKind::Var || index[k]->value != sched_.loops[k].var))
        return false;
      same_dim(*b.dims[k], *sched_.loops[k].extent, same);
    }
    return true;
  }

  // A dim and a loop extent (a parameter or a constant, lowering.cc) that are not the same
  // expression must be equal at run time: `conds` gets that check.
  void same_dim(const IndexExpr& dim, const IndexExpr& extent,
                std::vector<std::string>* conds) const {
    if (ix_to_string(dim) != ix_to_string(extent))
      conds->push_back("(" + ix(dim) + ") == (" + ix(extent) + ")");
  }

  // The buffers vec4_kernel() reads as vectors.
  std::set<int> vec4_buffers() const {
    std::set<int> out;
    for (size_t s = 0; s < sched_.body.stmts.size(); ++s)
      if (sched_.body.stmts[s].kind == KOp::Load && levels_[s] >= 0)
        out.insert(sched_.body.stmts[s].buffer);
    return out;
  }

  // Four elements per thread and access: vector loads, the body once per lane (unrolled), one
  // vector store; the last n % 4 elements one per thread. The launcher picks it when every
  // vector access is 16-byte aligned.
  void vec4_kernel() {
    kernel_open("mj_vec4");
    prologue(sched_.body.stmts.size(), 1);
    const std::vector<const KLoop*> loops = loop_ptrs(sched_.loops, 0, sched_.loops.size());
    const std::string O = ctype(ir_.output.dtype);
    line(1, "const i64 mj_n = " + product(loops) + ";");
    line(1, "const unsigned mj_n4 = (unsigned)(mj_n / 4);");
    line(1,
         "for (unsigned mj_q = blockIdx.x * blockDim.x + threadIdx.x; mj_q < mj_n4; mj_q += "
         "gridDim.x * blockDim.x) {");
    for (int b : vec4_buffers()) {
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

  // Loads of vec4_kernel()'s lane loop read their lane of a vector loaded before it.
  void stmt(const KStmt& st, int depth) override {
    auto it = st.kind == KOp::Load ? lane_loads_.find(st.buffer) : lane_loads_.end();
    if (it == lane_loads_.end()) return CFamilyEmitter::stmt(st, depth);
    dtypes_[st.id] = st.dtype;
    line(depth, "const " + ctype(st.dtype) + " " + v(st.id) + " = " + it->second + ";");
  }

  // A reduction over everything: per-block partials, then one block combines them into the
  // device variable mj_g<id> that later kernels read.
  void global_reduce_kernels(size_t s) {
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

  // One thread per output element, every reduction run by that thread: correct for any map
  // kernel, the fastest for element-wise work; 32- and 64-bit index variants.
  void generic_kernel() {
    out_ +=
        "\ntemplate <class I> __device__ __forceinline__ void mj_map_body(const mj_args& a) {\n";
    kernel_body_open();
    prologue(sched_.body.stmts.size(), 1);
    const std::vector<const KLoop*> loops = loop_ptrs(sched_.loops, 0, sched_.loops.size());
    line(1, "const I mj_n = (I)(" + product(loops) + ");");
    line(
        1,
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

  // Names the kernel's arguments as the C++ emitter does (p<k>, S, in<k> with strides, out);
  // `a` is the mj_args of the launch.
  void kernel_body_open() {
    for (int k = 0; k < ir_.num_params; ++k)
      line(1, "const i64 p" + std::to_string(k) + " = a.p[" + std::to_string(k) + "];");
    line(1, "const double* S = a.s;");
    line(1, "(void)S;");
    for (size_t k = 0; k < ir_.inputs.size(); ++k) {
      const std::string name_k = "in" + std::to_string(k), t = ctype(ir_.inputs[k].dtype);
      line(1, "const " + t + "* __restrict__ " + name_k + " = a." + name_k + ";");
      strides(name_k, ir_.inputs[k]);
    }
    line(1, ctype(ir_.output.dtype) + "* __restrict__ out = a.out;");
    strides("out", ir_.output);
    for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)  // the output's extents and strides
      line(1, ctype(ir_.extra_outputs[k].buffer.dtype) + "* __restrict__ " + extra_out(k) +
                  " = a." + extra_out(k) + ";");
  }

  // One block per row (the output loops 0..row_level): the row's reductions are block
  // reductions, its outputs (loops row_level+1..) are shared by the block's threads.
  void row_kernel(int row_level) {
    const int k = int(sched_.loops.size());
    kernel_open("mj_rows");
    prologue(sched_.body.stmts.size(), 1);
    const std::vector<const KLoop*> outer = loop_ptrs(sched_.loops, 0, size_t(row_level) + 1);
    const std::vector<const KLoop*> inner =
        loop_ptrs(sched_.loops, size_t(row_level) + 1, size_t(k));
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
      std::vector<std::string> conds;
      if (row_vec4_eligible(st, &conds))
        row_reduce_vec4(st, "mj_acc" + id, conds, 2);
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

  // A row reduction over one axis whose every read walks that axis contiguously (the axis is
  // its last index, over a last dim equal to the axis' extent) can read 16 bytes at a time, as
  // element-wise kernels do (vec4_kernel): one 4-byte load per thread and step kept a row sum
  // of 16384^2 floats at 0.56 of a device copy on an H200, where 16-byte loads reached 1.04 in a
  // hand-written probe. `conds` gets what only the launch can check: the dims, the row length a
  // multiple of 4 and 16-byte aligned rows.
  bool row_vec4_eligible(const KStmt& st, std::vector<std::string>* conds) const {
    if (st.loops.size() != 1 || !st.body) return false;
    const int r = st.loops[0].var;
    const IndexExpr& extent = *st.loops[0].extent;
    std::map<int, std::string> index_of;  // buffer -> its index, which must be one
    for (const KStmt& b : st.body->stmts) {
      if (b.kind == KOp::Reduce || b.kind == KOp::Guard) return false;
      if (b.kind != KOp::Load) continue;
      const KBuffer& in = ir_.inputs[size_t(b.buffer)];
      if (!is_word(in.dtype) || b.index.empty() || b.index.size() != in.dims.size()) return false;
      const IndexExpr& last = *b.index.back();
      if (last.kind != IxKind::Var || last.value != r) return false;
      std::string key;
      for (size_t k = 0; k + 1 < b.index.size(); ++k) {
        if (ix_reads_var(*b.index[k], r)) return false;
        key += ix_to_string(*b.index[k]) + ";";
      }
      auto [it, fresh] = index_of.emplace(b.buffer, key);
      if (!fresh && it->second != key) return false;
      if (!fresh) continue;
      same_dim(*in.dims.back(), extent, conds);
      conds->push_back("((unsigned long long)in" + std::to_string(b.buffer) + " & 15) == 0");
    }
    if (index_of.empty()) return false;
    conds->push_back("(" + ix(extent) + ") % 4 == 0");
    return true;
  }

  // strided_reduce() over a block's threads with 16-byte loads where `conds` hold at run time
  // (the same for every thread of the block: no divergence), else as strided_reduce().
  void row_reduce_vec4(const KStmt& st, const std::string& acc,
                       const std::vector<std::string>& conds, int d) {
    const ReduceOp op = ReduceOp(st.op);
    const DType at = acc_dtype(op, st.dtype);
    const std::string i = "i" + std::to_string(st.loops[0].var);
    std::string all;
    for (const std::string& c : conds) all += (all.empty() ? "" : " && ") + c;
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
  void column_kernels(size_t r) {
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
                combine(op, at, "mj_acc", "mj_cpart" + id + "[(i64)s * mj_on * mj_c + mj_e]") +
                ";");
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

  // Matrix products: a BM x BN tile of outputs (loops i, j) per block, the reduction in steps
  // of 8 staged through shared memory, TM x TN outputs per thread in registers; then the rest
  // of the kernel (bias, activation...) on each finished output.
  void contraction_kernels(const Contraction& c) {
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
  void stage_operand(const std::string& count, const std::string& split, const std::string& inside,
                     const std::string& var, const std::string& var_value,
                     const std::vector<const KLoop*>& red, const KBlock& body,
                     const std::vector<size_t>& outer, const std::vector<size_t>& stmts, int value,
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

  // The host launcher: fills mj_args, launches the reductions over everything, then picks the
  // main kernel from the shapes of this launch.
  void launcher(const std::vector<size_t>& globals, const std::vector<size_t>& cooperative,
                int row_level, const std::optional<Contraction>& mm, bool column,
                const std::optional<std::vector<std::string>>& vec4) {
    const int k = int(sched_.loops.size());
    launcher_open();
    const std::string T = std::to_string(kThreads);
    for (size_t s : globals) {
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
    const std::vector<const KLoop*> all = loop_ptrs(sched_.loops, 0, size_t(k));
    line(1, "const i64 mj_n = " + product(all) + ";");
    line(1, "if (mj_n <= 0) return;");
    if (mm) {
      const ContractionLoops cl = contraction_loops(sched_, *mm);
      const std::string ei = ix(*cl.i->extent), ej = ix(*cl.j->extent);
      const KStmt& r = sched_.body.stmts[mm->reduce_index];
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
    if (column) {
      const KStmt& st = sched_.body.stmts[cooperative[0]];
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
    if (!cooperative.empty() && !mm) {
      // Block reductions pay off once a row has a warp's worth of work.
      line(1, "{");
      line(2, "i64 mj_rmax = 0;");
      for (size_t s : cooperative) {
        const KStmt& st = sched_.body.stmts[s];
        line(2, "mj_rmax = mj_max(mj_rmax, " + product(loop_ptrs(st.loops, 0, st.loops.size())) +
                    ");");
      }
      const std::vector<const KLoop*> outer = loop_ptrs(sched_.loops, 0, size_t(row_level) + 1);
      line(2, "if (mj_rmax >= 32) {");
      line(3, "const i64 mj_rows_n = " + product(outer) + ";");
      line(3, "const i64 mj_w = mj_max(mj_rmax, mj_n / mj_rows_n);");
      line(3, "const int mj_t = mj_w >= 256 ? 256 : (mj_w >= 128 ? 128 : (mj_w >= 64 ? 64 : 32));");
      line(3, "MJ_LAUNCH(mj_rows, dim3(mj_blocks(mj_rows_n, 1, 1u << 20)), dim3(mj_t), a);");
      line(3, "return;");
      line(2, "}");
      line(1, "}");
    }
    if (vec4) {
      std::string aligned = "(unsigned long long)a.out";
      for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
        aligned += " | (unsigned long long)a." + extra_out(k);
      for (int b : vec4_buffers()) aligned += " | (unsigned long long)a.in" + std::to_string(b);
      std::string same;
      for (const std::string& c : *vec4) same += " && " + c;
      line(1,
           "if (mj_n >= 4 && mj_n < 2147483647LL && ((" + aligned + ") & 15) == 0" + same + ") {");
      line(2,
           "MJ_LAUNCH(mj_vec4, dim3(mj_blocks(mj_n / 4, " + T + ", 65536)), dim3(" + T + "), a);");
      line(2, "return;");
      line(1, "}");
    }
    line(1, "if (mj_n < 2147483647LL) MJ_LAUNCH(mj_map32, dim3(mj_blocks(mj_n, " + T +
                ", 65536)), dim3(" + T + "), a);");
    line(1,
         "else MJ_LAUNCH(mj_map64, dim3(mj_blocks(mj_n, " + T + ", 65536)), dim3(" + T + "), a);");
    out_ += "}\n";
  }

  void launcher_open() {
    out_ +=
        "\nextern \"C\" void metajit_kernel(void* const* B, const long long* P, const double* S) "
        "{\n";
    line(1, "mj_args a;");
    for (size_t k = 0; k < ir_.inputs.size(); ++k)
      line(1, "a.in" + std::to_string(k) + " = (const " + ctype(ir_.inputs[k].dtype) + "*)B[" +
                  std::to_string(k) + "];");
    line(1,
         "a.out = (" + ctype(ir_.output.dtype) + "*)B[" + std::to_string(ir_.inputs.size()) + "];");
    for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
      line(1, "a." + extra_out(k) + " = (" + ctype(ir_.extra_outputs[k].buffer.dtype) + "*)B[" +
                  std::to_string(ir_.inputs.size() + 1 + k) + "];");
    for (int k = 0; k < ir_.num_params; ++k)
      line(1, "const i64 p" + std::to_string(k) + " = a.p[" + std::to_string(k) + "] = P[" +
                  std::to_string(k) + "];");
    for (int k = 0; k < ir_.num_scalars; ++k)
      line(1, "a.s[" + std::to_string(k) + "] = S[" + std::to_string(k) + "];");
    line(1, "(void)P;");
    line(1, "(void)S;");
  }

  // ---- reindex_reduce ----

  // `*t = op(*t, x)` atomically: atomicAdd where CUDA has it, else a compare-and-swap loop (on
  // the containing aligned 32-bit word for 1-byte bools).
  void atomic_combine() {
    const ReduceOp op = ReduceOp(ir_.scatter_op);
    const DType t = ir_.output.dtype;
    const std::string T = ctype(t);
    out_ += "\n__device__ __forceinline__ void mj_atomic_combine(" + T + "* t, " + T + " x) {\n";
    const bool add = op == ReduceOp::Add || op == ReduceOp::Mean;
    if (add && (t == DType::Float32 || t == DType::Float64 || t == DType::Int32)) {
      line(1, "atomicAdd(t, x);");
    } else if (add && t == DType::Int64) {
      line(1, "atomicAdd((unsigned long long*)t, (unsigned long long)x);");
    } else if (t == DType::Bool) {
      line(1, "unsigned* w = (unsigned*)((u64)t & ~(u64)3);");
      line(1, "const unsigned sh = (unsigned)((u64)t & 3) * 8;");
      line(1, "unsigned old = *w, seen;");
      line(1, "do {");
      line(2, "seen = old;");
      line(2, "const bool cur = ((seen >> sh) & 0xffu) != 0;");
      line(2, "const bool nv = " + combine(op, t, "cur", "x") + ";");
      line(2, "const unsigned nw = (seen & ~(0xffu << sh)) | ((unsigned)nv << sh);");
      line(2, "if (nw == seen) return;");
      line(2, "old = atomicCAS(w, seen, nw);");
      line(1, "} while (old != seen);");
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

  void scatter_kernels() {
    const ReduceOp op = ReduceOp(ir_.scatter_op);
    atomic_combine();
    std::string n = "(i64)1";
    for (const auto& d : ir_.output.dims) n += " * (" + ix(*d) + ")";
    kernel_open("mj_fill");
    line(1, "const i64 mj_on = " + n + ";");
    line(1,
         "for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < mj_on; j += "
         "(i64)gridDim.x * blockDim.x) out[j] = " +
             identity(op, ir_.output.dtype) + ";");
    out_ += "}\n";
    kernel_open("mj_scatter");
    const std::vector<const KLoop*> loops = loop_ptrs(ir_.loops, 0, ir_.loops.size());
    line(1, "const i64 mj_n = " + product(loops) + ";");
    line(1,
         "for (i64 mj_q = (i64)blockIdx.x * blockDim.x + threadIdx.x; mj_q < mj_n; mj_q += "
         "(i64)gridDim.x * blockDim.x) {");
    decompose(loops, "mj_q", 2);
    block(ir_.body, 2);
    line(2, "if (" + ix(*ir_.target_valid) + ") mj_atomic_combine(&out[" +
                offset("out", ir_.target) + "], " + v(ir_.body.result) + ");");
    line(1, "}");
    out_ += "}\n";
    launcher_open();
    const std::string T = std::to_string(kThreads);
    line(1, "const i64 mj_on = " + n + ", mj_n = " + product(loops) + ";");
    line(1, "if (mj_on <= 0) return;");
    line(1, "MJ_LAUNCH(mj_fill, dim3(mj_blocks(mj_on, " + T + ", 65536)), dim3(" + T + "), a);");
    line(1, "if (mj_n > 0) MJ_LAUNCH(mj_scatter, dim3(mj_blocks(mj_n, " + T + ", 65536)), dim3(" +
                T + "), a);");
    out_ += "}\n";
  }

  CudaTarget target_;
  KernelIR sched_;  // the scheduled copy: invariants hoisted out of reductions
  std::vector<int> levels_, level_of_value_;
  std::map<int, std::string> lane_loads_;  // buffer -> its lane inside vec4_kernel()
  int uid_ = 0;
};

}  // namespace

std::string emit_cuda(const KernelIR& ir, CudaTarget target) {
  return CudaEmitter(ir, target).run();
}

}  // namespace metajit
