// The compile tier of the kernel library (runtime/kernel_library.h): every staged kernel of a
// batch compiled in parallel (compiler_driver.h), checked to be a shared object, installed in
// the disk cache and counted; one info line per cause of the batch's misses.
#pragma once
#include <metajit/error.h>

#include <optional>
#include <vector>

#include "cache/cache_store.h"
#include "runtime/kernel_backend.h"
#include "runtime/pending_kernel.h"

namespace metajit {

// One info line per cause of the misses of one batch (an evaluation, a warm): after a compiler
// upgrade "27 kernels compiled again: the compiler changed (...)", not 27 lines. New kernels
// say nothing here (the debug log has each miss).
void log_miss_causes(const std::vector<Pending*>& missed);

// Compiles every staged kernel of `todo` in parallel and installs the good ones; sets each
// one's `object` (empty where its compile failed). Returns the first failure, if any. Failed
// kernels keep their staging directory (with the source) for inspection.
std::optional<CompileError> compile_and_install(std::vector<Pending*>& todo,
                                                const CacheStore& main_store,
                                                const Backend& backend, int jobs,
                                                bool always_show_progress, CacheCounters& delta);

}  // namespace metajit
