// The CUDA runtime as metajit uses it: device memory, copies, launch and fault errors. metajit
// never links against libcudart: the first use dlopens it (next to the configured nvcc, then
// the loader's path), so a metajit built without the CUDA toolkit still builds and runs on the
// CPU. Kernel objects link libcudart dynamically too (nvcc -cudart shared), so they and this
// runtime share one CUDA context.
//
// METAJIT_CUDA_EMULATE=1 replaces the GPU by the host: "device" memory is host memory and
// kernels are the same CUDA source compiled by g++ against an emulation prelude
// (codegen/cuda_emulation.h) that runs each block's threads as fibers. It exists so that the
// CUDA emitter's kernels can be checked against the reference interpreter on machines without
// a GPU; it is not fast.
#pragma once
#include <cstddef>
#include <string>

namespace metajit {

class CudaRuntime {
 public:
  virtual ~CudaRuntime() = default;
  virtual bool emulated() const = 0;
  // One line about the device, e.g. "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB; driver
  // 13.0, runtime 13.0)".
  virtual std::string describe() const = 0;
  // The device's architecture as nvcc names it ("sm_90"); empty when emulated.
  virtual std::string arch() const = 0;
  // Device memory; nullptr when the device has not that much free (the allocator then returns
  // its cached blocks and tries again, base/buffer.cc); throws Error naming the size and the
  // CUDA error for any other failure.
  virtual void* allocate(size_t bytes) = 0;
  // What the device has free, for an out-of-memory message: "3.20 GiB free of 79.10 GiB".
  virtual std::string memory_report() = 0;
  virtual void release(void* p) noexcept = 0;
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;  // throws Error
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;    // waits; throws Error
  // The error of the last kernel launch ("" when it launched), cleared by the call.
  virtual std::string launch_error() = 0;
  // Waits for every launched kernel; the error of one that failed, "" when all ran.
  virtual std::string synchronize() = 0;
};

// The runtime when a CUDA device can be used, else nullptr (cuda_unavailable_reason() in
// runtime/device.h says why). Loaded once per process; never destroyed.
CudaRuntime* cuda_runtime();

// Why cuda_runtime() is null ("" when it is not).
std::string cuda_runtime_problem();

// The directory holding libcudart of the configured nvcc (<nvcc>/../lib64 resolved), or "" when
// nvcc is not found. Kernel objects get it as their rpath.
std::string cuda_library_dir();

}  // namespace metajit
