#include "codegen/guard_intervals.h"

#include <optional>
#include <set>

#include "codegen/kernel_patterns.h"

namespace metajit {
namespace {

// `e` as coef * i<var> + rest, where rest does not read i<var>; nullopt when it is not affine
// in i<var> (a division, a product of two terms that read it, a comparison...).
struct Affine {
  int64_t coef = 0;
  IndexExprPtr rest;
};
std::optional<Affine> affine(const IndexExprPtr& e, int var) {
  if (!ix_reads_var(*e, var)) return Affine{0, e};
  // Coefficients stay tiny (index expressions are written by people and lowering); the bound
  // keeps the products below from overflowing.
  constexpr int64_t kMaxCoef = int64_t(1) << 20;
  switch (e->kind) {
    case IxKind::Var:
      return Affine{1, ix_const(0)};
    case IxKind::Neg: {
      const std::optional<Affine> a = affine(e->a, var);
      if (!a) return std::nullopt;
      return Affine{-a->coef, ix_unary(IxKind::Neg, a->rest)};
    }
    case IxKind::Add:
    case IxKind::Sub: {
      const std::optional<Affine> a = affine(e->a, var), b = affine(e->b, var);
      if (!a || !b) return std::nullopt;
      const int64_t coef = e->kind == IxKind::Add ? a->coef + b->coef : a->coef - b->coef;
      if (coef > kMaxCoef || coef < -kMaxCoef) return std::nullopt;
      return Affine{coef, ix_binary(e->kind, a->rest, b->rest)};
    }
    case IxKind::Mul: {
      const IndexExprPtr& k = e->a->kind == IxKind::Const ? e->a : e->b;
      const IndexExprPtr& x = e->a->kind == IxKind::Const ? e->b : e->a;
      if (k->kind != IxKind::Const || k->value > kMaxCoef || k->value < -kMaxCoef)
        return std::nullopt;
      const std::optional<Affine> a = affine(x, var);
      if (!a) return std::nullopt;
      return Affine{a->coef * k->value, ix_binary(IxKind::Mul, a->rest, k)};
    }
    default:
      return std::nullopt;
  }
}

// The bound a comparison puts on i<var> when it is coef * i + rest compared with something
// free of i, coef +1 or -1: i >= lo or i < hi (i == r gives both).
struct Bound {
  IndexExprPtr lo, hi;
};
std::optional<Bound> bound_of(const IndexExprPtr& c, int var) {
  IxKind k = c->kind;
  if (k != IxKind::Lt && k != IxKind::Le && k != IxKind::Gt && k != IxKind::Ge && k != IxKind::Eq)
    return std::nullopt;
  const std::optional<Affine> a = affine(c->a, var), b = affine(c->b, var);
  if (!a || !b) return std::nullopt;
  // a OP b  <=>  (a.coef - b.coef) * i OP b.rest - a.rest
  const int64_t coef = a->coef - b->coef;
  IndexExprPtr r = ix_binary(IxKind::Sub, b->rest, a->rest);
  if (coef == -1) {  // -i OP r  <=>  i OP' -r
    r = ix_unary(IxKind::Neg, r);
    k = k == IxKind::Lt ? IxKind::Gt : k == IxKind::Le ? IxKind::Ge : k == IxKind::Gt ? IxKind::Lt
        : k == IxKind::Ge                                                           ? IxKind::Le
                                                                                    : k;
  } else if (coef != 1) {
    return std::nullopt;
  }
  const IndexExprPtr r1 = ix_binary(IxKind::Add, r, ix_const(1));
  switch (k) {
    case IxKind::Lt:
      return Bound{nullptr, r};
    case IxKind::Le:
      return Bound{nullptr, r1};
    case IxKind::Gt:
      return Bound{r1, nullptr};
    case IxKind::Ge:
      return Bound{r, nullptr};
    default:  // Eq
      return Bound{r, r1};
  }
}

IndexExprPtr both(IxKind k, const IndexExprPtr& a, const IndexExprPtr& b) {
  if (!a) return b;
  if (!b) return a;
  return ix_binary(k, a, b);
}

void split(const IndexExprPtr& cond, int var, GuardInterval& g) {
  if (cond->kind == IxKind::And) {
    split(cond->a, var, g);
    split(cond->b, var, g);
    return;
  }
  if (!ix_reads_var(*cond, var)) {
    g.fixed = both(IxKind::And, g.fixed, cond);
  } else if (const std::optional<Bound> b = bound_of(cond, var)) {
    g.lo = both(IxKind::Max, g.lo, b->lo);
    g.hi = both(IxKind::Min, g.hi, b->hi);
  } else {
    g.rest = both(IxKind::And, g.rest, cond);
  }
}

// Appends the guards of `st` and its body; false when a reduction is met.
bool collect(const KStmt& st, int var, std::vector<GuardInterval>& out) {
  if (st.kind == KOp::Reduce) return false;
  if (st.kind == KOp::Guard && st.cond) {
    GuardInterval g;
    g.guard = st.id;
    split(st.cond, var, g);
    out.push_back(std::move(g));
  }
  if (st.body)
    for (const KStmt& inner : st.body->stmts)
      if (!collect(inner, var, out)) return false;
  return true;
}

}  // namespace

std::vector<GuardInterval> find_guard_intervals(const std::vector<KStmt>& stmts, int var) {
  std::vector<GuardInterval> out;
  for (const KStmt& st : stmts)
    if (!collect(st, var, out)) return {};
  for (const GuardInterval& g : out)
    if (g.lo || g.hi) return out;
  return {};
}

bool self_contained_guard(const KStmt& st) {
  if (st.kind != KOp::Guard || !st.body) return false;
  std::set<int> defined, used;
  outside_uses(*st.body, defined, used);
  return used.empty();
}

std::vector<KStmt> guards_passed(const KBlock& b) {
  std::vector<KStmt> out;
  for (const KStmt& st : b.stmts) {
    if (st.kind != KOp::Guard) {
      out.push_back(st);
      continue;
    }
    for (KStmt& inner : guards_passed(*st.body)) out.push_back(std::move(inner));
    KStmt copy;
    copy.kind = KOp::Cast;
    copy.id = st.id;
    copy.dtype = st.dtype;
    copy.args = {st.body->result};
    out.push_back(std::move(copy));
  }
  return out;
}

std::vector<KStmt> guard_failed(const std::vector<KStmt>& stmts, int id) {
  std::vector<KStmt> out;
  for (const KStmt& st : stmts) {
    if (st.kind != KOp::Guard || st.id != id) {
      out.push_back(st);
      continue;
    }
    KStmt fill;
    fill.kind = KOp::Scalar;
    fill.id = st.id;
    fill.dtype = st.dtype;
    fill.slot = st.slot;
    out.push_back(std::move(fill));
  }
  return out;
}

std::vector<int> guard_ids(const KStmt& st) {
  std::vector<int> out;
  if (st.kind == KOp::Guard) out.push_back(st.id);
  if (st.body)
    for (const KStmt& inner : st.body->stmts)
      for (int id : guard_ids(inner)) out.push_back(id);
  return out;
}

KStmt replace_guard_tests(const KStmt& st, const std::map<int, IndexExprPtr>& conds) {
  KStmt out = st;
  if (st.kind == KOp::Guard)
    if (const auto it = conds.find(st.id); it != conds.end()) out.cond = it->second;
  if (st.body) {
    out.body = std::make_shared<KBlock>(*st.body);
    for (KStmt& inner : out.body->stmts) inner = replace_guard_tests(inner, conds);
  }
  return out;
}

}  // namespace metajit
