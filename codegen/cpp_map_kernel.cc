// The C++ emitter's map kernels: the loop nests the schedule chose (codegen/map_schedule.h),
// their collapsed parallel loops, a reused row, column reductions in strips.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpp_emitter_internal.h"

namespace metajit {

// Map kernels: every top-level statement is placed in the loop it depends on (loop-invariant
// work such as a row's max and sum runs once per row); the outer loops run in parallel, the
// innermost under `omp simd`; a column reduction is interchanged to run along memory.
void CppEmitter::map_kernel() {
  const CpuSchedule& sched = sched_;
  const KernelIR& ir = sched.ir;
  const std::vector<int>& levels = sched.levels;
  const int k = int(ir.loops.size());
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
    contraction_kernel(ir, levels, *sched.contraction, store);
    return;
  }
  if (sched.in_bounds.empty()) {
    map_nest(out_idx, store, 1);
    return;
  }
  std::string fits;
  for (const auto& [extent, limit] : sched.in_bounds.conditions)
    fits += (fits.empty() ? "(" : " && (") + ix(*extent) + " <= " + ix(*limit) + ")";
  line(1, "if (" + fits + ") {");
  in_bounds_ = &sched.in_bounds;
  map_nest(out_idx, store, 2);
  in_bounds_ = nullptr;
  line(1, "} else {");
  map_nest(out_idx, store, 2);
  line(1, "}");
}

// map_kernel's loop nest, at `depth`: with a row reduction's values reused, or plain.
void CppEmitter::map_nest(const std::vector<IndexExprPtr>& out_idx, const std::string& store,
                          int depth) {
  const CpuSchedule& s = sched_;
  if (s.narrow_nest) {
    line(depth, "if (" + ix(*s.ir.loops.back().extent) +
                    " >= " + std::to_string(kMinWindowStripColumns) + ") {");
    generic_map(s.nest, store, depth + 1);
    line(depth, "} else {");
    if (s.flat_nest && in_bounds_) {
      std::set<int> lanes;
      for (size_t l = 1; l < s.ir.loops.size(); ++l) lanes.insert(s.ir.loops[l].var);
      line(depth + 1, "if (" + flat_strip_fits(lanes) + ") {");
      flat_nest(*s.flat_nest, out_idx, depth + 2);
      line(depth + 1, "} else {");
      generic_map(*s.narrow_nest, store, depth + 2);
      line(depth + 1, "}");
    } else {
      generic_map(*s.narrow_nest, store, depth + 1);
    }
    line(depth, "}");
    return;
  }
  if (!s.row_reuse) {
    generic_map(s.nest, store, depth);
    return;
  }
  const RowReuse& rr = *s.row_reuse;
  const KLoop& inner = s.ir.loops.back();
  // Shapes are per-node parameters: that the two loops have one length is checked when the
  // kernel runs.
  const std::string same_length = "(" + ix(*s.ir.body.stmts[rr.reduce_index].loops[0].extent) +
                                  " == " + ix(*inner.extent) + ")";
  if (rr.in_output) {
    // The innermost loop reads the row's values back from the output row (in cache) and
    // overwrites them.
    std::vector<IndexExprPtr> row_start = out_idx;
    row_start.back() = ix_const(0);
    line(depth, "if " + same_length + " {");
    row_reuse_ = &rr;
    row_in_output_ = "out + (" + offset("out", row_start) + ")";
    generic_map(s.reuse_nest, store, depth + 1);
    row_reuse_ = nullptr;
    line(depth, "} else {");
    generic_map(s.nest, store, depth + 1);
    line(depth, "}");
    return;
  }
  // One scratch row per thread; without it, the plain schedule.
  const std::string T = ctype(rr.dtype);
  line(depth, "const i64 mj_rowlen = " + ix(*inner.extent) + ";");
  line(depth, T + "* mj_rows = " + same_length + " ? (" + T + "*)malloc(sizeof(" + T +
                  ") * (mj_rowlen > 0 ? mj_rowlen : 1) * omp_get_max_threads()) : 0;");
  line(depth, "if (mj_rows) {");
  row_reuse_ = &rr;
  row_in_output_.clear();
  generic_map(s.reuse_nest, store, depth + 1);
  row_reuse_ = nullptr;
  line(depth + 1, "free(mj_rows);");
  line(depth, "} else {");
  generic_map(s.nest, store, depth + 1);
  line(depth, "}");
}

