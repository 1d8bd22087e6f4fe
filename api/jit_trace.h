// What the rest of api/ needs to know about jit traces in progress (api/jit_function.cc).
#pragma once
#include <vector>

#include "meta_ops/node.h"

namespace metajit::detail {

// While a jit function is traced on this thread: Error naming the function and the argument
// when evaluating `nodes` (`what`: "to_vector", "eval", ...) would read the value of one of its
// non-static arguments (include/metajit/jit.h). Does nothing outside a trace.
void check_not_traced_argument(const std::vector<NodePtr>& nodes, const char* what);

}  // namespace metajit::detail
