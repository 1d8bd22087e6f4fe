// The C++ emitter's frame: the kernel's arguments, strides and scalar locals, single statements
// (a data-dependent gather as a speculative load), and index-expression helpers the construct
// files share (codegen/cpp_emitter_internal.h).
#include "codegen/cpp_emitter.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "base/log.h"
#include "codegen/cpp_emitter_internal.h"
#include "codegen/cpp_preludes.h"

namespace metajit {

std::string CppEmitter::run() {
  out_ = "// metajit generated kernel: ";
  for (size_t k = 0; k < ir_.ops.size(); ++k) out_ += (k ? ", " : "") + ir_.ops[k];
  out_ += "\n// target: " + target_.describe() + "\n";
  out_ += integer_prelude("static inline");
  out_ += extra_readers();
  out_ += kCppKernelPrelude;
  if (uses_narrow_types(ir_)) out_ += kCppNarrowPrelude;
  const size_t kernel_start = out_.size();
  out_ +=
      "\nextern \"C\" void metajit_kernel(void* const* B, const long long* P, const double* S) "
      "{\n";
  collect_scalars(ir_.body);
  frame_locals(true);
  // The schedule pass decides (codegen/cpu_schedule.h); the rest of this class prints.
  sched_ = schedule_cpu_kernel(ir_, target_);
  if (log_enabled(LogLevel::Debug)) log_message(LogLevel::Debug, dump_schedule(sched_, target_));
  schedule_ = describe_schedule(sched_, target_);
  if (ir_.kind == KernelKind::Map)
    map_kernel();
  else
    scatter_kernel();
  out_ += "}\n";
  // Functions the schedule asked for (the contraction micro-kernel) go before the kernel.
  out_.insert(kernel_start, helpers_);
  if (!schedule_.empty()) out_.insert(out_.find('\n') + 1, "// schedule: " + schedule_ + "\n");
  return out_;
}

// The kernel's arguments as locals: parameters, scalars, inputs with their strides, and with
// `outputs` the outputs (a contraction's packing functions read only the inputs).
void CppEmitter::frame_locals(bool outputs) {
  for (int k = 0; k < ir_.num_params; ++k)
    line(1, "const i64 p" + std::to_string(k) + " = P[" + std::to_string(k) + "];");
  if (ir_.num_params == 0) line(1, "(void)P;");
  if (ir_.num_scalars == 0) line(1, "(void)S;");
  // Every scalar argument converted once, into a named local: a scalar read from S on one
  // side of a branch (reindex's overflow value) kept the loop around it from vectorising
  // (S may alias the output; conv2d's packing loop, measured).
  for (const auto& [slot, t] : scalar_locals_) {
    const std::string s = "S[" + std::to_string(slot) + "]";
    line(1, "const " + ctype(t) + " " + scalar_local(slot, t) + " = " +
                (t == DType::Bool ? "(" + s + " != 0)"
                 : is_half(t)     ? cast_expr(t, DType::Float64, s)
                                  : "(" + ctype(t) + ")" + s) +
                ";");
  }
  for (size_t k = 0; k < ir_.inputs.size(); ++k) {
    std::string name = "in" + std::to_string(k);
    std::string t = storage_ctype(ir_.inputs[k].dtype);
    line(1, "const " + t + "* __restrict__ " + name + " = (const " + t + "*)B[" +
                std::to_string(k) + "];");
    strides(name, ir_.inputs[k]);
  }
  // Buffers read by speculative loads (stmt()): element 0 must exist even when the buffer is
  // empty, where every guard fails and a zero stands in.
  std::set<int> speculative;
  speculative_buffers(ir_.body, speculative);
  for (int k : speculative) {
    const DType dt = ir_.inputs[size_t(k)].dtype;
    const std::string name = "in" + std::to_string(k), t = storage_ctype(dt);
    std::string n = "1LL";
    for (const IndexExprPtr& d : ir_.inputs[size_t(k)].dims) n += " * " + ix(*d);
    line(1, "static const " + t + " " + name + (is_half(dt) ? "_zero = {};" : "_zero = 0;"));
    line(1, "const " + t + "* const " + name + "_any = " + n + " > 0 ? " + name + " : &" + name +
                "_zero;");
  }
  if (!outputs) return;
  std::string ot = storage_ctype(ir_.output.dtype);
  line(1, ot + "* __restrict__ out = (" + ot + "*)B[" + std::to_string(ir_.inputs.size()) + "];");
  strides("out", ir_.output);
  for (size_t k = 0; k < ir_.extra_outputs.size(); ++k) {  // same extents: out's strides
    const std::string t = storage_ctype(ir_.extra_outputs[k].buffer.dtype);
    line(1, t + "* __restrict__ out" + std::to_string(k + 1) + " = (" + t + "*)B[" +
                std::to_string(ir_.inputs.size() + 1 + k) + "];");
  }
}

// The (slot, dtype) of every scalar argument `b` reads, recursively.
void CppEmitter::collect_scalars(const KBlock& b) {
  for (const KStmt& st : b.stmts) {
    if (st.kind == KOp::Scalar || st.kind == KOp::Guard) scalar_locals_.insert({st.slot, st.dtype});
    if (st.body) collect_scalars(*st.body);
  }
}

// One statement. A row's value that the innermost loop reads back from a reused row
// (codegen/map_schedule.h RowReuse) is a load from that row.
void CppEmitter::stmt(const KStmt& st, int depth) {
  if (row_reuse_ && row_reuse_->outer_value == st.id) {
    dtypes_[st.id] = st.dtype;
    line(depth, "const " + ctype(st.dtype) + " " + v(st.id) + " = mj_row[i" +
                    std::to_string(row_reuse_->inner_var) + "];");
    return;
  }
  if (auto w = widened_loads_.find(st.id); w != widened_loads_.end()) {
    dtypes_[st.id] = st.dtype;
    line(depth, "const float " + v(st.id) + " = " + w->second + ";");
    return;
  }
  if (const KStmt* load = speculative_load(st)) {
    // A data-dependent gather: load unconditionally (at offset 0 where the guard fails) and
    // select, so that the SIMD loop is one gather instruction and a blend. The branch kept
    // GCC from vectorising it (gather dim 1 4096x1024: 4x the time of a plain loop, measured).
    const std::string T = ctype(st.dtype), ok = "mj_ok" + std::to_string(st.id);
    const std::string name = "in" + std::to_string(load->buffer);
    dtypes_[load->id] = load->dtype;
    dtypes_[st.id] = st.dtype;
    std::string test = ix(*st.cond);
    if (auto it = guard_tests_.find(st.id); it != guard_tests_.end())
      test =
          it->second.second ? it->second.first + " && " + ix(*it->second.second) : it->second.first;
    line(depth, "const bool " + ok + " = " + test + ";");
    line(depth, "const " + T + " " + v(load->id) + " = " + name + "_any[" + ok + " ? (" +
                    offset(name, load->index) + ") : 0];");
    line(depth, "const " + T + " " + v(st.id) + " = " + ok + " ? " + v(load->id) + " : " +
                    scalar_arg(st.dtype, st.slot) + ";");
    return;
  }
  CFamilyEmitter::stmt(st, depth);
}

// A reindex guard whose test reads extras and whose value is one load of its own dtype: it
// is emitted as a load at a clamped offset and a select (stmt() above), or nullptr.
const KStmt* CppEmitter::speculative_load(const KStmt& st) {
  if (st.kind != KOp::Guard || !ix_reads_extras(*st.cond) || st.body->stmts.size() != 1)
    return nullptr;
  const KStmt& load = st.body->stmts[0];
  if (load.kind != KOp::Load || load.id != st.body->result || load.dtype != st.dtype)
    return nullptr;
  return &load;
}

void CppEmitter::speculative_buffers(const KBlock& b, std::set<int>& out) {
  for (const KStmt& st : b.stmts) {
    if (const KStmt* load = speculative_load(st)) out.insert(load->buffer);
    if (st.body) speculative_buffers(*st.body, out);
  }
}

// Product of loop extents, as an expression: the iterations of a nest (tiny kernels stay
// single-threaded) or the extent of a reduction.
std::string CppEmitter::work(const std::vector<KLoop>& loops) {
  std::string s = "1LL";
  for (const KLoop& l : loops) s += " * " + ix(*l.extent);
  return s;
}

// The statement storing a map's output element at `idx`, and its extra outputs' there; in a
// float16 strip (`half`), the outputs it narrows go to element t of their float arrays
// (mj_n0 the output's, mj_n<k> extra output k-1's: codegen/cpp_half_strips.cc). With
// `one_at_a_time`, a float16 output is rounded by F16C one element at a time (mj_f16_set_one:
// a loop that is not SIMD, CFamilyEmitter::scalar_halves_).
std::string CppEmitter::map_store(const std::vector<IndexExprPtr>& idx, int result,
                                  const HalfStrips* half, bool one_at_a_time) const {
  const std::string at = offset("out", idx);
  auto store = [&](const std::string& k, bool narrowed, int value, DType t) {
    const std::string element = "out" + (k == "0" ? std::string() : k) + "[" + at + "]";
    if (narrowed) return "mj_n" + k + "[t] = " + v(value) + ";";
    if (one_at_a_time && t == DType::Float16)
      return "mj_f16_set_one(" + element + ", " + v(value) + ");";
    return element + " = " + v(value) + ";";
  };
  std::string s = store("0", half && half->output, result, ir_.output.dtype);
  for (size_t e = 0; e < ir_.extra_outputs.size(); ++e) {
    const bool narrowed = half && std::find(half->extra_outputs.begin(), half->extra_outputs.end(),
                                            e) != half->extra_outputs.end();
    s += " " + store(std::to_string(e + 1), narrowed, ir_.extra_outputs[e].value,
                     ir_.extra_outputs[e].buffer.dtype);
  }
  return s;
}

void CppEmitter::collect_vars(const IndexExpr& e, std::set<int>& out) {
  if (e.kind == IxKind::Var) out.insert(int(e.value));
  for (const IndexExprPtr& a : e.args) collect_vars(*a, out);
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c) collect_vars(*c, out);
}

IndexExprPtr CppEmitter::conjunction(const std::vector<IndexExprPtr>& terms) {
  IndexExprPtr all = terms.at(0);
  for (size_t k = 1; k < terms.size(); ++k) all = ix_binary(IxKind::And, all, terms[k]);
  return all;
}

// The conjuncts of `cond` (an && tree) that read neither loop variable `var` nor `var2`, and
// those that do.
void CppEmitter::split_conjuncts(const IndexExprPtr& cond, const std::set<int>& vars,
                                 std::vector<IndexExprPtr>& fixed,
                                 std::vector<IndexExprPtr>& varying) {
  if (cond->kind == IxKind::And) {
    split_conjuncts(cond->a, vars, fixed, varying);
    split_conjuncts(cond->b, vars, fixed, varying);
    return;
  }
  bool uses = false;
  for (int var : vars) uses = uses || ix_reads_var(*cond, var);
  (uses ? varying : fixed).push_back(cond);
}

std::string emit_cpp(const KernelIR& ir, const CpuTarget& target) {
  return CppEmitter(ir, target).run();
}

}  // namespace metajit
