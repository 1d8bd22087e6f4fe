// The C++ emitter's packing of a contraction's operands into the micro-kernel's panels: along
// the reduction through register tiles, through a row buffer, merged columns, guard tests
// hoisted and spanned.
#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpp_emitter_internal.h"

namespace metajit {

// Declares the variables of the reduction's loops [0, upto) from the flat index mj_rem,
// innermost first (a remainder and a quotient each), the outermost taking the rest.
void CppEmitter::odometer_vars(const KStmt& r, size_t upto, int d) {
  for (size_t n = upto; n-- > 0;) {
    const std::string i = "i" + std::to_string(r.loops[n].var), e = ix(*r.loops[n].extent);
    if (n == 0)
      line(d, "i64 " + i + " = mj_rem;");
    else
      line(d, "i64 " + i + " = mj_rem % " + e + "; mj_rem /= " + e + ";");
  }
}

// Narrows the declared [mj_lo, mj_hi) from both ends to where `pass` holds for `var` = `base`
// + the position: where the tests are affine in `var` the positions passing them are one
// interval, and a range whose ends pass costs two tests (merged_piece_in_bounds,
// guarded_step_loop, CppEmitter::window_strip_step).
void CppEmitter::interval_from_ends(const std::string& pass, const std::string& var,
                                    const std::string& base, int d) {
  line(d, "for (; mj_lo < mj_hi; ++mj_lo) {");
  line(d + 1, "const i64 " + var + " = " + base + " + mj_lo;");
  line(d + 1, "if (" + pass + ") break;");
  line(d, "}");
  line(d, "for (; mj_hi > mj_lo; --mj_hi) {");
  line(d + 1, "const i64 " + var + " = " + base + " + mj_hi - 1;");
  line(d + 1, "if (" + pass + ") break;");
  line(d, "}");
}

template <class Body>
// Sets the reduction's loop variables to flat reduction index `start` (innermost fastest),
// then runs `count` steps of `body`, advancing them like an odometer: a block of the
// reduction walked without a division per step. Needs count > 0 (every extent > 0).
void CppEmitter::reduction_walk(const KStmt& r, const std::string& start, const std::string& count,
                                int d, const Body& body) {
  line(d, "{");
  line(d + 1, "i64 mj_rem = " + start + ";");
  odometer_vars(r, r.loops.size(), d + 1);
  line(d + 1, "(void)mj_rem;");
  line(d + 1, "for (i64 mj_kk = 0; mj_kk < " + count + "; ++mj_kk) {");
  body(d + 2);
  line(d + 2, odometer_advance(r));
  line(d + 1, "}");
  line(d, "}");
}

// One step of the reduction's loop variables as an odometer: the innermost first, carrying
// outwards (reduction_walk, and the direct tiles' offset tables, codegen/cpp_direct_columns.cc).
std::string CppEmitter::odometer_advance(const KStmt& r) {
  std::string adv;
  for (size_t n = r.loops.size(); n-- > 0;) {
    const std::string i = "i" + std::to_string(r.loops[n].var), e = ix(*r.loops[n].extent);
    if (n == 0) {
      adv += "++" + i + ";";
    } else {
      adv += "if (++" + i + " == " + e + ") { " + i + " = 0; ";
    }
  }
  for (size_t n = 1; n < r.loops.size(); ++n) adv += " }";
  return adv;
}

template <class Emit>
// Runs `emit(start, run, d)` over flat reduction steps [first, first + count) in runs of the
// reduction's innermost loop: mj_at steps done before the run, the innermost variable from
// `start` for `run` steps, the outer variables (an odometer, as reduction_walk) fixed. A
// reduction over several loops whose loads run along the innermost one (a convolution's
// weight gradient sums over n, oh, ow and reads rows of ow) is then packed in contiguous
// vector loops; at most one division per loop a call.
void CppEmitter::innermost_runs(const KStmt& r, const std::string& first, const std::string& count,
                                int d, const Emit& emit) {
  const size_t n = r.loops.size();
  const std::string in = ix(*r.loops[n - 1].extent);
  line(d, "{");
  line(d + 1, "i64 mj_rem = " + first + ";");
  line(d + 1, "i64 mj_s = mj_rem % " + in + "; mj_rem /= " + in + ";");
  odometer_vars(r, n - 1, d + 1);
  line(d + 1, "(void)mj_rem;");
  line(d + 1, "for (i64 mj_at = 0; mj_at < " + count + ";) {");
  line(d + 2, "const i64 mj_run = " + count + " - mj_at < " + in + " - mj_s ? " + count +
                  " - mj_at : " + in + " - mj_s;");
  emit("mj_s", "mj_run", d + 2);
  std::string adv = "mj_at += mj_run; mj_s = 0; ";
  for (size_t k = n - 1; k-- > 0;) {
    const std::string i = "i" + std::to_string(r.loops[k].var), e = ix(*r.loops[k].extent);
    adv += k == 0 ? "++" + i + ";" : "if (++" + i + " == " + e + ") { " + i + " = 0; ";
  }
  for (size_t k = 1; k + 1 < n; ++k) adv += " }";
  line(d + 2, adv);
  line(d + 1, "}");
  line(d, "}");
}

// Packs one operand of the contraction: for the `n` (of `npad`, a multiple of `pw`) rows of A
// from i = `x0` (or columns of B from j = `x0`) and reduction steps [k0, k0 + kn), value
// x(row, k) goes to dst[(row / pw) * ps + (k - k0) * pw + row % pw]; padding rows are zero.
void CppEmitter::pack_operand(const KStmt& r, const std::vector<KStmt>& prologue,
                              const std::vector<size_t>& stmts, int value, const std::string& var,
                              int pw, const std::string& dst, const std::string& ps,
                              const std::string& x0, const std::string& n, const std::string& npad,
                              const std::string& k0, const std::string& kn, int d,
                              const MergedColumns* merged) {
  const int own = std::stoi(var.substr(1));
  if (!merged && packs_along_reduction(r, prologue, stmts, own)) {
    pack_along_reduction(r, prologue, stmts, value, var, pw, dst, ps, x0, n, npad, k0, kn, d);
    return;
  }
  if (merged) {
    pack_merged_columns(r, prologue, stmts, value, var, pw, dst, ps, x0, n, npad, k0, kn, d,
                        *merged);
    return;
  }
  const RowTests tests = row_tests(r, stmts, own);
  const bool buffered = packs_through_buffer(r, prologue, stmts, own, tests);
  // Rows whose guards pass for the whole group (the attention products' q, k, v reindexed
  // from a packed qkv; a head merge's i / 64, i % 64) go through the row buffer without their
  // tests: the tests of the row alone once per packing, for every row; those that also read
  // the reduction step at the group's first and last rows (affine, so an interval). Panels of
  // 16 or more rows are whole vectors already in pack_panels' span loop (64-row panels through
  // the buffer: softmax -> matmul 20% slower on AVX-512, measured).
  const bool by_group = buffered && pw < kPackRows / 4 && all_affine(tests.steps, own) &&
                        !(tests.rows.empty() && tests.steps.empty());
  if (by_group) {
    line(d, "const i64 mj_rows = " + n + " < " + npad + " ? " + n + " : " + npad + ";");
    line(d, "bool mj_rows_ok = mj_rows > 0;");
    if (!tests.rows.empty()) {
      line(d, "for (i64 mj_t = 0; mj_rows_ok && mj_t < mj_rows; ++mj_t) {");
      line(d + 1, "const i64 " + var + " = " + x0 + " + mj_t;");
      line(d + 1, "mj_rows_ok = " + ix(*conjunction(tests.rows)) + ";");
      line(d, "}");
    }
  }
  reduction_walk(r, k0, kn, d, [&](int dd) {
    const GuardedBodies b = hoist_guard_tests(r, prologue, stmts, own, {own}, dd);
    if (b.span_tests.empty() && buffered) {
      pack_rows_through_buffer(b.body, value, var, pw, dst, ps, x0, n, npad, dd);
      return;
    }
    int e = dd;
    if (by_group) {
      line(dd, "bool mj_rows_in = mj_rows_ok;");
      span_check("mj_rows_in", tests.steps, var, {x0, x0 + " + mj_rows - 1"}, dd);
      line(dd, "if (mj_rows_in) {");
      pack_rows_through_buffer(b.full_body, value, var, pw, dst, ps, x0, n, npad, dd + 1);
      line(dd, "} else {");
      e = dd + 1;
    }
    pack_panels(b.body, b.full_body, b.spannable ? b.span_tests : std::vector<IndexExprPtr>{},
                value, var, pw, dst, ps, x0, n, npad, e);
    if (e > dd) line(dd, "}");
  });
}

CppEmitter::GuardedBodies CppEmitter::hoist_guard_tests(const KStmt& r,
                                                        const std::vector<KStmt>& prologue,
                                                        const std::vector<size_t>& stmts, int own,
                                                        const std::set<int>& vary, int d) {
  GuardedBodies b;
  b.body = b.full_body = prologue;
  int hoisted = 0;
  for (size_t s : stmts) {
    KStmt st = r.body->stmts[s];
    KStmt full = st;
    hoist_guard_test(st, full, b, own, vary, hoisted, d);
    b.body.push_back(std::move(st));
    b.full_body.push_back(std::move(full));
  }
  return b;
}

// hoist_guard_tests for one statement, and for the guards nested in its body (a head split
// read from a packed qkv nests three reindexes: their row tests per element kept k and v's
// packing in dK = dS^T Q at 360 us a call, against 190 from contiguous q, k, v).
void CppEmitter::hoist_guard_test(KStmt& st, KStmt& full, GuardedBodies& b, int own,
                                  const std::set<int>& vary, int& hoisted, int d) {
  if (st.kind == KOp::Guard && st.cond) {
    std::vector<IndexExprPtr> fixed, varying;
    split_conjuncts(st.cond, vary, fixed, varying);
    for (const IndexExprPtr& e : varying) {
      b.spannable = b.spannable && is_affine_comparison(*e, own);
      b.span_tests.push_back(e);
    }
    IndexExprPtr f = ix_const(1);
    if (!fixed.empty()) {
      const int name = kHoistedVar + hoisted++;
      f = conjunction(fixed);
      line(d, "const i64 i" + std::to_string(name) + " = " + ix(*f) + ";");
      IndexExprPtr c = ix_var(name);
      f = c;
      for (const IndexExprPtr& e : varying) c = ix_binary(IxKind::And, c, e);
      st.cond = c;
    }
    full.cond = f;
  }
  if (!st.body) return;
  st.body = std::make_shared<KBlock>(*st.body);
  full.body = std::make_shared<KBlock>(*full.body);
  for (size_t k = 0; k < st.body->stmts.size(); ++k)
    hoist_guard_test(st.body->stmts[k], full.body->stmts[k], b, own, vary, hoisted, d);
}

bool CppEmitter::all_affine(const std::vector<IndexExprPtr>& tests, int own) {
  for (const IndexExprPtr& t : tests)
    if (!is_affine_comparison(*t, own)) return false;
  return true;
}

// Nested guards' tests too: hoist_guard_tests' full body drops them all.
CppEmitter::RowTests CppEmitter::row_tests(const KStmt& r, const std::vector<size_t>& stmts,
                                           int own) {
  RowTests t;
  std::vector<KStmt> top;
  for (size_t s : stmts) top.push_back(r.body->stmts[s]);
  std::vector<const KStmt*> flat;
  flatten(top, flat);
  for (const KStmt* g : flat) {
    const KStmt& st = *g;
    if (st.kind != KOp::Guard || !st.cond) continue;
    std::vector<IndexExprPtr> fixed, varying;
    split_conjuncts(st.cond, {own}, fixed, varying);
    for (const IndexExprPtr& e : varying) {
      bool step = false;
      for (const KLoop& l : r.loops) step = step || ix_reads_var(*e, l.var);
      (step ? t.steps : t.rows).push_back(e);
    }
  }
  return t;
}

// pack_operand when the columns are (outer, inner) pairs of two output loops, walked in
// pieces that stay within one inner row and one panel: inside a piece both loads and stores
// are contiguous, and the pieces advance without a division.
void CppEmitter::pack_merged_columns(const KStmt& r, const std::vector<KStmt>& prologue,
                                     const std::vector<size_t>& stmts, int value,
                                     const std::string& var, int pw, const std::string& dst,
                                     const std::string& ps, const std::string& x0,
                                     const std::string& n, const std::string& npad,
                                     const std::string& k0, const std::string& kn, int d,
                                     const MergedColumns& merged) {
  // Where column x0 lies in (outer, inner) loop terms: one division per packing.
  line(d, "const i64 mj_fo = (" + x0 + ") / mj_eji, mj_fi = (" + x0 + ") % mj_eji;");
  const int own = std::stoi(var.substr(1));
  if (merged.flat) {
    std::vector<KStmt> all = prologue;
    for (size_t s : stmts) all.push_back(r.body->stmts[s]);
    line(d, "if (" + npad + " <= " + std::to_string(kFlatColumns) + " && " +
                flat_columns_test(all, merged, own) + ") {");
    pack_merged_flat(r, prologue, stmts, value, var, pw, dst, ps, x0, n, npad, k0, kn, d + 1,
                     merged);
    line(d, "} else {");
    pack_merged_pieces(r, prologue, stmts, value, var, pw, dst, ps, n, npad, k0, kn, d + 1, merged);
    line(d, "}");
  } else {
    pack_merged_pieces(r, prologue, stmts, value, var, pw, dst, ps, n, npad, k0, kn, d, merged);
  }
}

// pack_merged_columns row piece by row piece (from column mj_fo, mj_fi).
void CppEmitter::pack_merged_pieces(const KStmt& r, const std::vector<KStmt>& prologue,
                                    const std::vector<size_t>& stmts, int value,
                                    const std::string& var, int pw, const std::string& dst,
                                    const std::string& ps, const std::string& n,
                                    const std::string& npad, const std::string& k0,
                                    const std::string& kn, int d, const MergedColumns& merged) {
  const std::string PW = std::to_string(pw);
  const int own = std::stoi(var.substr(1));
  std::set<int> vary = {own};
  vary.insert(merged.outer_vars.begin(), merged.outer_vars.end());
  reduction_walk(r, k0, kn, d, [&](int dd) {
    const GuardedBodies b = hoist_guard_tests(r, prologue, stmts, own, vary, dd);
    line(dd, "i64 mj_jo = mj_fo, mj_ji = mj_fi;");
    line(dd, "for (i64 mj_c = 0; mj_c < " + npad + ";) {");
    line(dd + 1, "i64 mj_len = mj_eji - mj_ji;");
    line(dd + 1,
         "if (" + PW + " - mj_c % " + PW + " < mj_len) mj_len = " + PW + " - mj_c % " + PW + ";");
    line(dd + 1, "if (" + npad + " - mj_c < mj_len) mj_len = " + npad + " - mj_c;");
    line(dd + 1, "float* const mj_dst = " + dst + " + (mj_c / " + PW + ") * (" + ps +
                     ") + mj_kk * " + PW + " + mj_c % " + PW + ";");
    merged_outer_vars(merged, dd + 1);
    if (b.spannable && !b.span_tests.empty()) {
      merged_piece_in_bounds(b, value, var, n, dd + 1);
    } else {
      line(dd + 1, "#pragma omp simd");
      line(dd + 1, "for (i64 mj_t = 0; mj_t < mj_len; ++mj_t) {");
      packed_element("mj_c + mj_t < " + n, var, "mj_ji + mj_t", b.body, value, "mj_dst[mj_t]",
                     dd + 2);
      line(dd + 1, "}");
    }
    line(dd + 1, "mj_c += mj_len;");
    line(dd + 1, "mj_ji += mj_len;");
    line(dd + 1, "if (mj_ji >= mj_eji) { mj_ji -= mj_eji; ++mj_jo; }");
    line(dd, "}");
  });
}

namespace {

// The largest loop variable number `e` reads (-1: none).
int max_var(const IndexExpr& e) {
  int m = e.kind == IxKind::Var ? int(e.value) : -1;
  for (const IndexExprPtr& a : e.args) m = std::max(m, max_var(*a));
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c) m = std::max(m, max_var(*c));
  return m;
}

// `idx` with i<v> replaced by `to(v)` (a constant) for every variable it reads.
std::vector<IndexExprPtr> with_vars(const std::vector<IndexExprPtr>& idx,
                                    const std::function<int64_t(int)>& to) {
  int m = -1;
  for (const IndexExprPtr& e : idx) m = std::max(m, max_var(*e));
  std::vector<IndexExprPtr> vars;
  for (int v = 0; v <= m; ++v) vars.push_back(ix_const(to(v)));
  std::vector<IndexExprPtr> out;
  for (const IndexExprPtr& e : idx) out.push_back(ix_substitute(e, vars));
  return out;
}

bool reads_any(const KStmt& st, const std::vector<int>& vars) {
  for (const IndexExprPtr& e : st.index)
    for (int v : vars)
      if (ix_reads_var(*e, v)) return true;
  return false;
}

// The merged outer loops' variables `outer` and the column loop's `own`.
std::vector<int> column_vars(const std::vector<int>& outer, int own) {
  std::vector<int> cols = outer;
  cols.push_back(own);
  return cols;
}

}  // namespace

