// The C++ emitter: KernelIR -> one self-contained C++17 translation unit with an
// extern "C" metajit_kernel() (signature in kernel_ir.h). Outer loops are OpenMP-parallel,
// the innermost loop is left plain and contiguous for the vectoriser. The source includes no
// header at all: compile latency is a product feature (design.md §7).
#pragma once
#include <string>

#include "codegen/kernel_ir.h"

namespace metajit {

std::string emit_cpp(const KernelIR& ir);

}  // namespace metajit
