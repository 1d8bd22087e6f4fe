// The kernel IR's invariants (codegen/kernel_ir.h), checked: every value read is defined
// before, in its block or an enclosing one, and defined once; every loop variable read is bound
// by a loop around the read; a load names an input and gives one index per axis of it; scalar
// and parameter slots are in range; no Extent leaf is left (lowering replaces them); a map
// loops over every output axis and a scatter targets every one. The pipeline runs it after
// lowering and the C++ emitter after its own rewrite (hoist_reduce_invariants): a pass that
// breaks the IR fails there with an InternalError naming the pass and the problem, instead of
// emitting code that does not compile or reads out of bounds.
#pragma once
#include <optional>
#include <string>

#include "codegen/kernel_ir.h"

namespace metajit {

// The first problem found in `ir`, or nullopt when it holds every invariant above.
std::optional<std::string> verify_kernel_ir(const KernelIR& ir);

}  // namespace metajit
