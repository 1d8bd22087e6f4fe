#include "codegen/kernel_patterns.h"

#include "codegen/loop_invariants.h"

namespace metajit {
namespace {

void loads_in(const KBlock& b, std::vector<const KStmt*>& out) {
  for (const KStmt& st : b.stmts) {
    if (st.kind == KOp::Load) out.push_back(&st);
    if (st.body) loads_in(*st.body, out);
  }
}

void collect_needed(const KBlock& body, int id, std::set<int>& need) {
  for (size_t s = body.stmts.size(); s-- > 0;) {
    const KStmt& st = body.stmts[s];
    if (st.id != id) continue;
    if (!need.insert(st.id).second) return;
    for (int a : st.args) collect_needed(body, a, need);
    if (st.body) {
      std::set<int> defined, used;
      outside_uses(*st.body, defined, used);
      for (int u : used) collect_needed(body, u, need);
    }
    return;
  }
}

// The top-level statements of `ir` that the values `used` need, transitively, among those
// computed inside the output loops (level >= 0; the others are computed once per launch),
// in order; false when one of them is (or needs) a Reduce.
bool prologue_statements(const KernelIR& ir, const std::vector<int>& levels,
                         const std::set<int>& used, std::vector<size_t>& out) {
  std::set<int> need(used.begin(), used.end());
  std::vector<bool> take(ir.body.stmts.size(), false);
  for (size_t s = ir.body.stmts.size(); s-- > 0;) {
    const KStmt& st = ir.body.stmts[s];
    if (!need.count(st.id) || levels[s] < 0) continue;
    if (st.kind == KOp::Reduce) return false;
    take[s] = true;
    for (int a : st.args) need.insert(a);
    if (st.body) {
      std::set<int> defined, inner;
      outside_uses(*st.body, defined, inner);
      need.insert(inner.begin(), inner.end());
    }
  }
  for (size_t s = 0; s < take.size(); ++s)
    if (take[s]) out.push_back(s);
  return true;
}

// Values the statements `stmts` of `body` read from outside it.
std::set<int> outside_uses_of(const KBlock& body, const std::vector<size_t>& stmts) {
  KBlock part;
  for (size_t s : stmts) part.stmts.push_back(body.stmts[s]);
  part.result = part.stmts.empty() ? -1 : part.stmts.back().id;
  std::set<int> defined, used;
  outside_uses(part, defined, used);
  return used;
}

}  // namespace

void outside_uses(const KBlock& b, std::set<int>& defined, std::set<int>& used) {
  for (const KStmt& st : b.stmts) {
    for (int a : st.args)
      if (!defined.count(a)) used.insert(a);
    if (st.body) outside_uses(*st.body, defined, used);
    defined.insert(st.id);
  }
  if (!defined.count(b.result)) used.insert(b.result);
}

namespace {

// The reduction's shape along the innermost output loop: whether some load's last index reads
// `inner_var` and none of the reduced variables (a column) or one of them too (a window), and
// whether one reads reduced variables without `inner_var` (along the reduced axes).
struct LastAxisReads {
  bool column = false, window = false, along_reduced = false;
};

LastAxisReads last_axis_reads(const KStmt& st, int inner_var) {
  std::set<int> own;
  for (const KLoop& l : st.loops) own.insert(l.var);
  std::vector<const KStmt*> loads;
  loads_in(*st.body, loads);
  LastAxisReads r;
  for (const KStmt* ld : loads) {
    if (ld->index.empty()) continue;
    std::set<int> last;
    std::vector<const IndexExpr*> todo{ld->index.back().get()};
    while (!todo.empty()) {
      const IndexExpr* e = todo.back();
      todo.pop_back();
      if (!e) continue;
      if (e->kind == IxKind::Var) last.insert(int(e->value));
      todo.push_back(e->a.get());
      todo.push_back(e->b.get());
      todo.push_back(e->c.get());
      for (const IndexExprPtr& a : e->args) todo.push_back(a.get());
    }
    bool reads_own = false;
    for (int v : own) reads_own = reads_own || last.count(v) > 0;
    const bool reads_inner = last.count(inner_var) > 0;
    r.column = r.column || (reads_inner && !reads_own);
    r.window = r.window || (reads_inner && reads_own);
    r.along_reduced = r.along_reduced || (reads_own && !reads_inner);
  }
  return r;
}

// Whether the reduction's body reads a value computed per output element (`level_of_value[id]`
// >= inner_level), which a strip of outputs would not have.
bool reads_inner_values(const KStmt& st, const std::vector<int>& level_of_value, int inner_level) {
  std::set<int> defined, used;
  outside_uses(*st.body, defined, used);
  for (int u : used)
    if (u >= 0 && size_t(u) < level_of_value.size() && level_of_value[size_t(u)] >= inner_level)
      return true;
  return false;
}

}  // namespace

bool is_column_reduction(const KStmt& st, const std::vector<int>& level_of_value, int inner_var,
                         int inner_level) {
  if (st.kind != KOp::Reduce) return false;
  const LastAxisReads r = last_axis_reads(st, inner_var);
  return r.column && !r.window && !r.along_reduced &&
         !reads_inner_values(st, level_of_value, inner_level);
}

bool is_window_reduction(const KStmt& st, const std::vector<int>& level_of_value, int inner_var,
                         int inner_level) {
  if (st.kind != KOp::Reduce) return false;
  const LastAxisReads r = last_axis_reads(st, inner_var);
  return r.window && !r.along_reduced && !reads_inner_values(st, level_of_value, inner_level);
}

namespace {

// The values a contraction's micro-kernels compute in: float32, and the half types, whose
// operands the packing widens into float32 panels (the sums float32 until stored: docs/design.md
// §3).
bool packs_as_float(DType t) {
  return t == DType::Float32 || is_half(t);
}

// The 8-bit dtype `value` (a statement of `body`) was cast to Int32 from, or Float32 where it
// is not such a cast.
DType cast_from_bytes(const KBlock& body, int value) {
  for (const KStmt& st : body.stmts)
    if (st.id == value && st.kind == KOp::Cast && st.dtype == DType::Int32 && st.args.size() == 1)
      for (const KStmt& from : body.stmts)
        if (from.id == st.args[0] && (from.dtype == DType::Int8 || from.dtype == DType::UInt8))
          return from.dtype;
  return DType::Float32;
}

}  // namespace

std::optional<Contraction> find_contraction(const KernelIR& ir, const std::vector<int>& levels,
                                            const std::vector<int>& level_of_value,
                                            bool int8_sums) {
  const int k = int(ir.loops.size());
  if (k < 2) return std::nullopt;
  Contraction c;
  int reduces = 0;
  for (size_t s = 0; s < ir.body.stmts.size(); ++s)
    if (ir.body.stmts[s].kind == KOp::Reduce) ++reduces, c.reduce_index = s;
  if (reduces != 1) return std::nullopt;
  const KStmt& r = ir.body.stmts[c.reduce_index];
  const bool int_sums = int8_sums && r.dtype == DType::Int32;
  auto sums = [&](DType t) { return int_sums ? t == DType::Int32 : packs_as_float(t); };
  if (!(packs_as_float(ir.output.dtype) || (int_sums && ir.output.dtype == DType::Int32)))
    return std::nullopt;
  if (levels[c.reduce_index] < 0 || ReduceOp(r.op) != ReduceOp::Add || !sums(r.dtype) ||
      r.loops.empty())
    return std::nullopt;
  const KBlock& body = *r.body;
  const KStmt* mul = nullptr;
  for (const KStmt& st : body.stmts)
    if (st.id == body.result) mul = &st;
  if (!mul || mul->kind != KOp::Binary || BinaryOp(mul->op) != BinaryOp::Mul || !sums(mul->dtype))
    return std::nullopt;
  c.a = mul->args[0];
  c.b = mul->args[1];
  if (int_sums) {
    c.a_bytes = cast_from_bytes(body, c.a);
    c.b_bytes = cast_from_bytes(body, c.b);
    if (c.a_bytes == DType::Float32 || c.b_bytes == DType::Float32) return std::nullopt;
  }
  std::set<int> need_a, need_b;
  collect_needed(body, c.a, need_a);
  collect_needed(body, c.b, need_b);
  for (int id : need_a)
    if (need_b.count(id)) return std::nullopt;  // shared work: keep the plain schedule
  for (size_t s = 0; s < body.stmts.size(); ++s) {
    const KStmt& st = body.stmts[s];
    if (need_a.count(st.id))
      c.a_stmts.push_back(s);
    else if (need_b.count(st.id))
      c.b_stmts.push_back(s);
    else if (st.id != mul->id)
      return std::nullopt;
  }
  // Values from outside the body are computed once per launch, or are the operand's prologue:
  // element-wise work over loads that the emitters redo per operand element.
  std::set<int> defined, used;
  outside_uses(body, defined, used);
  for (int u : used)
    if (u < 0 || size_t(u) >= level_of_value.size()) return std::nullopt;
  if (!prologue_statements(ir, levels, outside_uses_of(body, c.a_stmts), c.a_outer) ||
      !prologue_statements(ir, levels, outside_uses_of(body, c.b_stmts), c.b_outer))
    return std::nullopt;
  std::vector<std::set<int>> vars = value_variables(ir);
  auto vars_of = [&](const std::vector<size_t>& stmts) {
    std::set<int> out;
    for (size_t s : stmts)
      out.insert(vars[size_t(body.stmts[s].id)].begin(), vars[size_t(body.stmts[s].id)].end());
    return out;
  };
  std::set<int> va = vars_of(c.a_stmts), vb = vars_of(c.b_stmts);
  auto defined_in_body = [&](int arg) {  // operands from outside the body: not blocked
    for (const KStmt& st : body.stmts)
      if (st.id == arg) return true;
    return false;
  };
  if (!defined_in_body(c.a) || !defined_in_body(c.b)) return std::nullopt;
  // j: the innermost output loop, read by b only; i: the innermost other loop read by a only.
  // Swapping the operands covers b*a.
  for (int swap = 0; swap < 2; ++swap) {
    const int j = ir.loops[size_t(k - 1)].var;
    if (vb.count(j) && !va.count(j)) {
      for (int p = k - 2; p >= 0; --p) {
        const int i = ir.loops[size_t(p)].var;
        if (va.count(i) && !vb.count(i)) {
          c.i_var = i;
          c.j_var = j;
          return c;
        }
      }
    }
    std::swap(c.a, c.b);
    std::swap(c.a_bytes, c.b_bytes);
    std::swap(c.a_stmts, c.b_stmts);
    std::swap(c.a_outer, c.b_outer);
    std::swap(va, vb);
  }
  return std::nullopt;
}

ContractionLoops contraction_loops(const KernelIR& ir, const Contraction& c) {
  ContractionLoops out;
  for (const KLoop& l : ir.loops) {
    if (l.var == c.i_var)
      out.i = &l;
    else if (l.var == c.j_var)
      out.j = &l;
    else
      out.outer.push_back(&l);
  }
  return out;
}

std::vector<int> levels_by_value(const KernelIR& ir, const std::vector<int>& levels) {
  std::vector<int> out;
  for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
    int id = ir.body.stmts[s].id;
    if (size_t(id) >= out.size()) out.resize(size_t(id) + 1, -1);
    out[size_t(id)] = levels[s];
  }
  return out;
}

}  // namespace metajit
