// Loop partitioning of an innermost loop by its guards' intervals. A reindex's in-range test
// (codegen/lowering.cc) reads the loop variable i in comparisons such as `i - 256 >= 0` and
// `i + r < p9`: per element that is a chain of 64-bit compares and a masked load, for every
// piece a concatenation or a pad reads (the qkv gradient of a transformer tests three pieces,
// three levels deep, per element). Where every such comparison is affine in i with
// coefficient +1 or -1, the elements passing a guard form an interval [lo, hi): the loop's
// range then splits at the intervals' ends into sub-ranges in which each guard is one value,
// computed once per sub-range, and the loop body reads a constant instead of testing. The
// emitter (codegen/cpp_reductions.cc, cpp_chunked_loops.cc) runs the sub-ranges; comparisons of another form stay
// in the body as they were.
#pragma once
#include <map>
#include <vector>

#include "codegen/kernel_ir.h"

namespace metajit {

// One guard's test split by what it reads of the loop variable.
struct GuardInterval {
  int guard = -1;     // the Guard statement's id (its value v<id>)
  IndexExprPtr fixed; // conjuncts that do not read the loop variable; null when none
  IndexExprPtr lo;    // i >= lo, from the conjuncts affine in i; null when unbounded below
  IndexExprPtr hi;    // i < hi; null when unbounded above
  IndexExprPtr rest;  // the other conjuncts that read the loop variable; null when none
};

// The guards of `stmts` (guard bodies included, outer guards first) with their tests split
// for loop variable `var`. Empty when no guard bounds `var` (nothing to partition), or when a
// statement is a reduction (its body's tests read the reduction's own loops).
std::vector<GuardInterval> find_guard_intervals(const std::vector<KStmt>& stmts, int var);

// `st` with the test of each guard named in `conds` replaced by its entry (guard bodies too).
KStmt replace_guard_tests(const KStmt& st, const std::map<int, IndexExprPtr>& conds);

// Whether guard `st`'s body reads only values it defines itself: then it can run in a loop of
// its own (codegen/cpp_chunked_loops.cc computes such guards' values a strip at a time).
bool self_contained_guard(const KStmt& st);

// The statements of `b` with every guard replaced by its body's statements and a copy of the
// body's result under the guard's id: `b` where every guard passes.
std::vector<KStmt> guards_passed(const KBlock& b);

// `stmts` with guard `id` (one of them, not nested) replaced by its scalar argument: `stmts`
// where that guard fails.
std::vector<KStmt> guard_failed(const std::vector<KStmt>& stmts, int id);

// The ids of guard `st` and of the guards in its body, outer first.
std::vector<int> guard_ids(const KStmt& st);

}  // namespace metajit
