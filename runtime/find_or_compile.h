// The sequence through the tiers below memory that obtain_kernels and warm_kernels share
// (runtime/kernel_library.h, runtime/cache_warm.h): disk (disk_tier.h), then remote
// (remote_tier.h), then compile (compile_tier.h).
#pragma once
#include <metajit/error.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include "cache/cache_store.h"
#include "runtime/kernel_backend.h"
#include "runtime/kernel_library.h"
#include "runtime/pending_kernel.h"

namespace metajit {

// The sequence obtain_kernels and warm_kernels share: sweep the cache once per process, find
// each key in it or lock and stage it (`use_cached(p, so)` takes a found entry; false: not
// usable, build it again), compile and install the missing ones in parallel and hand each to
// `use_compiled` (its `object` empty where the compile failed) before the cache is maintained
// (an eviction cannot take a kernel before it is loaded), add the counters to the cache's
// statistics, maintain the cache. Returns the first compile failure.
std::optional<CompileError> find_or_compile(
    std::vector<Pending>& pending, const Backend& backend, int jobs, bool always_show_progress,
    bool require_writable,
    const std::function<bool(Pending&, const std::filesystem::path&, KernelOrigin)>& use_cached,
    const std::function<void(Pending&)>& use_compiled, CacheCounters& delta);

}  // namespace metajit