// The loads of `stmts` (guards' bodies included) that read a column variable, at their offset
// for column 0 plus the flat column: each index with the column variables 0, the last one
// plus i<kFlatColumnVar>. Exact where flat_columns_test holds.
std::vector<KStmt> CppEmitter::flat_loads(const std::vector<KStmt>& stmts,
                                          const MergedColumns& merged, int own) {
  const std::vector<int> cols = column_vars(merged.outer_vars, own);
  std::vector<KStmt> out = stmts;
  for (KStmt& st : out) {
    if (st.body) {
      auto body = std::make_shared<KBlock>(*st.body);
      body->stmts = flat_loads(body->stmts, merged, own);
      st.body = body;
    }
    if (st.kind != KOp::Load || !reads_any(st, cols)) continue;
    std::vector<IndexExprPtr> idx = st.index;
    for (IndexExprPtr& e : idx) {
      std::vector<IndexExprPtr> vars;
      for (int v = 0; v <= max_var(*e); ++v)
        vars.push_back(std::find(cols.begin(), cols.end(), v) != cols.end() ? ix_const(0)
                                                                            : ix_var(v));
      if (!vars.empty()) e = ix_substitute(e, vars);
    }
    idx.back() = ix_binary(IxKind::Add, idx.back(), ix_var(kFlatColumnVar));
    st.index = std::move(idx);
  }
  return out;
}

