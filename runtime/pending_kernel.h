// One kernel the kernel library has to find or build (runtime/kernel_library.h), as it travels
// through the tiers: disk (disk_tier.h), remote (remote_tier.h), compile (compile_tier.h).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "cache/cache_store.h"
#include "codegen/kernel_ir.h"
#include "runtime/kernel_backend.h"
#include "runtime/miss_cause.h"

namespace metajit {

struct Pending {
  std::string key;
  std::string ir_text;      // serialize_ir(*ir)
  std::string remote_key;   // set when a remote cache is in use
  std::string lease_token;  // the fleet-wide lease on compiling it, when this process holds it
  std::string ir_digest;    // the kernel-IR index's name for it (miss_cause.h)
  const KernelIR* ir = nullptr;
  std::vector<size_t> positions;  // where in the request this kernel is needed
  CacheStore* store = nullptr;
  std::filesystem::path staging;
  std::vector<std::string> command;
  CacheKeyLock lock;             // held from the re-check after a miss until the entry is installed
  std::filesystem::path source;  // the staged source file
  std::filesystem::path object;  // the installed (or staged) kernel.so once built
  double compile_seconds = 0;
  MissExplanation why;  // a miss: why it compiles
};

// One Pending per distinct key among `irs[i]` for i in `which` (texts[i] = serialize_ir), in key
// order: locks are taken in key order, so processes needing overlapping sets never deadlock.
std::vector<Pending> group_by_key(const std::vector<const KernelIR*>& irs,
                                  const std::vector<std::string>& texts,
                                  const std::vector<size_t>& which, const Backend& backend);

}  // namespace metajit
