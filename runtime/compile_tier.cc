#include "runtime/compile_tier.h"

#include <algorithm>
#include <fstream>

#include "base/config.h"
#include "base/log.h"
#include "runtime/compiler_driver.h"
#include "runtime/disk_tier.h"
#include "runtime/runtime_stats.h"

namespace metajit {
namespace {

namespace fs = std::filesystem;

CompileError compile_failure(const Pending& p, const CompileOutcome& r) {
  std::string why = r.failed_to_start ? "could not be started"
                    : r.timed_out     ? "timed out after " +
                                        std::to_string(int(config().compile_timeout_seconds)) +
                                        " s and was killed"
                                  : "failed with exit status " + std::to_string(r.exit_code);
  std::string out_text = r.output.size() > 4000 ? r.output.substr(0, 4000) + "\n[...]" : r.output;
  return CompileError("compiling kernel " + p.key + ": the compiler " + why +
                          "\n  command: " + r.command + "\n  source kept at: " + p.source.string() +
                          (out_text.empty() ? "" : "\n" + out_text),
                      r.command, r.output, p.source.string());
}

// What is wrong with a compiler's output that cannot be a shared object (missing, empty, not
// ELF), or nullopt: such output is the compiler's failure, a CompileError, not a loader Error
// later (issue 26: a compiler writing an empty kernel.so gave a plain Error).
std::optional<std::string> unloadable_output(const fs::path& so) {
  std::error_code ec;
  if (!fs::is_regular_file(so, ec)) return "wrote no " + so.filename().string();
  const uintmax_t size = fs::file_size(so, ec);
  if (ec || size == 0) return "wrote an empty " + so.filename().string();
  char magic[4] = {};
  std::ifstream in(so, std::ios::binary);
  in.read(magic, sizeof magic);
  if (!in || magic[0] != 0x7f || magic[1] != 'E' || magic[2] != 'L' || magic[3] != 'F')
    return "wrote " + so.filename().string() + " (" + std::to_string(size) +
           " bytes), which is not an ELF shared object";
  return std::nullopt;
}

}  // namespace

// One info line per cause of the misses of one batch (an evaluation, a warm): after a compiler
// upgrade "27 kernels compiled again: the compiler changed (...)", not 27 lines. New kernels
// say nothing here (the debug log has each miss).
void log_miss_causes(const std::vector<Pending*>& missed) {
  if (!log_enabled(LogLevel::Info)) return;
  std::vector<std::pair<std::string, uint64_t>> counts;  // by reason, first seen first
  for (const Pending* p : missed) {
    if (p->why.cause == MissCause::New) continue;
    auto it = std::find_if(counts.begin(), counts.end(),
                           [p](const auto& c) { return c.first == p->why.reason; });
    if (it == counts.end())
      counts.emplace_back(p->why.reason, 1);
    else
      it->second++;
  }
  for (const auto& [reason, n] : counts) log_message(LogLevel::Info, recompile_summary(n, reason));
}

// Compiles every staged kernel of `todo` in parallel and installs the good ones; sets each
// one's `object` (empty where its compile failed). Returns the first failure, if any. Failed
// kernels keep their staging directory (with the source) for inspection.
std::optional<CompileError> compile_and_install(std::vector<Pending*>& todo,
                                                const CacheStore& main_store,
                                                const Backend& backend, int jobs,
                                                bool always_show_progress, CacheCounters& delta) {
  std::vector<std::vector<std::string>> commands;
  for (Pending* p : todo) commands.push_back(p->command);
  std::vector<CompileOutcome> results =
      run_compilers(commands, jobs, config().compile_timeout_seconds, always_show_progress);
  std::optional<CompileError> failure;
  RuntimeCounters& counters = runtime_counters();
  for (size_t k = 0; k < todo.size(); ++k) {
    Pending& p = *todo[k];
    const CompileOutcome& r = results[k];
    if (!r.ok) {
      delta.errors++;
      if (!failure) failure = compile_failure(p, r);
      p.lock.release();
      continue;
    }
    if (std::optional<std::string> bad = unloadable_output(p.staging / "kernel.so")) {
      delta.errors++;
      if (!failure)
        failure = CompileError("compiling kernel " + p.key + ": the compiler exited 0 but " + *bad +
                                   "\n  command: " + r.command +
                                   "\n  source kept at: " + p.source.string(),
                               r.command, r.output, p.source.string());
      p.lock.release();
      continue;
    }
    nlohmann::json meta = entry_meta(p, backend);
    meta["compile_command"] = p.command;
    meta["compile_seconds"] = r.seconds;
    uint64_t bytes = 0;
    bool installed = false;
    try {
      p.object = p.store->install(p.key, p.staging, std::move(meta), &bytes);
      installed = true;
    } catch (const CacheError& e) {
      // A cache that fails at the last step must not stop the program: run the staged copy.
      warn_once("cache-unwritable:" + p.store->root().string(),
                std::string(e.what()) + "; running kernels from their staging directory");
      p.object = p.staging / "kernel.so";
    }
    p.lock.release();  // installed: waiters find the entry
    if (installed && p.store == &main_store) record_parts(*p.store, p, backend);
    p.compile_seconds = r.seconds;
    counters.kernels_compiled++;
    counters.compile_micros += uint64_t(r.seconds * 1e6);
    delta.compiles++;
    delta.compile_seconds += r.seconds;
    if (p.store == &main_store) delta.bytes += int64_t(bytes);  // `delta` is main_store's
    log_message(LogLevel::Info, "compiled " + p.key + " in " + std::to_string(r.seconds) + " s");
  }
  return failure;
}

}  // namespace metajit
