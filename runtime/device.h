// Devices (api.md "Devices"): graphs evaluate on the current device, CPU or CUDA. The current
// device is process-wide, like Jittor's use_cuda flag: METAJIT_DEVICE=cpu|cuda (read at the
// first use) chooses it, set_device() changes it. Building metajit needs no CUDA toolkit: the CUDA
// runtime is loaded when first asked for (runtime/cuda_runtime.h).
#pragma once
#include <string>

namespace metajit {

enum class Device { CPU, CUDA };

// Throws Error naming why when `d` is CUDA and no CUDA device can be used.
void set_device(Device d);
Device device();
// True when a CUDA device can be used (a GPU with a working driver and runtime, or the host
// emulation of METAJIT_CUDA_EMULATE=1). Cheap after the first call.
bool cuda_available();
// Why cuda_available() is false ("" when it is true).
std::string cuda_unavailable_reason();

const char* device_name(Device d);  // "cpu" | "cuda"

// One line about `d`, e.g. "cuda: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB; ...)" or
// "cpu: 2 threads"; for CUDA without a usable device, why not.
std::string describe_device(Device d);

// The GPU when one can be used, else the CPU; an explicit METAJIT_DEVICE wins. What samples and
// programs that want "the fastest device here" call first. Returns the device chosen.
Device use_best_device();

}  // namespace metajit
