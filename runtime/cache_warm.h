// The command line's `metajit cache warm` and `metajit cache push` (cli/cache_commands.cc):
// the kernels of a manifest made sure of in the cache, and local entries uploaded to the
// remote cache; beside the kernel library (runtime/kernel_library.h), whose tiers they use.
#pragma once
#include <metajit/device.h>

#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace metajit {

struct WarmSummary {
  size_t total = 0, cached = 0, compiled = 0, failed = 0;  // distinct kernels
  size_t fetched = 0;                  // of `cached`: installed from the remote cache
  size_t pushed = 0, push_failed = 0;  // with `push`: uploaded to the remote cache
  double seconds = 0;
  std::vector<std::string> failed_keys;
  std::string first_failure;  // the first CompileError's message
};
// `metajit cache warm`: makes sure every kernel of `irs` is in the cache, fetching the missing
// ones from the remote cache when one is configured and compiling the rest (at most `jobs` at a
// time) with a progress line on stderr. Loads nothing. Compile failures are counted, not
// thrown; an unusable cache is a CacheError. With `push` (`cache warm --push`) every kernel of
// `irs` is then uploaded to the remote cache (CacheError when remote writes are off).
WarmSummary warm_kernels(const std::vector<KernelIR>& irs, int jobs, Device device = Device::CPU,
                         bool push = false);

struct PushResult {
  std::string key;
  bool pushed = false;
  std::string why;  // not pushed: why
};
// `metajit cache push`: uploads the local entries `keys` to the remote cache under their remote
// keys. An entry built by another toolchain than this machine's current one is skipped (its
// remote key could not be told). CacheError when remote writes are off.
std::vector<PushResult> push_kernels(const std::vector<std::string>& keys);

}  // namespace metajit