// The loop nest `n` of the scheduled kernel (codegen/map_schedule.h) at depth `base`.
void CppEmitter::generic_map(const MapNest& n, const std::string& store, int base) {
  simd_reductions_ = n.simd_reductions;
  const KernelIR& ir = sched_.ir;
  const std::vector<int>& levels = sched_.levels;
  const int k = int(ir.loops.size());
  const bool strips = !n.strips.empty();
  // Statements outside the innermost loop run once per its run, and so do the innermost one's
  // where that loop holds a reduction's loops and is not SIMD (g++ vectorises no loop with a
  // loop inside): there a float16 element converts one at a time by F16C (scalar_halves_).
  bool scalar_innermost = false;
  for (size_t s = 0; s < ir.body.stmts.size(); ++s)
    scalar_innermost = scalar_innermost || (levels[s] == k - 1 &&
                                            ir.body.stmts[s].kind == KOp::Reduce &&
                                            !ir.body.stmts[s].loops.empty());
  scalar_innermost = scalar_innermost && !n.inner_simd && !n.single_simd && !n.half && !strips &&
                     !n.chunks;
  std::string w = work(ir.loops);
  for (const KStmt& st : ir.body.stmts)
    if (st.kind == KOp::Reduce) w += " * " + work(st.loops);
  if (strips) {
    const std::string ext = ix(*ir.loops[size_t(k - 1)].extent);
    // As many strips as a multiple of the threads, each at most kStrip wide: 4097 columns
    // on 2 threads are 6 strips of 688, not 5 of 1024 with a last one of 1.
    const std::string K = std::to_string(kStrip);
    line(base, "const i64 mj_nt = omp_get_max_threads();");
    line(base, "const i64 mj_ns = mj_nt * ((" + ext + " + mj_nt * " + K + " - 1) / (mj_nt * " + K +
                   "));");
    line(base, "const i64 mj_w0 = ((" + ext + " + mj_ns - 1) / mj_ns + 15) / 16 * 16;");
    line(base, "const i64 mj_jw = mj_w0 < 16 ? 16 : mj_w0 > " + K + " ? " + K + " : mj_w0;");
  }
  line(base,
       "#pragma omp parallel for" + std::string(n.single_simd && !n.half ? " simd" : "") +
           (n.collapse > 1 ? " collapse(" + std::to_string(n.collapse) + ")" : std::string()) +
           " schedule(static) if(" + w + " > 32768)");
  int d = base;
  for (int lv = 0; lv < k; ++lv) {
    const KLoop& l = ir.loops[size_t(lv)];
    const std::string i = "i" + std::to_string(l.var);
    const bool innermost = lv == k - 1;
    scalar_halves_ = !innermost || scalar_innermost;
    // Not between a parallel pragma and the loops it takes (the loop itself, or collapsed).
    if (innermost && lv >= n.collapse) {
      std::set<int> outer;
      for (int o = 0; o < lv; ++o) outer.insert(ir.loops[size_t(o)].var);
      hoist_extra_reads(ir.body, {}, outer, d);
      hoist_guard_tests(ir.body, outer, d);
    }
    if (innermost && n.half) {
      half_strip_inner(ir, *n.half, d);
      break;
    }
    if (innermost && strips) {
      strip_mined_inner(ir, n, d, store);
      break;
    }
    if (innermost && n.chunks) {
      std::vector<const KStmt*> inner;
      for (size_t s = 0; s < ir.body.stmts.size(); ++s)
        if (levels[s] == lv) inner.push_back(&ir.body.stmts[s]);
      division_chunked_inner(ir, inner, *n.chunks, d, store);
      break;
    }
    if (innermost && n.inner_simd) line(d, "#pragma omp simd");
    line(d, "for (i64 " + i + " = 0; " + i + " < " + ix(*l.extent) + "; ++" + i + ") {");
    ++d;
    if (innermost && (n.inner_simd || n.single_simd)) simd_var_ = l.var;
    for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
      if (levels[s] != lv) continue;
      if (row_reuse_ && row_reuse_->reduce_id == ir.body.stmts[s].id)
        line(d, (row_in_output_.empty() ? ctype(row_reuse_->dtype)
                                        : storage_ctype(row_reuse_->dtype)) +
                    "* const mj_row = " +
                    (row_in_output_.empty()
                         ? "mj_rows + (i64)omp_get_thread_num() * (mj_rowlen > 0 ? mj_rowlen : 1)"
                         : row_in_output_) +
                    ";");
      stmt(ir.body.stmts[s], d);
    }
    if (innermost && scalar_innermost) {
      std::vector<IndexExprPtr> out_idx;
      for (const KLoop& o : ir.loops) out_idx.push_back(ix_var(o.var));
      line(d, map_store(out_idx, ir.body.result, nullptr, /*one_at_a_time=*/true));
    } else if (innermost) {
      line(d, store);
    }
  }
  for (; d > base; --d) line(d - 1, "}");
  simd_var_ = -1;
  scalar_halves_ = false;
  forget_hoisted_extras();
  guard_tests_.clear();
  simd_reductions_ = true;
}

