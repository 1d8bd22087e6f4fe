// The graph side of Var: what a handle says about its node without evaluating it. Reading
// values (to_vector, item) evaluates, so it lives with eval() in api/var_values.cc.
#include <metajit/error.h>
#include <metajit/var.h>

#include <algorithm>
#include <string>

#include "meta_ops/node.h"

namespace metajit {

namespace {
// A default-constructed Var has no node: reading what it is raises the same typed error as
// every op and read given one (issue 26: these four segfaulted).
const Node& node_of(const Var& v, const char* what) {
  if (!v.defined())
    throw Error(std::string(what) +
                ": the Var is undefined (default-constructed); assign it "
                "the result of an op or a creation function first");
  return *v.node();
}
}  // namespace

const Shape& Var::shape() const {
  return node_of(*this, "shape").shape;
}
DType Var::dtype() const {
  return node_of(*this, "dtype").dtype;
}
int64_t Var::ndim() const {
  return static_cast<int64_t>(node_of(*this, "ndim").shape.size());
}
int64_t Var::numel() const {
  return node_of(*this, "numel").numel();
}

void Var::assign(const Var& value) {
  if (!defined()) throw Error("assign: the Var assigned to is undefined (default-constructed)");
  if (!value.defined()) throw Error("assign: the value is undefined (default-constructed)");
  if (value.shape() != shape())
    throw ShapeError("assign: the value has shape " + shape_str(value.shape()) +
                     " but the Var has shape " + shape_str(shape()) +
                     "; assign keeps a Var's shape (reshape or broadcast_to the value)");
  if (value.dtype() != dtype())
    throw DTypeError(std::string("assign: the value has dtype ") + dtype_name(value.dtype()) +
                     " but the Var has dtype " + dtype_name(dtype()) +
                     "; assign keeps a Var's dtype (cast the value)");
  if (jit_trace_depth() > 0) {
    assign_traced(value);
    return;
  }
  NodePtr old = cell_->set(value.node());
  // The variable's older value (README "Lazy evaluation"): pending, an evaluation that computes
  // it while something still reads it stores it, so a chain of updates is computed once; already
  // stored, it no longer keeps a graph for grad(), so the history of a variable stays bounded.
  if (old && old != cell_->node && old->holders.load(std::memory_order_relaxed) == 0) {
    std::lock_guard<std::recursive_mutex> lock(graph_mutex());  // evaluation reads both marks
    if (old->realized())
      old->history.reset();
    else
      old->assigned_away = true;
  }
}

// Inside a jit trace the Var is the function's state (meta_ops/node.h TracedAssign): the rest of
// the trace reads the new value, and the jit function makes every call assign it.
void Var::assign_traced(const Var& value) {
  std::vector<TracedAssign>* record = traced_assigns();
  if (!record)
    throw Error(
        "assign: called while a jit function is traced in a way that cannot keep state; return "
        "the new value from the function and assign it after the call");
  const bool known = std::any_of(record->begin(), record->end(),
                                 [&](const TracedAssign& a) { return a.target.cell_ == cell_; });
  if (!known) {
    if (cell_->node->jit_argument >= 0)
      throw Error(
          "assign: inside a jit function, the Var assigned to is one of its arguments (or a "
          "train step's parameter), whose value the caller passes anew each call; return the "
          "new value from the function instead (a train step updates its parameters itself)");
    record->push_back({*this, cell_->node});
  }
  cell_->set(value.node());
}

Var::Cell::Cell(NodePtr n) : node(std::move(n)) {
  count_var_cell(1);
  if (node) node->holders.fetch_add(1, std::memory_order_relaxed);
}

Var::Cell::~Cell() {
  count_var_cell(-1);
  if (node) node->holders.fetch_sub(1, std::memory_order_relaxed);
}

NodePtr Var::Cell::set(NodePtr n) {
  if (n) n->holders.fetch_add(1, std::memory_order_relaxed);
  if (node) node->holders.fetch_sub(1, std::memory_order_relaxed);
  std::swap(node, n);
  return n;
}

void detail::rebind_var(const Var& v, NodePtr node) {
  v.cell_->set(std::move(node));
}

}  // namespace metajit
