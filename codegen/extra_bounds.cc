#include "codegen/extra_bounds.h"

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <set>

namespace metajit {
namespace {

// Whether `e` reads no loop variable and no array: the same for every element of a launch.
bool launch_invariant(const IndexExpr& e) {
  if (e.kind == IxKind::Var || e.kind == IxKind::Extra) return false;
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c && !launch_invariant(*c)) return false;
  return true;
}

// Loop variables below this bound make every index expression interval() accepts evaluate
// without wrapping (kMaxMagnitude); the version's condition checks the extents against it.
constexpr int64_t kMaxLoopExtent = int64_t(1) << 31;
constexpr int64_t kMaxMagnitude = int64_t(1) << 62;

// The values an index expression takes over the loops' box [0, extent): lo and hi as
// launch-invariant expressions, `magnitude` a bound on every |value| when each loop's extent is
// at most kMaxLoopExtent (the computation of lo and hi included).
struct Interval {
  IndexExprPtr lo, hi;
  int64_t magnitude = 0;
};

int64_t bounded_sum(int64_t a, int64_t b) {
  return a > kMaxMagnitude - b ? kMaxMagnitude : a + b;
}

class Finder {
 public:
  explicit Finder(const KernelIR& ir) : ir_(ir) {
    for (const KLoop& l : ir.loops) bind(l);
  }

  void block(const KBlock& b) {
    for (const KStmt& st : b.stmts) {
      for (const KLoop& l : st.loops) bind(l);
      for (const IndexExprPtr& e : st.index) expr(e.get());
      expr(st.cond.get());
      if (st.kind == KOp::Guard && st.cond) guards_.push_back(st.cond.get());
      if (st.kind == KOp::Load && !st.index.empty()) narrow(*st.index.back());
      if (st.body) block(*st.body);
    }
  }

  InBoundsVersion result() && {
    for (const IndexExpr* g : guards_)
      if (holds(*g)) ++out_.true_guards;
    if (out_.empty()) return {};
    return std::move(out_);
  }

 private:
  // Only a loop whose extent is the same for the whole launch counts: the condition is tested
  // before any loop runs (a reduction's extent may read an outer loop's variable, kernel specs
  // allow it: docs/design.md "Kernel specs").
  void bind(const KLoop& l) {
    if (launch_invariant(*l.extent)) extent_[l.var] = l.extent;
  }

  // The loop variable `e` is, when it is one whose extent is known.
  const IndexExprPtr* loop_extent(const IndexExpr* e) const {
    if (!e || e->kind != IxKind::Var) return nullptr;
    auto it = extent_.find(int(e->value));
    return it == extent_.end() ? nullptr : &it->second;
  }

  void require(const IndexExprPtr& extent, const IndexExprPtr& limit) {
    const std::string key = ix_to_string(*extent) + " <= " + ix_to_string(*limit);
    if (seen_.insert(key).second) out_.conditions.emplace_back(extent, limit);
  }

  void expr(const IndexExpr* e) {
    if (!e) return;
    if (e->kind == IxKind::Extra) extra(*e);
    // i >= 0 holds for every loop variable; i < X holds for all i when extent <= X.
    if (e->kind == IxKind::Ge && loop_extent(e->a.get()) && e->b->kind == IxKind::Const &&
        e->b->value == 0)
      out_.true_tests.insert(ix_to_string(*e));
    else if (e->kind == IxKind::Lt && loop_extent(e->a.get()) && launch_invariant(*e->b)) {
      require(*loop_extent(e->a.get()), e->b);
      out_.true_tests.insert(ix_to_string(*e));
    } else if ((e->kind == IxKind::Ge || e->kind == IxKind::Lt) && launch_invariant(*e->b))
      compound_test(*e);
    for (const IndexExprPtr& a : e->args) expr(a.get());
    for (const IndexExpr* c : {e->a.get(), e->b.get(), e->c.get()}) expr(c);
  }

