#include <metajit/error.h>
#include <metajit/runtime.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "base/config.h"
#include "runtime/cuda_runtime.h"

namespace metajit {
namespace {
std::atomic<int> chosen_device{-1};  // -1: METAJIT_DEVICE decides
}

bool cuda_available() {
  return cuda_runtime() != nullptr;
}

std::string cuda_unavailable_reason() {
  return cuda_runtime_problem();
}

void set_device(Device d) {
  if (d == Device::CUDA && !cuda_available())
    throw Error("set_device(cuda): CUDA cannot be used here: " + cuda_unavailable_reason());
  chosen_device.store(int(d), std::memory_order_relaxed);
}

Device device() {
  int d = chosen_device.load(std::memory_order_relaxed);
  if (d >= 0) return Device(d);
  // METAJIT_DEVICE is read once, at the first use; set_device() changes the device later.
  int from_env = config().device == "cuda" ? int(Device::CUDA) : int(Device::CPU);
  chosen_device.compare_exchange_strong(d, from_env, std::memory_order_relaxed);
  return Device(chosen_device.load(std::memory_order_relaxed));
}

std::string describe_device(Device d) {
  if (d == Device::CPU) {
    unsigned n = std::thread::hardware_concurrency();
    return "cpu: " + std::to_string(n ? n : 1) + " hardware threads";
  }
  if (CudaRuntime* rt = cuda_runtime()) return "cuda: " + rt->describe();
  return "cuda: not usable here (" + cuda_runtime_problem() + ")";
}

Device use_best_device() {
  const char* env = std::getenv("METAJIT_DEVICE");
  if (!(env && *env) && cuda_available()) set_device(Device::CUDA);
  return device();
}

}  // namespace metajit
