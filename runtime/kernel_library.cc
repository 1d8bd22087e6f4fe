#include "runtime/kernel_library.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "cache/cache_store.h"
#include "codegen/cpp_emitter.h"
#include "codegen/kernel_key.h"
#include "meta_ops/error.h"
#include "runtime/compiler_driver.h"
#include "runtime/config.h"
#include "runtime/loader.h"
#include "runtime/log.h"
#include "runtime/runtime_stats.h"
#include "runtime/toolchain.h"

namespace metajit {
namespace {

struct MemoryTable {
  std::mutex mu;
  std::unordered_map<std::string, KernelHandle> by_ir;  // canonical IR text -> kernel
};
MemoryTable& table() {
  static MemoryTable* t = new MemoryTable;  // never destroyed: kernels may run during exit
  return *t;
}

// A private cache used when the configured one cannot be written (read-only, full, foreign):
// the program keeps running, kernels are compiled into a temporary directory.
CacheStore& fallback_store() {
  static CacheStore* store = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "metajit-private-XXXXXX").string();
    char* dir = mkdtemp(tmpl.data());
    if (!dir) throw CacheError("cannot create a private temporary kernel cache under " + tmpl);
    static std::filesystem::path root = dir;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(root, ec);
    });
    return new CacheStore(root);
  }();
  return *store;
}

struct Pending {
  std::string key;
  const KernelIR* ir;
  std::vector<size_t> positions;  // where in the request this kernel is needed
  CacheStore* store = nullptr;
  std::filesystem::path staging;
  std::vector<std::string> command;
  CacheKeyLock lock;  // held from the re-check after a miss until the entry is installed
};

std::string write_source(const std::filesystem::path& dir, const KernelIR& ir) {
  std::string src = emit_cpp(ir);
  std::filesystem::path path = dir / "kernel.cc";
  std::ofstream f(path, std::ios::binary);
  f << src;
  f.close();
  if (!f) throw CacheError("cannot write " + path.string());
  return src;
}

}  // namespace

std::string key_of(const KernelIR& ir) {
  return kernel_key("cpu", serialize_ir(ir), host_toolchain().identity());
}

