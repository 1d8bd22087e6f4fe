// Coalescing a reduction's two innermost loops into one (a schedule pass on kernel IR, run by
// codegen/cpu_schedule.cc). A reduction over the trailing axes of an array it reads plainly
// (a bias gradient: the sum of dy[n, c, h, w] over n, h and w) runs its innermost loop over w
// alone: for an 8x8 image, thousands of 8-element SIMD loops per launch, each with its own
// reduction set-up and horizontal sum (the digits CNN's bias gradient: 33 us for 32 KiB). Where
// the two loops (h, w) only ever index the last two axes of loads as (h, w) and w runs over the
// whole last axis (its extent the array's last extent itself, the same shape parameter: keys do
// not depend on shapes, so equal values in different parameters are not known), the elements
// are contiguous, in the same order, as one loop over h*w: the
// loads index (0, hw) instead, the same address (row-major: h * W + w with W the last extent).
#pragma once
#include "codegen/kernel_ir.h"

namespace metajit {

// Merges, in every Reduce of `ir`'s body (nested ones too), the two innermost loops where that is
// exact as above. Returns whether anything changed. The accumulation order is unchanged.
bool coalesce_reduction_loops(KernelIR& ir);

}  // namespace metajit
