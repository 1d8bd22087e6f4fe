// Reading a Var's values: evaluates its graph first when it is still lazy, then reads the host
// copy (include/metajit/var.h).
#include <metajit/error.h>
#include <metajit/eval.h>
#include <metajit/var.h>

#include "meta_ops/node.h"
#include "runtime/residency.h"

namespace metajit {

const void* Var::realized_data(DType want, const char* what) const {
  if (!node_) throw Error(std::string(what) + ": the Var is undefined (default-constructed)");
  if (want != node_->dtype)
    throw DTypeError(std::string(what) + ": the Var has dtype " + dtype_name(node_->dtype) +
                     " but " + dtype_name(want) + " was requested (use the C++ type of " +
                     dtype_name(node_->dtype) + ")");
  if (!realized_acquire(*node_)) eval({*this});
  return buffer_on(*node_, Device::CPU)->data();
}

void Var::check_item() const {
  if (!node_) throw Error("item: the Var is undefined (default-constructed)");
  if (numel() != 1)
    throw ShapeError("item: the Var has shape " + shape_str(shape()) + " (" +
                     std::to_string(numel()) + " elements); item() needs exactly 1");
}

}  // namespace metajit
