#include "codegen/loop_invariants.h"

#include <algorithm>

#include "base/check.h"
#include "codegen/verify_kernel_ir.h"

namespace metajit {
namespace {

void expr_vars(const IndexExpr* e, std::set<int>& out) {
  if (!e) return;
  if (e->kind == IxKind::Var) out.insert(int(e->value));
  expr_vars(e->a.get(), out);
  expr_vars(e->b.get(), out);
  expr_vars(e->c.get(), out);
  for (const IndexExprPtr& a : e->args) expr_vars(a.get(), out);
}

int max_value_id(const KBlock& b) {
  int m = b.result;
  for (const KStmt& st : b.stmts) {
    m = std::max(m, st.id);
    if (st.body) m = std::max(m, max_value_id(*st.body));
  }
  return m;
}

void fill_block(const KBlock& b, std::vector<std::set<int>>& vars) {
  for (const KStmt& st : b.stmts) {
    if (st.body) fill_block(*st.body, vars);
    vars[size_t(st.id)] = statement_vars(st, vars);
  }
}

// Hoists out of the Reduce bodies of `b` (recursively), inserting hoisted statements before
// the Reduce they came from.
void hoist_block(KBlock& b, std::vector<std::set<int>>& vars) {
  std::vector<KStmt> out;
  out.reserve(b.stmts.size());
  for (KStmt& st : b.stmts) {
    if (st.kind == KOp::Reduce && st.body) {
      // Bodies are shared_ptrs that copies of the IR may share: change a private copy.
      st.body = std::make_shared<KBlock>(*st.body);
      hoist_block(*st.body, vars);
      std::set<int> own;
      for (const KLoop& l : st.loops) own.insert(l.var);
      std::set<int> stays;  // values that must stay inside the loop
      std::vector<KStmt> keep;
      for (KStmt& inner : st.body->stmts) {
        bool depends = false;
        for (int v : vars[size_t(inner.id)]) depends = depends || own.count(v);
        for (int a : inner.args) depends = depends || stays.count(a);
        if (inner.body) {
          // A nested body may use values of this body by id.
          std::vector<int> used;
          std::vector<const KBlock*> todo{inner.body.get()};
          while (!todo.empty()) {
            const KBlock* blk = todo.back();
            todo.pop_back();
            for (const KStmt& s : blk->stmts) {
              for (int a : s.args) depends = depends || stays.count(a);
              if (s.body) todo.push_back(s.body.get());
            }
            depends = depends || stays.count(blk->result);
          }
        }
        if (depends) {
          stays.insert(inner.id);
          keep.push_back(std::move(inner));
        } else {
          out.push_back(std::move(inner));
        }
      }
      st.body->stmts = std::move(keep);
    }
    out.push_back(std::move(st));
  }
  b.stmts = std::move(out);
}

}  // namespace

std::set<int> statement_vars(const KStmt& st, const std::vector<std::set<int>>& value_vars) {
  std::set<int> out;
  for (const IndexExprPtr& e : st.index) expr_vars(e.get(), out);
  expr_vars(st.cond.get(), out);
  for (int a : st.args)
    if (a >= 0 && size_t(a) < value_vars.size())
      out.insert(value_vars[size_t(a)].begin(), value_vars[size_t(a)].end());
  if (st.body) {
    for (const KStmt& inner : st.body->stmts) {
      const std::set<int>& v = value_vars[size_t(inner.id)];
      out.insert(v.begin(), v.end());
    }
    if (st.body->result >= 0) {
      const std::set<int>& v = value_vars[size_t(st.body->result)];
      out.insert(v.begin(), v.end());
    }
  }
  for (const KLoop& l : st.loops) {
    out.erase(l.var);
    expr_vars(l.extent.get(), out);
  }
  return out;
}

std::vector<std::set<int>> value_variables(const KernelIR& ir) {
  std::vector<std::set<int>> vars(size_t(max_value_id(ir.body) + 1));
  fill_block(ir.body, vars);
  return vars;
}

void hoist_reduce_invariants(KernelIR& ir) {
  std::vector<std::set<int>> vars = value_variables(ir);
  hoist_block(ir.body, vars);
  const std::optional<std::string> problem = verify_kernel_ir(ir);
  METAJIT_CHECK(!problem, "hoist_reduce_invariants wrote invalid kernel IR: " + *problem + "\n" +
                              serialize_ir(ir));
}

std::vector<int> statement_levels(const KernelIR& ir) {
  std::vector<std::set<int>> vars = value_variables(ir);
  std::vector<int> levels;
  for (const KStmt& st : ir.body.stmts) {
    int level = -1;
    for (size_t p = 0; p < ir.loops.size(); ++p)
      if (vars[size_t(st.id)].count(ir.loops[p].var)) level = int(p);
    levels.push_back(level);
  }
  return levels;
}

}  // namespace metajit
