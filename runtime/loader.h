// Loads compiled kernels: dlopen + dlsym behind a mutex. Handles stay open for the life of
// the process (a kernel may be running on another thread).
#pragma once
#include <filesystem>

#include "codegen/kernel_ir.h"

namespace metajit {

// Throws Error naming the file and dlerror() when the object cannot be loaded.
KernelFn load_kernel(const std::filesystem::path& shared_object);

}  // namespace metajit
