#include "autograd/scatter_as_gather.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

#include "meta_ops/ops.h"

namespace metajit {
namespace {

// sum(coef[j] * i_j) + constant over the output index variables.
struct Affine {
  std::map<int, int64_t> coef;
  int64_t constant = 0;
};

Affine scaled(Affine a, int64_t c) {
  for (auto& [j, v] : a.coef) v *= c;
  a.constant *= c;
  return a;
}

Affine added(Affine a, const Affine& b, int64_t sign) {
  for (const auto& [j, v] : b.coef) a.coef[j] += sign * v;
  a.constant += sign * b.constant;
  return a;
}

// Small coefficients only: an index expression is a position, and the bounds below multiply.
constexpr int64_t kMaxCoefficient = int64_t(1) << 20;

std::optional<Affine> affine_of(const IndexExpr& e) {
  switch (e.kind) {
    case IxKind::Const:
      if (std::llabs(e.value) > kMaxCoefficient * kMaxCoefficient) return std::nullopt;
      return Affine{{}, e.value};
    case IxKind::Var:
      return Affine{{{int(e.value), 1}}, 0};
    case IxKind::Neg: {
      auto a = affine_of(*e.a);
      if (!a) return std::nullopt;
      return scaled(*a, -1);
    }
    case IxKind::Add:
    case IxKind::Sub: {
      auto a = affine_of(*e.a), b = affine_of(*e.b);
      if (!a || !b) return std::nullopt;
      return added(*a, *b, e.kind == IxKind::Add ? 1 : -1);
    }
    case IxKind::Mul: {
      auto a = affine_of(*e.a), b = affine_of(*e.b);
      if (!a || !b) return std::nullopt;
      if (!a->coef.empty() && !b->coef.empty()) return std::nullopt;  // i*j is not affine
      const Affine& k = a->coef.empty() ? *a : *b;
      const Affine& v = a->coef.empty() ? *b : *a;
      if (std::llabs(k.constant) > kMaxCoefficient) return std::nullopt;
      return scaled(v, k.constant);
    }
    default:
      return std::nullopt;
  }
}

IndexExprPtr bin(IxKind k, IndexExprPtr a, IndexExprPtr b) {
  return ix_binary(k, std::move(a), std::move(b));
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// reindex(v, shape, exprs, 0, conds) where a lazy broadcast_to is read through, so that the
// result depends only on the indices its input reads. The broadcast's other axes are dropped
// with their bounds checks: `checked` keeps the check of those whose index may leave its range
// (`in_range` false) as a condition; unchecked, the caller multiplies by a factor that is 0
// there.
Var gather_through_broadcast(const Var& v, const Shape& shape,
                             const std::vector<IndexExprPtr>& exprs,
                             std::vector<IndexExprPtr> conds, const std::vector<bool>& in_range,
                             bool checked) {
  const Node& b = *v.node();
  if (b.kind != OpKind::BroadcastTo) return reindex_tree(v, shape, exprs, 0, std::move(conds));
  std::vector<IndexExprPtr> idx;
  for (size_t k = 0; k < b.bcast.size(); ++k) {
    if (b.bcast[k] == BroadcastAxis::Keep) {
      idx.push_back(exprs[k]);
      continue;
    }
    if (b.bcast[k] == BroadcastAxis::Expand) idx.push_back(ix_const(0));
    if (checked && !in_range[k])
      conds.push_back(ix_binary(IxKind::Or, bin(IxKind::Lt, exprs[k], ix_const(0)),
                                bin(IxKind::Gt, exprs[k], ix_const(b.shape[k] - 1))));
  }
  return reindex_tree(Var(b.inputs[0]), shape, std::move(idx), 0, std::move(conds));
}

// The terms of `a`, largest coefficient first, when they are the digits of a mixed radix
// over the output extents (each coefficient positive and the next one times its index's
// extent: `i1*64 + i3` with i3 < 64), so that every value of the axis has at most one source;
// empty otherwise (or for a single term).
std::vector<std::pair<int, int64_t>> mixed_radix(const Affine& a, const Shape& y_shape) {
  std::vector<std::pair<int, int64_t>> terms(a.coef.begin(), a.coef.end());
  if (terms.size() < 2) return {};
  std::sort(terms.begin(), terms.end(),
            [](const auto& x, const auto& y) { return x.second > y.second; });
  for (size_t t = 0; t < terms.size(); ++t) {
    if (terms[t].second <= 0) return {};
    if (t + 1 < terms.size() &&
        terms[t].second != terms[t + 1].second * y_shape[size_t(terms[t + 1].first)])
      return {};
  }
  return terms;
}

// Solves axis k (x_k = sum(c_t * i_t) + constant, the terms a mixed radix) for every index it
// reads: i_0 = num / c_0, i_t = (num % c_(t-1)) / c_t with num = x_k - constant. A negative
// num or one the last digit does not divide has no source (a condition); one past the first
// digit's extent reads the overflow value.
void solve_mixed_radix(int k, const Affine& a, const std::vector<std::pair<int, int64_t>>& terms,
                       const Shape& x_shape, const Shape& y_shape, std::vector<IndexExprPtr>& exprs,
                       std::vector<IndexExprPtr>& conds, std::vector<bool>& in_range) {
  IndexExprPtr num = bin(IxKind::Sub, ix_var(k), ix_const(a.constant));
  conds.push_back(bin(IxKind::Lt, num, ix_const(0)));
  const int64_t last = terms.back().second;
  if (last != 1)
    conds.push_back(bin(IxKind::Ne, bin(IxKind::Mod, num, ix_const(last)), ix_const(0)));
  for (size_t t = 0; t < terms.size(); ++t) {
    IndexExprPtr rest = t == 0 ? num : bin(IxKind::Mod, num, ix_const(terms[t - 1].second));
    exprs[size_t(terms[t].first)] = bin(IxKind::Div, rest, ix_const(terms[t].second));
  }
  const int64_t hi = x_shape[size_t(k)] - 1 - a.constant;  // num's largest value
  const int first = terms[0].first;
  in_range[size_t(first)] = hi / terms[0].second <= y_shape[size_t(first)] - 1;
}

}  // namespace

std::optional<Var> scatter_as_gather(const Var& g, const Shape& x_shape,
                                     const std::vector<IndexExprPtr>& indexes,
                                     const std::vector<IndexExprPtr>& conditions) {
  const Shape& y_shape = g.shape();
  const int n = int(x_shape.size()), m = int(y_shape.size());
  if (int(indexes.size()) != n) return std::nullopt;
  for (int64_t d : x_shape)
    if (d <= 0) return std::nullopt;
  for (int64_t d : y_shape)
    if (d <= 0) return std::nullopt;
  std::vector<Affine> maps;
  std::vector<int> owner(size_t(m), -1);
  for (int k = 0; k < n; ++k) {
    auto a = affine_of(*indexes[k]);
    if (!a) return std::nullopt;
    for (auto it = a->coef.begin(); it != a->coef.end();) {
      if (it->second == 0) {
        it = a->coef.erase(it);
        continue;
      }
      if (std::llabs(it->second) > kMaxCoefficient || owner[it->first] >= 0) return std::nullopt;
      owner[it->first] = k;
      ++it;
    }
    maps.push_back(std::move(*a));
  }
  // Each axis is solved for its term of largest |coefficient| (conv2d: the strided output
  // position), or for all its terms when they are the digits of a mixed radix (a head split
  // out of a packed axis, `i1*64+i3`); the other terms, and output indices no axis reads, are
  // summed over.
  std::vector<int> solved(size_t(n), -1);
  std::vector<std::vector<std::pair<int, int64_t>>> radix(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    radix[size_t(k)] = mixed_radix(maps[size_t(k)], y_shape);
    for (const auto& [j, c] : maps[k].coef)
      if (solved[k] < 0 || std::llabs(c) > std::llabs(maps[k].coef.at(solved[k]))) solved[k] = j;
  }
  auto is_solved = [&](int j) {
    if (owner[j] < 0) return false;
    if (solved[owner[j]] == j) return true;
    for (const auto& term : radix[size_t(owner[j])])
      if (term.first == j) return true;
    return false;
  };
  std::vector<int> free_slot(size_t(m), -1);
  Shape g_shape = x_shape;
  std::vector<int64_t> free_axes;
  for (int j = 0; j < m; ++j) {
    if (is_solved(j)) continue;
    free_slot[j] = int(g_shape.size());
    free_axes.push_back(int64_t(g_shape.size()));
    g_shape.push_back(y_shape[j]);
  }
  std::vector<IndexExprPtr> exprs(static_cast<size_t>(m));
  std::vector<IndexExprPtr> conds;
  std::vector<bool> in_range(static_cast<size_t>(m), true);  // free indices span their axis
  for (int j = 0; j < m; ++j)
    if (free_slot[j] >= 0) exprs[j] = ix_var(free_slot[j]);
  for (int k = 0; k < n; ++k) {
    const Affine& a = maps[k];
    if (solved[k] < 0) {  // a constant index: only that position of the axis receives
      conds.push_back(bin(IxKind::Ne, ix_var(k), ix_const(a.constant)));
      continue;
    }
    if (!radix[size_t(k)].empty()) {
      solve_mixed_radix(k, a, radix[size_t(k)], x_shape, y_shape, exprs, conds, in_range);
      continue;
    }
    const int j = solved[k];
    const int64_t c = a.coef.at(j);
    // c * i_j = x_k - constant - sum(other terms); an indivisible right side has no source.
    IndexExprPtr num = bin(IxKind::Sub, ix_var(k), ix_const(a.constant));
    int64_t lo = -a.constant, hi = x_shape[k] - 1 - a.constant;  // num's range
    for (const auto& [j2, c2] : a.coef) {
      if (j2 == j) continue;
      num = bin(IxKind::Sub, num, bin(IxKind::Mul, ix_var(free_slot[j2]), ix_const(c2)));
      const int64_t span = c2 * (y_shape[j2] - 1);
      lo -= std::max<int64_t>(span, 0);
      hi -= std::min<int64_t>(span, 0);
    }
    IndexExprPtr e = num;
    int64_t elo = lo, ehi = hi;  // e's range, where it has a source
    if (c == -1) {
      e = ix_unary(IxKind::Neg, num);
      elo = -hi, ehi = -lo;
    } else if (c != 1) {
      conds.push_back(bin(IxKind::Ne, bin(IxKind::Mod, num, ix_const(c)), ix_const(0)));
      e = bin(IxKind::Div, num, ix_const(c));
      elo = c > 0 ? -floor_div(-lo, c) : -floor_div(hi, -c);
      ehi = c > 0 ? floor_div(hi, c) : floor_div(-lo, -c);
    }
    // An out-of-range solution needs no condition: reindex reads it as the overflow value.
    exprs[j] = e;
    in_range[j] = elo >= 0 && ehi <= y_shape[j] - 1;
  }
  // The output indices all exist now: the reindex's own conditions read them.
  for (const IndexExprPtr& cond : conditions) conds.push_back(ix_substitute(cond, exprs));
  // reindex wants one index per axis of what it reads (g): exprs, over g_shape's indices.
  Var gathered;
  const Node& gn = *g.node();
  Var u, v;
  if (gn.kind == OpKind::Binary && BinaryOp(gn.op) == BinaryOp::Mul) {
    u = Var(gn.inputs[0]), v = Var(gn.inputs[1]);
    if (u.node()->kind == OpKind::BroadcastTo && v.node()->kind != OpKind::BroadcastTo)
      std::swap(u, v);
  }
  if (v.defined() && v.node()->kind == OpKind::BroadcastTo) {
    // g = u * broadcast (conv2d: the output gradient times the broadcast weight). Gathering
    // each factor, the conditions and bounds on u, keeps the kernel a sum of products, and the
    // broadcast read through its broadcast depends only on its own indices: the contraction
    // schedule (codegen/kernel_patterns.h) then applies, as it does to the forward convolution.
    // Where u is 0 for want of a source, the broadcast's value is read anyway and multiplied by
    // it: the same unless that value is inf or NaN (README "Autograd").
    gathered = gather_through_broadcast(u, g_shape, exprs, conds, in_range, true) *
               gather_through_broadcast(v, g_shape, exprs, {}, in_range, false);
  } else {
    gathered = reindex_tree(g, g_shape, exprs, 0, conds);
  }
  if (free_axes.empty()) return gathered;
  return sum(gathered, free_axes);
}

}  // namespace metajit