std::vector<KernelHandle> obtain_kernels(const std::vector<const KernelIR*>& irs) {
  RuntimeCounters& counters = runtime_counters();
  std::vector<KernelHandle> out(irs.size());
  std::vector<std::string> texts(irs.size());
  std::vector<size_t> misses;
  // The compiler settings are part of the memory key: reload_config() may change them.
  std::string settings = config().cxx;
  for (const std::string& f : config().extra_cxxflags) settings += " " + f;
  settings += "\n";
  {
    MemoryTable& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    for (size_t i = 0; i < irs.size(); ++i) {
      texts[i] = serialize_ir(*irs[i]);
      if (auto it = t.by_ir.find(settings + texts[i]); it != t.by_ir.end()) {
        out[i] = it->second;
        counters.memory_hits++;
        if (log_enabled(LogLevel::Debug)) log_message(LogLevel::Debug, "memory hit " + out[i].key);
      } else {
        misses.push_back(i);
      }
    }
  }
  if (misses.empty()) return out;

  const Toolchain& tc = host_toolchain();
  const std::string identity = tc.identity();
  std::vector<Pending> pending;
  std::unordered_map<std::string, size_t> by_key;
  for (size_t i : misses) {
    std::string key = kernel_key("cpu", texts[i], identity);
    auto [it, fresh] = by_key.emplace(key, pending.size());
    if (fresh) {
      Pending fresh_pending;
      fresh_pending.key = key;
      fresh_pending.ir = irs[i];
      pending.push_back(std::move(fresh_pending));
    }
    pending[it->second].positions.push_back(i);
  }

  CacheStore store(config().cache_dir);
  CacheCounters delta;
  std::vector<Pending*> to_compile;
  // Locks are taken in key order, so processes needing overlapping sets never deadlock.
  std::sort(pending.begin(), pending.end(),
            [](const Pending& a, const Pending& b) { return a.key < b.key; });
  for (Pending& p : pending) {
    std::optional<std::filesystem::path> so = store.find(p.key);
    if (!so) {
      // Another process may be compiling this kernel: wait for it, then look again, so N
      // processes needing one kernel compile it once.
      try {
        p.lock = store.lock_key(p.key);
      } catch (const CacheError&) {
        // An unusable cache cannot be shared anyway; the compile below falls back.
      }
      so = store.find(p.key);
    }
    if (so) {
      p.lock = CacheKeyLock();
      KernelHandle h{load_kernel(*so), p.key};
      for (size_t i : p.positions) out[i] = h;
      counters.disk_hits++;
      delta.disk_hits++;
      log_message(LogLevel::Debug, "disk hit " + p.key);
      continue;
    }
    delta.misses++;
    log_message(LogLevel::Debug, "miss " + p.key + " (" + std::to_string(p.ir->ops.size()) +
                                     " ops: " + (p.ir->ops.empty() ? "" : p.ir->ops.front()) +
                                     (p.ir->ops.size() > 1 ? ", ..." : "") + ")");
    p.store = &store;
    try {
      p.staging = store.make_staging_dir();
    } catch (const CacheError& e) {
      warn_once(
          "cache-unwritable",
          std::string(e.what()) + "; kernels go to a private temporary cache for this process");
      p.store = &fallback_store();
      p.staging = p.store->make_staging_dir();
    }
    std::string src = write_source(p.staging, *p.ir);
    if (log_enabled(LogLevel::Debug))
      log_message(LogLevel::Debug, "source of " + p.key + ":\n" + src);
    p.command = tc.compile_command(p.staging / "kernel.cc", p.staging / "kernel.so");
    to_compile.push_back(&p);
  }

  if (!to_compile.empty()) {
    std::vector<std::vector<std::string>> commands;
    for (Pending* p : to_compile) commands.push_back(p->command);
    std::vector<CompileOutcome> results =
        run_compilers(commands, config().jobs, config().compile_timeout_seconds);
    std::optional<CompileError> failure;
    for (size_t k = 0; k < to_compile.size(); ++k) {
      Pending& p = *to_compile[k];
      const CompileOutcome& r = results[k];
      if (!r.ok) {
        delta.errors++;
        if (!failure) {
          std::string why = r.failed_to_start ? "could not be started"
                            : r.timed_out
                                ? "timed out after " +
                                      std::to_string(int(config().compile_timeout_seconds)) +
                                      " s and was killed"
                                : "failed with exit status " + std::to_string(r.exit_code);
          std::string out_text =
              r.output.size() > 4000 ? r.output.substr(0, 4000) + "\n[...]" : r.output;
          failure.emplace("compiling kernel " + p.key + ": the compiler " + why +
                              "\n  command: " + r.command +
                              "\n  source kept at: " + (p.staging / "kernel.cc").string() +
                              (out_text.empty() ? "" : "\n" + out_text),
                          r.command, r.output, (p.staging / "kernel.cc").string());
        }
        continue;  // the staging directory (with the source) is kept for inspection
      }
      nlohmann::json meta = {{"backend", "cpu"},
                             {"ops", p.ir->ops},
                             {"spec", ir_to_json(*p.ir)},
                             {"compile_command", p.command},
                             {"compiler", tc.path.string()},
                             {"compiler_version", tc.version_line()},
                             {"target", tc.resolved_target},
                             {"flags", tc.flags},
                             {"compile_seconds", r.seconds}};
      std::filesystem::path so;
      try {
        so = p.store->install(p.key, p.staging, std::move(meta));
      } catch (const CacheError& e) {
        // A full or read-only cache must not stop the program: run the staged copy.
        warn_once("cache-install",
                  std::string(e.what()) + "; running kernels from their staging directory");
        so = p.staging / "kernel.so";
      }
      KernelHandle h{load_kernel(so), p.key};
      for (size_t i : p.positions) out[i] = h;
      counters.kernels_compiled++;
      counters.compile_micros += uint64_t(r.seconds * 1e6);
      delta.compiles++;
      delta.compile_seconds += r.seconds;
      log_message(LogLevel::Info, "compiled " + p.key + " in " + std::to_string(r.seconds) + " s");
    }
    store.add_counters(delta);
    if (failure) throw *failure;
  } else {
    store.add_counters(delta);
  }

  MemoryTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (size_t i : misses) t.by_ir.emplace(settings + texts[i], out[i]);
  return out;
}

}  // namespace metajit
