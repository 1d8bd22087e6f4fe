// Host emulation of the CUDA subset the CUDA emitter writes (see cuda_emulation.cc).
#pragma once
namespace metajit {
// Source text that makes g++ accept the CUDA subset the CUDA emitter writes (see cuda_emulation.cc).
extern const char* const kCudaEmulationPrelude;
}
