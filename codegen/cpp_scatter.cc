// The C++ emitter's scatter kernels (reindex_reduce): the target buffer filled with the
// identity, then the sources accumulated, split between threads along a loop that writes
// distinct elements.
#include <set>
#include <string>
#include <vector>

#include "codegen/cpp_emitter_internal.h"

namespace metajit {

// The scatter kernel the schedule chose (codegen/cpu_schedule.h ScatterSchedule).
void CppEmitter::scatter_kernel() {
  ReduceOp op = ReduceOp(ir_.scatter_op);
  std::string n = "1LL";
  for (const auto& d : ir_.output.dims) n += " * " + ix(*d);
  line(1, "const i64 out_n = " + n + ";");
  line(1, "#pragma omp parallel for schedule(static) if(out_n > 32768)");
  line(1, "for (i64 j = 0; j < out_n; ++j) out[j] = " + identity(op, ir_.output.dtype) + ";");
  const int split = sched_.scatter.split_loop;
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
    if (sched_.scatter.simd) line(depth, "#pragma omp simd");
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
  line(depth, storage_ctype(ir_.output.dtype) + "& t = out[" + offset("out", ir_.target) + "];");
  line(depth, "t = " + combine(op, ir_.output.dtype, "t", v(ir_.body.result)) + ";");
  while (depth-- > 1) line(depth, "}");
  forget_hoisted_extras();
}

}  // namespace metajit