// The run-time condition of the flat packing: rows of at most one vector, and every
// load that reads a column variable contiguous along the flat column (the column variable's
// coefficient in its offset 1, each merged outer loop's the number of columns it steps over).
std::string CppEmitter::flat_columns_test(const std::vector<KStmt>& stmts,
                                          const MergedColumns& merged, int own) {
  const std::vector<int> cols = column_vars(merged.outer_vars, own);
  std::vector<const KStmt*> all;
  flatten(stmts, all);
  std::string test = "mj_eji <= " + std::to_string(std::max(tile_.vector_floats, 4));
  for (const KStmt* st : all) {
    if (st->kind != KOp::Load || !reads_any(*st, cols)) continue;
    const std::string name = "in" + std::to_string(st->buffer);
    const std::string at0 = offset(name, with_vars(st->index, [](int) { return 0; }));
    std::string step = "1";  // columns between consecutive values of cols[k]
    for (size_t k = cols.size(); k-- > 0;) {
      const int v = cols[k];
      const std::string at1 = offset(name, with_vars(st->index, [v](int x) { return x == v; }));
      test += " && (" + at1 + ") - (" + at0 + ") == " + step;
      step = k + 1 == cols.size() ? "mj_eji" : step + " * (" + merged.outer_extents[k] + ")";
    }
  }
  return test;
}

