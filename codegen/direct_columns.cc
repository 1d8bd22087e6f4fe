#include "codegen/direct_columns.h"

#include <algorithm>

namespace metajit {

bool shift_invariant(const IndexExpr& e, int u, int t, int sigma, int stride) {
  const bool reads_u = ix_reads_var(e, u), reads_t = ix_reads_var(e, t);
  if (!reads_u && !reads_t) return true;
  // c * (stride * u + sigma * t) + rest: u's coefficient is stride * sigma times t's.
  if (ix_affine_in(e, u) && ix_affine_in(e, t))
    return ix_coefficient(e, u) == stride * sigma * ix_coefficient(e, t);
  // A function of its operands: invariant when they are. A bare variable is affine (above).
  for (const IndexExprPtr* child : {&e.a, &e.b, &e.c})
    if (*child && !shift_invariant(**child, u, t, sigma, stride)) return false;
  for (const IndexExprPtr& arg : e.args)
    if (!shift_invariant(*arg, u, t, sigma, stride)) return false;
  return true;
}

namespace {

// Every index expression of `stmts` (guards' bodies included) shift-invariant in (u, t).
bool stmts_shift_invariant(const std::vector<KStmt>& stmts, int u, int t, int sigma, int stride) {
  for (const KStmt& st : stmts) {
    for (const IndexExprPtr& e : st.index)
      if (!shift_invariant(*e, u, t, sigma, stride)) return false;
    if (st.cond && !shift_invariant(*st.cond, u, t, sigma, stride)) return false;
    for (const KLoop& l : st.loops)
      if (!shift_invariant(*l.extent, u, t, sigma, stride)) return false;
    if (st.body && !stmts_shift_invariant(st.body->stmts, u, t, sigma, stride)) return false;
  }
  return true;
}

// Whether `stmts` read loop variable `var` anywhere (index expressions and extents).
bool stmts_read(const std::vector<KStmt>& stmts, int var) {
  for (const KStmt& st : stmts) {
    for (const IndexExprPtr& e : st.index)
      if (ix_reads_var(*e, var)) return true;
    if (st.cond && ix_reads_var(*st.cond, var)) return true;
    for (const KLoop& l : st.loops)
      if (ix_reads_var(*l.extent, var)) return true;
    if (st.body && stmts_read(st.body->stmts, var)) return true;
  }
  return false;
}

// The reduction loop of `r` that `stmts` read output loop `u` with, the sign and the stride
// (up to `max_stride`; a stride above 1 only with +); false when there is none (or the only
// candidates are in `taken`).
bool find_tap(const std::vector<KStmt>& stmts, const KStmt& r, int u,
              const std::vector<int>& taken, int max_stride, int& tap, bool& flipped,
              int& stride) {
  for (const KLoop& l : r.loops) {
    if (std::find(taken.begin(), taken.end(), l.var) != taken.end()) continue;
    for (int s = 1; s <= max_stride; ++s) {
      for (int sigma : {1, -1}) {
        if ((s == 1 || sigma > 0) && stmts_shift_invariant(stmts, u, l.var, sigma, s)) {
          tap = l.var;
          flipped = sigma < 0;
          stride = s;
          return true;
        }
      }
    }
  }
  return false;
}

}  // namespace

std::optional<DirectColumns> find_direct_columns(const KernelIR& ir, const Contraction& c,
                                                 const std::vector<int>& merged) {
  if (merged.size() != 1 || !c.b_outer.empty()) return std::nullopt;
  const KStmt& r = ir.body.stmts[c.reduce_index];
  std::vector<KStmt> stmts;
  for (size_t s : c.b_stmts) stmts.push_back(r.body->stmts[s]);
  DirectColumns d;
  d.row_var = merged[0];
  d.col_var = c.j_var;
  if (!find_tap(stmts, r, d.col_var, {}, kDirectMaxStride, d.col_tap, d.col_flipped,
                d.col_stride) ||
      !find_tap(stmts, r, d.row_var, {d.col_tap}, kDirectMaxStride, d.row_tap, d.row_flipped,
                d.row_stride))
    return std::nullopt;
  return d;
}

std::optional<DirectSteps> find_direct_steps(const KernelIR& ir, const Contraction& c,
                                             const std::vector<int>& outer) {
  if (!c.b_outer.empty()) return std::nullopt;
  const KStmt& r = ir.body.stmts[c.reduce_index];
  std::vector<KStmt> stmts;
  for (size_t s : c.b_stmts) stmts.push_back(r.body->stmts[s]);
  DirectSteps d;
  std::vector<int> taken;
  for (int o : outer) {
    if (!stmts_read(stmts, o)) continue;
    TapPair p;
    p.outer_var = o;
    int stride = 1;
    if (!find_tap(stmts, r, o, taken, 1, p.step_var, p.flipped, stride)) return std::nullopt;
    taken.push_back(p.step_var);
    d.pairs.push_back(p);
  }
  if (d.pairs.empty()) return std::nullopt;
  return d;
}

}  // namespace metajit
