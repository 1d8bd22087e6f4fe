// The C++ emitter's Reduce statements: OpenMP (SIMD) reductions, and an innermost loop run in
// sub-ranges where its guards are constants (codegen/guard_intervals.h).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpp_emitter_internal.h"

namespace metajit {

// The OpenMP reduction clause for an accumulator `acc` of `op` over dtype `t`.
std::string CppEmitter::reduction_clause(ReduceOp op, DType t, const std::string& acc) {
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
void CppEmitter::reduce_stmt(const KStmt& st, int depth, bool parallel) {
  const DType at = acc_dtype(ReduceOp(st.op), st.dtype);
  const std::string clause = reduction_clause(ReduceOp(st.op), at, "acc" + std::to_string(st.id));
  std::string outer;
  if (parallel)
    outer = std::string("#pragma omp parallel for") + (st.loops.size() == 1 ? " simd " : " ") +
            clause + " schedule(static) if(" + work(st.loops) + " > 32768)";
  sequential_reduce(st, depth, parallel || simd_reductions_ ? "#pragma omp simd " + clause : "",
                    outer);
}

// A reduction whose body reads its innermost loop variable under guards that each hold on an
// interval of it (codegen/guard_intervals.h): the loop runs in sub-ranges in which each guard
// is one value (open_sub_ranges), with no test per element. A causal softmax's row
// statistics read row i of the scores under j <= i: its logsumexp kernel, [16, 4, 64, 64],
// ran 237 -> 148 us on AVX2 (a scratch copy of the GPT's kernel, 2 threads). Extents below
// kMinSimdReduceExtent (pooling windows) keep the plain loop. False, writing nothing, where
// the statement does not qualify.
bool CppEmitter::custom_innermost_reduce(const KStmt& st, const std::string& simd, int d) {
  return partitioned_reduce(st, simd, d);
}

bool CppEmitter::partitioned_reduce(const KStmt& st, const std::string& simd, int d) {
  const KLoop& inner = st.loops.back();
  std::set<int> speculative;
  speculative_buffers(*st.body, speculative);
  if ((row_reuse_ && row_reuse_->reduce_id == st.id) || !speculative.empty()) return false;
  const std::vector<GuardInterval> gs = find_guard_intervals(st.body->stmts, inner.var);
  if (gs.empty()) return false;
  const std::string extent = ix(*inner.extent);
  const std::string a = "mj_ra" + std::to_string(st.id), b = "mj_rb" + std::to_string(st.id);
  line(d, "if (" + extent + " < " + std::to_string(kMinSimdReduceExtent) + ") {");
  // A window this short runs one element at a time: float16 reads by F16C (scalar_halves_).
  const bool scalar = scalar_halves_;
  scalar_halves_ = true;
  reduce_loop(st, st.body->stmts, "0", extent, "", d + 1);
  scalar_halves_ = scalar;
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
void CppEmitter::sub_range_reduce(const KStmt& st, const std::vector<GuardInterval>& gs,
                                  const SubRange& r, const std::string& simd, const std::string& a,
                                  const std::string& b, const std::string& to, int d) {
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
    line(d + 1,
         b + " = " + a + " + (" + b + " - " + a + " + " + W + " - 1) / " + W + " * " + W + ";");
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
    line(d + 1, "if (" + x + " != " + identity(op, at) + ") for (i64 " + i + " = " + a + "; " + i +
                    " < " + b + "; ++" + i + ") " + once);
  line(d, "}");
}

// Whether a statement of `stmts`, or of their bodies, reads loop variable `var`.
bool CppEmitter::stmts_read_var(const std::vector<KStmt>& stmts, int var) {
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

void CppEmitter::reduce_body_extra(const KStmt& st, int d) {
  if (row_reuse_ && row_reuse_->reduce_id == st.id)
    line(d,
         "mj_row[i" + std::to_string(st.loops[0].var) + "] = " + v(row_reuse_->inner_value) + ";");
}

// Opens `for (a = from; a < to;) {` over sub-ranges [a, b) of the loop in which every guard of
// `gs` (codegen/guard_intervals.h) is one value: each guard's fixed tests and interval ends
// once, then per sub-range its end b (the nearest interval end past a) and the guards' values.
// The caller writes the sub-range's loop at d + 1 and closes with `a = b; }`. Locals are
// i<next>, i<next + 1>, ...
CppEmitter::SubRange CppEmitter::open_sub_ranges(const std::vector<GuardInterval>& gs, int var,
                                                 const std::string& from, const std::string& to,
                                                 const std::string& a, const std::string& b,
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

}  // namespace metajit