// pack_merged_columns a panel at a time (merged.flat, under flat_columns_test): every column's
// variables from tables filled once, then for each reduction step one vector loop per panel,
// each element under its guards (masked loads) and each load at its offset for column 0 plus
// the flat column. The digits CNN's second convolution's input gradient packs 4x4 images, whose
// rows in pieces of 4 columns (with the guards' interval found per piece) took 183 us a call
// against 64 us this way (dlopen harness, AVX-512).
void CppEmitter::pack_merged_flat(const KStmt& r, const std::vector<KStmt>& prologue,
                                  const std::vector<size_t>& stmts, int value,
                                  const std::string& var, int pw, const std::string& dst,
                                  const std::string& ps, const std::string& x0,
                                  const std::string& n, const std::string& npad,
                                  const std::string& k0, const std::string& kn, int d,
                                  const MergedColumns& merged) {
  const std::string PW = std::to_string(pw), NT = std::to_string(kFlatColumns);
  const int own = std::stoi(var.substr(1));
  const std::vector<int> cols = column_vars(merged.outer_vars, own);
  for (int c : cols) line(d, "int mj_cv" + std::to_string(c) + "[" + NT + "];");
  line(d, "{");
  line(d + 1, "i64 mj_jo = mj_fo, mj_ji = mj_fi;");
  line(d + 1, "for (i64 mj_c = 0; mj_c < " + npad + "; ++mj_c) {");
  merged_outer_vars(merged, d + 2);
  for (int o : merged.outer_vars)
    line(d + 2, "mj_cv" + std::to_string(o) + "[mj_c] = (int)i" + std::to_string(o) + ";");
  line(d + 2, "mj_cv" + std::to_string(own) + "[mj_c] = (int)mj_ji;");
  line(d + 2, "if (++mj_ji == mj_eji) { mj_ji = 0; ++mj_jo; }");
  line(d + 1, "}");
  line(d, "}");
  std::set<int> vary(cols.begin(), cols.end());
  reduction_walk(r, k0, kn, d, [&](int dd) {
    const GuardedBodies b = hoist_guard_tests(r, prologue, stmts, own, vary, dd);
    const std::vector<KStmt> body = flat_loads(b.body, merged, own);
    line(dd, "for (i64 mj_q = 0; mj_q < " + npad + "; mj_q += " + PW + ") {");
    line(dd + 1, "float* const mj_dst = " + dst + " + (mj_q / " + PW + ") * (" + ps +
                     ") + mj_kk * " + PW + ";");
    line(dd + 1, "#pragma omp simd");
    line(dd + 1, "for (i64 mj_t = 0; mj_t < " + PW + "; ++mj_t) {");
    line(dd + 2, "const i64 mj_c = mj_q + mj_t;");
    for (int o : merged.outer_vars)
      line(dd + 2, "const i64 i" + std::to_string(o) + " = mj_cv" + std::to_string(o) + "[mj_c];");
    line(dd + 2, "const i64 i" + std::to_string(kFlatColumnVar) + " = " + x0 + " + mj_c;");
    packed_element("mj_c < " + n, var, "mj_cv" + std::to_string(own) + "[mj_c]", body, value,
                   "mj_dst[mj_t]", dd + 2);
    line(dd + 1, "}");
    line(dd, "}");
  });
}

// One piece of pack_merged_columns (mj_len elements from column mj_ji of the inner row) whose
// guards' row tests are affine in the column (spannable): the elements passing them all form
// one interval [mj_lo, mj_hi), found by testing from both ends, which runs the full body in a
// vector loop; the elements outside it (a convolution's padding at the row's ends), and the
// columns past n, run under their guards. Under the guards every element is a conditional
// load, which g++ left scalar: conv2d's 7x7 stride-2 stem spent 70% of its time packing
// these pieces (perf on an Intel Xeon, AVX-512).
void CppEmitter::merged_piece_in_bounds(const GuardedBodies& b, int value, const std::string& var,
                                        const std::string& n, int d) {
  const std::string tests = ix(*conjunction(b.span_tests));
  line(d, "i64 mj_lo = 0, mj_hi = " + n + " - mj_c < mj_len ? " + n + " - mj_c : mj_len;");
  line(d, "if (mj_hi < 0) mj_hi = 0;");
  interval_from_ends(tests, var, "mj_ji", d);
  line(d, "for (i64 mj_t = 0; mj_t < mj_lo; ++mj_t) {");
  packed_element("mj_c + mj_t < " + n, var, "mj_ji + mj_t", b.body, value, "mj_dst[mj_t]", d + 1);
  line(d, "}");
  line(d, "#pragma omp simd");
  line(d, "for (i64 mj_t = mj_lo; mj_t < mj_hi; ++mj_t) {");
  line(d + 1, "const i64 " + var + " = mj_ji + mj_t;");
  for (const KStmt& st : b.full_body) stmt(st, d + 1);
  line(d + 1, "mj_dst[mj_t] = " + v(value) + ";");
  line(d, "}");
  line(d, "for (i64 mj_t = mj_hi; mj_t < mj_len; ++mj_t) {");
  packed_element("mj_c + mj_t < " + n, var, "mj_ji + mj_t", b.body, value, "mj_dst[mj_t]", d + 1);
  line(d, "}");
}

// Sets `flag` (already declared) to whether every test holds at each of the rows, tested
// while it still holds.
void CppEmitter::span_check(const std::string& flag, const std::vector<IndexExprPtr>& tests,
                            const std::string& var, const std::vector<std::string>& rows, int d) {
  if (tests.empty()) return;
  const IndexExprPtr all = conjunction(tests);
  for (const std::string& row : rows) {
    line(d, "if (" + flag + ") {");
    line(d + 1, "const i64 " + var + " = " + row + ";");
    line(d + 1, flag + " = " + ix(*all) + ";");
    line(d, "}");
  }
}

