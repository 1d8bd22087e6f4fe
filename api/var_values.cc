// Reading a Var's values: evaluates its graph first when it is still lazy, then reads the host
// copy (include/metajit/var.h).
#include <metajit/error.h>
#include <metajit/eval.h>
#include <metajit/var.h>

#include "api/jit_trace.h"
#include "meta_ops/node.h"
#include "runtime/residency.h"

namespace metajit {

const void* Var::realized_data(DType want, const char* what) const {
  if (!defined()) throw Error(std::string(what) + ": the Var is undefined (default-constructed)");
  if (want != node()->dtype)
    throw DTypeError(std::string(what) + ": the Var has dtype " + dtype_name(node()->dtype) +
                     " but " + dtype_name(want) + " was requested (use the C++ type of " +
                     dtype_name(node()->dtype) + ")");
  if (jit_trace_depth() > 0) detail::check_not_traced_argument({node()}, what);
  if (!realized_acquire(*node())) eval({*this});
  return buffer_on(*node(), Device::CPU)->data();
}

void Var::check_item() const {
  if (!defined()) throw Error("item: the Var is undefined (default-constructed)");
  if (numel() != 1)
    throw ShapeError("item: the Var has shape " + shape_str(shape()) + " (" +
                     std::to_string(numel()) + " elements); item() needs exactly 1");
}

}  // namespace metajit