  // A reindex's bounds test of a compound index (a window's i*2+k, a gradient's i/2): true for
  // the whole launch when the index's interval over the loops lies inside the bound.
  void compound_test(const IndexExpr& e) {
    std::set<int> vars;
    std::optional<Interval> r = interval(*e.a, vars);
    if (!r || r->magnitude >= kMaxMagnitude) return;
    for (int v : vars) require(extent_.at(v), ix_const(kMaxLoopExtent));
    if (e.kind == IxKind::Ge)
      require(e.b, r->lo);
    else
      require(r->hi, ix_binary(IxKind::Sub, e.b, ix_const(1)));
    out_.true_tests.insert(ix_to_string(e));
  }

  // Over the loops' box; nullopt for what it does not bound (parameters, arrays, selects).
  std::optional<Interval> interval(const IndexExpr& e, std::set<int>& vars) const {
    auto bin = [](IxKind k, const IndexExprPtr& a, const IndexExprPtr& b) {
      return ix_binary(k, a, b);
    };
    switch (e.kind) {
      case IxKind::Const:
        if (e.value <= -kMaxMagnitude || e.value >= kMaxMagnitude) return std::nullopt;
        return Interval{ix_const(e.value), ix_const(e.value), e.value < 0 ? -e.value : e.value};
      case IxKind::Var: {
        const IndexExprPtr* extent = loop_extent(&e);
        if (!extent) return std::nullopt;
        vars.insert(int(e.value));
        return Interval{ix_const(0), bin(IxKind::Sub, *extent, ix_const(1)), kMaxLoopExtent - 1};
      }
      case IxKind::Neg: {
        std::optional<Interval> a = interval(*e.a, vars);
        if (!a) return std::nullopt;
        return Interval{ix_unary(IxKind::Neg, a->hi), ix_unary(IxKind::Neg, a->lo), a->magnitude};
      }
      case IxKind::Add:
      case IxKind::Sub:
      case IxKind::Min:
      case IxKind::Max: {
        std::optional<Interval> a = interval(*e.a, vars), b = interval(*e.b, vars);
        if (!a || !b) return std::nullopt;
        const int64_t m = bounded_sum(a->magnitude, b->magnitude);
        if (e.kind == IxKind::Add)
          return Interval{bin(e.kind, a->lo, b->lo), bin(e.kind, a->hi, b->hi), m};
        if (e.kind == IxKind::Sub)
          return Interval{bin(e.kind, a->lo, b->hi), bin(e.kind, a->hi, b->lo), m};
        return Interval{bin(e.kind, a->lo, b->lo), bin(e.kind, a->hi, b->hi), m};
      }
      case IxKind::Mul:
        if (e.b->kind == IxKind::Const) return scaled(*e.a, e.b->value, vars);
        if (e.a->kind == IxKind::Const) return scaled(*e.b, e.a->value, vars);
        return std::nullopt;
      case IxKind::Div: {
        // Truncating division by a constant is monotonic: non-decreasing for c > 0.
        if (e.b->kind != IxKind::Const || e.b->value == 0) return std::nullopt;
        std::optional<Interval> a = interval(*e.a, vars);
        if (!a) return std::nullopt;
        const IndexExprPtr& c = e.b;
        if (e.b->value > 0)
          return Interval{bin(IxKind::Div, a->lo, c), bin(IxKind::Div, a->hi, c), a->magnitude};
        return Interval{bin(IxKind::Div, a->hi, c), bin(IxKind::Div, a->lo, c), a->magnitude};
      }
      case IxKind::Mod: {
        // x % c has x's sign and |x % c| < |c|: [0, |c|-1] when x >= 0 everywhere.
        if (e.b->kind != IxKind::Const || e.b->value == 0 || e.b->value == INT64_MIN)
          return std::nullopt;
        std::optional<Interval> a = interval(*e.a, vars);
        if (!a) return std::nullopt;
        const int64_t m = (e.b->value < 0 ? -e.b->value : e.b->value) - 1;
        const bool nonnegative = a->lo->kind == IxKind::Const && a->lo->value >= 0;
        // The dividend's own magnitude bounds it: one that might wrap makes no claim.
        return Interval{ix_const(nonnegative ? 0 : -m), ix_const(m), std::max(a->magnitude, m)};
      }
      default:
        return std::nullopt;
    }
  }