// pack_operand's rows one panel at a time (pw lanes), each element under its guards; with
// `span_tests` (affine in the row), a panel whose first and last rows pass them runs
// `full_body`, whose guards no longer test the row.
void CppEmitter::pack_panels(const std::vector<KStmt>& body, const std::vector<KStmt>& full_body,
                             const std::vector<IndexExprPtr>& span_tests, int value,
                             const std::string& var, int pw, const std::string& dst,
                             const std::string& ps, const std::string& x0, const std::string& n,
                             const std::string& npad, int d) {
  const std::string PW = std::to_string(pw);
  line(d, "for (i64 mj_q = 0; mj_q < " + npad + "; mj_q += " + PW + ") {");
  line(d + 1, "float* const mj_dst = " + dst + " + (mj_q / " + PW + ") * (" + ps + ") + mj_kk * " +
                  PW + ";");
  int e = d + 1;
  const bool unguarded =
      std::none_of(body.begin(), body.end(), [](const KStmt& st) { return st.kind == KOp::Guard; });
  if (!span_tests.empty() || unguarded) {
    // A whole panel inside the bounds (conv2d's weight gradient: every input channel): the
    // loads are unconditional, so the compiler vectorises the strided reads (a conditional
    // strided load it does not), and rows along memory load as plain vectors, not masked
    // (AMD EPYC: the FFN weight gradient packing its dH with vmaskmovps, 2.6 against 1.8 ms
    // for the kernel in the transformer step).
    line(e, "bool mj_span = mj_q + " + PW + " <= " + n + ";");
    span_check("mj_span", span_tests, var,
               {x0 + " + mj_q", x0 + " + mj_q + " + std::to_string(pw - 1)}, e);
    line(e, "if (mj_span) {");
    line(e + 1, "#pragma omp simd");
    line(e + 1, "for (i64 mj_t = 0; mj_t < " + PW + "; ++mj_t) {");
    line(e + 2, "const i64 " + var + " = " + x0 + " + mj_q + mj_t;");
    for (const KStmt& st : full_body) stmt(st, e + 2);
    line(e + 2, "mj_dst[mj_t] = " + v(value) + ";");
    line(e + 1, "}");
    line(e, "} else {");
    ++e;
  }
  line(e, "#pragma omp simd");
  line(e, "for (i64 mj_t = 0; mj_t < " + PW + "; ++mj_t) {");
  packed_element("mj_q + mj_t < " + n, var, x0 + " + mj_q + mj_t", body, value, "mj_dst[mj_t]",
                 e + 1);
  line(e, "}");
  if (e > d + 1) line(d + 1, "}");
  line(d, "}");
}

// Rows that pack_operand computes through the buffer (packs_through_buffer) and that no
// row-dependent test (left) excludes: vector loops over the rows, a whole number of panels
// of at least kPackRows rows at a time (pw rows of a panel are fewer than a vector's lanes:
// softmax's exp packed 6 at a time ran at a third of the speed). The rows inside the operand
// are computed without a branch (g++ vectorises neither a load nor a call under `if`:
// libmvec's variants are unmasked) into a row buffer, the padding rows are zeroed, and each
// panel's pw values are copied to their place (a scatter in the vector loop kept it from
// vectorising: P^T of a softmax backward packed 4x slower than its split form; a GELU
// transposed as the A of a weight gradient packed at 2.2 ns per element, 1.1 ns with this).
void CppEmitter::pack_rows_through_buffer(const std::vector<KStmt>& body, int value,
                                          const std::string& var, int pw, const std::string& dst,
                                          const std::string& ps, const std::string& x0,
                                          const std::string& n, const std::string& npad, int d) {
  const std::string PW = std::to_string(pw), C = std::to_string(pw * ((kPackRows + pw - 1) / pw));
  line(d, "for (i64 mj_r0 = 0; mj_r0 < " + npad + "; mj_r0 += " + C + ") {");
  line(d + 1, "float mj_row[" + C + "];");
  line(d + 1,
       "const i64 mj_rn = " + npad + " - mj_r0 < " + C + " ? " + npad + " - mj_r0 : " + C + ";");
  line(d + 1, "const i64 mj_rv = " + n + " - mj_r0 < mj_rn ? " + n + " - mj_r0 : mj_rn;");
  line(d + 1, "#pragma omp simd");
  line(d + 1, "for (i64 mj_t = 0; mj_t < mj_rv; ++mj_t) {");
  line(d + 2, "const i64 " + var + " = " + x0 + " + mj_r0 + mj_t;");
  for (const KStmt& st : body) stmt(st, d + 2);
  line(d + 2, "mj_row[mj_t] = " + v(value) + ";");
  line(d + 1, "}");
  line(d + 1, "for (i64 mj_t = mj_rv < 0 ? 0 : mj_rv; mj_t < mj_rn; ++mj_t) mj_row[mj_t] = 0;");
  line(d + 1, "for (i64 mj_q = 0; mj_q < mj_rn; mj_q += " + PW + ") {");
  line(d + 2, "float* const mj_dst = " + dst + " + ((mj_r0 + mj_q) / " + PW + ") * (" + ps +
                  ") + mj_kk * " + PW + ";");
  line(d + 2, "#pragma omp simd");
  line(d + 2, "for (i64 mj_t = 0; mj_t < " + PW + "; ++mj_t) mj_dst[mj_t] = mj_row[mj_q + mj_t];");
  line(d + 1, "}");
  line(d, "}");
}

// Whether an operand is better packed one row at a time along the reduction: its loads run
// along the reduction's innermost loop and not along its rows (a row-major A, a transposed B,
// a convolution weight gradient's activations: runs of one output row, innermost_runs).
// Then the loads are contiguous and any prologue (softmax's exp, a normalisation) vectorises
// along the reduction, where packing across the panel's rows (pw of them, strided) would
// load and compute lane by lane. Plain copies too: the FFN's second product ([1024,512] x
// [512,128], A row-major) packed A in 190 of its 830 us panel by panel, 80 this way
// (measured). A guard that tests the row only (a gather's bounds) is uniform along the
// reduction; other guards keep the row-wise packing and its hoisted tests.
bool CppEmitter::packs_along_reduction(const KStmt& r, const std::vector<KStmt>& prologue,
                                       const std::vector<size_t>& stmts, int own) {
  if (r.loops.empty()) return false;
  const int red = r.loops.back().var;  // runs of the innermost loop (innermost_runs)
  std::vector<const KStmt*> all;
  for (const KStmt& st : prologue) all.push_back(&st);
  for (size_t s : stmts) all.push_back(&r.body->stmts[s]);
  bool along = false;
  for (size_t k = 0; k < all.size(); ++k) {
    const KStmt* st = all[k];
    // A guard that tests the row only (a gather's bounds) is the same along the reduction;
    // bounds of the reduction step itself (an affine comparison: the gathered row's columns)
    // are masks in the vector loop.
    if (st->kind == KOp::Guard) {
      if (!st->cond || !st->body) return false;
      std::vector<IndexExprPtr> fixed, varying;
      split_conjuncts(st->cond, {red}, fixed, varying);
      for (const IndexExprPtr& e : varying)
        if (!is_affine_comparison(*e, red)) return false;
      for (const KStmt& inner : st->body->stmts) all.push_back(&inner);
    }
    if (st->kind != KOp::Load || st->index.empty()) continue;
    const IndexExpr& last = *st->index.back();
    if (ix_reads_var(last, own)) return false;
    along = along || ix_reads_var(last, red);
  }
  return along;
}

// One packed element: `var` = `row`, the operand's statements and its value when `inside`
// holds, else 0; stored to `target`.
void CppEmitter::packed_element(const std::string& inside, const std::string& var,
                                const std::string& row, const std::vector<KStmt>& body, int value,
                                const std::string& target, int d) {
  line(d, "float mj_v = 0;");
  line(d, "if (" + inside + ") {");
  line(d + 1, "const i64 " + var + " = " + row + ";");
  for (const KStmt& st : body) stmt(st, d + 1);
  line(d + 1, "mj_v = " + v(value) + ";");
  line(d, "}");
  line(d, target + " = mj_v;");
}

