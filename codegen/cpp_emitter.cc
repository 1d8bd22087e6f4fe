#include "codegen/cpp_emitter.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "base/log.h"
#include "codegen/c_family_emitter.h"
#include "codegen/cpp_preludes.h"
#include "codegen/cpu_schedule.h"
#include "codegen/division_chunks.h"
#include "codegen/guard_intervals.h"
#include "codegen/kernel_patterns.h"
#include "codegen/loop_invariants.h"

namespace metajit {
namespace {

class CppEmitter : public CFamilyEmitter {
 public:
  // Output loops walked as one column dimension of a contraction
  // (ContractionSchedule::merged_outer_vars, codegen/cpu_schedule.h) and their extents.
  struct MergedColumns {
    std::vector<int> outer_vars;  // outermost first; the column loop j is inside the last
    std::vector<std::string> outer_extents;
  };

  // Declares the merged outer loops' variables from the flat outer index mj_jo.
  void merged_outer_vars(const MergedColumns& m, int d) {
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

  CppEmitter(const KernelIR& ir, const CpuTarget& target)
      : CFamilyEmitter(ir, Dialect::Cpp), target_(target), tile_(target.contraction_tile()) {}

  std::string run() {
    out_ = "// metajit generated kernel: ";
    for (size_t k = 0; k < ir_.ops.size(); ++k) out_ += (k ? ", " : "") + ir_.ops[k];
    out_ += "\n// target: " + target_.describe() + "\n";
    out_ += integer_prelude("static inline");
    out_ += extra_readers("static inline");
    out_ += kCppKernelPrelude;
    const size_t kernel_start = out_.size();
    out_ +=
        "\nextern \"C\" void metajit_kernel(void* const* B, const long long* P, const double* S) "
        "{\n";
    for (int k = 0; k < ir_.num_params; ++k)
      line(1, "const i64 p" + std::to_string(k) + " = P[" + std::to_string(k) + "];");
    if (ir_.num_params == 0) line(1, "(void)P;");
    if (ir_.num_scalars == 0) line(1, "(void)S;");
    // Every scalar argument converted once, into a named local: a scalar read from S on one
    // side of a branch (reindex's overflow value) kept the loop around it from vectorising
    // (S may alias the output; conv2d's packing loop, measured).
    collect_scalars(ir_.body);
    for (const auto& [slot, t] : scalar_locals_) {
      const std::string s = "S[" + std::to_string(slot) + "]";
      line(1, "const " + ctype(t) + " " + scalar_local(slot, t) + " = " +
                  (t == DType::Bool ? "(" + s + " != 0)" : "(" + ctype(t) + ")" + s) + ";");
    }
    for (size_t k = 0; k < ir_.inputs.size(); ++k) {
      std::string name = "in" + std::to_string(k);
      std::string t = ctype(ir_.inputs[k].dtype);
      line(1, "const " + t + "* __restrict__ " + name + " = (const " + t + "*)B[" +
                  std::to_string(k) + "];");
      strides(name, ir_.inputs[k]);
    }
    // Buffers read by speculative loads (stmt()): element 0 must exist even when the buffer is
    // empty, where every guard fails and a zero stands in.
    std::set<int> speculative;
    speculative_buffers(ir_.body, speculative);
    for (int k : speculative) {
      const std::string name = "in" + std::to_string(k), t = ctype(ir_.inputs[size_t(k)].dtype);
      std::string n = "1LL";
      for (const IndexExprPtr& d : ir_.inputs[size_t(k)].dims) n += " * " + ix(*d);
      line(1, "static const " + t + " " + name + "_zero = 0;");
      line(1, "const " + t + "* const " + name + "_any = " + n + " > 0 ? " + name + " : &" + name +
                  "_zero;");
    }
    std::string ot = ctype(ir_.output.dtype);
    line(1, ot + "* __restrict__ out = (" + ot + "*)B[" + std::to_string(ir_.inputs.size()) + "];");
    strides("out", ir_.output);
    for (size_t k = 0; k < ir_.extra_outputs.size(); ++k) {  // same extents: out's strides
      const std::string t = ctype(ir_.extra_outputs[k].buffer.dtype);
      line(1, t + "* __restrict__ out" + std::to_string(k + 1) + " = (" + t + "*)B[" +
                  std::to_string(ir_.inputs.size() + 1 + k) + "];");
    }
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

 private:
  // The (slot, dtype) of every scalar argument `b` reads, recursively.
  void collect_scalars(const KBlock& b) {
    for (const KStmt& st : b.stmts) {
      if (st.kind == KOp::Scalar || st.kind == KOp::Guard)
        scalar_locals_.insert({st.slot, st.dtype});
      if (st.body) collect_scalars(*st.body);
    }
  }

  // The OpenMP reduction clause for an accumulator `acc` of `op` over dtype `t`.
  static std::string reduction_clause(ReduceOp op, DType t, const std::string& acc) {
    std::string id;
    switch (op) {
      case ReduceOp::Add:
      case ReduceOp::Mean:
        id = t == DType::Bool ? "||" : "+";
        break;
      case ReduceOp::Mul:
        id = t == DType::Bool ? "&&" : "*";
        break;
      case ReduceOp::Max:
        id = t == DType::Bool      ? "||"
             : t == DType::Float32 ? "mj_maxf"
             : t == DType::Float64 ? "mj_maxd"
                                   : "max";
        break;
      case ReduceOp::Min:
        id = t == DType::Bool      ? "&&"
             : t == DType::Float32 ? "mj_minf"
             : t == DType::Float64 ? "mj_mind"
                                   : "min";
        break;
    }
    return "reduction(" + id + ":" + acc + ")";
  }

  // A Reduce statement: its loops with a SIMD reduction on the innermost one; with `parallel`
  // (a statement outside every parallel loop, e.g. a sum over everything) the outermost loop is
  // split across threads too.

  // A row's value that the innermost loop reads back from the scratch row (see RowReuse).
  void stmt(const KStmt& st, int depth) override {
    if (row_reuse_ && row_reuse_->outer_value == st.id) {
      dtypes_[st.id] = st.dtype;
      line(depth,
           "const " + ctype(st.dtype) + " " + v(st.id) + " = mj_row[" + row_reuse_->index + "];");
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
        test = it->second.second ? it->second.first + " && " + ix(*it->second.second)
                                 : it->second.first;
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
  static const KStmt* speculative_load(const KStmt& st) {
    if (st.kind != KOp::Guard || !ix_reads_extras(*st.cond) || st.body->stmts.size() != 1)
      return nullptr;
    const KStmt& load = st.body->stmts[0];
    if (load.kind != KOp::Load || load.id != st.body->result || load.dtype != st.dtype)
      return nullptr;
    return &load;
  }
  static void speculative_buffers(const KBlock& b, std::set<int>& out) {
    for (const KStmt& st : b.stmts) {
      if (const KStmt* load = speculative_load(st)) out.insert(load->buffer);
      if (st.body) speculative_buffers(*st.body, out);
    }
  }

  void reduce_stmt(const KStmt& st, int depth) override { reduce_stmt(st, depth, false); }

  // A Reduce statement: its loops with a SIMD reduction on the innermost one; with `parallel`
  // (a statement outside every parallel loop, e.g. a sum over everything) the outermost loop is
  // split across threads too.
  void reduce_stmt(const KStmt& st, int depth, bool parallel) {
    const DType at = acc_dtype(ReduceOp(st.op), st.dtype);
    const std::string clause = reduction_clause(ReduceOp(st.op), at, "acc" + std::to_string(st.id));
    std::string outer;
    if (parallel)
      outer = std::string("#pragma omp parallel for") + (st.loops.size() == 1 ? " simd " : " ") +
              clause + " schedule(static) if(" + work(st.loops) + " > 32768)";
    sequential_reduce(st, depth, "#pragma omp simd " + clause, outer);
  }

  // The guards' values in one sub-range of open_sub_ranges.
  struct SubRange {
    std::map<int, IndexExprPtr> conds;  // guard id -> its test there
    std::map<int, std::string> value;   // guard id -> the local holding its value
    bool all_constant = true;           // no test left that reads the loop variable
    std::map<int, IndexExprPtr> element_tests;  // guard id -> its test of each element
  };

  // A reduction whose body reads its innermost loop variable under guards that each hold on an
  // interval of it (codegen/guard_intervals.h): the loop runs in sub-ranges in which each guard
  // is one value (open_sub_ranges), with no test per element. A causal softmax's row
  // statistics read row i of the scores under j <= i: its logsumexp kernel, [16, 4, 64, 64],
  // ran 237 -> 148 us on AVX2 (a scratch copy of the GPT's kernel, 2 threads). Extents below
  // kMinSimdReduceExtent (pooling windows) keep the plain loop. False, writing nothing, where
  // the statement does not qualify.
  bool custom_innermost_reduce(const KStmt& st, const std::string& simd, int d) override {
    return partitioned_reduce(st, simd, d);
  }
  bool partitioned_reduce(const KStmt& st, const std::string& simd, int d) {
    const KLoop& inner = st.loops.back();
    std::set<int> speculative;
    speculative_buffers(*st.body, speculative);
    if ((row_reuse_ && row_reuse_->reduce_id == st.id) || !speculative.empty()) return false;
    const std::vector<GuardInterval> gs = find_guard_intervals(st.body->stmts, inner.var);
    if (gs.empty()) return false;
    const std::string extent = ix(*inner.extent);
    const std::string a = "mj_ra" + std::to_string(st.id), b = "mj_rb" + std::to_string(st.id);
    line(d, "if (" + extent + " < " + std::to_string(kMinSimdReduceExtent) + ") {");
    reduce_loop(st, st.body->stmts, "0", extent, "", d + 1);
    line(d, "} else {");
    const SubRange r = open_sub_ranges(gs, inner.var, "0", extent, a, b, reduce_split_var_, d + 1);
    sub_range_reduce(st, gs, r, simd, a, b, extent, d + 2);
    line(d + 2, a + " = " + b + ";");
    line(d + 1, "}");
    line(d, "}");
    return true;
  }

  // One sub-range [a, b) of partitioned_reduce. With one guard, where it fails and the body
  // then reads nothing of the loop, the value is computed once: a max or a min (or a boolean
  // reduction) takes it once, being idempotent; a sum or a product takes it only when it is not
  // the identity. Adding 0 or multiplying by 1 changes no accumulator (one that starts at +0 is
  // never -0), so the masked half of causal attention's rows costs nothing.
  void sub_range_reduce(const KStmt& st, const std::vector<GuardInterval>& gs, const SubRange& r,
                        const std::string& simd, const std::string& a, const std::string& b,
                        const std::string& to, int d) {
    const ReduceOp op = ReduceOp(st.op);
    const DType at = acc_dtype(op, st.dtype);
    const std::vector<KStmt> failed = guard_failed(st.body->stmts, gs[0].guard);
    if (gs.size() != 1 || gs[0].rest || stmts_read_var(failed, st.loops.back().var)) {
      std::vector<KStmt> replaced;
      for (const KStmt& s : st.body->stmts) replaced.push_back(replace_guard_tests(s, r.conds));
      reduce_loop(st, replaced, a, b, simd, d);
      return;
    }
    line(d, "if (" + r.value.at(gs[0].guard) + ") {");
    if (tile_.vector_floats >= kRoundedSubRangeFloats) {
      // Whole vectors, the guard tested element by element past the sub-range's end.
      const std::string W = std::to_string(tile_.vector_floats);
      line(d + 1, b + " = " + a + " + (" + b + " - " + a + " + " + W + " - 1) / " + W + " * " + W +
                      ";");
      line(d + 1, "if (" + b + " > " + to + ") " + b + " = " + to + ";");
      const std::map<int, IndexExprPtr> tests{{gs[0].guard, r.element_tests.at(gs[0].guard)}};
      std::vector<KStmt> tested;
      for (const KStmt& s : st.body->stmts) tested.push_back(replace_guard_tests(s, tests));
      reduce_loop(st, tested, a, b, simd, d + 1);
    } else {
      reduce_loop(st, guards_passed(*st.body), a, b, simd, d + 1);
    }
    line(d, "} else {");
    for (const KStmt& s : failed) stmt(s, d + 1);
    const std::string acc = "acc" + std::to_string(st.id), x = v(st.body->result);
    const std::string i = "i" + std::to_string(st.loops.back().var);
    const std::string once = acc + " = " + combine(op, at, acc, x) + ";";
    if (op == ReduceOp::Max || op == ReduceOp::Min || at == DType::Bool)
      line(d + 1, once);
    else
      line(d + 1, "if (" + x + " != " + identity(op, at) + ") for (i64 " + i + " = " + a + "; " +
                      i + " < " + b + "; ++" + i + ") " + once);
    line(d, "}");
  }

  // Whether a statement of `stmts`, or of their bodies, reads loop variable `var`.
  static bool stmts_read_var(const std::vector<KStmt>& stmts, int var) {
    for (const KStmt& st : stmts) {
      for (const IndexExprPtr& e : st.index)
        if (ix_reads_var(*e, var)) return true;
      for (const KLoop& l : st.loops)
        if (ix_reads_var(*l.extent, var)) return true;
      if ((st.cond && ix_reads_var(*st.cond, var)) ||
          (st.body && stmts_read_var(st.body->stmts, var)))
        return true;
    }
    return false;
  }
  // Vector width from which a passed sub-range of partitioned_reduce is rounded up to whole
  // vectors: a row's tail of up to 15 elements runs scalar (libmvec's scalar exp per element),
  // which cost more than testing the guard in one more vector. The GPT's causal logsumexp
  // [16, 4, 64, 64], alone on 2 threads: AVX-512 197 us unpartitioned, 214 partitioned, 170
  // rounded; AVX2 237, 147, 163 (scratch copies of the kernel).
  static constexpr int kRoundedSubRangeFloats = 16;
  // Loop variable numbers for partitioned_reduce's sub-range locals (beside kChunkVar's).
  static constexpr int kReduceSplitVar = (1 << 20) + (1 << 18);
  int reduce_split_var_ = kReduceSplitVar;

  void reduce_body_extra(const KStmt& st, int d) override {
    if (row_reuse_ && row_reuse_->reduce_id == st.id)
      line(d, "mj_row[i" + std::to_string(st.loops[0].var) + "] = " + v(row_reuse_->inner_value) +
                  ";");
  }

  // Product of loop extents, as an expression: the iterations of a nest (tiny kernels stay
  // single-threaded) or the extent of a reduction.
  std::string work(const std::vector<KLoop>& loops) {
    std::string s = "1LL";
    for (const KLoop& l : loops) s += " * " + ix(*l.extent);
    return s;
  }

  void close_loops(size_t n, int depth) {
    for (size_t k = n; k-- > 0;) line(depth + int(k), "}");
  }

  // The statement storing a map's output element at `idx`, and its extra outputs' there.
  std::string map_store(const std::vector<IndexExprPtr>& idx, int result) const {
    const std::string at = offset("out", idx);
    std::string s = "out[" + at + "] = " + v(result) + ";";
    for (size_t k = 0; k < ir_.extra_outputs.size(); ++k)
      s += " out" + std::to_string(k + 1) + "[" + at + "] = " + v(ir_.extra_outputs[k].value) + ";";
    return s;
  }

  // Map kernels: every top-level statement is placed in the loop it depends on (loop-invariant
  // work such as a row's max and sum runs once per row); the outer loops run in parallel, the
  // innermost under `omp simd`; a column reduction is interchanged to run along memory.
  void map_kernel() {
    const CpuSchedule sched = schedule_cpu_kernel(ir_, target_);
    if (log_enabled(LogLevel::Debug)) log_message(LogLevel::Debug, dump_schedule(sched, target_));
    schedule_ = describe_schedule(sched, target_);
    const KernelIR& ir = sched.ir;
    const std::vector<int>& levels = sched.levels;
    const int k = int(ir.loops.size());
    const std::vector<int>& level_of_value = sched.level_of_value;
    std::vector<IndexExprPtr> out_idx;
    for (const KLoop& l : ir.loops) out_idx.push_back(ix_var(l.var));
    const std::string store = map_store(out_idx, ir.body.result);

    // Level -1: once per launch, before any parallel loop (a Reduce here is itself parallel).
    for (size_t s = 0; s < ir.body.stmts.size(); ++s)
      if (levels[s] < 0) {
        if (ir.body.stmts[s].kind == KOp::Reduce)
          reduce_stmt(ir.body.stmts[s], 1, /*parallel=*/true);
        else
          stmt(ir.body.stmts[s], 1);
      }
    if (k == 0) {
      line(1, store);
      return;
    }
    if (sched.contraction) {
      contraction_kernel(ir, levels, level_of_value, *sched.contraction, store);
      return;
    }
    if (sched.in_bounds.empty()) {
      map_nest(ir, levels, level_of_value, out_idx, store, 1);
      return;
    }
    std::string fits;
    for (const auto& [extent, limit] : sched.in_bounds.conditions)
      fits += (fits.empty() ? "(" : " && (") + ix(*extent) + " <= " + ix(*limit) + ")";
    line(1, "if (" + fits + ") {");
    in_bounds_ = &sched.in_bounds;
    map_nest(ir, levels, level_of_value, out_idx, store, 2);
    in_bounds_ = nullptr;
    line(1, "} else {");
    map_nest(ir, levels, level_of_value, out_idx, store, 2);
    line(1, "}");
  }

  // map_kernel's loop nest, at `depth`: with a row reduction's values reused, or plain.
  void map_nest(const KernelIR& ir, const std::vector<int>& levels,
                const std::vector<int>& level_of_value, const std::vector<IndexExprPtr>& out_idx,
                const std::string& store, int depth) {
    if (std::optional<RowReuse> rr = find_row_reuse(ir, levels)) {
      if (rr->dtype == ir.output.dtype) {
        // The row's values go straight into the output row they belong to, and the innermost
        // loop reads them back from there (in cache) and overwrites them: the output's
        // stores and their cache misses overlap the row's computation (softmax's exp)
        // instead of coming after it.
        std::vector<IndexExprPtr> row_start = out_idx;
        row_start.back() = ix_const(0);
        rr->in_output = "out + (" + offset("out", row_start) + ")";
        line(depth, "if " + rr->same_length + " {");
        row_reuse_ = rr;
        generic_map(ir, levels, level_of_value, store, depth + 1);
        row_reuse_.reset();
        line(depth, "} else {");
        generic_map(ir, levels, level_of_value, store, depth + 1);
        line(depth, "}");
        return;
      }
      // One scratch row per thread; without it, the plain schedule.
      line(depth, "const i64 mj_rowlen = " + rr->extent + ";");
      line(depth, ctype(rr->dtype) + "* mj_rows = " + rr->same_length + " ? (" + ctype(rr->dtype) +
                      "*)malloc(sizeof(" + ctype(rr->dtype) +
                      ") * (mj_rowlen > 0 ? mj_rowlen : 1) * omp_get_max_threads()) : 0;");
      line(depth, "if (mj_rows) {");
      row_reuse_ = rr;
      generic_map(ir, levels, level_of_value, store, depth + 1);
      row_reuse_.reset();
      line(depth + 1, "free(mj_rows);");
      line(depth, "} else {");
      generic_map(ir, levels, level_of_value, store, depth + 1);
      line(depth, "}");
      return;
    }
    generic_map(ir, levels, level_of_value, store, depth);
  }

  // A value of the innermost loop that a row reduction just outside it already computed for
  // every element of the row (softmax: exp(x - max) in the row sum and in the output): the
  // reduction keeps it in a per-thread scratch row and the inner loop reads it back, instead
  // of computing (an exp) twice per element.
  struct RowReuse {
    int reduce_id = -1, inner_value = -1;  // the Reduce, and the value inside its body
    int outer_value = -1;                  // the innermost loop's value that equals it
    std::string index;                     // the innermost loop variable, "i<k>"
    std::string extent, same_length;
    DType dtype = DType::Float32;
    std::string in_output;  // the output row's address when it serves as the row, else empty
  };

  // Structural text of value `id` within `b` with loop variable `var` written as "#":
  // equal texts compute equal values. Values defined outside `b` appear by id. Empty when the
  // value is not a plain expression (Guard, Reduce, scalar arguments: slots differ by use).
  static std::string canon(const KBlock& b, int id, int var, const std::set<int>& local,
                           std::map<int, std::string>& memo) {
    if (auto it = memo.find(id); it != memo.end()) return it->second;
    const KStmt* st = nullptr;
    for (const KStmt& x : b.stmts)
      if (x.id == id && local.count(id)) st = &x;
    if (!st) return "v" + std::to_string(id);  // computed outside the loop: the same value
    std::string out;
    std::vector<IndexExprPtr> sub(size_t(var) + 1);
    for (int k = 0; k <= var; ++k) sub[size_t(k)] = ix_var(k);
    sub[size_t(var)] = ix_param(1 << 20);  // a name no kernel uses
    switch (st->kind) {
      case KOp::Load:
      case KOp::Iota:
        out = std::string(st->kind == KOp::Load ? "load" : "iota") + std::to_string(st->buffer);
        for (const IndexExprPtr& e : st->index)
          out += "[" + ix_to_string(*ix_substitute(e, sub)) + "]";
        break;
      case KOp::Unary:
      case KOp::Binary:
      case KOp::Where:
      case KOp::Cast:
        out = std::to_string(int(st->kind)) + "." + std::to_string(st->op) + "(";
        for (int a : st->args) {
          std::string c = canon(b, a, var, local, memo);
          if (c.empty()) return memo[id] = "";
          out += c + ",";
        }
        out += ")";
        break;
      default:
        return memo[id] = "";
    }
    out += dtype_name(st->dtype);
    return memo[id] = out;
  }

  std::optional<RowReuse> find_row_reuse(const KernelIR& ir, const std::vector<int>& levels) {
    const int k = int(ir.loops.size());
    if (k < 2) return std::nullopt;
    const KLoop& inner = ir.loops[size_t(k - 1)];
    std::map<int, std::string> outer_memo;
    std::set<int> inner_ids;
    for (size_t s = 0; s < ir.body.stmts.size(); ++s)
      if (levels[s] == k - 1) inner_ids.insert(ir.body.stmts[s].id);
    // The innermost loop's values, latest (the most work saved) first.
    for (size_t s = ir.body.stmts.size(); s-- > 0;) {
      const KStmt& x = ir.body.stmts[s];
      if (levels[s] != k - 1 || x.kind == KOp::Load) continue;
      std::string want = canon(ir.body, x.id, inner.var, inner_ids, outer_memo);
      if (want.empty()) continue;
      for (size_t r = 0; r < ir.body.stmts.size(); ++r) {
        const KStmt& red = ir.body.stmts[r];
        if (red.kind != KOp::Reduce || levels[r] != k - 2 || red.loops.size() != 1) continue;
        std::map<int, std::string> memo;
        std::set<int> body_ids;
        for (const KStmt& y : red.body->stmts) body_ids.insert(y.id);
        for (const KStmt& y : red.body->stmts) {
          if (y.dtype != x.dtype ||
              canon(*red.body, y.id, red.loops[0].var, body_ids, memo) != want)
            continue;
          RowReuse rr;
          rr.reduce_id = red.id;
          rr.inner_value = y.id;
          rr.outer_value = x.id;
          rr.index = "i" + std::to_string(inner.var);
          rr.extent = ix(*inner.extent);
          // Shapes are per-node parameters: that the two loops have one length is checked
          // when the kernel runs.
          rr.same_length = "(" + ix(*red.loops[0].extent) + " == " + ix(*inner.extent) + ")";
          rr.dtype = x.dtype;
          return rr;
        }
      }
    }
    return std::nullopt;
  }

  void generic_map(const KernelIR& ir, const std::vector<int>& levels,
                   const std::vector<int>& level_of_value, const std::string& store, int base) {
    const int k = int(ir.loops.size());
    std::vector<size_t> interchanged;
    for (size_t s = 0; s < ir.body.stmts.size(); ++s)
      if (levels[s] == k - 1 &&
          is_column_reduction(ir.body.stmts[s], level_of_value, ir.loops[size_t(k - 1)].var, k - 1))
        interchanged.push_back(s);

    // Loops 0..c-1 are collapsed into one parallel loop: only while nothing sits between them.
    int first_used = k - 1;
    for (size_t s = 0; s < ir.body.stmts.size(); ++s)
      if (levels[s] >= 0 && levels[s] < first_used) first_used = levels[s];
    const bool strips = !interchanged.empty();
    // With strips the innermost loop becomes a loop over strips, which can join the collapse.
    const int max_collapse = strips ? k : std::max(1, k - 1);
    const int collapse = std::min(max_collapse, first_used + 1);
    std::string w = work(ir.loops);
    for (const KStmt& st : ir.body.stmts)
      if (st.kind == KOp::Reduce) w += " * " + work(st.loops);
    if (strips) {
      const std::string ext = ix(*ir.loops[size_t(k - 1)].extent);
      // As many strips as a multiple of the threads, each at most kStrip wide: 4097 columns
      // on 2 threads are 6 strips of 688, not 5 of 1024 with a last one of 1.
      const std::string K = std::to_string(kStrip);
      line(base, "const i64 mj_nt = omp_get_max_threads();");
      line(base, "const i64 mj_ns = mj_nt * ((" + ext + " + mj_nt * " + K + " - 1) / (mj_nt * " +
                     K + "));");
      line(base, "const i64 mj_w0 = ((" + ext + " + mj_ns - 1) / mj_ns + 15) / 16 * 16;");
      line(base, "const i64 mj_jw = mj_w0 < 16 ? 16 : mj_w0 > " + K + " ? " + K + " : mj_w0;");
    }
    // One loop only: it is both the parallel and the SIMD loop.
    const bool single_simd = k == 1 && !strips && simd_friendly(ir, levels, 0);
    line(base, "#pragma omp parallel for" + std::string(single_simd ? " simd" : "") +
                   (collapse > 1 ? " collapse(" + std::to_string(collapse) + ")" : std::string()) +
                   " schedule(static) if(" + w + " > 32768)");
    int d = base;
    for (int lv = 0; lv < k; ++lv) {
      const KLoop& l = ir.loops[size_t(lv)];
      const std::string i = "i" + std::to_string(l.var);
      const bool innermost = lv == k - 1;
      // Not between a parallel pragma and the loops it takes (the loop itself, or collapsed).
      if (innermost && lv >= collapse) {
        std::set<int> outer;
        for (int o = 0; o < lv; ++o) outer.insert(ir.loops[size_t(o)].var);
        hoist_extra_reads(ir.body, {}, outer, d);
        hoist_guard_tests(ir.body, outer, d);
      }
      if (innermost && strips) {
        strip_mined_inner(ir, levels, interchanged, d, store);
        break;
      }
      if (innermost && lv >= collapse && !row_reuse_ && simd_friendly(ir, levels, lv)) {
        std::vector<const KStmt*> inner;
        for (size_t s = 0; s < ir.body.stmts.size(); ++s)
          if (levels[s] == lv) inner.push_back(&ir.body.stmts[s]);
        if (const std::optional<DivisionChunks> dc = find_division_chunks(inner, l.var)) {
          division_chunked_inner(ir, inner, *dc, d, store);
          break;
        }
      }
      if (innermost && k > 1 && simd_friendly(ir, levels, k - 1)) line(d, "#pragma omp simd");
      line(d, "for (i64 " + i + " = 0; " + i + " < " + ix(*l.extent) + "; ++" + i + ") {");
      ++d;
      for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
        if (levels[s] != lv) continue;
        if (row_reuse_ && row_reuse_->reduce_id == ir.body.stmts[s].id)
          line(d, ctype(row_reuse_->dtype) + "* const mj_row = " +
                      (row_reuse_->in_output.empty()
                           ? "mj_rows + (i64)omp_get_thread_num() * (mj_rowlen > 0 ? mj_rowlen : 1)"
                           : row_reuse_->in_output) +
                      ";");
        stmt(ir.body.stmts[s], d);
      }
      if (innermost) line(d, store);
    }
    for (; d > base; --d) line(d - 1, "}");
    forget_hoisted_extras();
    guard_tests_.clear();
  }

  // The parts of speculative guards' tests (stmt()) that read only `outer` loop variables,
  // computed once at `depth` before the innermost loop: a gather's row checks.
  void hoist_guard_tests(const KBlock& b, const std::set<int>& outer, int depth) {
    for (const KStmt& st : b.stmts) {
      if (!speculative_load(st)) continue;
      std::set<int> inner;
      collect_vars(*st.cond, inner);
      for (int v : outer) inner.erase(v);
      std::vector<IndexExprPtr> fixed, varying;
      split_conjuncts(st.cond, inner, fixed, varying);
      if (fixed.empty()) continue;
      const std::string name = "mj_g" + std::to_string(st.id);
      line(depth, "const bool " + name + " = " + ix(*conjunction(fixed)) + ";");
      guard_tests_[st.id] = {name, varying.empty() ? nullptr : conjunction(varying)};
    }
  }
  static void collect_vars(const IndexExpr& e, std::set<int>& out) {
    if (e.kind == IxKind::Var) out.insert(int(e.value));
    for (const IndexExprPtr& a : e.args) collect_vars(*a, out);
    for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
      if (c) collect_vars(*c, out);
  }
  static IndexExprPtr conjunction(const std::vector<IndexExprPtr>& terms) {
    IndexExprPtr all = terms.at(0);
    for (size_t k = 1; k < terms.size(); ++k) all = ix_binary(IxKind::And, all, terms[k]);
    return all;
  }
  // Guard id -> its hoisted test's local and the rest of its test (null: nothing left).
  std::map<int, std::pair<std::string, IndexExprPtr>> guard_tests_;

  // The micro-kernel of the target (cpu_target.h): c[mr x nr] (row stride ldc) = (first ? 0 :
  // c) + sum over kn steps of a column of the packed A panel (mr floats a step) times a row of
  // the packed B panel (nr floats a step). With vectors, every accumulator is a named variable
  // so that the register allocator sees exactly mr x nr/W of them.
  // The micro-kernel of tile `t` as the function `name`; with `vector_types`, the vector type
  // and its load/store helpers before it (once per kernel source).
  std::string micro_kernel(const ContractionTile& t, const std::string& name,
                           bool vector_types) const {
    const int MR = t.mr, NR = t.nr, W = t.vector_floats;
    const std::string sig = "static inline void " + name +
                            "(const float* __restrict__ a, const float* __restrict__ b, "
                            "i64 kn, float* __restrict__ c, i64 ldc, int first) {\n";
    std::string o;
    if (W <= 1) {
      o += "// Portable micro-kernel: plain arrays; the compiler vectorises the rows as it can.\n";
      o += sig;
      o += "  float acc[" + std::to_string(MR) + "][" + std::to_string(NR) + "];\n";
      o += "  for (int r = 0; r < " + std::to_string(MR) + "; ++r)\n";
      o += "    for (int t = 0; t < " + std::to_string(NR) +
           "; ++t) acc[r][t] = first ? 0.0f : c[r * ldc + t];\n";
      o += "  for (i64 k = 0; k < kn; ++k, a += " + std::to_string(MR) +
           ", b += " + std::to_string(NR) + ")\n";
      o += "    for (int r = 0; r < " + std::to_string(MR) + "; ++r) {\n";
      o += "      const float av = a[r];\n";
      o += "#pragma omp simd\n";
      o += "      for (int t = 0; t < " + std::to_string(NR) + "; ++t) acc[r][t] += av * b[t];\n";
      o += "    }\n";
      o += "  for (int r = 0; r < " + std::to_string(MR) + "; ++r)\n";
      o += "    for (int t = 0; t < " + std::to_string(NR) + "; ++t) c[r * ldc + t] = acc[r][t];\n";
      o += "}\n";
      return o;
    }
    const int NV = NR / W;
    const std::string bytes = std::to_string(W * 4);
    if (vector_types) {
      o += "// " + std::to_string(W) + " floats: the vector of the " + target_.name() +
           " micro-kernels (GCC vector extension; unaligned loads).\n";
      o += "typedef float mj_vf __attribute__((vector_size(" + bytes + ")));\n";
      o += "static inline mj_vf mj_ld(const float* p) { mj_vf v; __builtin_memcpy(&v, p, " + bytes +
           "); return v; }\n";
      o += "static inline void mj_st(float* p, mj_vf v) { __builtin_memcpy(p, &v, " + bytes +
           "); }\n";
    }
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
    o += "  for (i64 k = 0; k < kn; ++k, a += " + std::to_string(MR) +
         ", b += " + std::to_string(NR) + ") {\n";
    for (int v = 0; v < NV; ++v)
      o += "    const mj_vf b" + std::to_string(v) + " = mj_ld(b + " + std::to_string(v * W) +
           ");\n";
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

  // mj_transpose: a W x W block of floats, rows `ss` apart, into its transpose, rows `ds` apart
  // (W = the target's vector). log2(W) rounds; round h pairs rows r and r + h (r & h == 0) and
  // exchanges the h-wide column groups that sit off the diagonal of each 2h x 2h block, one
  // two-source shuffle per output row (vpermt2ps on AVX-512, 64 for a 16 x 16 block).
  static std::string transpose_helper(int W) {
    std::string o = "typedef int mj_vi __attribute__((vector_size(" + std::to_string(W * 4)
                    + ")));\n";
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
  static std::string interleave_helper(int W, int rows) {
    std::string o = "static inline void mj_interleave(const float* __restrict__ s, i64 ss, "
                    "float* __restrict__ d) {\n";
    for (int r = 0; r < rows; ++r)
      o += "  const mj_vf r" + std::to_string(r) + " = mj_ld(s + " + std::to_string(r) +
           " * ss);\n";
    for (int m = 0; m < rows; ++m) {
      std::vector<int> lane_row(static_cast<size_t>(W)), lane_step(static_cast<size_t>(W)), order;
      for (int j = 0; j < W; ++j) {
        const int q = m * W + j;
        lane_row[size_t(j)] = q % rows;
        lane_step[size_t(j)] = q / rows;
        if (std::find(order.begin(), order.end(), q % rows) == order.end())
          order.push_back(q % rows);
      }
      // The first two rows into place (other lanes: anything), then each further row.
      std::string cur = "r" + std::to_string(order[0]);
      for (size_t k = 1; k < order.size(); ++k) {
        std::string mask;
        for (int j = 0; j < W; ++j) {
          int sel = k == 1 ? 0 : j;  // keep what is in place
          if (lane_row[size_t(j)] == order[k]) sel = W + lane_step[size_t(j)];
          else if (k == 1 && lane_row[size_t(j)] == order[0]) sel = lane_step[size_t(j)];
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

  // Sets the reduction's loop variables to flat reduction index `start` (innermost fastest),
  // then runs `count` steps of `body`, advancing them like an odometer: a block of the
  // reduction walked without a division per step. Needs count > 0 (every extent > 0).
  template <class Body>
  void reduction_walk(const KStmt& r, const std::string& start, const std::string& count, int d,
                      const Body& body) {
    line(d, "{");
    line(d + 1, "i64 mj_rem = " + start + ";");
    for (size_t n = r.loops.size(); n-- > 0;) {
      const std::string i = "i" + std::to_string(r.loops[n].var), e = ix(*r.loops[n].extent);
      if (n == 0)
        line(d + 1, "i64 " + i + " = mj_rem;");
      else
        line(d + 1, "i64 " + i + " = mj_rem % " + e + "; mj_rem /= " + e + ";");
    }
    line(d + 1, "(void)mj_rem;");
    line(d + 1, "for (i64 mj_kk = 0; mj_kk < " + count + "; ++mj_kk) {");
    body(d + 2);
    // Advance: the innermost variable first, carrying outwards.
    std::string adv;
    for (size_t n = r.loops.size(); n-- > 0;) {
      const std::string i = "i" + std::to_string(r.loops[n].var), e = ix(*r.loops[n].extent);
      if (n == 0) {
        adv += "++" + i + ";";
      } else {
        adv += "if (++" + i + " == " + e + ") { " + i + " = 0; ";
      }
    }
    for (size_t n = 1; n < r.loops.size(); ++n) adv += " }";
    line(d + 2, adv);
    line(d + 1, "}");
    line(d, "}");
  }

  // Packs one operand of the contraction: for the `n` (of `npad`, a multiple of `pw`) rows of A
  // from i = `x0` (or columns of B from j = `x0`) and reduction steps [k0, k0 + kn), value
  // x(row, k) goes to dst[(row / pw) * ps + (k - k0) * pw + row % pw]; padding rows are zero.
  void pack_operand(const KStmt& r, const std::vector<KStmt>& prologue,
                    const std::vector<size_t>& stmts, int value, const std::string& var, int pw,
                    const std::string& dst, const std::string& ps, const std::string& x0,
                    const std::string& n, const std::string& npad, const std::string& k0,
                    const std::string& kn, int d, const MergedColumns* merged = nullptr) {
    const int own = std::stoi(var.substr(1));
    if (!merged && packs_along_reduction(r, prologue, stmts, own)) {
      pack_along_reduction(r, prologue, stmts, value, var, pw, dst, ps, x0, n, npad, k0, kn, d);
      return;
    }
    if (merged) {
      pack_merged_columns(r, prologue, stmts, value, var, pw, dst, ps, x0, n, npad, k0, kn, d,
                          *merged);
      return;
    }
    const RowTests tests = row_tests(r, stmts, own);
    const bool buffered = packs_through_buffer(r, prologue, stmts, own, tests);
    // Rows whose guards pass for the whole group (the attention products' q, k, v reindexed
    // from a packed qkv; a head merge's i / 64, i % 64) go through the row buffer without their
    // tests: the tests of the row alone once per packing, for every row; those that also read
    // the reduction step at the group's first and last rows (affine, so an interval). Panels of
    // 16 or more rows are whole vectors already in pack_panels' span loop (64-row panels through
    // the buffer: softmax -> matmul 20% slower on AVX-512, measured).
    const bool by_group = buffered && pw < kPackRows / 4 && all_affine(tests.steps, own) &&
                          !(tests.rows.empty() && tests.steps.empty());
    if (by_group) {
      line(d, "const i64 mj_rows = " + n + " < " + npad + " ? " + n + " : " + npad + ";");
      line(d, "bool mj_rows_ok = mj_rows > 0;");
      if (!tests.rows.empty()) {
        line(d, "for (i64 mj_t = 0; mj_rows_ok && mj_t < mj_rows; ++mj_t) {");
        line(d + 1, "const i64 " + var + " = " + x0 + " + mj_t;");
        line(d + 1, "mj_rows_ok = " + ix(*conjunction(tests.rows)) + ";");
        line(d, "}");
      }
    }
    reduction_walk(r, k0, kn, d, [&](int dd) {
      const GuardedBodies b = hoist_guard_tests(r, prologue, stmts, own, {own}, dd);
      if (b.span_tests.empty() && buffered) {
        pack_rows_through_buffer(b.body, value, var, pw, dst, ps, x0, n, npad, dd);
        return;
      }
      int e = dd;
      if (by_group) {
        line(dd, "bool mj_rows_in = mj_rows_ok;");
        span_check("mj_rows_in", tests.steps, var, {x0, x0 + " + mj_rows - 1"}, dd);
        line(dd, "if (mj_rows_in) {");
        pack_rows_through_buffer(b.full_body, value, var, pw, dst, ps, x0, n, npad, dd + 1);
        line(dd, "} else {");
        e = dd + 1;
      }
      pack_panels(b.body, b.full_body, b.spannable ? b.span_tests : std::vector<IndexExprPtr>{},
                  value, var, pw, dst, ps, x0, n, npad, e);
      if (e > dd) line(dd, "}");
    });
  }

  // An operand's statements for one reduction step, its prologue (Contraction::a_outer) first:
  // once per packed element. Guards (reindex's bounds and overflow conditions) test mostly
  // values that are the same for every row of the panel: those tests run once per reduction
  // step (emitted here) and `body` tests only what depends on the row (conv2d: 2 of 8
  // comparisons). `full_body` has each guard reduced to its hoisted part, for rows that pass
  // the row-dependent tests, `span_tests`; `spannable` when each is an affine comparison of the
  // row (then a panel's first and last rows decide for all of it).
  struct GuardedBodies {
    std::vector<KStmt> body, full_body;
    std::vector<IndexExprPtr> span_tests;
    bool spannable = true;
  };
  GuardedBodies hoist_guard_tests(const KStmt& r, const std::vector<KStmt>& prologue,
                                  const std::vector<size_t>& stmts, int own,
                                  const std::set<int>& vary, int d) {
    GuardedBodies b;
    b.body = b.full_body = prologue;
    int hoisted = 0;
    for (size_t s : stmts) {
      KStmt st = r.body->stmts[s];
      KStmt full = st;
      hoist_guard_test(st, full, b, own, vary, hoisted, d);
      b.body.push_back(std::move(st));
      b.full_body.push_back(std::move(full));
    }
    return b;
  }
  // hoist_guard_tests for one statement, and for the guards nested in its body (a head split
  // read from a packed qkv nests three reindexes: their row tests per element kept k and v's
  // packing in dK = dS^T Q at 360 us a call, against 190 from contiguous q, k, v).
  void hoist_guard_test(KStmt& st, KStmt& full, GuardedBodies& b, int own,
                        const std::set<int>& vary, int& hoisted, int d) {
    if (st.kind == KOp::Guard && st.cond) {
      std::vector<IndexExprPtr> fixed, varying;
      split_conjuncts(st.cond, vary, fixed, varying);
      for (const IndexExprPtr& e : varying) {
        b.spannable = b.spannable && is_affine_comparison(*e, own);
        b.span_tests.push_back(e);
      }
      IndexExprPtr f = ix_const(1);
      if (!fixed.empty()) {
        const int name = kHoistedVar + hoisted++;
        f = conjunction(fixed);
        line(d, "const i64 i" + std::to_string(name) + " = " + ix(*f) + ";");
        IndexExprPtr c = ix_var(name);
        f = c;
        for (const IndexExprPtr& e : varying) c = ix_binary(IxKind::And, c, e);
        st.cond = c;
      }
      full.cond = f;
    }
    if (!st.body) return;
    st.body = std::make_shared<KBlock>(*st.body);
    full.body = std::make_shared<KBlock>(*full.body);
    for (size_t k = 0; k < st.body->stmts.size(); ++k)
      hoist_guard_test(st.body->stmts[k], full.body->stmts[k], b, own, vary, hoisted, d);
  }

  // The row-dependent conjuncts of an operand's guards: those that read no reduction variable
  // (the same at every step) and those that do.
  struct RowTests {
    std::vector<IndexExprPtr> rows, steps;
  };
  static bool all_affine(const std::vector<IndexExprPtr>& tests, int own) {
    for (const IndexExprPtr& t : tests)
      if (!is_affine_comparison(*t, own)) return false;
    return true;
  }
  // Nested guards' tests too: hoist_guard_tests' full body drops them all.
  static RowTests row_tests(const KStmt& r, const std::vector<size_t>& stmts, int own) {
    RowTests t;
    std::vector<KStmt> top;
    for (size_t s : stmts) top.push_back(r.body->stmts[s]);
    std::vector<const KStmt*> flat;
    flatten(top, flat);
    for (const KStmt* g : flat) {
      const KStmt& st = *g;
      if (st.kind != KOp::Guard || !st.cond) continue;
      std::vector<IndexExprPtr> fixed, varying;
      split_conjuncts(st.cond, {own}, fixed, varying);
      for (const IndexExprPtr& e : varying) {
        bool step = false;
        for (const KLoop& l : r.loops) step = step || ix_reads_var(*e, l.var);
        (step ? t.steps : t.rows).push_back(e);
      }
    }
    return t;
  }

  // pack_operand when the columns are (outer, inner) pairs of two output loops, walked in
  // pieces that stay within one inner row and one panel: inside a piece both loads and stores
  // are contiguous, and the pieces advance without a division.
  void pack_merged_columns(const KStmt& r, const std::vector<KStmt>& prologue,
                           const std::vector<size_t>& stmts, int value, const std::string& var,
                           int pw, const std::string& dst, const std::string& ps,
                           const std::string& x0, const std::string& n, const std::string& npad,
                           const std::string& k0, const std::string& kn, int d,
                           const MergedColumns& merged) {
    const std::string PW = std::to_string(pw);
    // Where column x0 lies in (outer, inner) loop terms: one division per packing.
    line(d, "const i64 mj_fo = (" + x0 + ") / mj_eji, mj_fi = (" + x0 + ") % mj_eji;");
    const int own = std::stoi(var.substr(1));
    std::set<int> vary = {own};
    vary.insert(merged.outer_vars.begin(), merged.outer_vars.end());
    reduction_walk(r, k0, kn, d, [&](int dd) {
      const GuardedBodies b = hoist_guard_tests(r, prologue, stmts, own, vary, dd);
      line(dd, "i64 mj_jo = mj_fo, mj_ji = mj_fi;");
      line(dd, "for (i64 mj_c = 0; mj_c < " + npad + ";) {");
      line(dd + 1, "i64 mj_len = mj_eji - mj_ji;");
      line(dd + 1,
           "if (" + PW + " - mj_c % " + PW + " < mj_len) mj_len = " + PW + " - mj_c % " + PW + ";");
      line(dd + 1, "if (" + npad + " - mj_c < mj_len) mj_len = " + npad + " - mj_c;");
      line(dd + 1, "float* const mj_dst = " + dst + " + (mj_c / " + PW + ") * (" + ps +
                       ") + mj_kk * " + PW + " + mj_c % " + PW + ";");
      merged_outer_vars(merged, dd + 1);
      line(dd + 1, "#pragma omp simd");
      line(dd + 1, "for (i64 mj_t = 0; mj_t < mj_len; ++mj_t) {");
      packed_element("mj_c + mj_t < " + n, var, "mj_ji + mj_t", b.body, value, "mj_dst[mj_t]",
                     dd + 2);
      line(dd + 1, "}");
      line(dd + 1, "mj_c += mj_len;");
      line(dd + 1, "mj_ji += mj_len;");
      line(dd + 1, "if (mj_ji >= mj_eji) { mj_ji -= mj_eji; ++mj_jo; }");
      line(dd, "}");
    });
  }

  // Sets `flag` (already declared) to whether every test holds at each of the rows, tested
  // while it still holds.
  void span_check(const std::string& flag, const std::vector<IndexExprPtr>& tests,
                  const std::string& var, const std::vector<std::string>& rows, int d) {
    if (tests.empty()) return;
    const IndexExprPtr all = conjunction(tests);
    for (const std::string& row : rows) {
      line(d, "if (" + flag + ") {");
      line(d + 1, "const i64 " + var + " = " + row + ";");
      line(d + 1, flag + " = " + ix(*all) + ";");
      line(d, "}");
    }
  }

  // pack_operand's rows one panel at a time (pw lanes), each element under its guards; with
  // `span_tests` (affine in the row), a panel whose first and last rows pass them runs
  // `full_body`, whose guards no longer test the row.
  void pack_panels(const std::vector<KStmt>& body, const std::vector<KStmt>& full_body,
                   const std::vector<IndexExprPtr>& span_tests, int value, const std::string& var,
                   int pw, const std::string& dst, const std::string& ps, const std::string& x0,
                   const std::string& n, const std::string& npad, int d) {
    const std::string PW = std::to_string(pw);
    line(d, "for (i64 mj_q = 0; mj_q < " + npad + "; mj_q += " + PW + ") {");
    line(d + 1, "float* const mj_dst = " + dst + " + (mj_q / " + PW + ") * (" + ps +
                    ") + mj_kk * " + PW + ";");
    int e = d + 1;
    const bool unguarded = std::none_of(body.begin(), body.end(),
                                        [](const KStmt& st) { return st.kind == KOp::Guard; });
    if (!span_tests.empty() || unguarded) {
      // A whole panel inside the bounds (conv2d's weight gradient: every input channel): the
      // loads are unconditional, so the compiler vectorises the strided reads (a conditional
      // strided load it does not), and rows along memory load as plain vectors, not masked
      // (AMD EPYC: the FFN weight gradient packing its dH with vmaskmovps, 2.6 against 1.8 ms
      // for the kernel in the transformer step).
      line(e, "bool mj_span = mj_q + " + PW + " <= " + n + ";");
      span_check("mj_span", span_tests, var,
                 {x0 + " + mj_q", x0 + " + mj_q + " + std::to_string(pw - 1)}, e);
      line(e, "if (mj_span) {");
      line(e + 1, "#pragma omp simd");
      line(e + 1, "for (i64 mj_t = 0; mj_t < " + PW + "; ++mj_t) {");
      line(e + 2, "const i64 " + var + " = " + x0 + " + mj_q + mj_t;");
      for (const KStmt& st : full_body) stmt(st, e + 2);
      line(e + 2, "mj_dst[mj_t] = " + v(value) + ";");
      line(e + 1, "}");
      line(e, "} else {");
      ++e;
    }
    line(e, "#pragma omp simd");
    line(e, "for (i64 mj_t = 0; mj_t < " + PW + "; ++mj_t) {");
    packed_element("mj_q + mj_t < " + n, var, x0 + " + mj_q + mj_t", body, value, "mj_dst[mj_t]",
                   e + 1);
    line(e, "}");
    if (e > d + 1) line(d + 1, "}");
    line(d, "}");
  }

  // Rows that pack_operand computes through the buffer (packs_through_buffer) and that no
  // row-dependent test (left) excludes: vector loops over the rows, a whole number of panels
  // of at least kPackRows rows at a time (pw rows of a panel are fewer than a vector's lanes:
  // softmax's exp packed 6 at a time ran at a third of the speed). The rows inside the operand
  // are computed without a branch (g++ vectorises neither a load nor a call under `if`:
  // libmvec's variants are unmasked) into a row buffer, the padding rows are zeroed, and each
  // panel's pw values are copied to their place (a scatter in the vector loop kept it from
  // vectorising: P^T of a softmax backward packed 4x slower than its split form; a GELU
  // transposed as the A of a weight gradient packed at 2.2 ns per element, 1.1 ns with this).
  void pack_rows_through_buffer(const std::vector<KStmt>& body, int value, const std::string& var,
                                int pw, const std::string& dst, const std::string& ps,
                                const std::string& x0, const std::string& n,
                                const std::string& npad, int d) {
    const std::string PW = std::to_string(pw), C = std::to_string(pw * ((kPackRows + pw - 1) / pw));
    line(d, "for (i64 mj_r0 = 0; mj_r0 < " + npad + "; mj_r0 += " + C + ") {");
    line(d + 1, "float mj_row[" + C + "];");
    line(d + 1,
         "const i64 mj_rn = " + npad + " - mj_r0 < " + C + " ? " + npad + " - mj_r0 : " + C + ";");
    line(d + 1, "const i64 mj_rv = " + n + " - mj_r0 < mj_rn ? " + n + " - mj_r0 : mj_rn;");
    line(d + 1, "#pragma omp simd");
    line(d + 1, "for (i64 mj_t = 0; mj_t < mj_rv; ++mj_t) {");
    line(d + 2, "const i64 " + var + " = " + x0 + " + mj_r0 + mj_t;");
    for (const KStmt& st : body) stmt(st, d + 2);
    line(d + 2, "mj_row[mj_t] = " + v(value) + ";");
    line(d + 1, "}");
    line(d + 1, "for (i64 mj_t = mj_rv < 0 ? 0 : mj_rv; mj_t < mj_rn; ++mj_t) mj_row[mj_t] = 0;");
    line(d + 1, "for (i64 mj_q = 0; mj_q < mj_rn; mj_q += " + PW + ") {");
    line(d + 2, "float* const mj_dst = " + dst + " + ((mj_r0 + mj_q) / " + PW + ") * (" + ps +
                    ") + mj_kk * " + PW + ";");
    line(d + 2, "#pragma omp simd");
    line(d + 2,
         "for (i64 mj_t = 0; mj_t < " + PW + "; ++mj_t) mj_dst[mj_t] = mj_row[mj_q + mj_t];");
    line(d + 1, "}");
    line(d, "}");
  }

  // Whether an operand is better packed one row at a time along the reduction: its loads run
  // along the reduction's one loop and not along its rows (a row-major A, a transposed B).
  // Then the loads are contiguous and any prologue (softmax's exp, a normalisation) vectorises
  // along the reduction, where packing across the panel's rows (pw of them, strided) would
  // load and compute lane by lane. Plain copies too: the FFN's second product ([1024,512] x
  // [512,128], A row-major) packed A in 190 of its 830 us panel by panel, 80 this way
  // (measured). A guard that tests the row only (a gather's bounds) is uniform along the
  // reduction; other guards keep the row-wise packing and its hoisted tests.
  static bool packs_along_reduction(const KStmt& r, const std::vector<KStmt>& prologue,
                                    const std::vector<size_t>& stmts, int own) {
    if (r.loops.size() != 1) return false;
    const int red = r.loops[0].var;
    std::vector<const KStmt*> all;
    for (const KStmt& st : prologue) all.push_back(&st);
    for (size_t s : stmts) all.push_back(&r.body->stmts[s]);
    bool along = false;
    for (size_t k = 0; k < all.size(); ++k) {
      const KStmt* st = all[k];
      // A guard that tests the row only (a gather's bounds) is the same along the reduction;
      // bounds of the reduction step itself (an affine comparison: the gathered row's columns)
      // are masks in the vector loop.
      if (st->kind == KOp::Guard) {
        if (!st->cond || !st->body) return false;
        std::vector<IndexExprPtr> fixed, varying;
        split_conjuncts(st->cond, {red}, fixed, varying);
        for (const IndexExprPtr& e : varying)
          if (!is_affine_comparison(*e, red)) return false;
        for (const KStmt& inner : st->body->stmts) all.push_back(&inner);
      }
      if (st->kind != KOp::Load || st->index.empty()) continue;
      const IndexExpr& last = *st->index.back();
      if (ix_reads_var(last, own)) return false;
      along = along || ix_reads_var(last, red);
    }
    return along;
  }

  // One packed element: `var` = `row`, the operand's statements and its value when `inside`
  // holds, else 0; stored to `target`.
  void packed_element(const std::string& inside, const std::string& var, const std::string& row,
                      const std::vector<KStmt>& body, int value, const std::string& target, int d) {
    line(d, "float mj_v = 0;");
    line(d, "if (" + inside + ") {");
    line(d + 1, "const i64 " + var + " = " + row + ";");
    for (const KStmt& st : body) stmt(st, d + 1);
    line(d + 1, "mj_v = " + v(value) + ";");
    line(d, "}");
    line(d, target + " = mj_v;");
  }

  // Every statement of `stmts`, guards' bodies included.
  static void flatten(const std::vector<KStmt>& stmts, std::vector<const KStmt*>& out) {
    for (const KStmt& st : stmts) {
      out.push_back(&st);
      if (st.kind == KOp::Guard && st.body) flatten(st.body->stmts, out);
    }
  }

  // Whether pack_operand computes the operand's rows in vector loops through a row buffer (when
  // it packs across the rows, not along the reduction): for a transcendental, or for work on
  // rows along memory: a prologue, or row tests that are not affine (a head merge's i / 64,
  // i % 64, which pack_panels tests element by element). A copy of such rows, or one under
  // affine tests (a transpose), is no faster through the buffer (a weight gradient's
  // transposed activations: 596 against 634 us, and 660 against 635, measured) and keeps the
  // panel loop.
  static bool packs_through_buffer(const KStmt& r, const std::vector<KStmt>& prologue,
                                   const std::vector<size_t>& stmts, int own,
                                   const RowTests& tests) {
    std::vector<KStmt> all = prologue;
    for (size_t s : stmts) all.push_back(r.body->stmts[s]);
    std::vector<const KStmt*> flat;
    flatten(all, flat);
    bool transcendental = false, work = false;
    for (const KStmt* st : flat) {
      transcendental =
          transcendental || (st->kind == KOp::Unary && is_transcendental(UnaryOp(st->op)));
      work = work || st->kind == KOp::Unary || st->kind == KOp::Binary || st->kind == KOp::Where ||
             st->kind == KOp::Cast;
    }
    work = work || !all_affine(tests.rows, own) || !all_affine(tests.steps, own);
    return transcendental || (work && reads_along_rows(all, own));
  }

  // Whether a load (also under a guard) runs along the operand's rows in its last index: then
  // consecutive rows are (nearly) contiguous and a vector loop over the rows reads whole cache
  // lines. Rows that are a stride apart (a row-major A) read better pw streams at a time, as the
  // guarded panel loop does: through the row buffer they became gathers (dX = dY W^T on AVX2,
  // 5-15% slower, measured).
  static bool reads_along_rows(const std::vector<KStmt>& stmts, int own) {
    std::vector<const KStmt*> flat;
    flatten(stmts, flat);
    for (const KStmt* st : flat)
      if (st->kind == KOp::Load && !st->index.empty() && ix_reads_var(*st->index.back(), own))
        return true;
    return false;
  }

  // pack_operand's layout, written row by row: for each of the panel's rows, a vector loop
  // along the reduction steps (stores pw floats apart).
  void pack_along_reduction(const KStmt& r, const std::vector<KStmt>& prologue,
                            const std::vector<size_t>& stmts, int value, const std::string& var,
                            int pw, const std::string& dst, const std::string& ps,
                            const std::string& x0, const std::string& n, const std::string& npad,
                            const std::string& k0, const std::string& kn, int d) {
    const std::string PW = std::to_string(pw);
    const std::string red = "i" + std::to_string(r.loops[0].var);
    line(d, "for (i64 mj_q = 0; mj_q < " + npad + "; mj_q += " + PW + ") {");
    line(d + 1, "float* const mj_dst = " + dst + " + (mj_q / " + PW + ") * (" + ps + ");");
    std::vector<KStmt> body = prologue, unguarded = prologue;
    for (size_t s : stmts) body.push_back(r.body->stmts[s]);
    const std::vector<IndexExprPtr> tests = step_span_tests(body, r.loops[0].var, unguarded);
    const int W = tile_.vector_floats;
    if (W > 1 && (pw % W == 0 || pw == tile_.mr)) {
      transposed_panel(body, unguarded, tests, value, var, pw, x0, n, k0, kn, red, d + 1);
      line(d, "}");
      return;
    }
    // Only the portable target (no vector registers) gets here with panels of rows.
    const std::vector<KStmt>& copy = tests.empty() ? body : unguarded;
    const bool interleaved = pw <= kInterleavedPanelRows && only_copies(copy);
    if (interleaved) {
      interleaved_panel(copy, tests, value, var, pw, x0, n, k0, kn, red, d + 1);
      line(d + 1, "if (!mj_whole) {");
      ++d;
    }
    line(d + 1, "for (i64 mj_t = 0; mj_t < " + PW + "; ++mj_t) {");
    line(d + 2, "if (mj_q + mj_t < " + n + ") {");
    line(d + 3, "const i64 " + var + " = " + x0 + " + mj_q + mj_t;");
    guarded_step_loop(body, unguarded, tests, value, red, k0, "0", kn,
                      "mj_dst[mj_kk * " + PW + " + mj_t]", d + 3);
    line(d + 2, "} else {");
    line(d + 3,
         "for (i64 mj_kk = 0; mj_kk < " + kn + "; ++mj_kk) mj_dst[mj_kk * " + PW + " + mj_t] = 0;");
    line(d + 2, "}");
    line(d + 1, "}");
    if (interleaved) line(d--, "}");
    line(d, "}");
  }

  // One row's values along steps [from, from + count) of the reduction (k0 + from + mj_kk),
  // each stored to `store` (an expression of mj_kk). With `tests` (guards affine in the step),
  // a block whose first and last steps pass them runs `unguarded`, a plain copy with no masked
  // loads or blends (vmaskmovps stalled packing v from a packed qkv on AMD EPYC, perf annotate).
  void guarded_step_loop(const std::vector<KStmt>& body, const std::vector<KStmt>& unguarded,
                         const std::vector<IndexExprPtr>& tests, int value,
                         const std::string& red, const std::string& k0, const std::string& from,
                         const std::string& count, const std::string& store, int d) {
    auto loop = [&](const std::vector<KStmt>& b, int e) {
      line(e, "#pragma omp simd");
      line(e, "for (i64 mj_kk = 0; mj_kk < " + count + "; ++mj_kk) {");
      line(e + 1, "const i64 " + red + " = " + k0 + " + " + from + " + mj_kk;");
      for (const KStmt& st : b) stmt(st, e + 1);
      line(e + 1, store + " = " + v(value) + ";");
      line(e, "}");
    };
    if (tests.empty()) {
      loop(body, d);
      return;
    }
    const std::string first = k0 + " + " + from;
    line(d, "bool mj_kspan = " + count + " > 0;");
    span_check("mj_kspan", tests, red, {first, first + " + " + count + " - 1"}, d);
    line(d, "if (mj_kspan) {");
    loop(unguarded, d + 1);
    line(d, "} else {");
    loop(body, d + 1);
    line(d, "}");
  }

  // Steps of the reduction packed per transposing tile: a B panel read along the reduction
  // (k^T in q.k^T, a head split's v^T) has its pw columns pw floats apart in the panel, and
  // g++ stored them one scalar at a time (55% of the attention product dP = dO.V^T's time,
  // perf annotate on AMD EPYC); so did an A panel of mr rows with a prologue (a LayerNorm),
  // and one of plain copies (interleaved_panel) still two scalar moves per element. Instead a
  // group of rows (W columns of B, or A's mr rows) goes row by row into a tile, in vectors with
  // its prologue, and W steps at a time of the tile go into the panel in registers:
  // mj_transpose (W x W) or mj_interleave (mr rows). Chunks of kTransposeSteps steps keep the
  // tile in L1.
  static constexpr int kTransposeSteps = 128;
  void transposed_panel(const std::vector<KStmt>& body, const std::vector<KStmt>& unguarded,
                        const std::vector<IndexExprPtr>& tests, int value,
                        const std::string& var, int pw, const std::string& x0,
                        const std::string& n, const std::string& k0, const std::string& kn,
                        const std::string& red, int d) {
    const int w = tile_.vector_floats, g = pw % w == 0 ? w : pw;
    const std::string PW = std::to_string(pw), W = std::to_string(w), G = std::to_string(g),
                      CH = std::to_string(kTransposeSteps);
    line(d, "for (i64 mj_g = 0; mj_g < " + PW + "; mj_g += " + G + ") {");
    line(d + 1, "for (i64 mj_c0 = 0; mj_c0 < " + kn + "; mj_c0 += " + CH + ") {");
    line(d + 2, "const i64 mj_cn = " + kn + " - mj_c0 < " + CH + " ? " + kn + " - mj_c0 : " + CH +
                    ";");
    line(d + 2, "float mj_tile[" + G + " * " + CH + "];");
    line(d + 2, "for (i64 mj_t = 0; mj_t < " + G + "; ++mj_t) {");
    line(d + 3, "float* const mj_tr = mj_tile + mj_t * " + CH + ";");
    line(d + 3, "if (mj_q + mj_g + mj_t < " + n + ") {");
    line(d + 4, "const i64 " + var + " = " + x0 + " + mj_q + mj_g + mj_t;");
    guarded_step_loop(body, unguarded, tests, value, red, k0, "mj_c0", "mj_cn", "mj_tr[mj_kk]",
                      d + 4);
    line(d + 3, "} else {");
    line(d + 4, "for (i64 mj_kk = 0; mj_kk < mj_cn; ++mj_kk) mj_tr[mj_kk] = 0;");
    line(d + 3, "}");
    line(d + 2, "}");
    line(d + 2, "i64 mj_kk = 0;");
    line(d + 2, "for (; mj_kk + " + W + " <= mj_cn; mj_kk += " + W + ")");
    const std::string at = "mj_dst + (mj_c0 + mj_kk) * " + PW + " + mj_g";
    line(d + 3, g == w ? "mj_transpose(mj_tile + mj_kk, " + CH + ", " + at + ", " + PW + ");"
                       : "mj_interleave(mj_tile + mj_kk, " + CH + ", " + at + ");");
    line(d + 2, "for (; mj_kk < mj_cn; ++mj_kk)");
    line(d + 3, "for (i64 mj_t = 0; mj_t < " + G + "; ++mj_t)");
    line(d + 4, "mj_dst[(mj_c0 + mj_kk) * " + PW + " + mj_g + mj_t] = mj_tile[mj_t * " + CH +
                    " + mj_kk];");
    line(d + 1, "}");
    line(d, "}");
  }

  // Panels at most this many rows (A's mr) are packed all rows in one loop along the steps.
  static constexpr int kInterleavedPanelRows = 8;

  static bool only_copies(const std::vector<KStmt>& stmts) {
    for (const KStmt& st : stmts)
      if (st.kind != KOp::Load && st.kind != KOp::Cast) return false;
    return true;
  }

  // A whole panel of pw rows of copies (`mj_whole`: all in range and, with `tests`, passing
  // them at the block's first and last step) in one loop along the steps, each row's
  // statements in a scope of their own: the pw stores of a step are adjacent. g++ vectorises
  // neither form (a store group of 6 is neither a power of 2 nor 3), but the row-by-row loop's
  // vector loads then cost an extract and a scalar store per lane, pw floats apart: a 96x128
  // block of a row-major A packed in 3.4 us that way, 1.9 us this way, on AVX-512 and AVX2
  // alike; dX = dY W ([1024,512]x[512,128]) 780 -> 745 us a call. A prologue (softmax's exp,
  // a normalisation) keeps the row-by-row loop, where it is computed in vectors. Targets with
  // vector registers pack such panels through transposed_panel's tile instead (faster still:
  // LayerNorm -> [1024,512]x[512,128] 818 -> 760 us); this is the portable target's path.
  void interleaved_panel(const std::vector<KStmt>& body, const std::vector<IndexExprPtr>& tests,
                         int value, const std::string& var, int pw, const std::string& x0,
                         const std::string& n, const std::string& k0, const std::string& kn,
                         const std::string& red, int d) {
    const std::string PW = std::to_string(pw);
    line(d, "bool mj_whole = mj_q + " + PW + " <= " + n + " && " + kn + " > 0;");
    for (int t = 0; !tests.empty() && t < pw; ++t) {
      line(d, "if (mj_whole) {");
      line(d + 1, "const i64 " + var + " = " + x0 + " + mj_q + " + std::to_string(t) + ";");
      span_check("mj_whole", tests, red, {k0, k0 + " + " + kn + " - 1"}, d + 1);
      line(d, "}");
    }
    line(d, "if (mj_whole) {");
    line(d + 1, "for (i64 mj_kk = 0; mj_kk < " + kn + "; ++mj_kk) {");
    line(d + 2, "const i64 " + red + " = " + k0 + " + mj_kk;");
    for (int t = 0; t < pw; ++t) {
      line(d + 2, "{");
      line(d + 3, "const i64 " + var + " = " + x0 + " + mj_q + " + std::to_string(t) + ";");
      for (const KStmt& st : body) stmt(st, d + 3);
      line(d + 3, "mj_dst[mj_kk * " + PW + " + " + std::to_string(t) + "] = " + v(value) + ";");
      line(d + 2, "}");
    }
    line(d + 1, "}");
    line(d, "}");
  }

  // The conditions of an operand's guards (pack_along_reduction), nested ones included, when
  // each holds on an interval of reduction steps `red` (its conjuncts that read `red` are
  // affine comparisons); `unguarded` gets the statements with every guard passed
  // (codegen/guard_intervals.h). Empty when there is no guard or one does not qualify. A head
  // split read from a packed qkv nests three reindexes' guards: q.k^T packed element by
  // element under them ran at 440 us a call, 16.7 MFLOP.
  static std::vector<IndexExprPtr> step_span_tests(const std::vector<KStmt>& body, int red,
                                                   std::vector<KStmt>& unguarded) {
    std::vector<IndexExprPtr> tests;
    unguarded.clear();
    std::vector<const KStmt*> flat;
    flatten(body, flat);
    for (const KStmt* st : flat) {
      if (st->kind == KOp::Reduce) return {};
      if (st->kind != KOp::Guard) continue;
      if (!st->cond || !st->body) return {};
      std::vector<IndexExprPtr> fixed, varying;
      split_conjuncts(st->cond, {red}, fixed, varying);
      for (const IndexExprPtr& e : varying)
        if (!is_affine_comparison(*e, red)) return {};
      tests.push_back(st->cond);
    }
    if (!tests.empty()) unguarded = guards_passed(KBlock{body, -1});
    return tests;
  }

  // Loop variable numbers for values hoisted out of packing loops: no kernel has this many loops.
  static constexpr int kHoistedVar = 1 << 20;
  // Rows packed per vector loop (rounded up to whole panels): four 16-float vectors.
  static constexpr int kPackRows = 64;

  // Whether `e` compares two sides that are affine in loop variable `var` (sums of constants,
  // other variables and constant multiples of `var`; no division or modulo of `var`): then the
  // values of `var` that pass it form an interval.
  static bool is_affine_comparison(const IndexExpr& e, int var) {
    if (e.kind != IxKind::Lt && e.kind != IxKind::Le && e.kind != IxKind::Gt &&
        e.kind != IxKind::Ge)
      return false;
    return is_affine_in(*e.a, var) && is_affine_in(*e.b, var);
  }
  static bool is_affine_in(const IndexExpr& e, int var) {
    if (!ix_reads_var(e, var)) return true;
    switch (e.kind) {
      case IxKind::Var:
        return true;
      case IxKind::Neg:
        return is_affine_in(*e.a, var);
      case IxKind::Add:
      case IxKind::Sub:
        return is_affine_in(*e.a, var) && is_affine_in(*e.b, var);
      case IxKind::Mul:  // one side free of `var` and constant along the panel
        return (e.a->kind == IxKind::Const && is_affine_in(*e.b, var)) ||
               (e.b->kind == IxKind::Const && is_affine_in(*e.a, var));
      default:
        return false;
    }
  }

  // The conjuncts of `cond` (an && tree) that read neither loop variable `var` nor `var2`, and
  // those that do.
  static void split_conjuncts(const IndexExprPtr& cond, const std::set<int>& vars,
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

  // Packs operand `side` (0: A, rows `var`, panels of pw = mr; 1: B, columns, pw = nr) once for
  // the whole launch into mj_apre / mj_bpre (taken from scratch slot `side`) when `reused`
  // holds at run time, panels in parallel. Panels go in groups of at least kPackRows rows where the
  // rows go through the row buffer or lie along memory: each reduction step then reads a run of
  // the operand's rows (contiguous: a transposed A, a row-major B), not one panel's pw (a
  // row-major B's panels one at a time read one cache line per row, 2 KiB apart: the
  // transformer's FFN weight gradient packing its dH spent 2.4% of the step's samples against
  // 1.8% in groups; in one share per thread 2.2%, perf on AMD EPYC). Rows a stride apart stay
  // one panel at a time:
  // 66 of them per step are more streams than the prefetchers follow (conv2d's weight gradient
  // packing dY once per launch: 9% slower in groups, measured).
  void pack_operand_once(const KStmt& r, const std::vector<KStmt>& pre,
                         const std::vector<size_t>& stmts, int value, const std::string& var,
                         int pw, int side, const MergedColumns* merged, const std::string& reused) {
    const int own = std::stoi(var.substr(1));
    const std::string buf = side == 0 ? "mj_apre" : "mj_bpre",
                      pad = side == 0 ? "mj_eip" : "mj_ejp";
    const std::string PW = std::to_string(pw), extent = side == 0 ? "mj_ei" : "mj_ej";
    line(1,
         "if (" + reused + " && mj_k > 0 && " + pad + " > 0 && " + pad + " * mj_k <= (1LL << 28))");
    line(2, buf + " = mj_take(" + std::to_string(side) + ", sizeof(float) * " + pad + " * mj_k);");
    line(1, "if (" + buf + ") {");
    std::vector<KStmt> all = pre;
    for (size_t s : stmts) all.push_back(r.body->stmts[s]);
    const bool grouped = !merged && !packs_along_reduction(r, pre, stmts, own) &&
                         (packs_through_buffer(r, pre, stmts, own, row_tests(r, stmts, own)) ||
                          reads_along_rows(all, own));
    const std::string G = std::to_string(grouped ? (kPackRows + pw - 1) / pw : 1);
    const std::string panels = pad + " / " + PW;
    line(2, "#pragma omp parallel for schedule(static) if(" + pad + " * mj_k > 32768)");
    line(2, "for (i64 mj_p = 0; mj_p < " + panels + "; mj_p += " + G + ") {");
    line(3, "const i64 mj_pn = (" + panels + " - mj_p < " + G + " ? " + panels + " - mj_p : " + G +
                ") * " + PW + ";");
    pack_operand(r, pre, stmts, value, var, pw, buf + " + mj_p * mj_k * " + PW, "mj_k * " + PW,
                 "mj_p * " + PW, "(" + extent + " - mj_p * " + PW + ")", "mj_pn", "0", "mj_k", 3,
                 merged);
    line(2, "}");
    line(1, "}");
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
  void contraction_kernel(const KernelIR& ir, const std::vector<int>& levels,
                          const std::vector<int>& level_of_value, const ContractionSchedule& cs,
                          const std::string& store) {
    const Contraction& c = cs.match;
    const KStmt& r = ir.body.stmts[c.reduce_index];
    const std::string iv = "i" + std::to_string(c.i_var), jv = "i" + std::to_string(c.j_var);
    const ContractionLoops cl = contraction_loops(ir, c);
    std::vector<const KLoop*> outer = cl.outer;
    std::optional<MergedColumns> merged;
    std::vector<KStmt> a_pre, b_pre;
    for (size_t s : c.a_outer) a_pre.push_back(ir.body.stmts[s]);
    for (size_t s : c.b_outer) b_pre.push_back(ir.body.stmts[s]);
    if (!cs.merged_outer_vars.empty()) {
      MergedColumns m;
      for (int o : cs.merged_outer_vars) {
        const auto at =
            std::find_if(outer.begin(), outer.end(), [&](const KLoop* l) { return l->var == o; });
        m.outer_vars.push_back(o);
        m.outer_extents.push_back(ix(*(*at)->extent));
        outer.erase(at);
      }
      merged = std::move(m);
    }
    const std::string ei = ix(*cl.i->extent);
    const std::string eji = ix(*cl.j->extent);
    const bool a_once = cs.a_once, b_once = cs.b_once;
    const MergedColumns* mc = merged ? &*merged : nullptr;
    const ContractionTile wide = cs.wide, narrow = cs.narrow;
    const bool two_tiles = !(narrow == wide);
    helpers_ += kCppContractionPrelude;
    helpers_ += micro_kernel(wide, "mj_micro", true);
    if (two_tiles) helpers_ += micro_kernel(narrow, "mj_micro_narrow", false);
    if (wide.vector_floats > 1) {
      helpers_ += transpose_helper(wide.vector_floats);
      helpers_ += interleave_helper(wide.vector_floats, wide.mr);
    }

    // The schedule for tile `t`, its micro-kernel the function `micro`.
    auto schedule = [&](const ContractionTile& t, const std::string& micro) {
      const std::string MR = std::to_string(t.mr), NR = std::to_string(t.nr);
      line(1, "const i64 mj_k = " + work(r.loops) + ";");
      if (merged) {
        std::string eo;
        for (const std::string& e : merged->outer_extents) eo += (eo.empty() ? "" : " * ") + e;
        line(1, "const i64 mj_eji = " + eji + ";");
        line(1, "const i64 mj_ei = " + ei + ", mj_ej = " + eo + " * mj_eji;");
      } else {
        line(1, "const i64 mj_ei = " + ei + ", mj_ej = " + eji + ";");
      }
      // Reduction blocks of equal length (no short last block), rows and columns per work item
      // no larger than the matrix (rounded to the tile).
      line(1, "const i64 mj_nkb = mj_k > " + std::to_string(t.kc) + " ? (mj_k + " +
                  std::to_string(t.kc - 1) + ") / " + std::to_string(t.kc) + " : 1;");
      line(1, "const i64 mj_kc = mj_k > 0 ? (mj_k + mj_nkb - 1) / mj_nkb : 1;");
      line(1, "const i64 mj_eip = (mj_ei + " + MR + " - 1) / " + MR + " * " + MR +
                  ", mj_ejp = (mj_ej + " + NR + " - 1) / " + NR + " * " + NR + ";");
      // Blocks of equal size (in whole tiles): 1024 rows are 8 blocks of 132, not 7 of 144 and
      // one of 16, which would leave one thread a seventh of the work behind the other.
      // Row blocks are counted last, as many as make the rounds of the threads even
      // (mj_row_blocks), their sizes within one tile of each other.
      std::string per_row_block = "mj_nb";
      for (const KLoop* l : outer) per_row_block += " * (" + ix(*l->extent) + ")";
      for (const char* side : {"n", "m"}) {
        const bool m = side[0] == 'm';
        const std::string pad = m ? "mj_eip" : "mj_ejp", T = m ? MR : NR;
        const std::string cap = std::to_string(m ? t.mc : t.nc);
        const std::string b = std::string("mj_") + side + "b";
        std::string blocks = "(" + pad + " + " + cap + " - 1) / " + cap;
        if (m)
          blocks = "mj_row_blocks(" + blocks + ", " + per_row_block + ", " + pad + " / " + T + ")";
        line(1, "const i64 " + b + " = " + blocks + ";");
        line(1, "const i64 mj_" + std::string(side) + "c = " + b + " > 0 ? ((" + pad + " / " + T +
                    " + " + b + " - 1) / " + b + ") * " + T + " : 0;");
      }
      // Row block mj_bi has mj_mtb tiles, one more when mj_bi < mj_mte (mj_mc is the larger).
      line(1, "const i64 mj_mtb = mj_mb > 0 ? mj_eip / " + MR + " / mj_mb : 0, mj_mte = mj_mb > 0 "
              "? mj_eip / " + MR + " % mj_mb : 0;");
      // Operands packed once: every panel over the whole reduction, panels in parallel, when
      // the panels are used by more than one block (A by the column blocks and the outer
      // iterations, B by the row blocks and the outer iterations). Used by one, they are
      // packed per block like the others: the block's panels stay in L2 where the whole
      // operand packed once went through memory (a GELU MLP's weight gradient, 512 x 1024^T x
      // 128 in one column block: 10% faster, 17% with cold caches, measured).
      std::string outer_work = "1";
      for (const KLoop* l : outer) outer_work += " * (" + ix(*l->extent) + ")";
      line(1, "float* mj_apre = 0;");
      if (a_once)
        pack_operand_once(r, a_pre, c.a_stmts, c.a, iv, t.mr, 0, nullptr,
                          "mj_nb * " + outer_work + " > 1");
      line(1, "float* mj_bpre = 0;");
      if (b_once)
        pack_operand_once(r, b_pre, c.b_stmts, c.b, jv, t.nr, 1, mc,
                          "mj_mb * " + outer_work + " > 1");
      line(1, "const i64 mj_per_thread = mj_mc * mj_kc + mj_kc * mj_nc + mj_mc * mj_nc;");
      line(1,
           "float* mj_scratch = mj_take(2, sizeof(float) * (mj_per_thread > 0 ? mj_per_thread "
           ": 1) * omp_get_max_threads());");
      line(1, "if (mj_scratch) {");
      std::string w = work(ir.loops) + " * mj_k";
      // Static: a thread takes the same rows in consecutive kernels, as in the map kernels'
      // static split, so what it wrote is still in its own core's caches. The row blocks are
      // as many as make the threads' rounds even, within one tile of each other
      // (mj_row_blocks), so a static share loses no balance where the rounds are even. On
      // this project's shared 2-vCPU machines the two vCPUs sometimes sit on different core
      // complexes (two L3s; each alone streams memory at a different speed then): there the
      // GPT forward took 19.5 ms with blocks handed out dynamically, 17.2 static, and 12.7
      // either way otherwise (AVX2, bench --serve-gpt).
      line(2, "#pragma omp parallel for collapse(" + std::to_string(outer.size() + 2) +
                  ") schedule(static) if(" + w + " > 32768)");
      int d = 2;
      for (const KLoop* l : outer) {
        const std::string i = "i" + std::to_string(l->var);
        line(d++, "for (i64 " + i + " = 0; " + i + " < " + ix(*l->extent) + "; ++" + i + ") {");
      }
      line(d++, "for (i64 mj_bi = 0; mj_bi < mj_mb; ++mj_bi) {");
      line(d++, "for (i64 mj_bj = 0; mj_bj < mj_nb; ++mj_bj) {");
      line(d, "float* const mj_ap = mj_scratch + (i64)omp_get_thread_num() * mj_per_thread;");
      line(d, "float* const mj_bp = mj_ap + mj_mc * mj_kc;");
      line(d, "float* const mj_cb = mj_bp + mj_kc * mj_nc;");
      line(d, "const i64 mj_i0 = (mj_bi * mj_mtb + (mj_bi < mj_mte ? mj_bi : mj_mte)) * " + MR +
                  ", mj_j0 = mj_bj * mj_nc;");
      line(d, "const i64 mj_ib = (mj_mtb + (mj_bi < mj_mte)) * " + MR + ";");
      line(d, "const i64 mj_in = (mj_ei - mj_i0) < mj_ib ? (mj_ei - mj_i0) : mj_ib;");
      line(d, "const i64 mj_jn = (mj_ej - mj_j0) < mj_nc ? (mj_ej - mj_j0) : mj_nc;");
      line(d, "const i64 mj_inp = (mj_in + " + MR + " - 1) / " + MR + " * " + MR +
                  ", mj_jnp = (mj_jn + " + NR + " - 1) / " + NR + " * " + NR + ";");
      line(d, "for (i64 mj_pc = 0; mj_pc < mj_k; mj_pc += mj_kc) {");
      ++d;
      line(d, "const i64 mj_kn = (mj_k - mj_pc) < mj_kc ? (mj_k - mj_pc) : mj_kc;");
      // Each operand's panels for this reduction block: the once-packed ones (mj_i0 and mj_j0 are
      // multiples of the tile), or packed here; mj_as / mj_bs is the distance between panels.
      for (int side = 0; side < 2; ++side) {
        const bool a = side == 0;
        const std::string T = a ? MR : NR, name = a ? "a" : "b", x0 = a ? "mj_i0" : "mj_j0";
        const bool once = a ? a_once : b_once;
        const std::string pre = "mj_" + name + "pre";
        line(d, "const float* mj_" + name + " = mj_" + name + "p;");
        line(d, "i64 mj_" + name + "s = mj_kn * " + T + ";");
        if (once) {
          line(d, "if (" + pre + ") {");
          line(d + 1, "mj_" + name + " = " + pre + " + (" + x0 + " / " + T + ") * mj_k * " + T +
                          " + mj_pc * " + T + ";");
          line(d + 1, "mj_" + name + "s = mj_k * " + T + ";");
          line(d, "} else {");
        }
        pack_operand(r, a ? a_pre : b_pre, a ? c.a_stmts : c.b_stmts, a ? c.a : c.b, a ? iv : jv,
                     a ? t.mr : t.nr, "mj_" + name + "p", "mj_kn * " + T, x0, a ? "mj_in" : "mj_jn",
                     a ? "mj_inp" : "mj_jnp", "mj_pc", "mj_kn", d + once, a ? nullptr : mc);
        if (once) line(d, "}");
      }
      // Each B micro-panel stays in L1 while the A panels of the block stream past it.
      line(d, "for (i64 mj_jr = 0; mj_jr < mj_jnp; mj_jr += " + NR + ")");
      line(d + 1, "for (i64 mj_ir = 0; mj_ir < mj_inp; mj_ir += " + MR + ")");
      line(d + 2, micro + "(mj_a + (mj_ir / " + MR + ") * mj_as, mj_b + (mj_jr / " + NR +
                      ") * mj_bs, mj_kn, mj_cb + mj_ir * mj_nc + mj_jr, mj_nc, mj_pc == 0);");
      line(--d, "}");
      // An empty reduction: every sum is 0.
      line(d, "if (mj_k <= 0)");
      line(d + 1, "for (i64 mj_t = 0; mj_t < mj_inp * mj_nc; ++mj_t) mj_cb[mj_t] = 0;");
      // The epilogue: every other statement, per output element of the block.
      line(d, "for (i64 mj_r = 0; mj_r < mj_in; ++mj_r) {");
      line(d + 1, "const i64 " + iv + " = mj_i0 + mj_r;");
      int e = d + 1;
      if (merged) {
        // Row pieces of the merged columns, as in pack_operand: contiguous stores.
        line(e, "i64 mj_jo = mj_j0 / mj_eji, mj_ji = mj_j0 % mj_eji;");
        line(e, "for (i64 mj_c = 0; mj_c < mj_jn;) {");
        line(e + 1,
             "const i64 mj_len = (mj_eji - mj_ji) < (mj_jn - mj_c) ? (mj_eji - mj_ji) : "
             "(mj_jn - mj_c);");
        merged_outer_vars(*merged, e + 1);
        ++e;
      }
      line(e, "#pragma omp simd");
      line(e, std::string("for (i64 mj_t = 0; mj_t < ") + (merged ? "mj_len" : "mj_jn") +
                  "; ++mj_t) {");
      line(e + 1, "const i64 " + jv + " = " + (merged ? "mj_ji" : "mj_j0") + " + mj_t;");
      for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
        if (levels[s] < 0) continue;
        const KStmt& st = ir.body.stmts[s];
        if (s == c.reduce_index) {
          dtypes_[st.id] = st.dtype;
          line(e + 1, std::string("const float ") + v(st.id) + " = mj_cb[mj_r * mj_nc + " +
                          (merged ? "mj_c + " : "") + "mj_t];");
        } else {
          stmt(st, e + 1);
        }
      }
      line(e + 1, store);
      line(e, "}");
      if (merged) {
        line(e, "mj_c += mj_len;");
        line(e, "mj_ji += mj_len;");
        line(e, "if (mj_ji >= mj_eji) { mj_ji -= mj_eji; ++mj_jo; }");
        line(--e, "}");
      }
      line(d, "}");
      for (; d > 2; --d) line(d - 1, "}");
      line(2, "mj_give(2, mj_scratch);");
      line(1, "} else {");
      generic_map(ir, levels, level_of_value, store, 2);
      line(1, "}");
      line(1, "mj_give(0, mj_apre);");
      line(1, "mj_give(1, mj_bpre);");
    };
    if (!two_tiles) {
      schedule(wide, "mj_micro");
      return;
    }
    // The tile is chosen at run time from the number of output columns (kernels are
    // shape-generic): few columns would leave the wide tile's panels mostly padding.
    std::string cols = eji;
    if (merged)
      for (const std::string& e : merged->outer_extents) cols += " * " + e;
    // Wide when its panels would be at most a quarter padding: 256 columns and more, or a
    // multiple of the wide tile's width near enough (128 columns: two whole 64-wide panels).
    const std::string NRW = std::to_string(wide.nr);
    line(1, "const i64 mj_cols = " + cols + ", mj_colsp = (mj_cols + " + NRW + " - 1) / " + NRW +
                " * " + NRW + ";");
    line(1, "if (mj_cols >= " + std::to_string(kWideTileMinColumns) + " || (mj_cols >= " + NRW +
                " && (mj_colsp - mj_cols) * 4 <= mj_colsp)) {");
    ++indent_;
    schedule(wide, "mj_micro");
    --indent_;
    line(1, "} else {");
    ++indent_;
    schedule(narrow, "mj_micro_narrow");
    --indent_;
    line(1, "}");
  }

  // No Reduce in the innermost loop's statements: it can run as one SIMD loop.
  static bool simd_friendly(const KernelIR& ir, const std::vector<int>& levels, int level) {
    const int var = ir.loops[size_t(level)].var;
    for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
      if (levels[s] != level) continue;
      if (ir.body.stmts[s].kind == KOp::Reduce) return false;
      if (gathers_along(ir.body.stmts[s], var)) return false;
    }
    return true;
  }

  // Whether `st` loads at an address that an extra read varying with `var` computes: a gather
  // along that loop. Forced SIMD made it gather instructions, which on an AMD EPYC took 3x the
  // time of the scalar loop GCC writes unforced (gather dim 1 4096x1024, measured); where they
  // pay, GCC's own cost model still vectorises.
  static bool gathers_along(const KStmt& st, int var) {
    if (st.kind == KOp::Load)
      for (const IndexExprPtr& e : st.index)
        if (varying_extra(*e, var)) return true;
    if (st.body)
      for (const KStmt& inner : st.body->stmts)
        if (gathers_along(inner, var)) return true;
    return false;
  }
  static bool varying_extra(const IndexExpr& e, int var) {
    if (e.kind == IxKind::Extra && ix_reads_var(e, var)) return true;
    for (const IndexExprPtr& a : e.args)
      if (varying_extra(*a, var)) return true;
    for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
      if (c && varying_extra(*c, var)) return true;
    return false;
  }

  // The innermost loop in chunks of `dc` (codegen/division_chunks.h): within a chunk each
  // (i + c) / D is a constant and each (i + c) % D is i plus a constant, computed once per
  // chunk (a transformer's qkv gradient, three head-shaped pieces side by side: 575 -> 94 us
  // on AVX2, measured). C division truncates: where a numerator is negative at the chunk's
  // first element (a multiple of D), that element alone runs `inner` unchanged, and the rest
  // of the chunk, D * m + 1 .. D * m + D - 1, has constant quotients again; unless the terms
  // of that numerator are read only where it is >= 0 (read_only_where_nonnegative: the GPT's
  // qkv gradient, 237 -> 183 us a call for [16, 64, 384] in a scratch program).
  void division_chunked_inner(const KernelIR& ir, const std::vector<const KStmt*>& inner,
                              const DivisionChunks& dc, int d, const std::string& store) {
    const KLoop& l = ir.loops.back();
    const std::string i = "i" + std::to_string(l.var), ext = ix(*l.extent);
    const std::string D = std::to_string(dc.divisor);
    const int nq = int(dc.offsets.size());
    const ChunkVars cv{kChunkVar, kChunkVar + nq, kChunkVar + 2 * nq};
    std::vector<KStmt> chunked;
    for (const KStmt* st : inner) chunked.push_back(rewrite_for_chunk(*st, dc, cv));
    std::vector<GuardInterval> intervals = find_guard_intervals(chunked, dc.var);
    int next_var = kChunkVar + 3 * nq;
    hoist_row_tests(intervals, next_var, d);
    line(d, "for (i64 mj_c0 = 0; mj_c0 < " + ext + ";) {");
    line(d + 1, "const i64 mj_ce = mj_c0 + " + D + " - (mj_c0 + " + std::to_string(dc.phase) +
                    ") % " + D + ";");
    line(d + 1, "const i64 mj_c1 = mj_ce < " + ext + " ? mj_ce : " + ext + ";");
    line(d + 1, "i64 mj_cs = mj_c0;");
    std::string negative;  // a numerator < 0 at the chunk's first element
    for (int64_t c : dc.offsets)
      if (c < 0 && !read_only_where_nonnegative(inner, dc, c))
        negative += std::string(negative.empty() ? "" : " || ") + "mj_c0 < " + std::to_string(-c);
    if (!negative.empty()) {
      std::vector<KStmt> same;
      for (const KStmt* st : inner) same.push_back(*st);
      line(d + 1, "if (" + negative + ") {");
      simd_loop(same, i, "mj_c0", "mj_c0 + 1", d + 2, store);
      line(d + 2, "mj_cs = mj_c0 + 1;");
      line(d + 1, "}");
    }
    for (int k = 0; k < nq; ++k) {
      const std::string num = "(mj_cs + " + std::to_string(dc.offsets[size_t(k)]) + ")";
      const std::string q = std::to_string(cv.quotient + k), r = std::to_string(cv.remainder + k);
      line(d + 1, "const i64 i" + q + " = " + num + " / " + D + ";");
      line(d + 1, "const i64 i" + r + " = " + num + " % " + D + " - mj_cs;");
      line(d + 1, "const i64 i" + std::to_string(cv.negative + k) + " = " + num + " < 0;");
    }
    if (!intervals.empty()) {
      partitioned_by_guards(chunked, intervals, "mj_cs", "mj_c1", dc.var, next_var, d + 1, store);
      line(d + 1, "mj_c0 = mj_c1;");
      line(d, "}");
      return;
    }
    // Each guard's tests that no longer read the loop variable, once per chunk and first in
    // its test: g++ then unswitches the loop on them (behind a test of i, 250 against 95 us).
    std::vector<KStmt> rewritten;
    int hoisted = 3 * nq;
    for (KStmt& r : chunked) {
      if (r.kind == KOp::Guard && r.cond) {
        std::vector<IndexExprPtr> fixed, varying;
        split_conjuncts(r.cond, {dc.var}, fixed, varying);
        if (!fixed.empty()) {
          const int name = kChunkVar + hoisted++;
          line(d + 1, "const i64 i" + std::to_string(name) + " = " + ix(*conjunction(fixed)) + ";");
          r.cond = ix_var(name);
          if (!varying.empty()) r.cond = ix_binary(IxKind::And, r.cond, conjunction(varying));
        }
      }
      rewritten.push_back(std::move(r));
    }
    simd_loop(rewritten, i, "mj_cs", "mj_c1", d + 1, store);
    line(d + 1, "mj_c0 = mj_c1;");
    line(d, "}");
  }
  // Loop variable numbers for the chunks' quotients and remainders (beside kHoistedVar's).
  static constexpr int kChunkVar = (1 << 20) + (1 << 16);

  // The loop from `from` to `to` over `stmts` in sub-ranges where every guard of `gs` is one
  // value (open_sub_ranges), run with those values for the guards' tests (guard_fission below).
  // Loop variable numbers from `first_var` on name the values (i<first_var>, ...).
  void partitioned_by_guards(const std::vector<KStmt>& stmts, const std::vector<GuardInterval>& gs,
                             const std::string& from, const std::string& to, int var,
                             int first_var, int d, const std::string& store) {
    int next = first_var;
    const SubRange r = open_sub_ranges(gs, var, from, to, "mj_a", "mj_b", next, d);
    std::vector<KStmt> replaced;
    for (const KStmt& st : stmts) replaced.push_back(replace_guard_tests(st, r.conds));
    const std::string i = "i" + std::to_string(var);
    if (r.all_constant && fissionable(replaced)) {
      guard_fission(replaced, r.value, i, d + 1, store);
    } else {
      simd_loop(replaced, i, "mj_a", "mj_b", d + 1, store);
    }
    line(d + 1, "mj_a = mj_b;");
    line(d, "}");
  }

  // Opens `for (a = from; a < to;) {` over sub-ranges [a, b) of the loop in which every guard of
  // `gs` (codegen/guard_intervals.h) is one value: each guard's fixed tests and interval ends
  // once, then per sub-range its end b (the nearest interval end past a) and the guards' values.
  // The caller writes the sub-range's loop at d + 1 and closes with `a = b; }`. Locals are
  // i<next>, i<next + 1>, ...
  SubRange open_sub_ranges(const std::vector<GuardInterval>& gs, int var, const std::string& from,
                           const std::string& to, const std::string& a, const std::string& b,
                           int& next, int d) {
    std::map<std::string, IndexExprPtr> ends;  // interval end's text -> its local
    auto once = [&](const IndexExprPtr& e) {
      if (e->kind == IxKind::Var || e->kind == IxKind::Param) return e;
      const std::string text = ix(*e);
      auto [it, added] = ends.emplace(text, ix_var(next));
      if (added) line(d, "const i64 i" + std::to_string(next++) + " = " + text + ";");
      return it->second;
    };
    auto both = [](const IndexExprPtr& x, const IndexExprPtr& y) {
      return x ? ix_binary(IxKind::And, x, y) : y;
    };
    std::vector<std::string> tests(gs.size());
    SubRange r;
    for (size_t g = 0; g < gs.size(); ++g) {
      std::vector<std::string> parts;
      IndexExprPtr element;  // the same test of the loop variable, element by element
      if (gs[g].fixed) element = once(gs[g].fixed);
      if (element) parts.push_back(ix(*element));
      if (gs[g].lo) {
        parts.push_back(a + " >= " + ix(*once(gs[g].lo)));
        element = both(element, ix_binary(IxKind::Ge, ix_var(var), once(gs[g].lo)));
      }
      if (gs[g].hi) {
        parts.push_back(a + " < " + ix(*once(gs[g].hi)));
        element = both(element, ix_binary(IxKind::Lt, ix_var(var), once(gs[g].hi)));
      }
      for (const std::string& p : parts) tests[g] += (tests[g].empty() ? "" : " && ") + p;
      if (tests[g].empty()) tests[g] = "1";
      if (gs[g].rest) element = both(element, gs[g].rest);
      r.element_tests[gs[g].guard] = element ? element : ix_const(1);
    }
    line(d, "for (i64 " + a + " = " + from + "; " + a + " < " + to + ";) {");
    line(d + 1, "i64 " + b + " = " + to + ";");
    std::set<std::string> cut;
    for (const GuardInterval& g : gs)
      for (const IndexExprPtr& e : {g.lo, g.hi})
        if (e && cut.insert(ix(*once(e))).second) {
          const std::string x = ix(*once(e));
          line(d + 1, "if (" + x + " > " + a + " && " + x + " < " + b + ") " + b + " = " + x + ";");
        }
    for (size_t g = 0; g < gs.size(); ++g) {
      const int name = next++;
      line(d + 1, "const i64 i" + std::to_string(name) + " = " + tests[g] + ";");
      r.conds[gs[g].guard] =
          gs[g].rest ? ix_binary(IxKind::And, ix_var(name), gs[g].rest) : ix_var(name);
      r.value[gs[g].guard] = "i" + std::to_string(name);
      r.all_constant = r.all_constant && !gs[g].rest;
    }
    return r;
  }

  // The guards' fixed tests and interval ends that read only the kernel's loops (not a chunk's
  // or a sub-range's values), computed once at `d` before the chunks and replaced by their
  // locals: a row's bounds tests, the pieces' offsets.
  void hoist_row_tests(std::vector<GuardInterval>& gs, int& next, int d) {
    auto per_row = [](const IndexExpr& e) {
      std::set<int> vars;
      collect_vars(e, vars);
      return vars.empty() || *vars.rbegin() < kHoistedVar;
    };
    auto hoist = [&](const IndexExprPtr& e) {
      if (e->kind == IxKind::Var || e->kind == IxKind::Const || e->kind == IxKind::Param) return e;
      line(d, "const i64 i" + std::to_string(next) + " = " + ix(*e) + ";");
      return ix_var(next++);
    };
    for (GuardInterval& g : gs) {
      if (g.fixed) {
        std::vector<IndexExprPtr> row, chunk;
        split_conjuncts_by(g.fixed, per_row, row, chunk);
        if (!row.empty()) {
          g.fixed = hoist(conjunction(row));
          if (!chunk.empty()) g.fixed = ix_binary(IxKind::And, g.fixed, conjunction(chunk));
        }
      }
      for (IndexExprPtr* e : {&g.lo, &g.hi})
        if (*e && per_row(**e)) *e = hoist(*e);
    }
  }
  template <class Pred>
  static void split_conjuncts_by(const IndexExprPtr& cond, const Pred& pred,
                                 std::vector<IndexExprPtr>& yes, std::vector<IndexExprPtr>& no) {
    if (cond->kind == IxKind::And) {
      split_conjuncts_by(cond->a, pred, yes, no);
      split_conjuncts_by(cond->b, pred, yes, no);
      return;
    }
    (pred(*cond) ? yes : no).push_back(cond);
  }

  // for (i = from; i < to; ++i) over `stmts`, then the store.
  void simd_loop(const std::vector<KStmt>& stmts, const std::string& i, const std::string& from,
                 const std::string& to, int d, const std::string& store) {
    line(d, "#pragma omp simd");
    line(d, "for (i64 " + i + " = " + from + "; " + i + " < " + to + "; ++" + i + ") {");
    for (const KStmt& st : stmts) stmt(st, d + 1);
    line(d + 1, store);
    line(d, "}");
  }

  static bool fissionable(const std::vector<KStmt>& stmts) {
    bool any = false;
    for (const KStmt& st : stmts)
      if (st.kind == KOp::Guard) {
        if (!self_contained_guard(st)) return false;
        any = true;
      }
    return any;
  }

  // Strips of kFissionStrip elements of a sub-range whose guards are constants (their values
  // in `value`): each top-level guard's values into a stack array by a loop of its own (its
  // body with every guard passed, its scalar, or, when an inner guard fails, the guarded body
  // unvectorised), then the statements reading them. g++ vectorises a loop with a few
  // loop-invariant guards by unswitching it, but not one with nine (three pieces three reindexes
  // deep: a masked load under an invariant bool has no vector type), which then ran scalar.
  void guard_fission(const std::vector<KStmt>& stmts, const std::map<int, std::string>& value,
                     const std::string& i, int d, const std::string& store) {
    const std::string S = std::to_string(kFissionStrip);
    line(d, "for (i64 mj_f = mj_a; mj_f < mj_b; mj_f += " + S + ") {");
    line(d + 1, "const i64 mj_fe = mj_b - mj_f < " + S + " ? mj_b : mj_f + " + S + ";");
    std::vector<KStmt> rest;
    for (const KStmt& st : stmts) {
      if (st.kind != KOp::Guard) {
        rest.push_back(st);
        continue;
      }
      const std::string T = ctype(st.dtype), t = "mj_t" + std::to_string(st.id);
      std::string all;
      for (int id : guard_ids(st)) all += (all.empty() ? "" : " && ") + value.at(id);
      line(d + 1, T + " " + t + "[" + S + "];");
      line(d + 1, "if (" + all + ") {");
      KBlock flat{guards_passed(*st.body), st.body->result};
      strip_loop(flat.stmts, flat.result, t, i, d + 2, true);
      line(d + 1, "} else if (!" + value.at(st.id) + ") {");
      line(d + 2, "for (i64 mj_k = 0; mj_k < mj_fe - mj_f; ++mj_k) " + t + "[mj_k] = " +
                      scalar_arg(st.dtype, st.slot) + ";");
      line(d + 1, "} else {");
      strip_loop({st}, st.id, t, i, d + 2, false);
      line(d + 1, "}");
    }
    line(d + 1, "#pragma omp simd");
    line(d + 1, "for (i64 " + i + " = mj_f; " + i + " < mj_fe; ++" + i + ") {");
    for (const KStmt& st : stmts)
      if (st.kind == KOp::Guard) {
        dtypes_[st.id] = st.dtype;
        line(d + 2, "const " + ctype(st.dtype) + " " + v(st.id) + " = mj_t" +
                        std::to_string(st.id) + "[" + i + " - mj_f];");
      }
    for (const KStmt& st : rest) stmt(st, d + 2);
    line(d + 2, store);
    line(d + 1, "}");
    line(d, "}");
  }
  static constexpr int kFissionStrip = 64;

  // One loop over the strip computing `stmts` and storing value `result` into array `t`.
  void strip_loop(const std::vector<KStmt>& stmts, int result, const std::string& t,
                  const std::string& i, int d, bool simd) {
    if (simd) line(d, "#pragma omp simd");
    line(d, "for (i64 " + i + " = mj_f; " + i + " < mj_fe; ++" + i + ") {");
    for (const KStmt& st : stmts) stmt(st, d + 1);
    line(d + 1, t + "[" + i + " - mj_f] = " + v(result) + ";");
    line(d, "}");
  }


  // Widest strip: 2048 floats (8 KiB) per row keeps the reads streaming; narrower strips
  // only to give every thread one (measured on a 4096x4096 column sum: 256 -> 4.2 GB/s,
  // 1024 -> 18 GB/s on a Xeon; 1024 -> 2048: 3.8 -> 3.6 ms on an EPYC).
  static constexpr int kStrip = 2048;
  static constexpr int kRowUnroll = 4;  // the combine above is written for four

  // The innermost output loop in strips of kStrip: each interchanged reduction accumulates a
  // strip of outputs with its reduced loops outside and the strip inside (contiguous, SIMD);
  // then the strip's outputs are finished in one more SIMD loop.
  void strip_mined_inner(const KernelIR& ir, const std::vector<int>& levels,
                         const std::vector<size_t>& interchanged, int d, const std::string& store) {
    const int k = int(ir.loops.size());
    const KLoop& l = ir.loops[size_t(k - 1)];
    const std::string i = "i" + std::to_string(l.var), ext = ix(*l.extent);
    line(d, "for (i64 jb = 0; jb < " + ext + "; jb += mj_jw) {");
    ++d;
    line(d, "const i64 jn = (" + ext + " - jb) < mj_jw ? (" + ext + " - jb) : mj_jw;");
    std::set<size_t> done(interchanged.begin(), interchanged.end());
    for (size_t s : interchanged) {
      const KStmt& st = ir.body.stmts[s];
      const ReduceOp op = ReduceOp(st.op);
      const DType at = acc_dtype(op, st.dtype);
      const std::string acc = "acc" + std::to_string(st.id);
      line(d, ctype(at) + " " + acc + "[" + std::to_string(kStrip) + "];");
      line(d, "for (i64 t = 0; t < jn; ++t) " + acc + "[t] = " + identity(op, at) + ";");
      int dd = d;
      for (size_t n = 0; n + 1 < st.loops.size(); ++n) {
        std::string r = "i" + std::to_string(st.loops[n].var);
        line(dd,
             "for (i64 " + r + " = 0; " + r + " < " + ix(*st.loops[n].extent) + "; ++" + r + ") {");
        ++dd;
      }
      // The innermost reduced loop (the rows) four at a time: the strip's accumulators are
      // read and written once per four rows instead of once per row (a 4096x4096 column sum:
      // 3.8 -> 2.6 ms, measured); then the remaining rows one by one.
      const KLoop& rl = st.loops.back();
      const std::string r = "i" + std::to_string(rl.var), e = ix(*rl.extent);
      // Named per reduction: two column sums of one strip share its scope.
      const std::string R = "mj_r" + std::to_string(st.id);
      line(dd, "i64 " + R + " = 0;");
      line(dd, "for (; " + R + " + " + std::to_string(kRowUnroll) + " <= " + e + "; " + R +
                   " += " + std::to_string(kRowUnroll) + ") {");
      line(dd + 1, "#pragma omp simd");
      line(dd + 1, "for (i64 t = 0; t < jn; ++t) {");
      line(dd + 2, "const i64 " + i + " = jb + t;");
      const std::string A = ctype(at);
      for (int u = 0; u < kRowUnroll; ++u) {
        line(dd + 2, A + " mj_u" + std::to_string(u) + ";");
        line(dd + 2, "{");
        line(dd + 3, "const i64 " + r + " = " + R + " + " + std::to_string(u) + ";");
        block(*st.body, dd + 3);
        line(dd + 3, "mj_u" + std::to_string(u) + " = (" + A + ")" + v(st.body->result) + ";");
        line(dd + 2, "}");
      }
      line(dd + 2, acc + "[t] = " +
                       combine(op, at, acc + "[t]",
                               combine(op, at, combine(op, at, "mj_u0", "mj_u1"),
                                       combine(op, at, "mj_u2", "mj_u3"))) +
                       ";");
      line(dd + 1, "}");
      line(dd, "}");
      line(dd, "for (; " + R + " < " + e + "; ++" + R + ") {");
      line(dd + 1, "#pragma omp simd");
      line(dd + 1, "for (i64 t = 0; t < jn; ++t) {");
      line(dd + 2, "const i64 " + i + " = jb + t;");
      line(dd + 2, "const i64 " + r + " = " + R + ";");
      block(*st.body, dd + 2);
      line(dd + 2, acc + "[t] = " + combine(op, at, acc + "[t]", v(st.body->result)) + ";");
      line(dd + 1, "}");
      line(dd, "}");
      for (size_t n = 0; n + 1 < st.loops.size(); ++n) line(--dd, "}");
    }
    line(d, "#pragma omp simd");
    line(d, "for (i64 t = 0; t < jn; ++t) {");
    line(d + 1, "const i64 " + i + " = jb + t;");
    for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
      if (levels[s] != k - 1) continue;
      const KStmt& st = ir.body.stmts[s];
      if (done.count(s)) {
        const std::string T = ctype(st.dtype);
        dtypes_[st.id] = st.dtype;
        line(d + 1,
             "const " + T + " " + v(st.id) + " = (" + T + ")acc" + std::to_string(st.id) + "[t];");
      } else {
        stmt(st, d + 1);
      }
    }
    line(d + 1, store);
    line(d, "}");
    line(d - 1, "}");
  }

  // A scatter loop whose variable is, by itself, one of the target indices and appears in no
  // other: iterations with different values of it write different elements, so it can be split
  // between threads (and run as SIMD lanes) without changing the order in which any element
  // accumulates. The innermost such loop, or -1. (Embedding's backward: the column loop.)
  static bool contains_reduce(const KBlock& b) {
    for (const KStmt& st : b.stmts)
      if (st.kind == KOp::Reduce || (st.body && contains_reduce(*st.body))) return true;
    return false;
  }

  int independent_scatter_loop() const {
    for (size_t k = ir_.loops.size(); k-- > 0;) {
      const int var = ir_.loops[k].var;
      int own = 0, others = 0;
      for (const IndexExprPtr& t : ir_.target) {
        if (t->kind == IxKind::Var && t->value == var)
          ++own;
        else if (ix_reads_var(*t, var))
          ++others;
      }
      if (own == 1 && others == 0) return int(k);
    }
    return -1;
  }

  void scatter_kernel() {
    ReduceOp op = ReduceOp(ir_.scatter_op);
    std::string n = "1LL";
    for (const auto& d : ir_.output.dims) n += " * " + ix(*d);
    line(1, "const i64 out_n = " + n + ";");
    line(1, "#pragma omp parallel for schedule(static) if(out_n > 32768)");
    line(1, "for (i64 j = 0; j < out_n; ++j) out[j] = " + identity(op, ir_.output.dtype) + ";");
    const int split = independent_scatter_loop();
    std::vector<KLoop> loops = ir_.loops;
    int depth = 1;
    if (split >= 0) {
      // Each thread takes a contiguous range of the independent loop, run innermost; the other
      // loops keep their order, so every element sums its sources in the sequential order.
      const KLoop own = loops[size_t(split)];
      loops.erase(loops.begin() + split);
      const std::string e = ix(*own.extent), i = "i" + std::to_string(own.var);
      line(1, "const i64 mj_se = " + e + ";");
      line(1, "const i64 mj_sc = mj_se < omp_get_max_threads() ? mj_se : omp_get_max_threads();");
      line(1, "#pragma omp parallel for schedule(static) if(" + work(ir_.loops) + " > 32768)");
      line(1, "for (i64 mj_c = 0; mj_c < mj_sc; ++mj_c) {");
      line(2, "const i64 mj_lo = mj_se * mj_c / mj_sc, mj_hi = mj_se * (mj_c + 1) / mj_sc;");
      depth = 2;
      for (size_t k = 0; k < loops.size(); ++k) {
        const std::string l = "i" + std::to_string(loops[k].var);
        line(depth++,
             "for (i64 " + l + " = 0; " + l + " < " + ix(*loops[k].extent) + "; ++" + l + ") {");
      }
      std::vector<IndexExprPtr> more = ir_.target;
      more.push_back(ir_.target_valid);
      std::set<int> outer;
      for (const KLoop& l : loops) outer.insert(l.var);
      hoist_extra_reads(ir_.body, more, outer, depth);
      // The target test, split: what does not depend on the lane is tested once for all of
      // them; 0 <= i and i < extent bound the lanes' range; the rest is tested per lane.
      std::vector<IndexExprPtr> fixed, varying;
      split_conjuncts(ir_.target_valid, {own.var}, fixed, varying);
      std::string hi = "mj_hi";
      valid_.clear();
      for (const IndexExprPtr& c : varying) {
        const bool is_own = c->a && c->a->kind == IxKind::Var && c->a->value == own.var;
        if (is_own && c->kind == IxKind::Ge && ix_is_const(c->b, 0)) continue;  // lo >= 0
        if (is_own && c->kind == IxKind::Lt && !ix_reads_var(*c->b, own.var)) {
          hi = "mj_min(" + hi + ", " + ix(*c->b) + ")";
          continue;
        }
        valid_.push_back(c);
      }
      if (!fixed.empty()) {
        IndexExprPtr f = fixed[0];
        for (size_t k = 1; k < fixed.size(); ++k) f = ix_binary(IxKind::And, f, fixed[k]);
        line(depth++, "if (" + ix(*f) + ") {");
      }
      line(depth, "const i64 mj_ihi = " + hi + ";");
      // A reduction inside would put its own OpenMP construct in the SIMD region.
      if (!contains_reduce(ir_.body)) line(depth, "#pragma omp simd");
      line(depth++, "for (i64 " + i + " = mj_lo; " + i + " < mj_ihi; ++" + i + ") {");
    } else {
      // Targets may collide, so the accumulation runs in order on one thread.
      for (size_t k = 0; k < loops.size(); ++k) {
        const std::string i = "i" + std::to_string(loops[k].var);
        line(depth++,
             "for (i64 " + i + " = 0; " + i + " < " + ix(*loops[k].extent) + "; ++" + i + ") {");
      }
    }
    block(ir_.body, depth);
    IndexExprPtr valid = ir_.target_valid;
    if (split >= 0) {  // the per-lane rest of the split test
      valid = ix_const(1);
      for (const IndexExprPtr& c : valid_)
        valid = ix_is_const(valid, 1) ? c : ix_binary(IxKind::And, valid, c);
    }
    const bool always = ix_is_const(valid, 1);
    if (!always) line(depth++, "if (" + ix(*valid) + ") {");
    line(depth, ctype(ir_.output.dtype) + "& t = out[" + offset("out", ir_.target) + "];");
    line(depth, "t = " + combine(op, ir_.output.dtype, "t", v(ir_.body.result)) + ";");
    while (depth-- > 1) line(depth, "}");
    forget_hoisted_extras();
  }
  std::vector<IndexExprPtr> valid_;  // scatter_kernel: the target test's per-lane conjuncts

  std::optional<RowReuse> row_reuse_;  // set while emitting the scratch-row variant
  CpuTarget target_;
  ContractionTile tile_;
  std::string helpers_;   // functions placed before metajit_kernel (the micro-kernel)
  std::string schedule_;  // the schedule chosen, when it is not the plain one (a comment)
};

}  // namespace

std::string emit_cpp(const KernelIR& ir, const CpuTarget& target) {
  return CppEmitter(ir, target).run();
}

}  // namespace metajit
