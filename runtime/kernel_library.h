// Where a process gets runnable kernels, cheapest first: the in-memory table (canonical IR
// text -> loaded function: no codegen, no hashing of source, no file system), then the
// on-disk cache (verified, then dlopen'd), then the compiler (every missing kernel of one
// evaluation compiled in parallel, installed atomically).
#pragma once
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace metajit {

struct KernelHandle {
  KernelFn fn = nullptr;
  std::string key;
};

// Runnable kernels for `irs`, in order. Throws CompileError (nothing installed) when a
// kernel fails to compile, CacheError/Error for unusable caches or objects.
std::vector<KernelHandle> obtain_kernels(const std::vector<const KernelIR*>& irs);

// The key `ir` would have in the cache with the current toolchain (no compile, no disk).
std::string key_of(const KernelIR& ir);

}  // namespace metajit