// Every statement of `stmts`, guards' bodies included.
void CppEmitter::flatten(const std::vector<KStmt>& stmts, std::vector<const KStmt*>& out) {
  for (const KStmt& st : stmts) {
    out.push_back(&st);
    if (st.kind == KOp::Guard && st.body) flatten(st.body->stmts, out);
  }
}

// Whether pack_operand computes the operand's rows in vector loops through a row buffer (when
// it packs across the rows, not along the reduction): for a transcendental, or for work on
// rows along memory: a prologue, or row tests that are not affine (a head merge's i / 64,
// i % 64, which pack_panels tests element by element). A copy of such rows, or one under
// affine tests (a transpose), is no faster through the buffer (a weight gradient's
// transposed activations: 596 against 634 us, and 660 against 635, measured) and keeps the
// panel loop.
bool CppEmitter::packs_through_buffer(const KStmt& r, const std::vector<KStmt>& prologue,
                                      const std::vector<size_t>& stmts, int own,
                                      const RowTests& tests) {
  std::vector<KStmt> all = prologue;
  for (size_t s : stmts) all.push_back(r.body->stmts[s]);
  std::vector<const KStmt*> flat;
  flatten(all, flat);
  bool transcendental = false, work = false;
  for (const KStmt* st : flat) {
    transcendental =
        transcendental || (st->kind == KOp::Unary && is_transcendental(UnaryOp(st->op)));
    work = work || st->kind == KOp::Unary || st->kind == KOp::Binary || st->kind == KOp::Where ||
           st->kind == KOp::Cast;
  }
  work = work || !all_affine(tests.rows, own) || !all_affine(tests.steps, own);
  return transcendental || (work && reads_along_rows(all, own));
}

// Whether a load (also under a guard) runs along the operand's rows in its last index: then
// consecutive rows are (nearly) contiguous and a vector loop over the rows reads whole cache
// lines. Rows that are a stride apart (a row-major A) read better pw streams at a time, as the
// guarded panel loop does: through the row buffer they became gathers (dX = dY W^T on AVX2,
// 5-15% slower, measured).
bool CppEmitter::reads_along_rows(const std::vector<KStmt>& stmts, int own) {
  std::vector<const KStmt*> flat;
  flatten(stmts, flat);
  for (const KStmt* st : flat)
    if (st->kind == KOp::Load && !st->index.empty() && ix_reads_var(*st->index.back(), own))
      return true;
  return false;
}

// pack_operand's layout, written row by row: for each of the panel's rows, a vector loop
// along the reduction steps (stores pw floats apart).
void CppEmitter::pack_along_reduction(const KStmt& r, const std::vector<KStmt>& prologue,
                                      const std::vector<size_t>& stmts, int value,
                                      const std::string& var, int pw, const std::string& dst,
                                      const std::string& ps, const std::string& x0,
                                      const std::string& n, const std::string& npad,
                                      const std::string& k0, const std::string& kn, int d) {
  const std::string PW = std::to_string(pw);
  const std::string red = "i" + std::to_string(r.loops.back().var);
  line(d, "for (i64 mj_q = 0; mj_q < " + npad + "; mj_q += " + PW + ") {");
  line(d + 1, "float* const mj_dst = " + dst + " + (mj_q / " + PW + ") * (" + ps + ");");
  std::vector<KStmt> body = prologue, unguarded = prologue;
  for (size_t s : stmts) body.push_back(r.body->stmts[s]);
  const std::vector<IndexExprPtr> tests = step_span_tests(body, r.loops.back().var, unguarded);
  const int W = tile_.vector_floats;
  if (W > 1 && (pw % W == 0 || pw == tile_.mr)) {
    transposed_panel(r, body, unguarded, tests, value, var, pw, x0, n, k0, kn, red, d + 1);
    line(d, "}");
    return;
  }
  // Only the portable target (no vector registers) gets here with panels of rows.
  const std::vector<KStmt>& copy = tests.empty() ? body : unguarded;
  const bool interleaved = r.loops.size() == 1 && pw <= kInterleavedPanelRows && only_copies(copy);
  if (interleaved) {
    interleaved_panel(copy, tests, value, var, pw, x0, n, k0, kn, red, d + 1);
    line(d + 1, "if (!mj_whole) {");
    ++d;
  }
  line(d + 1, "for (i64 mj_t = 0; mj_t < " + PW + "; ++mj_t) {");
  line(d + 2, "if (mj_q + mj_t < " + n + ") {");
  line(d + 3, "const i64 " + var + " = " + x0 + " + mj_q + mj_t;");
  if (r.loops.size() == 1)
    guarded_step_loop(body, unguarded, tests, value, red, k0, "0", kn,
                      "mj_dst[mj_kk * " + PW + " + mj_t]", d + 3);
  else
    innermost_runs(r, k0, kn, d + 3, [&](const std::string& s, const std::string& run, int e) {
      guarded_step_loop(body, unguarded, tests, value, red, s, "0", run,
                        "mj_dst[(mj_at + mj_kk) * " + PW + " + mj_t]", e, true);
    });
  line(d + 2, "} else {");
  line(d + 3,
       "for (i64 mj_kk = 0; mj_kk < " + kn + "; ++mj_kk) mj_dst[mj_kk * " + PW + " + mj_t] = 0;");
  line(d + 2, "}");
  line(d + 1, "}");
  if (interleaved) line(d--, "}");
  line(d, "}");
}

