#include "runtime/cache_warm.h"

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "cache/cache_store.h"
#include "codegen/kernel_key.h"
#include "codegen/kernel_spec.h"
#include "runtime/find_or_compile.h"
#include "runtime/remote_tier.h"

namespace metajit {

namespace fs = std::filesystem;

WarmSummary warm_kernels(const std::vector<KernelIR>& irs, int jobs, Device device, bool push) {
  const auto start = std::chrono::steady_clock::now();
  WarmSummary summary;
  std::vector<const KernelIR*> ptrs;
  std::vector<std::string> texts;
  std::vector<size_t> all;
  for (const KernelIR& ir : irs) {
    all.push_back(ptrs.size());
    ptrs.push_back(&ir);
    texts.push_back(serialize_ir(ir));
  }
  const Backend backend = backend_for(device);
  std::vector<Pending> pending = group_by_key(ptrs, texts, all, backend);
  summary.total = pending.size();

  CacheCounters delta;
  auto count_cached = [&](Pending&, const fs::path&, KernelOrigin origin) {
    summary.cached++;
    if (origin == KernelOrigin::Remote) summary.fetched++;
    return true;
  };
  auto count_compiled = [&](Pending& p) {
    if (!p.object.empty()) {
      summary.compiled++;
    } else {
      summary.failed++;
      summary.failed_keys.push_back(p.key);
    }
  };
  // Warming a cache that cannot keep what it compiles would be pointless: require_writable.
  std::optional<CompileError> failure =
      find_or_compile(pending, backend, jobs, /*always_show_progress=*/true,
                      /*require_writable=*/true, count_cached, count_compiled, delta);
  if (failure) summary.first_failure = failure->what();
  if (push) {
    RemoteStore* remote = usable_remote();
    if (!remote || !remote->writable())
      throw CacheError(
          "cache warm --push: remote writes are off (set METAJIT_REMOTE, "
          "METAJIT_REMOTE_MODE=readwrite and METAJIT_REMOTE_SIGNING_KEY)");
    const std::string portable = portable_of(backend);
    if (portable.empty()) throw CacheError("cache warm --push: cannot identify the toolchain");
    CacheStore store(config().cache_dir);
    for (Pending& p : pending) {
      std::optional<fs::path> so = store.find(p.key);
      if (!so) continue;  // its compile failed
      p.remote_key = remote_key_of(backend, p.ir_text, portable);
      std::string why;
      if (remote->upload_now(upload_job(p, *so, backend, portable), why))
        summary.pushed++;
      else
        summary.push_failed++;
    }
    CacheCounters pushed;
    take_remote_counts(pushed);
    store.add_counters(pushed);
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

std::vector<PushResult> push_kernels(const std::vector<std::string>& keys) {
  RemoteStore* remote = usable_remote();
  if (!remote || !remote->writable())
    throw CacheError(
        "cache push: remote writes are off (set METAJIT_REMOTE, "
        "METAJIT_REMOTE_MODE=readwrite and METAJIT_REMOTE_SIGNING_KEY)");
  CacheStore store(config().cache_dir);
  std::vector<PushResult> results;
  std::map<std::string, std::string> portable_by_backend;
  for (const std::string& key : keys) {
    PushResult r{key, false, ""};
    try {
      nlohmann::json meta = store.read_meta(key);
      const std::string name = meta.value("backend", "");
      Device device = name == "cpu" ? Device::CPU : Device::CUDA;
      if (name != "cpu" && name != "cuda" && name != "cuda-emu")
        throw CacheError("unknown backend '" + name + "'");
      if (!meta.contains("spec")) throw CacheError("meta.json has no kernel spec");
      KernelIR ir = kernel_spec_from_json(meta["spec"]);
      const Backend backend = backend_for(device);
      Pending p;
      p.ir = &ir;
      p.ir_text = serialize_ir(ir);
      if (backend.name != name || kernel_key(backend.name, p.ir_text, backend.identity) != key)
        throw CacheError("built by another toolchain than this machine's current one");
      auto it = portable_by_backend.find(name);
      if (it == portable_by_backend.end())
        it = portable_by_backend.emplace(name, portable_of(backend)).first;
      if (it->second.empty()) throw CacheError("cannot identify the toolchain");
      std::optional<fs::path> so = store.find(key);
      if (!so) throw CacheError("not in the cache (or failed its checks)");
      p.key = key;
      p.remote_key = remote_key_of(backend, p.ir_text, it->second);
      if (meta.contains("compile_seconds") && meta["compile_seconds"].is_number())
        p.compile_seconds = meta["compile_seconds"].get<double>();
      r.pushed = remote->upload_now(upload_job(p, *so, backend, it->second), r.why);
    } catch (const Error& e) {
      r.why = e.what();
    }
    results.push_back(std::move(r));
  }
  CacheCounters pushed;
  take_remote_counts(pushed);
  try {
    store.add_counters(pushed);
  } catch (const CacheError&) {
  }
  return results;
}

}  // namespace metajit
