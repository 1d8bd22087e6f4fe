// METAJIT_RECORD=FILE: the manifest (cache/manifest.h) of every kernel this process used,
// rewritten atomically each time a kernel is used for the first time, so a crash later still
// leaves a manifest. `metajit cache warm FILE` compiles them on another machine.
#pragma once
#include <string>

#include "codegen/kernel_ir.h"

namespace metajit {

// Adds the kernel `key` (of `ir`, for `backend`: "cpu" | "cuda") to the manifest, once.
void record_kernel_use(const std::string& key, const KernelIR& ir, const char* backend);

}  // namespace metajit
