// The CUDA host emulation prelude: C++ source text that, placed in front of the restricted CUDA
// the CUDA emitter writes (CudaTarget::HostEmulation), lets plain g++ compile it into a host
// shared library whose kernels run on the CPU, each block's threads as cooperative fibers of the
// scheduler in runtime/cuda_emulation_scheduler.cc. Tests use it to check the generated kernels'
// logic (barriers, warp shuffles, shared memory, atomics, several launches) against the reference
// without a GPU.
#pragma once

namespace metajit {

// The text of codegen/cuda_emulation_prelude.h with codegen/cuda_emulation_abi.h in place of its
// #include, embedded by the build (CMakeLists.txt).
extern const char* const kCudaEmulationPrelude;
// The texts of codegen/cuda_gpu_prelude.h (a GPU kernel's first lines) and
// codegen/cuda_common_prelude.h (both targets', after the integer prelude), embedded the same way.
extern const char* const kCudaGpuPrelude;
extern const char* const kCudaCommonPrelude;
// codegen/cuda_narrow_prelude.h: after the common prelude in kernels with 8- and 16-bit values.
extern const char* const kCudaNarrowPrelude;

}  // namespace metajit