// One row's values along steps [from, from + count) of the reduction (k0 + from + mj_kk),
// each stored to `store` (an expression of mj_kk). With `tests` (guards affine in the step),
// a block whose first and last steps pass them runs `unguarded`, a plain copy with no masked
// loads or blends (vmaskmovps stalled packing v from a packed qkv on AMD EPYC, perf annotate).
// Another block runs the guarded statements in a vector loop (masked loads), or, with
// `interval` (a run of a reduction over several loops, innermost_runs: one output row of a
// convolution), finds the interval of steps passing them all (affine: one interval) from its
// two ends and copies that without tests, only the steps outside it (the padding) one at a
// time under them: masked loads of whole rows were 15% of a 3x3 convolution's weight gradient
// (perf annotate, Intel Xeon). Not for one loop: a causal mask fails for half of a row, which
// the scan and the scalar steps made 2.2x slower (the GPT forward, 11.7 -> 26 ms).
void CppEmitter::guarded_step_loop(const std::vector<KStmt>& body,
                                   const std::vector<KStmt>& unguarded,
                                   const std::vector<IndexExprPtr>& tests, int value,
                                   const std::string& red, const std::string& k0,
                                   const std::string& from, const std::string& count,
                                   const std::string& store, int d, bool interval) {
  auto loop = [&](const std::vector<KStmt>& b, const std::string& lo, const std::string& hi,
                  bool simd, int e) {
    if (simd) line(e, "#pragma omp simd");
    line(e, "for (i64 mj_kk = " + lo + "; mj_kk < " + hi + "; ++mj_kk) {");
    line(e + 1, "const i64 " + red + " = " + k0 + " + " + from + " + mj_kk;");
    for (const KStmt& st : b) stmt(st, e + 1);
    line(e + 1, store + " = " + v(value) + ";");
    line(e, "}");
  };
  if (tests.empty()) {
    loop(body, "0", count, true, d);
    return;
  }
  const std::string first = k0 + " + " + from;
  line(d, "bool mj_kspan = " + count + " > 0;");
  span_check("mj_kspan", tests, red, {first, first + " + " + count + " - 1"}, d);
  line(d, "if (mj_kspan) {");
  loop(unguarded, "0", count, true, d + 1);
  line(d, "} else {");
  if (!interval) {
    loop(body, "0", count, true, d + 1);
    line(d, "}");
    return;
  }
  const std::string pass = ix(*conjunction(tests));
  line(d + 1, "i64 mj_lo = 0, mj_hi = " + count + ";");
  interval_from_ends(pass, red, first, d + 1);
  loop(body, "0", "mj_lo", false, d + 1);
  loop(unguarded, "mj_lo", "mj_hi", true, d + 1);
  loop(body, "mj_hi", count, false, d + 1);
  line(d, "}");
}

void CppEmitter::transposed_panel(const KStmt& r, const std::vector<KStmt>& body,
                                  const std::vector<KStmt>& unguarded,
                                  const std::vector<IndexExprPtr>& tests, int value,
                                  const std::string& var, int pw, const std::string& x0,
                                  const std::string& n, const std::string& k0,
                                  const std::string& kn, const std::string& red, int d) {
  const int w = tile_.vector_floats, g = pw % w == 0 ? w : pw;
  const std::string PW = std::to_string(pw), W = std::to_string(w), G = std::to_string(g),
                    CH = std::to_string(kTransposeSteps);
  line(d, "for (i64 mj_g = 0; mj_g < " + PW + "; mj_g += " + G + ") {");
  line(d + 1, "for (i64 mj_c0 = 0; mj_c0 < " + kn + "; mj_c0 += " + CH + ") {");
  line(d + 2,
       "const i64 mj_cn = " + kn + " - mj_c0 < " + CH + " ? " + kn + " - mj_c0 : " + CH + ";");
  line(d + 2, "float mj_tile[" + G + " * " + CH + "];");
  line(d + 2, "for (i64 mj_t = 0; mj_t < " + G + "; ++mj_t) {");
  line(d + 3, "float* const mj_tr = mj_tile + mj_t * " + CH + ";");
  line(d + 3, "if (mj_q + mj_g + mj_t < " + n + ") {");
  line(d + 4, "const i64 " + var + " = " + x0 + " + mj_q + mj_g + mj_t;");
  if (r.loops.size() == 1)
    guarded_step_loop(body, unguarded, tests, value, red, k0, "mj_c0", "mj_cn", "mj_tr[mj_kk]",
                      d + 4);
  else
    innermost_runs(r, k0 + " + mj_c0", "mj_cn", d + 4,
                   [&](const std::string& s, const std::string& run, int e) {
                     guarded_step_loop(body, unguarded, tests, value, red, s, "0", run,
                                       "mj_tr[mj_at + mj_kk]", e, true);
                   });
  line(d + 3, "} else {");
  line(d + 4, "for (i64 mj_kk = 0; mj_kk < mj_cn; ++mj_kk) mj_tr[mj_kk] = 0;");
  line(d + 3, "}");
  line(d + 2, "}");
  line(d + 2, "i64 mj_kk = 0;");
  line(d + 2, "for (; mj_kk + " + W + " <= mj_cn; mj_kk += " + W + ")");
  const std::string at = "mj_dst + (mj_c0 + mj_kk) * " + PW + " + mj_g";
  line(d + 3, g == w ? "mj_transpose(mj_tile + mj_kk, " + CH + ", " + at + ", " + PW + ");"
                     : "mj_interleave(mj_tile + mj_kk, " + CH + ", " + at + ");");
  line(d + 2, "for (; mj_kk < mj_cn; ++mj_kk)");
  line(d + 3, "for (i64 mj_t = 0; mj_t < " + G + "; ++mj_t)");
  line(d + 4,
       "mj_dst[(mj_c0 + mj_kk) * " + PW + " + mj_g + mj_t] = mj_tile[mj_t * " + CH + " + mj_kk];");
  line(d + 1, "}");
  line(d, "}");
}

bool CppEmitter::only_copies(const std::vector<KStmt>& stmts) {
  for (const KStmt& st : stmts)
    if (st.kind != KOp::Load && st.kind != KOp::Cast) return false;
  return true;
}

// A whole panel of pw rows of copies (`mj_whole`: all in range and, with `tests`, passing
// them at the block's first and last step) in one loop along the steps, each row's
// statements in a scope of their own: the pw stores of a step are adjacent. g++ vectorises
// neither form (a store group of 6 is neither a power of 2 nor 3), but the row-by-row loop's
// vector loads then cost an extract and a scalar store per lane, pw floats apart: a 96x128
// block of a row-major A packed in 3.4 us that way, 1.9 us this way, on AVX-512 and AVX2
// alike; dX = dY W ([1024,512]x[512,128]) 780 -> 745 us a call. A prologue (softmax's exp,
// a normalisation) keeps the row-by-row loop, where it is computed in vectors. Targets with
// vector registers pack such panels through transposed_panel's tile instead (faster still:
// LayerNorm -> [1024,512]x[512,128] 818 -> 760 us); this is the portable target's path.
void CppEmitter::interleaved_panel(const std::vector<KStmt>& body,
                                   const std::vector<IndexExprPtr>& tests, int value,
                                   const std::string& var, int pw, const std::string& x0,
                                   const std::string& n, const std::string& k0,
                                   const std::string& kn, const std::string& red, int d) {
  const std::string PW = std::to_string(pw);
  line(d, "bool mj_whole = mj_q + " + PW + " <= " + n + " && " + kn + " > 0;");
  for (int t = 0; !tests.empty() && t < pw; ++t) {
    line(d, "if (mj_whole) {");
    line(d + 1, "const i64 " + var + " = " + x0 + " + mj_q + " + std::to_string(t) + ";");
    span_check("mj_whole", tests, red, {k0, k0 + " + " + kn + " - 1"}, d + 1);
    line(d, "}");
  }
  line(d, "if (mj_whole) {");
  line(d + 1, "for (i64 mj_kk = 0; mj_kk < " + kn + "; ++mj_kk) {");
  line(d + 2, "const i64 " + red + " = " + k0 + " + mj_kk;");
  for (int t = 0; t < pw; ++t) {
    line(d + 2, "{");
    line(d + 3, "const i64 " + var + " = " + x0 + " + mj_q + " + std::to_string(t) + ";");
    for (const KStmt& st : body) stmt(st, d + 3);
    line(d + 3, "mj_dst[mj_kk * " + PW + " + " + std::to_string(t) + "] = " + v(value) + ";");
    line(d + 2, "}");
  }
  line(d + 1, "}");
  line(d, "}");
}