// The parts of speculative guards' tests (stmt()) that read only `outer` loop variables,
// computed once at `depth` before the innermost loop: a gather's row checks.
void CppEmitter::hoist_guard_tests(const KBlock& b, const std::set<int>& outer, int depth) {
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

// The innermost output loop in strips of kStrip: each interchanged reduction accumulates a
// strip of outputs with its reduced loops outside and the strip inside (contiguous, SIMD);
// then the strip's outputs are finished in one more SIMD loop.
void CppEmitter::strip_mined_inner(const KernelIR& ir, const MapNest& n, int d,
                                   const std::string& store) {
  const std::vector<size_t>& interchanged = n.strips;
  const int k = int(ir.loops.size());
  const KLoop& l = ir.loops[size_t(k - 1)];
  const std::string i = "i" + std::to_string(l.var), ext = ix(*l.extent);
  line(d, "for (i64 jb = 0; jb < " + ext + "; jb += mj_jw) {");
  ++d;
  line(d, "const i64 jn = (" + ext + " - jb) < mj_jw ? (" + ext + " - jb) : mj_jw;");
  std::set<size_t> done(interchanged.begin(), interchanged.end());
  for (size_t s : interchanged)
    column_strip(ir.body.stmts[s], l, d,
                 std::count(n.window_strips.begin(), n.window_strips.end(), s) > 0);
  line(d, "#pragma omp simd");
  line(d, "for (i64 t = 0; t < jn; ++t) {");
  line(d + 1, "const i64 " + i + " = jb + t;");
  strip_outputs(done, d + 1);
  line(d + 1, store);
  line(d, "}");
  line(d - 1, "}");
}

// The innermost loop's statements for output t of a strip, at depth `d`: the interchanged
// reductions (`done`, top-level statement indices) read from their accumulators.
void CppEmitter::strip_outputs(const std::set<size_t>& done, int d) {
  const KernelIR& ir = sched_.ir;
  const int inner = int(ir.loops.size()) - 1;
  for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
    if (sched_.levels[s] != inner) continue;
    const KStmt& st = ir.body.stmts[s];
    if (done.count(s)) {
      const std::string T = ctype(st.dtype);
      dtypes_[st.id] = st.dtype;
      line(d, "const " + T + " " + v(st.id) + " = (" + T + ")acc" + std::to_string(st.id) + "[t];");
    } else {
      stmt(st, d);
    }
  }
}

