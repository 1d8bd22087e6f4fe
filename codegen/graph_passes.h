// Graph passes run on a captured Graph before fusion planning, each in its own file.
// None of them may make the structure depend on values: scalars are never compared or merged
// by value, so a kernel key stays the same for x*2 and x*3.
#pragma once
#include "codegen/graph.h"

namespace metajit {

// Element-wise ops on 0-d scalars become scalars; element-wise ops whose inputs are all the
// same broadcast of scalars become one broadcast of the folded scalar.
void fold_constants(Graph& g);
// Merges structurally identical nodes (same op, attributes and inputs). Scalars and reindex
// nodes (which carry values) are merged only with themselves.
void eliminate_common_subexpressions(Graph& g);
// A reduction of an input with no elements becomes a reindex that reads nothing and gives the
// identity everywhere, so its kernel loops over the output only (codegen/empty_reductions.cc).
void fill_empty_reductions(Graph& g);
// Drops nodes no output depends on and renumbers the rest (keeping topological order).
void eliminate_dead_code(Graph& g);
// A softmax (e / sum(e), e = exp(x - max)) that a contraction reads becomes exp(x - lse),
// lse = max + log(sum(e)): one row statistic for the planner to store instead of two (O1 only;
// codegen/softmax_statistic.cc).
void softmax_statistic_for_contractions(Graph& g);

}  // namespace metajit
