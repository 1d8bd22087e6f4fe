#include "codegen/division_chunks.h"

#include <algorithm>

namespace metajit {
namespace {

// c when `e` is i<var> + c (i<var>, i<var> + c, c + i<var>, i<var> - c with a constant c).
std::optional<int64_t> offset_of(const IndexExpr& e, int var) {
  auto is_var = [var](const IndexExprPtr& x) { return x->kind == IxKind::Var && x->value == var; };
  if (e.kind == IxKind::Var && e.value == var) return 0;
  if (e.kind == IxKind::Add) {
    if (is_var(e.a) && e.b->kind == IxKind::Const) return e.b->value;
    if (is_var(e.b) && e.a->kind == IxKind::Const) return e.a->value;
  }
  if (e.kind == IxKind::Sub && is_var(e.a) && e.b->kind == IxKind::Const) return -e.b->value;
  return std::nullopt;
}

int64_t floor_mod(int64_t a, int64_t d) {
  return ((a % d) + d) % d;
}

// The (D, c) of `e` when it is (i<var> + c) / D or % D with D a constant >= kMinChunkDivisor.
std::optional<std::pair<int64_t, int64_t>> division_term(const IndexExpr& e, int var) {
  if ((e.kind != IxKind::Div && e.kind != IxKind::Mod) || e.b->kind != IxKind::Const ||
      e.b->value < kMinChunkDivisor)
    return std::nullopt;
  const std::optional<int64_t> c = offset_of(*e.a, var);
  // |c| bounded so that s + c cannot overflow for any loop index s.
  if (!c || *c > (int64_t(1) << 60) || *c < -(int64_t(1) << 60)) return std::nullopt;
  return std::make_pair(e.b->value, *c);
}

// Visits every expression of `st` (guard and reduction bodies included).
template <class F>
void for_each_expr(const KStmt& st, const F& f) {
  for (const IndexExprPtr& e : st.index) f(*e);
  if (st.cond) f(*st.cond);
  if (st.body)
    for (const KStmt& inner : st.body->stmts) for_each_expr(inner, f);
}

void collect(const IndexExpr& e, int var, std::optional<DivisionChunks>& out, bool& extras) {
  if (e.kind == IxKind::Extra) extras = true;
  if (const auto t = division_term(e, var)) {
    const auto [d, c] = *t;
    if (!out) {
      out = DivisionChunks{};
      out->var = var, out->divisor = d, out->phase = floor_mod(c, d);
    }
    if (d == out->divisor && floor_mod(c, d) == out->phase &&
        std::find(out->offsets.begin(), out->offsets.end(), c) == out->offsets.end())
      out->offsets.push_back(c);
    return;
  }
  for (const IndexExpr* x : {e.a.get(), e.b.get(), e.c.get()})
    if (x) collect(*x, var, out, extras);
  for (const IndexExprPtr& a : e.args) collect(*a, var, out, extras);
}

// The index in ch.offsets of the numerator i + c that `e` is, or -1.
int numerator_index(const IndexExpr& e, const DivisionChunks& ch) {
  const std::optional<int64_t> c = offset_of(e, ch.var);
  if (!c) return -1;
  const auto it = std::find(ch.offsets.begin(), ch.offsets.end(), *c);
  return it == ch.offsets.end() ? -1 : int(it - ch.offsets.begin());
}

IndexExprPtr rewrite(const IndexExprPtr& e, const DivisionChunks& ch, const ChunkVars& cv) {
  if (const auto t = division_term(*e, ch.var); t && t->first == ch.divisor) {
    if (const int k = numerator_index(*e->a, ch); k >= 0)
      return e->kind == IxKind::Div
                 ? ix_var(cv.quotient + k)
                 : ix_binary(IxKind::Add, ix_var(ch.var), ix_var(cv.remainder + k));
  }
  if ((e->kind == IxKind::Lt || e->kind == IxKind::Ge) && ix_is_const(e->b, 0)) {
    if (const int k = numerator_index(*e->a, ch); k >= 0)
      return e->kind == IxKind::Lt ? ix_var(cv.negative + k)
                                   : ix_unary(IxKind::Not, ix_var(cv.negative + k));
  }
  switch (e->kind) {
    case IxKind::Const:
    case IxKind::Var:
    case IxKind::Param:
    case IxKind::Extra:   // not reached: find_division_chunks refuses extras
    case IxKind::Extent:  // not reached: lowering made it a parameter
      return e;
    case IxKind::Neg:
    case IxKind::Not:
      return ix_unary(e->kind, rewrite(e->a, ch, cv));
    case IxKind::Select:
      return ix_select(rewrite(e->a, ch, cv), rewrite(e->b, ch, cv), rewrite(e->c, ch, cv));
    default:
      return ix_binary(e->kind, rewrite(e->a, ch, cv), rewrite(e->b, ch, cv));
  }
}

// Whether `e` has the term (i<var> + c) / d or % d.
bool has_term(const IndexExpr& e, int var, int64_t d, int64_t c) {
  if (const auto t = division_term(e, var); t && t->first == d && t->second == c) return true;
  for (const IndexExpr* x : {e.a.get(), e.b.get(), e.c.get()})
    if (x && has_term(*x, var, d, c)) return true;
  for (const IndexExprPtr& a : e.args)
    if (has_term(*a, var, d, c)) return true;
  return false;
}

// Whether test `e` has (i<var> + c) >= 0 among its top-level conjuncts.
bool requires_nonnegative(const IndexExpr& e, int var, int64_t c) {
  if (e.kind == IxKind::And)
    return requires_nonnegative(*e.a, var, c) || requires_nonnegative(*e.b, var, c);
  return e.kind == IxKind::Ge && ix_is_const(e.b, 0) && offset_of(*e.a, var) == c;
}

// read_only_where_nonnegative for one statement; `guarded`: an enclosing guard requires it.
bool terms_guarded(const KStmt& st, int var, int64_t d, int64_t c, bool guarded) {
  if (st.kind == KOp::Guard && st.cond && requires_nonnegative(*st.cond, var, c)) guarded = true;
  if (!guarded) {
    for (const IndexExprPtr& e : st.index)
      if (has_term(*e, var, d, c)) return false;
    if (st.cond && has_term(*st.cond, var, d, c)) return false;
  }
  if (st.body)
    for (const KStmt& inner : st.body->stmts)
      if (!terms_guarded(inner, var, d, c, guarded)) return false;
  return true;
}

}  // namespace

bool read_only_where_nonnegative(const std::vector<const KStmt*>& stmts,
                                 const DivisionChunks& chunks, int64_t c) {
  for (const KStmt* st : stmts)
    if (!terms_guarded(*st, chunks.var, chunks.divisor, c, false)) return false;
  return true;
}

std::optional<DivisionChunks> find_division_chunks(const std::vector<const KStmt*>& stmts,
                                                   int var) {
  std::optional<DivisionChunks> out;
  bool extras = false;
  for (const KStmt* st : stmts)
    for_each_expr(*st, [&](const IndexExpr& e) { collect(e, var, out, extras); });
  if (extras) return std::nullopt;
  return out;
}

KStmt rewrite_for_chunk(const KStmt& st, const DivisionChunks& chunks, const ChunkVars& vars) {
  KStmt out = st;
  for (IndexExprPtr& e : out.index) e = rewrite(e, chunks, vars);
  if (out.cond) out.cond = rewrite(out.cond, chunks, vars);
  if (st.body) {
    out.body = std::make_shared<KBlock>(*st.body);
    for (KStmt& inner : out.body->stmts) inner = rewrite_for_chunk(inner, chunks, vars);
  }
  return out;
}

}  // namespace metajit
