// The CUDA emitter's frame: the module's argument struct, each kernel's named arguments, flat
// indices decomposed into loop variables, the host launcher's opening (the class in
// codegen/cuda_emitter_internal.h).
#include "codegen/cuda_emitter.h"

#include <metajit/error.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/log.h"
#include "codegen/cuda_emitter_internal.h"
#include "codegen/cuda_emulation.h"

namespace metajit {

std::string CudaEmitter::run() {
  const bool narrow = uses_narrow_types(ir_);
  out_ = "// metajit generated CUDA kernel: ";
  for (size_t k = 0; k < ir_.ops.size(); ++k) out_ += (k ? ", " : "") + ir_.ops[k];
  out_ += "\n";
  // The CUDA toolkit's half types on a GPU: the toolkit's own headers, which the kernel key
  // covers through the toolchain's identity (runtime/cuda_toolchain.cc), not a project file.
  if (narrow && target_ == CudaTarget::Gpu)
    out_ += "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n";
  out_ += target_ == CudaTarget::Gpu ? kCudaGpuPrelude : kCudaEmulationPrelude;
  out_ += integer_prelude("MJ_HD");
  out_ += extra_readers();
  out_ += kCudaCommonPrelude;
  if (narrow) out_ += kCudaNarrowPrelude;
  args_struct();
  // The schedule pass decided (codegen/cuda_schedule.h); the rest of this class prints.
  if (log_enabled(LogLevel::Debug)) log_message(LogLevel::Debug, dump_cuda_schedule(schedule_));
  if (ir_.kind == KernelKind::Scatter)
    scatter_kernels();
  else
    map_kernels();
  return out_;
}

// ---- pieces every kernel has ----

void CudaEmitter::args_struct() {
  out_ += "\nstruct mj_args {\n";
  for (size_t k = 0; k < ir_.inputs.size(); ++k)
    line(1, "const " + element_ctype(ir_.inputs[k].dtype) + "* in" + std::to_string(k) + ";");
  line(1, element_ctype(ir_.output.dtype) + "* out;");
  for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
    line(1, element_ctype(ir_.extra_outputs[k].buffer.dtype) + "* " + extra_out(k) + ";");
  line(1, "i64 p[" + std::to_string(std::max(ir_.num_params, 1)) + "];");
  line(1, "double s[" + std::to_string(std::max(ir_.num_scalars, 1)) + "];");
  out_ += "};\n";
}

// Opens `__global__ void name(const mj_args a<extra>)` and names its arguments as the C++
// emitter does (p<k>, S, in<k> with strides, out).
void CudaEmitter::kernel_open(const std::string& name, const std::string& extra) {
  out_ += "\n__global__ void __launch_bounds__(" + std::to_string(kThreads) + ") " + name +
          "(const mj_args a" + extra + ") {\n";
  kernel_body_open();
}

// Sets the loop variables of `loops` (row-major: the last runs fastest) from the flat index
// `flat` in [0, product of their extents).
void CudaEmitter::decompose(const std::vector<const KLoop*>& loops, const std::string& flat, int d,
                            const std::string& type) {
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

std::string CudaEmitter::product(const std::vector<const KLoop*>& loops) const {
  std::string s = "(i64)1";
  for (const KLoop* l : loops) s += " * (" + ix(*l->extent) + ")";
  return s;
}

std::vector<const KLoop*> CudaEmitter::loop_ptrs(const std::vector<KLoop>& loops, size_t begin,
                                                 size_t end) {
  std::vector<const KLoop*> out;
  for (size_t k = begin; k < end && k < loops.size(); ++k) out.push_back(&loops[k]);
  return out;
}

std::string CudaEmitter::store() const {
  std::vector<IndexExprPtr> idx;
  for (const KLoop& l : sched_.loops) idx.push_back(ix_var(l.var));
  const std::string at = offset("out", idx);
  std::string s = "out[" + at + "] = " + stored(ir_.output.dtype, v(sched_.body.result)) + ";";
  for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
    s += " " + extra_out(k) + "[" + at +
         "] = " + stored(ir_.extra_outputs[k].buffer.dtype, v(ir_.extra_outputs[k].value)) + ";";
  return s;
}

std::string CudaEmitter::element_ctype(DType t) {
  if (t == DType::Float16) return "__half";
  if (t == DType::BFloat16) return "__nv_bfloat16";
  return ctype(t);
}

std::string CudaEmitter::loaded(DType t, const std::string& element) {
  if (t == DType::Float16) return "__half2float(" + element + ")";
  if (t == DType::BFloat16) return "__bfloat162float(" + element + ")";
  return element;
}

std::string CudaEmitter::stored(DType t, const std::string& value) {
  if (t == DType::Float16) return "__float2half_rn(" + value + ")";
  if (t == DType::BFloat16) return "__float2bfloat16_rn(" + value + ")";
  return value;
}

// Level -1 statements before statement `upto`: computed once per thread; a reduction over
// everything is read from the device variable its own kernels wrote.
void CudaEmitter::prologue(size_t upto, int d) {
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

// The launch-time conditions of a 16-byte path: each dim equal to its loop extent.
std::string CudaEmitter::same_dims(const std::vector<SameDim>& same) const {
  std::string out;
  for (const SameDim& d : same) out += " && (" + ix(*d.dim) + ") == (" + ix(*d.extent) + ")";
  return out;
}

// Loads of vec4_kernel()'s lane loop read their lane of a vector loaded before it; loads of a
// half buffer convert its element to float.
void CudaEmitter::stmt(const KStmt& st, int depth) {
  if (st.kind != KOp::Load) return CFamilyEmitter::stmt(st, depth);
  const std::string T = ctype(st.dtype), in = "in" + std::to_string(st.buffer);
  auto it = lane_loads_.find(st.buffer);
  const DType t = ir_.inputs[size_t(st.buffer)].dtype;
  if (it == lane_loads_.end() && !is_half(t)) return CFamilyEmitter::stmt(st, depth);
  dtypes_[st.id] = st.dtype;
  const std::string value =
      it != lane_loads_.end() ? it->second : loaded(t, in + "[" + offset(in, st.index) + "]");
  line(depth, "const " + T + " " + v(st.id) + " = " + value + ";");
}

// Names the kernel's arguments as the C++ emitter does (p<k>, S, in<k> with strides, out);
// `a` is the mj_args of the launch.
void CudaEmitter::kernel_body_open() {
  for (int k = 0; k < ir_.num_params; ++k)
    line(1, "const i64 p" + std::to_string(k) + " = a.p[" + std::to_string(k) + "];");
  line(1, "const double* S = a.s;");
  line(1, "(void)S;");
  for (size_t k = 0; k < ir_.inputs.size(); ++k) {
    const std::string name_k = "in" + std::to_string(k), t = element_ctype(ir_.inputs[k].dtype);
    line(1, "const " + t + "* __restrict__ " + name_k + " = a." + name_k + ";");
    strides(name_k, ir_.inputs[k]);
  }
  line(1, element_ctype(ir_.output.dtype) + "* __restrict__ out = a.out;");
  strides("out", ir_.output);
  for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)  // the output's extents and strides
    line(1, element_ctype(ir_.extra_outputs[k].buffer.dtype) + "* __restrict__ " + extra_out(k) +
                " = a." + extra_out(k) + ";");
}

void CudaEmitter::launcher_open() {
  out_ +=
      "\nextern \"C\" void metajit_kernel(void* const* B, const long long* P, const double* S) "
      "{\n";
  line(1, "mj_args a;");
  for (size_t k = 0; k < ir_.inputs.size(); ++k)
    line(1, "a.in" + std::to_string(k) + " = (const " + element_ctype(ir_.inputs[k].dtype) +
                "*)B[" + std::to_string(k) + "];");
  line(1, "a.out = (" + element_ctype(ir_.output.dtype) + "*)B[" +
              std::to_string(ir_.inputs.size()) + "];");
  for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
    line(1, "a." + extra_out(k) + " = (" + element_ctype(ir_.extra_outputs[k].buffer.dtype) +
                "*)B[" + std::to_string(ir_.inputs.size() + 1 + k) + "];");
  for (int k = 0; k < ir_.num_params; ++k)
    line(1, "const i64 p" + std::to_string(k) + " = a.p[" + std::to_string(k) + "] = P[" +
                std::to_string(k) + "];");
  for (int k = 0; k < ir_.num_scalars; ++k)
    line(1, "a.s[" + std::to_string(k) + "] = S[" + std::to_string(k) + "];");
  line(1, "(void)P;");
  line(1, "(void)S;");
}

std::string emit_cuda(const KernelIR& ir, CudaTarget target) {
  return CudaEmitter(ir, target).run();
}

}  // namespace metajit