// The conditions of an operand's guards (pack_along_reduction), nested ones included, when
// each holds on an interval of reduction steps `red` (its conjuncts that read `red` are
// affine comparisons); `unguarded` gets the statements with every guard passed
// (codegen/guard_intervals.h). Empty when there is no guard or one does not qualify. A head
// split read from a packed qkv nests three reindexes' guards: q.k^T packed element by
// element under them ran at 440 us a call, 16.7 MFLOP.
std::vector<IndexExprPtr> CppEmitter::step_span_tests(const std::vector<KStmt>& body, int red,
                                                      std::vector<KStmt>& unguarded) {
  std::vector<IndexExprPtr> tests;
  unguarded.clear();
  std::vector<const KStmt*> flat;
  flatten(body, flat);
  for (const KStmt* st : flat) {
    if (st->kind == KOp::Reduce) return {};
    if (st->kind != KOp::Guard) continue;
    if (!st->cond || !st->body) return {};
    std::vector<IndexExprPtr> fixed, varying;
    split_conjuncts(st->cond, {red}, fixed, varying);
    for (const IndexExprPtr& e : varying)
      if (!is_affine_comparison(*e, red)) return {};
    tests.push_back(st->cond);
  }
  if (!tests.empty()) unguarded = guards_passed(KBlock{body, -1});
  return tests;
}

// Whether `e` compares two sides that are affine in loop variable `var` (sums of constants,
// other variables and constant multiples of `var`; no division or modulo of `var`): then the
// values of `var` that pass it form an interval.
bool CppEmitter::is_affine_comparison(const IndexExpr& e, int var) {
  if (e.kind != IxKind::Lt && e.kind != IxKind::Le && e.kind != IxKind::Gt && e.kind != IxKind::Ge)
    return false;
  return ix_affine_in(*e.a, var) && ix_affine_in(*e.b, var);
}

// Packs operand `side` (0: A, rows `var`, panels of pw = mr; 1: B, columns, pw = nr) once for
// the whole launch into mj_apre / mj_bpre (taken from scratch slot `side`) when `reused`
// holds at run time, panels in parallel. Panels go in groups of at least kPackRows rows where the
// rows go through the row buffer or lie along memory: each reduction step then reads a run of
// the operand's rows (contiguous: a transposed A, a row-major B), not one panel's pw (a
// row-major B's panels one at a time read one cache line per row, 2 KiB apart: the
// transformer's FFN weight gradient packing its dH spent 2.4% of the step's samples against
// 1.8% in groups; in one share per thread 2.2%, perf on AMD EPYC). Rows a stride apart stay
// one panel at a time:
// 66 of them per step are more streams than the prefetchers follow (conv2d's weight gradient
// packing dY once per launch: 9% slower in groups, measured).
void CppEmitter::pack_operand_once(const KStmt& r, const std::vector<KStmt>& pre,
                                   const std::vector<size_t>& stmts, int value,
                                   const std::string& var, int pw, int side,
                                   const MergedColumns* merged, const std::string& reused,
                                   const std::string& call) {
  const int own = std::stoi(var.substr(1));
  const std::string buf = side == 0 ? "mj_apre" : "mj_bpre", pad = side == 0 ? "mj_eip" : "mj_ejp";
  const std::string PW = std::to_string(pw), extent = side == 0 ? "mj_ei" : "mj_ej";
  line(1,
       "if (" + reused + " && mj_k > 0 && " + pad + " > 0 && " + pad + " * mj_k <= (1LL << 28))");
  line(2, buf + " = mj_take(" + std::to_string(side) + ", sizeof(float) * " + pad + " * mj_k);");
  line(1, "if (" + buf + ") {");
  std::vector<KStmt> all = pre;
  for (size_t s : stmts) all.push_back(r.body->stmts[s]);
  const bool grouped = !merged && !packs_along_reduction(r, pre, stmts, own) &&
                       (packs_through_buffer(r, pre, stmts, own, row_tests(r, stmts, own)) ||
                        reads_along_rows(all, own));
  const std::string G = std::to_string(grouped ? (kPackRows + pw - 1) / pw : 1);
  const std::string panels = pad + " / " + PW, parallel = pad + " * mj_k > 32768";
  // Fewer panel groups than threads (a convolution's weight gradient: 9 or 72 columns, one
  // or two panels, over a reduction of 4,096 or 1,024 steps): the reduction is cut into as
  // many pieces as leave no thread idle, each packed on its own. One panel packed by one
  // thread was 43% of the digits CNN's first weight gradient, the other thread waiting.
  line(2, "const i64 mj_groups = (" + panels + " + " + G + " - 1) / " + G + ";");
  line(2, "const i64 mj_kparts = " + parallel +
              " && mj_groups < omp_get_max_threads() ? (omp_get_max_threads() + mj_groups - 1) / "
              "mj_groups : 1;");
  line(2, "const i64 mj_kpart = (mj_k + mj_kparts - 1) / mj_kparts;");
  line(2, "#pragma omp parallel for collapse(2) schedule(static) if(" + parallel + ")");
  line(2, "for (i64 mj_p = 0; mj_p < " + panels + "; mj_p += " + G + ") {");
  line(3, "for (i64 mj_kq = 0; mj_kq < mj_kparts; ++mj_kq) {");
  line(4, "const i64 mj_pn = (" + panels + " - mj_p < " + G + " ? " + panels + " - mj_p : " + G +
              ") * " + PW + ";");
  line(4, "const i64 mj_k0 = mj_kq * mj_kpart;");
  line(4, "const i64 mj_kn = mj_k - mj_k0 < mj_kpart ? mj_k - mj_k0 : mj_kpart;");
  line(4, "if (mj_kn <= 0) continue;");
  const std::string to = buf + " + mj_p * mj_k * " + PW + " + mj_k0 * " + PW,
                    to_stride = "mj_k * " + PW, x0 = "mj_p * " + PW,
                    n = "(" + extent + " - mj_p * " + PW + ")";
  if (!call.empty())
    line(4, call + to + ", " + to_stride + ", " + x0 + ", " + n + ", mj_pn, mj_k0, mj_kn);");
  else
    pack_operand(r, pre, stmts, value, var, pw, to, to_stride, x0, n, "mj_pn", "mj_k0", "mj_kn", 4,
                 merged);
  line(3, "}");
  line(2, "}");
  line(1, "}");
}

}  // namespace metajit
