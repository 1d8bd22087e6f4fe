// The graph side of Var: what a handle says about its node without evaluating it. Reading
// values (to_vector, item) evaluates, so it lives with eval() in api/var_values.cc.
#include <metajit/error.h>
#include <metajit/var.h>

#include "meta_ops/node.h"

namespace metajit {

const Shape& Var::shape() const {
  return node()->shape;
}
DType Var::dtype() const {
  return node()->dtype;
}
int64_t Var::ndim() const {
  return static_cast<int64_t>(node()->shape.size());
}
int64_t Var::numel() const {
  return node()->numel();
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
  if (jit_trace_depth() > 0)
    throw Error(
        "assign: called while a jit function is traced; the assignment would happen once, at "
        "trace time, and never on replay. Return the new value from the function and assign it "
        "after the call, or use an optimizer's jit_step (README \"Training\")");
  cell_->node = value.node();
}

void detail::rebind_var(const Var& v, NodePtr node) {
  v.cell_->node = std::move(node);
}

}  // namespace metajit
