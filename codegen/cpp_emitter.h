// The C++ emitter: KernelIR -> one self-contained C++17 translation unit with an
// extern "C" metajit_kernel() (signature in kernel_ir.h). It also schedules the loops:
//  - every statement sits in the loop it depends on (loop_invariants.h), so a row's max and
//    sum fused into softmax's output kernel run once per row;
//  - outer loops are OpenMP-parallel, the innermost runs under `omp simd`; exp/log/sin/cos/
//    tanh/pow vectorise through glibc's libmvec (declared `omp declare simd`);
//  - reductions use OpenMP SIMD (and, outside every parallel loop, parallel) reductions,
//    float32 sums accumulating in double; a reduction over outer axes (a column sum) is
//    interchanged into strips that run along memory, four rows at a time;
//  - a sum of products whose operands each miss one output loop (matmul, conv2d) gets a
//    BLIS-style schedule chosen by the target (cpu_target.h): both operands packed into
//    panels (once per launch when they do not depend on the outer loops), cache blocks, and
//    a micro-kernel whose register tile is the target's (AVX-512 6x64, AVX2 6x16, portable
//    4x8); the fused epilogue runs on each finished block.
// The source's first lines name the target and any schedule other than the plain loop nest.
// The source includes no header at all: compile latency is a product feature (docs/design.md §7).
#pragma once
#include <string>

#include "codegen/cpu_target.h"
#include "codegen/kernel_ir.h"

namespace metajit {

// `target`: the vector ISA the source will be compiled for (cpu_target.h); it picks the
// contraction micro-kernel and block sizes, and is named in the source's first lines.
std::string emit_cpp(const KernelIR& ir, const CpuTarget& target);

}  // namespace metajit