  std::optional<Interval> scaled(const IndexExpr& x, int64_t c, std::set<int>& vars) const {
    std::optional<Interval> a = interval(x, vars);
    if (!a || c <= -kMaxMagnitude || c >= kMaxMagnitude) return std::nullopt;
    const int64_t abs_c = c < 0 ? -c : c;
    if (abs_c != 0 && a->magnitude > kMaxMagnitude / abs_c) return std::nullopt;
    const IndexExprPtr k = ix_const(c);
    IndexExprPtr lo = ix_binary(IxKind::Mul, a->lo, k), hi = ix_binary(IxKind::Mul, a->hi, k);
    if (c < 0) std::swap(lo, hi);
    return Interval{lo, hi, a->magnitude * abs_c};
  }

  // A load's last index that divides (a pooling gradient's i/2) makes a gather, which g++ 12
  // vectorises with 32-bit offsets only ("unsupported vector types for emulated gather" with
  // 64-bit ones): where every value it and its parts take fits in an int, the fast version
  // computes it in int (c_family_emitter.cc, offset()). The digits CNN's 2x2 pooling gradient
  // (64x8x8x8) then vectorises: 126 -> 73 us a call (METAJIT_PROFILE; tests/
  // test_ops_correctness.cc checks that the int index is printed).
  void narrow(const IndexExpr& e) {
    if (!divides(e) || !ix_plain_arithmetic(e)) return;
    std::set<int> vars;
    std::optional<Interval> r = interval(e, vars);
    if (!r || r->magnitude > INT32_MAX) return;
    for (int v : vars) require(extent_.at(v), ix_const(kMaxLoopExtent));
    out_.narrow_indexes.insert(ix_to_string(e));
  }

  static bool divides(const IndexExpr& e) {
    if (e.kind == IxKind::Div || e.kind == IxKind::Mod) return true;
    for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
      if (c && divides(*c)) return true;
    return false;
  }

  // Whether guard condition `g` is true for the whole launch: a conjunction of tests found true.
  bool holds(const IndexExpr& g) const {
    if (g.kind == IxKind::Const) return g.value != 0;
    if (g.kind == IxKind::And) return holds(*g.a) && holds(*g.b);
    return (g.kind == IxKind::Lt || g.kind == IxKind::Ge) && out_.true_tests.count(ix_to_string(g));
  }

  void extra(const IndexExpr& e) {
    const KBuffer& b = ir_.inputs.at(size_t(e.value));
    // A 0-d array's read has no test to drop (c_family_emitter.cc, extra_readers()).
    if (e.args.empty() || e.args.size() != b.dims.size()) return;
    for (const IndexExprPtr& a : e.args)
      if (!loop_extent(a.get())) return;
    for (size_t k = 0; k < e.args.size(); ++k) require(*loop_extent(e.args[k].get()), b.dims[k]);
    out_.unchecked_reads.insert(ix_to_string(e));
  }

  const KernelIR& ir_;
  std::map<int, IndexExprPtr> extent_;
  std::set<std::string> seen_;
  std::vector<const IndexExpr*> guards_;
  InBoundsVersion out_;
};

}  // namespace

InBoundsVersion extra_reads_in_bounds(const KernelIR& ir) {
  if (ir.kind != KernelKind::Map || ir.loops.empty()) return {};
  Finder f(ir);
  f.block(ir.body);
  return std::move(f).result();
}

}  // namespace metajit
