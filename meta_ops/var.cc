// The graph side of Var: what a handle says about its node without evaluating it. Reading
// values (to_vector, item) evaluates, so it lives with eval() in api/var_values.cc.
#include <metajit/var.h>

#include "meta_ops/node.h"

namespace metajit {

const Shape& Var::shape() const {
  return node_->shape;
}
DType Var::dtype() const {
  return node_->dtype;
}
int64_t Var::ndim() const {
  return static_cast<int64_t>(node_->shape.size());
}
int64_t Var::numel() const {
  return node_->numel();
}

}  // namespace metajit
