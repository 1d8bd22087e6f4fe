#include "runtime/loader.h"

#include <dlfcn.h>
#include <metajit/error.h>

#include <mutex>
#include <string>

#include "runtime/cuda_emulation_scheduler.h"

namespace metajit {

namespace {
constexpr const char* kEmulationBindSymbol = "metajit_emulation_bind";
}  // namespace

KernelFn load_kernel(const std::filesystem::path& shared_object) {
  static std::mutex mu;  // dlerror() is per-thread state shared by dlopen and dlsym
  std::lock_guard<std::mutex> lock(mu);
  void* handle = dlopen(shared_object.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    throw Error("loader: cannot load " + shared_object.string() + ": " +
                (err ? err : "unknown error"));
  }
  void* sym = dlsym(handle, kKernelSymbol);
  if (!sym) {
    const char* err = dlerror();
    throw Error("loader: " + shared_object.string() + " has no symbol " + kKernelSymbol + ": " +
                (err ? err : "unknown error"));
  }
  // A library compiled for the CUDA host emulation runs its threads on the scheduler here
  // (codegen/cuda_emulation_abi.h); it says whether it was built for this scheduler's version.
  if (void* bind = dlsym(handle, kEmulationBindSymbol)) {
    using Bind = int (*)(const mjemu_runtime*);
    if (!reinterpret_cast<Bind>(bind)(&cuda_emulation_runtime()))
      throw Error("loader: " + shared_object.string() + " was compiled for another version of "
                  "the CUDA host emulation (this library has version " +
                  std::to_string(MJEMU_ABI_VERSION) + "): clear the cache entry and compile it "
                  "again");
  }
  dlerror();  // a library without the emulation leaves dlsym's "not found" behind
  return reinterpret_cast<KernelFn>(sym);
}

}  // namespace metajit
