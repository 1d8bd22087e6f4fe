#include "runtime/loader.h"

#include <dlfcn.h>
#include <metajit/error.h>

#include <mutex>

namespace metajit {

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
  return reinterpret_cast<KernelFn>(sym);
}

}  // namespace metajit