// Declares reduction `st`'s accumulators for the jn outputs of a strip, each its identity;
// returns their name.
std::string CppEmitter::strip_accumulators(const KStmt& st, int d) {
  const ReduceOp op = ReduceOp(st.op);
  const DType at = acc_dtype(op, st.dtype);
  const std::string acc = "acc" + std::to_string(st.id);
  line(d, ctype(at) + " " + acc + "[" + std::to_string(kStrip) + "];");
  line(d, "for (i64 t = 0; t < jn; ++t) " + acc + "[t] = " + identity(op, at) + ";");
  return acc;
}

// One interchanged column reduction `st` of a strip (strip_mined_inner; `inner` the innermost
// output loop): its accumulators, its reduced loops outside and the strip inside. A window
// reduction (`window`: the schedule's MapNest::window_strips, pooling) steps its innermost
// reduced loop one at a time, each step's bounds tests as an interval of the strip
// (window_strip_step).
void CppEmitter::column_strip(const KStmt& st, const KLoop& inner, int d, bool window) {
  const std::string i = "i" + std::to_string(inner.var);
  std::vector<KStmt> unguarded;
  const std::vector<IndexExprPtr> tests =
      window ? step_span_tests(st.body->stmts, inner.var, unguarded) : std::vector<IndexExprPtr>{};
  const ReduceOp op = ReduceOp(st.op);
  const DType at = acc_dtype(op, st.dtype);
  const std::string acc = strip_accumulators(st, d);
  int dd = d;
  for (size_t n = 0; n + 1 < st.loops.size(); ++n) {
    std::string r = "i" + std::to_string(st.loops[n].var);
    line(dd, "for (i64 " + r + " = 0; " + r + " < " + ix(*st.loops[n].extent) + "; ++" + r + ") {");
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
  if (!tests.empty()) {
    line(dd, "for (; " + R + " < " + e + "; ++" + R + ") {");
    line(dd + 1, "const i64 " + r + " = " + R + ";");
    window_strip_step(st, i, acc, tests, unguarded, dd + 1);
    line(dd, "}");
    for (size_t n = 0; n + 1 < st.loops.size(); ++n) line(--dd, "}");
    return;
  }
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

// One step of a window reduction's innermost reduced loop over the strip: the outputs whose
// reads pass the bounds tests (affine in the output column: one interval, found from the
// strip's two ends) accumulate in a vector loop without them; the others, at the padding, one
// at a time under them. Under the tests every lane was a masked load a stride apart, which g++
// 12 does not vectorise (pooling's 2 * j + dj: "relevant stmt not supported: .MASK_LOAD").
void CppEmitter::window_strip_step(const KStmt& st, const std::string& i, const std::string& acc,
                                   const std::vector<IndexExprPtr>& tests,
                                   const std::vector<KStmt>& unguarded, int d) {
  const ReduceOp op = ReduceOp(st.op);
  const DType at = acc_dtype(op, st.dtype);
  const std::string pass = ix(*conjunction(tests));
  line(d, "i64 mj_lo = 0, mj_hi = jn;");
  interval_from_ends(pass, i, "jb", d);
  // Eight lanes: rows are tens of outputs (56 after ResNet's stem), and a 16-float loop left up
  // to 15 of them in its scalar remainder (3x3 stride-2 pooling of 8x64x112x112: 10.2 ms with
  // 16 lanes, 6.2 with 8, AVX-512).
  auto loop = [&](const std::string& from, const std::string& to, bool simd,
                  const std::vector<KStmt>& body) {
    if (simd) line(d, "#pragma omp simd simdlen(8)");
    line(d, "for (i64 t = " + from + "; t < " + to + "; ++t) {");
    line(d + 1, "const i64 " + i + " = jb + t;");
    block(KBlock{body, st.body->result}, d + 1);
    line(d + 1, acc + "[t] = " + combine(op, at, acc + "[t]", v(st.body->result)) + ";");
    line(d, "}");
  };
  loop("0", "mj_lo", false, st.body->stmts);
  loop("mj_lo", "mj_hi", true, unguarded);
  loop("mj_hi", "jn", false, st.body->stmts);
}

}  // namespace metajit
