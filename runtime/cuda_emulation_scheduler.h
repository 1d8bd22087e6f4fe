// The CUDA host emulation's scheduler: runs the threads of an emulated kernel's blocks as
// cooperative fibers on the launching OS thread (design in cuda_emulation_scheduler.cc). Kernel
// libraries compiled for the emulation (codegen/cuda_emulation_prelude.h) reach it through the
// table below, which the loader hands them (runtime/loader.cc).
#pragma once

#include "codegen/cuda_emulation_abi.h"

namespace metajit {

// The scheduler's entry points, version MJEMU_ABI_VERSION; one table for the process.
const mjemu_runtime& cuda_emulation_runtime();

}  // namespace metajit
