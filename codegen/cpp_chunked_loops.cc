// The C++ emitter's chunked innermost loops: in division chunks (codegen/division_chunks.h), in
// sub-ranges where guards are constants (codegen/guard_intervals.h), and guard fission.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpp_emitter_internal.h"

namespace metajit {

// The innermost loop in chunks of `dc` (codegen/division_chunks.h): within a chunk each
// (i + c) / D is a constant and each (i + c) % D is i plus a constant, computed once per
// chunk (a transformer's qkv gradient, three head-shaped pieces side by side: 575 -> 94 us
// on AVX2, measured). C division truncates: where a numerator is negative at the chunk's
// first element (a multiple of D), that element alone runs `inner` unchanged, and the rest
// of the chunk, D * m + 1 .. D * m + D - 1, has constant quotients again; unless the terms
// of that numerator are read only where it is >= 0 (read_only_where_nonnegative: the GPT's
// qkv gradient, 237 -> 183 us a call for [16, 64, 384] in a scratch program).
void CppEmitter::division_chunked_inner(const KernelIR& ir, const std::vector<const KStmt*>& inner,
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

// The loop from `from` to `to` over `stmts` in sub-ranges where every guard of `gs` is one
// value (open_sub_ranges), run with those values for the guards' tests (guard_fission below).
// Loop variable numbers from `first_var` on name the values (i<first_var>, ...).
void CppEmitter::partitioned_by_guards(const std::vector<KStmt>& stmts,
                                       const std::vector<GuardInterval>& gs,
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

// The guards' fixed tests and interval ends that read only the kernel's loops (not a chunk's
// or a sub-range's values), computed once at `d` before the chunks and replaced by their
// locals: a row's bounds tests, the pieces' offsets.
void CppEmitter::hoist_row_tests(std::vector<GuardInterval>& gs, int& next, int d) {
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
void CppEmitter::split_conjuncts_by(const IndexExprPtr& cond, const Pred& pred,
                                    std::vector<IndexExprPtr>& yes, std::vector<IndexExprPtr>& no) {
  if (cond->kind == IxKind::And) {
    split_conjuncts_by(cond->a, pred, yes, no);
    split_conjuncts_by(cond->b, pred, yes, no);
    return;
  }
  (pred(*cond) ? yes : no).push_back(cond);
}

// for (i = from; i < to; ++i) over `stmts`, then the store.
void CppEmitter::simd_loop(const std::vector<KStmt>& stmts, const std::string& i,
                           const std::string& from, const std::string& to, int d,
                           const std::string& store) {
  line(d, "#pragma omp simd");
  line(d, "for (i64 " + i + " = " + from + "; " + i + " < " + to + "; ++" + i + ") {");
  for (const KStmt& st : stmts) stmt(st, d + 1);
  line(d + 1, store);
  line(d, "}");
}

bool CppEmitter::fissionable(const std::vector<KStmt>& stmts) {
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
void CppEmitter::guard_fission(const std::vector<KStmt>& stmts,
                               const std::map<int, std::string>& value, const std::string& i, int d,
                               const std::string& store) {
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
    line(d + 2, "for (i64 mj_k = 0; mj_k < mj_fe - mj_f; ++mj_k) " + t +
                    "[mj_k] = " + scalar_arg(st.dtype, st.slot) + ";");
    line(d + 1, "} else {");
    strip_loop({st}, st.id, t, i, d + 2, false);
    line(d + 1, "}");
  }
  line(d + 1, "#pragma omp simd");
  line(d + 1, "for (i64 " + i + " = mj_f; " + i + " < mj_fe; ++" + i + ") {");
  for (const KStmt& st : stmts)
    if (st.kind == KOp::Guard) {
      dtypes_[st.id] = st.dtype;
      line(d + 2, "const " + ctype(st.dtype) + " " + v(st.id) + " = mj_t" + std::to_string(st.id) +
                      "[" + i + " - mj_f];");
    }
  for (const KStmt& st : rest) stmt(st, d + 2);
  line(d + 2, store);
  line(d + 1, "}");
  line(d, "}");
}

// One loop over the strip computing `stmts` and storing value `result` into array `t`.
void CppEmitter::strip_loop(const std::vector<KStmt>& stmts, int result, const std::string& t,
                            const std::string& i, int d, bool simd) {
  if (simd) line(d, "#pragma omp simd");
  line(d, "for (i64 " + i + " = mj_f; " + i + " < mj_fe; ++" + i + ") {");
  for (const KStmt& st : stmts) stmt(st, d + 1);
  line(d + 1, t + "[" + i + " - mj_f] = " + v(result) + ";");
  line(d, "}");
}

}  // namespace metajit
