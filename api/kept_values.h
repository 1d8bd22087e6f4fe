// The values an evaluation stores besides the ones it was asked for (README "Lazy evaluation"),
// so that a value is computed at most twice and a variable's chain of updates once: Jittor's
// "lived vars", under C++'s rules. A value outlives an evaluation when something outside it
// still reads it: a Var, or a pending node not evaluated now. Such a value is stored by the
// evaluation that computes it when it is an older value of a variable (assign() moved off it:
// the next value is built from it), or when an earlier evaluation already computed it inside a
// kernel without storing it. Not on its first computation: in C++ the temporaries of an
// expression (`sum(exp(a * b))`) are Vars alive while it is evaluated, indistinguishable from
// named ones, and storing each would undo fusion for every expression; a value needed once
// costs nothing, a value needed again is stored the second time.
#pragma once
#include <metajit/var.h>

#include <vector>

#include "meta_ops/node.h"

namespace metajit {

// Appends to `kept` (cleared first) the pending nodes that evaluating `requested` computes and
// must store too, in a deterministic order. `will_run`: the evaluation runs (eval), so what it
// computes without storing is marked computed (plan, explain and to_dot mark nothing). Views
// (broadcast, reindex) and constants are not kept, nor values larger than all they read (the
// product inside a matmul): what they read is, when it outlives the evaluation. Called with
// graph_mutex() held.
void values_to_keep(const std::vector<NodePtr>& requested, bool will_run,
                    std::vector<NodePtr>& kept);

// Whether a value that outlives an evaluation is worth a buffer of its own when it is stored:
// not a constant or a view (broadcast, reindex: index arithmetic over what they read), and not
// larger than everything it reads (the product inside a matmul is n*k*m elements; what it reads
// is kept instead). An older value of a variable is kept even as a view, else a variable
// reindexed at every step would grow a chain of views.
bool worth_storing(const Node& n);

// What evaluating `vars` computes: their pending nodes (each once, in order; `requested` of
// them), then the values it also stores (values_to_keep). `what` names the caller in the error
// for an undefined Var; `will_run` as values_to_keep's. Called with graph_mutex() held.
std::vector<NodePtr> nodes_to_compute(const std::vector<Var>& vars, const char* what, bool will_run,
                                      size_t& requested);

// Realizes a kept node with its computed value. It keeps, for grad(), a pending copy of its op
// and inputs (Node::history), so differentiating through it still works, unless it is an older
// value of a variable: that keeps nothing, its graph is released (what bounds a training loop).
void keep_value(Node& n, BufferPtr data);

}  // namespace metajit
