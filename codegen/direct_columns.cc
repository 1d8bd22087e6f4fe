#include "codegen/direct_columns.h"

#include <algorithm>

namespace metajit {

bool shift_invariant(const IndexExpr& e, int u, int t, int sigma) {
  const bool reads_u = ix_reads_var(e, u), reads_t = ix_reads_var(e, t);
  if (!reads_u && !reads_t) return true;
  if (ix_affine_in(e, u) && ix_affine_in(e, t))
    return ix_coefficient(e, t) == sigma * ix_coefficient(e, u);
  // A function of its operands: invariant when they are. A bare variable is affine (above).
  for (const IndexExprPtr* child : {&e.a, &e.b, &e.c})
    if (*child && !shift_invariant(**child, u, t, sigma)) return false;
  for (const IndexExprPtr& arg : e.args)
    if (!shift_invariant(*arg, u, t, sigma)) return false;
  return true;
}

namespace {

// Every index expression of `stmts` (guards' bodies included) shift-invariant in (u, t, sigma).
bool stmts_shift_invariant(const std::vector<KStmt>& stmts, int u, int t, int sigma) {
  for (const KStmt& st : stmts) {
    for (const IndexExprPtr& e : st.index)
      if (!shift_invariant(*e, u, t, sigma)) return false;
    if (st.cond && !shift_invariant(*st.cond, u, t, sigma)) return false;
    for (const KLoop& l : st.loops)
      if (!shift_invariant(*l.extent, u, t, sigma)) return false;
    if (st.body && !stmts_shift_invariant(st.body->stmts, u, t, sigma)) return false;
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

// The reduction loop of `r` that `stmts` read output loop `u` with, and the sign; false when
// there is none (or the only candidates are in `taken`).
bool find_tap(const std::vector<KStmt>& stmts, const KStmt& r, int u,
              const std::vector<int>& taken, int& tap, bool& flipped) {
  for (const KLoop& l : r.loops) {
    if (std::find(taken.begin(), taken.end(), l.var) != taken.end()) continue;
    for (int sigma : {1, -1}) {
      if (stmts_shift_invariant(stmts, u, l.var, sigma)) {
        tap = l.var;
        flipped = sigma < 0;
        return true;
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
  if (!find_tap(stmts, r, d.col_var, {}, d.col_tap, d.col_flipped)) return std::nullopt;
  if (!find_tap(stmts, r, d.row_var, {d.col_tap}, d.row_tap, d.row_flipped)) return std::nullopt;
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
    if (!find_tap(stmts, r, o, taken, p.step_var, p.flipped)) return std::nullopt;
    taken.push_back(p.step_var);
    d.pairs.push_back(p);
  }
  if (d.pairs.empty()) return std::nullopt;
  return d;
}

}  // namespace metajit
