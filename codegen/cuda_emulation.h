// The CUDA host emulation prelude: C++ source text that, placed in front of the restricted CUDA
// the CUDA emitter writes (CudaTarget::HostEmulation), lets plain g++ compile it into a host
// shared library whose kernels run on the CPU, each block's threads as cooperative fibers. Tests
// use it to check the generated kernels' logic (barriers, warp shuffles, shared memory, atomics,
// several launches) against the reference without a GPU.
#pragma once

namespace metajit {

// Source text that makes g++ accept the CUDA subset the CUDA emitter writes (see
// cuda_emulation.cc).
extern const char* const kCudaEmulationPrelude;

}  // namespace metajit
