#include "runtime/kernel_library.h"

#include <metajit/error.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "base/checksum.h"
#include "base/config.h"
#include "base/log.h"
#include "cache/cache_store.h"
#include "codegen/kernel_key.h"
#include "runtime/find_or_compile.h"
#include "runtime/kernel_backend.h"
#include "runtime/kernel_recorder.h"
#include "runtime/loader.h"
#include "runtime/pending_kernel.h"
#include "runtime/remote_tier.h"
#include "runtime/runtime_stats.h"

namespace metajit {
namespace {

namespace fs = std::filesystem;

struct MemoryTable {
  std::mutex mu;
  std::unordered_map<std::string, KernelHandle> by_ir;  // canonical IR text -> kernel
};
MemoryTable& table() {
  static MemoryTable* t = new MemoryTable;  // never destroyed: kernels may run during exit
  return *t;
}

// Memory hits are counted in the persistent statistics too, but writing stats.json on every
// evaluation would cost more than the evaluation: they are added with the next batch of disk
// work, or at exit.
std::atomic<uint64_t> unflushed_memory_hits{0};

void flush_memory_hits() {
  uint64_t n = unflushed_memory_hits.exchange(0);
  CacheCounters delta;
  take_remote_counts(delta);
  if (!n && !delta.remote_uploads && !delta.remote_errors) return;
  delta.memory_hits = n;
  try {
    CacheStore(config().cache_dir).add_counters(delta);
  } catch (...) {
    // At exit nothing may throw; statistics are not worth failing for.
  }
}

void flush_memory_hits_at_exit() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(flush_memory_hits); });
}

}  // namespace

std::string key_of(const KernelIR& ir, Device device) {
  const Backend b = backend_for(device);
  return kernel_key(b.name, serialize_ir(ir), b.identity);
}

void count_memory_hits(uint64_t n) {
  runtime_counters().memory_hits += n;
  unflushed_memory_hits += n;
  flush_memory_hits_at_exit();
}

std::string kernel_source(const KernelIR& ir, Device device) {
  return backend_for(device).emit(ir);
}

KernelScheduleLine kernel_schedule(const KernelIR& ir, Device device) {
  const Backend b = backend_for(device);
  return {b.target, b.schedule(ir)};
}

std::vector<KernelHandle> obtain_kernels(const std::vector<const KernelIR*>& irs, Device device) {
  RuntimeCounters& counters = runtime_counters();
  std::vector<KernelHandle> out(irs.size());
  std::vector<std::string> texts(irs.size());
  std::vector<size_t> misses;
  // The compiler settings are part of the memory key: reload_config() may change them.
  const std::string settings = memory_settings(device);
  {
    MemoryTable& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    for (size_t i = 0; i < irs.size(); ++i) {
      texts[i] = serialize_ir(*irs[i]);
      if (auto it = t.by_ir.find(settings + texts[i]); it != t.by_ir.end()) {
        out[i] = it->second;
        counters.memory_hits++;
        unflushed_memory_hits++;
        if (log_enabled(LogLevel::Debug)) log_message(LogLevel::Debug, "memory hit " + out[i].key);
      } else {
        misses.push_back(i);
      }
    }
  }
  if (misses.empty()) return out;
  flush_memory_hits_at_exit();

  const Backend backend = backend_for(device);
  std::vector<Pending> pending = group_by_key(irs, texts, misses, backend);
  CacheCounters delta;
  delta.memory_hits = unflushed_memory_hits.exchange(0);
  auto load_cached = [&](Pending& p, const fs::path& so, KernelOrigin origin) {
    try {
      KernelHandle h{load_kernel(so), p.key, origin};
      for (size_t i : p.positions) out[i] = h;
      if (origin == KernelOrigin::Disk) {
        counters.disk_hits++;
        delta.disk_hits++;
        log_message(LogLevel::Debug, "disk hit " + p.key);
      }
      record_kernel_use(p.key, *p.ir, device_name(device));
      return true;
    } catch (const Error& e) {
      // Verified a moment ago but gone now (evicted or cleared by another process), or not
      // loadable here: build it again rather than fail.
      log_message(LogLevel::Debug, "cannot load " + p.key + " (" + e.what() + "); rebuilding");
      return false;
    }
  };
  auto load_compiled = [&](Pending& p) {
    if (p.object.empty()) return;
    KernelHandle h{load_kernel(p.object), p.key, KernelOrigin::Compiled, p.compile_seconds};
    for (size_t i : p.positions) out[i] = h;
    record_kernel_use(p.key, *p.ir, device_name(device));
  };
  std::optional<CompileError> failure =
      find_or_compile(pending, backend, config().jobs, /*always_show_progress=*/false,
                      /*require_writable=*/false, load_cached, load_compiled, delta);
  if (failure) throw *failure;

  MemoryTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (size_t i : misses) t.by_ir.emplace(settings + texts[i], out[i]);
  return out;
}

std::filesystem::path cache_dir() {
  return config().cache_dir;
}

std::filesystem::path cache_entry_dir(const std::string& key) {
  if (key.size() != 32 || !is_key_hex(key))
    throw Error("cache_entry_dir: \"" + key.substr(0, 64) +
                "\" is not a kernel key; expected the 32 lowercase hex digits of KernelInfo::key");
  return CacheStore(config().cache_dir).entry_dir(key);
}

}  // namespace metajit
